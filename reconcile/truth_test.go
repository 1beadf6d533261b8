package reconcile_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"gateway/errs"
	"gateway/idemkeys"
	"gateway/payments"
	"gateway/psp"
	"gateway/psp/fake"
	"gateway/reconcile"
)

// The tests of this file hold the gateway to its word when an assumption
// breaks: a replica's clock is wrong, the database lost a write, the PSP
// holds state this database did not make, a row cannot be read. In each, a
// final answer that could be wrong must become "I don't know".

// skewed is a replica's clock off the others' by d.
func (e *env) skewed(d time.Duration) func() time.Time {
	return func() time.Time { return e.clock.Now().Add(d) }
}

// A replica whose clock is far ahead or behind never takes over a live
// lease, neither as a retry nor as the reconciler, and never settles a
// charge in flight as failed.
func TestSkewedReplicaNeverTakesALiveLease(t *testing.T) {
	for _, skew := range []time.Duration{150 * time.Second, -150 * time.Second, 25 * time.Second} {
		t.Run(skew.String(), func(t *testing.T) {
			e := newEnv(t)
			arrived, release := make(chan struct{}), make(chan struct{})
			e.psp.SetChargeHook(func(ctx context.Context, req psp.ChargeRequest) {
				close(arrived)
				<-release
			})
			live := make(chan error, 1)
			go func() {
				_, err := e.svc.Create(context.Background(), e.request("k"))
				live <- err
			}()
			<-arrived // the first replica is charging, well within its lease

			other := payments.NewService(e.store, payments.OnePSP(e.psp), payments.Config{
				Lease: lease, PSPTimeout: 5 * time.Second, InFlightWait: 50 * time.Millisecond, Now: e.skewed(skew),
			})
			if _, err := other.Create(context.Background(), e.request("k")); errs.CodeOf(err) != errs.CodeInFlight {
				t.Fatalf("skewed replica's retry: %v, want 409 in flight", err)
			}
			r := e.reconciler(nil, nil, func(c *reconcile.Config) { c.Now = e.skewed(skew) })
			wantOutcomes(t, runOnce(t, r), nil)

			close(release)
			if err := <-live; err != nil {
				t.Fatalf("live request: %v", err)
			}
			if e.psp.ChargeCalls() != 1 || e.psp.LookupCalls() != 0 {
				t.Fatalf("%d charge calls, %d lookups: someone took the live lease", e.psp.ChargeCalls(), e.psp.LookupCalls())
			}
			if n := e.count(`SELECT COUNT(*) FROM payments WHERE status = 'succeeded'`); n != 1 {
				t.Fatal("the charged payment is not succeeded")
			}
		})
	}
}

// A key written before may_send_until existed says nothing about when its
// last charge could have left: it is never settled failed from the missing
// value, however long it waits; it ends in review.
func TestUnknownChargeWindowNeverFails(t *testing.T) {
	e := newEnv(t)
	p := e.crash("legacy", false)
	if _, err := e.db.Exec(`UPDATE idempotency_keys SET may_send_until = NULL`); err != nil {
		t.Fatal(err)
	}
	r := e.reconciler(nil, nil) // MaxAttempts 3
	for pass := range 3 {
		e.advance(24 * time.Hour)
		for _, res := range runOnce(t, r).Results {
			if res.Outcome == reconcile.Failed || res.Outcome == reconcile.Deferred {
				t.Fatalf("pass %d: %s from an unknown charge window", pass+1, res.Outcome)
			}
		}
	}
	if s := e.status(p.ID); s != payments.RequiresReview {
		t.Fatalf("legacy key ended %s, want requires_review", s)
	}
}

