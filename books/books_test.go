package books_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"gateway/books"
	"gateway/errs"
	"gateway/merchants"
	"gateway/mysql"
	"gateway/mysql/mysqltest"
	"gateway/payments"
	"gateway/psp"
	"gateway/psp/fake"
	"gateway/review"
	"gateway/routing"
)

func TestMain(m *testing.M) { mysqltest.Main(m) }

// env is a store, a fake PSP, the payment service and a merchant over one
// fresh database; the books' period is the hours around the test's start.
type env struct {
	t        *testing.T
	db       *sqlx.DB
	store    *mysql.Store
	psp      *fake.PSP
	svc      *payments.Service
	merch    merchants.Merchant
	from, to time.Time
	account  string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	dbx := mysqltest.MustOpen(t)
	e := &env{t: t, db: dbx, store: mysql.NewStore(dbx), psp: fake.New(fake.WithCreationWindow(2 * time.Minute))}
	e.account = payments.PSPName(e.psp.Capabilities())
	e.svc = payments.NewService(e.store, payments.OnePSP(e.psp), payments.Config{Lease: 30 * time.Second, PSPTimeout: 5 * time.Second})
	m, key, err := merchants.NewMerchant("Test merchant", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.store.CreateMerchant(context.Background(), m, key); err != nil {
		t.Fatal(err)
	}
	e.merch = m
	now := time.Now().UTC().Truncate(time.Hour)
	e.from, e.to = now.Add(-time.Hour), now.Add(2*time.Hour)
	return e
}

// job is a books job whose clock is a day on, so that the period is closed.
func (e *env) job(mod ...func(*books.Config)) *books.Job {
	cfg := books.Config{Store: e.store.Books(), PSPs: payments.OnePSP(e.psp), PageSize: 50,
		Now: func() time.Time { return time.Now().Add(24 * time.Hour) }}
	for _, m := range mod {
		m(&cfg)
	}
	return books.New(cfg)
}

func (e *env) reconcile(j *books.Job, again bool) books.Report {
	e.t.Helper()
	rep, err := j.Reconcile(context.Background(), e.account, e.from, e.to, again)
	if err != nil {
		e.t.Fatalf("Reconcile: %v", err)
	}
	return rep
}

// pay makes a payment through the service; method says its outcome.
func (e *env) pay(key, method string, amount int64) payments.Payment {
	e.t.Helper()
	out, err := e.svc.Create(context.Background(), payments.CreateRequest{MerchantID: e.merch.ID, IdempotencyKey: key,
		Amount: payments.Money{Minor: amount, Currency: "KRW"}, PaymentMethod: method})
	if err != nil {
		e.t.Fatalf("Create %s: %v", key, err)
	}
	p, err := e.store.Payment(context.Background(), e.merch.ID, out.SubjectID)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

func (e *env) refund(p payments.Payment, key string, amount int64) payments.Refund {
	e.t.Helper()
	out, err := e.svc.CreateRefund(context.Background(), payments.RefundRequest{MerchantID: e.merch.ID, PaymentID: p.ID, IdempotencyKey: key, Amount: &amount})
	if err != nil {
		e.t.Fatalf("CreateRefund: %v", err)
	}
	r, err := e.svc.Refund(context.Background(), e.merch.ID, out.SubjectID)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func (e *env) count(q string, args ...any) int {
	e.t.Helper()
	return mysqltest.Count(e.t, e.db, q, args...)
}

func (e *env) payment(id string) payments.Payment {
	e.t.Helper()
	p, err := e.store.PaymentByID(context.Background(), id)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

// wantClasses checks the report's discrepancies, by class.
func wantClasses(t *testing.T, rep books.Report, want map[books.Class]int) {
	t.Helper()
	got := map[books.Class]int{}
	for _, d := range rep.Discrepancies {
		got[d.Class]++
	}
	for _, c := range books.Classes {
		if got[c] != want[c] {
			t.Fatalf("discrepancies %v, want %v: %+v", got, want, rep.Discrepancies)
		}
	}
	if rep.Run.Status != books.RunComplete {
		t.Fatalf("run %s (%s), want complete", rep.Run.Status, rep.Run.LastError)
	}
}

func TestBooksThatBalanceFindNothing(t *testing.T) {
	e := newEnv(t)
	a := e.pay("a", fake.MethodOK, 1000)
	e.pay("b", fake.MethodOK, 2500)
	e.pay("c", fake.MethodDeclined, 700)
	e.refund(a, "r1", 400)

	rep := e.reconcile(e.job(), false)
	wantClasses(t, rep, nil)
	if !rep.Balanced() {
		t.Fatalf("not balanced: %+v", rep)
	}
	c := rep.Run.Counts
	if c.Lines != 4 || c.Matched != 4 || c.Checked != 3 || c.Unsettled != 0 {
		t.Fatalf("counts %+v, want 4 lines (3 charges, 1 refund) matched and 3 records checked", c)
	}
	if n := e.count(`SELECT COUNT(*) FROM books_discrepancies`); n != 0 {
		t.Fatalf("%d discrepancies stored", n)
	}
}

// A restore lost a payment's row after its charge: the books record the
// PSP's charge as a payment in review, under its key's payment id, once.
func TestLostPaymentRowIsRecordedInReview(t *testing.T) {
	e := newEnv(t)
	lost := e.pay("lost", fake.MethodOK, 1234)
	e.pay("kept", fake.MethodOK, 1000)
	// The restore lost the row and kept its events: the books' event is numbered after them.
	exec(t, e.db, `DELETE FROM payments WHERE id = ?`, lost.ID)
	kept := e.count(`SELECT COUNT(*) FROM events WHERE object_id = ?`, lost.ID)

	rep := e.reconcile(e.job(), false)
	wantClasses(t, rep, map[books.Class]int{books.OrphanCharge: 1})
	d := rep.Discrepancies[0]
	if d.Action != books.ActionRecordedPayment || d.PaymentID != lost.ID || d.Subject != lost.MerchantOrderID || d.PSPRecord == nil {
		t.Fatalf("discrepancy %+v, want the payment %s recorded under its key's id", d, lost.ID)
	}
	p := e.payment(lost.ID)
	if p.Status != payments.RequiresReview || p.Amount.Minor != 1234 || p.PSPReference != lost.PSPReference ||
		p.IdempotencyKey != "lost" || p.PSP != e.account || !strings.HasPrefix(p.ReviewReason, "books: ") {
		t.Fatalf("recorded payment %+v", p)
	}
	if n := e.count(`SELECT COUNT(*) FROM payments WHERE id = ? AND review_after IS NULL`, lost.ID); n != 1 {
		t.Fatal("the recorded payment is on a queue's schedule: only an operator may settle it")
	}
	if n := e.count(`SELECT COUNT(*) FROM events WHERE object_id = ? AND type = 'payment.requires_review'`, lost.ID); n != 1 {
		t.Fatalf("%d requires_review events", n)
	}

	again := e.reconcile(e.job(), true)
	wantClasses(t, again, map[books.Class]int{books.OrphanCharge: 1})
	if again.New != 0 || again.Discrepancies[0].ID != d.ID || again.Run.ID != rep.Run.ID || again.Run.Passes != 2 {
		t.Fatalf("rerun: %d new, run %d pass %d, discrepancy %d; want the same report", again.New, again.Run.ID, again.Run.Passes, again.Discrepancies[0].ID)
	}
	if n := e.count(`SELECT COUNT(*) FROM payments`); n != 2 {
		t.Fatalf("%d payments after the rerun, want 2", n)
	}
	if n := e.count(`SELECT COUNT(*) FROM events WHERE object_id = ?`, lost.ID); n != kept+1 {
		t.Fatalf("%d events after the rerun, want the %d kept and the books' one", n, kept)
	}
	if _, err := e.job().Reconcile(context.Background(), e.account, e.from, e.to, false); !errors.Is(err, books.ErrRunComplete) {
		t.Fatalf("a second run without again: %v, want ErrRunComplete", err)
	}
}

func TestAmountTheGatewayChangedGoesToReview(t *testing.T) {
	e := newEnv(t)
	p := e.pay("p", fake.MethodOK, 1000)
	exec(t, e.db, `UPDATE payments SET amount = 999, amount_captured = 999 WHERE id = ?`, p.ID)

	rep := e.reconcile(e.job(), false)
	wantClasses(t, rep, map[books.Class]int{books.Mismatch: 1})
	d := rep.Discrepancies[0]
	if d.Action != books.ActionReview || d.PSPRecord == nil || d.PSPRecord.Amount != 1000 || d.GatewayRecord == nil ||
		!strings.Contains(string(d.GatewayRecord), `"amount":999`) {
		t.Fatalf("discrepancy %+v (gateway %s): want both records", d, d.GatewayRecord)
	}
	if got := e.payment(p.ID); got.Status != payments.RequiresReview {
		t.Fatalf("payment %s", got.Status)
	}
	if n := e.count(`SELECT COUNT(*) FROM payment_resolutions WHERE payment_id = ? AND actor = 'books'`, p.ID); n != 1 {
		t.Fatalf("%d audited resolutions", n)
	}
}

// A refund made in the PSP's dashboard is recorded as a refund in review;
// its payment's refunded amount moves only when an operator resolves it.
func TestRefundMadeAtThePSPIsRecordedInReview(t *testing.T) {
	e := newEnv(t)
	p := e.pay("p", fake.MethodOK, 1000)
	if _, err := e.psp.PlantRefund(p.MerchantOrderID, "", 300, time.Now()); err != nil {
		t.Fatal(err)
	}
	rep := e.reconcile(e.job(), false)
	wantClasses(t, rep, map[books.Class]int{books.OrphanRefund: 1})
	d := rep.Discrepancies[0]
	if d.Action != books.ActionRecordedRefund || d.RefundID == "" || d.PaymentID != p.ID {
		t.Fatalf("discrepancy %+v", d)
	}
	got := e.payment(p.ID)
	if got.AmountReserved != 300 || got.AmountRefunded != 0 {
		t.Fatalf("payment reserved %d refunded %d, want 300 reserved and nothing refunded yet", got.AmountReserved, got.AmountRefunded)
	}
	admin := review.New(e.store, review.Config{PSPs: payments.OnePSP(e.psp)})
	if _, err := admin.ResolveRefund(context.Background(), review.RefundResolution{RefundID: d.RefundID, To: payments.RefundSucceeded,
		Reason: "made in the PSP's dashboard by support", Actor: "ops", Force: true}); err != nil {
		t.Fatalf("ResolveRefund: %v", err)
	}
	if got := e.payment(p.ID); got.AmountRefunded != 300 {
		t.Fatalf("refunded %d after the resolution, want 300", got.AmountRefunded)
	}
	again := e.reconcile(e.job(), true)
	if again.New != 0 || len(again.Discrepancies) != 1 {
		t.Fatalf("rerun: %d new, %d discrepancies", again.New, len(again.Discrepancies))
	}
}

// A charge with an order id the gateway never derived: with the merchant
// the PSP kept it is a payment in review of that merchant; without, the
// discrepancy alone records it.
func TestChargeTheGatewayNeverAskedFor(t *testing.T) {
	e := newEnv(t)
	e.psp.PlantCharge("ord_from_the_dashboard", e.merch.ID, 5000, "KRW", time.Now())
	e.psp.PlantCharge("", "", 7000, "KRW", time.Now())

	rep := e.reconcile(e.job(), false)
	wantClasses(t, rep, map[books.Class]int{books.OrphanCharge: 2})
	var recorded, alone int
	for _, d := range rep.Discrepancies {
		switch d.Action {
		case books.ActionRecordedPayment:
			recorded++
			p := e.payment(d.PaymentID)
			if p.MerchantID != e.merch.ID || p.Amount.Minor != 5000 || p.Status != payments.RequiresReview {
				t.Fatalf("recorded %+v", p)
			}
		case books.ActionAlertOnly:
			alone++
		}
	}
	if recorded != 1 || alone != 1 {
		t.Fatalf("%d recorded, %d alone: %+v", recorded, alone, rep.Discrepancies)
	}
}

func TestChargeThePSPLostGoesToReview(t *testing.T) {
	e := newEnv(t)
	p := e.pay("p", fake.MethodOK, 1000)
	e.pay("q", fake.MethodOK, 1000)
	if !e.psp.Drop(p.MerchantOrderID) {
		t.Fatal("nothing dropped")
	}
	rep := e.reconcile(e.job(), false)
	wantClasses(t, rep, map[books.Class]int{books.MissingAtPSP: 1})
	if d := rep.Discrepancies[0]; d.PaymentID != p.ID || d.PSPRecord != nil || d.GatewayRecord == nil {
		t.Fatalf("discrepancy %+v", d)
	}
	if got := e.payment(p.ID); got.Status != payments.RequiresReview {
		t.Fatalf("payment %s", got.Status)
	}
}

// insertPayments writes n succeeded payments straight into the table, with
// order ids ord_bulk_<prefix>_<i>, in one statement per thousand.
func (e *env) insertPayments(prefix string, from, n int) {
	e.t.Helper()
	for lo := from; lo < from+n; lo += 1000 {
		var sb strings.Builder
		sb.WriteString(`INSERT INTO payments (merchant_id, id, idem_key, merchant_order_id, status, amount, amount_captured, currency, payment_method, psp, created_at, updated_at) VALUES `)
		for i := lo; i < min(lo+1000, from+n); i++ {
			if i > lo {
				sb.WriteString(",")
			}
			fmt.Fprintf(&sb, "('%s', 'pay_%s%07d', 'k%s%d', 'ord_bulk_%s_%d', 'succeeded', 100, 100, 'KRW', 'pm_card_ok', '%s', NOW(6), NOW(6))",
				e.merch.ID, prefix, i, prefix, i, prefix, i, e.account)
		}
		exec(e.t, e.db, sb.String())
	}
}

// Ten thousand lines paged 500 at a time, with charges made while the
// listing pages: every line is checked once, the late ones too.
func TestPagesTenThousandLinesWithChargesMadeWhilePaging(t *testing.T) {
	e := newEnv(t)
	e.insertPayments("x", 0, 10000)
	at := time.Now()
	for i := range 10000 {
		e.psp.PlantCharge(fmt.Sprintf("ord_bulk_x_%d", i), e.merch.ID, 100, "KRW", at)
	}
	e.insertPayments("y", 0, 5)
	var once sync.Once
	pages := 0
	job := e.job(func(c *books.Config) {
		c.PageSize = 500
		c.Progress = func(r books.Run) {
			pages++
			once.Do(func() {
				for i := range 5 {
					e.psp.PlantCharge(fmt.Sprintf("ord_bulk_y_%d", i), e.merch.ID, 100, "KRW", at)
				}
				e.psp.PlantCharge("ord_late_orphan", e.merch.ID, 100, "KRW", at)
			})
		}
	})
	rep := e.reconcile(job, false)
	wantClasses(t, rep, map[books.Class]int{books.OrphanCharge: 1})
	if c := rep.Run.Counts; c.Lines != 10006 || c.Matched != 10005 || c.Checked != 10005 {
		t.Fatalf("counts %+v, want 10,006 lines, 10,005 matched and checked", c)
	}
	if pages < 21 {
		t.Fatalf("%d pages, want at least 21 of 500", pages)
	}
}

// A line at the last millisecond of a day, in Seoul's time and in UTC, is
// in exactly one of the two periods around it.
func TestBoundaryLinesAreInExactlyOnePeriod(t *testing.T) {
	e := newEnv(t)
	kst := time.FixedZone("KST", 9*3600)
	for _, zone := range []*time.Location{kst, time.UTC} {
		day := time.Date(2026, 11, 29, 0, 0, 0, 0, zone)
		last := day.Add(24*time.Hour - time.Millisecond) // 23:59:59.999
		first := day.Add(24 * time.Hour)                 // 00:00:00.000 of the next day
		e.psp.PlantCharge("ord_last_"+zone.String(), e.merch.ID, 100, "KRW", last)
		e.psp.PlantCharge("ord_first_"+zone.String(), e.merch.ID, 100, "KRW", first)
		seen := map[string]int{}
		for i := range 2 {
			from := day.Add(time.Duration(i) * 24 * time.Hour)
			rep, err := e.job().Reconcile(context.Background(), e.account, from, from.Add(24*time.Hour), false)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range rep.Discrepancies {
				if strings.HasSuffix(d.Subject, "_"+zone.String()) {
					seen[d.Subject] = i + 1
				}
			}
		}
		if seen["ord_last_"+zone.String()] != 1 || seen["ord_first_"+zone.String()] != 2 {
			t.Fatalf("%s: the periods found %v; want the last millisecond in the first day, midnight in the second", zone, seen)
		}
	}
}

// Two replicas run the schedule at once: one run, one of each discrepancy.
func TestTwoReplicasAtOnceDoOneRun(t *testing.T) {
	e := newEnv(t)
	e.insertPayments("x", 0, 2000)
	for i := range 2000 {
		e.psp.PlantCharge(fmt.Sprintf("ord_bulk_x_%d", i), e.merch.ID, 100, "KRW", time.Now())
	}
	e.psp.PlantCharge("ord_orphan", e.merch.ID, 100, "KRW", time.Now())
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() {
			_, errs[i] = e.job().Reconcile(context.Background(), e.account, e.from, e.to, false)
		})
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, books.ErrRunHeld), errors.Is(err, books.ErrRunComplete):
		default:
			t.Fatalf("Reconcile: %v", err)
		}
	}
	if ok != 1 {
		t.Fatalf("%d passes ran (%v), want 1", ok, errs)
	}
	if n := e.count(`SELECT COUNT(*) FROM books_runs`); n != 1 {
		t.Fatalf("%d runs", n)
	}
	if n := e.count(`SELECT COUNT(*) FROM books_discrepancies`); n != 1 {
		t.Fatalf("%d discrepancies, want 1", n)
	}
	if n := e.count(`SELECT COUNT(*) FROM payments WHERE merchant_order_id = 'ord_orphan'`); n != 1 {
		t.Fatalf("%d payments recorded for the orphan", n)
	}
}

