package fake

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"gateway/psp"
)

// clock is a settable time for WithClock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2026, 3, 1, 9, 30, 15, 500, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

func manual(orderID, method string) psp.ChargeRequest {
	r := req(orderID, method)
	r.CaptureMethod = psp.CaptureManual
	return r
}

func mustAuthorize(t *testing.T, p *PSP, orderID string) psp.Charge {
	t.Helper()
	c, err := p.Charge(t.Context(), manual(orderID, MethodOK))
	if err != nil || c.Status != psp.Authorized {
		t.Fatalf("Charge(manual) = %+v, %v; want authorized", c, err)
	}
	return c
}

func captureOf(c psp.Charge, orderID string, amount int64) psp.CaptureRequest {
	return psp.CaptureRequest{OrderID: orderID, MerchantOrderID: c.MerchantOrderID, ChargeReference: c.Reference,
		Amount: amount, Currency: c.Currency}
}

func voidOf(c psp.Charge, orderID string) psp.VoidRequest {
	return psp.VoidRequest{OrderID: orderID, MerchantOrderID: c.MerchantOrderID, ChargeReference: c.Reference,
		Reason: "requested_by_customer"}
}

func TestCapabilitiesManualCapture(t *testing.T) {
	if c := New().Capabilities(); !c.ManualCapture || c.AuthorizationValidity != 7*24*time.Hour {
		t.Fatalf("Capabilities() = %+v, want manual capture for 7 days", c)
	}
	for _, tt := range []struct {
		set, want time.Duration
	}{{time.Hour, time.Hour}, {time.Millisecond, DefaultAuthorizationValidity}, {-time.Hour, DefaultAuthorizationValidity}} {
		if got := New(WithAuthorizationValidity(tt.set)).Capabilities().AuthorizationValidity; got != tt.want {
			t.Errorf("WithAuthorizationValidity(%v): AuthorizationValidity %v, want %v", tt.set, got, tt.want)
		}
	}
}

// An authorization's deadline is the fake's clock plus the validity, to the
// second; it is capturable until then and lapses to voided at it.
func TestAuthorizationLapses(t *testing.T) {
	clk := newClock()
	p := New(WithClock(clk.Now), WithAuthorizationValidity(48*time.Hour))
	auth := mustAuthorize(t, p, "order-1")
	deadline := time.Date(2026, 3, 3, 9, 30, 15, 0, time.UTC)
	if !auth.CaptureBefore.Equal(deadline) || auth.CaptureBefore.Location() != time.UTC {
		t.Fatalf("CaptureBefore = %v, want %v", auth.CaptureBefore, deadline)
	}
	other := mustAuthorize(t, p, "order-2")

	clk.Set(deadline.Add(-time.Nanosecond))
	if got, err := p.Lookup(t.Context(), "order-1"); err != nil || !got.Equal(auth) {
		t.Fatalf("Lookup just before the deadline = %+v, %v; want %+v", got, err, auth)
	}
	clk.Set(deadline)
	lapsed, err := p.Lookup(t.Context(), "order-1")
	if err != nil || lapsed.Status != psp.Voided || !lapsed.CaptureBefore.IsZero() || lapsed.AmountCaptured != 0 {
		t.Fatalf("Lookup at the deadline = %+v, %v; want voided", lapsed, err)
	}
	c, err := p.Capture(t.Context(), captureOf(auth, "cap-1", auth.Amount))
	if err != nil || !c.Equal(lapsed) || p.CapturesFor("cap-1") != 0 {
		t.Fatalf("Capture of a lapsed authorization = %+v, %v (%d captures); want it voided, nothing taken", c, err, p.CapturesFor("cap-1"))
	}
	v, err := p.Void(t.Context(), voidOf(auth, "void-1"))
	if err != nil || !v.Equal(lapsed) || len(p.Voids()) != 0 {
		t.Fatalf("Void of a lapsed authorization = %+v, %v (%d voids); want it voided, no void made", v, err, len(p.Voids()))
	}
	// Every authorization past its deadline lapses, read or not.
	as := p.Authorizations()
	if len(as) != 2 || as[0].Charge.Status != psp.Voided || !as[0].Lapsed || !as[0].CaptureBefore.Equal(deadline) ||
		as[1].Charge.Reference != other.Reference || as[1].Charge.Status != psp.Voided || !as[1].Lapsed {
		t.Fatalf("Authorizations = %+v, want both lapsed", as)
	}
}

