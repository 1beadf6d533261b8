// Package toss owns the Toss Payments adapter: card payments confirmed
// through Toss's core API (https://api.tosspayments.com), written against its
// documented HTTP API.
//
// How the gateway's request maps onto Toss:
//   - Toss payments start in the customer's browser: the payment widget
//     authenticates the card for an orderId and amount and hands the merchant's
//     front end a paymentKey. The gateway's payment_method field carries that
//     paymentKey, and the widget must have been opened with orderId = the
//     gateway's merchant order id for the Idempotency-Key the front end will
//     send (payments.MerchantOrderID; "ord_" + 24 hex digits, which fits
//     Toss's 6–64 characters of [A-Za-z0-9_-]).
//   - Charge confirms: POST /v1/payments/confirm {paymentKey, orderId, amount}
//     with Idempotency-Key "gw-confirm-<orderId>". Toss confirms a payment
//     once: a repeat after the idempotency key expired is answered
//     ALREADY_PROCESSED_PAYMENT or DUPLICATED_ORDER_ID, and the adapter then
//     returns the payment it finds for the order.
//   - Lookup: GET /v1/payments/orders/{orderId}. DONE, CANCELED and
//     PARTIAL_CANCELED are a succeeded charge (refunds are separate); ABORTED
//     and EXPIRED are declined; READY and IN_PROGRESS (authenticated, never
//     confirmed) are psp.ErrNotFound, as is 404 NOT_FOUND_PAYMENT.
//   - Refund cancels: POST /v1/payments/{paymentKey}/cancel {cancelReason,
//     cancelAmount} with Idempotency-Key "gw-cancel-<refundOrderId>". Toss has
//     no merchant id for a cancel, so the refund order id is written at the end
//     of cancelReason as "[ref:<refundOrderId>]"; LookupRefund finds the cancel
//     by it in GET /v1/payments/{paymentKey}.
//   - Only KRW is charged; Toss amounts are whole won, the gateway's minor units.
//
// Outcomes: 2xx → a result; card refusals (REJECT_CARD_PAYMENT,
// REJECT_CARD_COMPANY, INVALID_CARD_*, EXCEED_* …) → Declined, with
// REJECT_CARD_PAYMENT mapped to insufficient_funds and REJECT_CARD_COMPANY to
// card_declined; PROVIDER_ERROR, CARD_PROCESSING_ERROR, 409 (a request with
// the same Idempotency-Key in flight), 5xx, unreadable answers, timeouts and
// resets → Unknown; other 4xx (bad key, invalid request, rate limits) and
// connections that could not be opened → NotProcessed.
package toss

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"gateway/psp"
)

// DefaultBaseURL is Toss Payments' API.
const DefaultBaseURL = "https://api.tosspayments.com"

// Config configures the adapter.
type Config struct {
	// SecretKey is the merchant's secret key (test_sk_… or live_sk_…). Secret.
	SecretKey string
	// BaseURL is DefaultBaseURL when empty; tests point it at a fake.
	BaseURL string
	// HTTPClient sends the requests; a client with a 60s backstop timeout
	// (Toss's advice for confirm) when nil. Deadlines come from the context.
	HTTPClient *http.Client
	// CreationWindow is how long after a confirm was sent it may still take
	// effect; 2 minutes when zero.
	CreationWindow time.Duration
}

// LogValue masks the secret key, keeping its test_/live_ prefix.
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
	if i := strings.Index(secret, "_sk_"); i >= 0 {
		return secret[:i+4] + "****"
	}
	if secret == "" {
		return ""
	}
	return "****"
}

// Adapter is a psp.Adapter for Toss Payments.
type Adapter struct {
	base   string
	auth   string
	client *http.Client
	window time.Duration
}

var _ psp.Adapter = (*Adapter)(nil)

// New returns an adapter, refusing a config it could not work with.
func New(cfg Config) (*Adapter, error) {
	if cfg.SecretKey == "" {
		return nil, errors.New("toss: SecretKey is required")
	}
	u, err := url.Parse(cfg.baseURL())
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("toss: base URL %q must be http(s)://host", cfg.BaseURL)
	}
	a := &Adapter{
		base:   cfg.baseURL(),
		auth:   "Basic " + base64.StdEncoding.EncodeToString([]byte(cfg.SecretKey+":")),
		client: cfg.HTTPClient,
		window: cfg.CreationWindow,
	}
	if a.client == nil {
		a.client = &http.Client{Timeout: 60 * time.Second}
	}
	if a.window <= 0 {
		a.window = 2 * time.Minute
	}
	return a, nil
}

