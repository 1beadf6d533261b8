package api_test

import (
	"bytes"
	"context"
	"net/http"
	"testing"
	"time"

	"gateway/payments"
	"gateway/psp/fake"
	"gateway/reconcile"
)

// A payment nobody could settle replays 202 requires_review until ops
// resolve it; then its key replays the resolution.
func TestReviewAnswersThenResolution(t *testing.T) {
	e := newEnv(t)
	e.psp.FailNextCharges(fake.FaultUnknownBeforeCharge, 1)
	wantStatus(t, e.post("k", okBody), http.StatusBadGateway)
	e.psp.FailNextLookups(1)
	e.advance(time.Minute)
	r := reconcile.New(e.store, payments.OnePSP(e.psp), reconcile.Config{Lease: 30 * time.Second, PSPTimeout: time.Second, MaxAttempts: 1, Now: e.clock.Now})
	if sum, err := r.RunOnce(context.Background()); err != nil || sum.Counts[reconcile.Review] != 1 {
		t.Fatalf("reconcile: %+v %v", sum.Counts, err)
	}
	review := e.post("k", okBody)
	wantStatus(t, review, http.StatusAccepted)
	if review.header.Get("Idempotent-Replayed") != "true" || !bytes.Contains(review.body, []byte(`"status":"requires_review"`)) {
		t.Fatalf("review answer: %s", review.body)
	}
	v := decodeView(t, review.body)
	if _, err := e.admin().Resolve(context.Background(), payments.Resolution{PaymentID: v.ID, To: payments.Failed, Reason: "not in the PSP dashboard", Actor: "ops"}); err != nil {
		t.Fatal(err)
	}
	resolved := e.post("k", okBody)
	wantStatus(t, resolved, http.StatusPaymentRequired)
	if got := decodeView(t, e.get("/payments/"+v.ID).body); got.Status != payments.Failed {
		t.Fatalf("GET after resolution: %s", got.Status)
	}
	e.wantCounts(counts{payments: 1, keys: 1, completed: 1, charges: 0, chargeCalls: 1})
	// Its life in events: created, sent to review by the reconciler,
	// resolved by ops, each once, numbered in order.
	evs := e.pageAll(e.apiKey, "&object_id="+v.ID, 10)
	if len(evs) != 3 || evs[0].Type != "payment.processing" || evs[1].Type != "payment.requires_review" || evs[2].Type != "payment.failed" ||
		evs[2].Seq != 3 || evs[2].Data["status"] != "failed" {
		t.Fatalf("events: %+v", evs)
	}
}
