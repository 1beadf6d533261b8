// Package fakeclient owns the adapter for the standalone fake PSP (cmd/fakepsp,
// API in package psp/fake/fakeserver): the gateway's GATEWAY_PSP=fakehttp mode, which
// talks to the fake PSP over a real network so that its faults (latency,
// errors, held and dropped connections) reach the gateway as a real PSP's
// would.
//
// Outcomes:
//   - 201 or 200 with a charge → a result (succeeded, declined with the
//     server's code kept, pending with its next action, and for manual
//     capture authorized or voided); the same for captures (POST
//     /v1/captures) and voids (POST /v1/voids), which answer the charge as
//     it stands after them;
//   - 400 (or 422) with the server's code → Rejected, code kept: the server
//     can never accept the request;
//   - 409 → NotProcessed wrapping psp.ErrOrderConflict; 429, 503 whose code
//     is "not_processed", and other 4xx (authentication, say) → NotProcessed;
//   - any other 5xx, 408, an answer that cannot be read or that is for
//     another order, charge or capture method (psp.ErrMismatch), a timeout
//     or a reset → Unknown; a connection that could not be opened →
//     NotProcessed;
//   - on lookups, 404 with code "not_found" → psp.ErrNotFound (a 404 from
//     anything else, a proxy say, is Unknown: "not found" makes the gateway
//     charge again, so only the PSP itself may say it).
//
// The adapter is a psp.Ledger over GET /v1/transactions: the server's
// cursor passes through as it is, a page is at most maxListPage lines, and a
// line outside the period asked for, of a kind or status the adapter does
// not know, or that does not read, makes the page Unknown. Charges send the
// gateway's merchant id, which the listing's lines give back.
//
// The server takes package fake's default currencies in ISO units; a request
// that their Check refuses is Rejected before it is sent.
package fakeclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"gateway/psp"
	"gateway/psp/fake"
	"gateway/psp/fake/fakeserver"
	"gateway/psp/roundtrip"
)

// Config configures the adapter.
type Config struct {
	// BaseURL is where the fake PSP listens, e.g. http://127.0.0.1:9090.
	BaseURL string
	// HTTPClient sends the requests; a client with a 60s backstop timeout
	// when nil. Deadlines come from the caller's context.
	HTTPClient *http.Client
	// CreationWindow is what the adapter advertises; 1 minute when zero. The
	// server applies a charge after its latency (≤ 60s) even when the client
	// has gone.
	CreationWindow time.Duration
	// Account is the label the adapter advertises in its Capabilities.
	Account string
	// AuthorizationValidity is what the adapter advertises; 7 days when
	// zero. Set it to the server's (cmd/fakepsp -authorization-validity);
	// the server's answers say each authorization's capture_before anyway.
	AuthorizationValidity time.Duration
}

// Adapter is a psp.Adapter for the standalone fake PSP.
type Adapter struct {
	rt         *roundtrip.Client
	window     time.Duration
	validity   time.Duration
	account    string
	currencies []psp.Currency
}

var (
	_ psp.Adapter  = (*Adapter)(nil)
	_ psp.Capturer = (*Adapter)(nil)
	_ psp.Ledger   = (*Adapter)(nil)
)

// maxOrderIDLen is the server's limit (that of package fake).
const maxOrderIDLen = 64

