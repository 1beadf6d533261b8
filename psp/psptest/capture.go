package psptest

import (
	"sync"
	"testing"
	"time"

	"gateway/psp"
)

// CaptureBackend is a Backend whose PSP captures and voids authorizations:
// the suite needs one for an adapter that declares ManualCapture.
type CaptureBackend interface {
	Backend
	// Captures counts the captures that took money under a capture order
	// id, from the backend's ledger.
	Captures(captureOrderID string) int
	// Voids counts the authorizations released under a void order id.
	Voids(voidOrderID string) int
}

// Lapser is a CaptureBackend that can make the authorization of an order
// lapse now, as its CaptureBefore passing would.
type Lapser interface {
	Lapse(merchantOrderID string)
}

// Prefixes of the capture and void order ids the suite makes.
const (
	CapturePrefix = "cap_"
	VoidPrefix    = "vod_"
)

// voidReason is the gateway's reason the suite voids with.
const voidReason = "requested_by_customer"

// capHarness is a Harness whose adapter captures and whose backend counts
// captures and voids.
type capHarness struct {
	Harness
	capturer psp.Capturer
	ledger   CaptureBackend
}

func (s suite) capHarness(t *testing.T) capHarness {
	t.Helper()
	h := s.harness(t)
	return capHarness{Harness: h, capturer: h.Adapter.(psp.Capturer), ledger: h.Backend.(CaptureBackend)}
}

// manualCapture runs the manual-capture tests against an adapter that
// declares ManualCapture, and checks that one that does not says nothing
// of how long an authorization lasts.
func (s suite) manualCapture(t *testing.T) {
	t.Parallel()
	h := s.harness(t)
	caps := h.Adapter.Capabilities()
	_, capturer := h.Adapter.(psp.Capturer)
	if !caps.ManualCapture {
		if caps.AuthorizationValidity != 0 {
			t.Errorf("AuthorizationValidity %v without ManualCapture", caps.AuthorizationValidity)
		}
		t.Skip("the adapter does not declare ManualCapture")
	}
	switch _, ledger := h.Backend.(CaptureBackend); {
	case !capturer:
		t.Fatal("the adapter declares ManualCapture but is not a psp.Capturer")
	case caps.AuthorizationValidity <= 0:
		t.Fatalf("AuthorizationValidity %v: an adapter that captures later must say how long an authorization lasts", caps.AuthorizationValidity)
	case !ledger:
		t.Fatal("the backend cannot count captures and voids: it must be a psptest.CaptureBackend")
	}
	t.Run("authorize", s.authorize)
	t.Run("capture", s.capture)
	t.Run("void", s.void)
	t.Run("void_after_capture", s.voidAfterCapture)
	t.Run("rejected", s.captureRejected)
	t.Run("lapse", s.lapse)
	t.Run("capture_faults", s.captureFaults)
	t.Run("void_faults", s.voidFaults)
	t.Run("capture_races_void", s.captureRacesVoid)
	t.Run("concurrent_same_capture", s.concurrentSameCapture)
	t.Run("unreachable", s.unreachableCapture)
}

func (h capHarness) authorizeReq(o Outcome) psp.ChargeRequest {
	req := h.charge(NewOrderID(OrderPrefix), o)
	req.CaptureMethod = psp.CaptureManual
	return req
}

// authorize makes a fresh authorization of the suite's amount.
func (h capHarness) authorize(t *testing.T) psp.Charge {
	t.Helper()
	req := h.authorizeReq(Success)
	c, err := h.Adapter.Charge(t.Context(), req)
	if err != nil || c.Status != psp.Authorized {
		t.Fatalf("Charge(%s, manual capture) = %+v, %v; want authorized", req.MerchantOrderID, c, err)
	}
	return c
}

func captureOf(c psp.Charge, amount int64) psp.CaptureRequest {
	return psp.CaptureRequest{OrderID: NewOrderID(CapturePrefix), MerchantOrderID: c.MerchantOrderID,
		ChargeReference: c.Reference, Amount: amount, Currency: c.Currency}
}