func TestLapse(t *testing.T) {
	clk := newClock()
	p := New(WithClock(clk.Now))
	auth := mustAuthorize(t, p, "order-1")
	got, err := p.Lapse("order-1")
	if err != nil || got.Status != psp.Voided {
		t.Fatalf("Lapse = %+v, %v; want voided", got, err)
	}
	if as := p.Authorizations(); len(as) != 1 || !as[0].Lapsed || !as[0].CaptureBefore.Equal(clk.Now()) || as[0].Charge.Reference != auth.Reference {
		t.Fatalf("Authorizations = %+v, want the one lapsed now", as)
	}
	if _, err := p.Lapse("order-1"); !errors.Is(err, ErrNotAuthorized) {
		t.Fatalf("second Lapse = %v, want ErrNotAuthorized", err)
	}
	if _, err := p.Charge(t.Context(), req("order-2", MethodOK)); err != nil {
		t.Fatal(err)
	}
	for _, order := range []string{"order-2", "missing"} {
		if _, err := p.Lapse(order); !errors.Is(err, ErrNotAuthorized) {
			t.Fatalf("Lapse(%s) = %v, want ErrNotAuthorized", order, err)
		}
	}
}

// What a manual charge answers, by payment method, and how a pending one
// settles: authorized where an automatic charge succeeds.
func TestManualChargeOutcomes(t *testing.T) {
	p := New()
	if c, err := p.Charge(t.Context(), manual("order-declined", MethodDeclined)); err != nil || c.Status != psp.Declined ||
		c.DeclineCode != DeclineCardDeclined || !c.CaptureBefore.IsZero() {
		t.Fatalf("manual declined = %+v, %v", c, err)
	}
	r := manual("order-3ds", MethodThreeDS)
	r.AllowNextAction = true
	c, err := p.Charge(t.Context(), r)
	if err != nil || c.Status != psp.Pending || c.NextAction == nil {
		t.Fatalf("manual 3-D Secure = %+v, %v; want pending", c, err)
	}
	got, _, err := p.ThreeDS(c.Reference, true)
	if err != nil || got.Status != psp.Authorized || got.CaptureBefore.IsZero() || got.NextAction != nil || got.AmountCaptured != 0 {
		t.Fatalf("3-D Secure passed = %+v, %v; want authorized", got, err)
	}
	if auto, err := p.Charge(t.Context(), req("order-auto", MethodOK)); err != nil || auto.AmountCaptured != auto.Amount {
		t.Fatalf("automatic charge = %+v, %v; want its amount captured", auto, err)
	}
	if as := p.Authorizations(); len(as) != 1 || as[0].Charge.Reference != c.Reference {
		t.Fatalf("Authorizations = %+v, want only the 3-D Secure one", as)
	}

	// The capture method is part of the order: another one is a conflict.
	_, err = p.Charge(t.Context(), req("order-3ds", MethodThreeDS))
	wantClass(t, err, "charge", psp.NotProcessed)
	if !errors.Is(err, ErrOrderIDReused) {
		t.Fatalf("err = %v, want ErrOrderIDReused", err)
	}
	bad := req("order-bad", MethodOK)
	bad.CaptureMethod = "later"
	_, err = p.Charge(t.Context(), bad)
	wantClass(t, err, "charge", psp.Rejected)
	if p.ChargesFor("order-bad") != 0 {
		t.Fatal("a charge with an unknown capture method was recorded")
	}
}