// New returns an adapter for the server at cfg.BaseURL.
func New(cfg Config) (*Adapter, error) {
	u, err := url.Parse(strings.TrimRight(cfg.BaseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("fakeclient: base URL %q must be http(s)://host[:port]", cfg.BaseURL)
	}
	a := &Adapter{rt: roundtrip.New(u.String(), cfg.HTTPClient, nil), window: cfg.CreationWindow,
		validity: cfg.AuthorizationValidity, account: cfg.Account, currencies: fake.Currencies()}
	if a.window <= 0 {
		a.window = time.Minute
	}
	if a.validity <= 0 {
		a.validity = fake.DefaultAuthorizationValidity
	}
	return a, nil
}

// Capabilities implements psp.Adapter. The server records a charge before it
// answers and its lookups read the same ledger, so not found is authoritative
// once the creation window has passed. Currencies is shared: callers must
// not modify it.
func (a *Adapter) Capabilities() psp.Capabilities {
	return psp.Capabilities{
		Name:                  "fakehttp",
		AuthoritativeLookup:   true,
		CreationWindow:        a.window,
		DedupesOrderID:        true,
		MaxOrderIDLen:         maxOrderIDLen,
		Account:               a.account,
		Currencies:            a.currencies,
		Checkout:              psp.Checkout{Client: psp.ClientNone, ResultField: psp.ResultPaymentMethod},
		ManualCapture:         true,
		AuthorizationValidity: a.validity,
	}
}

// Charge implements psp.Adapter.
func (a *Adapter) Charge(ctx context.Context, req psp.ChargeRequest) (psp.Charge, error) {
	const op = "charge"
	if err := a.Capabilities().Check(req.Amount, req.Currency); err != nil {
		return psp.Charge{}, &psp.Error{Class: psp.Rejected, Op: op, Err: err}
	}
	ans, err := a.rt.Do(ctx, roundtrip.Request{Op: op, Method: http.MethodPost, Path: "/v1/charges",
		Body: fakeserver.ChargeRequest{
			MerchantOrderID: req.MerchantOrderID, Amount: req.Amount, Currency: req.Currency,
			PaymentMethod: req.PaymentMethod, Description: req.Description, AllowNextAction: req.AllowNextAction,
			CaptureMethod: string(req.CaptureMethod), MerchantID: req.MerchantID,
		}})
	if err != nil {
		return psp.Charge{}, err
	}
	if ans.Status != http.StatusOK && ans.Status != http.StatusCreated {
		return psp.Charge{}, failure(op, ans)
	}
	c, err := parseCharge(op, ans)
	if err != nil {
		return psp.Charge{}, err
	}
	// An answer for another order: whatever the server did, it was not this.
	if err := psp.MatchCharge(op, req, c); err != nil {
		return psp.Charge{}, err
	}
	if c.Status == psp.Authorized && req.CaptureMethod != psp.CaptureManual {
		return psp.Charge{}, &psp.Error{Class: psp.Unknown, Op: op,
			Err: fmt.Errorf("%w: asked to take order %q at once, the server only authorized it", psp.ErrMismatch, req.MerchantOrderID)}
	}
	return c, nil
}

// Capture implements psp.Capturer.
func (a *Adapter) Capture(ctx context.Context, req psp.CaptureRequest) (psp.Charge, error) {
	const op = "capture"
	if req.OrderID == "" || req.MerchantOrderID == "" || req.ChargeReference == "" {
		return psp.Charge{}, &psp.Error{Class: psp.Rejected, Op: op, Err: errors.New("a capture needs its order id, the charge's order id and its reference")}
	}
	if err := a.Capabilities().Check(req.Amount, req.Currency); err != nil {
		return psp.Charge{}, &psp.Error{Class: psp.Rejected, Op: op, Err: err}
	}
	return a.command(ctx, op, "/v1/captures", fakeserver.CaptureRequest{
		CaptureOrderID: req.OrderID, MerchantOrderID: req.MerchantOrderID, ChargeReference: req.ChargeReference,
		Amount: req.Amount, Currency: req.Currency,
	}, req.MerchantOrderID, req.ChargeReference, req.Currency)
}

// Void implements psp.Capturer.
func (a *Adapter) Void(ctx context.Context, req psp.VoidRequest) (psp.Charge, error) {
	const op = "void"
	if req.OrderID == "" || req.MerchantOrderID == "" || req.ChargeReference == "" {
		return psp.Charge{}, &psp.Error{Class: psp.Rejected, Op: op, Err: errors.New("a void needs its order id, the charge's order id and its reference")}
	}
	return a.command(ctx, op, "/v1/voids", fakeserver.VoidRequest{
		VoidOrderID: req.OrderID, MerchantOrderID: req.MerchantOrderID, ChargeReference: req.ChargeReference, Reason: req.Reason,
	}, req.MerchantOrderID, req.ChargeReference, "")
}

// command posts a capture or void and reads the charge it answers, which
// must be the one asked about (in currency, when one is given).
func (a *Adapter) command(ctx context.Context, op, path string, body any, orderID, reference, currency string) (psp.Charge, error) {
	ans, err := a.rt.Do(ctx, roundtrip.Request{Op: op, Method: http.MethodPost, Path: path, Body: body})
	if err != nil {
		return psp.Charge{}, err
	}
	if ans.Status != http.StatusOK && ans.Status != http.StatusCreated {
		return psp.Charge{}, failure(op, ans)
	}
	c, err := parseCharge(op, ans)
	if err != nil {
		return psp.Charge{}, err
	}
	if c.MerchantOrderID != orderID || c.Reference != reference || (currency != "" && c.Currency != currency) {
		return psp.Charge{}, &psp.Error{Class: psp.Unknown, Op: op,
			Err: fmt.Errorf("%w: asked about charge %s of order %q in %s, the server answered for %s of order %q in %s",
				psp.ErrMismatch, reference, orderID, currency, c.Reference, c.MerchantOrderID, c.Currency)}
	}
	return c, nil
}

// Lookup implements psp.Adapter.
func (a *Adapter) Lookup(ctx context.Context, merchantOrderID string) (psp.Charge, error) {
	const op = "lookup"
	if merchantOrderID == "" {
		return psp.Charge{}, &psp.Error{Class: psp.Rejected, Op: op, Err: errors.New("empty merchant order id")}
	}
	ans, err := a.rt.Do(ctx, roundtrip.Request{Op: op, Method: http.MethodGet, Path: "/v1/charges/" + url.PathEscape(merchantOrderID)})
	if err != nil {
		return psp.Charge{}, err
	}
	if ans.Status != http.StatusOK {
		return psp.Charge{}, failure(op, ans)
	}
	c, err := parseCharge(op, ans)
	if err != nil {
		return psp.Charge{}, err
	}
	if c.MerchantOrderID != merchantOrderID {
		return psp.Charge{}, &psp.Error{Class: psp.Unknown, Op: op,
			Err: fmt.Errorf("%w: asked for order %q, the server answered for %q", psp.ErrMismatch, merchantOrderID, c.MerchantOrderID)}
	}
	return c, nil
}

// Refund implements psp.Adapter.
func (a *Adapter) Refund(ctx context.Context, req psp.RefundRequest) (psp.Refund, error) {
	const op = "refund"
	if err := a.Capabilities().Check(req.Amount, req.Currency); err != nil {
		return psp.Refund{}, &psp.Error{Class: psp.Rejected, Op: op, Err: err}
	}
	ans, err := a.rt.Do(ctx, roundtrip.Request{Op: op, Method: http.MethodPost, Path: "/v1/refunds",
		Body: fakeserver.RefundRequest{
			RefundOrderID: req.RefundOrderID, MerchantOrderID: req.MerchantOrderID, ChargeReference: req.ChargeReference,
			Amount: req.Amount, Currency: req.Currency, Reason: req.Reason,
		}})
	if err != nil {
		return psp.Refund{}, err
	}
	if ans.Status != http.StatusOK && ans.Status != http.StatusCreated {
		return psp.Refund{}, failure(op, ans)
	}
	r, err := parseRefund(op, ans)
	if err != nil {
		return psp.Refund{}, err
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
		return psp.Refund{}, &psp.Error{Class: psp.Rejected, Op: op, Err: errors.New("a refund lookup needs the charge reference and the refund order id")}
	}
	path := "/v1/refunds/" + url.PathEscape(refundOrderID) + "?charge_reference=" + url.QueryEscape(chargeReference)
	ans, err := a.rt.Do(ctx, roundtrip.Request{Op: op, Method: http.MethodGet, Path: path})
	if err != nil {
		return psp.Refund{}, err
	}
	if ans.Status != http.StatusOK {
		return psp.Refund{}, failure(op, ans)
	}
	r, err := parseRefund(op, ans)
	if err == nil && r.RefundOrderID != refundOrderID {
		err = &psp.Error{Class: psp.Unknown, Op: op,
			Err: fmt.Errorf("%w: asked for refund %q, the server answered for %q", psp.ErrMismatch, refundOrderID, r.RefundOrderID)}
	}
	return r, err
}

// maxListPage bounds a listing page: the server's 5,000 lines would not
// fit in roundtrip.MaxAnswer (about 300 bytes a line).
const maxListPage = 2000

// ListTransactions implements psp.Ledger. An empty period is Rejected
// without asking; a cursor the server does not know is Rejected by it.
func (a *Adapter) ListTransactions(ctx context.Context, q psp.LedgerQuery) (psp.LedgerPage, error) {
	const op = "list"
	if !q.From.Before(q.To) {
		return psp.LedgerPage{}, &psp.Error{Class: psp.Rejected, Op: op,
			Err: fmt.Errorf("the period [%s, %s) is empty", q.From.Format(time.RFC3339Nano), q.To.Format(time.RFC3339Nano))}
	}
	v := url.Values{"from": {q.From.UTC().Format(time.RFC3339Nano)}, "to": {q.To.UTC().Format(time.RFC3339Nano)}}
	if q.Cursor != "" {
		v.Set("cursor", q.Cursor)
	}
	if q.Limit > 0 { // else the server's default, fake.DefaultLedgerPage
		v.Set("limit", strconv.Itoa(min(q.Limit, maxListPage)))
	}
	ans, err := a.rt.Do(ctx, roundtrip.Request{Op: op, Method: http.MethodGet, Path: "/v1/transactions?" + v.Encode()})
	if err != nil {
		return psp.LedgerPage{}, err
	}
	if ans.Status != http.StatusOK {
		return psp.LedgerPage{}, failure(op, ans)
	}
	var page fakeserver.TransactionPage
	if err := json.Unmarshal(ans.Body, &page); err != nil || page.Data == nil {
		return psp.LedgerPage{}, roundtrip.Unreadable(op, ans)
	}
	out := psp.LedgerPage{Transactions: make([]psp.Transaction, 0, len(page.Data)), Next: page.NextCursor}
	for _, l := range page.Data {
		t, err := toTransaction(l)
		if err == nil && (t.CreatedAt.Before(q.From) || !t.CreatedAt.Before(q.To)) {
			err = fmt.Errorf("%w: a line of %s is outside the period asked for", psp.ErrMismatch, t.CreatedAt.Format(time.RFC3339Nano))
		}
		if err != nil {
			return psp.LedgerPage{}, &psp.Error{Class: psp.Unknown, Op: op, Err: fmt.Errorf("line %s: %w", l.Reference, err)}
		}
		out.Transactions = append(out.Transactions, t)
	}
	return out, nil
}

// toTransaction reads one line of the listing.
func toTransaction(l fakeserver.Transaction) (psp.Transaction, error) {
	t := psp.Transaction{Kind: psp.TransactionKind(l.Kind), MerchantOrderID: l.MerchantOrderID, RefundOrderID: l.RefundOrderID,
		Reference: l.Reference, ChargeReference: l.ChargeReference, Status: l.Status, Amount: l.Amount,
		AmountCaptured: l.AmountCaptured, Currency: l.Currency, MerchantID: l.MerchantID, CreatedAt: l.CreatedAt.UTC()}
	switch {
	case l.Reference == "" || l.Currency == "" || l.CreatedAt.IsZero():
		return psp.Transaction{}, errors.New("a line needs its reference, currency and created_at")
	case l.Amount < 0 || l.AmountCaptured < 0 || l.AmountCaptured > l.Amount:
		return psp.Transaction{}, fmt.Errorf("amount %d, captured %d", l.Amount, l.AmountCaptured)
	}
	switch t.Kind {
	case psp.TransactionCharge:
		switch psp.ChargeStatus(l.Status) {
		case psp.Succeeded, psp.Declined, psp.Pending, psp.Authorized, psp.Voided:
			return t, nil
		}
	case psp.TransactionRefund:
		switch psp.RefundStatus(l.Status) {
		case psp.RefundSucceeded, psp.RefundPending, psp.RefundDeclined:
			return t, nil
		}
	default:
		return psp.Transaction{}, fmt.Errorf("kind %q", l.Kind)
	}
	return psp.Transaction{}, fmt.Errorf("%s status %q", l.Kind, l.Status)
}

// failure classifies an answer that is not a result.
func failure(op string, ans roundtrip.Answer) error {
	var e fakeserver.ErrorBody
	if json.Unmarshal(ans.Body, &e) != nil || e.Error.Code == "" {
		return roundtrip.Unreadable(op, ans)
	}
	code := e.Error.Code
	err := fmt.Errorf("fake psp answered %d %s: %s", ans.Status, code, e.Error.Message)
	switch {
	case ans.Status == http.StatusNotFound && code == fakeserver.CodeNotFound && (op == "lookup" || op == "lookup_refund"):
		return psp.ErrNotFound
	case ans.Status == http.StatusConflict && code == fakeserver.CodeOrderIDReused:
		return &psp.Error{Class: psp.NotProcessed, Op: op, Code: code, Err: fmt.Errorf("%w: %w", psp.ErrOrderConflict, err)}
	case ans.Status == http.StatusServiceUnavailable && code == fakeserver.CodeNotProcessed:
		return &psp.Error{Class: psp.NotProcessed, Op: op, Code: code, Err: err}
	}
	if class, ok := roundtrip.StatusClass(ans.Status); ok {
		return &psp.Error{Class: class, Op: op, Code: code, Err: err}
	}
	switch ans.Status {
	case http.StatusBadRequest, http.StatusUnprocessableEntity:
		return &psp.Error{Class: psp.Rejected, Op: op, Code: code, Err: err}
	case http.StatusNotFound:
		// Not the server's "no such order": a wrong route, a proxy.
		return &psp.Error{Class: psp.Unknown, Op: op, Code: code, Err: err}
	}
	return &psp.Error{Class: psp.NotProcessed, Op: op, Code: code, Err: err}
}

func parseCharge(op string, ans roundtrip.Answer) (psp.Charge, error) {
	var c fakeserver.Charge
	if err := json.Unmarshal(ans.Body, &c); err != nil {
		return psp.Charge{}, roundtrip.Unreadable(op, ans)
	}
	status := psp.ChargeStatus(c.Status)
	switch status {
	case psp.Succeeded, psp.Declined, psp.Pending, psp.Authorized, psp.Voided:
	default:
		return psp.Charge{}, &psp.Error{Class: psp.Unknown, Op: op, Err: fmt.Errorf("charge status %q", c.Status)}
	}
	out := psp.Charge{MerchantOrderID: c.MerchantOrderID, Reference: c.Reference, Status: status,
		DeclineCode: c.DeclineCode, Code: c.Code, Amount: c.Amount, Currency: c.Currency}
	if na := c.NextAction; na != nil && status == psp.Pending {
		out.NextAction = &psp.NextAction{Type: na.Type, URL: na.URL, ClientSecret: na.ClientSecret}
	}
	switch {
	case status == psp.Succeeded && (c.AmountCaptured < 0 || c.AmountCaptured > c.Amount):
		return psp.Charge{}, &psp.Error{Class: psp.Unknown, Op: op,
			Err: fmt.Errorf("%w: a succeeded charge of %d captured %d", psp.ErrMismatch, c.Amount, c.AmountCaptured)}
	case status == psp.Succeeded && c.AmountCaptured == 0:
		// A server from before manual capture: a success took it all.
		out.AmountCaptured = c.Amount
	case status == psp.Succeeded:
		out.AmountCaptured = c.AmountCaptured
	case status == psp.Authorized && c.CaptureBefore != nil:
		out.CaptureBefore = c.CaptureBefore.UTC()
	}
	return out, nil
}

func parseRefund(op string, ans roundtrip.Answer) (psp.Refund, error) {
	var r fakeserver.Refund
	if err := json.Unmarshal(ans.Body, &r); err != nil {
		return psp.Refund{}, roundtrip.Unreadable(op, ans)
	}
	status := psp.RefundStatus(r.Status)
	switch status {
	case psp.RefundSucceeded, psp.RefundPending, psp.RefundDeclined:
	default:
		return psp.Refund{}, &psp.Error{Class: psp.Unknown, Op: op, Err: fmt.Errorf("refund status %q", r.Status)}
	}
	return psp.Refund{RefundOrderID: r.RefundOrderID, MerchantOrderID: r.MerchantOrderID, Reference: r.Reference,
		Status: status, DeclineCode: r.DeclineCode, Code: r.Code, Amount: r.Amount, Currency: r.Currency}, nil
}
