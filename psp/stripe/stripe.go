// Package stripe owns the Stripe adapter: card payments as PaymentIntents,
// through the official stripe-go SDK with its retries turned off, so that
// every outcome reaches the gateway once and classified.
//
// How the gateway's request maps onto Stripe:
//   - Charge creates and confirms a PaymentIntent in one call: POST
//     /v1/payment_intents with amount, currency (lower case), payment_method
//     (the gateway's payment_method: a PaymentMethod id such as pm_…),
//     confirm=true, error_on_requires_action=true (the gateway has no flow for
//     3-D Secure redirects), automatic_payment_methods without redirects,
//     metadata[merchant_order_id], and Idempotency-Key
//     "gw-charge-<merchant order id>". Stripe replays the first answer to a
//     repeat of that key for 24 hours (DedupeWindow): that is what
//     deduplicates the order id.
//   - Lookup searches PaymentIntents by metadata['merchant_order_id']. Search
//     is eventually consistent (a new PaymentIntent can take about a minute
//     to show), so not found is not authoritative: the gateway relies on the
//     idempotency key to charge again safely.
//   - Refund creates a Refund of the PaymentIntent (Charge.Reference) with
//     metadata[refund_order_id] and Idempotency-Key
//     "gw-refund-<refund order id>"; LookupRefund lists the PaymentIntent's
//     refunds (a list, not a search: consistent) and matches the metadata.
//
// Outcomes: a PaymentIntent that succeeded → Succeeded; 402 card_error, or a
// PaymentIntent back in requires_payment_method with a last_payment_error →
// Declined, with the decline_code when Stripe gives a specific one
// (insufficient_funds, …) and the error code otherwise (card_declined,
// expired_card, authentication_required, …); 400 idempotency_error →
// NotProcessed wrapping psp.ErrOrderConflict; other 400, 401, 403, 404 and
// 429 (Stripe does not execute rate-limited requests) → NotProcessed; 409,
// 5xx, a PaymentIntent still processing, unreadable answers, timeouts and
// resets → Unknown; connections that could not be opened → NotProcessed.
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
}

// LogValue masks the secret key, keeping its sk_test_/sk_live_ prefix.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("base_url", c.baseURL()),
		slog.String("secret_key", mask(c.SecretKey)),
		slog.Duration("creation_window", c.CreationWindow),
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
	sc     *sdk.Client
	window time.Duration
}

var _ psp.Adapter = (*Adapter)(nil)

const (
	// maxOrderIDLen keeps "gw-charge-" + the order id within Stripe's
	// 255-character idempotency keys.
	maxOrderIDLen = 200
	// dedupeWindow is how long Stripe keeps an idempotency key.
	dedupeWindow = 24 * time.Hour
	// maxMetadataValue is Stripe's limit on a metadata value.
	maxMetadataValue = 500
	// metadata keys the adapter writes and searches.
	metaOrderID  = "merchant_order_id"
	metaRefundID = "refund_order_id"
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
		sc:     sdk.NewClient(cfg.SecretKey, sdk.WithBackends(&sdk.Backends{API: backend, Connect: backend, Uploads: backend})),
		window: cfg.CreationWindow,
	}
	if a.window <= 0 {
		a.window = 2 * time.Minute
	}
	return a, nil
}

// Capabilities implements psp.Adapter.
func (a *Adapter) Capabilities() psp.Capabilities {
	return psp.Capabilities{
		Name:                "stripe",
		AuthoritativeLookup: false,
		CreationWindow:      a.window,
		DedupesOrderID:      true,
		DedupeWindow:        dedupeWindow,
		MaxOrderIDLen:       maxOrderIDLen,
	}
}

// Charge implements psp.Adapter.
func (a *Adapter) Charge(ctx context.Context, req psp.ChargeRequest) (psp.Charge, error) {
	const op = "charge"
	if !orderIDPattern.MatchString(req.MerchantOrderID) {
		return psp.Charge{}, &psp.Error{Class: psp.NotProcessed, Op: op,
			Err: fmt.Errorf("order id %q is not 1–%d characters of [A-Za-z0-9_-]", req.MerchantOrderID, maxOrderIDLen)}
	}
	params := &sdk.PaymentIntentCreateParams{
		Amount:                sdk.Int64(req.Amount),
		Currency:              sdk.String(strings.ToLower(req.Currency)),
		PaymentMethod:         sdk.String(req.PaymentMethod),
		Confirm:               sdk.Bool(true),
		ErrorOnRequiresAction: sdk.Bool(true),
		AutomaticPaymentMethods: &sdk.PaymentIntentCreateAutomaticPaymentMethodsParams{
			Enabled: sdk.Bool(true), AllowRedirects: sdk.String("never"),
		},
		Metadata: map[string]string{metaOrderID: req.MerchantOrderID},
	}
	if req.Description != "" {
		params.Description = sdk.String(truncate(req.Description, 1000))
	}
	params.SetIdempotencyKey("gw-charge-" + req.MerchantOrderID)
	pi, err := a.sc.V1PaymentIntents.Create(ctx, params)
	if err != nil {
		return chargeFailure(req, err)
	}
	c, err := toCharge(op, pi)
	if err != nil {
		return psp.Charge{}, err
	}
	if c.MerchantOrderID != req.MerchantOrderID || c.Amount != req.Amount || c.Currency != req.Currency {
		return psp.Charge{}, &psp.Error{Class: psp.NotProcessed, Op: op, Err: fmt.Errorf("%w: Stripe answered %s for %s %d %s",
			psp.ErrOrderConflict, c.Reference, c.MerchantOrderID, c.Amount, c.Currency)}
	}
	return c, nil
}