// Toss's limits.
const (
	maxOrderIDLen    = 64
	maxPaymentKeyLen = 200
	maxCancelReason  = 200
	currency         = "KRW"
)

// orderIDPattern is Toss's rule for orderId; refund order ids follow it too,
// since they are written into cancelReason and matched back.
var orderIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{6,64}$`)

// Capabilities implements psp.Adapter. Toss confirms a payment once, for
// ever, so a repeated Charge never charges twice; its lookup reads the
// payment itself, so not found is authoritative once the creation window
// has passed.
func (a *Adapter) Capabilities() psp.Capabilities {
	return psp.Capabilities{
		Name:                "toss",
		AuthoritativeLookup: true,
		CreationWindow:      a.window,
		DedupesOrderID:      true,
		MaxOrderIDLen:       maxOrderIDLen,
	}
}

// payment is the part of Toss's Payment object the adapter reads.
type payment struct {
	PaymentKey    string   `json:"paymentKey"`
	OrderID       string   `json:"orderId"`
	Status        string   `json:"status"`
	TotalAmount   int64    `json:"totalAmount"`
	BalanceAmount int64    `json:"balanceAmount"`
	Currency      string   `json:"currency"`
	Cancels       []cancel `json:"cancels"`
	Failure       *struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"failure"`
}

type cancel struct {
	TransactionKey string `json:"transactionKey"`
	CancelReason   string `json:"cancelReason"`
	CancelAmount   int64  `json:"cancelAmount"`
	CancelStatus   string `json:"cancelStatus"`
	CanceledAt     string `json:"canceledAt"`
}

// apiError is Toss's error body.
type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Charge implements psp.Adapter: it confirms the payment req.PaymentMethod
// (the widget's paymentKey) for req.MerchantOrderID.
func (a *Adapter) Charge(ctx context.Context, req psp.ChargeRequest) (psp.Charge, error) {
	const op = "charge"
	if err := validateCharge(req); err != nil {
		return psp.Charge{}, &psp.Error{Class: psp.NotProcessed, Op: op, Err: err}
	}
	body := map[string]any{"paymentKey": req.PaymentMethod, "orderId": req.MerchantOrderID, "amount": req.Amount}
	status, raw, err := a.do(ctx, op, http.MethodPost, "/v1/payments/confirm", "gw-confirm-"+req.MerchantOrderID, body)
	if err != nil {
		return psp.Charge{}, err
	}
	if status == http.StatusOK {
		p, err := parsePayment(op, raw)
		if err != nil {
			return psp.Charge{}, err
		}
		return a.charged(op, req, p)
	}
	e, ok := parseError(raw)
	switch {
	case !ok:
		return psp.Charge{}, unknown(op, status, raw)
	case e.Code == "ALREADY_PROCESSED_PAYMENT" || e.Code == "DUPLICATED_ORDER_ID":
		// An earlier confirm of this order went through (its idempotency key
		// has expired, or another request raced it): that is the charge.
		p, err := a.payment(ctx, op, "/v1/payments/orders/"+url.PathEscape(req.MerchantOrderID))
		if err != nil {
			return psp.Charge{}, &psp.Error{Class: psp.Unknown, Op: op,
				Err: fmt.Errorf("toss answered %s and the order could not be read: %w", e.Code, err)}
		}
		return a.charged(op, req, p)
	}
	if code, declined := declineCode(e.Code); declined {
		return psp.Charge{MerchantOrderID: req.MerchantOrderID, Reference: req.PaymentMethod, Status: psp.Declined,
			DeclineCode: code, Amount: req.Amount, Currency: currency}, nil
	}
	return psp.Charge{}, classify(op, status, e)
}

// charged turns the payment Toss returned for req into the answer, refusing
// one that is not req's.
func (a *Adapter) charged(op string, req psp.ChargeRequest, p payment) (psp.Charge, error) {
	if p.OrderID != req.MerchantOrderID {
		return psp.Charge{}, &psp.Error{Class: psp.Unknown, Op: op,
			Err: fmt.Errorf("toss answered for order %q, asked for %q", p.OrderID, req.MerchantOrderID)}
	}
	c, err := toCharge(op, p)
	if err != nil {
		return psp.Charge{}, err
	}
	if c.Amount != req.Amount || c.Currency != req.Currency {
		return psp.Charge{}, &psp.Error{Class: psp.NotProcessed, Op: op, Err: fmt.Errorf("%w: order %s was confirmed for %d %s, now asked for %d %s",
			psp.ErrOrderConflict, req.MerchantOrderID, c.Amount, c.Currency, req.Amount, req.Currency)}
	}
	return c, nil
}

