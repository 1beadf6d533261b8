// Package toss owns the Toss Payments adapter: payments confirmed through
// Toss's core API (https://api.tosspayments.com), written against its
// documented HTTP API at version APIVersion, which every request pins.
//
// How the gateway's request maps onto Toss:
//   - Toss payments start in the customer's browser: the payment widget
//     authenticates the payment for an orderId and amount and hands the
//     merchant's front end a paymentKey. The gateway's payment_method field
//     carries that paymentKey, and the widget must have been opened with
//     orderId = the gateway's merchant order id (payments.MerchantOrderID;
//     "ord_" + 24 hex digits, which fits Toss's 6–64 characters of
//     [A-Za-z0-9_-]).
//   - Charge confirms: POST /v1/payments/confirm {paymentKey, orderId, amount}
//     with Idempotency-Key "gw-confirm-<orderId>". Toss confirms a payment
//     once: a repeat after the idempotency key expired is answered
//     ALREADY_PROCESSED_PAYMENT or DUPLICATED_ORDER_ID, and the adapter then
//     returns the payment it finds for the order.
//   - Lookup: GET /v1/payments/orders/{orderId}. DONE is a succeeded charge,
//     and so are CANCELED and PARTIAL_CANCELED once approved (refunds are
//     separate); WAITING_FOR_DEPOSIT (a virtual account) is Pending;
//     ABORTED, EXPIRED, an expired virtual account and a payment cancelled
//     before it was ever approved are declined; READY and IN_PROGRESS
//     (authenticated, never confirmed) are psp.ErrNotFound, as is 404
//     NOT_FOUND_PAYMENT.
//   - Refund cancels: POST /v1/payments/{paymentKey}/cancel {cancelReason,
//     cancelAmount} with Idempotency-Key "gw-cancel-<refundOrderId>". Toss has
//     no merchant id for a cancel, so the refund order id is written at the end
//     of cancelReason as "[ref:<refundOrderId>]"; LookupRefund finds the cancel
//     by it in GET /v1/payments/{paymentKey}. A cancel without cancelStatus
//     (answers older than 2022-06-08) is a done one: those answers list
//     finished cancels only.
//   - The adapter is a psp.Ledger over GET /v1/transactions (see
//     ListTransactions). Toss's confirm takes no metadata, so a charge's
//     psp.ChargeRequest.MerchantID is not sent and the listing's lines carry
//     none.
//   - Only KRW is taken, from 100 won (Toss's smallest card payment); Toss
//     amounts are whole won, the gateway's minor units. Toss writes amounts as
//     JSON numbers that may carry a fraction part ("15000.0"); the adapter
//     reads them exactly and refuses any amount that is not whole.
//
// Outcomes follow Toss's documented error codes (confirmCodes, cancelCodes):
// card and account refusals are declines, the raw code kept and mapped onto
// the shared decline codes where one fits; requests Toss can never accept
// (BELOW_MINIMUM_AMOUNT, INVALID_REQUEST, …) are Rejected; PROVIDER_ERROR,
// CARD_PROCESSING_ERROR, 409, 5xx, unreadable answers, answers for another
// order, timeouts and resets are Unknown; 429, authentication failures, the
// documented out-of-hours codes and connections that could not be opened are
// NotProcessed. A 4xx with a code the adapter does not know is a refusal, but
// it is believed only after a lookup shows that the order holds no approved
// payment.
package toss

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"gateway/psp"
	"gateway/psp/roundtrip"
)

// DefaultBaseURL is Toss Payments' API.
const DefaultBaseURL = "https://api.tosspayments.com"

// APIVersion is the Toss API version the adapter is written against, sent
// with every request (TossPayments-API-Version) so that a change of the
// account's default version in Toss's developer centre changes nothing here.
const APIVersion = "2022-11-16"

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
	// Account is the label the adapter advertises in its Capabilities (a
	// merchant id, say); empty by default.
	Account string
	// ClientKey is the client key (test_ck_…, live_ck_…, or a widget's
	// test_gck_…) that front ends open Toss's payment widget with: public,
	// handed out in two-step checkouts. Empty when front ends have it already.
	ClientKey string
	// KnownOrder reports whether the gateway holds a payment with an order
	// id. A notification about another order is acknowledged without asking
	// Toss about it (Toss does not sign its notifications: anyone can post
	// one). Nil asks Toss about any order.
	KnownOrder func(ctx context.Context, orderID string) (bool, error)
}

