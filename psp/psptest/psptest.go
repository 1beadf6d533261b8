// Package psptest owns the conformance suite that every psp.Adapter passes
// before it may be swapped in: Run checks results (declines with the PSP's
// raw code, pending charges), requests the PSP can never accept (Rejected),
// capabilities and money units, deduplication, lookups, refunds, manual
// capture (authorize, capture, void) for an adapter that declares it,
// answers that do not match the request and, above all, that each way a
// call can fail is put in the right outcome class. An adapter's tests call Run with a Harness:
// the adapter plus a Backend (the PSP behind it, usually a fake served by
// httptest) that the suite can make misbehave on the next call.
package psptest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"gateway/psp"
)

// Backend is the PSP behind the adapter under test, as the suite drives it.
type Backend interface {
	// Inject makes the next call of kind op that reaches the backend
	// misbehave as f. Timeout faults park the request on gate. The suite
	// injects OpCharge, and for a CaptureBackend OpCapture and OpVoid, with
	// every Fault, OpRefund with Refuse, ErrorBefore, ErrorAfter, ResetAfter,
	// GarbageAfter and ForeignAfter, and OpLookup with ErrorBefore,
	// ResetBefore, GarbageAfter and ForeignAfter; ForeignAfter only when the
	// Harness is not InProcess.
	Inject(op Op, f Fault, gate *Gate)
	// Charges counts the charges the backend recorded for an order id, from
	// its ledger rather than its dedupe index.
	Charges(merchantOrderID string) int
	// Refunds counts the refunds the backend recorded for a refund order id.
	Refunds(refundOrderID string) int
}

// Settler is a Backend that can finish a Pending charge as the customer or
// the PSP would (3-D Secure passed, a deposit arrived): o is Success or
// DeclinedCard.
type Settler interface {
	Settle(merchantOrderID string, o Outcome)
}

// Outcome is a business result the suite asks the backend for.
type Outcome int

const (
	Success Outcome = iota + 1
	DeclinedCard
	DeclinedFunds
	// DeclinedOther: a decline whose code has no shared name (a lost card,
	// a code the adapter may not know).
	DeclinedOther
	// Invalid: the PSP refuses the request as permanently invalid.
	Invalid
	// Pending: the PSP accepts the charge and waits for the customer or the
	// bank; the suite sends it with AllowNextAction.
	Pending
)

