package api_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gateway/api"
	"gateway/idemkeys"
	"gateway/merchants"
	"gateway/payments"
	"gateway/psp"
)

// recordReads counts the reads of a key's record the flow sends to the
// database: what a waiting duplicate costs.
type recordReads struct {
	payments.FlowStore
	n atomic.Int64
}

func (s *recordReads) Record(ctx context.Context, ref idemkeys.Ref) (idemkeys.Record, error) {
	s.n.Add(1)
	return s.FlowStore.Record(ctx, ref)
}

// waitEnds is told each time a duplicate stops waiting.
type waitEnds struct {
	payments.Observer
	ended chan time.Duration
}

func (w waitEnds) InFlightWaited(d time.Duration) { w.ended <- d }

type nopObserver struct{}

func (nopObserver) KeyOutcome(payments.KeyOutcome)          {}
func (nopObserver) InFlightWaited(time.Duration)            {}
func (nopObserver) LeaseTakenOver()                         {}
func (nopObserver) FencingRefused()                         {}
func (nopObserver) UnconfiguredPSP()                        {}
func (nopObserver) FailedOver(string, string)               {}
func (nopObserver) PaymentRecorded(payments.Status, string) {}
func (nopObserver) RefundRecorded(payments.RefundStatus)    {}

// Waiting for a payment in flight is cheap and ends with its client:
// duplicates on the replica running the payment are woken by it and never
// poll the database; a duplicate on another replica polls with back-off;
// and a duplicate whose client goes away stops waiting at once.
func TestWaitingForAPaymentInFlight(t *testing.T) {
	reads := &recordReads{}
	ends := waitEnds{Observer: nopObserver{}, ended: make(chan time.Duration, 64)}
	e := newEnv(t, func(s *envSetup) {
		s.wrap = func(st payments.FlowStore) payments.FlowStore { reads.FlowStore = st; return reads }
		s.cfg.Observer = ends
	})
	arrived, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e.psp.SetChargeHook(func(context.Context, psp.ChargeRequest) {
		once.Do(func() { close(arrived) })
		<-release
	})
	first := make(chan response, 1)
	go func() { first <- e.post("k", okBody) }()
	<-arrived // the payment is claimed and at the PSP

	// Twenty duplicates on the same replica.
	const dups = 20
	before := reads.n.Load()
	answers := make(chan response, dups)
	for range dups {
		go func() { answers <- e.post("k", okBody) }()
	}
	for reads.n.Load()-before < dups {
		time.Sleep(time.Millisecond) // until each has read the record once and started waiting
	}

	// A duplicate on another replica (its own service over the same database).
	other := recordReads{FlowStore: e.store}
	svc2 := payments.NewService(&other, payments.OnePSP(e.psp), payments.Config{Lease: 30 * time.Second,
		PSPTimeout: 5 * time.Second, InFlightWait: 10 * time.Second, Now: e.clock.Now, Observer: ends})
	replica2 := httptest.NewServer(api.NewHandler(svc2, merchants.NewAuth(e.store, merchants.AuthConfig{}), e.store, api.Options{}))
	defer replica2.Close()
	second := &env{t: t, srv: replica2, db: e.db, apiKey: e.apiKey}
	remote := make(chan response, 1)
	go func() { remote <- second.post("k", okBody) }()

	// A duplicate whose client gives up while waiting.
	ctx, cancel := context.WithCancel(context.Background())
	gone := make(chan error, 1)
	go func() {
		_, err := e.do(ctx, http.MethodPost, "/payments", e.apiKey, map[string]string{"Idempotency-Key": "k"}, okBody)
		gone <- err
	}()
	for reads.n.Load()-before < dups+1 {
		time.Sleep(time.Millisecond)
	}
	cancel()
	<-gone
	select {
	case d := <-ends.ended:
		t.Logf("the abandoned duplicate stopped waiting after %s", d.Round(time.Millisecond))
	case <-time.After(5 * time.Second): // only turns a hang into a failure
		t.Fatal("a duplicate kept waiting after its client went away")
	}

	// Hold the payment a while: a polling waiter would read the record again and again.
	time.Sleep(time.Second)
	close(release)
	wantStatus(t, <-first, http.StatusCreated)
	for range dups {
		res := <-answers
		if res.status != http.StatusCreated || res.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("duplicate: %d %s", res.status, res.body)
		}
	}
	wantStatus(t, <-remote, http.StatusCreated)
	local := reads.n.Load() - before
	t.Logf("record reads over ~1 s of waiting: %d by %d local duplicates (and the abandoned one), %d by the other replica's", local, dups, other.n.Load())
	if local > 2*(dups+1)+2 {
		t.Fatalf("%d record reads by %d duplicates on the paying replica: they poll instead of being woken", local, dups+1)
	}
	if n := other.n.Load(); n > 12 {
		t.Fatalf("the other replica's duplicate read the record %d times in about a second: no back-off", n)
	}
	e.wantCounts(counts{payments: 1, keys: 1, completed: 1, charges: 1, chargeCalls: 1})
}