// LogValue masks the secret key, keeping its test_/live_ prefix.
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("base_url", c.baseURL()),
		slog.String("secret_key", mask(c.SecretKey)),
		slog.Duration("creation_window", c.CreationWindow),
		slog.String("account", c.Account),
		slog.String("client_key", c.ClientKey),
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
	rt         *roundtrip.Client
	window     time.Duration
	account    string
	clientKey  string
	knownOrder func(ctx context.Context, orderID string) (bool, error)
	// lookups coalesces the notifications' identical fetches.
	lookups lookups
}

var (
	_ psp.Adapter = (*Adapter)(nil)
	_ psp.Ledger  = (*Adapter)(nil)
)

// New returns an adapter, refusing a config it could not work with.
func New(cfg Config) (*Adapter, error) {
	if cfg.SecretKey == "" {
		return nil, errors.New("toss: SecretKey is required")
	}
	u, err := url.Parse(cfg.baseURL())
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("toss: base URL %q must be http(s)://host", cfg.BaseURL)
	}
	header := http.Header{}
	header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(cfg.SecretKey+":")))
	header.Set("TossPayments-API-Version", APIVersion)
	a := &Adapter{rt: roundtrip.New(cfg.baseURL(), cfg.HTTPClient, header), window: cfg.CreationWindow, account: cfg.Account,
		clientKey: cfg.ClientKey, knownOrder: cfg.KnownOrder}
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
	// minAmount is Toss's smallest payment: 100 won by card, 200 by account
	// transfer (BELOW_MINIMUM_AMOUNT, docs.tosspayments.com/reference/error-codes).
	minAmount = 100
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
		Account:             a.account,
		Currencies:          []psp.Currency{{Code: currency, ISOExponent: 0, Exponent: 0, Min: minAmount}},
		Checkout:            psp.Checkout{Client: psp.ClientTossWidget, PublishableKey: a.clientKey, ResultField: psp.ResultPaymentKey},
		// The adapter's confirm takes the money at once: it cannot authorize
		// now and capture later, and is no psp.Capturer.
		ManualCapture: false,
	}
}

// payment is the part of Toss's Payment object the adapter reads. Amounts
// are json.Number: Toss writes them as numbers that may have a fraction part.
type payment struct {
	PaymentKey     string      `json:"paymentKey"`
	OrderID        string      `json:"orderId"`
	Status         string      `json:"status"`
	ApprovedAt     string      `json:"approvedAt"`
	TotalAmount    json.Number `json:"totalAmount"`
	BalanceAmount  json.Number `json:"balanceAmount"`
	Currency       string      `json:"currency"`
	Cancels        []cancel    `json:"cancels"`
	VirtualAccount *struct {
		Expired bool `json:"expired"`
	} `json:"virtualAccount"`
	Failure *apiError `json:"failure"`
}

type cancel struct {
	TransactionKey string      `json:"transactionKey"`
	CancelReason   string      `json:"cancelReason"`
	CancelAmount   json.Number `json:"cancelAmount"`
	CancelStatus   string      `json:"cancelStatus"`
	CanceledAt     string      `json:"canceledAt"`
}

// apiError is Toss's error body, and a payment's failure.
type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// verdict is what a Toss error code means for the money.
type verdict int

const (
	// decline: a definitive refusal of the customer's means of payment.
	decline verdict = iota + 1
	// reject: Toss can never accept the request as sent.
	reject
	// notProcessed: Toss did nothing; the same request may succeed later.
	notProcessed
	// unknown: Toss (or the card company behind it) may have approved.
	unknown
	// alreadyDone: an earlier request did the work; read what it did.
	alreadyDone
)