// The PSP's listing fails mid-run: the run is left incomplete at its
// cursor, and the next pass resumes there and finishes it.
func TestListingThatFailsMidRunIsResumed(t *testing.T) {
	e := newEnv(t)
	e.insertPayments("x", 0, 1000)
	for i := range 1000 {
		e.psp.PlantCharge(fmt.Sprintf("ord_bulk_x_%d", i), e.merch.ID, 100, "KRW", time.Now())
		if i == 700 {
			e.psp.PlantCharge("ord_orphan", e.merch.ID, 100, "KRW", time.Now())
		}
	}
	pages := 0
	job := e.job(func(c *books.Config) {
		c.PageSize = 100
		c.Progress = func(books.Run) {
			if pages++; pages == 3 {
				e.psp.FailNextListings(1)
			}
		}
	})
	rep, err := job.Reconcile(context.Background(), e.account, e.from, e.to, false)
	if err == nil || rep.Run.Status != books.RunIncomplete || rep.Run.Cursor == "" || rep.Run.Counts.Lines != 300 {
		t.Fatalf("first pass: %v, run %+v; want it incomplete after 300 lines", err, rep.Run)
	}
	lookups := e.psp.LookupCalls()
	rep = e.reconcile(job, false)
	wantClasses(t, rep, map[books.Class]int{books.OrphanCharge: 1})
	if c := rep.Run.Counts; c.Lines != 1001 || c.Matched != 1000 || c.Checked != 1000 {
		t.Fatalf("counts %+v after the resumed pass, want 1,001 lines", c)
	}
	if n := e.psp.LookupCalls() - lookups; n != 0 {
		t.Fatalf("the resumed pass looked up %d payments: it should have reread the pages before its cursor", n)
	}
}

