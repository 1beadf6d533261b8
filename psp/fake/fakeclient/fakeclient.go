// Package fakeclient owns the adapter for the standalone fake PSP (cmd/fakepsp,
// API in package psp/fake/fakeserver): the gateway's GATEWAY_PSP=fakehttp mode, which
// talks to the fake PSP over a real network so that its faults (latency,
// errors, held and dropped connections) reach the gateway as a real PSP's
// would.
//
// Outcomes:
//   - 201 or 200 with a charge → a result (succeeded or declined);
//   - 409 → NotProcessed wrapping psp.ErrOrderConflict; other 4xx and a 503
//     whose code is "not_processed" → NotProcessed;
//   - any other 5xx, an answer that cannot be read, a timeout or a reset →
//     Unknown; a connection that could not be opened → NotProcessed;
//   - on lookups, 404 with code "not_found" → psp.ErrNotFound (a 404 from
//     anything else, a proxy say, is Unknown: "not found" makes the gateway
//     charge again, so only the PSP itself may say it).
package fakeclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"gateway/psp"
	"gateway/psp/fake/fakeserver"
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
}

// Adapter is a psp.Adapter for the standalone fake PSP.
type Adapter struct {
	base   *url.URL
	client *http.Client
	window time.Duration
}

var _ psp.Adapter = (*Adapter)(nil)

// maxOrderIDLen is the server's limit (that of package fake).
const maxOrderIDLen = 64

// maxAnswer bounds how much of an answer is read.
const maxAnswer = 1 << 20

// New returns an adapter for the server at cfg.BaseURL.
func New(cfg Config) (*Adapter, error) {
	u, err := url.Parse(strings.TrimRight(cfg.BaseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("fakeclient: base URL %q must be http(s)://host[:port]", cfg.BaseURL)
	}
	a := &Adapter{base: u, client: cfg.HTTPClient, window: cfg.CreationWindow}
	if a.client == nil {
		a.client = &http.Client{Timeout: 60 * time.Second}
	}
	if a.window <= 0 {
		a.window = time.Minute
	}
	return a, nil
}

// Capabilities implements psp.Adapter. The server records a charge before it
// answers and its lookups read the same ledger, so not found is authoritative
// once the creation window has passed.
func (a *Adapter) Capabilities() psp.Capabilities {
	return psp.Capabilities{
		Name:                "fakehttp",
		AuthoritativeLookup: true,
		CreationWindow:      a.window,
		DedupesOrderID:      true,
		MaxOrderIDLen:       maxOrderIDLen,
	}
}

// Charge implements psp.Adapter.
func (a *Adapter) Charge(ctx context.Context, req psp.ChargeRequest) (psp.Charge, error) {
	const op = "charge"
	status, body, err := a.do(ctx, op, http.MethodPost, "/v1/charges", fakeserver.ChargeRequest{
		MerchantOrderID: req.MerchantOrderID, Amount: req.Amount, Currency: req.Currency,
		PaymentMethod: req.PaymentMethod, Description: req.Description,
	})
	if err != nil {
		return psp.Charge{}, err
	}
	if status != http.StatusOK && status != http.StatusCreated {
		return psp.Charge{}, failure(op, status, body)
	}
	c, err := parseCharge(op, body)
	if err != nil {
		return psp.Charge{}, err
	}
	if c.MerchantOrderID != req.MerchantOrderID || c.Amount != req.Amount || c.Currency != req.Currency {
		// The server answered for another order: whatever it did, it was not this.
		return psp.Charge{}, &psp.Error{Class: psp.Unknown, Op: op,
			Err: fmt.Errorf("answer %+v does not match the request for %s", c, req.MerchantOrderID)}
	}
	return c, nil
}

// Lookup implements psp.Adapter.
func (a *Adapter) Lookup(ctx context.Context, merchantOrderID string) (psp.Charge, error) {
	const op = "lookup"
	status, body, err := a.do(ctx, op, http.MethodGet, "/v1/charges/"+url.PathEscape(merchantOrderID), nil)
	if err != nil {
		return psp.Charge{}, err
	}
	if status != http.StatusOK {
		return psp.Charge{}, failure(op, status, body)
	}
	c, err := parseCharge(op, body)
	if err == nil && c.MerchantOrderID != merchantOrderID {
		err = &psp.Error{Class: psp.Unknown, Op: op, Err: fmt.Errorf("asked for %s, got %s", merchantOrderID, c.MerchantOrderID)}
	}
	return c, err
}

// Refund implements psp.Adapter.
func (a *Adapter) Refund(ctx context.Context, req psp.RefundRequest) (psp.Refund, error) {
	const op = "refund"
	status, body, err := a.do(ctx, op, http.MethodPost, "/v1/refunds", fakeserver.RefundRequest{
		RefundOrderID: req.RefundOrderID, MerchantOrderID: req.MerchantOrderID, ChargeReference: req.ChargeReference,
		Amount: req.Amount, Currency: req.Currency, Reason: req.Reason,
	})
	if err != nil {
		return psp.Refund{}, err
	}
	if status != http.StatusOK && status != http.StatusCreated {
		return psp.Refund{}, failure(op, status, body)
	}
	r, err := parseRefund(op, body)
	if err == nil && (r.RefundOrderID != req.RefundOrderID || r.Amount != req.Amount) {
		err = &psp.Error{Class: psp.Unknown, Op: op, Err: fmt.Errorf("answer %+v does not match the request for %s", r, req.RefundOrderID)}
	}
	return r, err
}

// LookupRefund implements psp.Adapter.
func (a *Adapter) LookupRefund(ctx context.Context, chargeReference, refundOrderID string) (psp.Refund, error) {
	const op = "lookup_refund"
	path := "/v1/refunds/" + url.PathEscape(refundOrderID) + "?charge_reference=" + url.QueryEscape(chargeReference)
	status, body, err := a.do(ctx, op, http.MethodGet, path, nil)
	if err != nil {
		return psp.Refund{}, err
	}
	if status != http.StatusOK {
		return psp.Refund{}, failure(op, status, body)
	}
	return parseRefund(op, body)
}

// do sends one request and reads the whole answer. A transport failure comes
// back classified; an HTTP answer of any status comes back as such.
func (a *Adapter) do(ctx context.Context, op, method, path string, in any) (int, []byte, error) {
	var rd io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, nil, &psp.Error{Class: psp.NotProcessed, Op: op, Err: err}
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, a.base.String()+path, rd)
	if err != nil {
		return 0, nil, &psp.Error{Class: psp.NotProcessed, Op: op, Err: err}
	}
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := a.client.Do(req)
	if err != nil {
		return 0, nil, psp.TransportError(op, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, maxAnswer))
	if err != nil {
		// The status line arrived, the body did not: the PSP acted or not.
		return 0, nil, &psp.Error{Class: psp.Unknown, Op: op, Err: fmt.Errorf("reading the %d answer: %w", res.StatusCode, err)}
	}
	return res.StatusCode, body, nil
}

