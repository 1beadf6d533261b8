package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os/exec"
	"sync"
	"time"

	"gateway/webhooks"
	"gateway/webhooks/receiver"
)

// Webhooks under chaos. Every merchant registers an endpoint (all event
// types) on one receiver run by this process; the receiver verifies each
// delivery's signature with its merchant's secret and answers some of them
// with an error or not at all (seeded), so that retries happen besides the
// replicas' kills, pauses and database faults. After the run, once the
// dispatchers have delivered everything due, invariant 10 checks that every
// event the database holds reached its merchant's endpoint at least once
// with a valid signature, and that nothing reached it that is no event.

// webhookSink is the merchants' receiver.
type webhookSink struct {
	srv  *http.Server
	url  string
	mu   sync.Mutex
	rng  *rand.Rand
	keys map[string][]string // path (one per merchant) → its secrets
	// got counts, per event id, the deliveries with a valid signature;
	// forged counts those without.
	got    map[string]int
	forged map[string]int
	posts  int
	failed int
}

// webhookEnv is what every replica needs to dispatch to the sink.
func (e *env) webhookEnv() map[string]string {
	if e.hooks == nil {
		return nil
	}
	return map[string]string{
		"GATEWAY_WEBHOOK_KEY":            e.hooks.key,
		"GATEWAY_WEBHOOK_ALLOW_NETWORKS": "127.0.0.0/8",
		"GATEWAY_WEBHOOK_TIMEOUT":        "2s",
		"GATEWAY_WEBHOOK_INTERVAL":       "200ms",
		"GATEWAY_WEBHOOK_BACKOFF":        "200ms",
		"GATEWAY_WEBHOOK_BACKOFF_MAX":    "2s",
		"GATEWAY_WEBHOOK_MAX_AGE":        "24h",
		"GATEWAY_WEBHOOK_DISABLE_AFTER":  "24h",
	}
}

// hooks holds the sink and the key the replicas seal secrets with.
type hooks struct {
	*webhookSink
	key string
}

// startWebhooks starts the sink and registers every merchant's endpoint.
func (e *env) startWebhooks(ctx context.Context) (*hooks, error) {
	key, err := webhooks.NewKey()
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &webhookSink{rng: rand.New(rand.NewPCG(e.opts.seed, 0x5eed)), keys: map[string][]string{},
		got: map[string]int{}, forged: map[string]int{}}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second}
	s.url = "http://" + ln.Addr().String()
	go func() { _ = s.srv.Serve(ln) }()
	h := &hooks{webhookSink: s, key: key}
	for i, m := range e.merchants {
		path := fmt.Sprintf("/hooks/%d", i)
		cmd := exec.CommandContext(ctx, e.bin, "webhooks", "create", "--merchant", m.ID, "--url", s.url+path, "--json")
		cmd.Env = append(baseEnv(), "GATEWAY_DATABASE_DSN="+e.dsn, "GATEWAY_WEBHOOK_KEY="+key, "GATEWAY_WEBHOOK_ALLOW_NETWORKS=127.0.0.0/8")
		out, err := cmd.Output()
		if err != nil {
			h.stop()
			return nil, fmt.Errorf("gateway webhooks create: %w", err)
		}
		var ep struct{ Secret string }
		if err := json.Unmarshal(out, &ep); err != nil || ep.Secret == "" {
			h.stop()
			return nil, fmt.Errorf("gateway webhooks create printed %q: %v", out, err)
		}
		s.keys[path] = []string{ep.Secret}
	}
	e.say("webhook receiver on %s: one endpoint per merchant", s.url)
	return h, nil
}

func (s *webhookSink) stop() {
	cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(cctx)
}

// ServeHTTP verifies and counts a delivery; about one in ten is answered
// 503, and one in fifty left without an answer past the replicas' timeout.
func (s *webhookSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return
	}
	s.mu.Lock()
	s.posts++
	roll := s.rng.IntN(100)
	secrets := s.keys[r.URL.Path]
	s.mu.Unlock()
	id := r.Header.Get(webhooks.EventIDHeader)
	verr := receiver.Verify(r.Header.Get(webhooks.SignatureHeader), body, secrets, 0, time.Now())
	var ev struct {
		ID string `json:"id"`
	}
	if verr == nil && (json.Unmarshal(body, &ev) != nil || ev.ID != id) {
		verr = fmt.Errorf("the body's id %q is not the header's %q", ev.ID, id)
	}
	switch {
	case roll < 10:
		s.count(id, verr, false)
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	case roll < 12:
		s.count(id, verr, false)
		select {
		case <-r.Context().Done():
		case <-time.After(3 * time.Second):
		}
		// Never an answer: a handler that returns sends 200, which a
		// replica frozen (SIGSTOP) through its own timeout reads on waking
		// and records as delivered, while this receiver counted nothing.
		panic(http.ErrAbortHandler)
	}
	s.count(id, verr, true)
	w.WriteHeader(http.StatusNoContent)
}

func (s *webhookSink) count(id string, verr error, answered bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if verr != nil {
		s.forged[id]++
		return
	}
	if answered {
		s.got[id]++
	} else {
		s.failed++
	}
}

// checkWebhooks is invariant 10: it waits (up to the settle time) for the
// dispatchers to fan out every event and deliver every delivery, then
// compares the receiver's tally with the events table.
func (e *env) checkWebhooks(ctx context.Context) (*invariant, error) {
	inv := &invariant{ID: 10, Name: "every event reached its merchant's endpoint at least once, signed; nothing else did"}
	if e.hooks == nil {
		return inv, nil
	}
	deadline := time.Now().Add(e.opts.settle)
	var waiting, pending int
	for {
		err := e.db.QueryRowxContext(ctx, `SELECT
    (SELECT COUNT(*) FROM events WHERE fanned_out = 0),
    (SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'pending')`).Scan(&waiting, &pending)
		if err != nil {
			return nil, fmt.Errorf("count undelivered events: %w", err)
		}
		if (waiting == 0 && pending == 0) || time.Now().After(deadline) {
			break
		}
		if !sleepCtx(ctx, 250*time.Millisecond) {
			return nil, ctx.Err()
		}
	}
	if waiting > 0 || pending > 0 {
		inv.fail("after %s: %d events not fanned out, %d deliveries pending", e.opts.settle, waiting, pending)
	}
	var ids []string
	if err := e.db.SelectContext(ctx, &ids, `SELECT id FROM events ORDER BY pos`); err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	var failed int
	if err := e.db.GetContext(ctx, &failed, `SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'failed'`); err != nil {
		return nil, err
	}
	if failed > 0 {
		inv.fail("%d deliveries failed for good", failed)
	}
	s := e.hooks.webhookSink
	s.mu.Lock()
	defer s.mu.Unlock()
	known := map[string]bool{}
	dups := 0
	for _, id := range ids {
		inv.Checked++
		known[id] = true
		switch n := s.got[id]; {
		case n == 0:
			inv.fail("event %s never reached its endpoint with a valid signature", id)
		case n > 1:
			dups += n - 1
		}
	}
	for id, n := range s.forged {
		inv.fail("%d deliveries of %q with an invalid signature or body", n, id)
	}
	for id := range s.got {
		if !known[id] {
			inv.fail("the endpoint got %q, which is no event", id)
		}
	}
	inv.Notes = append(inv.Notes, fmt.Sprintf("%d events, %d POSTs, %d answered 503 or not at all by the receiver, %d duplicates dropped by id",
		len(ids), s.posts, s.failed, dups))
	return inv, nil
}
