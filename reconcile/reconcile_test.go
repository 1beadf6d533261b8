package reconcile_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"gateway/errs"
	"gateway/idemkeys"
	"gateway/merchants"
	"gateway/mysql"
	"gateway/mysql/mysqltest"
	"gateway/payments"
	"gateway/psp"
	"gateway/psp/fake"
	"gateway/reconcile"
	"gateway/review"
)

func TestMain(m *testing.M) { mysqltest.Main(m) }

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

const (
	lease          = 30 * time.Second
	creationWindow = 2 * time.Minute
)

// env is a store, a fake PSP, a clock, the live payment service and a
// reconciler, all over one fresh database.
type env struct {
	t     *testing.T
	db    *sqlx.DB
	store *mysql.Store
	psp   *fake.PSP
	clock *clock
	svc   *payments.Service
	merch merchants.Merchant
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dbx := mysqltest.MustOpen(t)
	e := &env{
		t:     t,
		db:    dbx,
		store: mysql.NewStore(dbx),
		psp:   fake.New(fake.WithCreationWindow(creationWindow)),
		clock: &clock{now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)},
	}
	e.svc = payments.NewService(e.store, payments.OnePSP(e.psp), payments.Config{
		Lease: lease, PSPTimeout: 5 * time.Second, InFlightWait: 10 * time.Second, Now: e.clock.Now,
	})
	m, key, err := merchants.NewMerchant("Test merchant", e.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.CreateMerchant(context.Background(), m, key); err != nil {
		t.Fatal(err)
	}
	e.merch = m
	return e
}

func (e *env) reconciler(adapter psp.Adapter, st reconcile.Store, mod ...func(*reconcile.Config)) *reconcile.Reconciler {
	if adapter == nil {
		adapter = e.psp
	}
	if st == nil {
		st = e.store
	}
	cfg := reconcile.Config{
		Lease: lease, PSPTimeout: 5 * time.Second, MaxAttempts: 3,
		BackoffBase: time.Minute, BackoffMax: 10 * time.Minute, Now: e.clock.Now,
	}
	for _, m := range mod {
		m(&cfg)
	}
	return reconcile.New(st, payments.OnePSP(adapter), cfg)
}

// advance lets d pass: on the replicas' clock and on the database's.
func (e *env) advance(d time.Duration) {
	e.clock.Advance(d)
	mysqltest.Advance(e.t, e.db, d)
}

func (e *env) request(key string) payments.CreateRequest {
	return payments.CreateRequest{
		MerchantID: e.merch.ID, IdempotencyKey: key,
		Amount: payments.Money{Minor: 1000, Currency: "KRW"}, PaymentMethod: fake.MethodOK,
	}
}

