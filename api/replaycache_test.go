package api_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"gateway/payments"
	"gateway/review"
)

// With the replay cache on, replays answer the stored bytes, a different body
// is still refused, and a key past retention is not replayed from memory.
func TestReplayCache(t *testing.T) {
	e := newEnv(t, func(s *envSetup) { s.cfg.ReplayCacheBytes, s.cfg.Retention = 1<<20, time.Hour })
	first := e.post("k", okBody)
	wantStatus(t, first, http.StatusCreated)
	for range 3 {
		again := e.post("k", okBody)
		if again.status != http.StatusCreated || !bytes.Equal(again.body, first.body) || again.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("cached replay: %d %s", again.status, again.body)
		}
	}
	wantProblem(t, e.post("k", strings.Replace(okBody, "1000", "1", 1)), http.StatusUnprocessableEntity, "idempotency-key-mismatch")

	// The reconciler purges the key after retention; memory must not outlive it.
	if _, err := e.db.Exec(`DELETE FROM idempotency_keys`); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Hour)
	wantProblem(t, e.post("k", okBody), http.StatusConflict, "idempotency-key-reused")
	e.wantCounts(counts{payments: 1, keys: 0, completed: 0, charges: 1, chargeCalls: 1})
}

// A replay whose bytes equal a request already answered is answered from
// memory unparsed; any other bytes go the whole way: the same command in
// other bytes is a replay, another command is refused, a bad API key is
// refused before anything, and another merchant's same key is its own.
func TestReplayOfTheSameBytes(t *testing.T) {
	e := newEnv(t, func(s *envSetup) { s.cfg.ReplayCacheBytes, s.cfg.Retention = 1<<20, time.Hour })
	first := e.post("k", okBody)
	wantStatus(t, first, http.StatusCreated)
	respaced := strings.Replace(okBody, `"amount": 1000`, `"amount":1000`, 1)
	for _, body := range []string{okBody, respaced, okBody, respaced} {
		again := e.post("k", body)
		if again.status != http.StatusCreated || !bytes.Equal(again.body, first.body) || again.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("replay of %s: %d %s", body, again.status, again.body)
		}
	}
	wantProblem(t, e.post("k", strings.Replace(okBody, "1000", "1", 1)), http.StatusUnprocessableEntity, "idempotency-key-mismatch")
	if r := e.postAs("sk_test_wrong", "k", okBody); r.status != http.StatusUnauthorized {
		t.Fatalf("wrong API key: %d %s", r.status, r.body)
	}
	e.wantCounts(counts{payments: 1, keys: 1, completed: 1, charges: 1, chargeCalls: 1})
}

// An operator's forced correction on another process (gateway payments
// resolve --force) reaches this replica's replays within the cache's ttl:
// until then the cached answer may still be replayed, after it the
// corrected one is. Before, the cached 402 was replayed for the key's
// whole retention.
func TestAForcedCorrectionIsReplayedWithinTheCacheTTL(t *testing.T) {
	const ttl = time.Minute
	e := newEnv(t, func(s *envSetup) { s.cfg.ReplayCacheBytes, s.cfg.ReplayCacheTTL = 1<<20, ttl })
	declined := strings.Replace(okBody, "pm_card_ok", "pm_card_declined", 1)
	first := e.post("k", declined)
	wantStatus(t, first, http.StatusPaymentRequired)
	var id string
	if err := e.db.Get(&id, `SELECT id FROM payments`); err != nil {
		t.Fatal(err)
	}
	adm := review.New(e.store, review.Config{PSPs: payments.OnePSP(e.psp)})
	if _, err := adm.Resolve(context.Background(), payments.Resolution{PaymentID: id, To: payments.Succeeded,
		Reason: "paid by bank transfer", Actor: "ops", Force: true}); err != nil {
		t.Fatal(err)
	}
	if r := e.post("k", declined); r.status != http.StatusPaymentRequired || !bytes.Equal(r.body, first.body) {
		t.Fatalf("within the ttl the cached answer is replayed: %d %s", r.status, r.body)
	}
	e.clock.Advance(ttl)
	r := e.post("k", declined)
	if r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" || !strings.Contains(string(r.body), `"status":"succeeded"`) {
		t.Fatalf("past the ttl the corrected answer is replayed: %d %s", r.status, r.body)
	}
	e.wantCounts(counts{payments: 1, keys: 1, completed: 1, charges: 1, chargeCalls: 1})
}
