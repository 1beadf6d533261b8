package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gateway/idemkeys"
	"gateway/mysql"
	"gateway/payments"
	"gateway/psp"
	"gateway/psp/fake"
	"gateway/reconcile"
)

// startedLookups closes all once n lookups have started.
type startedLookups struct {
	*fake.PSP
	n       int32
	started atomic.Int32
	all     chan struct{}
}

func (p *startedLookups) Lookup(ctx context.Context, id string) (psp.Charge, error) {
	if p.started.Add(1) == p.n {
		close(p.all)
	}
	return p.PSP.Lookup(ctx, id)
}

// heldSettles holds every settle until release is closed (or its context
// ends), telling entered about each one first when entered is set; it tells
// claimed when the pass's last claim (the refund checks') returned.
type heldSettles struct {
	*mysql.Store
	release <-chan struct{}
	entered chan<- struct{}
	claimed chan<- struct{}
}

func (s heldSettles) ClaimRefundChecks(ctx context.Context, lease time.Duration, limit int) ([]payments.RefundCheck, error) {
	items, err := s.Store.ClaimRefundChecks(ctx, lease, limit)
	if s.claimed != nil && len(items) == 0 {
		s.claimed <- struct{}{}
	}
	return items, err
}

func (s heldSettles) Settle(ctx context.Context, ref idemkeys.Ref, token idemkeys.Token, c payments.PaymentChange) error {
	if s.entered != nil {
		s.entered <- struct{}{}
	}
	select {
	case <-s.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Store.Settle(ctx, ref, token, c)
}

// A lookup worker hands its decision to a writer and goes on to its next
// lookup: with every write held until twice Concurrency lookups have
// started, the pass still settles every key. Were the workers writing
// themselves, only Concurrency lookups could start, and the held writes
// would end with the pass's deadline as database errors.
func TestLookupsDoNotWaitOnWrites(t *testing.T) {
	e := newEnv(t)
	const conc = 4
	const rows = 2 * conc
	for i := range rows {
		e.crash(fmt.Sprintf("k%02d", i), true)
	}
	e.advance(lease + time.Second)
	p := &startedLookups{PSP: e.psp, n: rows, all: make(chan struct{})}
	r := e.reconciler(p, heldSettles{Store: e.store, release: p.all}, func(c *reconcile.Config) {
		c.Concurrency, c.BatchSize = conc, conc
	})
	// The deadline only ends a pass that waits in vain; the test then fails.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sum, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatalf("RunOnce: %v", err)
	}
	wantOutcomes(t, sum, map[reconcile.Outcome]int{reconcile.Succeeded: rows})
	if n := e.count(`SELECT COUNT(*) FROM payments WHERE status = 'succeeded'`); n != rows {
		t.Fatalf("%d payments succeeded, want %d", n, rows)
	}
	if n := e.count(`SELECT COUNT(*) FROM idempotency_keys WHERE state = 'COMPLETED'`); n != rows {
		t.Fatalf("%d keys completed, want %d", n, rows)
	}
}

// A decision that waits for a writer while its lease runs out and another
// reconciler takes the key over loses its fence: it is reported fenced and
// writes nothing; the key is settled once, by the other.
func TestWriteWaitingPastItsLeaseIsFenced(t *testing.T) {
	e := newEnv(t)
	p := e.crash("k", true)
	e.advance(lease + time.Second)
	release, entered, claimed := make(chan struct{}), make(chan struct{}), make(chan struct{}, 1)
	slow := e.reconciler(nil, heldSettles{Store: e.store, release: release, entered: entered, claimed: claimed})
	type pass struct {
		sum reconcile.Summary
		err error
	}
	done := make(chan pass, 1)
	go func() {
		sum, err := slow.RunOnce(context.Background())
		done <- pass{sum, err}
	}()
	<-entered // the slow pass decided and waits to write,
	<-claimed // and claims no more
	e.advance(lease + time.Second)
	wantOutcomes(t, runOnce(t, e.reconciler(nil, nil)), map[reconcile.Outcome]int{reconcile.Succeeded: 1})
	close(release)
	got := <-done
	if got.err != nil {
		t.Fatalf("slow pass: %v", got.err)
	}
	wantOutcomes(t, got.sum, map[reconcile.Outcome]int{reconcile.Fenced: 1})
	if n := e.count(`SELECT COUNT(*) FROM events WHERE object_id = ? AND type = 'payment.succeeded'`, p.ID); n != 1 {
		t.Fatalf("%d events for the payment, want 1", n)
	}
}

// cancelAfterSettles cancels the pass once n settles have committed; the
// settles in flight then meet a cancelled context mid-transaction.
type cancelAfterSettles struct {
	*mysql.Store
	n      int32
	done   atomic.Int32
	cancel context.CancelFunc
}

func (s *cancelAfterSettles) Settle(ctx context.Context, ref idemkeys.Ref, token idemkeys.Token, c payments.PaymentChange) error {
	err := s.Store.Settle(ctx, ref, token, c)
	if err == nil && s.done.Add(1) == s.n {
		s.cancel()
	}
	return err
}

// A pass cancelled mid-way returns with every goroutine it started ended,
// and leaves each key whole: completed with its payment settled and its
// one event, or still in progress with its payment untouched.
func TestCancelledPassLeavesNoGoroutineNorHalfWrittenRow(t *testing.T) {
	e := newEnv(t)
	const rows = 40
	for i := range rows {
		e.crash(fmt.Sprintf("k%02d", i), true)
	}
	e.advance(lease + time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st := &cancelAfterSettles{Store: e.store, n: 8, cancel: cancel}
	r := e.reconciler(nil, st, func(c *reconcile.Config) { c.Concurrency, c.BatchSize = 4, 4 })
	sum, err := r.RunOnce(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("RunOnce: %v, want context.Canceled", err)
	}
	if left := pipelineGoroutines(); left != "" {
		t.Fatalf("goroutines left by the pass:\n%s", left)
	}
	completed := e.count(`SELECT COUNT(*) FROM idempotency_keys WHERE state = 'COMPLETED'`)
	if completed < sum.Counts[reconcile.Succeeded] || sum.Counts[reconcile.Succeeded] < 8 || completed >= rows {
		t.Fatalf("%d keys completed, %d reported succeeded (outcomes %v): want at least 8, and the pass cut short", completed, sum.Counts[reconcile.Succeeded], sum.Counts)
	}
	if n := e.count(`SELECT COUNT(*) FROM idempotency_keys k JOIN payments p ON p.merchant_id = k.merchant_id AND p.id = k.subject_id
WHERE (k.state = 'COMPLETED') <> (p.status = 'succeeded')
   OR (k.state = 'COMPLETED') <> (k.response_body IS NOT NULL)
   OR (SELECT COUNT(*) FROM events v WHERE v.merchant_id = p.merchant_id AND v.object_id = p.id AND v.type = 'payment.succeeded') <> (p.status = 'succeeded')
   OR (k.state <> 'COMPLETED' AND p.status <> 'processing')`); n != 0 {
		t.Fatalf("%d keys half written", n)
	}
}

// pipelineGoroutines lists the goroutines of package reconcile still alive.
// A goroutine that has signalled its end may not have returned yet, so it
// looks a few times, yielding between looks.
func pipelineGoroutines() string {
	var left []string
	for range 100 {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		left = left[:0]
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "gateway/reconcile.") {
				left = append(left, g)
			}
		}
		if len(left) == 0 {
			return ""
		}
		runtime.Gosched()
	}
	return strings.Join(left, "\n\n")
}