func TestPeriodNotClosedIsRefused(t *testing.T) {
	e := newEnv(t)
	job := e.job(func(c *books.Config) { c.Now = time.Now })
	if _, err := job.Reconcile(context.Background(), e.account, e.from, e.to, false); err == nil || !strings.Contains(err.Error(), "not closed") {
		t.Fatalf("err %v, want the period refused as not closed", err)
	}
	if _, err := job.Reconcile(context.Background(), e.account, e.to, e.from, false); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("err %v, want the period refused as empty", err)
	}
	if n := e.count(`SELECT COUNT(*) FROM books_runs`); n != 0 {
		t.Fatalf("%d runs made by refused periods", n)
	}
}

func exec(t *testing.T, db *sqlx.DB, q string, args ...any) {
	t.Helper()
	if _, err := db.Exec(q, args...); err != nil {
		t.Fatalf("%s: %v", q[:min(len(q), 60)], err)
	}
}

// The open discrepancies are those whose record an operator has not
// settled, or, recorded alone, not acknowledged.
func TestStandingCountsWhatNoOperatorSettled(t *testing.T) {
	e := newEnv(t)
	e.psp.PlantCharge("ord_from_the_dashboard", e.merch.ID, 5000, "KRW", time.Now())
	e.psp.PlantCharge("", "", 7000, "KRW", time.Now())
	rep := e.reconcile(e.job(), false)
	st := e.store.Books()
	standing, err := st.Standing(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n := standing.Open[e.account][books.OrphanCharge]; n != 2 || standing.LastComplete[e.account].IsZero() {
		t.Fatalf("standing %+v, want 2 open orphan charges and a complete run", standing)
	}
	admin := review.New(e.store, review.Config{PSPs: payments.OnePSP(e.psp)})
	for _, d := range rep.Discrepancies {
		var err error
		if d.Action == books.ActionRecordedPayment {
			_, err = admin.Resolve(context.Background(), payments.Resolution{PaymentID: d.PaymentID, To: payments.Succeeded,
				Reason: "a charge support made by phone", Actor: "ops"})
		} else {
			err = st.ResolveDiscrepancy(context.Background(), d.ID, "ops: refunded in the dashboard")
		}
		if err != nil {
			t.Fatalf("resolving %d: %v", d.ID, err)
		}
	}
	if standing, err = st.Standing(context.Background()); err != nil || standing.Open[e.account][books.OrphanCharge] != 0 {
		t.Fatalf("standing %+v (%v), want nothing open", standing, err)
	}
	if err := st.ResolveDiscrepancy(context.Background(), 999999, "x"); !errors.Is(err, errs.ErrNotFound) {
		t.Fatalf("an unknown discrepancy: %v", err)
	}
}

// noLedger is an adapter that cannot list its ledger.
type noLedger struct{ psp.Adapter }

func TestAnAdapterWithoutALedgerIsRefused(t *testing.T) {
	e := newEnv(t)
	job := e.job(func(c *books.Config) { c.PSPs = payments.OnePSP(noLedger{e.psp}) })
	if _, err := job.Reconcile(context.Background(), e.account, e.from, e.to, false); !errors.Is(err, books.ErrNoLedger) {
		t.Fatalf("err %v, want ErrNoLedger", err)
	}
	if n := e.count(`SELECT COUNT(*) FROM books_runs`); n != 0 {
		t.Fatalf("%d runs", n)
	}
}

// A pass whose lease another took over while it still ran writes nothing
// more: the run is the other's, and what it found is recorded once.
func TestAPassThatLostItsLeaseWritesNothingMore(t *testing.T) {
	e := newEnv(t)
	e.insertPayments("x", 0, 300)
	for i := range 300 {
		e.psp.PlantCharge(fmt.Sprintf("ord_bulk_x_%d", i), e.merch.ID, 100, "KRW", time.Now())
	}
	e.psp.PlantCharge("ord_orphan", e.merch.ID, 100, "KRW", time.Now())
	paused, resume := make(chan struct{}), make(chan struct{})
	first := e.job(func(c *books.Config) {
		c.Lease, c.PageSize = time.Millisecond, 100
		c.Progress = func(r books.Run) {
			if r.Counts.Lines == 100 {
				close(paused)
				<-resume
			}
		}
	})
	done := make(chan error, 1)
	go func() {
		_, err := first.Reconcile(context.Background(), e.account, e.from, e.to, false)
		done <- err
	}()
	<-paused
	// Its lease of a millisecond has passed once the database's clock moved on.
	for e.count(`SELECT COUNT(*) FROM books_runs WHERE lease_until < NOW(6)`) == 0 {
		time.Sleep(time.Millisecond)
	}
	rep := e.reconcile(e.job(), false)
	close(resume)
	if err := <-done; !errors.Is(err, books.ErrLost) {
		t.Fatalf("the first pass ended with %v, want ErrLost", err)
	}
	wantClasses(t, rep, map[books.Class]int{books.OrphanCharge: 1})
	var status string
	if err := e.db.Get(&status, `SELECT status FROM books_runs`); err != nil || status != books.RunComplete {
		t.Fatalf("run %s (%v): the pass that lost its lease overwrote it", status, err)
	}
	if n := e.count(`SELECT COUNT(*) FROM payments WHERE merchant_order_id = 'ord_orphan'`); n != 1 {
		t.Fatalf("%d payments for the orphan", n)
	}
}

// The schedule's Due, on two replicas at once: each closed day of the
// look-back is one run, each orphan recorded once; a second tick runs none.
func TestDueRunsEachClosedDayOnceAcrossReplicas(t *testing.T) {
	e := newEnv(t)
	noon := time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)
	for d := 1; d <= 3; d++ {
		e.psp.PlantCharge(fmt.Sprintf("ord_day_%d", d), e.merch.ID, 100, "KRW", noon.Add(-time.Duration(d)*24*time.Hour))
	}
	e.psp.PlantCharge("ord_today", e.merch.ID, 100, "KRW", noon) // today is not closed: not looked at
	at := func(c *books.Config) { c.Now = func() time.Time { return noon } }
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			if _, err := e.job(at).Due(context.Background(), []string{e.account}, 3); err != nil {
				t.Errorf("Due: %v", err)
			}
		})
	}
	wg.Wait()
	if n := e.count(`SELECT COUNT(*) FROM books_runs WHERE status = 'complete'`); n != 3 {
		t.Fatalf("%d complete runs, want one for each of the 3 closed days", n)
	}
	if n := e.count(`SELECT COUNT(*) FROM books_discrepancies`); n != 3 {
		t.Fatalf("%d discrepancies, want the 3 days' orphans", n)
	}
	reps, err := e.job(at).Due(context.Background(), []string{e.account}, 3)
	if err != nil || len(reps) != 0 {
		t.Fatalf("a second tick ran %d periods (%v), want none", len(reps), err)
	}
}