// chargeFailure classifies a failed create-and-confirm; a card decline is a
// result.
func chargeFailure(req psp.ChargeRequest, err error) (psp.Charge, error) {
	const op = "charge"
	var se *sdk.Error
	if !errors.As(err, &se) {
		return psp.Charge{}, psp.TransportError(op, err)
	}
	declined := psp.Charge{MerchantOrderID: req.MerchantOrderID, Status: psp.Declined, Amount: req.Amount, Currency: req.Currency}
	switch {
	case se.HTTPStatusCode == http.StatusPaymentRequired && se.Type == sdk.ErrorTypeCard:
		declined.DeclineCode = declineCode(string(se.DeclineCode), string(se.Code))
		if se.PaymentIntent != nil {
			declined.Reference = se.PaymentIntent.ID
		}
		return declined, nil
	case se.HTTPStatusCode == http.StatusBadRequest && se.Type == sdk.ErrorTypeInvalidRequest &&
		se.Code == sdk.ErrorCodeResourceMissing && se.Param == "payment_method":
		// No such PaymentMethod: nothing was created, but no retry will help.
		declined.DeclineCode = psp.DeclineInvalidPaymentMethod
		return declined, nil
	}
	return psp.Charge{}, classify(op, se)
}

// classify places a Stripe error that is not a result.
func classify(op string, se *sdk.Error) error {
	err := fmt.Errorf("stripe answered %d %s %s: %s", se.HTTPStatusCode, se.Type, se.Code, se.Msg)
	switch s := se.HTTPStatusCode; {
	case se.Type == sdk.ErrorTypeIdempotency && s == http.StatusBadRequest:
		// The key was used with other parameters: this order id is taken.
		return &psp.Error{Class: psp.NotProcessed, Op: op, Err: fmt.Errorf("%w: %w", psp.ErrOrderConflict, err)}
	case s == http.StatusConflict || s == http.StatusRequestTimeout:
		// 409: another request with this idempotency key is in flight.
		return &psp.Error{Class: psp.Unknown, Op: op, Err: err}
	case s >= 400 && s < 500:
		return &psp.Error{Class: psp.NotProcessed, Op: op, Err: err}
	}
	return &psp.Error{Class: psp.Unknown, Op: op, Err: err}
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

// toCharge reads a PaymentIntent as a charge.
func toCharge(op string, pi *sdk.PaymentIntent) (psp.Charge, error) {
	c := psp.Charge{MerchantOrderID: pi.Metadata[metaOrderID], Reference: pi.ID, Amount: pi.Amount,
		Currency: strings.ToUpper(string(pi.Currency))}
	switch pi.Status {
	case sdk.PaymentIntentStatusSucceeded:
		c.Status = psp.Succeeded
	case sdk.PaymentIntentStatusRequiresPaymentMethod:
		if pi.LastPaymentError == nil {
			return psp.Charge{}, &psp.Error{Class: psp.Unknown, Op: op, Err: fmt.Errorf("payment intent %s was never confirmed", pi.ID)}
		}
		c.Status = psp.Declined
		c.DeclineCode = declineCode(string(pi.LastPaymentError.DeclineCode), string(pi.LastPaymentError.Code))
	case sdk.PaymentIntentStatusCanceled:
		c.Status, c.DeclineCode = psp.Declined, "canceled"
	default: // processing, requires_action, requires_capture, requires_confirmation
		return psp.Charge{}, &psp.Error{Class: psp.Unknown, Op: op, Err: fmt.Errorf("payment intent %s is %s", pi.ID, pi.Status)}
	}
	return c, nil
}

// Lookup implements psp.Adapter by searching PaymentIntents. Not found is not
// authoritative: a PaymentIntent may take a minute to become searchable.
func (a *Adapter) Lookup(ctx context.Context, merchantOrderID string) (psp.Charge, error) {
	const op = "lookup"
	if !orderIDPattern.MatchString(merchantOrderID) {
		return psp.Charge{}, &psp.Error{Class: psp.NotProcessed, Op: op, Err: fmt.Errorf("order id %q cannot be searched", merchantOrderID)}
	}
	params := &sdk.PaymentIntentSearchParams{SearchParams: sdk.SearchParams{
		Query: fmt.Sprintf("metadata['%s']:'%s'", metaOrderID, merchantOrderID),
	}}
	var found []*sdk.PaymentIntent
	for pi, err := range a.sc.V1PaymentIntents.Search(ctx, params) {
		if err != nil {
			return psp.Charge{}, lookupFailure(op, err)
		}
		if pi.Metadata[metaOrderID] == merchantOrderID {
			found = append(found, pi)
		}
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
	return toCharge(op, found[0])
}

func lookupFailure(op string, err error) error {
	var se *sdk.Error
	if !errors.As(err, &se) {
		return psp.TransportError(op, err)
	}
	return classify(op, se)
}

// Refund implements psp.Adapter.
func (a *Adapter) Refund(ctx context.Context, req psp.RefundRequest) (psp.Refund, error) {
	const op = "refund"
	if !orderIDPattern.MatchString(req.RefundOrderID) {
		return psp.Refund{}, &psp.Error{Class: psp.NotProcessed, Op: op,
			Err: fmt.Errorf("refund order id %q is not 1–%d characters of [A-Za-z0-9_-]", req.RefundOrderID, maxOrderIDLen)}
	}
	params := &sdk.RefundCreateParams{
		PaymentIntent: sdk.String(req.ChargeReference),
		Amount:        sdk.Int64(req.Amount),
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
		if se.HTTPStatusCode == http.StatusBadRequest && se.Type == sdk.ErrorTypeInvalidRequest {
			return psp.Refund{RefundOrderID: req.RefundOrderID, MerchantOrderID: req.MerchantOrderID, Status: psp.RefundDeclined,
				DeclineCode: refundDeclineCode(se), Amount: req.Amount, Currency: req.Currency}, nil
		}
		return psp.Refund{}, classify(op, se)
	}
	r, err := toRefund(op, rf)
	if err != nil {
		return psp.Refund{}, err
	}
	if r.RefundOrderID != req.RefundOrderID || r.Amount != req.Amount {
		return psp.Refund{}, &psp.Error{Class: psp.NotProcessed, Op: op, Err: fmt.Errorf("%w: Stripe answered refund %s of %d for %s",
			psp.ErrOrderConflict, r.Reference, r.Amount, r.RefundOrderID)}
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
func toRefund(op string, rf *sdk.Refund) (psp.Refund, error) {
	r := psp.Refund{RefundOrderID: rf.Metadata[metaRefundID], MerchantOrderID: rf.Metadata[metaOrderID], Reference: rf.ID,
		Amount: rf.Amount, Currency: strings.ToUpper(string(rf.Currency))}
	switch rf.Status {
	case sdk.RefundStatusSucceeded:
		r.Status = psp.RefundSucceeded
	case sdk.RefundStatusPending, sdk.RefundStatusRequiresAction:
		r.Status = psp.RefundPending
	case sdk.RefundStatusFailed, sdk.RefundStatusCanceled:
		r.Status, r.DeclineCode = psp.RefundDeclined, string(rf.FailureReason)
		if r.DeclineCode == "" {
			r.DeclineCode = string(rf.Status)
		}
	default:
		return psp.Refund{}, &psp.Error{Class: psp.Unknown, Op: op, Err: fmt.Errorf("refund %s is %q", rf.ID, rf.Status)}
	}
	return r, nil
}

// LookupRefund implements psp.Adapter by listing the PaymentIntent's refunds.
func (a *Adapter) LookupRefund(ctx context.Context, chargeReference, refundOrderID string) (psp.Refund, error) {
	const op = "lookup_refund"
	params := &sdk.RefundListParams{PaymentIntent: sdk.String(chargeReference)}
	params.Limit = sdk.Int64(100)
	for rf, err := range a.sc.V1Refunds.List(ctx, params) {
		if err != nil {
			var se *sdk.Error
			if errors.As(err, &se) && se.Code == sdk.ErrorCodeResourceMissing {
				return psp.Refund{}, psp.ErrNotFound // no such PaymentIntent
			}
			return psp.Refund{}, lookupFailure(op, err)
		}
		if rf.Metadata[metaRefundID] == refundOrderID {
			return toRefund(op, rf)
		}
	}
	return psp.Refund{}, psp.ErrNotFound
}

func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n])
}