func TestCapture(t *testing.T) {
	for _, part := range []int64{1999, 500} {
		t.Run(fmt.Sprint(part), func(t *testing.T) {
			p := New()
			auth := mustAuthorize(t, p, "order-1")
			c, created, err := p.CaptureCreated(t.Context(), captureOf(auth, "cap-1", part))
			if err != nil || !created || c.Status != psp.Succeeded || c.AmountCaptured != part || c.Reference != auth.Reference || !c.CaptureBefore.IsZero() {
				t.Fatalf("Capture(%d) = %+v, %t, %v", part, c, created, err)
			}
			if got := p.Captures(); len(got) != 1 || got[0] != (Capture{OrderID: "cap-1", MerchantOrderID: "order-1",
				ChargeReference: auth.Reference, Reference: got[0].Reference, Amount: part, Currency: "EUR"}) || got[0].Reference == "" {
				t.Fatalf("Captures = %+v", got)
			}
			again, created, err := p.CaptureCreated(t.Context(), captureOf(auth, "cap-1", part))
			if err != nil || created || again != c {
				t.Fatalf("repeat = %+v, %t, %v; want %+v, not created", again, created, err, c)
			}
			// One capture per authorization: another takes nothing.
			other, created, err := p.CaptureCreated(t.Context(), captureOf(auth, "cap-2", 1))
			if err != nil || created || other != c {
				t.Fatalf("another capture = %+v, %t, %v; want the captured charge", other, created, err)
			}
			_, err = p.Capture(t.Context(), captureOf(auth, "cap-1", part-1))
			wantClass(t, err, "capture", psp.NotProcessed)
			if !errors.Is(err, ErrOrderIDReused) || !errors.Is(err, psp.ErrOrderConflict) {
				t.Fatalf("capture order id reused = %v, want ErrOrderIDReused", err)
			}
			if p.CapturesFor("cap-1") != 1 || p.CapturesFor("cap-2") != 0 || p.CapturesOf("order-1") != 1 || p.CaptureCalls() != 4 {
				t.Fatalf("ledger: %d, %d, %d captures, %d calls", p.CapturesFor("cap-1"), p.CapturesFor("cap-2"), p.CapturesOf("order-1"), p.CaptureCalls())
			}
			// Only what was captured can be refunded.
			over := psp.RefundRequest{RefundOrderID: "rfd-1", MerchantOrderID: "order-1", ChargeReference: auth.Reference, Amount: part + 1, Currency: "EUR"}
			if r, err := p.Refund(t.Context(), over); err != nil || r.DeclineCode != psp.RefundDeclineAmountExceeded {
				t.Fatalf("Refund of %d = %+v, %v", over.Amount, r, err)
			}
			over.Amount = part
			if r, err := p.Refund(t.Context(), over); err != nil || r.Status != psp.RefundSucceeded {
				t.Fatalf("Refund of %d = %+v, %v", over.Amount, r, err)
			}
		})
	}
}

