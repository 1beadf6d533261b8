package payments

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gateway/errs"
	"gateway/idemkeys"
	"gateway/psp/fake"
)

// stuckStore is a FlowStore whose key is always in progress with an expired
// lease that somebody else always takes over first.
type stuckStore struct {
	FlowStore
	takeovers atomic.Int32
}

func (s *stuckStore) Now(context.Context) (time.Time, error) { return time.Now(), nil }

func (s *stuckStore) Claim(context.Context, Claim) error { return idemkeys.ErrExists }

func (s *stuckStore) Record(_ context.Context, ref idemkeys.Ref) (idemkeys.Record, error) {
	now := time.Now()
	return idemkeys.Record{Ref: ref, Fingerprint: fp, State: idemkeys.InProgress, SubjectID: "pay_1",
		Token: idemkeys.FirstToken(), LockedUntil: now.Add(-time.Second), DBNow: now}, nil
}

func (s *stuckStore) Payment(context.Context, string, string) (Payment, error) {
	return Payment{ID: "pay_1", PSP: "fake"}, nil
}

func (s *stuckStore) TakeOver(context.Context, idemkeys.Ref, idemkeys.Token, time.Duration) (idemkeys.Token, error) {
	s.takeovers.Add(1)
	return 0, idemkeys.ErrFenced
}

var fp = CreateRequest{Amount: Money{Minor: 1000, Currency: "KRW"}, PaymentMethod: "pm_card_ok"}.Fingerprint()

// A duplicate whose takeover is refused (another worker moved first) waits
// and looks again with a growing pause, instead of spinning on the database.
func TestJoinBacksOffAfterARefusedTakeover(t *testing.T) {
	st := &stuckStore{}
	svc := NewService(st, OnePSP(fake.New()), Config{InFlightWait: 500 * time.Millisecond})
	_, err := svc.Create(context.Background(), CreateRequest{MerchantID: "m", IdempotencyKey: "k",
		Amount: Money{Minor: 1000, Currency: "KRW"}, PaymentMethod: "pm_card_ok"})
	if errs.CodeOf(err) != errs.CodeInFlight {
		t.Fatalf("err %v, want 409 in flight", err)
	}
	// 10, 20, 40, 80, 160, 320 ms: about seven looks in half a second.
	if n := st.takeovers.Load(); n > 10 {
		t.Fatalf("%d takeover attempts in 0.5 s", n)
	}
}

// lostRace is a FlowStore whose key's lease has just expired and whose
// takeover another worker of this process wins; once told, it answers the
// key completed.
type lostRace struct {
	FlowStore
	done      atomic.Bool
	takenOver chan struct{}
	once      sync.Once
}

func (s *lostRace) Now(context.Context) (time.Time, error) { return time.Now(), nil }

func (s *lostRace) Claim(context.Context, Claim) error { return idemkeys.ErrExists }

func (s *lostRace) Record(_ context.Context, ref idemkeys.Ref) (idemkeys.Record, error) {
	now := time.Now()
	if s.done.Load() {
		return idemkeys.Record{Ref: ref, Fingerprint: fp, State: idemkeys.Completed, SubjectID: "pay_1", DBNow: now, CompletedAt: now,
			Response: idemkeys.Response{Status: 201, Body: []byte(`{"id":"pay_1"}`)}}, nil
	}
	return idemkeys.Record{Ref: ref, Fingerprint: fp, State: idemkeys.InProgress, SubjectID: "pay_1",
		Token: idemkeys.FirstToken(), LockedUntil: now.Add(-time.Second), DBNow: now}, nil
}

func (s *lostRace) Payment(context.Context, string, string) (Payment, error) {
	return Payment{ID: "pay_1", PSP: "fake"}, nil
}

func (s *lostRace) TakeOver(context.Context, idemkeys.Ref, idemkeys.Token, time.Duration) (idemkeys.Token, error) {
	s.once.Do(func() { close(s.takenOver) })
	return 0, idemkeys.ErrFenced
}