type rule struct {
	verdict verdict
	// shared is the shared decline code a decline maps onto ("" for the raw
	// code in lower case).
	shared string
}

// confirmCodes places every error code Toss documents for the confirm API,
// from https://docs.tosspayments.com/reference/error-codes (결제 승인). A code
// missing here is handled as documented in the package comment.
var confirmCodes = map[string]rule{
	// An earlier confirm of the order went through.
	"ALREADY_PROCESSED_PAYMENT": {alreadyDone, ""},
	"DUPLICATED_ORDER_ID":       {alreadyDone, ""},
	// "A temporary error occurred; retry": the card company failed mid-way.
	"PROVIDER_ERROR":        {unknown, ""},
	"CARD_PROCESSING_ERROR": {unknown, ""},
	// Toss's own failures, reported with 500.
	"FAILED_PAYMENT_INTERNAL_SYSTEM_PROCESSING": {unknown, ""},
	"FAILED_INTERNAL_SYSTEM_PROCESSING":         {unknown, ""},
	"UNKNOWN_PAYMENT_ERROR":                     {unknown, ""},
	// The request as sent can never succeed.
	"INVALID_REQUEST":              {reject, ""},
	"BELOW_MINIMUM_AMOUNT":         {reject, ""},
	"INVALID_UNREGISTERED_SUBMALL": {reject, ""},
	"NOT_REGISTERED_BUSINESS":      {reject, ""},
	"NOT_SUPPORTED_METHOD":         {reject, ""},
	"FORBIDDEN_REQUEST":            {reject, ""},
	// Our credentials: Toss did nothing, and will once the key is fixed.
	"UNAUTHORIZED_KEY":            {notProcessed, ""},
	"INVALID_API_KEY":             {notProcessed, ""},
	"INCORRECT_BASIC_AUTH_FORMAT": {notProcessed, ""},
	// Documented as out of service hours: try again later.
	"NOT_AVAILABLE_PAYMENT": {notProcessed, ""},
	"NOT_AVAILABLE_BANK":    {notProcessed, ""},
	"TOO_MANY_REQUESTS":     {notProcessed, ""},
	// The same Idempotency-Key is being processed.
	"IDEMPOTENT_REQUEST_PROCESSING": {unknown, ""},
	// Refusals of the customer's card or account.
	"REJECT_CARD_PAYMENT":    {decline, psp.DeclineInsufficientFunds},
	"REJECT_ACCOUNT_PAYMENT": {decline, psp.DeclineInsufficientFunds},
	"REJECT_CARD_COMPANY":    {decline, psp.DeclineCardDeclined},
	"INVALID_REJECT_CARD":    {decline, psp.DeclineCardDeclined},
	// The paymentKey is not one Toss knows: not a payment method.
	"NOT_FOUND_PAYMENT":         {decline, psp.DeclineInvalidPaymentMethod},
	"NOT_FOUND_PAYMENT_SESSION": {decline, "payment_session_expired"},
	"NOT_ALLOWED_POINT_USE":     {decline, ""},
	"INVALID_CARD_EXPIRATION":   {decline, ""}, "INVALID_STOPPED_CARD": {decline, ""},
	"INVALID_CARD_LOST_OR_STOLEN": {decline, ""}, "INVALID_CARD_NUMBER": {decline, ""},
	"INVALID_CARD_INSTALLMENT_PLAN": {decline, ""}, "INVALID_PASSWORD": {decline, ""},
	"EXCEED_MAX_CARD_INSTALLMENT_PLAN": {decline, ""}, "EXCEED_MAX_DAILY_PAYMENT_COUNT": {decline, ""},
	"EXCEED_MAX_PAYMENT_AMOUNT": {decline, ""}, "EXCEED_MAX_AMOUNT": {decline, ""},
	"EXCEED_MAX_AUTH_COUNT": {decline, ""}, "EXCEED_MAX_ONE_DAY_AMOUNT": {decline, ""},
	"EXCEED_MAX_ONE_DAY_WITHDRAW_AMOUNT": {decline, ""}, "EXCEED_MAX_ONE_TIME_WITHDRAW_AMOUNT": {decline, ""},
	"NOT_SUPPORTED_INSTALLMENT_PLAN_CARD_OR_MERCHANT": {decline, ""}, "NOT_SUPPORTED_MONTHLY_INSTALLMENT_PLAN": {decline, ""},
	"RESTRICTED_TRANSFER_ACCOUNT": {decline, ""}, "REJECT_TOSSPAY_INVALID_ACCOUNT": {decline, ""},
	"INVALID_ACCOUNT_INFO_RE_REGISTER": {decline, ""}, "FDS_ERROR": {decline, ""},
}