func (o Outcome) String() string {
	switch o {
	case Success:
		return "success"
	case DeclinedCard:
		return "declined_card"
	case DeclinedFunds:
		return "declined_funds"
	case DeclinedOther:
		return "declined_other"
	case Invalid:
		return "invalid"
	case Pending:
		return "pending"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Prefixes of the ids the suite makes (see Foreign).
const (
	OrderPrefix  = "ord_"
	RefundPrefix = "rfd_"
)

// Harness is what the suite needs from an adapter's test.
type Harness struct {
	Adapter psp.Adapter
	Backend Backend
	// Method returns the payment method that makes the backend answer o for
	// the order id (for most PSPs a fixed test card; for a PSP whose payment
	// method is a per-order token, a token minted for the order). Every
	// Outcome is required.
	Method func(o Outcome, merchantOrderID string) string
	// Currency is charged in; "KRW" when empty.
	Currency string
	// Unreachable, when set, is the same adapter pointed at an address where
	// nothing listens.
	Unreachable psp.Adapter
	// InProcess says the adapter is its own backend (the in-process fake):
	// there is no answer in transit to rewrite, so ForeignAfter is not injected.
	InProcess bool
}

const amount = 15000

// Run runs the conformance suite. newHarness is called once per subtest,
// which may run in parallel with the others, and must return a fresh backend.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	t.Helper()
	s := suite{newHarness: newHarness}
	t.Run("capabilities", s.capabilities)
	t.Run("charge_outcomes", s.chargeOutcomes)
	t.Run("rejected_before_sending", s.rejectedBeforeSending)
	t.Run("rejected_by_psp", s.rejectedByPSP)
	t.Run("pending", s.pending)
	t.Run("foreign_answers", s.foreignAnswers)
	t.Run("distinct_orders", s.distinctOrders)
	t.Run("order_id_conflict", s.orderIDConflict)
	t.Run("concurrent_same_order", s.concurrentSameOrder)
	t.Run("longest_order_id", s.longestOrderID)
	t.Run("lookup_unknown_order", s.lookupUnknown)
	t.Run("refunds", s.refunds)
	t.Run("refund_declines", s.refundDeclines)
	t.Run("charge_faults", s.chargeFaults)
	t.Run("refund_faults", s.refundFaults)
	t.Run("lookup_faults", s.lookupFaults)
	t.Run("unreachable", s.unreachable)
	t.Run("manual_capture", s.manualCapture)
}

type suite struct {
	newHarness func(t *testing.T) Harness
}

func (s suite) harness(t *testing.T) Harness {
	t.Helper()
	h := s.newHarness(t)
	if h.Currency == "" {
		h.Currency = "KRW"
	}
	return h
}

func (h Harness) charge(orderID string, o Outcome) psp.ChargeRequest {
	return psp.ChargeRequest{
		MerchantOrderID: orderID,
		Amount:          amount,
		Currency:        h.Currency,
		PaymentMethod:   h.Method(o, orderID),
		Description:     "conformance " + orderID,
		AllowNextAction: o == Pending,
	}
}

// mustCharge charges a fresh order successfully.
func (h Harness) mustCharge(t *testing.T, o Outcome) psp.Charge {
	t.Helper()
	req := h.charge(NewOrderID(OrderPrefix), o)
	c, err := h.Adapter.Charge(t.Context(), req)
	if err != nil {
		t.Fatalf("Charge(%s): %v", req.MerchantOrderID, err)
	}
	return c
}

func (s suite) capabilities(t *testing.T) {
	t.Parallel()
	h := s.harness(t)
	c := h.Adapter.Capabilities()
	switch {
	case c.Name == "":
		t.Error("Capabilities().Name is empty")
	case c.MaxOrderIDLen < len(NewOrderID(OrderPrefix)):
		t.Errorf("MaxOrderIDLen %d is shorter than the gateway's order ids (%d)", c.MaxOrderIDLen, len(NewOrderID(OrderPrefix)))
	case c.CreationWindow <= 0:
		t.Errorf("CreationWindow %v must be positive", c.CreationWindow)
	case c.DedupeWindow < 0:
		t.Errorf("DedupeWindow %v must not be negative", c.DedupeWindow)
	case len(c.Currencies) == 0:
		t.Error("Capabilities().Currencies is empty: the adapter takes no currency")
	}
	if err := c.Check(amount, h.Currency); err != nil {
		t.Errorf("Check(%d %s), the suite's charge: %v", amount, h.Currency, err)
	}
	seen := map[string]bool{}
	for _, cur := range c.Currencies {
		if len(cur.Code) != 3 || strings.ToUpper(cur.Code) != cur.Code || seen[cur.Code] {
			t.Errorf("currency %+v: the code must be a distinct upper-case ISO 4217 code", cur)
		}
		seen[cur.Code] = true
		step := cur.Step()
		if step < 1 || cur.Min < 0 || cur.Max < 0 || (cur.Max > 0 && cur.Max < cur.Min) {
			t.Errorf("currency %+v: step %d, limits must be 0 ≤ Min ≤ Max", cur, step)
			continue
		}
		// The smallest amount it takes converts exactly, both ways.
		least := leastAmount(cur)
		if v, err := cur.ToPSP(least); err != nil {
			t.Errorf("currency %s: ToPSP(%d): %v", cur.Code, least, err)
		} else if back, err := cur.FromPSP(v); err != nil || back != least {
			t.Errorf("currency %s: FromPSP(ToPSP(%d)) = %d, %v", cur.Code, least, back, err)
		}
	}
}

func (s suite) chargeOutcomes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		outcome Outcome
		status  psp.ChargeStatus
		code    string
	}{
		{"success", Success, psp.Succeeded, ""},
		{"declined_card", DeclinedCard, psp.Declined, psp.DeclineCardDeclined},
		{"declined_funds", DeclinedFunds, psp.Declined, psp.DeclineInsufficientFunds},
		{"declined_other", DeclinedOther, psp.Declined, ""}, // any code but the shared ones
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := s.harness(t)
			req := h.charge(NewOrderID(OrderPrefix), tt.outcome)
			c, err := h.Adapter.Charge(t.Context(), req)
			if err != nil {
				t.Fatalf("Charge: %v", err)
			}
			if tt.outcome == DeclinedOther {
				switch c.DeclineCode {
				case "", psp.DeclineCardDeclined, psp.DeclineInsufficientFunds, psp.DeclineInvalidPaymentMethod:
					t.Fatalf("Charge = %+v, want a decline with a code of its own", c)
				}
				tt.code = c.DeclineCode
			}
			if c.Status != tt.status || c.DeclineCode != tt.code {
				t.Fatalf("Charge = %s/%q, want %s/%q", c.Status, c.DeclineCode, tt.status, tt.code)
			}
			if (c.Status == psp.Declined) != (c.Code != "") {
				t.Fatalf("Charge = %+v: a decline keeps the PSP's raw code, a success has none", c)
			}
			if c.MerchantOrderID != req.MerchantOrderID || c.Amount != req.Amount || c.Currency != req.Currency {
				t.Fatalf("Charge = %+v does not match the request %+v", c, req)
			}
			if c.Status == psp.Succeeded && c.Reference == "" {
				t.Fatal("a succeeded charge has no Reference")
			}
			wantCharges(t, h, req.MerchantOrderID, 1)

			got, err := h.Adapter.Lookup(t.Context(), req.MerchantOrderID)
			if err != nil || !got.Equal(c) {
				t.Fatalf("Lookup = %+v, %v; want %+v", got, err, c)
			}
			// The PSP deduplicates: the same order id returns the same charge,
			// declined or not, and moves no more money.
			second, err := h.Adapter.Charge(t.Context(), req)
			if err != nil || !second.Equal(c) {
				t.Fatalf("second Charge = %+v, %v; want the first %+v", second, err, c)
			}
			wantCharges(t, h, req.MerchantOrderID, 1)
		})
	}
}