func TestCaptureRefusals(t *testing.T) {
	p := New()
	auth := mustAuthorize(t, p, "order-1")
	if _, err := p.Charge(t.Context(), req("order-2", MethodOK)); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		mod  func(*psp.CaptureRequest)
	}{
		{"empty_order_id", func(r *psp.CaptureRequest) { r.OrderID = "" }},
		{"long_order_id", func(r *psp.CaptureRequest) { r.OrderID = string(make([]byte, 65)) }},
		{"no_merchant_order_id", func(r *psp.CaptureRequest) { r.MerchantOrderID = "" }},
		{"unknown_order", func(r *psp.CaptureRequest) { r.MerchantOrderID = "order-9" }},
		{"another_orders_reference", func(r *psp.CaptureRequest) { r.MerchantOrderID = "order-2" }},
		{"zero_amount", func(r *psp.CaptureRequest) { r.Amount = 0 }},
		{"more_than_authorized", func(r *psp.CaptureRequest) { r.Amount = auth.Amount + 1 }},
		{"another_currency", func(r *psp.CaptureRequest) { r.Currency = "USD" }},
		{"currency_not_taken", func(r *psp.CaptureRequest) { r.Currency = "XTS" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := captureOf(auth, "cap-"+tt.name, auth.Amount)
			tt.mod(&r)
			_, err := p.Capture(t.Context(), r)
			wantClass(t, err, "capture", psp.Rejected)
			if !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("err = %v, want ErrInvalidRequest", err)
			}
		})
	}
	if got, err := p.Lookup(t.Context(), "order-1"); err != nil || !got.Equal(auth) || len(p.Captures()) != 0 {
		t.Fatalf("after the refusals: %+v, %v, %d captures; want the authorization untouched", got, err, len(p.Captures()))
	}
	// A charge taken at once, or declined, is answered as it stands.
	for _, order := range []string{"order-2", "order-3"} {
		method := MethodOK
		if order == "order-3" {
			method = MethodDeclined
		}
		c, err := p.Charge(t.Context(), req(order, method))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := p.Capture(t.Context(), captureOf(c, "cap-"+order, c.Amount)); err != nil || got != c {
			t.Fatalf("Capture of %s = %+v, %v; want it as it stands %+v", order, got, err, c)
		}
	}
	if len(p.Captures()) != 0 {
		t.Fatalf("Captures = %+v, want none", p.Captures())
	}
}

func TestVoid(t *testing.T) {
	p := New()
	auth := mustAuthorize(t, p, "order-1")
	v, created, err := p.VoidCreated(t.Context(), voidOf(auth, "void-1"))
	if err != nil || !created || v.Status != psp.Voided || v.Reference != auth.Reference || !v.CaptureBefore.IsZero() {
		t.Fatalf("Void = %+v, %t, %v", v, created, err)
	}
	if again, created, err := p.VoidCreated(t.Context(), voidOf(auth, "void-1")); err != nil || created || again != v {
		t.Fatalf("repeat = %+v, %t, %v", again, created, err)
	}
	if c, err := p.Capture(t.Context(), captureOf(auth, "cap-1", auth.Amount)); err != nil || c != v {
		t.Fatalf("Capture after the void = %+v, %v; want the voided charge", c, err)
	}
	if got := p.Voids(); len(got) != 1 || got[0] != (Void{OrderID: "void-1", MerchantOrderID: "order-1", ChargeReference: auth.Reference,
		Reason: "requested_by_customer"}) || p.VoidsFor("void-1") != 1 || len(p.Captures()) != 0 || p.VoidCalls() != 2 {
		t.Fatalf("ledger: voids %+v, %d captures, %d void calls", got, len(p.Captures()), p.VoidCalls())
	}
	if rf, err := p.Refund(t.Context(), psp.RefundRequest{RefundOrderID: "rfd-1", MerchantOrderID: "order-1",
		ChargeReference: auth.Reference, Amount: 1, Currency: "EUR"}); err != nil || rf.DeclineCode != psp.RefundDeclineNotRefundable {
		t.Fatalf("Refund of a voided charge = %+v, %v", rf, err)
	}

	// A void of a captured charge releases nothing.
	auth2 := mustAuthorize(t, p, "order-2")
	c, err := p.Capture(t.Context(), captureOf(auth2, "cap-2", auth2.Amount))
	if err != nil {
		t.Fatal(err)
	}
	if got, created, err := p.VoidCreated(t.Context(), voidOf(auth2, "void-2")); err != nil || created || got != c {
		t.Fatalf("Void of a captured charge = %+v, %t, %v; want the capture %+v", got, created, err, c)
	}
	// The void order id belongs to its charge.
	_, err = p.Void(t.Context(), voidOf(auth2, "void-1"))
	wantClass(t, err, "void", psp.NotProcessed)
	if !errors.Is(err, ErrOrderIDReused) {
		t.Fatalf("void order id reused = %v, want ErrOrderIDReused", err)
	}
	_, err = p.Void(t.Context(), psp.VoidRequest{OrderID: "void-3", MerchantOrderID: "order-2", ChargeReference: "fake_ch_999"})
	wantClass(t, err, "void", psp.Rejected)

	// A manual charge still waiting for its customer is canceled: it can
	// never be authorized.
	r := manual("order-3", MethodThreeDS)
	r.AllowNextAction = true
	pending, err := p.Charge(t.Context(), r)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := p.Void(t.Context(), voidOf(pending, "void-3")); err != nil || got.Status != psp.Voided || got.NextAction != nil {
		t.Fatalf("Void of a pending manual charge = %+v, %v; want voided", got, err)
	}
	if _, _, err := p.ThreeDS(pending.Reference, true); !errors.Is(err, ErrNotPending) {
		t.Fatalf("3-D Secure after the void = %v, want ErrNotPending", err)
	}
	// A pending charge that takes the money at once is not the void's.
	va, err := p.Charge(t.Context(), req("order-4", MethodVirtualAccount))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := p.Void(t.Context(), voidOf(va, "void-4")); err != nil || got != va {
		t.Fatalf("Void of a pending automatic charge = %+v, %v; want it as it stands", got, err)
	}
	if n := len(p.Voids()); n != 2 {
		t.Fatalf("%d voids, want 2", n)
	}
}