// cancelCodes places the error codes Toss documents for the cancel API
// (결제 취소) that are not handled by name in Refund.
var cancelCodes = map[string]rule{
	"FORBIDDEN_CONSECUTIVE_REQUEST":     {notProcessed, ""},
	"FAILED_REFUND_PROCESS":             {unknown, ""},
	"FAILED_METHOD_HANDLING_CANCEL":     {unknown, ""},
	"FAILED_INTERNAL_SYSTEM_PROCESSING": {unknown, ""},
	"INVALID_REQUEST":                   {reject, ""},
	"FORBIDDEN_REQUEST":                 {reject, ""},
	"UNAUTHORIZED_KEY":                  {notProcessed, ""},
	"INVALID_API_KEY":                   {notProcessed, ""},
	"TOO_MANY_REQUESTS":                 {notProcessed, ""},
}

// Charge implements psp.Adapter: it confirms the payment req.PaymentMethod
// (the widget's paymentKey) for req.MerchantOrderID.
func (a *Adapter) Charge(ctx context.Context, req psp.ChargeRequest) (psp.Charge, error) {
	const op = "charge"
	if err := a.validateCharge(req); err != nil {
		return psp.Charge{}, &psp.Error{Class: psp.Rejected, Op: op, Err: err}
	}
	ans, err := a.rt.Do(ctx, roundtrip.Request{Op: op, Method: http.MethodPost, Path: "/v1/payments/confirm",
		IdempotencyKey: "gw-confirm-" + req.MerchantOrderID,
		Body:           map[string]any{"paymentKey": req.PaymentMethod, "orderId": req.MerchantOrderID, "amount": req.Amount}})
	if err != nil {
		return psp.Charge{}, err
	}
	if ans.Status == http.StatusOK {
		p, err := parsePayment(op, ans)
		if err != nil {
			return psp.Charge{}, err
		}
		c, err := toCharge(op, p, req.MerchantOrderID)
		if errors.Is(err, psp.ErrNotFound) {
			return psp.Charge{}, &psp.Error{Class: psp.Unknown, Op: op, Err: fmt.Errorf("toss answered the confirm with a payment still %s", p.Status)}
		}
		if err != nil {
			return psp.Charge{}, err
		}
		// The answer to this very confirm: any difference is a mismatch.
		if err := psp.MatchCharge(op, req, c); err != nil {
			return psp.Charge{}, err
		}
		return c, nil
	}
	e, ok := parseError(ans)
	if !ok {
		return psp.Charge{}, roundtrip.Unreadable(op, ans)
	}
	r, known := confirmCodes[e.Code]
	switch {
	case known && r.verdict == alreadyDone:
		// An earlier confirm of this order went through (its idempotency key
		// has expired, or another request raced it): that is the charge.
		return a.earlier(ctx, op, req, e)
	case known && r.verdict == decline:
		return a.declined(req, e, r.shared), nil
	case known:
		return psp.Charge{}, classify(op, ans.Status, e, r.verdict)
	}
	if class, ok := roundtrip.StatusClass(ans.Status); ok {
		return psp.Charge{}, classify(op, ans.Status, e, verdictOf(class))
	}
	if ans.Status == http.StatusUnauthorized {
		return psp.Charge{}, classify(op, ans.Status, e, notProcessed)
	}
	// A refusal Toss added after this table was written. Believe it once the
	// order is seen to hold no approved payment.
	c, err := a.Lookup(ctx, req.MerchantOrderID)
	switch {
	case errors.Is(err, psp.ErrNotFound), err == nil && c.Status == psp.Declined:
		return a.declined(req, e, ""), nil
	case err == nil:
		if err := psp.MatchCharge(op, req, c); err != nil {
			return psp.Charge{}, err
		}
		return c, nil
	}
	return psp.Charge{}, &psp.Error{Class: psp.Unknown, Op: op, Code: e.Code,
		Err: fmt.Errorf("toss answered %d %s and the order could not be read: %w", ans.Status, e.Code, err)}
}

