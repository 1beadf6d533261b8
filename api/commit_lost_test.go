package api_test

import (
	"context"
	"fmt"
	"net/http"
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
)

// lostAck commits through the real store, then reports the commit's fate as
// unknown, as a connection that breaks between COMMIT and its answer would.
type lostAck struct {
	payments.FlowStore
	claims, settles atomic.Int32 // how many acknowledgements to lose
	dropped         atomic.Int32 // how many claims to fail with an unknown fate without committing
}

func (s *lostAck) Claim(ctx context.Context, c payments.Claim) error {
	if s.dropped.Add(-1) >= 0 {
		return errs.ErrWriteUnknown
	}
	err := s.FlowStore.Claim(ctx, c)
	if err == nil && s.claims.Add(-1) >= 0 {
		return errs.ErrWriteUnknown
	}
	return err
}

func (s *lostAck) Settle(ctx context.Context, ref idemkeys.Ref, token idemkeys.Token, c payments.PaymentChange) error {
	err := s.FlowStore.Settle(ctx, ref, token, c)
	if err == nil && s.settles.Add(-1) >= 0 {
		return errs.ErrWriteUnknown
	}
	return err
}

// A commit whose acknowledgement is lost is re-read, never blindly redone:
// the request finishes with one payment and one charge.
func TestCommitAcknowledgementLost(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		claims, settles, dropped int32
	}{
		{"claim committed", 1, 0, 0},
		{"claim not committed", 0, 0, 1},
		{"settle committed", 0, 1, 0},
		{"all", 1, 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lossy := &lostAck{}
			lossy.claims.Store(tc.claims)
			lossy.settles.Store(tc.settles)
			lossy.dropped.Store(tc.dropped)
			e := newEnv(t, func(s *envSetup) {
				s.wrap = func(st payments.FlowStore) payments.FlowStore { lossy.FlowStore = st; return lossy }
			})
			res := e.post("k", okBody)
			wantStatus(t, res, http.StatusCreated)
			if res.header.Get("Idempotent-Replayed") != "" {
				t.Fatal("the request's own commit was answered as a replay")
			}
			e.wantCounts(counts{payments: 1, keys: 1, completed: 1, charges: 1, chargeCalls: 1})
			if lossy.claims.Load() > 0 || lossy.settles.Load() > 0 || lossy.dropped.Load() > 0 {
				t.Fatal("the lost acknowledgement was not exercised")
			}
		})
	}
}

// deadAfterCharge loses the settle's acknowledgement and then the database
// altogether: the key cannot even be re-read.
type deadAfterCharge struct {
	payments.FlowStore
	down atomic.Bool
}

var errConnLost = fmt.Errorf("Store.Settle: %w: %w", errs.ErrWriteUnknown, mysql.ErrConnLost)

func (s *deadAfterCharge) Settle(ctx context.Context, ref idemkeys.Ref, token idemkeys.Token, c payments.PaymentChange) error {
	if s.down.Load() {
		return errConnLost
	}
	return s.FlowStore.Settle(ctx, ref, token, c)
}

func (s *deadAfterCharge) Record(ctx context.Context, ref idemkeys.Ref) (idemkeys.Record, error) {
	if s.down.Load() {
		return idemkeys.Record{}, fmt.Errorf("Store.Record: %w", mysql.ErrConnLost)
	}
	return s.FlowStore.Record(ctx, ref)
}

// A connection lost during the fenced settle, with the database gone for
// the re-read too, is a 503 with Retry-After, never a 500; the retry, once
// the database is back, learns the outcome with no second charge.
func TestSettleLostWithTheDatabaseAnswers503(t *testing.T) {
	dead := &deadAfterCharge{}
	e := newEnv(t, func(s *envSetup) {
		s.wrap = func(st payments.FlowStore) payments.FlowStore { dead.FlowStore = st; return dead }
	})
	e.psp.SetChargeHookAfter(func(context.Context, psp.ChargeRequest, psp.Charge) { dead.down.Store(true) })
	res := e.post("k", okBody)
	wantProblem(t, res, http.StatusServiceUnavailable, "service-unavailable")
	if res.header.Get("Retry-After") == "" {
		t.Fatal("503 without Retry-After")
	}
	dead.down.Store(false)
	e.psp.SetChargeHookAfter(nil)
	e.advance(31 * time.Second) // the lease the dead database could not release
	wantStatus(t, e.post("k", okBody), http.StatusCreated)
	e.wantCounts(counts{payments: 1, keys: 1, completed: 1, charges: 1, chargeCalls: 1})
}

// takeoverRace makes two retries both see an expired lease before either
// takes it over (a barrier on their reads), and tells when both have tried.
type takeoverRace struct {
	payments.FlowStore
	armed  atomic.Bool
	reads  sync.WaitGroup
	tries  atomic.Int32
	second chan struct{}
}

func (s *takeoverRace) Record(ctx context.Context, ref idemkeys.Ref) (idemkeys.Record, error) {
	rec, err := s.FlowStore.Record(ctx, ref)
	if s.armed.Load() && err == nil && rec.State == idemkeys.InProgress && !rec.LeaseActive() {
		s.reads.Done()
		s.reads.Wait()
	}
	return rec, err
}

func (s *takeoverRace) TakeOver(ctx context.Context, ref idemkeys.Ref, seen idemkeys.Token, lease time.Duration) (idemkeys.Token, error) {
	tok, err := s.FlowStore.TakeOver(ctx, ref, seen, lease)
	if s.tries.Add(1) == 2 {
		close(s.second)
	}
	return tok, err
}

// Two retries race to take an expired key over: the one that loses waits
// for the winner and is woken when it finishes, getting its answer rather
// than a 409 once its wait runs out.
func TestLoserOfATakeoverIsWokenByTheWinner(t *testing.T) {
	race := &takeoverRace{second: make(chan struct{})}
	e := newEnv(t, func(s *envSetup) {
		s.wrap = func(st payments.FlowStore) payments.FlowStore { race.FlowStore = st; return race }
	})
	e.psp.FailNextCharges(fake.FaultUnknownBeforeCharge, 1)
	wantStatus(t, e.post("k", okBody), http.StatusBadGateway) // the lease is given back
	race.reads.Add(2)
	race.armed.Store(true)
	// The winner's charge waits until the loser has lost its takeover.
	e.psp.SetChargeHook(func(context.Context, psp.ChargeRequest) { <-race.second })
	answers := make(chan response, 2)
	for range 2 {
		go func() { answers <- e.post("k", okBody) }()
	}
	for range 2 {
		res := <-answers
		if res.status != http.StatusCreated {
			t.Fatalf("a retry answered %d %s, want the winner's 201", res.status, res.body)
		}
	}
	e.wantCounts(counts{payments: 1, keys: 1, completed: 1, charges: 1, chargeCalls: 2})
}