func TestCommandFaults(t *testing.T) {
	tests := []struct {
		fault Fault
		class psp.Class
		acted bool
	}{
		{FaultNotProcessed, psp.NotProcessed, false},
		{FaultUnknownBeforeCharge, psp.Unknown, false},
		{FaultUnknownAfterCharge, psp.Unknown, true},
	}
	for _, tt := range tests {
		t.Run("capture_"+tt.fault.String(), func(t *testing.T) {
			p := New()
			auth := mustAuthorize(t, p, "order-1")
			p.FailNextCaptures(tt.fault, 1)
			_, err := p.Capture(t.Context(), captureOf(auth, "cap-1", 700))
			wantClass(t, err, "capture", tt.class)
			if !errors.Is(err, ErrInjected) {
				t.Fatalf("err = %v, want ErrInjected", err)
			}
			want := psp.Authorized
			if tt.acted {
				want = psp.Succeeded
			}
			if got, err := p.Lookup(t.Context(), "order-1"); err != nil || got.Status != want || p.CapturesFor("cap-1") != len(p.Captures()) {
				t.Fatalf("Lookup after the fault = %+v, %v; want %s", got, err, want)
			}
			if c, err := p.Capture(t.Context(), captureOf(auth, "cap-1", 700)); err != nil || c.AmountCaptured != 700 || p.CapturesFor("cap-1") != 1 {
				t.Fatalf("retry = %+v, %v; %d captures", c, err, p.CapturesFor("cap-1"))
			}
		})
		t.Run("void_"+tt.fault.String(), func(t *testing.T) {
			p := New()
			auth := mustAuthorize(t, p, "order-1")
			p.FailNextVoids(tt.fault, 1)
			_, err := p.Void(t.Context(), voidOf(auth, "void-1"))
			wantClass(t, err, "void", tt.class)
			want := psp.Authorized
			if tt.acted {
				want = psp.Voided
			}
			if got, err := p.Lookup(t.Context(), "order-1"); err != nil || got.Status != want {
				t.Fatalf("Lookup after the fault = %+v, %v; want %s", got, err, want)
			}
			if v, err := p.Void(t.Context(), voidOf(auth, "void-1")); err != nil || v.Status != psp.Voided || p.VoidsFor("void-1") != 1 {
				t.Fatalf("retry = %+v, %v; %d voids", v, err, p.VoidsFor("void-1"))
			}
		})
	}
	// The queues are the commands' own, and first in, first out.
	p := New()
	auth := mustAuthorize(t, p, "order-1")
	p.FailNextCaptures(FaultNotProcessed, 1)
	p.FailNextCaptures(FaultUnknownBeforeCharge, 1)
	if _, err := p.Charge(t.Context(), req("order-2", MethodOK)); err != nil {
		t.Fatalf("a charge drew a capture's fault: %v", err)
	}
	if _, err := p.Void(t.Context(), voidOf(auth, "void-1")); err != nil {
		t.Fatalf("a void drew a capture's fault: %v", err)
	}
	auth = mustAuthorize(t, p, "order-3")
	for _, want := range []psp.Class{psp.NotProcessed, psp.Unknown} {
		_, err := p.Capture(t.Context(), captureOf(auth, "cap-3", 1))
		wantClass(t, err, "capture", want)
	}
	if _, err := p.Capture(t.Context(), captureOf(auth, "cap-3", 1)); err != nil {
		t.Fatalf("capture after the faults: %v", err)
	}
}

