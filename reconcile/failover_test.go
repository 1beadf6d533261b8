package reconcile_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"gateway/errs"
	"gateway/idemkeys"
	"gateway/payments"
	"gateway/psp"
	"gateway/psp/fake"
	"gateway/psp/fake/fakeclient"
	"gateway/reconcile"
	"gateway/routing"
)

// Several PSP accounts (design §16), through the live flow and the
// reconciler on a real database, against each fake's own ledger.

// routed is an env whose service routes among several accounts.
type routed struct {
	*env
	fakes    map[string]*fake.PSP
	accounts *payments.PSPs
}

// testBreaker opens after 3 calls of which half failed, for 30 s.
var testBreaker = routing.BreakerConfig{Window: time.Minute, MinCalls: 3, FailurePercent: 50, Cooldown: 30 * time.Second}

func newRouted(t *testing.T, table routing.Table, extra map[string]psp.Adapter) *routed {
	t.Helper()
	e := newEnv(t)
	r := &routed{env: e, fakes: map[string]*fake.PSP{}}
	byName := map[string]psp.Adapter{}
	for _, n := range []string{"fake_a", "fake_b", "fake_c"} {
		f := fake.New(fake.WithCreationWindow(creationWindow), fake.WithAccount(n))
		r.fakes[n], byName[n] = f, f
	}
	for n, a := range extra {
		byName[n] = a
	}
	acc, err := payments.NewPSPs(table.Default[0].Account, byName)
	if err != nil {
		t.Fatal(err)
	}
	if err := acc.WithRoutes(table, routing.NewHealth(acc.Names(), testBreaker, e.clock.Now)); err != nil {
		t.Fatal(err)
	}
	r.accounts = acc
	e.svc = payments.NewService(e.store, acc, payments.Config{
		Lease: lease, PSPTimeout: 5 * time.Second, InFlightWait: 10 * time.Second, Now: e.clock.Now,
	})
	return r
}

func (r *routed) reconcilerOf() *reconcile.Reconciler {
	return reconcile.New(r.store, r.accounts, reconcile.Config{Lease: lease, PSPTimeout: 5 * time.Second, MaxAttempts: 3,
		BackoffBase: time.Minute, BackoffMax: 10 * time.Minute, Now: r.clock.Now})
}

// charges sums the charges every fake holds, and each one's.
func (r *routed) charges() (total int, each map[string]int) {
	each = map[string]int{}
	for n, f := range r.fakes {
		each[n] = f.ChargeCount()
		total += each[n]
	}
	return total, each
}

func (r *routed) create(key, currency string, amount int64) (payments.Outcome, error) {
	req := r.request(key)
	req.Amount = payments.Money{Minor: amount, Currency: currency}
	return r.svc.Create(context.Background(), req)
}

func (r *routed) created(key, currency string, amount int64) payments.Payment {
	r.t.Helper()
	out, err := r.create(key, currency, amount)
	if err != nil || out.Response.Status != http.StatusCreated {
		r.t.Fatalf("create %s: %+v %v", key, out, err)
	}
	p, err := r.store.Payment(context.Background(), r.merch.ID, out.SubjectID)
	if err != nil {
		r.t.Fatal(err)
	}
	return p
}

