// Package stripe owns the Stripe adapter: card payments as PaymentIntents,
// through the official stripe-go SDK with its retries turned off, so that
// every outcome reaches the gateway once and classified.
//
// How the gateway's request maps onto Stripe:
//   - Charge creates and confirms a PaymentIntent in one call: POST
//     /v1/payment_intents with amount (in Stripe's units for the currency:
//     see currencies.go), currency (lower case), payment_method (the
//     gateway's payment_method: a PaymentMethod id such as pm_…),
//     confirm=true, automatic_payment_methods without redirects,
//     metadata[merchant_order_id], metadata[gateway_merchant_id] (the
//     gateway's merchant, which the ledger reads back), and Idempotency-Key
//     "gw-charge-<merchant order id>". Stripe replays the first answer to a
//     repeat of that key for 24 hours (DedupeWindow): that is what
//     deduplicates the order id. One-step checkout also sends
//     error_on_requires_action=true: a card that needs 3-D Secure is then a
//     decline (authentication_required). A request with AllowNextAction
//     (two-step checkout, a customer at a browser) leaves it out, and such a
//     card answers Pending with the NextAction Stripe.js needs
//     ("use_stripe_sdk" and the client secret, or a redirect).
//   - Lookup searches PaymentIntents by metadata['merchant_order_id']. Search
//     is eventually consistent (a new PaymentIntent can take about a minute
//     to show), so not found is not authoritative: the gateway relies on the
//     idempotency key to charge again safely. A search result for another
//     order id is Unknown (psp.ErrMismatch), never skipped.
//   - A charge with CaptureManual also sends capture_method=manual and
//     expand[]=latest_charge: Stripe authorizes the card (requires_capture
//     → Authorized) and the expanded charge's
//     payment_method_details.card.capture_before says until when (lookups
//     expand it too). Capture is POST /v1/payment_intents/{id}/capture with
//     amount_to_capture (in Stripe's units), metadata[capture_order_id] and
//     Idempotency-Key "gw-capture-<capture order id>"; Void is POST
//     /v1/payment_intents/{id}/cancel with the gateway's reason where
//     Stripe has one (duplicate, fraudulent, requested_by_customer,
//     abandoned; authorization_expired is abandoned) and Idempotency-Key
//     "gw-void-<void order id>". Stripe captures a PaymentIntent once and
//     releases the rest; it refuses to capture or cancel one that cannot be
//     (payment_intent_unexpected_state), and the adapter then answers with
//     the PaymentIntent as it stands, retrieved. A succeeded PaymentIntent's
//     amount_received is AmountCaptured; a manual one canceled without a
//     decline (voided, or its authorization expired) is Voided.
//   - Refund first lists the PaymentIntent's refunds for one whose
//     metadata[refund_order_id] is the refund order id, and returns it if
//     found: a refund retried after Stripe forgot its idempotency key (24
//     hours) must not refund twice. Otherwise it creates a Refund of the
//     PaymentIntent (Charge.Reference) with metadata[refund_order_id] and
//     Idempotency-Key "gw-refund-<refund order id>". LookupRefund lists the
//     PaymentIntent's refunds (a list, not a search: consistent).
//   - The adapter is a psp.Ledger: it lists the period's PaymentIntents and
//     Refunds (GET /v1/payment_intents and /v1/refunds by created), see
//     ListTransactions.
//
// Outcomes (https://docs.stripe.com/error-codes, /error-handling,
// /declines/codes, /payments/place-a-hold-on-a-payment-method): a
// PaymentIntent that succeeded → Succeeded; requires_capture → Authorized
// (Unknown, psp.ErrMismatch, for a charge asked to take the money at once);
// processing or requires_action → Pending; 402 card_error, or a PaymentIntent back in
// requires_payment_method with a last_payment_error → Declined, Code the
// decline_code (or the error code when there is none) and DeclineCode the
// same, or card_declined for generic_decline, once the PaymentIntent is
// canceled at Stripe (see settled); canceled → Declined, or Voided for a
// manual-capture one canceled without a decline; 400
// idempotency_error → NotProcessed wrapping psp.ErrOrderConflict; other
// invalid_request_error answers (amount_too_small, a currency Stripe does
// not take, invalid parameters) → Rejected with Stripe's code; 401 and 403
// (keys, permissions), 429 and the codes in errorCodes that Stripe documents
// as transient → NotProcessed; 409, 5xx, unreadable answers, answers that do
// not match the request, timeouts and resets → Unknown; connections that
// could not be opened → NotProcessed.
package stripe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	sdk "github.com/stripe/stripe-go/v82"

	"gateway/psp"
)

// DefaultBaseURL is Stripe's API.
const DefaultBaseURL = "https://api.stripe.com"

// Config configures the adapter.
type Config struct {
	// SecretKey is the account's secret (sk_…) or restricted (rk_…) key. Secret.
	SecretKey string
	// BaseURL is DefaultBaseURL when empty; tests point it at a fake.
	BaseURL string
	// HTTPClient sends the requests; a client with an 80s backstop timeout
	// (stripe-go's own) when nil. Deadlines come from the context.
	HTTPClient *http.Client
	// CreationWindow is how long after a charge was sent it may still show up
	// in search; 2 minutes when zero.
	CreationWindow time.Duration
	// Account is the label the adapter advertises in its Capabilities (the
	// Stripe account id, say); empty by default.
	Account string
	// PublishableKey (pk_test_…, pk_live_…) is what front ends start
	// Stripe.js with: public, handed out in two-step checkouts. Empty when
	// front ends have it already.
	PublishableKey string
	// WebhookSecret (whsec_…) verifies the Stripe-Signature of webhook
	// requests. Secret. Empty: the adapter reads no webhooks.
	WebhookSecret string
	// Now is the clock a webhook's signed timestamp is judged by; time.Now
	// when nil.
	Now func() time.Time
}

