package reconcile_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gateway/errs"
	"gateway/idemkeys"
	"gateway/mysql"
	"gateway/payments"
	"gateway/psp"
	"gateway/psp/fake"
	"gateway/reconcile"
)

// stalledAck commits the claim but reports the COMMIT as lost, and makes the
// re-read that follows stall (a database failover) for `stall`.
type stalledAck struct {
	*mysql.Store
	advance func(time.Duration)
	stall   time.Duration
	claimed atomic.Bool
	once    sync.Once
}

func (s *stalledAck) Claim(ctx context.Context, c payments.Claim) error {
	if err := s.Store.Claim(ctx, c); err != nil {
		return err
	}
	s.claimed.Store(true)
	return fmt.Errorf("Store.Claim: %w: commit: invalid connection", errs.ErrWriteUnknown)
}

// Record stalls the re-read that follows the lost acknowledgement.
func (s *stalledAck) Record(ctx context.Context, ref idemkeys.Ref) (idemkeys.Record, error) {
	if s.claimed.Load() {
		s.once.Do(func() { s.advance(s.stall) })
	}
	return s.Store.Record(ctx, ref)
}

// A worker whose claim was delayed past its lease (here: a lost COMMIT
// acknowledgement and a long reconnect) must not send the charge: the
// reconciler may already have judged the key never charged. It gives the key
// back, counted as a send that never left; the reconciler settles it failed
// without needing the PSP's word, and the customer is not charged.
func TestNoChargeAfterTheLeaseEnded(t *testing.T) {
	e := newEnv(t)
	st := &stalledAck{Store: e.store, advance: e.advance, stall: lease + creationWindow + time.Second}
	svc := payments.NewService(st, payments.OnePSP(e.psp), payments.Config{
		Lease: lease, PSPTimeout: 5 * time.Second, InFlightWait: 10 * time.Second, Now: e.clock.Now,
	})
	_, err := svc.Create(context.Background(), e.request("late"))
	if errs.CodeOf(err) != errs.CodePSPUnavailable {
		t.Fatalf("late worker: %v, want a retryable refusal", err)
	}
	if e.psp.ChargeCalls() != 0 {
		t.Fatal("a charge was sent after the lease had ended")
	}
	wantOutcomes(t, runOnce(t, e.reconciler(nil, nil)), map[reconcile.Outcome]int{reconcile.Failed: 1})
	if e.psp.LookupCalls() != 0 {
		t.Fatal("the reconciler asked the PSP about a key whose only send never left")
	}
}

// noDedupe is the fake PSP declaring that it does not deduplicate order ids.
type noDedupe struct{ *fake.PSP }

func (n noDedupe) Capabilities() psp.Capabilities {
	c := n.PSP.Capabilities()
	c.DedupesOrderID = false
	return c
}

// On a PSP without dedupe, retries that look up but do not charge must not
// keep pushing the creation window forward: the key settles.
func TestRetriesDoNotKeepTheCreationWindowOpen(t *testing.T) {
	e := newEnv(t)
	adapter := noDedupe{e.psp}
	svc := payments.NewService(e.store, payments.OnePSP(adapter), payments.Config{
		Lease: lease, PSPTimeout: 5 * time.Second, InFlightWait: 10 * time.Millisecond, Now: e.clock.Now,
	})
	r := e.reconciler(adapter, nil)
	e.psp.FailNextCharges(fake.FaultUnknownBeforeCharge, 1)
	ctx := context.Background()
	if _, err := svc.Create(ctx, e.request("k")); errs.CodeOf(err) != errs.CodePSPUnknown {
		t.Fatalf("first: %v", err)
	}
	for step := 1; step <= 180; step++ { // 30 minutes of a retry every 10 s, a reconcile pass every 30 s
		e.advance(10 * time.Second)
		_, _ = svc.Create(ctx, e.request("k"))
		if step%3 == 0 {
			runOnce(t, r)
		}
	}
	if n := e.count(`SELECT COUNT(*) FROM idempotency_keys WHERE state = 'IN_PROGRESS'`); n != 0 {
		t.Fatal("the key is still unfinished after 30 minutes of retries")
	}
	if e.psp.ChargeCount() > 1 {
		t.Fatalf("%d charges", e.psp.ChargeCount())
	}
}

// Clients retrying faster than the lease must not keep the reconciler away:
// with a lookup that never answers, the payment still reaches review.
func TestRetriesDoNotStarveTheReconciler(t *testing.T) {
	e := newEnv(t)
	svc := payments.NewService(e.store, payments.OnePSP(e.psp), payments.Config{
		Lease: lease, PSPTimeout: 5 * time.Second, InFlightWait: 10 * time.Millisecond, Now: e.clock.Now,
	})
	r := e.reconciler(nil, nil) // MaxAttempts 3, back-off 1 m then 2 m
	e.psp.FailNextCharges(fake.FaultUnknownBeforeCharge, 1)
	ctx := context.Background()
	if _, err := svc.Create(ctx, e.request("u")); errs.CodeOf(err) != errs.CodePSPUnknown {
		t.Fatalf("first: %v", err)
	}
	e.psp.FailNextLookups(1 << 20)
	for step := 1; step <= 180; step++ {
		e.advance(10 * time.Second)
		_, _ = svc.Create(ctx, e.request("u"))
		if step%3 == 0 {
			runOnce(t, r)
		}
	}
	if n := e.count(`SELECT COUNT(*) FROM payments WHERE status = 'requires_review'`); n != 1 {
		t.Fatalf("after 30 minutes of retries the payment is not in review (attempts %d)",
			e.count(`SELECT reconcile_attempts FROM idempotency_keys`))
	}
	if e.psp.ChargeCalls() != 1 {
		t.Fatalf("%d charge calls", e.psp.ChargeCalls())
	}
}

// slowLookup makes each lookup take 10 s of the injected clock and answer Unknown.
type slowLookup struct {
	*fake.PSP
	advance func(time.Duration)
}

func (s slowLookup) Lookup(ctx context.Context, id string) (psp.Charge, error) {
	s.advance(10 * time.Second)
	return psp.Charge{}, &psp.Error{Class: psp.Unknown, Op: "lookup", Err: context.DeadlineExceeded}
}

// With slow lookups, keys claimed by a pass must not wait out their leases
// in a queue and be claimed again by the same pass.
func TestSlowLookupsDoNotOutliveTheirLeases(t *testing.T) {
	e := newEnv(t)
	for i := range 24 {
		e.crash(fmt.Sprintf("k%02d", i), false)
		e.advance(time.Second)
	}
	e.advance(lease + time.Second)
	r := e.reconciler(slowLookup{e.psp, e.advance}, nil, func(c *reconcile.Config) {
		c.BatchSize, c.Concurrency, c.PSPTimeout, c.MaxAttempts = 4, 1, 10*time.Second, 100
		c.BackoffBase, c.BackoffMax = time.Hour, time.Hour
	})
	sum := runOnce(t, r)
	if len(sum.Results) != 24 || sum.Counts[reconcile.Retrying] != 24 {
		t.Fatalf("one pass over 24 keys: %d results, outcomes %v", len(sum.Results), sum.Counts)
	}
}
