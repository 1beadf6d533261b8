// Package fakeserver owns the standalone fake payment service provider's HTTP
// API: the in-process fake PSP (package psp/fake) behind a JSON interface,
// with a ledger for invariant checks and random fault injection, so that a
// person or a chaos test can watch the gateway survive a misbehaving PSP over
// a real network. cmd/fakepsp serves it; psp/fake/fakeclient is the gateway's
// adapter for it.
//
// The API:
//
//	POST /v1/charges                      {"merchant_order_id","amount","currency","payment_method","description","allow_next_action","capture_method"}
//	                                      201 new charge, 200 the same order id again (deduplicated),
//	                                      409 same order id with another amount, currency or capture method,
//	                                      400 a request the PSP can never accept (Rejected; the code says why)
//	GET  /v1/charges/{merchant_order_id}  200 the charge, 404 none
//	POST /v1/refunds                      {"refund_order_id","merchant_order_id","charge_reference","amount","currency","reason"}
//	                                      201 new refund, 200 a repeat or a declined refund, 409, 400
//	GET  /v1/refunds/{refund_order_id}    200 the refund, 404 none (?charge_reference= narrows it)
//	GET  /v1/transactions?from=&to=&cursor=&limit=
//	                                      one page of the ledger (package fake's psp.Ledger): the charges, as
//	                                      they stand now, and refunds created in [from, to) (RFC 3339), in the
//	                                      order they were made, as {"data":[Transaction…],"next_cursor"}
//	                                      (next_cursor left out after the last page); limit 100 unless set,
//	                                      5000 at most; 400 for an empty period or a cursor that is not one of
//	                                      this ledger's; 503 not_processed while a planted failure lasts
//	POST /v1/captures                     {"capture_order_id","merchant_order_id","charge_reference","amount","currency"}
//	                                      201 the charge, captured by this call; 200 the charge as it stands
//	                                      (a repeat, or a charge no longer capturable); 409 the capture order
//	                                      id used with another amount or charge; 400 (more than authorized,
//	                                      no such charge, …)
//	POST /v1/voids                        {"void_order_id","merchant_order_id","charge_reference","reason"}
//	                                      201 the charge, voided by this call; 200 as it stands; 409; 400
//	GET  /3ds/{reference}                 the 3-D Secure page a pending pm_card_3ds charge redirects to:
//	                                      visiting it passes the check (the charge succeeds);
//	                                      ?result=failed fails it (declined, authentication_failed)
//	POST /admin/charges/{merchant_order_id}/settle {"status":"succeeded"|"declined","decline_code"}
//	                                      finishes a pending charge (a deposit arrived, 3-D Secure done);
//	                                      200 the charge, 409 not_pending
//	POST /admin/charges/{merchant_order_id}/lapse
//	                                      an authorization lapses now, as at its capture_before:
//	                                      200 the charge (voided), 409 not_authorized
//	POST /admin/charges/{merchant_order_id}/drop
//	                                      the charge vanishes from the listing and from lookups, as at a PSP
//	                                      that lost it: 204, 404 not_found
//	POST /admin/ledger/charges            {"merchant_order_id","merchant_id","amount","currency","created_at"}
//	                                      plants a succeeded charge the gateway never asked for (made in the
//	                                      PSP's dashboard, or for a payment whose row the gateway lost), listed
//	                                      at created_at (now when left out): 201 the charge, 409
//	                                      order_id_reused when the order id has a charge already
//	POST /admin/ledger/refunds            {"refund_order_id","merchant_order_id","amount","created_at"}
//	                                      plants a succeeded refund of that order's charge the gateway never
//	                                      asked for (refund_order_id empty for a dashboard refund): 201 the
//	                                      refund, 404 not_found when the order has no charge
//	POST /admin/ledger/fail               {"listings": n}: the next n listings answer 503 not_processed: 204
//	GET  /admin/ledger                    every charge, refund, authorization, capture and void
//	POST /admin/reset                     forget the ledger and counters (fault settings stay)
//	GET  /admin/faults, PUT /admin/faults the fault settings (Faults)
//	GET  /admin/stats                     calls received and faults injected
//	GET  /healthz
//
// Errors are {"error":{"code","message"}}. A charge request may carry the
// gateway's "merchant_id", which the listing's lines of that charge give
// back. A charge is {"merchant_order_id",
// "reference","status","decline_code","code","amount","currency",
// "next_action":{"type","url","client_secret"},"amount_captured",
// "capture_before"}, status one of succeeded, declined, pending, and for a
// charge with "capture_method":"manual" authorized (capture_before, RFC
// 3339, says until when) and voided; amount_captured is what a succeeded
// charge took. Captures and voids behave as in package fake: one capture
// per authorization, at most its amount (the rest is released). Payment
// methods behave as in package fake:
// pm_card_ok succeeds; pm_card_declined, pm_card_insufficient_funds and
// pm_card_lost are declined; pm_card_3ds is pending with a redirect to
// /3ds/{reference} when allow_next_action is true (declined
// authentication_required otherwise); pm_virtual_account is pending until
// settled; pm_invalid_request is refused 400 invalid_request; anything else
// is declined as invalid_payment_method. The currencies taken are package
// fake's defaults (fake.Currencies).
//
// Faults apply to the four POSTs of /v1 (charges, refunds, captures, voids);
// the listing fails only as POST /admin/ledger/fail says.
// Each request first waits a random latency, then draws at most one fault:
// error_before_charge answers 503 {"code":"not_processed"} without acting;
// the three "after charge" faults act (record the charge, refund, capture or
// void) exactly as without the fault and then lose the answer:
// error_after_charge answers 500, timeout_after_charge holds the answer until
// the client gives up (or HoldMax passes) and then drops the connection,
// drop_connection_after_charge resets the connection at once.
package fakeserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"gateway/psp"
	"gateway/psp/fake"
)

