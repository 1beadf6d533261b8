package idemkeys

import (
	"container/list"
	"context"
	"net/http"
	"sync"
	"time"
)

// ReplayCache keeps, per process, the final answers (201, 402) of keys seen
// completed here, so that a replay costs no database round trip. A final
// answer is rewritten only by what another process may do (an operator's
// forced correction, a PSP's contradiction sending the payment to review),
// so an entry is kept for ttl at most (the payments' default is a minute): every replica
// answers a rewritten answer within ttl of its rewrite. An entry also
// expires when its key's retention would (measured on this process's clock
// from the age the database gave), so a purged key still gets its 409.
//
// It is bounded by bytes, not entries (answers differ in size by a hundred
// times), evicts the least recently used answer first, and keeps any one
// merchant to a share of it: a merchant replaying or creating at full speed
// pushes out its own old answers, not everyone else's.
type ReplayCache struct {
	maxBytes      int64
	merchantBytes int64
	ttl           time.Duration
	mu            sync.Mutex
	bytes         int64
	lru           *list.List // of *replayEntry, most recent first
	entries       map[Ref]*replayEntry
	merchants     map[string]*merchantShare
}

// Cached is a completed key's answer as the cache keeps it.
type Cached struct {
	Fingerprint [32]byte
	// Raw is the digest of the bytes of a request answered with Response
	// (zero when unknown): the same bytes again are the same command.
	Raw       [32]byte
	SubjectID string
	Response  Response
	// Expires is on this process's clock.
	Expires time.Time
}

type replayEntry struct {
	ref      Ref
	replay   Cached
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

// NewReplayCache keeps up to maxBytes of answers, each for ttl at most; a
// zero bound keeps none.
func NewReplayCache(maxBytes int64, ttl time.Duration) *ReplayCache {
	return &ReplayCache{maxBytes: maxBytes, merchantBytes: maxBytes / replayMerchantShare, ttl: ttl,
		lru: list.New(), entries: map[Ref]*replayEntry{}, merchants: map[string]*merchantShare{}}
}

// Get is ref's answer, unless it has expired at now or is not kept.
func (c *ReplayCache) Get(ref Ref, now time.Time) (Cached, bool) {
	if c.maxBytes <= 0 {
		return Cached{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[ref]
	if !ok {
		return Cached{}, false
	}
	if !now.Before(e.replay.Expires) {
		c.remove(e)
		return Cached{}, false
	}
	c.lru.MoveToFront(e.all)
	c.merchants[ref.MerchantID].lru.MoveToFront(e.own)
	return e.replay, true
}

// Put keeps r for ref from now, until r.Expires or for the cache's ttl,
// whichever ends first.
func (c *ReplayCache) Put(ref Ref, r Cached, now time.Time) {
	if c.maxBytes <= 0 || (r.Response.Status != http.StatusCreated && r.Response.Status != http.StatusPaymentRequired) {
		return
	}
	if end := now.Add(c.ttl); c.ttl > 0 && r.Expires.After(end) {
		r.Expires = end
	}
	size := int64(len(r.Response.Body)+len(r.SubjectID)+len(ref.MerchantID)+len(ref.Endpoint)+len(ref.Key)) + replayEntryOverhead
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
func (c *ReplayCache) remove(e *replayEntry) {
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

// Size is the cache's bytes and how many of them merchantID holds.
func (c *ReplayCache) Size(merchantID string) (total, merchant int64) {
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

// Pacer is a per-key generic cell rate algorithm: tat is when the key's
// next replay is due, were replays evenly spaced.
type Pacer struct {
	mu  sync.Mutex
	tat map[Ref]time.Time
}

// NewPacer paces each key's replays.
func NewPacer() *Pacer { return &Pacer{tat: map[Ref]time.Time{}} }

// Wait delays a replay of ref as the pace demands, or until ctx ends.
func (p *Pacer) Wait(ctx context.Context, ref Ref) {
	delay := p.Reserve(ref, time.Now())
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

// Reserve books ref's next replay at now and says how long it must wait.
func (p *Pacer) Reserve(ref Ref, now time.Time) time.Duration {
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