func voidOf(c psp.Charge) psp.VoidRequest {
	return psp.VoidRequest{OrderID: NewOrderID(VoidPrefix), MerchantOrderID: c.MerchantOrderID,
		ChargeReference: c.Reference, Reason: voidReason}
}

// wantSame fails unless got is the charge auth, whatever became of it.
func wantSame(t *testing.T, got, auth psp.Charge) {
	t.Helper()
	if got.MerchantOrderID != auth.MerchantOrderID || got.Reference != auth.Reference ||
		got.Amount != auth.Amount || got.Currency != auth.Currency {
		t.Fatalf("answer %+v is not the charge %+v", got, auth)
	}
}

func wantAuthorized(t *testing.T, got, auth psp.Charge) {
	t.Helper()
	wantSame(t, got, auth)
	if got.Status != psp.Authorized || got.AmountCaptured != 0 || got.DeclineCode != "" {
		t.Fatalf("charge %+v, want it still authorized, nothing captured", got)
	}
}

func wantCaptured(t *testing.T, got, auth psp.Charge, amount int64) {
	t.Helper()
	wantSame(t, got, auth)
	if got.Status != psp.Succeeded || got.AmountCaptured != amount || !got.CaptureBefore.IsZero() {
		t.Fatalf("charge %+v, want succeeded with %d captured (and no CaptureBefore)", got, amount)
	}
}

func wantVoided(t *testing.T, got, auth psp.Charge) {
	t.Helper()
	wantSame(t, got, auth)
	if got.Status != psp.Voided || got.AmountCaptured != 0 || !got.CaptureBefore.IsZero() {
		t.Fatalf("charge %+v, want voided, nothing captured", got)
	}
}

func (h capHarness) wantCaptures(t *testing.T, orderID string, want int) {
	t.Helper()
	if got := h.ledger.Captures(orderID); got != want {
		t.Fatalf("backend has %d captures for %s, want %d", got, orderID, want)
	}
}

func (h capHarness) wantVoids(t *testing.T, orderID string, want int) {
	t.Helper()
	if got := h.ledger.Voids(orderID); got != want {
		t.Fatalf("backend has %d voids for %s, want %d", got, orderID, want)
	}
}

// lookup returns the charge of auth's order as the PSP has it now.
func (h capHarness) lookup(t *testing.T, auth psp.Charge) psp.Charge {
	t.Helper()
	got, err := h.Adapter.Lookup(t.Context(), auth.MerchantOrderID)
	if err != nil {
		t.Fatalf("Lookup(%s): %v", auth.MerchantOrderID, err)
	}
	return got
}

// An authorization holds the amount and moves none of it: a result like a
// charge, deduplicated like one, and nothing to refund.
func (s suite) authorize(t *testing.T) {
	t.Parallel()
	h := s.capHarness(t)
	req := h.authorizeReq(Success)
	c, err := h.Adapter.Charge(t.Context(), req)
	if err != nil {
		t.Fatalf("Charge(manual capture): %v", err)
	}
	if c.Status != psp.Authorized || c.AmountCaptured != 0 || c.DeclineCode != "" || c.Code != "" || c.NextAction != nil || c.Reference == "" {
		t.Fatalf("Charge(manual capture) = %+v, want authorized, nothing captured", c)
	}
	if err := psp.MatchCharge("charge", req, c); err != nil {
		t.Fatal(err)
	}
	if cb := c.CaptureBefore; !cb.IsZero() && (!cb.After(time.Now()) || cb.Location() != time.UTC) {
		t.Fatalf("CaptureBefore %v: an authorization just made must be capturable, its deadline in UTC", cb)
	}
	wantCharges(t, h.Harness, req.MerchantOrderID, 1)
	if got, err := h.Adapter.Lookup(t.Context(), req.MerchantOrderID); err != nil || !got.Equal(c) {
		t.Fatalf("Lookup = %+v, %v; want %+v", got, err, c)
	}
	if again, err := h.Adapter.Charge(t.Context(), req); err != nil || !again.Equal(c) {
		t.Fatalf("second Charge = %+v, %v; want the first %+v", again, err, c)
	}
	wantCharges(t, h.Harness, req.MerchantOrderID, 1)

	// The same order id taken at once is another charge: a conflict.
	now := req
	now.CaptureMethod = psp.CaptureAutomatic
	_, err = h.Adapter.Charge(t.Context(), now)
	wantConflict(t, err, "charge")
	wantCharges(t, h.Harness, req.MerchantOrderID, 1)

	rf := refundOf(c, NewOrderID(RefundPrefix), 1)
	if r, err := h.Adapter.Refund(t.Context(), rf); err != nil || r.Status != psp.RefundDeclined || r.DeclineCode != psp.RefundDeclineNotRefundable {
		t.Fatalf("Refund of an authorization = %+v, %v; want declined %s: nothing was captured", r, err, psp.RefundDeclineNotRefundable)
	}
	if got := h.Backend.Refunds(rf.RefundOrderID); got != 0 {
		t.Fatalf("a refund of an authorization left %d records", got)
	}

	// A charge taken at once says what it took; a declined card authorizes nothing.
	if auto := h.mustCharge(t, Success); auto.Status != psp.Succeeded || auto.AmountCaptured != auto.Amount || !auto.CaptureBefore.IsZero() {
		t.Fatalf("automatic Charge = %+v, want succeeded with its amount captured", auto)
	}
	declined := h.authorizeReq(DeclinedCard)
	if d, err := h.Adapter.Charge(t.Context(), declined); err != nil || d.Status != psp.Declined || d.AmountCaptured != 0 {
		t.Fatalf("Charge(declined card, manual capture) = %+v, %v; want declined", d, err)
	}
}