// Faults is how often the server misbehaves. Rates are probabilities per
// POST (charge, refund, capture or void), in [0, 1], adding up to at most 1.
type Faults struct {
	Latency                   Latency `json:"latency_ms"`
	ErrorBeforeCharge         float64 `json:"error_before_charge"`
	ErrorAfterCharge          float64 `json:"error_after_charge"`
	TimeoutAfterCharge        float64 `json:"timeout_after_charge"`
	DropConnectionAfterCharge float64 `json:"drop_connection_after_charge"`
}

// Latency is a uniform range in milliseconds.
type Latency struct {
	Min int `json:"min"`
	Max int `json:"max"`
}

// maxLatencyMS bounds the configurable latency.
const maxLatencyMS = 60_000

// Validate reports every invalid setting at once.
func (f Faults) Validate() error {
	var errs []error
	rates := []struct {
		name string
		v    float64
	}{
		{"error_before_charge", f.ErrorBeforeCharge},
		{"error_after_charge", f.ErrorAfterCharge},
		{"timeout_after_charge", f.TimeoutAfterCharge},
		{"drop_connection_after_charge", f.DropConnectionAfterCharge},
	}
	sum := 0.0
	for _, r := range rates {
		if !(r.v >= 0 && r.v <= 1) { // also refuses NaN
			errs = append(errs, fmt.Errorf("%s must be between 0 and 1, got %v", r.name, r.v))
		}
		sum += r.v
	}
	if sum > 1+1e-9 {
		errs = append(errs, fmt.Errorf("fault rates add up to %v, more than 1", sum))
	}
	if f.Latency.Min < 0 || f.Latency.Max < f.Latency.Min || f.Latency.Max > maxLatencyMS {
		errs = append(errs, fmt.Errorf("latency_ms must have 0 ≤ min ≤ max ≤ %d, got %d..%d",
			maxLatencyMS, f.Latency.Min, f.Latency.Max))
	}
	return errors.Join(errs...)
}

// fault is one drawn misbehaviour.
type fault int

const (
	noFault fault = iota
	errorBefore
	errorAfter
	timeoutAfter
	dropAfter
)

var faultNames = map[fault]string{
	errorBefore:  "error_before_charge",
	errorAfter:   "error_after_charge",
	timeoutAfter: "timeout_after_charge",
	dropAfter:    "drop_connection_after_charge",
}

// Options configures a Server.
type Options struct {
	// Faults are the settings at start.
	Faults Faults
	// Seed makes fault draws repeatable; 0 picks a random seed.
	Seed uint64
	// HoldMax bounds how long timeout_after_charge holds an answer when the
	// client never gives up; 60s when zero.
	HoldMax time.Duration
	// Logger receives one line per injected fault; discarded when nil.
	Logger *slog.Logger
	// OnHold, when set, is called each time timeout_after_charge starts
	// holding an answer, after the charge was recorded: tests give up then.
	OnHold func()
	// AuthorizationValidity is how long an authorization stays capturable;
	// fake.DefaultAuthorizationValidity (7 days) when zero.
	AuthorizationValidity time.Duration
	// Now is the clock of the server's PSP: when charges and refunds are
	// made (the listing's times, a planted line's unless it says) and when
	// authorizations lapse. time.Now when nil.
	Now func() time.Time
}

// Stats counts what the server received and did.
type Stats struct {
	ChargeCalls  int            `json:"charge_calls"`
	RefundCalls  int            `json:"refund_calls"`
	CaptureCalls int            `json:"capture_calls"`
	VoidCalls    int            `json:"void_calls"`
	LookupCalls  int            `json:"lookup_calls"`
	ListCalls    int            `json:"list_calls"` // GET /v1/transactions, failed ones included
	Injected     map[string]int `json:"injected"`
	// InjectedRefunds, InjectedCaptures and InjectedVoids are the parts of
	// Injected drawn by refund, capture and void calls.
	InjectedRefunds  map[string]int `json:"injected_refunds"`
	InjectedCaptures map[string]int `json:"injected_captures"`
	InjectedVoids    map[string]int `json:"injected_voids"`
}