// An earlier attempt of a failed-over payment (design §16): its extra
// charge and the gateway's refund of it are the attempt's record; a charge
// under an attempt its check found absent is a mismatch.
func TestEarlierAttemptsAreTheGatewaysRecords(t *testing.T) {
	e := newEnv(t)
	p := e.pay("p", fake.MethodOK, 1000)
	q := e.pay("q", fake.MethodOK, 1000)
	attempt := func(x payments.Payment, order, outcome string) {
		exec(t, e.db, `INSERT INTO payment_attempts (merchant_id, payment_id, attempt, psp, merchant_order_id, outcome, started_at, ended_at)
VALUES (?, ?, 1, ?, ?, ?, NOW(6), NOW(6))`, x.MerchantID, x.ID, e.account, order, outcome)
	}
	attempt(p, "ord_attempt_returned", "extra_returned")
	attempt(q, "ord_attempt_absent", "absent")
	e.psp.PlantCharge("ord_attempt_returned", e.merch.ID, 1000, "KRW", time.Now())
	if _, err := e.psp.PlantRefund("ord_attempt_returned", "rfd_extra_return", 1000, time.Now()); err != nil {
		t.Fatal(err)
	}
	e.psp.PlantCharge("ord_attempt_absent", e.merch.ID, 1000, "KRW", time.Now())

	rep := e.reconcile(e.job(), false)
	wantClasses(t, rep, map[books.Class]int{books.Mismatch: 1})
	if d := rep.Discrepancies[0]; d.PaymentID != q.ID || d.Subject != "ord_attempt_absent" {
		t.Fatalf("discrepancy %+v, want payment %s's absent attempt", d, q.ID)
	}
	if got := e.payment(q.ID); got.Status != payments.RequiresReview {
		t.Fatalf("payment %s", got.Status)
	}
	if got := e.payment(p.ID); got.Status != payments.Succeeded {
		t.Fatalf("the payment whose extra charge was returned is %s", got.Status)
	}
}