// A capture takes all or part of the authorization once; a repeat of its
// order id takes nothing more, another capture takes nothing, and only what
// was captured can be refunded.
func (s suite) capture(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		part int64
	}{{"full", amount}, {"partial", amount / 3}} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := s.capHarness(t)
			auth := h.authorize(t)
			req := captureOf(auth, tt.part)
			c, err := h.capturer.Capture(t.Context(), req)
			if err != nil {
				t.Fatalf("Capture(%d): %v", tt.part, err)
			}
			wantCaptured(t, c, auth, tt.part)
			h.wantCaptures(t, req.OrderID, 1)
			if got := h.lookup(t, auth); !got.Equal(c) {
				t.Fatalf("Lookup after the capture = %+v, want %+v", got, c)
			}
			if again, err := h.capturer.Capture(t.Context(), req); err != nil || !again.Equal(c) {
				t.Fatalf("second Capture = %+v, %v; want the first %+v", again, err, c)
			}
			h.wantCaptures(t, req.OrderID, 1)

			other := req
			other.Amount--
			_, err = h.capturer.Capture(t.Context(), other)
			wantConflict(t, err, "capture")
			h.wantCaptures(t, req.OrderID, 1)

			// One capture per authorization: the rest was released.
			more := captureOf(auth, 1)
			if got, err := h.capturer.Capture(t.Context(), more); err != nil || !got.Equal(c) {
				t.Fatalf("Capture with another order id = %+v, %v; want the captured charge %+v, nothing taken", got, err, c)
			}
			h.wantCaptures(t, more.OrderID, 0)

			over := refundOf(c, NewOrderID(RefundPrefix), tt.part+1)
			if r, err := h.Adapter.Refund(t.Context(), over); err != nil || r.Status != psp.RefundDeclined || r.DeclineCode != psp.RefundDeclineAmountExceeded {
				t.Fatalf("Refund of more than was captured = %+v, %v; want declined %s", r, err, psp.RefundDeclineAmountExceeded)
			}
			rf := refundOf(c, NewOrderID(RefundPrefix), tt.part)
			r, err := h.Adapter.Refund(t.Context(), rf)
			if err != nil {
				t.Fatalf("Refund of what was captured: %v", err)
			}
			wantRefunded(t, r, rf)
		})
	}
}