func newStats() Stats {
	return Stats{Injected: map[string]int{}, InjectedRefunds: map[string]int{},
		InjectedCaptures: map[string]int{}, InjectedVoids: map[string]int{}}
}

// kind is the kind of money movement a POST asks for.
type kind int

const (
	kindCharge kind = iota
	kindRefund
	kindCapture
	kindVoid
)

// injected is where the faults a kind of call drew are counted apart.
func (st *Stats) injected(k kind) map[string]int {
	switch k {
	case kindRefund:
		return st.InjectedRefunds
	case kindCapture:
		return st.InjectedCaptures
	case kindVoid:
		return st.InjectedVoids
	}
	return nil
}

// Server is the fake PSP's HTTP handler. Close it to release held answers.
type Server struct {
	psp     *fake.PSP
	mux     *http.ServeMux
	holdMax time.Duration
	log     *slog.Logger
	onHold  func()
	now     func() time.Time
	closing chan struct{}
	once    sync.Once

	mu     sync.Mutex // guards the fields below
	faults Faults
	rng    *rand.Rand
	stats  Stats
}

// New returns a Server with an empty ledger.
func New(opts Options) (*Server, error) {
	if err := opts.Faults.Validate(); err != nil {
		return nil, err
	}
	if v := opts.AuthorizationValidity; v < 0 || (v > 0 && v < time.Second) {
		return nil, fmt.Errorf("authorization validity must be at least 1s, got %v", v)
	}
	seed := opts.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	s := &Server{
		psp:     fake.New(fake.WithAuthorizationValidity(opts.AuthorizationValidity), fake.WithClock(opts.Now)),
		now:     opts.Now,
		holdMax: opts.HoldMax,
		log:     opts.Logger,
		onHold:  opts.OnHold,
		closing: make(chan struct{}),
		faults:  opts.Faults,
		rng:     rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		stats:   newStats(),
	}
	if s.holdMax <= 0 {
		s.holdMax = time.Minute
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/charges", s.createCharge)
	mux.HandleFunc("GET /v1/charges/{id}", s.getCharge)
	mux.HandleFunc("POST /v1/refunds", s.createRefund)
	mux.HandleFunc("GET /v1/refunds/{id}", s.getRefund)
	mux.HandleFunc("POST /v1/captures", s.createCapture)
	mux.HandleFunc("POST /v1/voids", s.createVoid)
	mux.HandleFunc("GET /3ds/{reference}", s.threeDS)
	mux.HandleFunc("POST /admin/charges/{id}/settle", s.settle)
	mux.HandleFunc("POST /admin/charges/{id}/lapse", s.lapse)
	mux.HandleFunc("GET /v1/transactions", s.listTransactions)
	mux.HandleFunc("POST /admin/charges/{id}/drop", s.drop)
	mux.HandleFunc("POST /admin/ledger/charges", s.plantCharge)
	mux.HandleFunc("POST /admin/ledger/refunds", s.plantRefund)
	mux.HandleFunc("POST /admin/ledger/fail", s.failListings)
	mux.HandleFunc("GET /admin/ledger", s.ledger)
	mux.HandleFunc("POST /admin/reset", s.reset)
	mux.HandleFunc("GET /admin/faults", s.getFaults)
	mux.HandleFunc("PUT /admin/faults", s.putFaults)
	mux.HandleFunc("GET /admin/stats", s.getStats)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "route_not_found", "no route "+r.Method+" "+r.URL.Path)
	})
	s.mux = mux
	return s, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Close releases every held answer (they are dropped) and cuts latency
// waits short, so that an http.Server can shut down gracefully.
func (s *Server) Close() { s.once.Do(func() { close(s.closing) }) }

// SetFaults replaces the fault settings.
func (s *Server) SetFaults(f Faults) error {
	if err := f.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = f
	return nil
}

// Faults returns the fault settings.
func (s *Server) Faults() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

// Stats returns a copy of the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Injected = maps.Clone(s.stats.Injected)
	st.InjectedRefunds = maps.Clone(s.stats.InjectedRefunds)
	st.InjectedCaptures = maps.Clone(s.stats.InjectedCaptures)
	st.InjectedVoids = maps.Clone(s.stats.InjectedVoids)
	return st
}

// Charge is a charge as the API shows it.
type Charge struct {
	MerchantOrderID string      `json:"merchant_order_id"`
	Reference       string      `json:"reference"`
	Status          string      `json:"status"`
	DeclineCode     string      `json:"decline_code,omitempty"`
	Code            string      `json:"code,omitempty"`
	Amount          int64       `json:"amount"`
	Currency        string      `json:"currency"`
	NextAction      *NextAction `json:"next_action,omitempty"`
	// AmountCaptured is what a succeeded charge took.
	AmountCaptured int64 `json:"amount_captured,omitempty"`
	// CaptureBefore is when an authorized charge stops being capturable.
	CaptureBefore *time.Time `json:"capture_before,omitempty"`
}