// failure classifies an answer that is not a result.
func failure(op string, status int, body []byte) error {
	var e fakeserver.ErrorBody
	_ = json.Unmarshal(body, &e) // an unreadable body leaves the code empty
	err := fmt.Errorf("fake psp answered %d %s: %s", status, e.Error.Code, e.Error.Message)
	switch {
	case status == http.StatusNotFound && e.Error.Code == fakeserver.CodeNotFound && (op == "lookup" || op == "lookup_refund"):
		return psp.ErrNotFound
	case status == http.StatusConflict:
		return &psp.Error{Class: psp.NotProcessed, Op: op, Err: fmt.Errorf("%w: %w", psp.ErrOrderConflict, err)}
	case status == http.StatusServiceUnavailable && e.Error.Code == fakeserver.CodeNotProcessed:
		return &psp.Error{Class: psp.NotProcessed, Op: op, Err: err}
	case status >= 400 && status < 500 && status != http.StatusNotFound && status != http.StatusRequestTimeout:
		return &psp.Error{Class: psp.NotProcessed, Op: op, Err: err}
	}
	return &psp.Error{Class: psp.Unknown, Op: op, Err: err}
}

func parseCharge(op string, body []byte) (psp.Charge, error) {
	var c fakeserver.Charge
	if err := json.Unmarshal(body, &c); err != nil {
		return psp.Charge{}, &psp.Error{Class: psp.Unknown, Op: op, Err: fmt.Errorf("unreadable answer: %w", err)}
	}
	status := psp.ChargeStatus(c.Status)
	if status != psp.Succeeded && status != psp.Declined {
		return psp.Charge{}, &psp.Error{Class: psp.Unknown, Op: op, Err: fmt.Errorf("charge status %q", c.Status)}
	}
	return psp.Charge{MerchantOrderID: c.MerchantOrderID, Reference: c.Reference, Status: status,
		DeclineCode: c.DeclineCode, Amount: c.Amount, Currency: c.Currency}, nil
}

func parseRefund(op string, body []byte) (psp.Refund, error) {
	var r fakeserver.Refund
	if err := json.Unmarshal(body, &r); err != nil {
		return psp.Refund{}, &psp.Error{Class: psp.Unknown, Op: op, Err: fmt.Errorf("unreadable answer: %w", err)}
	}
	status := psp.RefundStatus(r.Status)
	switch status {
	case psp.RefundSucceeded, psp.RefundPending, psp.RefundDeclined:
	default:
		return psp.Refund{}, &psp.Error{Class: psp.Unknown, Op: op, Err: fmt.Errorf("refund status %q", r.Status)}
	}
	return psp.Refund{RefundOrderID: r.RefundOrderID, MerchantOrderID: r.MerchantOrderID, Reference: r.Reference,
		Status: status, DeclineCode: r.DeclineCode, Amount: r.Amount, Currency: r.Currency}, nil
}