func TestRoutingByCurrencyAndAmountAcrossThreeAccounts(t *testing.T) {
	r := newRouted(t, routing.Table{Default: routing.Route{
		{Account: "fake_a", Currencies: []string{"KRW"}, MaxAmount: 50_000},
		{Account: "fake_b", Currencies: []string{"USD", "KRW"}},
		{Account: "fake_c", Currencies: []string{"JPY"}},
	}}, nil)
	for _, c := range []struct {
		key, currency string
		amount        int64
		want          string
	}{
		{"krw-small", "KRW", 1_000, "fake_a"},
		{"krw-large", "KRW", 100_000, "fake_b"},
		{"usd", "USD", 2_500, "fake_b"},
		{"jpy", "JPY", 700, "fake_c"},
	} {
		p := r.created(c.key, c.currency, c.amount)
		if p.PSP != c.want || p.AttemptNumber() != 1 {
			t.Errorf("%s: sent to %s (attempt %d), want %s", c.key, p.PSP, p.AttemptNumber(), c.want)
		}
		if n := r.fakes[c.want].ChargesFor(p.MerchantOrderID); n != 1 {
			t.Errorf("%s: %d charges at %s", c.key, n, c.want)
		}
	}
	if total, each := r.charges(); total != 4 || each["fake_a"] != 1 || each["fake_b"] != 2 || each["fake_c"] != 1 {
		t.Fatalf("ledgers %v", each)
	}
	// No account on the route takes GBP: a 422 before anything is stored.
	_, err := r.create("gbp", "GBP", 1_000)
	if errs.CodeOf(err) != errs.CodePSPCannotAccept {
		t.Fatalf("GBP: %v, want psp_cannot_accept", err)
	}
	if n := r.count(`SELECT COUNT(*) FROM payments WHERE idem_key = 'gbp'`); n != 0 {
		t.Fatalf("%d payments stored for a refused currency", n)
	}
	if n := r.count(`SELECT COUNT(*) FROM idempotency_keys WHERE idem_key = 'gbp'`); n != 0 {
		t.Fatalf("%d keys stored for a refused currency", n)
	}
}

// A weighted split is a function of the key: every retry of a key lands
// where its first request did, and the route's candidates agree.
func TestTheSameKeyAlwaysLandsOnTheSameAccount(t *testing.T) {
	table := routing.Table{Default: routing.Route{{Account: "fake_a", Weight: 1}, {Account: "fake_b", Weight: 1}}}
	r := newRouted(t, table, nil)
	seen := map[string]int{}
	for i := range 24 {
		key := "split-" + string(rune('a'+i))
		p := r.created(key, "KRW", 1_000)
		want := table.Candidates(routing.Payment{MerchantID: r.merch.ID, Key: key, Currency: "KRW", Amount: 1_000, PaymentMethod: fake.MethodOK})[0]
		if p.PSP != want {
			t.Fatalf("%s went to %s, its candidates start with %s", key, p.PSP, want)
		}
		again, err := r.create(key, "KRW", 1_000)
		if err != nil || !again.Replayed || again.SubjectID != p.ID {
			t.Fatalf("retry of %s: %+v %v", key, again, err)
		}
		seen[p.PSP]++
	}
	if seen["fake_a"] == 0 || seen["fake_b"] == 0 {
		t.Fatalf("a 1:1 split sent 24 keys to %v", seen)
	}
	if total, _ := r.charges(); total != 24 {
		t.Fatalf("%d charges for 24 keys", total)
	}
}