// leastAmount is the smallest amount the PSP takes in cur.
func leastAmount(cur psp.Currency) int64 {
	step := cur.Step()
	least := max(cur.Min, step)
	return least + (step-least%step)%step
}

// notTaken is a currency no PSP takes: ISO 4217's code for testing.
const notTaken = "XTS"

// A request the PSP can never accept is refused Rejected by the adapter,
// before anything is sent, with the reason Check gives.
func (s suite) rejectedBeforeSending(t *testing.T) {
	t.Parallel()
	h := s.harness(t)
	tests := []struct {
		name string
		mod  func(*psp.ChargeRequest)
	}{
		{"zero_amount", func(r *psp.ChargeRequest) { r.Amount = 0 }},
		{"negative_amount", func(r *psp.ChargeRequest) { r.Amount = -amount }},
		{"currency_not_taken", func(r *psp.ChargeRequest) { r.Currency = notTaken }},
	}
	// An amount the PSP's units cannot hold exactly, where a currency has one.
	for _, cur := range h.Adapter.Capabilities().Currencies {
		if step := cur.Step(); step > 1 {
			tests = append(tests, struct {
				name string
				mod  func(*psp.ChargeRequest)
			}{"inexact_" + cur.Code, func(r *psp.ChargeRequest) { r.Currency, r.Amount = cur.Code, leastAmount(cur)+1 }})
			break
		}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := h.charge(NewOrderID(OrderPrefix), Success)
			tt.mod(&req)
			if h.Adapter.Capabilities().Check(req.Amount, req.Currency) == nil {
				t.Fatalf("Check accepts %d %s", req.Amount, req.Currency)
			}
			_, err := h.Adapter.Charge(t.Context(), req)
			wantClass(t, err, "charge", psp.Rejected)
			var ce *psp.CheckError
			if !errors.As(err, &ce) {
				t.Fatalf("err = %v, want the *psp.CheckError that says why", err)
			}
			wantCharges(t, h, req.MerchantOrderID, 0)
		})
	}
	c := h.mustCharge(t, Success)
	req := refundOf(c, NewOrderID(RefundPrefix), 1)
	req.Currency = notTaken
	_, err := h.Adapter.Refund(t.Context(), req)
	wantClass(t, err, "refund", psp.Rejected)
	if got := h.Backend.Refunds(req.RefundOrderID); got != 0 {
		t.Fatalf("a rejected refund left %d records", got)
	}
}