// NextAction is what a front end does to let a pending charge go on.
type NextAction struct {
	Type         string `json:"type"`
	URL          string `json:"url,omitempty"`
	ClientSecret string `json:"client_secret,omitempty"`
}

// Refund is a refund as the API shows it.
type Refund struct {
	RefundOrderID   string `json:"refund_order_id"`
	MerchantOrderID string `json:"merchant_order_id"`
	Reference       string `json:"reference,omitempty"`
	Status          string `json:"status"`
	DeclineCode     string `json:"decline_code,omitempty"`
	Code            string `json:"code,omitempty"`
	Amount          int64  `json:"amount"`
	Currency        string `json:"currency"`
}

// Capture is a capture as the ledger shows it: money taken from an
// authorization.
type Capture struct {
	CaptureOrderID  string `json:"capture_order_id"`
	MerchantOrderID string `json:"merchant_order_id"`
	ChargeReference string `json:"charge_reference"`
	Reference       string `json:"reference"`
	Amount          int64  `json:"amount"`
	Currency        string `json:"currency"`
}

// Void is an authorization (or a pending manual charge) released by a void.
type Void struct {
	VoidOrderID     string `json:"void_order_id"`
	MerchantOrderID string `json:"merchant_order_id"`
	ChargeReference string `json:"charge_reference"`
	Reason          string `json:"reason,omitempty"`
}

// Authorization is a charge that was authorized, as it stands now: status
// authorized, succeeded (captured), or voided (by a void, or lapsed).
type Authorization struct {
	MerchantOrderID string    `json:"merchant_order_id"`
	Reference       string    `json:"reference"`
	Status          string    `json:"status"`
	Amount          int64     `json:"amount"`
	AmountCaptured  int64     `json:"amount_captured"`
	Currency        string    `json:"currency"`
	CaptureBefore   time.Time `json:"capture_before"`
	// Lapsed says it was voided by its capture_before passing.
	Lapsed bool `json:"lapsed,omitempty"`
}

// Ledger is every charge, refund, authorization, capture and void the
// server made, in creation order. An authorization is also in Charges.
type Ledger struct {
	Charges        []Charge        `json:"charges"`
	Refunds        []Refund        `json:"refunds"`
	Authorizations []Authorization `json:"authorizations"`
	Captures       []Capture       `json:"captures"`
	Voids          []Void          `json:"voids"`
}

// ChargeRequest is the body of POST /v1/charges.
type ChargeRequest struct {
	MerchantOrderID string `json:"merchant_order_id"`
	Amount          int64  `json:"amount"`
	Currency        string `json:"currency"`
	PaymentMethod   string `json:"payment_method"`
	Description     string `json:"description,omitempty"`
	AllowNextAction bool   `json:"allow_next_action,omitempty"`
	// CaptureMethod is "automatic" (the default) or "manual".
	CaptureMethod string `json:"capture_method,omitempty"`
	// MerchantID is the gateway's merchant the charge is for; the
	// listing's lines of the charge carry it.
	MerchantID string `json:"merchant_id,omitempty"`
}