// crash leaves what a worker that died right after the claim's commit
// leaves: the key IN_PROGRESS under a lease nobody renews. With charged, it
// died after the PSP charged and before it could record the charge.
func (e *env) crash(key string, charged bool) payments.Payment {
	e.t.Helper()
	req := e.request(key)
	p := payments.Payment{
		ID: "pay_" + key, MerchantID: e.merch.ID, IdempotencyKey: key,
		MerchantOrderID: payments.MerchantOrderID(e.merch.ID, key), Status: payments.Processing,
		Amount: req.Amount, PaymentMethod: req.PaymentMethod, PSP: payments.PSPName(e.psp.Capabilities()),
	}
	now, err := e.store.Now(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	c := payments.NewClaim(idemkeys.Ref{MerchantID: e.merch.ID, Endpoint: payments.EndpointCreatePayment, Key: key},
		req.Fingerprint(), idemkeys.FirstToken(), lease, p, now)
	if err := e.store.Claim(context.Background(), c); err != nil {
		e.t.Fatal(err)
	}
	p = c.Payment
	if charged {
		if _, err := e.psp.Charge(context.Background(), psp.ChargeRequest{
			MerchantOrderID: p.MerchantOrderID, Amount: p.Amount.Minor, Currency: p.Amount.Currency, PaymentMethod: p.PaymentMethod,
		}); err != nil {
			e.t.Fatal(err)
		}
	}
	return p
}

func (e *env) admin() *review.Admin {
	return review.New(e.store, review.Config{Now: e.clock.Now, PSPs: payments.OnePSP(e.psp)})
}

func (e *env) count(q string, args ...any) int {
	e.t.Helper()
	return mysqltest.Count(e.t, e.db, q, args...)
}

func (e *env) status(paymentID string) payments.Status {
	e.t.Helper()
	p, err := e.store.Payment(context.Background(), e.merch.ID, paymentID)
	if err != nil {
		e.t.Fatal(err)
	}
	return p.Status
}

func runOnce(t *testing.T, r *reconcile.Reconciler) reconcile.Summary {
	t.Helper()
	sum, err := r.RunOnce(context.Background())
	if err != nil {
		t.Fatalf("RunOnce: %v", err)
	}
	return sum
}

func wantOutcomes(t *testing.T, sum reconcile.Summary, want map[reconcile.Outcome]int) {
	t.Helper()
	for _, o := range reconcile.Outcomes {
		if sum.Counts[o] != want[o] {
			t.Fatalf("outcomes %v, want %v (results %+v)", sum.Counts, want, sum.Results)
		}
	}
}

// 1. charged, then the process died → one pass settles it succeeded; a
// retry replays that response; the ledger shows one charge.
func TestChargedButUnrecordedSettlesSucceeded(t *testing.T) {
	e := newEnv(t)
	p := e.crash("k", true)
	r := e.reconciler(nil, nil)

	wantOutcomes(t, runOnce(t, r), nil) // the lease is alive: not the reconciler's business yet
	e.advance(lease + time.Second)
	wantOutcomes(t, runOnce(t, r), map[reconcile.Outcome]int{reconcile.Succeeded: 1})
	if s := e.status(p.ID); s != payments.Succeeded {
		t.Fatalf("payment %s", s)
	}
	var stored []byte
	if err := e.db.Get(&stored, `SELECT response_body FROM idempotency_keys WHERE state = 'COMPLETED'`); err != nil {
		t.Fatal(err)
	}
	out, err := e.svc.Create(context.Background(), e.request("k"))
	if err != nil {
		t.Fatal(err)
	}
	if !out.Replayed || out.Response.Status != http.StatusCreated || !bytes.Equal(out.Response.Body, stored) {
		t.Fatalf("retry: %+v", out)
	}
	var v payments.View
	if err := json.Unmarshal(out.Response.Body, &v); err != nil || v.PSPReference == nil || *v.PSPReference != e.psp.Charges()[0].Reference {
		t.Fatalf("replayed body %s does not carry the PSP's charge", out.Response.Body)
	}
	if e.psp.ChargeCount() != 1 || e.psp.ChargeCalls() != 1 {
		t.Fatalf("ledger %d charges from %d calls, want 1 from 1", e.psp.ChargeCount(), e.psp.ChargeCalls())
	}
	wantOutcomes(t, runOnce(t, r), nil) // nothing left
}

// 2. never reached the PSP → failed only with proof: an authoritative "not
// found" once no charge can still appear, confirmed by a second one a
// creation window later; untouched before.
func TestNeverChargedFailsAfterCreationWindow(t *testing.T) {
	e := newEnv(t)
	p := e.crash("k", false)
	r := e.reconciler(nil, nil)
	e.advance(lease + time.Second)

	wantOutcomes(t, runOnce(t, r), map[reconcile.Outcome]int{reconcile.Deferred: 1})
	if s := e.status(p.ID); s != payments.Processing {
		t.Fatalf("deferred payment is %s", s)
	}
	if n := e.count(`SELECT COUNT(*) FROM idempotency_keys WHERE state = 'IN_PROGRESS' AND response_body IS NULL`); n != 1 {
		t.Fatal("deferred key was settled")
	}
	wantOutcomes(t, runOnce(t, r), nil) // not looked at again before the window ends

	e.advance(creationWindow)
	wantOutcomes(t, runOnce(t, r), map[reconcile.Outcome]int{reconcile.Deferred: 1}) // the first proof
	if s := e.status(p.ID); s != payments.Processing {
		t.Fatalf("payment %s after one not-found, want processing", s)
	}
	if n := e.count(`SELECT COUNT(*) FROM idempotency_keys WHERE not_found_at IS NOT NULL`); n != 1 {
		t.Fatal("the first authoritative not-found was not recorded")
	}
	wantOutcomes(t, runOnce(t, r), nil) // not looked at again before the second is due
	e.advance(creationWindow)
	wantOutcomes(t, runOnce(t, r), map[reconcile.Outcome]int{reconcile.Failed: 1})
	if s := e.status(p.ID); s != payments.Failed {
		t.Fatalf("payment %s, want failed", s)
	}
	if e.psp.LookupCalls() != 3 {
		t.Fatalf("%d lookups, want 3 (deferred, first proof, second proof)", e.psp.LookupCalls())
	}
	out, err := e.svc.Create(context.Background(), e.request("k"))
	if err != nil {
		t.Fatal(err)
	}
	if !out.Replayed || out.Response.Status != http.StatusPaymentRequired || !bytes.Contains(out.Response.Body, []byte(`"status":"failed"`)) {
		t.Fatalf("retry after failure: %d %s", out.Response.Status, out.Response.Body)
	}
	if e.psp.ChargeCalls() != 0 {
		t.Fatal("the reconciler or the replay charged")
	}
}

// A client retry during the deferral resumes at once: the reconciler does not hold the key.
func TestDeferredKeyStaysFreeForTheClient(t *testing.T) {
	e := newEnv(t)
	e.crash("k", false)
	e.advance(lease + time.Second)
	wantOutcomes(t, runOnce(t, e.reconciler(nil, nil)), map[reconcile.Outcome]int{reconcile.Deferred: 1})
	out, err := e.svc.Create(context.Background(), e.request("k"))
	if err != nil {
		t.Fatal(err)
	}
	if out.Replayed || out.Response.Status != http.StatusCreated || e.psp.ChargeCount() != 1 {
		t.Fatalf("client retry: %+v, %d charges", out, e.psp.ChargeCount())
	}
}

// 3. lookups failing → attempts count up with back-off and end in requires_review, never in a guess.
func TestFailingLookupsEndInReview(t *testing.T) {
	e := newEnv(t)
	p := e.crash("k", false)
	e.psp.FailNextLookups(100)
	r := e.reconciler(nil, nil) // MaxAttempts 3, back-off 1m, 2m
	e.advance(lease + time.Second)

	for attempt, backoff := range []time.Duration{time.Minute, 2 * time.Minute} {
		sum := runOnce(t, r)
		wantOutcomes(t, sum, map[reconcile.Outcome]int{reconcile.Retrying: 1})
		if got := sum.Results[0].Attempts; got != attempt+1 {
			t.Fatalf("attempts %d, want %d", got, attempt+1)
		}
		if n := e.count(`SELECT reconcile_attempts FROM idempotency_keys`); n != attempt+1 {
			t.Fatalf("stored attempts %d", n)
		}
		// The back-off is jittered by ±20 %: nothing before 0.8×, due by 1.2×.
		e.advance(backoff*8/10 - time.Second)
		wantOutcomes(t, runOnce(t, r), nil) // still backing off
		e.advance(backoff*4/10 + time.Second)
	}
	sum := runOnce(t, r)
	wantOutcomes(t, sum, map[reconcile.Outcome]int{reconcile.Review: 1})
	if sum.NeedsReview != 1 {
		t.Fatalf("NeedsReview %d", sum.NeedsReview)
	}
	if s := e.status(p.ID); s != payments.RequiresReview {
		t.Fatalf("payment %s, want requires_review", s)
	}
	if e.psp.LookupCalls() != 3 || e.psp.ChargeCalls() != 0 {
		t.Fatalf("%d lookups, %d charges; want 3 and 0", e.psp.LookupCalls(), e.psp.ChargeCalls())
	}
	wantOutcomes(t, runOnce(t, r), nil)
}

// 4. three reconcilers over 1,000 stale rows settle each exactly once.
func TestConcurrentReconcilersSettleEachRowOnce(t *testing.T) {
	e := newEnv(t)
	const n = 1000
	for i := range n {
		e.crash(fmt.Sprintf("k%04d", i), i%2 == 0)
	}
	e.advance(lease + creationWindow + time.Second)
	// The uncharged half needs its first proof first: one pass by one reconciler.
	first := runOnce(t, e.reconciler(nil, nil))
	wantOutcomes(t, first, map[reconcile.Outcome]int{reconcile.Succeeded: n / 2, reconcile.Deferred: n / 2})
	e.advance(creationWindow)
	var (
		start    = make(chan struct{})
		wg       sync.WaitGroup
		sums     [3]reconcile.Summary
		failures [3]error
	)
	for i := range sums {
		r := e.reconciler(nil, nil, func(c *reconcile.Config) { c.BatchSize = 50; c.Concurrency = 8 })
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			sums[i], failures[i] = r.RunOnce(context.Background())
		}()
	}
	close(start)
	wg.Wait()
	total := map[reconcile.Outcome]int{}
	seen := map[string]bool{}
	for i, s := range sums {
		if failures[i] != nil {
			t.Fatalf("reconciler %d: %v", i, failures[i])
		}
		for _, res := range s.Results {
			if seen[res.PaymentID] {
				t.Fatalf("payment %s settled twice", res.PaymentID)
			}
			seen[res.PaymentID] = true
			total[res.Outcome]++
		}
		t.Logf("reconciler %d settled %d rows", i, len(s.Results))
	}
	if total[reconcile.Failed] != n/2 || len(seen) != n/2 {
		t.Fatalf("outcomes %v over %d payments", total, len(seen))
	}
	if c := e.count(`SELECT COUNT(*) FROM idempotency_keys WHERE state = 'IN_PROGRESS'`); c != 0 {
		t.Fatalf("%d keys still in progress", c)
	}
	// Claim, first pass, second pass: no key was claimed more than once by a pass.
	if c := e.count(`SELECT COUNT(*) FROM idempotency_keys k JOIN payments p ON p.id = k.subject_id
WHERE (k.lease_version >> 32) != IF(p.status = 'succeeded', 2, 3)`); c != 0 {
		t.Fatalf("%d keys were claimed more than once in a pass", c)
	}
	if s, f := e.count(`SELECT COUNT(*) FROM payments WHERE status = 'succeeded'`), e.count(`SELECT COUNT(*) FROM payments WHERE status = 'failed'`); s != n/2 || f != n/2 {
		t.Fatalf("%d succeeded, %d failed", s, f)
	}
	if e.psp.ChargeCalls() != n/2 {
		t.Fatalf("%d charge calls: the reconciler charged", e.psp.ChargeCalls()-n/2)
	}
}