// A failed-over payment whose row was lost is recorded at its current
// attempt: the order id the PSP holds is its second attempt's, and the
// earlier attempt's row, kept, is its history again.
func TestLostRowOfAFailedOverPaymentKeepsItsAttempt(t *testing.T) {
	e := newEnv(t)
	a, b := fake.New(fake.WithAccount("fake_a")), fake.New(fake.WithAccount("fake_b"))
	accounts, err := payments.NewPSPs("fake_a", map[string]psp.Adapter{"fake_a": a, "fake_b": b})
	if err != nil {
		t.Fatal(err)
	}
	breaker := routing.BreakerConfig{Window: time.Minute, MinCalls: 3, FailurePercent: 50, Cooldown: 30 * time.Second}
	if err := accounts.WithRoutes(routing.Table{Default: routing.Route{{Account: "fake_a"}, {Account: "fake_b"}}},
		routing.NewHealth(accounts.Names(), breaker, time.Now)); err != nil {
		t.Fatal(err)
	}
	e.svc = payments.NewService(e.store, accounts, payments.Config{Lease: 30 * time.Second, PSPTimeout: 5 * time.Second})
	a.FailNextCharges(fake.FaultNotProcessed, 1)
	lost := e.pay("lost", fake.MethodOK, 1234)
	if lost.PSP != "fake_b" || lost.AttemptNumber() != 2 || len(lost.Attempts) != 1 {
		t.Fatalf("payment at %s, attempt %d, earlier %+v: want a failover to fake_b", lost.PSP, lost.AttemptNumber(), lost.Attempts)
	}
	exec(t, e.db, `DELETE FROM payments WHERE id = ?`, lost.ID)

	job := e.job(func(c *books.Config) { c.PSPs = accounts })
	rep, err := job.Reconcile(context.Background(), "fake_b", e.from, e.to, false)
	if err != nil {
		t.Fatal(err)
	}
	wantClasses(t, rep, map[books.Class]int{books.OrphanCharge: 1})
	p := e.payment(lost.ID)
	if p.MerchantOrderID != lost.MerchantOrderID || p.MerchantOrderID != payments.AttemptOrderID(e.merch.ID, "lost", 2) ||
		p.AttemptNumber() != 2 || p.PSP != "fake_b" || p.Status != payments.RequiresReview {
		t.Fatalf("recorded %s at %s, attempt %d, order %s; want attempt 2's order %s", p.Status, p.PSP, p.AttemptNumber(), p.MerchantOrderID, lost.MerchantOrderID)
	}
	if len(p.Attempts) != 1 || p.Attempts[0].PSP != "fake_a" || p.Attempts[0].Number != 1 ||
		p.Attempts[0].MerchantOrderID != lost.Attempts[0].MerchantOrderID || p.Attempts[0].Outcome != lost.Attempts[0].Outcome {
		t.Fatalf("recorded history %+v, want %+v", p.Attempts, lost.Attempts)
	}
	// The first attempt's account holds nothing, and the gateway says so too.
	first, err := job.Reconcile(context.Background(), "fake_a", e.from, e.to, false)
	if err != nil {
		t.Fatal(err)
	}
	wantClasses(t, first, map[books.Class]int{})
}