// A request the PSP itself refuses as invalid is Rejected with its raw code,
// for ever: nothing is recorded and a repeat is refused again.
func (s suite) rejectedByPSP(t *testing.T) {
	t.Parallel()
	h := s.harness(t)
	req := h.charge(NewOrderID(OrderPrefix), Invalid)
	for i := range 2 {
		_, err := h.Adapter.Charge(t.Context(), req)
		e := wantClass(t, err, "charge", psp.Rejected)
		if e.Code == "" {
			t.Fatalf("call %d: %v, want the PSP's raw code kept", i, err)
		}
		wantCharges(t, h, req.MerchantOrderID, 0)
	}
	if _, err := h.Adapter.Lookup(t.Context(), req.MerchantOrderID); !errors.Is(err, psp.ErrNotFound) {
		t.Fatalf("Lookup after a rejection = %v, want psp.ErrNotFound", err)
	}
}

// A charge that waits for the customer or the bank is Pending: a result the
// lookup repeats until the PSP settles it, never a decline or an error.
func (s suite) pending(t *testing.T) {
	t.Parallel()
	h := s.harness(t)
	req := h.charge(NewOrderID(OrderPrefix), Pending)
	c, err := h.Adapter.Charge(t.Context(), req)
	if err != nil || c.Status != psp.Pending || c.DeclineCode != "" {
		t.Fatalf("Charge = %+v, %v; want pending", c, err)
	}
	if c.MerchantOrderID != req.MerchantOrderID || c.Amount != req.Amount || c.Currency != req.Currency || c.Reference == "" {
		t.Fatalf("Charge = %+v does not match the request %+v", c, req)
	}
	wantCharges(t, h, req.MerchantOrderID, 1)
	got, err := h.Adapter.Lookup(t.Context(), req.MerchantOrderID)
	if err != nil || !got.Equal(c) {
		t.Fatalf("Lookup = %+v, %v; want %+v", got, err, c)
	}
	if again, err := h.Adapter.Charge(t.Context(), req); err != nil || again.Status != psp.Pending || again.Reference != c.Reference {
		t.Fatalf("second Charge = %+v, %v; want the pending %+v", again, err, c)
	}
	wantCharges(t, h, req.MerchantOrderID, 1)

	settler, ok := h.Backend.(Settler)
	if !ok {
		t.Skip("the backend cannot settle a pending charge")
	}
	settler.Settle(req.MerchantOrderID, Success)
	done, err := h.Adapter.Lookup(t.Context(), req.MerchantOrderID)
	if err != nil || done.Status != psp.Succeeded || done.Reference != c.Reference || done.Amount != c.Amount || done.NextAction != nil {
		t.Fatalf("Lookup after the customer finished = %+v, %v; want it succeeded", done, err)
	}
	wantCharges(t, h, req.MerchantOrderID, 1)
}

// An answer for another order, refund or amount is Unknown wrapping
// psp.ErrMismatch: whatever the PSP did, it was not what was asked.
func (s suite) foreignAnswers(t *testing.T) {
	t.Parallel()
	if s.harness(t).InProcess {
		t.Skip("an in-process adapter has no answer in transit")
	}
	t.Run("charge", func(t *testing.T) {
		t.Parallel()
		h := s.harness(t)
		req := h.charge(NewOrderID(OrderPrefix), Success)
		h.Backend.Inject(OpCharge, ForeignAfter, NewGate())
		_, err := h.Adapter.Charge(t.Context(), req)
		wantMismatch(t, err, "charge")
		wantCharges(t, h, req.MerchantOrderID, 1)
		if c, err := h.Adapter.Charge(t.Context(), req); err != nil || c.Status != psp.Succeeded {
			t.Fatalf("Charge after the fault = %+v, %v", c, err)
		}
		wantCharges(t, h, req.MerchantOrderID, 1)
	})
	t.Run("lookup", func(t *testing.T) {
		t.Parallel()
		h := s.harness(t)
		c := h.mustCharge(t, Success)
		h.Backend.Inject(OpLookup, ForeignAfter, NewGate())
		_, err := h.Adapter.Lookup(t.Context(), c.MerchantOrderID)
		wantMismatch(t, err, "lookup")
	})
	t.Run("refund", func(t *testing.T) {
		t.Parallel()
		h := s.harness(t)
		c := h.mustCharge(t, Success)
		req := refundOf(c, NewOrderID(RefundPrefix), amount/2)
		h.Backend.Inject(OpRefund, ForeignAfter, NewGate())
		_, err := h.Adapter.Refund(t.Context(), req)
		wantMismatch(t, err, "refund")
		if got := h.Backend.Refunds(req.RefundOrderID); got != 1 {
			t.Fatalf("backend has %d refunds, want the one made under the fault", got)
		}
	})
}

