package payments

import (
	"context"
	"net/http"
	"sync"
	"time"

	"gateway/idemkeys"
)

// replayCache keeps, per process, the final answers (201, 402) of keys seen
// completed here, so that a replay costs no database round trip. A final
// answer never changes while the key is retained (only a 202 under review is
// ever rewritten, and it is not kept), so a cached one is always the stored
// one; an entry expires when its key's retention would (measured on this
// process's clock from the age the database gave), so a purged key still
// gets its 409.
type replayCache struct {
	max       int
	retention time.Duration
	mu        sync.Mutex
	entries   map[idemkeys.Ref]cachedReplay
}

type cachedReplay struct {
	fp [32]byte
	// raw is the digest of the bytes of a request answered with resp
	// (zero when unknown): the same bytes again are the same command.
	raw       [32]byte
	paymentID string
	resp      idemkeys.Response
	// expires is on this process's clock.
	expires time.Time
}

func newReplayCache(max int, retention time.Duration) *replayCache {
	return &replayCache{max: max, retention: retention, entries: map[idemkeys.Ref]cachedReplay{}}
}

func (c *replayCache) get(ref idemkeys.Ref, now time.Time) (cachedReplay, bool) {
	if c.max <= 0 {
		return cachedReplay{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[ref]
	if !ok || !now.Before(e.expires) {
		return cachedReplay{}, false
	}
	return e, true
}

// ReplayBody answers a POST /payments from this process's cache when the
// request's body, as received (digest: its SHA-256), is byte for byte one
// already answered for the key: the same bytes are the same command, so
// parsing, validating and fingerprinting them again would only repeat what
// was decided. The replay is paced and logged as any other. ok is false
// when the caller must go the whole way (Create).
func (s *Service) ReplayBody(ctx context.Context, merchantID, key string, digest [32]byte) (out Outcome, ok bool) {
	if digest == ([32]byte{}) {
		return Outcome{}, false
	}
	ref := idemkeys.Ref{MerchantID: merchantID, Endpoint: EndpointCreatePayment, Key: key}
	e, ok := s.replays.get(ref, s.cfg.Now())
	if !ok || e.raw != digest {
		return Outcome{}, false
	}
	return s.replay(attempt{ref: ref, client: ctx}, e.paymentID, e.resp), true
}

func (c *replayCache) put(ref idemkeys.Ref, e cachedReplay) {
	if c.max <= 0 || (e.resp.Status != http.StatusCreated && e.resp.Status != http.StatusPaymentRequired) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= c.max {
		clear(c.entries) // crude but bounded; a miss only costs one read
	}
	c.entries[ref] = e
}

// Replays of one key are paced: a burst of about replayBurst, then one per
// replaySpacing. A client hammering one key waits for its answers instead of
// taking the CPU and connections that other merchants' payments need; a
// correct client never notices.
const (
	replaySpacing = 20 * time.Millisecond
	replayBurst   = 50
	pacerMax      = 10_000
)

// pacer is a per-key generic cell rate algorithm: tat is when the key's
// next replay is due, were replays evenly spaced.
type pacer struct {
	mu  sync.Mutex
	tat map[idemkeys.Ref]time.Time
}

// wait delays a replay of ref as the pace demands, or until ctx ends.
func (p *pacer) wait(ctx context.Context, ref idemkeys.Ref) {
	delay := p.reserve(ref, time.Now())
	if delay <= 0 {
		return
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// reserve books ref's next replay at now and says how long it must wait.
func (p *pacer) reserve(ref idemkeys.Ref, now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.tat) >= pacerMax {
		clear(p.tat)
	}
	tat := p.tat[ref]
	if tat.Before(now) {
		tat = now
	}
	p.tat[ref] = tat.Add(replaySpacing)
	return tat.Sub(now) - replayBurst*replaySpacing
}