// closedPort is a loopback address nothing listens on: connections to it are refused.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// An attempt that certainly did nothing (a refused connection, an explicit
// not-processed answer) is followed by one at the next account, with its
// own order id; exactly one charge exists across every ledger.
func TestFailoverAfterARefusedConnectionAndAnExplicitNotProcessed(t *testing.T) {
	down, err := fakeclient.New(fakeclient.Config{BaseURL: closedPort(t), CreationWindow: creationWindow, Account: "down"})
	if err != nil {
		t.Fatal(err)
	}
	r := newRouted(t, routing.Table{Default: routing.Route{{Account: "fake_down"}, {Account: "fake_a"}, {Account: "fake_b"}}},
		map[string]psp.Adapter{"fake_down": down})
	r.fakes["fake_a"].FailNextCharges(fake.FaultNotProcessed, 1)

	out, err := r.create("failover", "KRW", 1_000)
	if err != nil || out.Response.Status != http.StatusCreated {
		t.Fatalf("create: %+v %v", out, err)
	}
	p, err := r.store.Payment(context.Background(), r.merch.ID, out.SubjectID)
	if err != nil {
		t.Fatal(err)
	}
	if p.PSP != "fake_b" || p.AttemptNumber() != 3 || len(p.Attempts) != 2 {
		t.Fatalf("payment at %s, attempt %d, earlier %+v", p.PSP, p.AttemptNumber(), p.Attempts)
	}
	orders := map[string]bool{p.MerchantOrderID: true}
	for i, want := range []string{"fake_down", "fake_a"} {
		a := p.Attempts[i]
		if a.PSP != want || a.Number != i+1 || a.Outcome != routing.AttemptNotProcessed || a.MerchantOrderID != payments.AttemptOrderID(r.merch.ID, "failover", i+1) {
			t.Fatalf("attempt %d: %+v", i+1, a)
		}
		orders[a.MerchantOrderID] = true
	}
	if len(orders) != 3 {
		t.Fatalf("attempts share an order id: %v", orders)
	}
	if total, each := r.charges(); total != 1 || each["fake_b"] != 1 {
		t.Fatalf("ledgers %v", each)
	}
	if n := r.count(`SELECT COUNT(*) FROM payment_attempts WHERE payment_id = ? AND outcome = 'not_processed'`, p.ID); n != 2 {
		t.Fatalf("%d attempt rows", n)
	}
	// The answer shows every attempt, and a retry replays it.
	var v payments.View
	if err := json.Unmarshal(out.Response.Body, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Attempts) != 3 || v.Attempts[2].Account != "fake_b" || v.Attempts[2].Outcome != "succeeded" || v.Attempts[0].Outcome != "not_processed" {
		t.Fatalf("attempts shown %+v", v.Attempts)
	}
	again, err := r.create("failover", "KRW", 1_000)
	if err != nil || !again.Replayed || string(again.Response.Body) != string(out.Response.Body) {
		t.Fatalf("replay: %+v %v", again, err)
	}

	// Refunds go to the account that charged.
	ref, err := r.svc.CreateRefund(context.Background(), payments.RefundRequest{MerchantID: r.merch.ID, PaymentID: p.ID, IdempotencyKey: "refund-1"})
	if err != nil || ref.Response.Status != http.StatusCreated {
		t.Fatalf("refund: %+v %v", ref, err)
	}
	if nb, na := len(r.fakes["fake_b"].Refunds()), len(r.fakes["fake_a"].Refunds()); nb != 1 || na != 0 {
		t.Fatalf("refunds at fake_b %d, fake_a %d", nb, na)
	}

	// Past the creation window the reconciler finds the attempt at fake_a
	// absent; the account that refuses connections cannot be asked, so its
	// attempt stays unproven and is looked at again later.
	r.advance(creationWindow + time.Second)
	sum := runOnce(t, r.reconcilerOf())
	if sum.Attempts != (reconcile.AttemptChecks{Absent: 1, Later: 1}) {
		t.Fatalf("attempt checks %+v", sum.Attempts)
	}
	if n := r.count(`SELECT COUNT(*) FROM payment_attempts WHERE payment_id = ? AND psp = 'fake_a' AND outcome = 'absent' AND check_after IS NULL`, p.ID); n != 1 {
		t.Fatalf("%d attempts at fake_a recorded absent", n)
	}
	if n := r.count(`SELECT COUNT(*) FROM payment_attempts WHERE payment_id = ? AND psp = 'fake_down' AND outcome = 'not_processed' AND check_after IS NOT NULL`, p.ID); n != 1 {
		t.Fatalf("%d unproven attempts at fake_down still due", n)
	}
	if got := r.reread(p); got.Attempts[1].Outcome != routing.AttemptAbsent || got.Attempts[0].Outcome != routing.AttemptNotProcessed {
		t.Fatalf("the payment's attempts %+v", got.Attempts)
	}
	if sum := runOnce(t, r.reconcilerOf()); sum.Attempts != (reconcile.AttemptChecks{}) {
		t.Fatalf("attempts checked again before they were due: %+v", sum.Attempts)
	}
}