// wantConflict: an order id reused with another amount is refused
// NotProcessed, or answered with the earlier charge or refund, which the
// adapter reports Unknown wrapping psp.ErrMismatch; both wrap
// psp.ErrOrderConflict.
func wantConflict(t *testing.T, err error, op string) {
	t.Helper()
	class, _ := psp.ClassOf(err)
	switch {
	case !errors.Is(err, psp.ErrOrderConflict):
		t.Fatalf("err = %v, want psp.ErrOrderConflict", err)
	case class == psp.NotProcessed:
		wantClass(t, err, op, psp.NotProcessed)
	default:
		wantMismatch(t, err, op)
	}
}

func wantMismatch(t *testing.T, err error, op string) {
	t.Helper()
	wantClass(t, err, op, psp.Unknown)
	if !errors.Is(err, psp.ErrMismatch) {
		t.Fatalf("err = %v, want psp.ErrMismatch", err)
	}
}

func (s suite) distinctOrders(t *testing.T) {
	t.Parallel()
	h := s.harness(t)
	a, b := h.mustCharge(t, Success), h.mustCharge(t, Success)
	if a.Reference == b.Reference || a.MerchantOrderID == b.MerchantOrderID {
		t.Fatalf("two orders share a charge: %+v %+v", a, b)
	}
}

func (s suite) orderIDConflict(t *testing.T) {
	t.Parallel()
	h := s.harness(t)
	first := h.mustCharge(t, Success)
	req := h.charge(first.MerchantOrderID, Success)
	req.Amount++
	_, err := h.Adapter.Charge(t.Context(), req)
	wantConflict(t, err, "charge")
	wantCharges(t, h, first.MerchantOrderID, 1)
	if got, err := h.Adapter.Lookup(t.Context(), first.MerchantOrderID); err != nil || !got.Equal(first) {
		t.Fatalf("Lookup = %+v, %v; want %+v", got, err, first)
	}
}

func (s suite) concurrentSameOrder(t *testing.T) {
	t.Parallel()
	h := s.harness(t)
	req := h.charge(NewOrderID(OrderPrefix), Success)
	const n = 8
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		charges = make([]psp.Charge, n)
		errs    = make([]error, n)
	)
	for i := range n {
		wg.Go(func() {
			<-start
			charges[i], errs[i] = h.Adapter.Charge(t.Context(), req)
		})
	}
	close(start)
	wg.Wait()
	var first *psp.Charge
	for i := range n {
		if errs[i] != nil {
			// A PSP may refuse a request racing another with the same key;
			// it must say so with a class.
			if _, ok := psp.ClassOf(errs[i]); !ok {
				t.Fatalf("call %d: unclassified error %v", i, errs[i])
			}
			continue
		}
		if first == nil {
			first = &charges[i]
		} else if !charges[i].Equal(*first) {
			t.Fatalf("concurrent calls got different charges: %+v and %+v", *first, charges[i])
		}
	}
	if first == nil {
		t.Fatalf("no call succeeded: %v", errs)
	}
	wantCharges(t, h, req.MerchantOrderID, 1)
}

func (s suite) longestOrderID(t *testing.T) {
	t.Parallel()
	h := s.harness(t)
	n := h.Adapter.Capabilities().MaxOrderIDLen
	id := NewOrderID(OrderPrefix)
	for len(id) < n {
		id += NewOrderID("_")
	}
	req := h.charge(id[:n], Success)
	c, err := h.Adapter.Charge(t.Context(), req)
	if err != nil || c.Status != psp.Succeeded {
		t.Fatalf("Charge with a %d-character order id = %+v, %v", n, c, err)
	}
	if got, err := h.Adapter.Lookup(t.Context(), req.MerchantOrderID); err != nil || !got.Equal(c) {
		t.Fatalf("Lookup = %+v, %v; want %+v", got, err, c)
	}
}