func (a *Adapter) declined(req psp.ChargeRequest, e apiError, shared string) psp.Charge {
	return psp.Charge{MerchantOrderID: req.MerchantOrderID, Reference: req.PaymentMethod, Status: psp.Declined,
		DeclineCode: declineCode(e.Code, shared), Code: e.Code, Amount: req.Amount, Currency: req.Currency}
}

// earlier returns the payment an earlier confirm of req's order made.
func (a *Adapter) earlier(ctx context.Context, op string, req psp.ChargeRequest, e apiError) (psp.Charge, error) {
	c, err := a.Lookup(ctx, req.MerchantOrderID)
	if err != nil {
		return psp.Charge{}, &psp.Error{Class: psp.Unknown, Op: op, Code: e.Code,
			Err: fmt.Errorf("toss answered %s and the order could not be read: %w", e.Code, err)}
	}
	if c.Amount != req.Amount || c.Currency != req.Currency {
		// The order was confirmed for another amount: this request did nothing.
		return psp.Charge{}, &psp.Error{Class: psp.NotProcessed, Op: op, Code: e.Code, Err: fmt.Errorf("%w: order %s was confirmed for %d %s, now asked for %d %s",
			psp.ErrOrderConflict, req.MerchantOrderID, c.Amount, c.Currency, req.Amount, req.Currency)}
	}
	return c, nil
}

// Lookup implements psp.Adapter.
func (a *Adapter) Lookup(ctx context.Context, merchantOrderID string) (psp.Charge, error) {
	const op = "lookup"
	if merchantOrderID == "" {
		return psp.Charge{}, &psp.Error{Class: psp.Rejected, Op: op, Err: errors.New("empty order id")}
	}
	p, err := a.payment(ctx, op, "/v1/payments/orders/"+url.PathEscape(merchantOrderID))
	if err != nil {
		return psp.Charge{}, err
	}
	return toCharge(op, p, merchantOrderID)
}

// toCharge reads a payment's status as a charge for merchantOrderID:
// ErrNotFound for one never confirmed, Unknown for one that is another
// order's or whose state the adapter does not know.
func toCharge(op string, p payment, merchantOrderID string) (psp.Charge, error) {
	if p.OrderID != merchantOrderID {
		return psp.Charge{}, &psp.Error{Class: psp.Unknown, Op: op,
			Err: fmt.Errorf("%w: toss answered for order %q, asked for %q", psp.ErrMismatch, p.OrderID, merchantOrderID)}
	}
	total, err := whole(p.TotalAmount)
	if err != nil {
		return psp.Charge{}, &psp.Error{Class: psp.Unknown, Op: op, Err: fmt.Errorf("payment %s totalAmount: %w", p.PaymentKey, err)}
	}
	c := psp.Charge{MerchantOrderID: p.OrderID, Reference: p.PaymentKey, Amount: total, Currency: p.Currency}
	declined := func(code string) (psp.Charge, error) {
		c.Status, c.Code, c.DeclineCode = psp.Declined, code, declineCode(code, "")
		if r, ok := confirmCodes[code]; ok && r.verdict == decline {
			c.DeclineCode = declineCode(code, r.shared)
		}
		return c, nil
	}
	switch p.Status {
	case "DONE":
		c.Status = psp.Succeeded
	case "CANCELED", "PARTIAL_CANCELED":
		if p.ApprovedAt == "" {
			// Cancelled before it was ever approved (a virtual account
			// cancelled before its deposit): no money was taken.
			return declined(p.Status)
		}
		c.Status = psp.Succeeded
	case "WAITING_FOR_DEPOSIT":
		if p.VirtualAccount != nil && p.VirtualAccount.Expired {
			// The deposit deadline passed: no money can arrive any more.
			return declined("VIRTUAL_ACCOUNT_EXPIRED")
		}
		c.Status = psp.Pending
	case "ABORTED", "EXPIRED":
		if p.Failure != nil && p.Failure.Code != "" {
			return declined(p.Failure.Code)
		}
		if p.Status == "ABORTED" {
			c.Status, c.Code, c.DeclineCode = psp.Declined, p.Status, psp.DeclineCardDeclined
			return c, nil
		}
		return declined(p.Status)
	case "READY", "IN_PROGRESS":
		return psp.Charge{}, psp.ErrNotFound
	default:
		return psp.Charge{}, &psp.Error{Class: psp.Unknown, Op: op, Err: fmt.Errorf("toss payment status %q", p.Status)}
	}
	return c, nil
}