// Lookup implements psp.Adapter.
func (a *Adapter) Lookup(ctx context.Context, merchantOrderID string) (psp.Charge, error) {
	const op = "lookup"
	p, err := a.payment(ctx, op, "/v1/payments/orders/"+url.PathEscape(merchantOrderID))
	if err != nil {
		return psp.Charge{}, err
	}
	if p.OrderID != merchantOrderID {
		return psp.Charge{}, &psp.Error{Class: psp.Unknown, Op: op,
			Err: fmt.Errorf("toss answered for order %q, asked for %q", p.OrderID, merchantOrderID)}
	}
	return toCharge(op, p)
}

// toCharge reads a payment's status as a charge: ErrNotFound for one never
// confirmed, Unknown for one whose outcome is still open.
func toCharge(op string, p payment) (psp.Charge, error) {
	c := psp.Charge{MerchantOrderID: p.OrderID, Reference: p.PaymentKey, Amount: p.TotalAmount, Currency: p.Currency}
	switch p.Status {
	case "DONE", "CANCELED", "PARTIAL_CANCELED":
		c.Status = psp.Succeeded
	case "ABORTED":
		c.Status, c.DeclineCode = psp.Declined, psp.DeclineCardDeclined
		if p.Failure != nil {
			if code, ok := declineCode(p.Failure.Code); ok {
				c.DeclineCode = code
			} else if p.Failure.Code != "" {
				c.DeclineCode = strings.ToLower(p.Failure.Code)
			}
		}
	case "EXPIRED":
		c.Status, c.DeclineCode = psp.Declined, "expired"
	case "READY", "IN_PROGRESS":
		return psp.Charge{}, psp.ErrNotFound
	default: // WAITING_FOR_DEPOSIT (virtual accounts) and anything new
		return psp.Charge{}, &psp.Error{Class: psp.Unknown, Op: op, Err: fmt.Errorf("toss payment status %q", p.Status)}
	}
	return c, nil
}

// payment GETs one payment; 404 NOT_FOUND_PAYMENT is psp.ErrNotFound.
func (a *Adapter) payment(ctx context.Context, op, path string) (payment, error) {
	status, raw, err := a.do(ctx, op, http.MethodGet, path, "", nil)
	if err != nil {
		return payment{}, err
	}
	if status == http.StatusOK {
		return parsePayment(op, raw)
	}
	e, ok := parseError(raw)
	switch {
	case !ok:
		return payment{}, unknown(op, status, raw)
	case status == http.StatusNotFound && e.Code == "NOT_FOUND_PAYMENT":
		return payment{}, psp.ErrNotFound
	}
	return payment{}, classify(op, status, e)
}

// Refund implements psp.Adapter by cancelling (part of) the payment.
func (a *Adapter) Refund(ctx context.Context, req psp.RefundRequest) (psp.Refund, error) {
	const op = "refund"
	if err := validateRefund(req); err != nil {
		return psp.Refund{}, &psp.Error{Class: psp.NotProcessed, Op: op, Err: err}
	}
	body := map[string]any{"cancelReason": cancelReason(req.Reason, req.RefundOrderID), "cancelAmount": req.Amount}
	path := "/v1/payments/" + url.PathEscape(req.ChargeReference) + "/cancel"
	status, raw, err := a.do(ctx, op, http.MethodPost, path, "gw-cancel-"+req.RefundOrderID, body)
	if err != nil {
		return psp.Refund{}, err
	}
	if status == http.StatusOK {
		p, err := parsePayment(op, raw)
		if err != nil {
			return psp.Refund{}, err
		}
		r, err := toRefund(op, p, req.RefundOrderID)
		if errors.Is(err, psp.ErrNotFound) {
			return psp.Refund{}, &psp.Error{Class: psp.Unknown, Op: op, Err: errors.New("toss answered without the cancel it made")}
		}
		if err != nil {
			return psp.Refund{}, err
		}
		return refunded(op, req, r)
	}
	e, ok := parseError(raw)
	if !ok {
		return psp.Refund{}, unknown(op, status, raw)
	}
	declined := psp.Refund{RefundOrderID: req.RefundOrderID, MerchantOrderID: req.MerchantOrderID,
		Status: psp.RefundDeclined, Amount: req.Amount, Currency: req.Currency}
	switch e.Code {
	case "ALREADY_CANCELED_PAYMENT", "NOT_CANCELABLE_AMOUNT", "EXCEED_CANCEL_AMOUNT_DISCOUNT_AMOUNT":
		// Nothing (or too little) is left: perhaps because this very refund
		// went through earlier and its idempotency key has expired.
		r, err := a.LookupRefund(ctx, req.ChargeReference, req.RefundOrderID)
		switch {
		case err == nil:
			return refunded(op, req, r)
		case errors.Is(err, psp.ErrNotFound):
			declined.DeclineCode = psp.RefundDeclineAmountExceeded
			return declined, nil
		}
		return psp.Refund{}, &psp.Error{Class: psp.Unknown, Op: op,
			Err: fmt.Errorf("toss answered %s and the payment could not be read: %w", e.Code, err)}
	case "NOT_CANCELABLE_PAYMENT":
		declined.DeclineCode = psp.RefundDeclineNotRefundable
		return declined, nil
	case "NOT_FOUND_PAYMENT":
		declined.DeclineCode = psp.RefundDeclineChargeNotFound
		return declined, nil
	}
	return psp.Refund{}, classify(op, status, e)
}