func (s suite) lookupUnknown(t *testing.T) {
	t.Parallel()
	h := s.harness(t)
	h.mustCharge(t, Success) // the backend is not empty
	_, err := h.Adapter.Lookup(t.Context(), NewOrderID(OrderPrefix))
	if !errors.Is(err, psp.ErrNotFound) {
		t.Fatalf("Lookup of an unknown order = %v, want psp.ErrNotFound", err)
	}
	if _, ok := psp.ClassOf(err); ok {
		t.Fatalf("not found must be psp.ErrNotFound itself, not a failed call: %v", err)
	}
	c := h.mustCharge(t, Success)
	_, err = h.Adapter.LookupRefund(t.Context(), c.Reference, NewOrderID(RefundPrefix))
	if !errors.Is(err, psp.ErrNotFound) {
		t.Fatalf("LookupRefund of an unknown refund = %v, want psp.ErrNotFound", err)
	}
	// A lookup without what it needs proves nothing: refused, never "not found".
	_, err = h.Adapter.LookupRefund(t.Context(), "", NewOrderID(RefundPrefix))
	wantClass(t, err, "lookup_refund", psp.Rejected)
	_, err = h.Adapter.Lookup(t.Context(), "")
	wantClass(t, err, "lookup", psp.Rejected)
}

func refundOf(c psp.Charge, refundOrderID string, amount int64) psp.RefundRequest {
	return psp.RefundRequest{
		RefundOrderID:   refundOrderID,
		MerchantOrderID: c.MerchantOrderID,
		ChargeReference: c.Reference,
		Amount:          amount,
		Currency:        c.Currency,
		Reason:          "conformance",
	}
}

func (s suite) refunds(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		parts []int64
	}{
		{"full", []int64{amount}},
		{"two_partial", []int64{amount / 3, amount - amount/3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := s.harness(t)
			c := h.mustCharge(t, Success)
			for _, part := range tt.parts {
				req := refundOf(c, NewOrderID(RefundPrefix), part)
				r, err := h.Adapter.Refund(t.Context(), req)
				if err != nil {
					t.Fatalf("Refund(%d): %v", part, err)
				}
				wantRefunded(t, r, req)
				if got := h.Backend.Refunds(req.RefundOrderID); got != 1 {
					t.Fatalf("backend has %d refunds for %s, want 1", got, req.RefundOrderID)
				}
				got, err := h.Adapter.LookupRefund(t.Context(), c.Reference, req.RefundOrderID)
				if err != nil || got != r {
					t.Fatalf("LookupRefund = %+v, %v; want %+v", got, err, r)
				}
				again, err := h.Adapter.Refund(t.Context(), req)
				if err != nil || again != r {
					t.Fatalf("second Refund = %+v, %v; want the first %+v", again, err, r)
				}
				if got := h.Backend.Refunds(req.RefundOrderID); got != 1 {
					t.Fatalf("backend has %d refunds for %s after a repeat, want 1", got, req.RefundOrderID)
				}
				other := req
				other.Amount--
				_, err = h.Adapter.Refund(t.Context(), other)
				wantConflict(t, err, "refund")
			}
			// Nothing is left to refund.
			req := refundOf(c, NewOrderID(RefundPrefix), 1)
			r, err := h.Adapter.Refund(t.Context(), req)
			if err != nil || r.Status != psp.RefundDeclined || r.DeclineCode != psp.RefundDeclineAmountExceeded {
				t.Fatalf("Refund past the charge = %+v, %v; want declined %s", r, err, psp.RefundDeclineAmountExceeded)
			}
		})
	}
}

func (s suite) refundDeclines(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		charge Outcome
		amount int64
		code   string
	}{
		{"more_than_charged", Success, amount + 1, psp.RefundDeclineAmountExceeded},
		{"declined_charge", DeclinedCard, amount, psp.RefundDeclineNotRefundable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := s.harness(t)
			c := h.mustCharge(t, tt.charge)
			req := refundOf(c, NewOrderID(RefundPrefix), tt.amount)
			r, err := h.Adapter.Refund(t.Context(), req)
			if err != nil {
				t.Fatalf("Refund: %v", err)
			}
			if r.Status != psp.RefundDeclined || r.DeclineCode != tt.code {
				t.Fatalf("Refund = %+v, want declined %s", r, tt.code)
			}
			if got := h.Backend.Refunds(req.RefundOrderID); got != 0 {
				t.Fatalf("a declined refund left %d records", got)
			}
			if _, err := h.Adapter.LookupRefund(t.Context(), c.Reference, req.RefundOrderID); !errors.Is(err, psp.ErrNotFound) {
				t.Fatalf("LookupRefund of a declined refund = %v, want psp.ErrNotFound", err)
			}
		})
	}
}

