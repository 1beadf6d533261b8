package payments

import (
	"container/list"
	"context"
	"net/http"
	"sync"
	"time"

	"gateway/idemkeys"
)

// replayCache keeps, per process, the final answers (201, 402) of keys seen
// completed here, so that a replay costs no database round trip. A final
// answer is rewritten only by what another process may do (an operator's
// forced correction, a PSP's contradiction sending the payment to review),
// so an entry is kept for ttl at most (DefaultReplayCacheTTL): every replica
// answers a rewritten answer within ttl of its rewrite. An entry also
// expires when its key's retention would (measured on this process's clock
// from the age the database gave), so a purged key still gets its 409.
//
// It is bounded by bytes, not entries (answers differ in size by a hundred
// times), evicts the least recently used answer first, and keeps any one
// merchant to a share of it: a merchant replaying or creating at full speed
// pushes out its own old answers, not everyone else's.
type replayCache struct {
	maxBytes      int64
	merchantBytes int64
	ttl           time.Duration
	mu            sync.Mutex
	bytes         int64
	lru           *list.List // of *replayEntry, most recent first
	entries       map[idemkeys.Ref]*replayEntry
	merchants     map[string]*merchantShare
}

type cachedReplay struct {
	fp [32]byte
	// raw is the digest of the bytes of a request answered with resp
	// (zero when unknown): the same bytes again are the same command.
	raw       [32]byte
	subjectID string
	resp      idemkeys.Response
	// expires is on this process's clock.
	expires time.Time
}

type replayEntry struct {
	ref      idemkeys.Ref
	replay   cachedReplay
	size     int64
	all, own *list.Element
}

// merchantShare is one merchant's part of the cache.
type merchantShare struct {
	bytes int64
	lru   *list.List // of *replayEntry, most recent first
}

// replayMerchantShare: no merchant holds more than this fraction of the cache.
const replayMerchantShare = 4

// replayEntryOverhead approximates what an entry costs besides its key and
// body: the map slot, the list elements, the strings' headers.
const replayEntryOverhead = 256

func newReplayCache(maxBytes int64, ttl time.Duration) *replayCache {
	return &replayCache{maxBytes: maxBytes, merchantBytes: maxBytes / replayMerchantShare, ttl: ttl,
		lru: list.New(), entries: map[idemkeys.Ref]*replayEntry{}, merchants: map[string]*merchantShare{}}
}

func (c *replayCache) get(ref idemkeys.Ref, now time.Time) (cachedReplay, bool) {
	if c.maxBytes <= 0 {
		return cachedReplay{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[ref]
	if !ok {
		return cachedReplay{}, false
	}
	if !now.Before(e.replay.expires) {
		c.remove(e)
		return cachedReplay{}, false
	}
	c.lru.MoveToFront(e.all)
	c.merchants[ref.MerchantID].lru.MoveToFront(e.own)
	return e.replay, true
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
	return s.replay(attempt{ref: ref, client: ctx}, e.subjectID, e.resp), true
}

// put keeps r for ref from now, until r.expires or for the cache's ttl,
// whichever ends first.
func (c *replayCache) put(ref idemkeys.Ref, r cachedReplay, now time.Time) {
	if c.maxBytes <= 0 || (r.resp.Status != http.StatusCreated && r.resp.Status != http.StatusPaymentRequired) {
		return
	}
	if end := now.Add(c.ttl); c.ttl > 0 && r.expires.After(end) {
		r.expires = end
	}
	size := int64(len(r.resp.Body)+len(r.subjectID)+len(ref.MerchantID)+len(ref.Endpoint)+len(ref.Key)) + replayEntryOverhead
	if size > c.merchantBytes {
		return // an answer larger than a merchant's share is read from the database
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.entries[ref]; ok {
		c.remove(old)
	}
	m, ok := c.merchants[ref.MerchantID]
	if !ok {
		m = &merchantShare{lru: list.New()}
		c.merchants[ref.MerchantID] = m
	}
	for m.bytes+size > c.merchantBytes {
		c.remove(m.lru.Back().Value.(*replayEntry))
	}
	for c.bytes+size > c.maxBytes {
		c.remove(c.lru.Back().Value.(*replayEntry))
	}
	if _, ok := c.merchants[ref.MerchantID]; !ok { // emptied and dropped by the evictions above
		c.merchants[ref.MerchantID] = m
	}
	e := &replayEntry{ref: ref, replay: r, size: size}
	e.all = c.lru.PushFront(e)
	e.own = m.lru.PushFront(e)
	c.entries[ref] = e
	c.bytes += size
	m.bytes += size
}

// remove drops e; the caller holds c.mu.
func (c *replayCache) remove(e *replayEntry) {
	c.lru.Remove(e.all)
	m := c.merchants[e.ref.MerchantID]
	m.lru.Remove(e.own)
	m.bytes -= e.size
	if m.lru.Len() == 0 {
		delete(c.merchants, e.ref.MerchantID)
	}
	c.bytes -= e.size
	delete(c.entries, e.ref)
}

// size is the cache's bytes and how many of them merchantID holds.
func (c *replayCache) size(merchantID string) (total, merchant int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m, ok := c.merchants[merchantID]; ok {
		merchant = m.bytes
	}
	return c.bytes, merchant
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