// A duplicate that loses the takeover to a request of this process waits to
// be woken by it (no polling), so it must stay subscribed while it waits:
// the winner's finishing gives it the answer.
func TestLoserOfATakeoverStaysSubscribed(t *testing.T) {
	st := &lostRace{takenOver: make(chan struct{})}
	svc := NewService(st, OnePSP(fake.New()), Config{InFlightWait: 30 * time.Second})
	ref := idemkeys.Ref{MerchantID: "m", Endpoint: EndpointCreatePayment, Key: "k"}
	end := svc.waiter.Begin(ref) // the winner, working on the key here
	type answer struct {
		out Outcome
		err error
	}
	got := make(chan answer, 1)
	go func() {
		out, err := svc.Create(context.Background(), CreateRequest{MerchantID: "m", IdempotencyKey: "k",
			Amount: Money{Minor: 1000, Currency: "KRW"}, PaymentMethod: "pm_card_ok"})
		got <- answer{out, err}
	}()
	<-st.takenOver
	deadline := time.Now().Add(5 * time.Second)
	for svc.waiter.Len() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the loser waits for the winner without being subscribed to its finishing")
		}
		runtime.Gosched()
	}
	st.done.Store(true)
	end() // the winner settles and finishes
	a := <-got
	if a.err != nil || !a.out.Replayed || a.out.Response.Status != 201 {
		t.Fatalf("loser: %+v %v", a.out, a.err)
	}
}

// vanishing is a FlowStore whose key is always claimed by somebody whose
// record is gone when read (claims that roll back, conflicts on a cluster).
type vanishing struct {
	FlowStore
	claims atomic.Int32
}

func (s *vanishing) Now(context.Context) (time.Time, error) { return time.Now(), nil }

func (s *vanishing) Claim(context.Context, Claim) error {
	s.claims.Add(1)
	return idemkeys.ErrExists
}

func (s *vanishing) Record(context.Context, idemkeys.Ref) (idemkeys.Record, error) {
	return idemkeys.Record{}, idemkeys.ErrNotFound
}

// A key that vanishes under every claim is a 503 to retry with the same
// key, after a bounded number of claims: nothing of the request is stored.
func TestAKeyThatKeepsVanishingIsUnavailable(t *testing.T) {
	st := &vanishing{}
	svc := NewService(st, OnePSP(fake.New()), Config{})
	_, err := svc.Create(context.Background(), CreateRequest{MerchantID: "m", IdempotencyKey: "k",
		Amount: Money{Minor: 1000, Currency: "KRW"}, PaymentMethod: "pm_card_ok"})
	var e *errs.Error
	if !errors.As(err, &e) || e.Code != errs.CodeUnavailable || e.RetryAfter <= 0 {
		t.Fatalf("err %v, want 503 unavailable with Retry-After", err)
	}
	if n := st.claims.Load(); n != maxClaims {
		t.Fatalf("%d claims, want %d", n, maxClaims)
	}
}

// settledMeanwhile is a FlowStore whose void key is in progress with an
// expired lease when first read, and whose payment, read next, no longer
// holds the void: another worker settled it in between (the key completed
// with it), as the next read of the key shows.
type settledMeanwhile struct {
	FlowStore
	fp    [32]byte
	reads atomic.Int32
}

func (s *settledMeanwhile) Now(context.Context) (time.Time, error) { return time.Now(), nil }

func (s *settledMeanwhile) ClaimOperation(context.Context, OperationClaim, func(Payment, time.Time) (PaymentChange, error)) (Payment, error) {
	return Payment{}, idemkeys.ErrExists
}

func (s *settledMeanwhile) Record(_ context.Context, ref idemkeys.Ref) (idemkeys.Record, error) {
	now := time.Now()
	rec := idemkeys.Record{Ref: ref, Fingerprint: s.fp, State: idemkeys.InProgress, SubjectID: "pay_1",
		Token: idemkeys.FirstToken(), LockedUntil: now.Add(-time.Second), DBNow: now}
	if s.reads.Add(1) > 1 {
		rec.State, rec.CompletedAt, rec.LockedUntil = idemkeys.Completed, now, time.Time{}
		rec.Response = idemkeys.Response{Status: 200, Body: []byte(`{"id":"pay_1","status":"canceled"}`)}
	}
	return rec, nil
}

func (s *settledMeanwhile) Payment(context.Context, string, string) (Payment, error) {
	return Payment{ID: "pay_1", PSP: "fake", Status: Canceled}, nil
}

// A retry that finds a void's lease expired, while another worker settles
// that void, answers the settled void: the payment it reads no longer holds
// the void in flight, so it looks at the key again. Before, it answered 500.
func TestAnOperationSettledWhileItsKeyWasReadIsReplayed(t *testing.T) {
	req := CancelRequest{MerchantID: "m", PaymentID: "pay_1", IdempotencyKey: "v"}
	st := &settledMeanwhile{fp: req.Fingerprint()}
	svc := NewService(st, OnePSP(fake.New()), Config{InFlightWait: 500 * time.Millisecond})
	out, err := svc.Cancel(context.Background(), req)
	if err != nil || !out.Replayed || out.Response.Status != 200 {
		t.Fatalf("retry: %+v %v, want the settled void's 200 replayed", out, err)
	}
}