// faultCases are the Charge faults and the class each must produce.
var faultCases = []struct {
	fault Fault
	class psp.Class
}{
	{Refuse, psp.NotProcessed},
	{ErrorBefore, psp.Unknown},
	{ErrorAfter, psp.Unknown},
	{TimeoutBefore, psp.Unknown},
	{TimeoutAfter, psp.Unknown},
	{ResetBefore, psp.Unknown},
	{ResetAfter, psp.Unknown},
	{GarbageAfter, psp.Unknown},
}

// callContext returns the context a faulted call runs with. Under a timeout
// fault the caller's deadline passes once the backend holds the request, so
// an "after" timeout has really acted before the caller gives up.
func callContext(t *testing.T, f Fault, gate *Gate) context.Context {
	t.Helper()
	if !f.Timeout() {
		return t.Context()
	}
	ctx, cancel := context.WithCancelCause(t.Context())
	t.Cleanup(func() { cancel(nil) })
	go func() {
		select {
		case <-gate.Held():
			cancel(context.DeadlineExceeded)
		case <-ctx.Done():
		}
	}()
	return ctx
}

func (s suite) chargeFaults(t *testing.T) {
	t.Parallel()
	for _, tt := range faultCases {
		t.Run(tt.fault.String(), func(t *testing.T) {
			t.Parallel()
			h := s.harness(t)
			req := h.charge(NewOrderID(OrderPrefix), Success)
			gate := NewGate()
			t.Cleanup(gate.Release)
			h.Backend.Inject(OpCharge, tt.fault, gate)

			_, err := h.Adapter.Charge(callContext(t, tt.fault, gate), req)
			gate.Release()
			wantClass(t, err, "charge", tt.class)
			want := 0
			if tt.fault.Acts() {
				want = 1
			}
			wantCharges(t, h, req.MerchantOrderID, want)

			// What the gateway does next: look up first, charge again only if
			// the PSP has nothing.
			found, err := h.Adapter.Lookup(t.Context(), req.MerchantOrderID)
			haveFound := err == nil
			switch {
			case err == nil && want == 1:
				if found.Status != psp.Succeeded || found.MerchantOrderID != req.MerchantOrderID || found.Amount != req.Amount {
					t.Fatalf("Lookup after the fault = %+v, want the succeeded charge", found)
				}
			case errors.Is(err, psp.ErrNotFound) && (want == 0 || !h.Adapter.Capabilities().AuthoritativeLookup):
			default:
				t.Fatalf("Lookup after the fault = %+v, %v; the backend has %d charges", found, err, want)
			}
			c, err := h.Adapter.Charge(t.Context(), req)
			if err != nil || c.Status != psp.Succeeded {
				t.Fatalf("Charge after the fault = %+v, %v", c, err)
			}
			if haveFound && !c.Equal(found) {
				t.Fatalf("Charge after the fault = %+v, want the charge made under it %+v", c, found)
			}
			wantCharges(t, h, req.MerchantOrderID, 1)
		})
	}
}

