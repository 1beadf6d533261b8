// Package fakeserver owns the standalone fake payment service provider's HTTP
// API: the in-process fake PSP (package psp/fake) behind a JSON interface,
// with a ledger for invariant checks and random fault injection, so that a
// person or a chaos test can watch the gateway survive a misbehaving PSP over
// a real network. cmd/fakepsp serves it; psp/fake/fakeclient is the gateway's
// adapter for it.
//
// The API:
//
//	POST /v1/charges                      {"merchant_order_id","amount","currency","payment_method","description","allow_next_action"}
//	                                      201 new charge, 200 the same order id again (deduplicated),
//	                                      409 same order id with another amount or currency,
//	                                      400 a request the PSP can never accept (Rejected; the code says why)
//	GET  /v1/charges/{merchant_order_id}  200 the charge, 404 none
//	POST /v1/refunds                      {"refund_order_id","merchant_order_id","charge_reference","amount","currency","reason"}
//	                                      201 new refund, 200 a repeat or a declined refund, 409, 400
//	GET  /v1/refunds/{refund_order_id}    200 the refund, 404 none (?charge_reference= narrows it)
//	GET  /3ds/{reference}                 the 3-D Secure page a pending pm_card_3ds charge redirects to:
//	                                      visiting it passes the check (the charge succeeds);
//	                                      ?result=failed fails it (declined, authentication_failed)
//	POST /admin/charges/{merchant_order_id}/settle {"status":"succeeded"|"declined","decline_code"}
//	                                      finishes a pending charge (a deposit arrived, 3-D Secure done);
//	                                      200 the charge, 409 not_pending
//	GET  /admin/ledger                    every charge and refund
//	POST /admin/reset                     forget charges, refunds and counters (fault settings stay)
//	GET  /admin/faults, PUT /admin/faults the fault settings (Faults)
//	GET  /admin/stats                     calls received and faults injected
//	GET  /healthz
//
// Errors are {"error":{"code","message"}}. A charge is {"merchant_order_id",
// "reference","status","decline_code","code","amount","currency",
// "next_action":{"type","url","client_secret"}}, status one of succeeded,
// declined, pending. Payment methods behave as in package fake:
// pm_card_ok succeeds; pm_card_declined, pm_card_insufficient_funds and
// pm_card_lost are declined; pm_card_3ds is pending with a redirect to
// /3ds/{reference} when allow_next_action is true (declined
// authentication_required otherwise); pm_virtual_account is pending until
// settled; pm_invalid_request is refused 400 invalid_request; anything else
// is declined as invalid_payment_method. The currencies taken are package
// fake's defaults (fake.Currencies).
//
// Faults apply to the two POSTs. Each request first waits a random latency,
// then draws at most one fault: error_before_charge answers 503
// {"code":"not_processed"} without acting; the three "after charge" faults
// record the charge (or refund) exactly as without the fault and then lose
// the answer: error_after_charge answers 500, timeout_after_charge holds the
// answer until the client gives up (or HoldMax passes) and then drops the
// connection, drop_connection_after_charge resets the connection at once.
package fakeserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"gateway/psp"
	"gateway/psp/fake"
)

// Faults is how often the server misbehaves. Rates are probabilities per
// POST, in [0, 1], adding up to at most 1.
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
}

// Stats counts what the server received and did.
type Stats struct {
	ChargeCalls int            `json:"charge_calls"`
	RefundCalls int            `json:"refund_calls"`
	LookupCalls int            `json:"lookup_calls"`
	Injected    map[string]int `json:"injected"`
	// InjectedRefunds is the part of Injected drawn by refund calls.
	InjectedRefunds map[string]int `json:"injected_refunds"`
}

// Server is the fake PSP's HTTP handler. Close it to release held answers.
type Server struct {
	psp     *fake.PSP
	mux     *http.ServeMux
	holdMax time.Duration
	log     *slog.Logger
	onHold  func()
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
	seed := opts.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	s := &Server{
		psp:     fake.New(),
		holdMax: opts.HoldMax,
		log:     opts.Logger,
		onHold:  opts.OnHold,
		closing: make(chan struct{}),
		faults:  opts.Faults,
		rng:     rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		stats:   Stats{Injected: map[string]int{}, InjectedRefunds: map[string]int{}},
	}
	if s.holdMax <= 0 {
		s.holdMax = time.Minute
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/charges", s.createCharge)
	mux.HandleFunc("GET /v1/charges/{id}", s.getCharge)
	mux.HandleFunc("POST /v1/refunds", s.createRefund)
	mux.HandleFunc("GET /v1/refunds/{id}", s.getRefund)
	mux.HandleFunc("GET /3ds/{reference}", s.threeDS)
	mux.HandleFunc("POST /admin/charges/{id}/settle", s.settle)
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
	st.Injected = make(map[string]int, len(s.stats.Injected))
	for k, v := range s.stats.Injected {
		st.Injected[k] = v
	}
	st.InjectedRefunds = make(map[string]int, len(s.stats.InjectedRefunds))
	for k, v := range s.stats.InjectedRefunds {
		st.InjectedRefunds[k] = v
	}
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

// Ledger is every charge and refund the server made, in creation order.
type Ledger struct {
	Charges []Charge `json:"charges"`
	Refunds []Refund `json:"refunds"`
}

// ChargeRequest is the body of POST /v1/charges.
type ChargeRequest struct {
	MerchantOrderID string `json:"merchant_order_id"`
	Amount          int64  `json:"amount"`
	Currency        string `json:"currency"`
	PaymentMethod   string `json:"payment_method"`
	Description     string `json:"description,omitempty"`
	AllowNextAction bool   `json:"allow_next_action,omitempty"`
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
	CodeInternal       = "internal_error"
)

// LedgerSnapshot returns every charge and refund made.
func (s *Server) LedgerSnapshot() Ledger {
	l := Ledger{Charges: []Charge{}, Refunds: []Refund{}}
	for _, c := range s.psp.Charges() {
		l.Charges = append(l.Charges, fromCharge(c, ""))
	}
	for _, r := range s.psp.Refunds() {
		l.Refunds = append(l.Refunds, fromRefund(r))
	}
	return l
}

func (s *Server) createCharge(w http.ResponseWriter, r *http.Request) {
	s.count(func(st *Stats) { st.ChargeCalls++ })
	var req ChargeRequest
	if !decode(w, r, &req) {
		return
	}
	s.moneyCall(w, r, false, func() (int, any) {
		c, created, err := s.psp.ChargeCreated(context.Background(), psp.ChargeRequest{
			MerchantOrderID: req.MerchantOrderID, Amount: req.Amount, Currency: req.Currency,
			PaymentMethod: req.PaymentMethod, Description: req.Description, AllowNextAction: req.AllowNextAction,
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
	s.moneyCall(w, r, true, func() (int, any) {
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

// moneyCall runs act, which moves money (a refund when refund is set),
// under the fault settings.
func (s *Server) moneyCall(w http.ResponseWriter, r *http.Request, refund bool, act func() (int, any)) {
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
			if refund {
				st.InjectedRefunds[faultNames[f]]++
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

func (s *Server) ledger(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.LedgerSnapshot())
}

func (s *Server) reset(w http.ResponseWriter, r *http.Request) {
	s.psp.Reset()
	s.mu.Lock()
	s.stats = Stats{Injected: map[string]int{}, InjectedRefunds: map[string]int{}}
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
		DeclineCode: c.DeclineCode, Code: c.Code, Amount: c.Amount, Currency: c.Currency}
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