// A capture held before the PSP sees it loses to a void that arrives
// meanwhile; one held after the PSP captured wins over it. Either way the
// ledger has exactly one of them.
func TestCaptureHooksRaceAVoid(t *testing.T) {
	for _, after := range []bool{false, true} {
		t.Run(map[bool]string{false: "held_before", true: "held_after"}[after], func(t *testing.T) {
			p := New()
			auth := mustAuthorize(t, p, "order-1")
			held, release := make(chan struct{}), make(chan struct{})
			hold := func() { close(held); <-release }
			if after {
				p.SetCaptureHookAfter(func(context.Context, psp.CaptureRequest, psp.Charge) { hold() })
			} else {
				p.SetCaptureHook(func(context.Context, psp.CaptureRequest) { hold() })
			}
			type answer struct {
				c   psp.Charge
				err error
			}
			done := make(chan answer, 1)
			go func() {
				c, err := p.Capture(t.Context(), captureOf(auth, "cap-1", auth.Amount))
				done <- answer{c, err}
			}()
			<-held
			v, err := p.Void(t.Context(), voidOf(auth, "void-1"))
			close(release)
			got := <-done
			if err != nil || got.err != nil {
				t.Fatalf("Void = %v, Capture = %v", err, got.err)
			}
			want, captures, voids := psp.Voided, 0, 1
			if after {
				want, captures, voids = psp.Succeeded, 1, 0
			}
			if v.Status != want || got.c.Status != want || len(p.Captures()) != captures || len(p.Voids()) != voids {
				t.Fatalf("void answered %s, capture %s; %d captures, %d voids; want %s, %d, %d",
					v.Status, got.c.Status, len(p.Captures()), len(p.Voids()), want, captures, voids)
			}
		})
	}
}

// A void held in its hooks: before, a capture meanwhile wins; after, the
// void has already released the authorization.
func TestVoidHooks(t *testing.T) {
	p := New()
	auth := mustAuthorize(t, p, "order-1")
	held, release := make(chan struct{}), make(chan struct{})
	p.SetVoidHook(func(context.Context, psp.VoidRequest) { close(held); <-release })
	done := make(chan psp.Charge, 1)
	go func() {
		v, _ := p.Void(t.Context(), voidOf(auth, "void-1"))
		done <- v
	}()
	<-held
	if c, err := p.Capture(t.Context(), captureOf(auth, "cap-1", auth.Amount)); err != nil || c.Status != psp.Succeeded {
		t.Fatalf("Capture while the void is held = %+v, %v", c, err)
	}
	close(release)
	if v := <-done; v.Status != psp.Succeeded || len(p.Voids()) != 0 {
		t.Fatalf("the held void answered %+v with %d voids; want the capture, none", v, len(p.Voids()))
	}

	p.SetVoidHook(nil)
	auth = mustAuthorize(t, p, "order-2")
	ctx, cancel := context.WithCancel(t.Context())
	p.SetVoidHookAfter(func(context.Context, psp.VoidRequest, psp.Charge) { cancel() })
	_, err := p.Void(ctx, voidOf(auth, "void-2"))
	wantClass(t, err, "void", psp.Unknown)
	if got, _ := p.Lookup(t.Context(), "order-2"); got.Status != psp.Voided || p.VoidsFor("void-2") != 1 {
		t.Fatalf("a void whose caller gave up after it acted: %+v, %d voids", got, p.VoidsFor("void-2"))
	}
}