// Transaction is one line of the listing (GET /v1/transactions): a charge
// as it stands now, or a refund.
type Transaction struct {
	// Kind is "charge" or "refund".
	Kind string `json:"kind"`
	// MerchantOrderID is the charge's order id (a refund's charge's);
	// empty for a charge planted without one.
	MerchantOrderID string `json:"merchant_order_id,omitempty"`
	// RefundOrderID is a refund's own order id; empty for a charge and
	// for a refund planted without one.
	RefundOrderID string `json:"refund_order_id,omitempty"`
	Reference     string `json:"reference"`
	// ChargeReference is a refund's charge's reference.
	ChargeReference string `json:"charge_reference,omitempty"`
	// Status is a charge's status (succeeded, declined, pending,
	// authorized, voided) or a refund's (succeeded, pending, declined).
	Status         string `json:"status"`
	Amount         int64  `json:"amount"`
	AmountCaptured int64  `json:"amount_captured,omitempty"`
	Currency       string `json:"currency"`
	// MerchantID is the merchant the charge request named; empty when it
	// named none, and on refunds.
	MerchantID string    `json:"merchant_id,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
}

// TransactionPage is the answer to GET /v1/transactions.
type TransactionPage struct {
	Data []Transaction `json:"data"`
	// NextCursor is the cursor of the next page, left out after the last.
	NextCursor string `json:"next_cursor,omitempty"`
}

// PlantChargeRequest is the body of POST /admin/ledger/charges.
type PlantChargeRequest struct {
	MerchantOrderID string `json:"merchant_order_id"`
	MerchantID      string `json:"merchant_id,omitempty"`
	Amount          int64  `json:"amount"`
	Currency        string `json:"currency"`
	// CreatedAt is when the listing says the charge was made; now when nil.
	CreatedAt *time.Time `json:"created_at,omitempty"`
}

// PlantRefundRequest is the body of POST /admin/ledger/refunds.
type PlantRefundRequest struct {
	RefundOrderID   string `json:"refund_order_id,omitempty"`
	MerchantOrderID string `json:"merchant_order_id"`
	Amount          int64  `json:"amount"`
	// CreatedAt is when the listing says the refund was made; now when nil.
	CreatedAt *time.Time `json:"created_at,omitempty"`
}

// FailListingsRequest is the body of POST /admin/ledger/fail.
type FailListingsRequest struct {
	// Listings is how many of the next listings fail 503 not_processed.
	Listings int `json:"listings"`
}

// CaptureRequest is the body of POST /v1/captures.
type CaptureRequest struct {
	CaptureOrderID  string `json:"capture_order_id"`
	MerchantOrderID string `json:"merchant_order_id"`
	ChargeReference string `json:"charge_reference"`
	Amount          int64  `json:"amount"`
	Currency        string `json:"currency"`
}

// VoidRequest is the body of POST /v1/voids.
type VoidRequest struct {
	VoidOrderID     string `json:"void_order_id"`
	MerchantOrderID string `json:"merchant_order_id"`
	ChargeReference string `json:"charge_reference"`
	Reason          string `json:"reason,omitempty"`
}

// SettleRequest is the body of POST /admin/charges/{merchant_order_id}/settle.
type SettleRequest struct {
	Status      string `json:"status"`
	DeclineCode string `json:"decline_code,omitempty"`
}

// RefundRequest is the body of POST /v1/refunds.
type RefundRequest struct {
	RefundOrderID   string `json:"refund_order_id"`
	MerchantOrderID string `json:"merchant_order_id"`
	ChargeReference string `json:"charge_reference"`
	Amount          int64  `json:"amount"`
	Currency        string `json:"currency"`
	Reason          string `json:"reason,omitempty"`
}

// ErrorBody is every error answer.
type ErrorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// Error codes of the API.
const (
	CodeInvalidRequest = "invalid_request"
	CodeOrderIDReused  = "order_id_reused"
	CodeNotFound       = "not_found"
	CodeNotProcessed   = "not_processed"
	CodeNotPending     = "not_pending"
	CodeNotAuthorized  = "not_authorized"
	CodeInternal       = "internal_error"
)

// LedgerSnapshot returns every charge, refund, authorization, capture and
// void made.
func (s *Server) LedgerSnapshot() Ledger {
	l := Ledger{Charges: []Charge{}, Refunds: []Refund{}, Authorizations: []Authorization{}, Captures: []Capture{}, Voids: []Void{}}
	for _, c := range s.psp.Charges() {
		l.Charges = append(l.Charges, fromCharge(c, ""))
	}
	for _, r := range s.psp.Refunds() {
		l.Refunds = append(l.Refunds, fromRefund(r))
	}
	for _, a := range s.psp.Authorizations() {
		l.Authorizations = append(l.Authorizations, Authorization{MerchantOrderID: a.Charge.MerchantOrderID,
			Reference: a.Charge.Reference, Status: string(a.Charge.Status), Amount: a.Charge.Amount,
			AmountCaptured: a.Charge.AmountCaptured, Currency: a.Charge.Currency, CaptureBefore: a.CaptureBefore, Lapsed: a.Lapsed})
	}
	for _, c := range s.psp.Captures() {
		l.Captures = append(l.Captures, Capture{CaptureOrderID: c.OrderID, MerchantOrderID: c.MerchantOrderID,
			ChargeReference: c.ChargeReference, Reference: c.Reference, Amount: c.Amount, Currency: c.Currency})
	}
	for _, v := range s.psp.Voids() {
		l.Voids = append(l.Voids, Void{VoidOrderID: v.OrderID, MerchantOrderID: v.MerchantOrderID,
			ChargeReference: v.ChargeReference, Reason: v.Reason})
	}
	return l
}

func (s *Server) createCharge(w http.ResponseWriter, r *http.Request) {
	s.count(func(st *Stats) { st.ChargeCalls++ })
	var req ChargeRequest
	if !decode(w, r, &req) {
		return
	}
	s.moneyCall(w, r, kindCharge, func() (int, any) {
		c, created, err := s.psp.ChargeCreated(context.Background(), psp.ChargeRequest{
			MerchantOrderID: req.MerchantOrderID, Amount: req.Amount, Currency: req.Currency,
			PaymentMethod: req.PaymentMethod, Description: req.Description, AllowNextAction: req.AllowNextAction,
			CaptureMethod: psp.CaptureMethod(req.CaptureMethod), MerchantID: req.MerchantID,
		})
		if err != nil {
			return refusal(err)
		}
		if created {
			return http.StatusCreated, fromCharge(c, origin(r))
		}
		return http.StatusOK, fromCharge(c, origin(r))
	})
}

func (s *Server) createRefund(w http.ResponseWriter, r *http.Request) {
	s.count(func(st *Stats) { st.RefundCalls++ })
	var req RefundRequest
	if !decode(w, r, &req) {
		return
	}
	s.moneyCall(w, r, kindRefund, func() (int, any) {
		rf, created, err := s.psp.RefundCreated(context.Background(), psp.RefundRequest{
			RefundOrderID: req.RefundOrderID, MerchantOrderID: req.MerchantOrderID,
			ChargeReference: req.ChargeReference, Amount: req.Amount, Currency: req.Currency, Reason: req.Reason,
		})
		if err != nil {
			return refusal(err)
		}
		if created {
			return http.StatusCreated, fromRefund(rf)
		}
		return http.StatusOK, fromRefund(rf)
	})
}

func (s *Server) createCapture(w http.ResponseWriter, r *http.Request) {
	s.count(func(st *Stats) { st.CaptureCalls++ })
	var req CaptureRequest
	if !decode(w, r, &req) {
		return
	}
	s.moneyCall(w, r, kindCapture, func() (int, any) {
		c, created, err := s.psp.CaptureCreated(context.Background(), psp.CaptureRequest{
			OrderID: req.CaptureOrderID, MerchantOrderID: req.MerchantOrderID, ChargeReference: req.ChargeReference,
			Amount: req.Amount, Currency: req.Currency,
		})
		return commanded(r, c, created, err)
	})
}

func (s *Server) createVoid(w http.ResponseWriter, r *http.Request) {
	s.count(func(st *Stats) { st.VoidCalls++ })
	var req VoidRequest
	if !decode(w, r, &req) {
		return
	}
	s.moneyCall(w, r, kindVoid, func() (int, any) {
		c, created, err := s.psp.VoidCreated(context.Background(), psp.VoidRequest{
			OrderID: req.VoidOrderID, MerchantOrderID: req.MerchantOrderID, ChargeReference: req.ChargeReference, Reason: req.Reason,
		})
		return commanded(r, c, created, err)
	})
}

// commanded answers a capture or void: 201 when this call acted, 200 with
// the charge as it stands otherwise.
func commanded(r *http.Request, c psp.Charge, created bool, err error) (int, any) {
	switch {
	case err != nil:
		return refusal(err)
	case created:
		return http.StatusCreated, fromCharge(c, origin(r))
	}
	return http.StatusOK, fromCharge(c, origin(r))
}

// moneyCall runs act, which moves money (a k), under the fault settings.
func (s *Server) moneyCall(w http.ResponseWriter, r *http.Request, k kind, act func() (int, any)) {
	f, latency := s.draw()
	if latency > 0 {
		// The PSP works on the request whether or not the client still waits.
		t := time.NewTimer(latency)
		select {
		case <-t.C:
		case <-s.closing:
			t.Stop()
		}
	}
	if f != noFault {
		s.count(func(st *Stats) {
			st.Injected[faultNames[f]]++
			if part := st.injected(k); part != nil {
				part[faultNames[f]]++
			}
		})
		s.log.Info("fakepsp: injecting fault", "fault", faultNames[f], "path", r.URL.Path)
	}
	if f == errorBefore {
		writeError(w, http.StatusServiceUnavailable, CodeNotProcessed, "injected fault: the request was not processed; retry")
		return
	}
	status, body := act()
	switch f {
	case errorAfter:
		writeError(w, http.StatusInternalServerError, CodeInternal, "injected fault after processing")
	case timeoutAfter:
		if s.onHold != nil {
			s.onHold()
		}
		t := time.NewTimer(s.holdMax)
		select {
		case <-r.Context().Done():
		case <-s.closing:
		case <-t.C:
		}
		t.Stop()
		drop(w)
	case dropAfter:
		drop(w)
	default:
		writeJSON(w, status, body)
	}
}

// draw picks this request's fault and latency.
func (s *Server) draw() (fault, time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.faults
	var latency time.Duration
	if f.Latency.Max > 0 {
		ms := f.Latency.Min + s.rng.IntN(f.Latency.Max-f.Latency.Min+1)
		latency = time.Duration(ms) * time.Millisecond
	}
	x := s.rng.Float64()
	for _, c := range []struct {
		f    fault
		rate float64
	}{
		{errorBefore, f.ErrorBeforeCharge},
		{errorAfter, f.ErrorAfterCharge},
		{timeoutAfter, f.TimeoutAfterCharge},
		{dropAfter, f.DropConnectionAfterCharge},
	} {
		if x < c.rate {
			return c.f, latency
		}
		x -= c.rate
	}
	return noFault, latency
}

func (s *Server) count(f func(*Stats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.stats)
}

func (s *Server) getCharge(w http.ResponseWriter, r *http.Request) {
	s.count(func(st *Stats) { st.LookupCalls++ })
	c, err := s.psp.Lookup(r.Context(), r.PathValue("id"))
	if errors.Is(err, psp.ErrNotFound) {
		writeError(w, http.StatusNotFound, CodeNotFound, "no charge for this merchant order id")
		return
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, CodeInternal, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, fromCharge(c, origin(r)))
}

// threeDS is the bank's 3-D Secure page: visiting it finishes the pending
// charge, passed unless ?result=failed.
func (s *Server) threeDS(w http.ResponseWriter, r *http.Request) {
	_, say, err := s.psp.ThreeDS(r.PathValue("reference"), r.URL.Query().Get("result") != "failed")
	switch {
	case errors.Is(err, psp.ErrNotFound):
		writeError(w, http.StatusNotFound, CodeNotFound, "no charge with this reference")
		return
	case err != nil:
		writeError(w, http.StatusConflict, CodeNotPending, "this payment is not waiting for 3-D Secure")
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, say+"\n")
}

// settle finishes a pending charge as the bank or the customer would.
func (s *Server) settle(w http.ResponseWriter, r *http.Request) {
	var req SettleRequest
	if !decode(w, r, &req) {
		return
	}
	status := psp.ChargeStatus(req.Status)
	if status != psp.Succeeded && status != psp.Declined {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, `status must be "succeeded" or "declined"`)
		return
	}
	c, err := s.psp.Settle(r.PathValue("id"), status, req.DeclineCode)
	if errors.Is(err, fake.ErrNotPending) {
		writeError(w, http.StatusConflict, CodeNotPending, "no pending charge for this merchant order id")
		return
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, fromCharge(c, origin(r)))
}

// lapse makes an authorization lapse now, as its capture_before passing would.
func (s *Server) lapse(w http.ResponseWriter, r *http.Request) {
	c, err := s.psp.Lapse(r.PathValue("id"))
	if err != nil {
		writeError(w, http.StatusConflict, CodeNotAuthorized, "no authorized charge for this merchant order id")
		return
	}
	writeJSON(w, http.StatusOK, fromCharge(c, origin(r)))
}

func (s *Server) getRefund(w http.ResponseWriter, r *http.Request) {
	s.count(func(st *Stats) { st.LookupCalls++ })
	id := r.PathValue("id")
	for _, rf := range s.psp.Refunds() {
		if rf.RefundOrderID != id {
			continue
		}
		if ref := r.URL.Query().Get("charge_reference"); ref != "" {
			if c, err := s.psp.Lookup(r.Context(), rf.MerchantOrderID); err != nil || c.Reference != ref {
				break
			}
		}
		writeJSON(w, http.StatusOK, fromRefund(rf))
		return
	}
	writeError(w, http.StatusNotFound, CodeNotFound, "no refund for this refund order id")
}

// listTransactions answers one page of the fake's psp.Ledger.
func (s *Server) listTransactions(w http.ResponseWriter, r *http.Request) {
	s.count(func(st *Stats) { st.ListCalls++ })
	q := r.URL.Query()
	var lq psp.LedgerQuery
	for _, f := range []struct {
		name string
		at   *time.Time
	}{{"from", &lq.From}, {"to", &lq.To}} {
		t, err := time.Parse(time.RFC3339Nano, q.Get(f.name))
		if err != nil {
			writeError(w, http.StatusBadRequest, CodeInvalidRequest, f.name+" must be an RFC 3339 time")
			return
		}
		*f.at = t
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			writeError(w, http.StatusBadRequest, CodeInvalidRequest, "limit must be a whole number, 0 or more")
			return
		}
		lq.Limit = n
	}
	lq.Cursor = q.Get("cursor")
	page, err := s.psp.ListTransactions(r.Context(), lq)
	if err != nil {
		switch class, _ := psp.ClassOf(err); class {
		case psp.Rejected:
			writeError(w, http.StatusBadRequest, CodeInvalidRequest, err.Error())
		case psp.NotProcessed:
			writeError(w, http.StatusServiceUnavailable, CodeNotProcessed, err.Error())
		default:
			writeError(w, http.StatusInternalServerError, CodeInternal, err.Error())
		}
		return
	}
	out := TransactionPage{Data: make([]Transaction, 0, len(page.Transactions)), NextCursor: page.Next}
	for _, t := range page.Transactions {
		out.Data = append(out.Data, Transaction{Kind: string(t.Kind), MerchantOrderID: t.MerchantOrderID, RefundOrderID: t.RefundOrderID,
			Reference: t.Reference, ChargeReference: t.ChargeReference, Status: t.Status, Amount: t.Amount,
			AmountCaptured: t.AmountCaptured, Currency: t.Currency, MerchantID: t.MerchantID, CreatedAt: t.CreatedAt.UTC()})
	}
	writeJSON(w, http.StatusOK, out)
}

// drop makes a charge vanish, as a PSP that lost it would.
func (s *Server) drop(w http.ResponseWriter, r *http.Request) {
	if !s.psp.Drop(r.PathValue("id")) {
		writeError(w, http.StatusNotFound, CodeNotFound, "no charge for this merchant order id")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// plantCharge records a succeeded charge the gateway never asked for.
func (s *Server) plantCharge(w http.ResponseWriter, r *http.Request) {
	var req PlantChargeRequest
	if !decode(w, r, &req) {
		return
	}
	if req.Amount <= 0 || req.Currency == "" {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, "a planted charge needs a positive amount and a currency")
		return
	}
	if req.MerchantOrderID != "" {
		if _, err := s.psp.Lookup(r.Context(), req.MerchantOrderID); !errors.Is(err, psp.ErrNotFound) {
			writeError(w, http.StatusConflict, CodeOrderIDReused, "this merchant order id has a charge already")
			return
		}
	}
	c := s.psp.PlantCharge(req.MerchantOrderID, req.MerchantID, req.Amount, req.Currency, s.plantedAt(req.CreatedAt))
	writeJSON(w, http.StatusCreated, fromCharge(c, origin(r)))
}

// plantRefund records a succeeded refund the gateway never asked for.
func (s *Server) plantRefund(w http.ResponseWriter, r *http.Request) {
	var req PlantRefundRequest
	if !decode(w, r, &req) {
		return
	}
	if req.Amount <= 0 || req.MerchantOrderID == "" {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, "a planted refund needs its charge's merchant order id and a positive amount")
		return
	}
	rf, err := s.psp.PlantRefund(req.MerchantOrderID, req.RefundOrderID, req.Amount, s.plantedAt(req.CreatedAt))
	if err != nil {
		writeError(w, http.StatusNotFound, CodeNotFound, err.Error())
		return
	}
	writeJSON(w, http.StatusCreated, fromRefund(rf))
}

// plantedAt is when a planted line is listed: at, or now.
func (s *Server) plantedAt(at *time.Time) time.Time {
	if at == nil {
		return s.now()
	}
	return *at
}

// failListings makes the next listings fail, as a PSP's listing that is down.
func (s *Server) failListings(w http.ResponseWriter, r *http.Request) {
	var req FailListingsRequest
	if !decode(w, r, &req) {
		return
	}
	if req.Listings < 0 {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, "listings must be 0 or more")
		return
	}
	s.psp.FailNextListings(req.Listings)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) ledger(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.LedgerSnapshot())
}

func (s *Server) reset(w http.ResponseWriter, r *http.Request) {
	s.psp.Reset()
	s.mu.Lock()
	s.stats = newStats()
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) getFaults(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.Faults())
}

func (s *Server) putFaults(w http.ResponseWriter, r *http.Request) {
	var f Faults
	if !decode(w, r, &f) {
		return
	}
	if err := s.SetFaults(f); err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, f)
}

func (s *Server) getStats(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.Stats())
}

// refusal turns the fake's errors into API answers.
func refusal(err error) (int, any) {
	var body ErrorBody
	body.Error.Message = err.Error()
	class, _ := psp.ClassOf(err)
	switch {
	case errors.Is(err, fake.ErrOrderIDReused):
		body.Error.Code = CodeOrderIDReused
		return http.StatusConflict, body
	case class == psp.Rejected:
		body.Error.Code = CodeInvalidRequest
		return http.StatusBadRequest, body
	}
	body.Error.Code = CodeInternal
	return http.StatusInternalServerError, body
}

// origin is the scheme and host the client reached, for absolute links.
func origin(r *http.Request) string {
	if r.TLS != nil {
		return "https://" + r.Host
	}
	return "http://" + r.Host
}

// fromCharge renders c; a next action's path is made absolute on base.
func fromCharge(c psp.Charge, base string) Charge {
	out := Charge{MerchantOrderID: c.MerchantOrderID, Reference: c.Reference, Status: string(c.Status),
		DeclineCode: c.DeclineCode, Code: c.Code, Amount: c.Amount, Currency: c.Currency, AmountCaptured: c.AmountCaptured}
	if !c.CaptureBefore.IsZero() {
		cb := c.CaptureBefore.UTC()
		out.CaptureBefore = &cb
	}
	if na := c.NextAction; na != nil {
		out.NextAction = &NextAction{Type: na.Type, URL: na.URL, ClientSecret: na.ClientSecret}
		if strings.HasPrefix(na.URL, "/") {
			out.NextAction.URL = base + na.URL
		}
	}
	return out
}

func fromRefund(r psp.Refund) Refund {
	return Refund{RefundOrderID: r.RefundOrderID, MerchantOrderID: r.MerchantOrderID, Reference: r.Reference,
		Status: string(r.Status), DeclineCode: r.DeclineCode, Code: r.Code, Amount: r.Amount, Currency: r.Currency}
}

// maxBody bounds request bodies.
const maxBody = 64 << 10

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, "invalid JSON body: "+err.Error())
		return false
	}
	if _, err := dec.Token(); err != io.EOF {
		writeError(w, http.StatusBadRequest, CodeInvalidRequest, "invalid JSON body: trailing data")
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	var body ErrorBody
	body.Error.Code, body.Error.Message = code, msg
	writeJSON(w, status, body)
}

// drop closes the connection without an answer, with a TCP reset.
func drop(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}