// A void releases the authorization once; nothing can be captured or
// refunded after it.
func (s suite) void(t *testing.T) {
	t.Parallel()
	h := s.capHarness(t)
	auth := h.authorize(t)
	req := voidOf(auth)
	v, err := h.capturer.Void(t.Context(), req)
	if err != nil {
		t.Fatalf("Void: %v", err)
	}
	wantVoided(t, v, auth)
	h.wantVoids(t, req.OrderID, 1)
	if got := h.lookup(t, auth); !got.Equal(v) {
		t.Fatalf("Lookup after the void = %+v, want %+v", got, v)
	}
	if again, err := h.capturer.Void(t.Context(), req); err != nil || !again.Equal(v) {
		t.Fatalf("second Void = %+v, %v; want the first %+v", again, err, v)
	}
	h.wantVoids(t, req.OrderID, 1)

	capture := captureOf(auth, amount)
	if c, err := h.capturer.Capture(t.Context(), capture); err != nil || !c.Equal(v) {
		t.Fatalf("Capture of a voided charge = %+v, %v; want the voided charge %+v", c, err, v)
	}
	h.wantCaptures(t, capture.OrderID, 0)
	other := voidOf(auth)
	if got, err := h.capturer.Void(t.Context(), other); err != nil || !got.Equal(v) {
		t.Fatalf("Void with another order id = %+v, %v; want the voided charge %+v", got, err, v)
	}
	h.wantVoids(t, other.OrderID, 0)
	rf := refundOf(auth, NewOrderID(RefundPrefix), 1)
	if r, err := h.Adapter.Refund(t.Context(), rf); err != nil || r.Status != psp.RefundDeclined || r.DeclineCode != psp.RefundDeclineNotRefundable {
		t.Fatalf("Refund of a voided charge = %+v, %v; want declined %s", r, err, psp.RefundDeclineNotRefundable)
	}
}

// A void of a captured charge releases nothing: the answer is the capture.
func (s suite) voidAfterCapture(t *testing.T) {
	t.Parallel()
	h := s.capHarness(t)
	auth := h.authorize(t)
	c, err := h.capturer.Capture(t.Context(), captureOf(auth, amount))
	if err != nil {
		t.Fatalf("Capture: %v", err)
	}
	req := voidOf(auth)
	v, err := h.capturer.Void(t.Context(), req)
	if err != nil || !v.Equal(c) {
		t.Fatalf("Void of a captured charge = %+v, %v; want the captured charge %+v", v, err, c)
	}
	h.wantVoids(t, req.OrderID, 0)
	wantCaptured(t, h.lookup(t, auth), auth, amount)
}

// A capture or void that can never succeed is refused Rejected, and the
// authorization stays as it was.
func (s suite) captureRejected(t *testing.T) {
	t.Parallel()
	h := s.capHarness(t)
	auth := h.authorize(t)
	unknown := NewOrderID("zz_")
	captures := []struct {
		name string
		mod  func(*psp.CaptureRequest)
	}{
		{"zero_amount", func(r *psp.CaptureRequest) { r.Amount = 0 }},
		{"more_than_authorized", func(r *psp.CaptureRequest) { r.Amount = amount + 1 }},
		{"currency_not_taken", func(r *psp.CaptureRequest) { r.Currency = notTaken }},
		{"empty_order_id", func(r *psp.CaptureRequest) { r.OrderID = "" }},
		{"empty_charge_reference", func(r *psp.CaptureRequest) { r.ChargeReference = "" }},
		{"unknown_charge", func(r *psp.CaptureRequest) { r.ChargeReference = unknown }},
	}
	for _, tt := range captures {
		t.Run("capture_"+tt.name, func(t *testing.T) {
			req := captureOf(auth, amount)
			tt.mod(&req)
			_, err := h.capturer.Capture(t.Context(), req)
			wantClass(t, err, "capture", psp.Rejected)
			if req.OrderID != "" {
				h.wantCaptures(t, req.OrderID, 0)
			}
		})
	}
	voids := []struct {
		name string
		mod  func(*psp.VoidRequest)
	}{
		{"empty_order_id", func(r *psp.VoidRequest) { r.OrderID = "" }},
		{"empty_charge_reference", func(r *psp.VoidRequest) { r.ChargeReference = "" }},
		{"unknown_charge", func(r *psp.VoidRequest) { r.ChargeReference = unknown }},
	}
	for _, tt := range voids {
		t.Run("void_"+tt.name, func(t *testing.T) {
			req := voidOf(auth)
			tt.mod(&req)
			_, err := h.capturer.Void(t.Context(), req)
			wantClass(t, err, "void", psp.Rejected)
			if req.OrderID != "" {
				h.wantVoids(t, req.OrderID, 0)
			}
		})
	}
	if got := h.lookup(t, auth); !got.Equal(auth) {
		t.Fatalf("Lookup after the refusals = %+v, want the untouched authorization %+v", got, auth)
	}
}