// LogValue masks the secret key, keeping its sk_test_/sk_live_ prefix.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("base_url", c.baseURL()),
		slog.String("secret_key", mask(c.SecretKey)),
		slog.Duration("creation_window", c.CreationWindow),
		slog.String("account", c.Account),
		slog.String("publishable_key", c.PublishableKey),
		slog.String("webhook_secret", maskWebhookSecret(c.WebhookSecret)),
	)
}

func (c Config) baseURL() string {
	if c.BaseURL == "" {
		return DefaultBaseURL
	}
	return strings.TrimRight(c.BaseURL, "/")
}

func mask(secret string) string {
	for _, p := range []string{"sk_test_", "sk_live_", "rk_test_", "rk_live_"} {
		if strings.HasPrefix(secret, p) {
			return p + "****"
		}
	}
	if secret == "" {
		return ""
	}
	return "****"
}

// Adapter is a psp.Adapter for Stripe.
type Adapter struct {
	sc         *sdk.Client
	window     time.Duration
	account    string
	currencies []psp.Currency
	publicKey  string
	whSecret   string
	now        func() time.Time
}

var (
	_ psp.Adapter  = (*Adapter)(nil)
	_ psp.Capturer = (*Adapter)(nil)
	_ psp.Ledger   = (*Adapter)(nil)
)

const (
	// maxOrderIDLen keeps "gw-charge-" + the order id within Stripe's
	// 255-character idempotency keys.
	maxOrderIDLen = 200
	// dedupeWindow is how long Stripe keeps an idempotency key.
	dedupeWindow = 24 * time.Hour
	// authorizationValidity is how long Stripe holds an online card
	// payment's authorization (Visa, Mastercard, American Express and
	// Discover, customer-initiated), for an answer whose capture_before
	// was not read.
	authorizationValidity = 7 * 24 * time.Hour
	// maxMetadataValue is Stripe's limit on a metadata value.
	maxMetadataValue = 500
	// metadata keys the adapter writes and searches.
	metaOrderID   = "merchant_order_id"
	metaRefundID  = "refund_order_id"
	metaCaptureID = "capture_order_id"
	// metaMerchantID is the gateway's merchant a PaymentIntent was
	// created for.
	metaMerchantID = "gateway_merchant_id"
	// expandCharge makes Stripe answer with the PaymentIntent's latest
	// charge as an object: its capture_before is an authorization's
	// deadline.
	expandCharge = "latest_charge"
)

