package api_test

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"gateway/api"
	"gateway/payments"
)

// BenchmarkHandler serves requests in process, without sockets: the
// handler's own cost of a replay answered from memory against GET /healthz
// (each with the access log and metrics every request pays).
func BenchmarkHandler(b *testing.B) {
	// JSON at info level, as serve logs by default.
	log := slog.New(api.LogHandler(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo})))
	e := newEnv(b, func(s *envSetup) {
		s.authTTL = time.Hour
		s.cfg.Logger = log
		s.cfg.ReplayCacheBytes = payments.DefaultReplayCacheBytes
		s.api = func(o *api.Options) { o.Logger = log }
	})
	const body = `{"amount":1000,"currency":"USD","payment_method":"pm_card_ok","description":"Order A-1","metadata":{"order":"A-1"}}`
	// Replays cycle over keys so that none is paced (50 per second per key).
	const keys = 1024
	n := 0
	replay := func() *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/payments", strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer "+e.apiKey)
		r.Header.Set("Idempotency-Key", "bench-replay-"+strconv.Itoa(n%keys))
		r.Header.Set("Content-Type", "application/json")
		n++
		return r
	}
	for range keys {
		w := httptest.NewRecorder()
		e.raw.ServeHTTP(w, replay())
		if w.Code != http.StatusCreated {
			b.Fatalf("first request: %d %s", w.Code, w.Body)
		}
	}
	for _, tc := range []struct {
		name   string
		req    func() *http.Request
		status int
	}{
		{"healthz", func() *http.Request { return httptest.NewRequest(http.MethodGet, "/healthz", nil) }, http.StatusOK},
		{"replay", replay, http.StatusCreated},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				e.raw.ServeHTTP(w, tc.req())
				if w.Code != tc.status {
					b.Fatalf("%d %s", w.Code, w.Body)
				}
			}
		})
	}
}