// A pass that stops in the gateway's phase is resumed from the ledger's
// first page: its counts are a whole pass's, not the first one's and more.
func TestPassStoppedAmongTheGatewaysRecordsCountsOnce(t *testing.T) {
	e := newEnv(t)
	e.insertPayments("g", 0, 1000)
	for i := range 1000 {
		if i%10 != 0 { // every tenth charge is missing at the PSP: looked up, one by one
			e.psp.PlantCharge(fmt.Sprintf("ord_bulk_g_%d", i), e.merch.ID, 100, "KRW", time.Now())
		}
	}
	gatewayPages := 0
	job := e.job(func(c *books.Config) {
		c.PageSize = 100
		c.Progress = func(r books.Run) {
			if r.Phase == books.PhaseGateway && r.Counts.Checked > 0 {
				if gatewayPages++; gatewayPages == 3 {
					e.psp.FailNextLookups(1)
				}
			}
		}
	})
	rep, err := job.Reconcile(context.Background(), e.account, e.from, e.to, false)
	if err == nil || rep.Run.Status != books.RunIncomplete || rep.Run.Counts.Checked == 0 || rep.Run.Counts.Checked >= 1000 {
		t.Fatalf("first pass: %v, run %+v; want it stopped among the gateway's records", err, rep.Run)
	}
	// What the first pass sent to review is no longer a settled record.
	reviewed := e.count(`SELECT COUNT(*) FROM payments WHERE status = 'requires_review'`)
	rep = e.reconcile(job, false)
	wantClasses(t, rep, map[books.Class]int{books.MissingAtPSP: 100})
	if c := rep.Run.Counts; c.Lines != 900 || c.Matched != 900 || c.Checked != int64(1000-reviewed) {
		t.Fatalf("counts %+v after the resumed pass, want 900 lines matched and %d records checked", c, 1000-reviewed)
	}
	if n := e.count(`SELECT COUNT(*) FROM books_discrepancies`); n != 100 {
		t.Fatalf("%d discrepancies stored, want 100", n)
	}
}