// A timeout after the PSP charged is an unknown outcome: no next attempt.
// The payment settles through the first account, found by its lookup.
func TestNoFailoverAfterATimeoutAfterTheCharge(t *testing.T) {
	r := newRouted(t, routing.Table{Default: routing.Route{{Account: "fake_a"}, {Account: "fake_b"}}}, nil)
	r.fakes["fake_a"].FailNextCharges(fake.FaultUnknownAfterCharge, 1)
	_, err := r.create("unknown", "KRW", 1_000)
	if errs.CodeOf(err) != errs.CodePSPUnknown {
		t.Fatalf("create: %v, want psp_unknown", err)
	}
	if total, each := r.charges(); total != 1 || each["fake_a"] != 1 || r.fakes["fake_b"].ChargeCalls() != 0 {
		t.Fatalf("ledgers %v, fake_b calls %d", each, r.fakes["fake_b"].ChargeCalls())
	}
	r.advance(lease + time.Second)
	out, err := r.create("unknown", "KRW", 1_000)
	if err != nil || out.Response.Status != http.StatusCreated {
		t.Fatalf("retry: %+v %v", out, err)
	}
	p, err := r.store.Payment(context.Background(), r.merch.ID, out.SubjectID)
	if err != nil || p.PSP != "fake_a" || p.AttemptNumber() != 1 || len(p.Attempts) != 0 || p.Status != payments.Succeeded {
		t.Fatalf("payment %+v %v", p, err)
	}
	if total, _ := r.charges(); total != 1 {
		t.Fatalf("%d charges", total)
	}
}

// An account whose breaker is open receives no new payment; after its
// cool-down one payment probes it, and a success closes it.
func TestAnOpenBreakerReceivesNoNewPaymentAndIsProbedAfterItsCooldown(t *testing.T) {
	r := newRouted(t, routing.Table{Default: routing.Route{{Account: "fake_a"}, {Account: "fake_b"}}}, nil)
	a := r.fakes["fake_a"]
	a.FailNextCharges(fake.FaultNotProcessed, 3)
	for i := range 3 {
		if p := r.created("trip-"+string(rune('a'+i)), "KRW", 1_000); p.PSP != "fake_b" || p.AttemptNumber() != 2 {
			t.Fatalf("payment %d at %s attempt %d", i, p.PSP, p.AttemptNumber())
		}
	}
	if st := r.accounts.Health().State("fake_a"); st != routing.Open {
		t.Fatalf("fake_a's breaker %v after 3 failures", st)
	}
	calls := a.ChargeCalls()
	p := r.created("while-open", "KRW", 1_000)
	if p.PSP != "fake_b" || p.AttemptNumber() != 1 || a.ChargeCalls() != calls {
		t.Fatalf("while open: at %s attempt %d, fake_a called %d more times", p.PSP, p.AttemptNumber(), a.ChargeCalls()-calls)
	}
	r.clock.Advance(testBreaker.Cooldown)
	p = r.created("probe", "KRW", 1_000)
	if p.PSP != "fake_a" || a.ChargeCalls() != calls+1 {
		t.Fatalf("probe at %s", p.PSP)
	}
	if st := r.accounts.Health().State("fake_a"); st != routing.Closed {
		t.Fatalf("after a good probe: %v", st)
	}
	if total, each := r.charges(); total != 5 || each["fake_a"] != 1 {
		t.Fatalf("ledgers %v", each)
	}
}

// Every account's breaker open: a 503 to retry, and nothing stored.
func TestEveryAccountUnhealthyIsA503AndStoresNothing(t *testing.T) {
	r := newRouted(t, routing.Table{Default: routing.Route{{Account: "fake_a"}}}, nil)
	r.fakes["fake_a"].FailNextCharges(fake.FaultNotProcessed, 3)
	for i := range 3 {
		if _, err := r.create("fail-"+string(rune('a'+i)), "KRW", 1_000); errs.CodeOf(err) != errs.CodePSPUnavailable {
			t.Fatalf("create %d: %v", i, err)
		}
	}
	// Not psp-unavailable, which says the key was claimed and sent: the
	// key stays free, as for a replica out of service.
	_, err := r.create("refused", "KRW", 1_000)
	if e := (*errs.Error)(nil); errs.CodeOf(err) != errs.CodeUnavailable || !errors.As(err, &e) || e.RetryAfter == 0 {
		t.Fatalf("all unhealthy: %v", err)
	}
	if n := r.count(`SELECT COUNT(*) FROM idempotency_keys WHERE idem_key = 'refused'`); n != 0 {
		t.Fatalf("%d keys stored", n)
	}
	// A retry of a key claimed before goes on from what the key holds, at
	// the account it names: the breaker chooses only for new payments.
	out, err := r.create("fail-a", "KRW", 1_000)
	if err != nil || out.Response.Status != http.StatusCreated {
		t.Fatalf("retry of a claimed key: %+v %v", out, err)
	}
	if total, each := r.charges(); total != 1 || each["fake_a"] != 1 {
		t.Fatalf("ledgers %v", each)
	}
}

