package api_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"
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