// A lease taken over and then lost with a database write (a failover that
// dropped the acknowledged takeover) is never handed out again: the next
// taker gets another token, and the first holder's writes are refused.
func TestLostTakeoverTokenIsNeverReissued(t *testing.T) {
	e := newEnv(t)
	p := e.crash("k", true)
	e.advance(lease + time.Second)
	ctx := context.Background()
	ref := idemkeys.Ref{MerchantID: e.merch.ID, Endpoint: payments.EndpointCreatePayment, Key: "k"}
	before, err := e.store.Record(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	held, err := e.store.TakeOver(ctx, ref, before.Token, lease)
	if err != nil {
		t.Fatal(err)
	}
	// The database comes back from a replica that never saw the takeover.
	if _, err := e.db.Exec(`UPDATE idempotency_keys SET lease_version = ?, locked_until = NOW(6) - INTERVAL 1 SECOND`, int64(before.Token)); err != nil {
		t.Fatal(err)
	}
	again, err := e.store.TakeOver(ctx, ref, before.Token, lease)
	if err != nil {
		t.Fatal(err)
	}
	if again.Grant() != held.Grant() || again == held {
		t.Fatalf("tokens %x and %x: the same grant must differ", held, again)
	}
	p.Status = payments.Failed
	if err := e.store.Settle(ctx, ref, held, payments.PaymentSettled(p)); !errors.Is(err, idemkeys.ErrFenced) {
		t.Fatalf("the lost grant's holder wrote: %v", err)
	}
	if s := e.status(p.ID); s != payments.Processing {
		t.Fatalf("payment %s", s)
	}
}

// The PSP holds 500 for this key's order id (its gateway row was lost in a
// restore); a 1000 request with the key must not be answered "retry" and
// then recorded succeeded for 1000: it goes to review with the reason.
func TestForeignChargeUnderOurOrderIDGoesToReview(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.psp.Charge(ctx, psp.ChargeRequest{MerchantOrderID: payments.MerchantOrderID(e.merch.ID, "k"),
		Amount: 500, Currency: "KRW", PaymentMethod: fake.MethodOK}); err != nil {
		t.Fatal(err)
	}
	out, err := e.svc.Create(ctx, e.request("k"))
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if out.Response.Status != http.StatusAccepted || !strings.Contains(string(out.Response.Body), `"status":"requires_review"`) {
		t.Fatalf("answer %d %s, want 202 requires_review", out.Response.Status, out.Response.Body)
	}
	again, err := e.svc.Create(ctx, e.request("k"))
	if err != nil || !again.Replayed || again.Response.Status != http.StatusAccepted {
		t.Fatalf("retry: %+v %v", again, err)
	}
	var reason string
	if err := e.db.Get(&reason, `SELECT review_reason FROM payments`); err != nil || !strings.Contains(reason, "order id") {
		t.Fatalf("review reason %q (%v)", reason, err)
	}
	if e.psp.ChargeCount() != 1 {
		t.Fatalf("%d charges at the PSP", e.psp.ChargeCount())
	}
}

// The same foreign charge found by a lookup, on a retry's resume or by the
// reconciler, is not believed either.
func TestMismatchedLookupGoesToReview(t *testing.T) {
	for _, via := range []string{"retry", "reconciler"} {
		t.Run(via, func(t *testing.T) {
			e := newEnv(t)
			p := e.crash("k", false)
			if _, err := e.psp.Charge(context.Background(), psp.ChargeRequest{MerchantOrderID: p.MerchantOrderID,
				Amount: 500, Currency: "KRW", PaymentMethod: fake.MethodOK}); err != nil {
				t.Fatal(err)
			}
			e.advance(lease + time.Second)
			if via == "retry" {
				out, err := e.svc.Create(context.Background(), e.request("k"))
				if err != nil || out.Response.Status != http.StatusAccepted {
					t.Fatalf("retry: %+v %v", out, err)
				}
			} else {
				wantOutcomes(t, runOnce(t, e.reconciler(nil, nil)), map[reconcile.Outcome]int{reconcile.Review: 1})
			}
			if s := e.status(p.ID); s != payments.RequiresReview {
				t.Fatalf("payment %s after a lookup of 500 KRW for a 1000 KRW payment", s)
			}
			if e.psp.ChargeCalls() != 1 {
				t.Fatalf("%d charge calls", e.psp.ChargeCalls())
			}
		})
	}
}

// renamed is an adapter that calls itself something else: another PSP.
type renamed struct {
	psp.Adapter
	name string
}

func (r renamed) Capabilities() psp.Capabilities {
	c := r.Adapter.Capabilities()
	c.Name = r.name
	return c
}

// A payment is asked about only at the PSP it was sent to. A replica where
// that PSP is not configured leaves it alone, however long it waits, and
// says so; it never settles it from another PSP's "not found".
func TestPaymentsOfAnUnconfiguredPSPAreLeftAlone(t *testing.T) {
	e := newEnv(t)
	p := e.crash("k", true)
	other := renamed{e.psp, "other"}
	e.advance(lease + time.Second)
	r := e.reconciler(other, nil)
	for range 3 {
		sum := runOnce(t, r)
		wantOutcomes(t, sum, map[reconcile.Outcome]int{reconcile.Unconfigured: 1})
		e.advance(time.Hour)
	}
	if s := e.status(p.ID); s != payments.Processing || e.psp.LookupCalls() != 0 {
		t.Fatalf("payment %s after %d lookups at another PSP", s, e.psp.LookupCalls())
	}
	svc := payments.NewService(e.store, payments.OnePSP(other), payments.Config{
		Lease: lease, PSPTimeout: 5 * time.Second, InFlightWait: 50 * time.Millisecond, Now: e.clock.Now,
	})
	_, err := svc.Create(context.Background(), e.request("k"))
	var pe *errs.Error
	if !errors.As(err, &pe) || pe.Code != errs.CodeUnavailable || pe.PaymentID != p.ID {
		t.Fatalf("retry on a replica without the payment's PSP: %v", err)
	}
	// The replica that has it settles it.
	wantOutcomes(t, runOnce(t, e.reconciler(nil, nil)), map[reconcile.Outcome]int{reconcile.Succeeded: 1})
}

// requires_review is not the end: the review queue keeps asking, and
// settles the payment when the PSP answers with authority, recording why.
func TestReviewQueueHeals(t *testing.T) {
	t.Run("charged", func(t *testing.T) {
		e := newEnv(t)
		p := e.crash("k", true)
		e.psp.FailNextLookups(1)
		e.advance(lease + time.Second)
		wantOutcomes(t, runOnce(t, e.reconciler(nil, nil, func(c *reconcile.Config) { c.MaxAttempts = 1 })),
			map[reconcile.Outcome]int{reconcile.Review: 1})
		r := e.reconciler(nil, nil)
		wantOutcomes(t, runOnce(t, r), nil) // not looked at again at once
		e.advance(payments.ReviewFirstLook + time.Second)
		sum := runOnce(t, r)
		wantOutcomes(t, sum, map[reconcile.Outcome]int{reconcile.Succeeded: 1})
		if !sum.Results[0].InReview || sum.NeedsReview != 0 {
			t.Fatalf("summary %+v", sum)
		}
		if s := e.status(p.ID); s != payments.Succeeded {
			t.Fatalf("payment %s", s)
		}
		if n := e.count(`SELECT COUNT(*) FROM payment_resolutions WHERE actor = 'reconciler' AND from_status = 'requires_review' AND to_status = 'succeeded'`); n != 1 {
			t.Fatal("no audit row for the review queue's decision")
		}
		out, err := e.svc.Create(context.Background(), e.request("k"))
		if err != nil || out.Response.Status != http.StatusCreated {
			t.Fatalf("replay after healing: %+v %v", out, err)
		}
	})
	t.Run("never charged", func(t *testing.T) {
		e := newEnv(t)
		p := e.crash("k", false)
		e.psp.FailNextLookups(1)
		e.advance(lease + time.Second)
		wantOutcomes(t, runOnce(t, e.reconciler(nil, nil, func(c *reconcile.Config) { c.MaxAttempts = 1 })),
			map[reconcile.Outcome]int{reconcile.Review: 1})
		r := e.reconciler(nil, nil)
		for i, step := range []struct {
			wait time.Duration
			want reconcile.Outcome
		}{
			{payments.ReviewFirstLook + time.Second, reconcile.StillInReview}, // the first proof
			{creationWindow / 2, ""},               // the second is not due
			{creationWindow / 2, reconcile.Failed}, // the second proof
		} {
			e.advance(step.wait)
			want := step.want
			sum := runOnce(t, r)
			if want == "" && len(sum.Results) == 0 {
				continue
			}
			if len(sum.Results) != 1 || sum.Results[0].Outcome != want {
				t.Fatalf("look %d: %+v, want %s", i+1, sum.Results, want)
			}
		}
		if s := e.status(p.ID); s != payments.Failed {
			t.Fatalf("payment %s", s)
		}
		if e.psp.ChargeCalls() != 0 {
			t.Fatal("the review queue charged")
		}
	})
	t.Run("a person's decision wins the race", func(t *testing.T) {
		e := newEnv(t)
		p := e.crash("k", true)
		e.psp.FailNextLookups(1)
		e.advance(lease + time.Second)
		runOnce(t, e.reconciler(nil, nil, func(c *reconcile.Config) { c.MaxAttempts = 1 }))
		if _, err := e.admin().Resolve(context.Background(), payments.Resolution{PaymentID: p.ID, To: payments.Succeeded,
			Reason: "checked", Actor: "ops"}); err != nil {
			t.Fatal(err)
		}
		e.advance(payments.ReviewFirstLook + time.Second)
		wantOutcomes(t, runOnce(t, e.reconciler(nil, nil)), nil)
		if n := e.count(`SELECT COUNT(*) FROM payment_resolutions`); n != 1 {
			t.Fatalf("%d decisions recorded", n)
		}
	})
}

// Every send of the key certainly did nothing (the PSP said "not
// processed"): the key fails without waiting for the PSP's word.
func TestEverySendRefusedFailsWithoutALookup(t *testing.T) {
	e := newEnv(t)
	e.psp.FailNextCharges(fake.FaultNotProcessed, 1)
	if _, err := e.svc.Create(context.Background(), e.request("k")); errs.CodeOf(err) != errs.CodePSPUnavailable {
		t.Fatalf("create: %v", err)
	}
	if n := e.count(`SELECT COUNT(*) FROM idempotency_keys WHERE send_attempts = 1 AND sends_not_sent = 1`); n != 1 {
		t.Fatal("the refused send was not counted")
	}
	e.advance(lease + time.Second)
	wantOutcomes(t, runOnce(t, e.reconciler(nil, nil)), map[reconcile.Outcome]int{reconcile.Failed: 1})
	if e.psp.LookupCalls() != 0 || e.psp.ChargeCount() != 0 {
		t.Fatalf("%d lookups, %d charges", e.psp.LookupCalls(), e.psp.ChargeCount())
	}
}

// One unreadable row (a key whose payment is missing, a payment whose
// metadata cannot be decoded) is set aside and counted; it never stops the
// pass, the other keys, or the purge.
func TestUnreadableRowsAreQuarantined(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.svc.Create(ctx, e.request("old")); err != nil {
		t.Fatal(err)
	}
	orphan := e.crash("orphan", false)
	garbled := e.crash("garbled", false)
	e.crash("fine", true)
	if _, err := e.db.Exec(`DELETE FROM payments WHERE id = ?`, orphan.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.db.Exec(`UPDATE payments SET metadata = '{not json' WHERE id = ?`, garbled.ID); err != nil {
		t.Fatal(err)
	}
	e.advance(8 * 24 * time.Hour)
	r := e.reconciler(nil, nil)
	sum, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatalf("the pass stopped: %v", err)
	}
	wantOutcomes(t, sum, map[reconcile.Outcome]int{reconcile.Quarantined: 2, reconcile.Succeeded: 1})
	if sum.Purged != 1 || sum.Backlog.Quarantined != 2 {
		t.Fatalf("purged %d, quarantined %d", sum.Purged, sum.Backlog.Quarantined)
	}
	wantOutcomes(t, runOnce(t, r), nil) // set aside: not claimed again
}

// An operator's decision is checked against the PSP's own answer.
func TestResolveAsksThePSP(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	review := func(key string, charged bool) payments.Payment {
		p := e.crash(key, charged)
		if _, err := e.db.Exec(`UPDATE payments SET status = 'requires_review', review_since = NOW(6), review_after = NOW(6) + INTERVAL 1 HOUR WHERE id = ?`, p.ID); err != nil {
			t.Fatal(err)
		}
		return p
	}
	charged, none := review("charged", true), review("none", false)
	if _, err := e.admin().Resolve(ctx, payments.Resolution{PaymentID: charged.ID, To: payments.Failed, Reason: "looks failed", Actor: "ops"}); errs.CodeOf(err) != errs.CodeConflict {
		t.Fatalf("failed while the PSP holds the charge: %v", err)
	}
	if _, err := e.admin().Resolve(ctx, payments.Resolution{PaymentID: none.ID, To: payments.Succeeded, Reason: "looks paid", Actor: "ops"}); errs.CodeOf(err) != errs.CodeConflict {
		t.Fatalf("succeeded while the PSP authoritatively has none: %v", err)
	}
	got, err := e.admin().Resolve(ctx, payments.Resolution{PaymentID: charged.ID, To: payments.Succeeded, Reason: "the PSP has it", Actor: "ops"})
	if err != nil || got.Status != payments.Succeeded || got.PSPReference == "" {
		t.Fatalf("agreeing decision: %+v %v", got, err)
	}
	if _, err := e.admin().Resolve(ctx, payments.Resolution{PaymentID: none.ID, To: payments.Failed, Reason: "the PSP has none", Actor: "ops"}); err != nil {
		t.Fatal(err)
	}
	// An audited correction of an earlier decision needs --force.
	if _, err := e.admin().Resolve(ctx, payments.Resolution{PaymentID: none.ID, To: payments.Succeeded, Reason: "paid by bank transfer", Actor: "ops"}); errs.CodeOf(err) != errs.CodeConflict {
		t.Fatalf("unforced correction: %v", err)
	}
	if _, err := e.admin().Resolve(ctx, payments.Resolution{PaymentID: none.ID, To: payments.Succeeded, Reason: "paid by bank transfer", Actor: "ops", Force: true}); err != nil {
		t.Fatalf("forced correction: %v", err)
	}
	if n := e.count(`SELECT COUNT(*) FROM payment_resolutions WHERE payment_id = ? AND from_status = 'failed' AND to_status = 'succeeded'`, none.ID); n != 1 {
		t.Fatal("the correction is not in the audit trail")
	}
}

// A replica shutting down sends no charge that has not left yet: it gives
// the key back, counted as a send that never happened.
func TestDrainingReplicaSendsNothingNew(t *testing.T) {
	e := newEnv(t)
	e.svc.Drain()
	if _, err := e.svc.Create(context.Background(), e.request("k")); errs.CodeOf(err) != errs.CodePSPUnavailable {
		t.Fatalf("create while draining: %v", err)
	}
	if e.psp.ChargeCalls() != 0 {
		t.Fatal("a draining replica charged")
	}
	if n := e.count(`SELECT COUNT(*) FROM idempotency_keys WHERE state = 'IN_PROGRESS' AND sends_not_sent = send_attempts AND locked_until <= NOW(6)`); n != 1 {
		t.Fatal("the key was not given back as unsent")
	}
}

// A replica whose gate is closed (its clock strays) takes no payment and
// stores nothing; stored answers are still replayed.
func TestClosedGateTakesNoPayment(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if _, err := e.svc.Create(ctx, e.request("done")); err != nil {
		t.Fatal(err)
	}
	closed := payments.NewService(e.store, payments.OnePSP(e.psp), payments.Config{
		Lease: lease, PSPTimeout: 5 * time.Second, InFlightWait: 50 * time.Millisecond, Now: e.clock.Now,
		Gate: func() error { return errors.New("clock 2 s off") },
	})
	if _, err := closed.Create(ctx, e.request("new")); errs.CodeOf(err) != errs.CodeUnavailable {
		t.Fatalf("create behind a closed gate: %v", err)
	}
	if n := e.count(`SELECT COUNT(*) FROM idempotency_keys WHERE idem_key = 'new'`); n != 0 {
		t.Fatal("a closed gate stored a key")
	}
	out, err := closed.Create(ctx, e.request("done"))
	if err != nil || !out.Replayed {
		t.Fatalf("replay behind a closed gate: %+v %v", out, err)
	}
	r := e.reconciler(nil, nil, func(c *reconcile.Config) { c.Gate = func() error { return errors.New("clock off") } })
	if _, err := r.RunOnce(ctx); err == nil {
		t.Fatal("a reconciler behind a closed gate ran")
	}
}