func (s suite) refundFaults(t *testing.T) {
	t.Parallel()
	for _, tt := range faultCases {
		switch tt.fault {
		case Refuse, ErrorBefore, ErrorAfter, ResetAfter, GarbageAfter:
		default:
			continue
		}
		t.Run(tt.fault.String(), func(t *testing.T) {
			t.Parallel()
			h := s.harness(t)
			c := h.mustCharge(t, Success)
			req := refundOf(c, NewOrderID(RefundPrefix), amount/2)
			h.Backend.Inject(OpRefund, tt.fault, NewGate())

			_, err := h.Adapter.Refund(t.Context(), req)
			wantClass(t, err, "refund", tt.class)
			want := 0
			if tt.fault.Acts() {
				want = 1
			}
			if got := h.Backend.Refunds(req.RefundOrderID); got != want {
				t.Fatalf("backend has %d refunds after %s, want %d", got, tt.fault, want)
			}
			found, err := h.Adapter.LookupRefund(t.Context(), c.Reference, req.RefundOrderID)
			switch {
			case want == 1 && err == nil:
				wantRefunded(t, found, req)
			case want == 0 && errors.Is(err, psp.ErrNotFound):
			default:
				t.Fatalf("LookupRefund after the fault = %+v, %v; the backend has %d refunds", found, err, want)
			}
			r, err := h.Adapter.Refund(t.Context(), req)
			if err != nil {
				t.Fatalf("Refund after the fault: %v", err)
			}
			wantRefunded(t, r, req)
			if want == 1 && r != found {
				t.Fatalf("Refund after the fault = %+v, want the refund made under it %+v", r, found)
			}
			if got := h.Backend.Refunds(req.RefundOrderID); got != 1 {
				t.Fatalf("backend has %d refunds after the retry, want 1", got)
			}
		})
	}
}

func (s suite) lookupFaults(t *testing.T) {
	t.Parallel()
	for _, f := range []Fault{ErrorBefore, ResetBefore, GarbageAfter} {
		t.Run(f.String(), func(t *testing.T) {
			t.Parallel()
			h := s.harness(t)
			c := h.mustCharge(t, Success)
			h.Backend.Inject(OpLookup, f, NewGate())
			_, err := h.Adapter.Lookup(t.Context(), c.MerchantOrderID)
			// A lookup that cannot answer must never look like "not found":
			// the gateway would charge again on it.
			wantClass(t, err, "lookup", psp.Unknown)
			if got, err := h.Adapter.Lookup(t.Context(), c.MerchantOrderID); err != nil || !got.Equal(c) {
				t.Fatalf("Lookup after the fault = %+v, %v; want %+v", got, err, c)
			}
		})
	}
}

func (s suite) unreachable(t *testing.T) {
	t.Parallel()
	h := s.harness(t)
	if h.Unreachable == nil {
		t.Skip("the harness has no unreachable adapter")
	}
	a := h.Unreachable
	ctx := t.Context()
	req := h.charge(NewOrderID(OrderPrefix), Success)
	_, err := a.Charge(ctx, req)
	wantClass(t, err, "charge", psp.NotProcessed)
	_, err = a.Lookup(ctx, req.MerchantOrderID)
	wantClass(t, err, "lookup", psp.NotProcessed)
	_, err = a.Refund(ctx, psp.RefundRequest{RefundOrderID: NewOrderID(RefundPrefix), MerchantOrderID: req.MerchantOrderID,
		ChargeReference: "ref", Amount: 1, Currency: req.Currency})
	wantClass(t, err, "refund", psp.NotProcessed)
	_, err = a.LookupRefund(ctx, "ref", NewOrderID(RefundPrefix))
	wantClass(t, err, "lookup_refund", psp.NotProcessed)
}

// NewOrderID returns prefix followed by 24 random hex digits, the shape of
// the gateway's merchant order ids ("ord_" + 24 hex).
func NewOrderID(prefix string) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

func wantClass(t *testing.T, err error, op string, want psp.Class) *psp.Error {
	t.Helper()
	var e *psp.Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v, want a *psp.Error of class %s", err, want)
	}
	if e.Class != want || e.Op != op {
		t.Fatalf("err = %v, want class %s for op %q", err, want, op)
	}
	return e
}

func wantCharges(t *testing.T, h Harness, orderID string, want int) {
	t.Helper()
	if got := h.Backend.Charges(orderID); got != want {
		t.Fatalf("backend has %d charges for %s, want %d", got, orderID, want)
	}
}

func wantRefunded(t *testing.T, r psp.Refund, req psp.RefundRequest) {
	t.Helper()
	if r.Status != psp.RefundSucceeded && r.Status != psp.RefundPending {
		t.Fatalf("refund = %+v, want succeeded or pending", r)
	}
	if r.RefundOrderID != req.RefundOrderID || r.MerchantOrderID != req.MerchantOrderID ||
		r.Amount != req.Amount || r.Currency != req.Currency || r.Reference == "" {
		t.Fatalf("refund %+v does not match the request %+v", r, req)
	}
}