// Many captures at once, with one order id or with many: one capture in
// the ledger, never more than the authorized amount.
func TestConcurrentCaptures(t *testing.T) {
	for _, sameID := range []bool{true, false} {
		t.Run(map[bool]string{true: "same_order_id", false: "distinct_order_ids"}[sameID], func(t *testing.T) {
			p := New()
			auth := mustAuthorize(t, p, "order-1")
			const n = 50
			var wg sync.WaitGroup
			start := make(chan struct{})
			answers := make([]psp.Charge, n)
			errs := make([]error, n)
			for i := range n {
				// Retries of one capture, or captures of different amounts.
				id, amount := "cap-1", auth.Amount
				if !sameID {
					id, amount = fmt.Sprintf("cap-%d", i), auth.Amount-int64(i)
				}
				wg.Go(func() {
					<-start
					answers[i], errs[i] = p.Capture(t.Context(), captureOf(auth, id, amount))
				})
			}
			close(start)
			wg.Wait()
			captures := p.Captures()
			if len(captures) != 1 || p.CapturesOf("order-1") != 1 {
				t.Fatalf("%d captures, want 1: %+v", len(captures), captures)
			}
			for i := range n {
				if errs[i] != nil || answers[i].AmountCaptured != captures[0].Amount {
					t.Fatalf("call %d = %+v, %v; want the one capture of %d", i, answers[i], errs[i], captures[0].Amount)
				}
			}
		})
	}
}

func TestResetForgetsCommands(t *testing.T) {
	p := New()
	auth := mustAuthorize(t, p, "order-1")
	if _, err := p.Capture(t.Context(), captureOf(auth, "cap-1", 1)); err != nil {
		t.Fatal(err)
	}
	auth = mustAuthorize(t, p, "order-2")
	if _, err := p.Void(t.Context(), voidOf(auth, "void-1")); err != nil {
		t.Fatal(err)
	}
	p.FailNextCaptures(FaultNotProcessed, 1)
	p.FailNextVoids(FaultNotProcessed, 1)
	p.SetCaptureHook(func(context.Context, psp.CaptureRequest) { t.Error("capture hook survived Reset") })
	p.SetCaptureHookAfter(func(context.Context, psp.CaptureRequest, psp.Charge) { t.Error("capture after hook survived Reset") })
	p.SetVoidHook(func(context.Context, psp.VoidRequest) { t.Error("void hook survived Reset") })
	p.SetVoidHookAfter(func(context.Context, psp.VoidRequest, psp.Charge) { t.Error("void after hook survived Reset") })

	p.Reset()

	if len(p.Captures()) != 0 || len(p.Voids()) != 0 || len(p.Authorizations()) != 0 || p.CaptureCalls() != 0 || p.VoidCalls() != 0 {
		t.Fatal("captures, voids or their counters survived Reset")
	}
	auth = mustAuthorize(t, p, "order-1")
	if _, err := p.Capture(t.Context(), captureOf(auth, "cap-1", 1)); err != nil {
		t.Fatalf("Capture after Reset: %v", err)
	}
	auth = mustAuthorize(t, p, "order-2")
	if _, err := p.Void(t.Context(), voidOf(auth, "void-1")); err != nil {
		t.Fatalf("Void after Reset: %v", err)
	}
}