// blockingLookup stalls every Lookup until released, to hold the reconciler's lease.
type blockingLookup struct {
	psp.Adapter
	arrived chan struct{}
	release chan struct{}
	once    sync.Once
}

func (b *blockingLookup) Lookup(ctx context.Context, orderID string) (psp.Charge, error) {
	b.once.Do(func() { close(b.arrived) })
	<-b.release
	return b.Adapter.Lookup(ctx, orderID)
}

// 5. a live request that finishes while the reconciler holds a newer lease is
// refused by the token; the row ends consistent with the PSP.
func TestLiveWriterFencedByReconciler(t *testing.T) {
	e := newEnv(t)
	chargeArrived, chargeRelease, charged := make(chan struct{}), make(chan struct{}), make(chan struct{})
	e.psp.SetChargeHook(func(ctx context.Context, req psp.ChargeRequest) {
		close(chargeArrived)
		<-chargeRelease
	})
	e.psp.SetChargeHookAfter(func(ctx context.Context, req psp.ChargeRequest, c psp.Charge) { close(charged) })
	type created struct {
		out payments.Outcome
		err error
	}
	live := make(chan created, 1)
	go func() {
		out, err := e.svc.Create(context.Background(), e.request("k"))
		live <- created{out, err}
	}()
	<-chargeArrived
	e.advance(lease + time.Second) // the live worker's lease expires mid-call

	look := &blockingLookup{Adapter: e.psp, arrived: make(chan struct{}), release: make(chan struct{})}
	r := e.reconciler(look, nil)
	recDone := make(chan reconcile.Summary, 1)
	go func() { recDone <- runOnce(t, r) }()
	<-look.arrived // the reconciler holds lease version 2

	close(chargeRelease) // the live worker's charge goes through; its write is fenced
	<-charged
	close(look.release) // the reconciler finds the charge and settles
	sum := <-recDone
	wantOutcomes(t, sum, map[reconcile.Outcome]int{reconcile.Succeeded: 1})

	res := <-live
	if res.err != nil {
		t.Fatalf("live request: %v", res.err)
	}
	var stored []byte
	var grant int
	if err := e.db.QueryRow(`SELECT response_body, lease_version >> 32 FROM idempotency_keys WHERE state = 'COMPLETED'`).Scan(&stored, &grant); err != nil {
		t.Fatal(err)
	}
	if grant != 2 || !bytes.Equal(res.out.Response.Body, stored) || res.out.Response.Status != http.StatusCreated {
		t.Fatalf("live answer %d %s; stored by grant %d: %s", res.out.Response.Status, res.out.Response.Body, grant, stored)
	}
	if e.psp.ChargeCount() != 1 || e.count(`SELECT COUNT(*) FROM payments WHERE status = 'succeeded'`) != 1 {
		t.Fatal("row and ledger disagree")
	}
}

