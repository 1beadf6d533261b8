package mysql

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"
)

// DefaultMaxClockSkew is how far a replica's clock may stray from the
// database's before the replica stops claiming and charging.
const DefaultMaxClockSkew = time.Second

// ClockGuard watches how far this process's wall clock is from the
// database's. The gateway judges leases and deadlines on the database's
// clock alone, so a drifting replica cannot break them; the guard is the
// belt to those braces: a replica whose clock is off by more than its bound
// is taken out of service (it stops claiming and charging and reports not
// ready) until the clocks agree again, because a drifted clock is a sign
// that something else on the host is wrong too.
type ClockGuard struct {
	db      *sqlx.DB
	bound   time.Duration
	now     func() time.Time
	observe func(skew time.Duration)
	log     *slog.Logger

	mu      sync.Mutex
	skew    time.Duration
	err     error
	checked bool
}

// NewClockGuard returns a guard over dbx allowing bound of skew; now is the
// local clock (time.Now when nil) and observe, when set, receives every
// measured skew (local minus database).
func NewClockGuard(dbx *sqlx.DB, bound time.Duration, now func() time.Time, observe func(time.Duration), log *slog.Logger) *ClockGuard {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &ClockGuard{db: dbx, bound: bound, now: now, observe: observe, log: log}
}

// Check measures the skew once. The database's NOW(6) is compared with the
// local clock halfway through the round trip; the round trip's half is
// the measurement's uncertainty and is given the benefit of the doubt. A
// failed measurement (the database is unreachable) changes nothing but is
// returned.
func (g *ClockGuard) Check(ctx context.Context) error {
	var dbNow time.Time
	t0 := time.Now()
	local0 := g.now()
	if err := g.db.GetContext(ctx, &dbNow, `SELECT NOW(6)`); err != nil {
		return fmt.Errorf("mysql: clock check: %w", Classify(err))
	}
	rtt := time.Since(t0)
	local := local0.Add(rtt / 2)
	skew := local.Sub(dbNow)
	off := skew
	if off < 0 {
		off = -off
	}
	var verdict error
	if off-rtt/2 > g.bound {
		verdict = fmt.Errorf("this replica's clock is %s off the database's (bound %s): it takes no payments until the clocks agree", skew.Round(time.Millisecond), g.bound)
	}
	if g.observe != nil {
		g.observe(skew)
	}
	g.mu.Lock()
	was := g.err
	g.skew, g.err, g.checked = skew, verdict, true
	g.mu.Unlock()
	switch {
	case verdict != nil && was == nil:
		g.log.Error("clock skew beyond bound: not taking payments", "skew", skew.String(), "bound", g.bound.String())
	case verdict == nil && was != nil:
		g.log.Info("clock skew back within bound", "skew", skew.String(), "bound", g.bound.String())
	}
	return nil
}

// Err is nil while the last measurement was within the bound, and says why
// not otherwise; before any measurement it is an error too.
func (g *ClockGuard) Err() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.checked {
		return fmt.Errorf("the clock has not been compared with the database's yet")
	}
	return g.err
}

// Run checks every interval until ctx ends.
func (g *ClockGuard) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			cctx, cancel := context.WithTimeout(ctx, every/2)
			if err := g.Check(cctx); err != nil && ctx.Err() == nil {
				g.log.Warn("clock check failed", "err", err)
			}
			cancel()
		}
	}
}