// A pass rests after each page as long as Rest says, on the clock it is
// given: the books leave the database to payments.
func TestPassRestsAfterEachPage(t *testing.T) {
	e := newEnv(t)
	e.insertPayments("r", 0, 250)
	for i := range 250 {
		e.psp.PlantCharge(fmt.Sprintf("ord_bulk_r_%d", i), e.merch.ID, 100, "KRW", time.Now())
	}
	var rests []time.Duration
	job := e.job(func(c *books.Config) {
		c.PageSize, c.Rest = 100, 2
		c.Sleep = func(ctx context.Context, d time.Duration) error {
			rests = append(rests, d)
			return nil
		}
	})
	rep := e.reconcile(job, false)
	wantClasses(t, rep, map[books.Class]int{})
	// Three pages of the ledger (a rest after the first two) and three of
	// the gateway's payments (after the first two), none of refunds.
	if len(rests) != 4 {
		t.Fatalf("%d rests (%v), want 4", len(rests), rests)
	}
	for _, d := range rests {
		if d <= 0 {
			t.Fatalf("rests %v: each is twice its page's time", rests)
		}
	}
	none := e.job(func(c *books.Config) {
		c.Sleep = func(context.Context, time.Duration) error { t.Fatal("a pass without Rest rested"); return nil }
	})
	if _, err := none.Reconcile(context.Background(), e.account, e.from, e.to, true); err != nil {
		t.Fatal(err)
	}
}