// countingStore counts purge batches.
type countingStore struct {
	reconcile.Store
	purges atomic.Int32
}

func (c *countingStore) PurgeKeys(ctx context.Context, retention time.Duration, after payments.PurgeCursor, limit int) (int64, payments.PurgeCursor, bool, error) {
	c.purges.Add(1)
	return c.Store.PurgeKeys(ctx, retention, after, limit)
}

// 6. purge removes only expired completed rows, in batches; a purged key's
// retry gets 409 naming the payment and no charge.
func TestPurgeExpiredKeys(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for i := range 25 {
		if _, err := e.svc.Create(ctx, e.request(fmt.Sprintf("old%02d", i))); err != nil {
			t.Fatal(err)
		}
	}
	e.advance(6 * 24 * time.Hour)
	for i := range 5 {
		if _, err := e.svc.Create(ctx, e.request(fmt.Sprintf("new%02d", i))); err != nil {
			t.Fatal(err)
		}
	}
	e.crash("unfinished", false)
	e.advance(24*time.Hour + time.Second) // the old ones are past 7 days, the new ones are not

	cs := &countingStore{Store: e.store}
	r := e.reconciler(nil, cs, func(c *reconcile.Config) { c.PurgeBatch = 10; c.Retention = 7 * 24 * time.Hour })
	purged, err := r.Purge(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if purged != 25 || cs.purges.Load() != 3 {
		t.Fatalf("purged %d in %d batches, want 25 in 3", purged, cs.purges.Load())
	}
	if n := e.count(`SELECT COUNT(*) FROM idempotency_keys WHERE idem_key LIKE 'new%'`); n != 5 {
		t.Fatalf("%d fresh keys left, want 5", n)
	}
	if n := e.count(`SELECT COUNT(*) FROM idempotency_keys WHERE state = 'IN_PROGRESS'`); n != 1 {
		t.Fatal("purge touched an unfinished key")
	}
	if n := e.count(`SELECT COUNT(*) FROM payments`); n != 31 {
		t.Fatalf("purge touched payments: %d", n)
	}
	charges := e.psp.ChargeCalls()
	_, err = e.svc.Create(ctx, e.request("old00"))
	var pe *errs.Error
	if !errors.As(err, &pe) || pe.Code != errs.CodeKeyReused || pe.PaymentID == "" {
		t.Fatalf("retry of a purged key: %v", err)
	}
	p, err := e.store.PaymentByKey(ctx, e.merch.ID, "old00")
	if err != nil || p.ID != pe.PaymentID {
		t.Fatalf("409 names %s, the key's payment is %s (%v)", pe.PaymentID, p.ID, err)
	}
	if e.psp.ChargeCalls() != charges {
		t.Fatal("the purged key's retry charged")
	}
}

// Ops resolve a payment in review; the key then replays the resolution, and the audit row records it.
func TestResolveReviewedPayment(t *testing.T) {
	e := newEnv(t)
	p := e.crash("k", false)
	e.psp.FailNextLookups(100)
	r := e.reconciler(nil, nil, func(c *reconcile.Config) { c.MaxAttempts = 1 })
	e.advance(lease + time.Second)
	wantOutcomes(t, runOnce(t, r), map[reconcile.Outcome]int{reconcile.Review: 1})
	ctx := context.Background()

	if _, err := e.admin().Resolve(ctx, payments.Resolution{PaymentID: p.ID, To: payments.Declined, Reason: "x", Actor: "ops"}); errs.CodeOf(err) != errs.CodeInvalid {
		t.Fatalf("resolve to declined: %v", err)
	}
	if _, err := e.admin().Resolve(ctx, payments.Resolution{PaymentID: "pay_nope", To: payments.Failed, Reason: "x", Actor: "ops"}); errs.CodeOf(err) != errs.CodeNotFound {
		t.Fatalf("resolve unknown: %v", err)
	}
	// The PSP cannot be asked (its lookups fail): only a forced decision is recorded.
	asked := payments.Resolution{PaymentID: p.ID, To: payments.Succeeded, PSPReference: "psp_123", Reason: "seen in the PSP dashboard", Actor: "alice"}
	if _, err := e.admin().Resolve(ctx, asked); errs.CodeOf(err) != errs.CodeConflict {
		t.Fatalf("unforced resolve while the PSP cannot answer: %v", err)
	}
	if s := e.status(p.ID); s != payments.RequiresReview {
		t.Fatalf("a refused resolve changed the payment to %s", s)
	}
	asked.Force = true
	got, err := e.admin().Resolve(ctx, asked)
	if err != nil || got.Status != payments.Succeeded {
		t.Fatalf("resolve: %+v %v", got, err)
	}
	if _, err := e.admin().Resolve(ctx, payments.Resolution{PaymentID: p.ID, To: payments.Failed, Reason: "again", Actor: "bob"}); errs.CodeOf(err) != errs.CodeConflict {
		t.Fatalf("second resolve: %v", err)
	}
	if n := e.count(`SELECT COUNT(*) FROM payment_resolutions WHERE payment_id = ? AND actor = 'alice' AND from_status = 'requires_review' AND to_status = 'succeeded' AND reason LIKE 'seen in the PSP dashboard [PSP: no authoritative answer%'`, p.ID); n != 1 {
		t.Fatal("no audit row with the PSP's answer")
	}
	out, err := e.svc.Create(ctx, e.request("k"))
	if err != nil {
		t.Fatal(err)
	}
	if out.Response.Status != http.StatusCreated || !bytes.Contains(out.Response.Body, []byte(`"psp_reference":"psp_123"`)) {
		t.Fatalf("replay after resolution: %d %s", out.Response.Status, out.Response.Body)
	}
}

// pacedStore purges fake batches of keys, each taking the next of took on
// the test's clock, the last one saying it was the last.
type pacedStore struct {
	reconcile.Store
	clock *clock
	took  []time.Duration
	calls int
}

func (p *pacedStore) PurgeKeys(_ context.Context, _ time.Duration, after payments.PurgeCursor, limit int) (int64, payments.PurgeCursor, bool, error) {
	p.clock.Advance(p.took[p.calls])
	p.calls++
	return int64(limit), after, p.calls == len(p.took), nil
}

// The purge rests after each batch but the last PurgeRest times as long as
// the batch took, and never less than PurgePause; a cancelled rest ends it.
func TestPurgeRestsInProportionToItsBatches(t *testing.T) {
	e := newEnv(t)
	took := []time.Duration{40 * time.Millisecond, 200 * time.Millisecond, 4 * time.Millisecond, time.Second, 10 * time.Millisecond}
	st := &pacedStore{Store: e.store, clock: e.clock, took: took}
	var rests []time.Duration
	r := e.reconciler(nil, st, func(c *reconcile.Config) {
		c.PurgeBatch, c.PurgeRest, c.PurgePause = 100, 0.25, 5*time.Millisecond
		c.PurgeSleep = func(_ context.Context, d time.Duration) error {
			rests = append(rests, d)
			return nil
		}
	})
	purged, err := r.Purge(context.Background())
	if err != nil || purged != 500 {
		t.Fatalf("purged %d, %v; want 500", purged, err)
	}
	want := []time.Duration{10 * time.Millisecond, 50 * time.Millisecond, 5 * time.Millisecond, 250 * time.Millisecond}
	if !slices.Equal(rests, want) {
		t.Fatalf("rests %v, want %v", rests, want)
	}

	// The default rest is DefaultPurgeRest of the batch's time.
	st = &pacedStore{Store: e.store, clock: e.clock, took: []time.Duration{time.Second, time.Second}}
	rests = nil
	r = e.reconciler(nil, st, func(c *reconcile.Config) {
		c.PurgeSleep = func(_ context.Context, d time.Duration) error {
			rests = append(rests, d)
			return nil
		}
	})
	if _, err := r.Purge(context.Background()); err != nil {
		t.Fatal(err)
	}
	if want := []time.Duration{time.Duration(reconcile.DefaultPurgeRest * float64(time.Second))}; !slices.Equal(rests, want) {
		t.Fatalf("default rests %v, want %v", rests, want)
	}

	// A rest cut short by the context ends the purge with what it purged.
	st = &pacedStore{Store: e.store, clock: e.clock, took: took}
	r = e.reconciler(nil, st, func(c *reconcile.Config) {
		c.PurgeBatch = 100
		c.PurgeSleep = func(context.Context, time.Duration) error { return context.Canceled }
	})
	if purged, err := r.Purge(context.Background()); !errors.Is(err, context.Canceled) || purged != 100 || st.calls != 1 {
		t.Fatalf("cancelled rest: purged %d in %d batches, %v; want 100 in 1, context.Canceled", purged, st.calls, err)
	}
}