// A PSP that answered "not processed" and charged anyway: the reconciler
// finds the charge at the first account, refunds it there (once), leaves
// the second account's charge alone and sends the payment to review.
func TestAPlantedDoubleChargeIsRefundedAtOnePSPAndFlagged(t *testing.T) {
	r := newRouted(t, routing.Table{Default: routing.Route{{Account: "fake_a"}, {Account: "fake_b"}}}, nil)
	r.fakes["fake_a"].FailNextCharges(fake.FaultNotProcessed, 1)
	p := r.created("lied", "KRW", 1_000)
	if p.PSP != "fake_b" || len(p.Attempts) != 1 {
		t.Fatalf("payment at %s, attempts %+v", p.PSP, p.Attempts)
	}
	// The first account charged after all: both fakes hold the order.
	first := p.Attempts[0].MerchantOrderID
	if _, err := r.fakes["fake_a"].Charge(context.Background(), psp.ChargeRequest{MerchantOrderID: first, Amount: 1_000, Currency: "KRW", PaymentMethod: fake.MethodOK}); err != nil {
		t.Fatal(err)
	}
	r.advance(creationWindow + time.Second)
	sum := runOnce(t, r.reconcilerOf())
	if sum.Attempts.Returned != 1 {
		t.Fatalf("attempt checks %+v", sum.Attempts)
	}
	refunds := r.fakes["fake_a"].Refunds()
	if len(refunds) != 1 || refunds[0].Amount != 1_000 || refunds[0].MerchantOrderID != first || refunds[0].Status != psp.RefundSucceeded {
		t.Fatalf("refunds at fake_a %+v", refunds)
	}
	if n := len(r.fakes["fake_b"].Refunds()); n != 0 {
		t.Fatalf("%d refunds at fake_b", n)
	}
	got := r.reread(p)
	if got.Status != payments.RequiresReview || got.Attempts[0].Outcome != routing.AttemptExtraReturned {
		t.Fatalf("payment %s (%s), attempt %+v", got.Status, got.ReviewReason, got.Attempts[0])
	}
	if n := r.count(`SELECT COUNT(*) FROM payment_resolutions WHERE payment_id = ? AND to_status = 'requires_review'`, p.ID); n != 1 {
		t.Fatalf("%d audit rows", n)
	}
	// Nothing more on later passes.
	r.advance(time.Hour)
	runOnce(t, r.reconcilerOf())
	if n := len(r.fakes["fake_a"].Refunds()); n != 1 {
		t.Fatalf("%d refunds at fake_a after another pass", n)
	}
}

// A payment made before accounts existed (one PSP, no attempts rows) is
// reconciled and refunded at the PSP it names.
func TestAPaymentFromBeforeTheUpgradeIsReconciledAndRefunded(t *testing.T) {
	e := newEnv(t)
	old := payments.PSPName(e.psp.Capabilities())
	p := e.crash("before-upgrade", true)
	b := fake.New(fake.WithCreationWindow(creationWindow))
	acc, err := payments.NewPSPs(old, map[string]psp.Adapter{old: e.psp, "fake_b": b})
	if err != nil {
		t.Fatal(err)
	}
	if err := acc.WithRoutes(routing.Table{Default: routing.Route{{Account: "fake_b"}, {Account: old}}}, routing.NewHealth(acc.Names(), testBreaker, e.clock.Now)); err != nil {
		t.Fatal(err)
	}
	e.advance(lease + time.Second)
	r := reconcile.New(e.store, acc, reconcile.Config{Lease: lease, PSPTimeout: 5 * time.Second, MaxAttempts: 3,
		BackoffBase: time.Minute, BackoffMax: 10 * time.Minute, Now: e.clock.Now})
	wantOutcomes(t, runOnce(t, r), map[reconcile.Outcome]int{reconcile.Succeeded: 1})
	svc := payments.NewService(e.store, acc, payments.Config{Lease: lease, PSPTimeout: 5 * time.Second, Now: e.clock.Now})
	out, err := svc.CreateRefund(context.Background(), payments.RefundRequest{MerchantID: e.merch.ID, PaymentID: p.ID, IdempotencyKey: "r"})
	if err != nil || out.Response.Status != http.StatusCreated {
		t.Fatalf("refund: %+v %v", out, err)
	}
	if len(e.psp.Refunds()) != 1 || len(b.Refunds()) != 0 || b.ChargeCalls() != 0 {
		t.Fatalf("refunds old %d, new %d", len(e.psp.Refunds()), len(b.Refunds()))
	}
	got := e.reread(p)
	if v := payments.ToView(got); len(v.Attempts) != 1 || v.Attempts[0].Account != old || v.Attempts[0].OrderID != p.MerchantOrderID {
		t.Fatalf("attempts %+v", v.Attempts)
	}
	if n := e.count(`SELECT COUNT(*) FROM payment_attempts`); n != 0 {
		t.Fatalf("%d attempt rows", n)
	}
}

