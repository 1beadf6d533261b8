package routing

import (
	"sync"
	"time"
)

// State is a breaker's state.
type State int

const (
	// Closed: the account takes new payments.
	Closed State = iota
	// HalfOpen: the cool-down is over; one payment at a time probes it.
	HalfOpen
	// Open: the account takes no new payment until its cool-down ends.
	Open
)

func (s State) String() string {
	switch s {
	case HalfOpen:
		return "half_open"
	case Open:
		return "open"
	}
	return "closed"
}

// BreakerConfig says when a breaker opens and for how long.
type BreakerConfig struct {
	// Window is how far back the outcomes that count reach.
	Window time.Duration
	// MinCalls is how many calls the window must hold before the breaker
	// may open: a single failure at a quiet hour is no outage.
	MinCalls int
	// FailurePercent opens the breaker when failures reach it (1–100).
	FailurePercent int
	// Cooldown is how long it stays open before a probe; also how long a
	// probe may take before another may go.
	Cooldown time.Duration
	// Slow counts a call that took longer as a failure (0: none).
	Slow time.Duration
}

// DefaultBreaker is the breaker's configuration unless told otherwise.
var DefaultBreaker = BreakerConfig{Window: 10 * time.Second, MinCalls: 10, FailurePercent: 50, Cooldown: 5 * time.Second}

// buckets divide a breaker's window.
const buckets = 10

// Breaker is one account's circuit breaker in one process. It is fed the
// outcome of each charge and consulted, without a database round trip,
// before a new payment or a next attempt is sent to the account.
type Breaker struct {
	cfg BreakerConfig
	now func() time.Time

	mu       sync.Mutex
	state    State
	openedAt time.Time
	probeAt  time.Time // when the probe in flight was let through (zero: none)
	counts   [buckets]struct {
		start          time.Time
		calls, failing int
	}
}

// NewBreaker makes a closed breaker; now is its clock (time.Now when nil).
func NewBreaker(cfg BreakerConfig, now func() time.Time) *Breaker {
	if now == nil {
		now = time.Now
	}
	return &Breaker{cfg: cfg, now: now}
}

// Allow says whether a new payment may go to the account now. An open
// breaker whose cool-down is over lets one probe through (and turns half
// open); while the probe is out, or for a cool-down if it never reports,
// nothing else goes.
func (b *Breaker) Allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	switch b.state {
	case Open:
		if now.Sub(b.openedAt) < b.cfg.Cooldown {
			return false
		}
		b.state = HalfOpen
		b.probeAt = now
		return true
	case HalfOpen:
		if !b.probeAt.IsZero() && now.Sub(b.probeAt) < b.cfg.Cooldown {
			return false
		}
		b.probeAt = now
		return true
	}
	return true
}

// Record feeds one charge's outcome: failed is a not-processed or unknown
// outcome; took is how long the call took.
func (b *Breaker) Record(failed bool, took time.Duration) {
	if b.cfg.Slow > 0 && took > b.cfg.Slow {
		failed = true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	switch b.state {
	case HalfOpen:
		if failed {
			b.open(now)
			return
		}
		b.state, b.probeAt = Closed, time.Time{}
		b.counts = [buckets]struct {
			start          time.Time
			calls, failing int
		}{}
		return
	case Open:
		return // a call let through before it opened
	}
	width := b.cfg.Window / buckets
	slot := &b.counts[int(now.UnixNano()/int64(max(width, 1)))%buckets]
	if now.Sub(slot.start) >= width {
		slot.start, slot.calls, slot.failing = now.Truncate(max(width, 1)), 0, 0
	}
	slot.calls++
	if failed {
		slot.failing++
	}
	calls, failing := 0, 0
	for _, c := range b.counts {
		if now.Sub(c.start) < b.cfg.Window {
			calls += c.calls
			failing += c.failing
		}
	}
	if calls >= b.cfg.MinCalls && failing*100 >= b.cfg.FailurePercent*calls {
		b.open(now)
	}
}

func (b *Breaker) open(now time.Time) {
	b.state, b.openedAt, b.probeAt = Open, now, time.Time{}
}

// State is the breaker's state now: an open one past its cool-down reads
// half open.
func (b *Breaker) State() State {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == Open && b.now().Sub(b.openedAt) >= b.cfg.Cooldown {
		return HalfOpen
	}
	return b.state
}

// Health is the breakers of a process's accounts.
type Health struct {
	byName map[string]*Breaker
}

// NewHealth makes a closed breaker for each account.
func NewHealth(accounts []string, cfg BreakerConfig, now func() time.Time) *Health {
	h := &Health{byName: make(map[string]*Breaker, len(accounts))}
	for _, a := range accounts {
		h.byName[a] = NewBreaker(cfg, now)
	}
	return h
}

// Allow is account's Breaker.Allow; an account without one is allowed.
func (h *Health) Allow(account string) bool {
	if b := h.breaker(account); b != nil {
		return b.Allow()
	}
	return true
}

// Record is account's Breaker.Record.
func (h *Health) Record(account string, failed bool, took time.Duration) {
	if b := h.breaker(account); b != nil {
		b.Record(failed, took)
	}
}

// State is account's breaker's state (Closed for one without).
func (h *Health) State(account string) State {
	if b := h.breaker(account); b != nil {
		return b.State()
	}
	return Closed
}

func (h *Health) breaker(account string) *Breaker {
	if h == nil {
		return nil
	}
	return h.byName[account]
}