// payment GETs one payment; 404 NOT_FOUND_PAYMENT is psp.ErrNotFound.
func (a *Adapter) payment(ctx context.Context, op, path string) (payment, error) {
	ans, err := a.rt.Do(ctx, roundtrip.Request{Op: op, Method: http.MethodGet, Path: path})
	if err != nil {
		return payment{}, err
	}
	if ans.Status == http.StatusOK {
		return parsePayment(op, ans)
	}
	e, ok := parseError(ans)
	switch {
	case !ok:
		return payment{}, roundtrip.Unreadable(op, ans)
	case ans.Status == http.StatusNotFound && e.Code == "NOT_FOUND_PAYMENT":
		return payment{}, psp.ErrNotFound
	}
	return payment{}, unanswered(op, ans.Status, e)
}

// unanswered classifies a read (a lookup, a listing page) that Toss refused
// with e: NotProcessed for 429 and an authentication failure, Unknown
// otherwise. A lookup that cannot answer is never "not found": the caller
// would charge again on it.
func unanswered(op string, status int, e apiError) error {
	v := unknown
	if class, ok := roundtrip.StatusClass(status); ok && class == psp.NotProcessed || status == http.StatusUnauthorized {
		v = notProcessed
	}
	return classify(op, status, e, v)
}

// Refund implements psp.Adapter by cancelling (part of) the payment.
func (a *Adapter) Refund(ctx context.Context, req psp.RefundRequest) (psp.Refund, error) {
	const op = "refund"
	if err := a.validateRefund(req); err != nil {
		return psp.Refund{}, &psp.Error{Class: psp.Rejected, Op: op, Err: err}
	}
	ans, err := a.rt.Do(ctx, roundtrip.Request{Op: op, Method: http.MethodPost,
		Path:           "/v1/payments/" + url.PathEscape(req.ChargeReference) + "/cancel",
		IdempotencyKey: "gw-cancel-" + req.RefundOrderID,
		Body:           map[string]any{"cancelReason": cancelReason(req.Reason, req.RefundOrderID), "cancelAmount": req.Amount}})
	if err != nil {
		return psp.Refund{}, err
	}
	if ans.Status == http.StatusOK {
		p, err := parsePayment(op, ans)
		if err != nil {
			return psp.Refund{}, err
		}
		r, err := toRefund(op, p, req.RefundOrderID)
		if errors.Is(err, psp.ErrNotFound) {
			return psp.Refund{}, &psp.Error{Class: psp.Unknown, Op: op,
				Err: fmt.Errorf("%w: toss answered without a cancel for refund %s", psp.ErrMismatch, req.RefundOrderID)}
		}
		if err != nil {
			return psp.Refund{}, err
		}
		if err := psp.MatchRefund(op, req, r); err != nil {
			return psp.Refund{}, err
		}
		return r, nil
	}
	e, ok := parseError(ans)
	if !ok {
		return psp.Refund{}, roundtrip.Unreadable(op, ans)
	}
	declined := psp.Refund{RefundOrderID: req.RefundOrderID, MerchantOrderID: req.MerchantOrderID,
		Status: psp.RefundDeclined, Code: e.Code, Amount: req.Amount, Currency: req.Currency}
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
		return psp.Refund{}, &psp.Error{Class: psp.Unknown, Op: op, Code: e.Code,
			Err: fmt.Errorf("toss answered %s and the payment could not be read: %w", e.Code, err)}
	case "NOT_CANCELABLE_PAYMENT", "NOT_ALLOWED_PARTIAL_REFUND", "NOT_ALLOWED_PARTIAL_REFUND_WAITING_DEPOSIT",
		"EXCEED_MAX_REFUND_DUE", "NOT_CANCELABLE_PAYMENT_FOR_DORMANT_USER":
		declined.DeclineCode = psp.RefundDeclineNotRefundable
		return declined, nil
	case "NOT_FOUND_PAYMENT":
		declined.DeclineCode = psp.RefundDeclineChargeNotFound
		return declined, nil
	}
	if r, ok := cancelCodes[e.Code]; ok {
		return psp.Refund{}, classify(op, ans.Status, e, r.verdict)
	}
	if class, ok := roundtrip.StatusClass(ans.Status); ok {
		return psp.Refund{}, classify(op, ans.Status, e, verdictOf(class))
	}
	if ans.Status == http.StatusUnauthorized {
		return psp.Refund{}, classify(op, ans.Status, e, notProcessed)
	}
	// A refusal the table does not know: believed once the cancel is seen
	// not to exist.
	r, err := a.LookupRefund(ctx, req.ChargeReference, req.RefundOrderID)
	switch {
	case errors.Is(err, psp.ErrNotFound):
		declined.DeclineCode = strings.ToLower(e.Code)
		return declined, nil
	case err == nil:
		return refunded(op, req, r)
	}
	return psp.Refund{}, &psp.Error{Class: psp.Unknown, Op: op, Code: e.Code,
		Err: fmt.Errorf("toss answered %d %s and the payment could not be read: %w", ans.Status, e.Code, err)}
}

