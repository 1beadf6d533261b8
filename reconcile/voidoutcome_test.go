package reconcile_test

import (
	"net/http"
	"testing"
	"time"

	"gateway/errs"
	"gateway/payments"
	"gateway/psp/fake"
	"gateway/reconcile"
)

// A void whose answer is lost after the PSP voided is settled by the
// reconciler from its lookup, and its pass reports it canceled, not in
// review: nothing waits for a person. The same for a capture that finds its
// authorization lapsed at the PSP.
func TestStaleVoidReportsCanceled(t *testing.T) {
	e := newEnv(t)
	p := e.authorized("auth", 1000)
	e.psp.FailNextVoids(fake.FaultUnknownAfterCharge, 1)
	if _, err := e.cancel(p, "void", payments.CancelAbandoned); errs.CodeOf(err) != errs.CodePSPUnknown {
		t.Fatalf("lost answer: %v", err)
	}
	e.advance(lease + time.Second)
	sum := runOnce(t, e.reconciler(nil, nil))
	wantOutcomes(t, sum, map[reconcile.Outcome]int{reconcile.Canceled: 1})
	if got := e.reread(p); got.Status != payments.Canceled || got.CancellationReason != payments.CancelAbandoned || len(e.psp.Voids()) != 1 {
		t.Fatalf("payment %s %q, %d voids at the PSP", got.Status, got.CancellationReason, len(e.psp.Voids()))
	}
	if out, err := e.cancel(p, "void", payments.CancelAbandoned); err != nil || out.Response.Status != http.StatusOK {
		t.Fatalf("the void's key after the pass: %+v %v", out, err)
	}

	lapsed := e.authorized("auth-lapsed", 1000)
	e.psp.FailNextCaptures(fake.FaultUnknownBeforeCharge, 1)
	if _, err := e.capture(lapsed, "cap", nil); err == nil {
		t.Fatal("a capture that timed out answered")
	}
	if _, err := e.psp.Lapse(lapsed.MerchantOrderID); err != nil {
		t.Fatal(err)
	}
	e.advance(lease + time.Second)
	sum = runOnce(t, e.reconciler(nil, nil))
	wantOutcomes(t, sum, map[reconcile.Outcome]int{reconcile.Canceled: 1})
	if got := e.reread(lapsed); got.Status != payments.Canceled || got.CancellationReason != payments.CancelAuthorizationExpired {
		t.Fatalf("payment %s %q", got.Status, got.CancellationReason)
	}
}