// refunded checks that the cancel found for req is req's.
func refunded(op string, req psp.RefundRequest, r psp.Refund) (psp.Refund, error) {
	if r.Amount != req.Amount || r.Currency != req.Currency {
		return psp.Refund{}, &psp.Error{Class: psp.NotProcessed, Op: op, Err: fmt.Errorf("%w: refund %s was %d %s, now asked for %d %s",
			psp.ErrOrderConflict, req.RefundOrderID, r.Amount, r.Currency, req.Amount, req.Currency)}
	}
	return r, nil
}

// LookupRefund implements psp.Adapter.
func (a *Adapter) LookupRefund(ctx context.Context, chargeReference, refundOrderID string) (psp.Refund, error) {
	const op = "lookup_refund"
	p, err := a.payment(ctx, op, "/v1/payments/"+url.PathEscape(chargeReference))
	if err != nil {
		return psp.Refund{}, err
	}
	return toRefund(op, p, refundOrderID)
}

// toRefund finds the cancel made for refundOrderID in p.
func toRefund(op string, p payment, refundOrderID string) (psp.Refund, error) {
	tag := refTag(refundOrderID)
	for _, c := range p.Cancels {
		if !strings.HasSuffix(c.CancelReason, tag) {
			continue
		}
		r := psp.Refund{RefundOrderID: refundOrderID, MerchantOrderID: p.OrderID, Reference: c.TransactionKey,
			Amount: c.CancelAmount, Currency: p.Currency}
		switch c.CancelStatus {
		case "DONE":
			r.Status = psp.RefundSucceeded
		case "IN_PROGRESS", "":
			r.Status = psp.RefundPending
		default:
			return psp.Refund{}, &psp.Error{Class: psp.Unknown, Op: op, Err: fmt.Errorf("toss cancel status %q", c.CancelStatus)}
		}
		return r, nil
	}
	return psp.Refund{}, psp.ErrNotFound
}

func refTag(refundOrderID string) string { return "[ref:" + refundOrderID + "]" }

// cancelReason is reason followed by the refund's tag, within Toss's limit.
func cancelReason(reason, refundOrderID string) string {
	tag := refTag(refundOrderID)
	if reason == "" {
		reason = "refund"
	}
	room := maxCancelReason - utf8.RuneCountInString(tag) - 1
	if utf8.RuneCountInString(reason) > room {
		reason = string([]rune(reason)[:room])
	}
	return reason + " " + tag
}

// declineCode maps Toss's card refusals onto the gateway's decline codes.
func declineCode(code string) (string, bool) {
	switch code {
	case "REJECT_CARD_PAYMENT", "REJECT_ACCOUNT_PAYMENT":
		return psp.DeclineInsufficientFunds, true
	case "REJECT_CARD_COMPANY":
		return psp.DeclineCardDeclined, true
	case "NOT_FOUND_PAYMENT":
		// The paymentKey does not exist: not a payment method Toss knows.
		return psp.DeclineInvalidPaymentMethod, true
	case "NOT_FOUND_PAYMENT_SESSION":
		return "payment_session_expired", true
	case "INVALID_CARD_EXPIRATION", "INVALID_STOPPED_CARD", "INVALID_CARD_LOST_OR_STOLEN", "INVALID_CARD_NUMBER",
		"INVALID_CARD_INSTALLMENT_PLAN", "INVALID_PASSWORD", "INVALID_UNREGISTERED_SUBMALL",
		"EXCEED_MAX_DAILY_PAYMENT_COUNT", "EXCEED_MAX_PAYMENT_AMOUNT", "EXCEED_MAX_AMOUNT", "EXCEED_MAX_AUTH_COUNT",
		"EXCEED_MAX_ONE_DAY_WITHDRAW_AMOUNT", "EXCEED_MAX_ONE_TIME_WITHDRAW_AMOUNT",
		"NOT_SUPPORTED_INSTALLMENT_PLAN_CARD_OR_MERCHANT", "NOT_SUPPORTED_MONTHLY_INSTALLMENT_PLAN",
		"NOT_AVAILABLE_PAYMENT", "RESTRICTED_TRANSFER_ACCOUNT", "REJECT_TOSSPAY_INVALID_ACCOUNT":
		return strings.ToLower(code), true
	}
	return "", false
}