// refunded checks that the cancel found for req, an earlier request with the
// same refund order id, is req's.
func refunded(op string, req psp.RefundRequest, r psp.Refund) (psp.Refund, error) {
	if r.Amount != req.Amount || r.Currency != req.Currency {
		return psp.Refund{}, &psp.Error{Class: psp.NotProcessed, Op: op, Err: fmt.Errorf("%w: refund %s was %d %s, now asked for %d %s",
			psp.ErrOrderConflict, req.RefundOrderID, r.Amount, r.Currency, req.Amount, req.Currency)}
	}
	if err := psp.MatchRefund(op, req, r); err != nil {
		return psp.Refund{}, err
	}
	return r, nil
}

// LookupRefund implements psp.Adapter.
func (a *Adapter) LookupRefund(ctx context.Context, chargeReference, refundOrderID string) (psp.Refund, error) {
	const op = "lookup_refund"
	if chargeReference == "" || refundOrderID == "" {
		// GET /v1/payments/ would be another resource; an empty tag would
		// match any cancel.
		return psp.Refund{}, &psp.Error{Class: psp.Rejected, Op: op, Err: errors.New("a refund lookup needs the paymentKey and the refund order id")}
	}
	p, err := a.payment(ctx, op, "/v1/payments/"+url.PathEscape(chargeReference))
	if err != nil {
		return psp.Refund{}, err
	}
	if p.PaymentKey != chargeReference {
		return psp.Refund{}, &psp.Error{Class: psp.Unknown, Op: op,
			Err: fmt.Errorf("%w: toss answered for payment %q, asked for %q", psp.ErrMismatch, p.PaymentKey, chargeReference)}
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
		amount, err := whole(c.CancelAmount)
		if err != nil {
			return psp.Refund{}, &psp.Error{Class: psp.Unknown, Op: op, Err: fmt.Errorf("cancel of %s cancelAmount: %w", p.PaymentKey, err)}
		}
		r := psp.Refund{RefundOrderID: refundOrderID, MerchantOrderID: p.OrderID, Reference: c.TransactionKey,
			Amount: amount, Currency: p.Currency}
		if r.Reference == "" {
			// Answers older than 2022-06-08 carry no key per cancel.
			r.Reference = p.PaymentKey + "@" + c.CanceledAt
		}
		switch c.CancelStatus {
		case "DONE", "":
			// No cancelStatus: an older answer, which lists finished cancels only.
			r.Status = psp.RefundSucceeded
		case "IN_PROGRESS":
			r.Status = psp.RefundPending
		case "ABORTED":
			r.Status, r.DeclineCode, r.Code = psp.RefundDeclined, "cancel_aborted", c.CancelStatus
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

// declineCode is shared when the table gives one, else Toss's code in lower case.
func declineCode(code, shared string) string {
	if shared != "" {
		return shared
	}
	return strings.ToLower(code)
}

// verdictOf is the verdict of a class from roundtrip.StatusClass.
func verdictOf(c psp.Class) verdict {
	if c == psp.NotProcessed {
		return notProcessed
	}
	return unknown
}

// classify is the error of an answer with a non-result verdict.
func classify(op string, status int, e apiError, v verdict) error {
	err := fmt.Errorf("toss answered %d %s: %s", status, e.Code, e.Message)
	class := psp.Unknown
	switch v {
	case reject:
		class = psp.Rejected
	case notProcessed:
		class = psp.NotProcessed
	}
	return &psp.Error{Class: class, Op: op, Code: e.Code, Err: err}
}

func parseError(ans roundtrip.Answer) (apiError, bool) {
	var e apiError
	if err := json.Unmarshal(ans.Body, &e); err != nil || e.Code == "" {
		return apiError{}, false
	}
	return e, true
}

func parsePayment(op string, ans roundtrip.Answer) (payment, error) {
	var p payment
	if err := json.Unmarshal(ans.Body, &p); err != nil || p.PaymentKey == "" || p.Status == "" {
		return payment{}, roundtrip.Unreadable(op, ans)
	}
	return p, nil
}

// whole reads an amount Toss wrote as a JSON number ("15000", "15000.0",
// "1.5e4") without a float: exactly, and only if it is a whole number.
func whole(n json.Number) (int64, error) {
	r, ok := new(big.Rat).SetString(string(n))
	if !ok {
		return 0, fmt.Errorf("amount %q is not a number", n)
	}
	if !r.IsInt() || !r.Num().IsInt64() {
		return 0, fmt.Errorf("amount %q is not a whole number of won", n)
	}
	return r.Num().Int64(), nil
}

func (a *Adapter) validateCharge(req psp.ChargeRequest) error {
	if err := a.Capabilities().Check(req.Amount, req.Currency); err != nil {
		return err
	}
	switch {
	case !orderIDPattern.MatchString(req.MerchantOrderID):
		return fmt.Errorf("order id %q is not 6–64 characters of [A-Za-z0-9_-]", req.MerchantOrderID)
	case req.PaymentMethod == "" || len(req.PaymentMethod) > maxPaymentKeyLen:
		return fmt.Errorf("payment method must be a Toss paymentKey of 1–%d characters", maxPaymentKeyLen)
	}
	return nil
}

func (a *Adapter) validateRefund(req psp.RefundRequest) error {
	// A refund may be smaller than the minimum payment.
	if req.Currency != currency {
		return &psp.CheckError{Field: "currency", Reason: "toss refunds KRW only, not " + req.Currency}
	}
	switch {
	case !orderIDPattern.MatchString(req.RefundOrderID):
		return fmt.Errorf("refund order id %q is not 6–64 characters of [A-Za-z0-9_-]", req.RefundOrderID)
	case req.Amount <= 0:
		return fmt.Errorf("amount %d is not positive", req.Amount)
	case req.ChargeReference == "":
		return errors.New("the charge reference (paymentKey) is required")
	}
	return nil
}