// A worker that read the key before a failover (its lease about to lapse)
// must not take it over after: the failover moved the lease to a new
// token, so the takeover's compare-and-set on the token it read fails even
// once the lease has expired, and the ended attempt is never sent again.
// (Found by the model: gap/takeover-resumes-the-attempt-failed-over.)
func TestATakeoverReadBeforeAFailoverIsFenced(t *testing.T) {
	r := newRouted(t, routing.Table{Default: routing.Route{{Account: "fake_a"}, {Account: "fake_b"}}}, nil)
	p := r.crash("stale", false)
	ref := idemkeys.Ref{MerchantID: r.merch.ID, Endpoint: payments.EndpointCreatePayment, Key: "stale"}
	seen, err := r.store.Record(context.Background(), ref)
	if err != nil {
		t.Fatal(err)
	}
	next := p
	next.PSP = "fake_b"
	next.Attempt = 2
	next.MerchantOrderID = payments.AttemptOrderID(r.merch.ID, "stale", 2)
	next.Attempts = []routing.Attempt{{Number: 1, PSP: p.PSP, MerchantOrderID: p.MerchantOrderID, Outcome: routing.AttemptNotProcessed, StartedAt: p.CreatedAt}}
	if _, err := r.store.Failover(context.Background(), ref, seen.Token, seen.Token.Next(), next, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	r.advance(lease + time.Second)
	if _, err := r.store.TakeOver(context.Background(), ref, seen.Token, lease); !errors.Is(err, idemkeys.ErrFenced) {
		t.Fatalf("a takeover with the token read before the failover: %v, want fenced", err)
	}
	// A retry reads the key afresh and goes on with attempt 2, at fake_b.
	out, err := r.create("stale", "KRW", 1_000)
	if err != nil || out.Response.Status != http.StatusCreated {
		t.Fatalf("retry: %+v %v", out, err)
	}
	if total, each := r.charges(); total != 1 || each["fake_b"] != 1 {
		t.Fatalf("ledgers %v", each)
	}
}

// The check of an attempt that its account charged anyway waits while the
// payment's own attempt is in review without a charge it knows: which
// charge is the extra one is not known yet. Once the payment settles
// succeeded, the first account's charge is given back.
// (Found by the model: gap/attempt-charged-beside-review.)
func TestAnAttemptCheckWaitsForAPaymentInReview(t *testing.T) {
	r := newRouted(t, routing.Table{Default: routing.Route{{Account: "fake_a"}, {Account: "fake_b"}}}, nil)
	r.fakes["fake_a"].FailNextCharges(fake.FaultNotProcessed, 1)
	p := r.created("review", "KRW", 1_000)
	first := p.Attempts[0].MerchantOrderID
	if _, err := r.fakes["fake_a"].Charge(context.Background(), psp.ChargeRequest{MerchantOrderID: first, Amount: 1_000, Currency: "KRW", PaymentMethod: fake.MethodOK}); err != nil {
		t.Fatal(err)
	}
	// Attempt 2's outcome as nobody could learn it: in review, no charge known.
	if _, err := r.db.Exec(`UPDATE payments SET status = 'requires_review', psp_reference = NULL, review_after = NOW(6) + INTERVAL 1 DAY WHERE id = ?`, p.ID); err != nil {
		t.Fatal(err)
	}
	r.advance(creationWindow + time.Second)
	sum := runOnce(t, r.reconcilerOf())
	if sum.Attempts != (reconcile.AttemptChecks{Later: 1}) || len(r.fakes["fake_a"].Refunds()) != 0 {
		t.Fatalf("attempt checks %+v, refunds at fake_a %d", sum.Attempts, len(r.fakes["fake_a"].Refunds()))
	}
	if n := r.count(`SELECT COUNT(*) FROM payment_attempts WHERE payment_id = ? AND outcome = 'not_processed' AND check_after IS NOT NULL`, p.ID); n != 1 {
		t.Fatalf("the attempt was settled while its payment was in review: %d still due", n)
	}
	// The review settles it succeeded at fake_b: the check then gives fake_a's charge back.
	charge := r.fakes["fake_b"].Charges()[0]
	if _, err := r.db.Exec(`UPDATE payments SET status = 'succeeded', psp_reference = ? WHERE id = ?`, charge.Reference, p.ID); err != nil {
		t.Fatal(err)
	}
	r.advance(time.Hour)
	sum = runOnce(t, r.reconcilerOf())
	if sum.Attempts.Returned != 1 || len(r.fakes["fake_a"].Refunds()) != 1 || len(r.fakes["fake_b"].Refunds()) != 0 {
		t.Fatalf("attempt checks %+v, refunds at fake_a %d, fake_b %d", sum.Attempts, len(r.fakes["fake_a"].Refunds()), len(r.fakes["fake_b"].Refunds()))
	}
}

// An attempt that answered not processed and charged anyway while no other
// attempt charged: the payment (answered failed) goes to review with the
// evidence, keeps its own reference, and the review queue leaves it there
// for a person, whatever its current attempt's account says.
// (Found by the model: findings 7 and 8, once gaps 6 and 7.)
func TestAnAttemptChargedWhileThePaymentFailedStaysInReview(t *testing.T) {
	r := newRouted(t, routing.Table{Default: routing.Route{{Account: "fake_a"}, {Account: "fake_b"}}}, nil)
	r.fakes["fake_a"].FailNextCharges(fake.FaultNotProcessed, 1)
	r.fakes["fake_b"].FailNextCharges(fake.FaultNotProcessed, 1)
	out, err := r.create("nowhere", "KRW", 1_000)
	if errs.CodeOf(err) != errs.CodePSPUnavailable {
		t.Fatalf("create: %+v %v", out, err)
	}
	r.advance(lease + time.Second)
	runOnce(t, r.reconcilerOf()) // every send certainly did nothing: failed
	p, err := r.store.PaymentByKey(context.Background(), r.merch.ID, "nowhere")
	if err != nil || p.Status != payments.Failed || len(p.Attempts) != 1 {
		t.Fatalf("payment %+v %v", p, err)
	}
	if _, err := r.fakes["fake_a"].Charge(context.Background(), psp.ChargeRequest{MerchantOrderID: p.Attempts[0].MerchantOrderID, Amount: 1_000, Currency: "KRW", PaymentMethod: fake.MethodOK}); err != nil {
		t.Fatal(err)
	}
	r.advance(creationWindow + time.Second)
	if sum := runOnce(t, r.reconcilerOf()); sum.Attempts.Charged != 1 {
		t.Fatalf("attempt checks %+v", sum.Attempts)
	}
	got := r.reread(p)
	if got.Status != payments.RequiresReview || got.PSPReference != "" || got.Attempts[0].Outcome != routing.AttemptCharged {
		t.Fatalf("payment %s ref %q, attempt %+v", got.Status, got.PSPReference, got.Attempts[0])
	}
	for range 4 {
		r.advance(2 * time.Hour)
		runOnce(t, r.reconcilerOf())
	}
	if got := r.reread(p); got.Status != payments.RequiresReview {
		t.Fatalf("the review queue settled it %s from its current attempt alone", got.Status)
	}
	if n := len(r.fakes["fake_a"].Refunds()); n != 0 {
		t.Fatalf("%d refunds of the payment's only charge", n)
	}
}