// orderIDPattern keeps ids safe to quote in a search query.
var orderIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,200}$`)

// New returns an adapter, refusing a config it could not work with.
func New(cfg Config) (*Adapter, error) {
	if cfg.SecretKey == "" {
		return nil, errors.New("stripe: SecretKey is required")
	}
	u, err := url.Parse(cfg.baseURL())
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("stripe: base URL %q must be http(s)://host", cfg.BaseURL)
	}
	backend := sdk.GetBackendWithConfig(sdk.APIBackend, &sdk.BackendConfig{
		URL:        sdk.String(cfg.baseURL()),
		HTTPClient: cfg.HTTPClient,
		// The gateway retries with the same key after a classified failure;
		// the SDK's own retries would sleep past the caller's deadline.
		MaxNetworkRetries: sdk.Int64(0),
		EnableTelemetry:   sdk.Bool(false),
		LeveledLogger:     &sdk.LeveledLogger{Level: sdk.LevelNull},
	})
	a := &Adapter{
		sc:         sdk.NewClient(cfg.SecretKey, sdk.WithBackends(&sdk.Backends{API: backend, Connect: backend, Uploads: backend})),
		window:     cfg.CreationWindow,
		account:    cfg.Account,
		currencies: currencies(),
		publicKey:  cfg.PublishableKey,
		whSecret:   cfg.WebhookSecret,
		now:        cfg.Now,
	}
	if a.now == nil {
		a.now = time.Now
	}
	if a.window <= 0 {
		a.window = 2 * time.Minute
	}
	return a, nil
}

// Capabilities implements psp.Adapter. Currencies is shared: callers must
// not modify it.
func (a *Adapter) Capabilities() psp.Capabilities {
	return psp.Capabilities{
		Name:                  "stripe",
		AuthoritativeLookup:   false,
		CreationWindow:        a.window,
		DedupesOrderID:        true,
		DedupeWindow:          dedupeWindow,
		MaxOrderIDLen:         maxOrderIDLen,
		Account:               a.account,
		Currencies:            a.currencies,
		Checkout:              psp.Checkout{Client: psp.ClientStripeJS, PublishableKey: a.publicKey, ResultField: psp.ResultPaymentMethod},
		ManualCapture:         true,
		AuthorizationValidity: authorizationValidity,
	}
}

// toStripe converts an ISO amount to Stripe's units; Check has vouched for it.
func (a *Adapter) toStripe(amount int64, currency string) (int64, error) {
	cur, ok := a.Capabilities().Currency(currency)
	if !ok {
		return 0, fmt.Errorf("stripe does not take %s", currency)
	}
	return cur.ToPSP(amount)
}

// fromStripe converts an amount Stripe wrote (currency in lower case) to ISO
// minor units; an answer the gateway cannot record exactly is Unknown.
func (a *Adapter) fromStripe(op string, amount int64, currency sdk.Currency) (int64, string, error) {
	code := strings.ToUpper(string(currency))
	cur, ok := a.Capabilities().Currency(code)
	if !ok {
		return 0, "", &psp.Error{Class: psp.Unknown, Op: op, Err: fmt.Errorf("%w: stripe answered in %q", psp.ErrMismatch, currency)}
	}
	v, err := cur.FromPSP(amount)
	if err != nil {
		return 0, "", &psp.Error{Class: psp.Unknown, Op: op, Err: fmt.Errorf("%w: %w", psp.ErrMismatch, err)}
	}
	return v, code, nil
}

// Charge implements psp.Adapter.
func (a *Adapter) Charge(ctx context.Context, req psp.ChargeRequest) (psp.Charge, error) {
	// Go's client may send it again by itself on a new connection (an
	// Idempotency-Key makes it replayable): a later dial error proves
	// nothing once a request was written.
	ctx, sent := psp.Tracing(ctx)
	x, err := a.charge(ctx, req)
	return x, sent.Judge(err)
}

func (a *Adapter) charge(ctx context.Context, req psp.ChargeRequest) (psp.Charge, error) {
	const op = "charge"
	if !orderIDPattern.MatchString(req.MerchantOrderID) {
		return psp.Charge{}, &psp.Error{Class: psp.Rejected, Op: op,
			Err: fmt.Errorf("order id %q is not 1–%d characters of [A-Za-z0-9_-]", req.MerchantOrderID, maxOrderIDLen)}
	}
	if err := a.Capabilities().Check(req.Amount, req.Currency); err != nil {
		return psp.Charge{}, &psp.Error{Class: psp.Rejected, Op: op, Err: err}
	}
	manual := false
	switch req.CaptureMethod {
	case "", psp.CaptureAutomatic:
	case psp.CaptureManual:
		manual = true
	default:
		return psp.Charge{}, &psp.Error{Class: psp.Rejected, Op: op, Err: fmt.Errorf("capture method %q", req.CaptureMethod)}
	}
	amount, err := a.toStripe(req.Amount, req.Currency)
	if err != nil {
		return psp.Charge{}, &psp.Error{Class: psp.Rejected, Op: op, Err: err}
	}
	params := &sdk.PaymentIntentCreateParams{
		Amount:        sdk.Int64(amount),
		Currency:      sdk.String(strings.ToLower(req.Currency)),
		PaymentMethod: sdk.String(req.PaymentMethod),
		Confirm:       sdk.Bool(true),
		AutomaticPaymentMethods: &sdk.PaymentIntentCreateAutomaticPaymentMethodsParams{
			Enabled: sdk.Bool(true), AllowRedirects: sdk.String("never"),
		},
		Metadata: map[string]string{metaOrderID: req.MerchantOrderID},
	}
	// A merchant id too long for metadata is left out rather than cut:
	// the ledger would name another merchant.
	named := req.MerchantID != "" && utf8.RuneCountInString(req.MerchantID) <= maxMetadataValue
	if named {
		params.Metadata[metaMerchantID] = req.MerchantID
	}
	if !req.AllowNextAction {
		// Nobody can complete a next action: Stripe refuses the card instead.
		params.ErrorOnRequiresAction = sdk.Bool(true)
	}
	if req.Description != "" {
		params.Description = sdk.String(truncate(req.Description, 1000))
	}
	if manual {
		params.CaptureMethod = sdk.String(string(sdk.PaymentIntentCaptureMethodManual))
		params.AddExpand(expandCharge)
	}
	params.SetIdempotencyKey("gw-charge-" + req.MerchantOrderID)
	pi, err := a.sc.V1PaymentIntents.Create(ctx, params)
	if se := (*sdk.Error)(nil); named && errors.As(err, &se) && se.Type == sdk.ErrorTypeIdempotency && se.HTTPStatusCode == http.StatusBadRequest {
		// The key was first used without the merchant: by an adapter from
		// before charges named it, within the key's 24 hours. That request
		// itself, sent again, is answered as it was; one with another
		// amount is refused again.
		delete(params.Metadata, metaMerchantID)
		pi, err = a.sc.V1PaymentIntents.Create(ctx, params)
	}
	if err != nil {
		return a.chargeFailure(ctx, req, err)
	}
	c, err := a.settled(ctx, op, pi)
	if err != nil {
		return psp.Charge{}, err
	}
	if err := psp.MatchCharge(op, req, c); err != nil {
		return psp.Charge{}, err
	}
	if c.Status == psp.Authorized && !manual {
		return psp.Charge{}, &psp.Error{Class: psp.Unknown, Op: op,
			Err: fmt.Errorf("%w: asked to take order %q at once, Stripe only authorized payment intent %s", psp.ErrMismatch, req.MerchantOrderID, pi.ID)}
	}
	return c, nil
}

// chargeFailure classifies a failed create-and-confirm; a card decline is a
// result once it is final at Stripe (settled).
func (a *Adapter) chargeFailure(ctx context.Context, req psp.ChargeRequest, err error) (psp.Charge, error) {
	const op = "charge"
	var se *sdk.Error
	if !errors.As(err, &se) {
		return psp.Charge{}, psp.TransportError(op, err)
	}
	declined := psp.Charge{MerchantOrderID: req.MerchantOrderID, Status: psp.Declined, Amount: req.Amount, Currency: req.Currency}
	switch {
	case se.HTTPStatusCode == http.StatusPaymentRequired && se.Type == sdk.ErrorTypeCard:
		if pi := se.PaymentIntent; pi != nil && pi.ID != "" {
			// The declined PaymentIntent exists and could be paid yet.
			c, err := a.settled(ctx, op, pi)
			if err != nil {
				return psp.Charge{}, err
			}
			return c, psp.MatchCharge(op, req, c)
		}
		declined.DeclineCode = declineCode(string(se.DeclineCode), string(se.Code))
		declined.Code = rawCode(string(se.DeclineCode), string(se.Code))
		return declined, nil
	case se.HTTPStatusCode == http.StatusBadRequest && se.Type == sdk.ErrorTypeInvalidRequest &&
		se.Code == sdk.ErrorCodeResourceMissing && se.Param == "payment_method":
		// No such PaymentMethod: nothing was created, and no retry will help.
		declined.DeclineCode, declined.Code = psp.DeclineInvalidPaymentMethod, string(se.Code)
		return declined, nil
	}
	return psp.Charge{}, classify(op, se)
}

// errorCodes are the error codes whose class does not follow from their
// type and status, from https://docs.stripe.com/error-codes.
var errorCodes = map[sdk.ErrorCode]psp.Class{
	// "Too many requests hit the API too quickly" and "another request is
	// accessing this object": Stripe did nothing; try again later.
	sdk.ErrorCodeRateLimit:   psp.NotProcessed,
	sdk.ErrorCodeLockTimeout: psp.NotProcessed,
	// Keys and account configuration: nothing happens until they are fixed.
	sdk.ErrorCodeAPIKeyExpired:         psp.NotProcessed,
	sdk.ErrorCodeSecretKeyRequired:     psp.NotProcessed,
	sdk.ErrorCodePlatformAPIKeyExpired: psp.NotProcessed,
	sdk.ErrorCodeTestmodeChargesOnly:   psp.NotProcessed,
	// The same idempotency key is in flight.
	sdk.ErrorCodeIdempotencyKeyInUse: psp.Unknown,
	// Amounts and currencies Stripe can never take; invalid_request_error
	// makes them Rejected anyway, named here for the record.
	sdk.ErrorCodeAmountTooSmall:                                  psp.Rejected,
	sdk.ErrorCodeAmountTooLarge:                                  psp.Rejected,
	sdk.ErrorCodeInvalidChargeAmount:                             psp.Rejected,
	sdk.ErrorCode("invalid_charge_amount_no_decimal_compatible"): psp.Rejected,
}

// classify places a Stripe error that is not a result.
func classify(op string, se *sdk.Error) error {
	err := fmt.Errorf("stripe answered %d %s %s: %s", se.HTTPStatusCode, se.Type, se.Code, se.Msg)
	e := &psp.Error{Op: op, Code: string(se.Code), Err: err}
	if e.Code == "" {
		e.Code = string(se.Type)
	}
	s := se.HTTPStatusCode
	class, known := errorCodes[se.Code]
	switch {
	case se.Type == sdk.ErrorTypeIdempotency && s == http.StatusBadRequest:
		// The key was used with other parameters: this order id is taken.
		e.Class, e.Err = psp.NotProcessed, fmt.Errorf("%w: %w", psp.ErrOrderConflict, err)
	case known:
		e.Class = class
	case s == http.StatusTooManyRequests:
		// Stripe does not execute a rate-limited request.
		e.Class = psp.NotProcessed
	case s == http.StatusConflict || s == http.StatusRequestTimeout || s >= 500:
		e.Class = psp.Unknown
	case s == http.StatusUnauthorized || s == http.StatusForbidden:
		e.Class = psp.NotProcessed
	case se.Type == sdk.ErrorTypeInvalidRequest && s >= 400 && s < 500:
		// "Invalid request errors arise when your request has invalid
		// parameters": the same request can never succeed.
		e.Class = psp.Rejected
	default:
		e.Class = psp.Unknown
	}
	return e
}

// declineCode prefers Stripe's specific decline_code over its generic code.
func declineCode(decline, code string) string {
	switch {
	case decline != "" && decline != "generic_decline":
		return decline
	case code != "":
		return code
	}
	return psp.DeclineCardDeclined
}

// rawCode is Stripe's own code for a decline: its decline_code when it gave
// one, else its error code.
func rawCode(decline, code string) string {
	if decline != "" {
		return decline
	}
	if code != "" {
		return code
	}
	return "card_declined"
}

// settled reads pi as a charge, making a decline final first. A
// PaymentIntent back in requires_payment_method after a failed attempt
// (a card declined, 3-D Secure failed) can still be paid: the browser that
// holds its client secret may confirm it again with another card. So it is
// canceled at Stripe before its decline is reported, and a later payment of
// it becomes impossible. One that moved on meanwhile (the customer paid, or
// is paying) is read again as it now stands; one that cannot be canceled
// is no answer (Unknown), since it could still be paid.
func (a *Adapter) settled(ctx context.Context, op string, pi *sdk.PaymentIntent) (psp.Charge, error) {
	if pi.Status != sdk.PaymentIntentStatusRequiresPaymentMethod || pi.LastPaymentError == nil {
		return a.toCharge(op, pi)
	}
	params := &sdk.PaymentIntentCancelParams{CancellationReason: sdk.String(string(sdk.PaymentIntentCancellationReasonAbandoned))}
	params.SetIdempotencyKey("gw-cancel-" + pi.ID)
	canceled, err := a.sc.V1PaymentIntents.Cancel(ctx, pi.ID, params)
	var se *sdk.Error
	switch {
	case err == nil:
		if canceled.LastPaymentError == nil {
			canceled.LastPaymentError = pi.LastPaymentError
		}
		return a.toCharge(op, canceled)
	case errors.As(err, &se) && se.Code == sdk.ErrorCodePaymentIntentUnexpectedState:
		now, rerr := a.retrieve(ctx, pi.ID)
		if rerr != nil {
			return psp.Charge{}, lookupFailure(op, rerr)
		}
		if now.Status == sdk.PaymentIntentStatusRequiresPaymentMethod {
			return psp.Charge{}, &psp.Error{Class: psp.Unknown, Op: op,
				Err: fmt.Errorf("payment intent %s was declined and could not be canceled: %w", pi.ID, err)}
		}
		return a.toCharge(op, now)
	}
	return psp.Charge{}, &psp.Error{Class: psp.Unknown, Op: op,
		Err: fmt.Errorf("payment intent %s was declined and could not be canceled, so it could still be paid: %w", pi.ID, err)}
}

// toCharge reads a PaymentIntent as a charge.
func (a *Adapter) toCharge(op string, pi *sdk.PaymentIntent) (psp.Charge, error) {
	amount, currency, err := a.fromStripe(op, pi.Amount, pi.Currency)
	if err != nil {
		return psp.Charge{}, err
	}
	c := psp.Charge{MerchantOrderID: pi.Metadata[metaOrderID], Reference: pi.ID, Amount: amount, Currency: currency}
	switch pi.Status {
	case sdk.PaymentIntentStatusSucceeded:
		c.Status = psp.Succeeded
		if c.AmountCaptured, err = a.received(op, pi, amount); err != nil {
			return psp.Charge{}, err
		}
	case sdk.PaymentIntentStatusRequiresCapture:
		c.Status = psp.Authorized
		c.CaptureBefore = captureBefore(pi)
	case sdk.PaymentIntentStatusRequiresPaymentMethod:
		// Declined, but payable still: only settled's cancel makes it an answer.
		if pi.LastPaymentError == nil {
			return psp.Charge{}, &psp.Error{Class: psp.Unknown, Op: op, Err: fmt.Errorf("payment intent %s was never confirmed", pi.ID)}
		}
		return psp.Charge{}, &psp.Error{Class: psp.Unknown, Op: op, Err: fmt.Errorf("payment intent %s was declined but can still be paid", pi.ID)}
	case sdk.PaymentIntentStatusCanceled:
		if pi.CaptureMethod == sdk.PaymentIntentCaptureMethodManual && pi.LastPaymentError == nil {
			// Released before any capture: by a void, or when the
			// authorization expired (cancellation_reason automatic).
			c.Status = psp.Voided
			break
		}
		c.Status, c.DeclineCode, c.Code = psp.Declined, "canceled", "canceled"
		if pi.CancellationReason != "" {
			c.Code = string(pi.CancellationReason)
		}
		if e := pi.LastPaymentError; e != nil && pi.CancellationReason == sdk.PaymentIntentCancellationReasonAbandoned {
			// Canceled by settled after its decline: the decline is the answer.
			c.DeclineCode = declineCode(string(e.DeclineCode), string(e.Code))
			c.Code = rawCode(string(e.DeclineCode), string(e.Code))
		}
	case sdk.PaymentIntentStatusRequiresAction:
		c.Status, c.NextAction = psp.Pending, nextAction(pi)
	case sdk.PaymentIntentStatusProcessing:
		c.Status = psp.Pending
	default: // requires_confirmation
		return psp.Charge{}, &psp.Error{Class: psp.Unknown, Op: op, Err: fmt.Errorf("payment intent %s is %s", pi.ID, pi.Status)}
	}
	return c, nil
}

// received is what a succeeded PaymentIntent took, in ISO units: its
// amount_received, or its whole amount when Stripe did not say.
func (a *Adapter) received(op string, pi *sdk.PaymentIntent, amount int64) (int64, error) {
	if pi.AmountReceived == 0 {
		return amount, nil
	}
	got, _, err := a.fromStripe(op, pi.AmountReceived, pi.Currency)
	if err != nil {
		return 0, err
	}
	if got > amount {
		return 0, &psp.Error{Class: psp.Unknown, Op: op,
			Err: fmt.Errorf("%w: payment intent %s of %d received %d", psp.ErrMismatch, pi.ID, pi.Amount, pi.AmountReceived)}
	}
	return got, nil
}

// captureBefore is when pi's authorization expires, as its latest charge
// says when it was expanded; zero otherwise.
func captureBefore(pi *sdk.PaymentIntent) time.Time {
	ch := pi.LatestCharge
	if ch == nil || ch.PaymentMethodDetails == nil || ch.PaymentMethodDetails.Card == nil || ch.PaymentMethodDetails.Card.CaptureBefore <= 0 {
		return time.Time{}
	}
	return time.Unix(ch.PaymentMethodDetails.Card.CaptureBefore, 0).UTC()
}

// retrieve reads the PaymentIntent id as it stands, its latest charge
// expanded.
func (a *Adapter) retrieve(ctx context.Context, id string) (*sdk.PaymentIntent, error) {
	params := &sdk.PaymentIntentRetrieveParams{}
	params.AddExpand(expandCharge)
	return a.sc.V1PaymentIntents.Retrieve(ctx, id, params)
}

// nextAction is what Stripe.js needs to continue pi: the client secret, and
// the URL of a redirect.
func nextAction(pi *sdk.PaymentIntent) *psp.NextAction {
	na := &psp.NextAction{Type: "use_stripe_sdk", ClientSecret: pi.ClientSecret}
	if pi.NextAction == nil {
		return na
	}
	if t := string(pi.NextAction.Type); t != "" {
		na.Type = t
	}
	if r := pi.NextAction.RedirectToURL; pi.NextAction.Type == sdk.PaymentIntentNextActionTypeRedirectToURL && r != nil {
		na.Type, na.URL = psp.NextActionRedirect, r.URL
	}
	return na
}

// Lookup implements psp.Adapter by searching PaymentIntents. Not found is not
// authoritative: a PaymentIntent may take a minute to become searchable.
func (a *Adapter) Lookup(ctx context.Context, merchantOrderID string) (psp.Charge, error) {
	const op = "lookup"
	if !orderIDPattern.MatchString(merchantOrderID) {
		return psp.Charge{}, &psp.Error{Class: psp.Rejected, Op: op, Err: fmt.Errorf("order id %q cannot be searched", merchantOrderID)}
	}
	params := &sdk.PaymentIntentSearchParams{SearchParams: sdk.SearchParams{
		Query: fmt.Sprintf("metadata['%s']:'%s'", metaOrderID, merchantOrderID),
	}}
	params.AddExpand("data." + expandCharge)
	var found []*sdk.PaymentIntent
	for pi, err := range a.sc.V1PaymentIntents.Search(ctx, params) {
		if err != nil {
			return psp.Charge{}, lookupFailure(op, err)
		}
		if got := pi.Metadata[metaOrderID]; got != merchantOrderID {
			// Search answered with another order's PaymentIntent: it cannot
			// be trusted to have shown all of this order's either.
			return psp.Charge{}, &psp.Error{Class: psp.Unknown, Op: op,
				Err: fmt.Errorf("%w: searching for order %q found payment intent %s of order %q", psp.ErrMismatch, merchantOrderID, pi.ID, got)}
		}
		found = append(found, pi)
	}
	if len(found) == 0 {
		return psp.Charge{}, psp.ErrNotFound
	}
	// One order id should have one PaymentIntent. Should there be more (a
	// charge resent after its idempotency key expired), the one that took
	// money is the answer, then the newest.
	sort.SliceStable(found, func(i, j int) bool {
		si, sj := found[i].Status == sdk.PaymentIntentStatusSucceeded, found[j].Status == sdk.PaymentIntentStatusSucceeded
		if si != sj {
			return si
		}
		return found[i].Created > found[j].Created
	})
	return a.settled(ctx, op, found[0])
}

func lookupFailure(op string, err error) error {
	var se *sdk.Error
	if !errors.As(err, &se) {
		return psp.TransportError(op, err)
	}
	e := classify(op, se).(*psp.Error)
	if e.Class == psp.Rejected {
		// A lookup that cannot be made proves nothing either way.
		e.Class = psp.Unknown
	}
	return e
}

// Refund implements psp.Adapter.
func (a *Adapter) Refund(ctx context.Context, req psp.RefundRequest) (psp.Refund, error) {
	// Go's client may send it again by itself on a new connection (an
	// Idempotency-Key makes it replayable): a later dial error proves
	// nothing once a request was written.
	ctx, sent := psp.Tracing(ctx)
	x, err := a.refund(ctx, req)
	return x, sent.Judge(err)
}

func (a *Adapter) refund(ctx context.Context, req psp.RefundRequest) (psp.Refund, error) {
	const op = "refund"
	if !orderIDPattern.MatchString(req.RefundOrderID) || req.ChargeReference == "" {
		return psp.Refund{}, &psp.Error{Class: psp.Rejected, Op: op,
			Err: fmt.Errorf("refund order id %q is not 1–%d characters of [A-Za-z0-9_-], or no charge reference", req.RefundOrderID, maxOrderIDLen)}
	}
	if err := a.Capabilities().Check(req.Amount, req.Currency); err != nil {
		return psp.Refund{}, &psp.Error{Class: psp.Rejected, Op: op, Err: err}
	}
	amount, err := a.toStripe(req.Amount, req.Currency)
	if err != nil {
		return psp.Refund{}, &psp.Error{Class: psp.Rejected, Op: op, Err: err}
	}
	// Stripe forgets an idempotency key after 24 hours: a refund retried
	// later would refund again. Look first; the refund list is consistent.
	switch r, err := a.LookupRefund(ctx, req.ChargeReference, req.RefundOrderID); {
	case err == nil:
		if r.Amount != req.Amount || r.Currency != req.Currency || r.MerchantOrderID != req.MerchantOrderID {
			return psp.Refund{}, &psp.Error{Class: psp.NotProcessed, Op: op, Err: fmt.Errorf("%w: refund %s was %d %s of %q, now asked for %d %s of %q",
				psp.ErrOrderConflict, req.RefundOrderID, r.Amount, r.Currency, r.MerchantOrderID, req.Amount, req.Currency, req.MerchantOrderID)}
		}
		return r, nil
	case !errors.Is(err, psp.ErrNotFound):
		// Nothing was sent to create the refund.
		return psp.Refund{}, &psp.Error{Class: psp.NotProcessed, Op: op, Err: fmt.Errorf("looking for an earlier refund: %w", err)}
	}
	params := &sdk.RefundCreateParams{
		PaymentIntent: sdk.String(req.ChargeReference),
		Amount:        sdk.Int64(amount),
		Metadata: map[string]string{
			metaRefundID: req.RefundOrderID,
			metaOrderID:  req.MerchantOrderID,
		},
	}
	if req.Reason != "" {
		// Stripe's own reason is an enum; the merchant's words go in metadata.
		params.Metadata["reason"] = truncate(req.Reason, maxMetadataValue)
	}
	params.SetIdempotencyKey("gw-refund-" + req.RefundOrderID)
	rf, err := a.sc.V1Refunds.Create(ctx, params)
	if err != nil {
		var se *sdk.Error
		if !errors.As(err, &se) {
			return psp.Refund{}, psp.TransportError(op, err)
		}
		e := classify(op, se).(*psp.Error)
		if e.Class != psp.Rejected || se.HTTPStatusCode != http.StatusBadRequest {
			return psp.Refund{}, e
		}
		// The request was fine (Check vouched for it); the refund is not
		// possible: nothing left, a declined charge, no such charge.
		return psp.Refund{RefundOrderID: req.RefundOrderID, MerchantOrderID: req.MerchantOrderID, Status: psp.RefundDeclined,
			DeclineCode: refundDeclineCode(se), Code: e.Code, Amount: req.Amount, Currency: req.Currency}, nil
	}
	r, err := a.toRefund(op, rf)
	if err != nil {
		return psp.Refund{}, err
	}
	if err := psp.MatchRefund(op, req, r); err != nil {
		return psp.Refund{}, err
	}
	return r, nil
}

// refundDeclineCode names why Stripe refused a refund (a 400
// invalid_request_error: the request was fine, the refund is not possible).
func refundDeclineCode(se *sdk.Error) string {
	switch {
	case se.Code == sdk.ErrorCodeResourceMissing:
		return psp.RefundDeclineChargeNotFound
	case se.Code == sdk.ErrorCodeChargeAlreadyRefunded || se.Code == sdk.ErrorCodeAmountTooLarge || se.Param == "amount":
		return psp.RefundDeclineAmountExceeded
	case se.Code != "":
		return string(se.Code)
	}
	return psp.RefundDeclineNotRefundable
}

// toRefund reads a Stripe Refund.
func (a *Adapter) toRefund(op string, rf *sdk.Refund) (psp.Refund, error) {
	amount, currency, err := a.fromStripe(op, rf.Amount, rf.Currency)
	if err != nil {
		return psp.Refund{}, err
	}
	r := psp.Refund{RefundOrderID: rf.Metadata[metaRefundID], MerchantOrderID: rf.Metadata[metaOrderID], Reference: rf.ID,
		Amount: amount, Currency: currency}
	switch rf.Status {
	case sdk.RefundStatusSucceeded:
		r.Status = psp.RefundSucceeded
	case sdk.RefundStatusPending, sdk.RefundStatusRequiresAction:
		r.Status = psp.RefundPending
	case sdk.RefundStatusFailed, sdk.RefundStatusCanceled:
		r.Status, r.Code = psp.RefundDeclined, string(rf.FailureReason)
		if r.Code == "" {
			r.Code = string(rf.Status)
		}
		r.DeclineCode = r.Code
	default:
		return psp.Refund{}, &psp.Error{Class: psp.Unknown, Op: op, Err: fmt.Errorf("refund %s is %q", rf.ID, rf.Status)}
	}
	return r, nil
}

// LookupRefund implements psp.Adapter by listing the PaymentIntent's refunds.
func (a *Adapter) LookupRefund(ctx context.Context, chargeReference, refundOrderID string) (psp.Refund, error) {
	const op = "lookup_refund"
	if chargeReference == "" || refundOrderID == "" {
		// Without a PaymentIntent the list would be every refund of the account.
		return psp.Refund{}, &psp.Error{Class: psp.Rejected, Op: op, Err: errors.New("a refund lookup needs the payment intent and the refund order id")}
	}
	var (
		found  psp.Refund
		ok     bool
		rerr   error
		listed = func(rf *sdk.Refund) bool {
			if rf.Metadata[metaRefundID] != refundOrderID {
				return true
			}
			found, rerr = a.toRefund(op, rf)
			ok = true
			return false
		}
	)
	if err := a.listRefunds(ctx, op, chargeReference, listed); err != nil {
		return psp.Refund{}, err
	}
	switch {
	case rerr != nil:
		return psp.Refund{}, rerr
	case !ok:
		return psp.Refund{}, psp.ErrNotFound
	}
	return found, nil
}

// listRefunds passes each refund of the PaymentIntent pi to visit until it
// returns false. No such PaymentIntent is psp.ErrNotFound; a refund of
// another PaymentIntent in the list is Unknown (psp.ErrMismatch).
func (a *Adapter) listRefunds(ctx context.Context, op, pi string, visit func(*sdk.Refund) bool) error {
	params := &sdk.RefundListParams{PaymentIntent: sdk.String(pi)}
	params.Limit = sdk.Int64(100)
	for rf, err := range a.sc.V1Refunds.List(ctx, params) {
		if err != nil {
			var se *sdk.Error
			if errors.As(err, &se) && se.Code == sdk.ErrorCodeResourceMissing {
				return psp.ErrNotFound // no such PaymentIntent
			}
			return lookupFailure(op, err)
		}
		if rf.PaymentIntent != nil && rf.PaymentIntent.ID != "" && rf.PaymentIntent.ID != pi {
			return &psp.Error{Class: psp.Unknown, Op: op,
				Err: fmt.Errorf("%w: listing the refunds of %s found refund %s of %s", psp.ErrMismatch, pi, rf.ID, rf.PaymentIntent.ID)}
		}
		if !visit(rf) {
			return nil
		}
	}
	return nil
}

// cancellationReasons maps the gateway's void reasons onto Stripe's
// (https://docs.stripe.com/api/payment_intents/cancel); another reason is
// not sent.
var cancellationReasons = map[string]sdk.PaymentIntentCancellationReason{
	"duplicate":             sdk.PaymentIntentCancellationReasonDuplicate,
	"fraudulent":            sdk.PaymentIntentCancellationReasonFraudulent,
	"requested_by_customer": sdk.PaymentIntentCancellationReasonRequestedByCustomer,
	"abandoned":             sdk.PaymentIntentCancellationReasonAbandoned,
	"authorization_expired": sdk.PaymentIntentCancellationReasonAbandoned,
}

// Capture implements psp.Capturer.
func (a *Adapter) Capture(ctx context.Context, req psp.CaptureRequest) (psp.Charge, error) {
	// Go's client may send it again by itself on a new connection (an
	// Idempotency-Key makes it replayable): a later dial error proves
	// nothing once a request was written.
	ctx, sent := psp.Tracing(ctx)
	x, err := a.capture(ctx, req)
	return x, sent.Judge(err)
}

func (a *Adapter) capture(ctx context.Context, req psp.CaptureRequest) (psp.Charge, error) {
	const op = "capture"
	if err := validCommand(req.OrderID, req.MerchantOrderID, req.ChargeReference); err != nil {
		return psp.Charge{}, &psp.Error{Class: psp.Rejected, Op: op, Err: err}
	}
	if err := a.Capabilities().Check(req.Amount, req.Currency); err != nil {
		return psp.Charge{}, &psp.Error{Class: psp.Rejected, Op: op, Err: err}
	}
	amount, err := a.toStripe(req.Amount, req.Currency)
	if err != nil {
		return psp.Charge{}, &psp.Error{Class: psp.Rejected, Op: op, Err: err}
	}
	params := &sdk.PaymentIntentCaptureParams{AmountToCapture: sdk.Int64(amount)}
	// Stripe keeps which capture took the money, for the record.
	params.AddMetadata(metaCaptureID, req.OrderID)
	params.AddExpand(expandCharge)
	params.SetIdempotencyKey("gw-capture-" + req.OrderID)
	pi, err := a.sc.V1PaymentIntents.Capture(ctx, req.ChargeReference, params)
	return a.commanded(ctx, op, req.MerchantOrderID, req.ChargeReference, req.Currency, pi, err)
}

// Void implements psp.Capturer.
func (a *Adapter) Void(ctx context.Context, req psp.VoidRequest) (psp.Charge, error) {
	// Go's client may send it again by itself on a new connection (an
	// Idempotency-Key makes it replayable): a later dial error proves
	// nothing once a request was written.
	ctx, sent := psp.Tracing(ctx)
	x, err := a.void(ctx, req)
	return x, sent.Judge(err)
}

func (a *Adapter) void(ctx context.Context, req psp.VoidRequest) (psp.Charge, error) {
	const op = "void"
	if err := validCommand(req.OrderID, req.MerchantOrderID, req.ChargeReference); err != nil {
		return psp.Charge{}, &psp.Error{Class: psp.Rejected, Op: op, Err: err}
	}
	params := &sdk.PaymentIntentCancelParams{}
	if r, ok := cancellationReasons[req.Reason]; ok {
		params.CancellationReason = sdk.String(string(r))
	}
	params.SetIdempotencyKey("gw-void-" + req.OrderID)
	pi, err := a.sc.V1PaymentIntents.Cancel(ctx, req.ChargeReference, params)
	return a.commanded(ctx, op, req.MerchantOrderID, req.ChargeReference, "", pi, err)
}

// referencePattern is what a PaymentIntent id looks like; anything else
// would not name one in a URL path.
var referencePattern = regexp.MustCompile(`^[A-Za-z0-9_]{1,255}$`)

func validCommand(orderID, merchantOrderID, reference string) error {
	if !orderIDPattern.MatchString(orderID) || merchantOrderID == "" || !referencePattern.MatchString(reference) {
		return fmt.Errorf("order id %q must be 1–%d characters of [A-Za-z0-9_-], with the charge's order id and payment intent", orderID, maxOrderIDLen)
	}
	return nil
}

// commanded reads Stripe's answer to a capture or cancel of the
// PaymentIntent reference: the PaymentIntent, or, when Stripe refused
// because the PaymentIntent can no longer be captured or canceled, the
// PaymentIntent as it stands. Either must be the charge asked about.
func (a *Adapter) commanded(ctx context.Context, op, orderID, reference, currency string, pi *sdk.PaymentIntent, err error) (psp.Charge, error) {
	var se *sdk.Error
	switch {
	case err == nil:
	case !errors.As(err, &se):
		return psp.Charge{}, psp.TransportError(op, err)
	case se.Code == sdk.ErrorCodePaymentIntentUnexpectedState:
		// Stripe did nothing: captured already, canceled, or never
		// authorized. The answer is what it is now.
		if pi, err = a.retrieve(ctx, reference); err != nil {
			return psp.Charge{}, lookupFailure(op, err)
		}
	default:
		return psp.Charge{}, classify(op, se)
	}
	c, err := a.settled(ctx, op, pi)
	if err != nil {
		return psp.Charge{}, err
	}
	if c.MerchantOrderID != orderID || c.Reference != reference || (currency != "" && c.Currency != currency) {
		return psp.Charge{}, &psp.Error{Class: psp.Unknown, Op: op,
			Err: fmt.Errorf("%w: asked about payment intent %s of order %q in %s, Stripe answered %s of order %q in %s",
				psp.ErrMismatch, reference, orderID, currency, c.Reference, c.MerchantOrderID, c.Currency)}
	}
	return c, nil
}

func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n])
}
