package payments

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"gateway/idemkeys"
	"gateway/psp/fake"
)

// stuckStore is a FlowStore whose key is always in progress with an expired
// lease that somebody else always takes over first.
type stuckStore struct {
	FlowStore
	takeovers atomic.Int32
}

func (s *stuckStore) Claim(context.Context, Claim) (time.Time, error) {
	return time.Now(), idemkeys.ErrExists
}

func (s *stuckStore) Record(_ context.Context, ref idemkeys.Ref) (idemkeys.Record, error) {
	now := time.Now()
	return idemkeys.Record{Ref: ref, Fingerprint: fp, State: idemkeys.InProgress, PaymentID: "pay_1",
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
	if ErrorCode(err) != CodeInFlight {
		t.Fatalf("err %v, want 409 in flight", err)
	}
	// 10, 20, 40, 80, 160, 320 ms: about seven looks in half a second.
	if n := st.takeovers.Load(); n > 10 {
		t.Fatalf("%d takeover attempts in 0.5 s", n)
	}
}