// An authorization that lapses is voided: nothing can capture it, and a
// void has nothing left to release.
func (s suite) lapse(t *testing.T) {
	t.Parallel()
	h := s.capHarness(t)
	lapser, ok := h.Backend.(Lapser)
	if !ok {
		t.Skip("the backend cannot make an authorization lapse")
	}
	auth := h.authorize(t)
	lapser.Lapse(auth.MerchantOrderID)
	wantVoided(t, h.lookup(t, auth), auth)
	capture := captureOf(auth, amount)
	c, err := h.capturer.Capture(t.Context(), capture)
	if err != nil {
		t.Fatalf("Capture of a lapsed authorization: %v", err)
	}
	wantVoided(t, c, auth)
	h.wantCaptures(t, capture.OrderID, 0)
	void := voidOf(auth)
	v, err := h.capturer.Void(t.Context(), void)
	if err != nil {
		t.Fatalf("Void of a lapsed authorization: %v", err)
	}
	wantVoided(t, v, auth)
	h.wantVoids(t, void.OrderID, 0)
}

// commandFaults are the faults a capture or void is put through: every one
// a charge is, and an answer rewritten for another order where there is an
// answer in transit.
func (h capHarness) commandFaults() []struct {
	fault Fault
	class psp.Class
} {
	cases := append([]struct {
		fault Fault
		class psp.Class
	}(nil), faultCases...)
	if !h.InProcess {
		cases = append(cases, struct {
			fault Fault
			class psp.Class
		}{ForeignAfter, psp.Unknown})
	}
	return cases
}

// wantFailed checks a faulted command's error: its class, and for a
// rewritten answer psp.ErrMismatch.
func wantFailed(t *testing.T, err error, op string, f Fault, class psp.Class) {
	t.Helper()
	if f == ForeignAfter {
		wantMismatch(t, err, op)
		return
	}
	wantClass(t, err, op, class)
}

// A capture whose answer is lost is looked up: the lookup shows what the
// PSP did, and the retry with the same order id captures once in all.
func (s suite) captureFaults(t *testing.T) {
	t.Parallel()
	for _, tt := range s.capHarness(t).commandFaults() {
		t.Run(tt.fault.String(), func(t *testing.T) {
			t.Parallel()
			h := s.capHarness(t)
			auth := h.authorize(t)
			req := captureOf(auth, amount/3)
			gate := NewGate()
			t.Cleanup(gate.Release)
			h.Backend.Inject(OpCapture, tt.fault, gate)

			_, err := h.capturer.Capture(callContext(t, tt.fault, gate), req)
			gate.Release()
			wantFailed(t, err, "capture", tt.fault, tt.class)
			want := 0
			if tt.fault.Acts() {
				want = 1
			}
			h.wantCaptures(t, req.OrderID, want)

			found := h.lookup(t, auth)
			if want == 1 {
				wantCaptured(t, found, auth, req.Amount)
			} else {
				wantAuthorized(t, found, auth)
			}
			c, err := h.capturer.Capture(t.Context(), req)
			if err != nil {
				t.Fatalf("Capture after the fault: %v", err)
			}
			wantCaptured(t, c, auth, req.Amount)
			if want == 1 && !c.Equal(found) {
				t.Fatalf("Capture after the fault = %+v, want the capture made under it %+v", c, found)
			}
			h.wantCaptures(t, req.OrderID, 1)
		})
	}
}