// classify places an error answer that is neither a result nor handled by
// its caller.
func classify(op string, status int, e apiError) error {
	err := fmt.Errorf("toss answered %d %s: %s", status, e.Code, e.Message)
	switch {
	case e.Code == "PROVIDER_ERROR" || e.Code == "CARD_PROCESSING_ERROR":
		// The card company failed mid-approval: Toss may hold an approval.
		return &psp.Error{Class: psp.Unknown, Op: op, Err: err}
	case status == http.StatusConflict || status == http.StatusRequestTimeout || status == http.StatusNotFound:
		return &psp.Error{Class: psp.Unknown, Op: op, Err: err}
	case status >= 400 && status < 500:
		return &psp.Error{Class: psp.NotProcessed, Op: op, Err: err}
	}
	return &psp.Error{Class: psp.Unknown, Op: op, Err: err}
}

func unknown(op string, status int, raw []byte) error {
	return &psp.Error{Class: psp.Unknown, Op: op, Err: fmt.Errorf("toss answered %d with an unreadable body %.100q", status, raw)}
}

func parseError(raw []byte) (apiError, bool) {
	var e apiError
	if err := json.Unmarshal(raw, &e); err != nil || e.Code == "" {
		return apiError{}, false
	}
	return e, true
}

func parsePayment(op string, raw []byte) (payment, error) {
	var p payment
	if err := json.Unmarshal(raw, &p); err != nil || p.PaymentKey == "" || p.Status == "" {
		return payment{}, &psp.Error{Class: psp.Unknown, Op: op, Err: fmt.Errorf("unreadable payment %.100q: %v", raw, err)}
	}
	return p, nil
}

func validateCharge(req psp.ChargeRequest) error {
	switch {
	case !orderIDPattern.MatchString(req.MerchantOrderID):
		return fmt.Errorf("order id %q is not 6–64 characters of [A-Za-z0-9_-]", req.MerchantOrderID)
	case req.Currency != currency:
		return fmt.Errorf("toss charges KRW only, not %q", req.Currency)
	case req.Amount <= 0:
		return fmt.Errorf("amount %d is not positive", req.Amount)
	case req.PaymentMethod == "" || len(req.PaymentMethod) > maxPaymentKeyLen:
		return fmt.Errorf("payment method must be a Toss paymentKey of 1–%d characters", maxPaymentKeyLen)
	}
	return nil
}

func validateRefund(req psp.RefundRequest) error {
	switch {
	case !orderIDPattern.MatchString(req.RefundOrderID):
		return fmt.Errorf("refund order id %q is not 6–64 characters of [A-Za-z0-9_-]", req.RefundOrderID)
	case req.Currency != currency:
		return fmt.Errorf("toss refunds KRW only, not %q", req.Currency)
	case req.Amount <= 0:
		return fmt.Errorf("amount %d is not positive", req.Amount)
	case req.ChargeReference == "":
		return errors.New("the charge reference (paymentKey) is required")
	}
	return nil
}

// maxAnswer bounds how much of an answer is read.
const maxAnswer = 1 << 20

// do sends one request and reads the whole answer; only a failed round trip
// is an error, classified.
func (a *Adapter) do(ctx context.Context, op, method, path, idemKey string, in any) (int, []byte, error) {
	var rd io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, nil, &psp.Error{Class: psp.NotProcessed, Op: op, Err: err}
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base+path, rd)
	if err != nil {
		return 0, nil, &psp.Error{Class: psp.NotProcessed, Op: op, Err: err}
	}
	req.Header.Set("Authorization", a.auth)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	res, err := a.client.Do(req)
	if err != nil {
		return 0, nil, psp.TransportError(op, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, maxAnswer))
	if err != nil {
		return 0, nil, &psp.Error{Class: psp.Unknown, Op: op, Err: fmt.Errorf("reading the %d answer: %w", res.StatusCode, err)}
	}
	return res.StatusCode, raw, nil
}