// A void whose answer is lost is looked up and retried the same way.
func (s suite) voidFaults(t *testing.T) {
	t.Parallel()
	for _, tt := range s.capHarness(t).commandFaults() {
		t.Run(tt.fault.String(), func(t *testing.T) {
			t.Parallel()
			h := s.capHarness(t)
			auth := h.authorize(t)
			req := voidOf(auth)
			gate := NewGate()
			t.Cleanup(gate.Release)
			h.Backend.Inject(OpVoid, tt.fault, gate)

			_, err := h.capturer.Void(callContext(t, tt.fault, gate), req)
			gate.Release()
			wantFailed(t, err, "void", tt.fault, tt.class)
			want := 0
			if tt.fault.Acts() {
				want = 1
			}
			h.wantVoids(t, req.OrderID, want)

			found := h.lookup(t, auth)
			if want == 1 {
				wantVoided(t, found, auth)
			} else {
				wantAuthorized(t, found, auth)
			}
			v, err := h.capturer.Void(t.Context(), req)
			if err != nil {
				t.Fatalf("Void after the fault: %v", err)
			}
			wantVoided(t, v, auth)
			h.wantVoids(t, req.OrderID, 1)
		})
	}
}

// A capture racing a void: exactly one of them acts, and both answer the
// charge as the winner left it.
func (s suite) captureRacesVoid(t *testing.T) {
	t.Parallel()
	h := s.capHarness(t)
	for round := range 4 {
		auth := h.authorize(t)
		creq, vreq := captureOf(auth, amount), voidOf(auth)
		var (
			wg         sync.WaitGroup
			start      = make(chan struct{})
			c, v       psp.Charge
			cerr, verr error
		)
		wg.Go(func() { <-start; c, cerr = h.capturer.Capture(t.Context(), creq) })
		wg.Go(func() { <-start; v, verr = h.capturer.Void(t.Context(), vreq) })
		close(start)
		wg.Wait()
		if cerr != nil || verr != nil {
			t.Fatalf("round %d: Capture = %v, Void = %v", round, cerr, verr)
		}
		captured, voided := h.ledger.Captures(creq.OrderID), h.ledger.Voids(vreq.OrderID)
		switch final := h.lookup(t, auth); final.Status {
		case psp.Succeeded:
			if captured != 1 || voided != 0 {
				t.Fatalf("round %d: captured, with %d captures and %d voids", round, captured, voided)
			}
			wantCaptured(t, c, auth, amount)
			wantCaptured(t, v, auth, amount)
		case psp.Voided:
			if captured != 0 || voided != 1 {
				t.Fatalf("round %d: voided, with %d captures and %d voids", round, captured, voided)
			}
			wantVoided(t, c, auth)
			wantVoided(t, v, auth)
		default:
			t.Fatalf("round %d: after a capture and a void the charge is %+v", round, final)
		}
	}
}

// The same capture sent at once by many callers captures once.
func (s suite) concurrentSameCapture(t *testing.T) {
	t.Parallel()
	h := s.capHarness(t)
	auth := h.authorize(t)
	req := captureOf(auth, amount)
	const n = 8
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		answers = make([]psp.Charge, n)
		errs    = make([]error, n)
	)
	for i := range n {
		wg.Go(func() {
			<-start
			answers[i], errs[i] = h.capturer.Capture(t.Context(), req)
		})
	}
	close(start)
	wg.Wait()
	ok := 0
	for i := range n {
		if errs[i] != nil {
			if _, classified := psp.ClassOf(errs[i]); !classified {
				t.Fatalf("call %d: unclassified error %v", i, errs[i])
			}
			continue
		}
		wantCaptured(t, answers[i], auth, amount)
		ok++
	}
	if ok == 0 {
		t.Fatalf("no call succeeded: %v", errs)
	}
	h.wantCaptures(t, req.OrderID, 1)
}

func (s suite) unreachableCapture(t *testing.T) {
	t.Parallel()
	h := s.harness(t)
	a, ok := h.Unreachable.(psp.Capturer)
	if !ok {
		t.Skip("the harness has no unreachable adapter that captures")
	}
	c := psp.Charge{MerchantOrderID: NewOrderID(OrderPrefix), Reference: "ref", Amount: amount, Currency: h.Currency}
	_, err := a.Capture(t.Context(), captureOf(c, amount))
	wantClass(t, err, "capture", psp.NotProcessed)
	_, err = a.Void(t.Context(), voidOf(c))
	wantClass(t, err, "void", psp.NotProcessed)
}
