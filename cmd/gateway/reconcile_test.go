package main

import (
	"bytes"
	"context"
	"errors"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"gateway/errs"
	"gateway/merchants"
	"gateway/mysql"
	"gateway/mysql/mysqltest"
	"gateway/payments"
	"gateway/psp"
	"gateway/psp/fake"
	"gateway/reconcile"
)

type testClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// lookupFails makes the PSP unable to answer for some order ids.
type lookupFails struct {
	psp.Adapter
	orders map[string]bool
}

func (l lookupFails) Lookup(ctx context.Context, id string) (psp.Charge, error) {
	if l.orders[id] {
		return psp.Charge{}, &psp.Error{Class: psp.Unknown, Op: "lookup", Err: errors.New("timeout")}
	}
	return l.Adapter.Lookup(ctx, id)
}

// 7. `reconcile --once` over a mix of outcomes: the table, the JSON, the exit status.
func TestReconcileOnceReport(t *testing.T) {
	dbx := mysqltest.MustOpen(t)
	st := mysql.NewStore(dbx)
	clk := &testClock{now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	const lease, window = 30 * time.Second, 2 * time.Minute
	m := fake.New(fake.WithCreationWindow(window))
	svc := payments.NewService(st, payments.OnePSP(m), payments.Config{Lease: lease, PSPTimeout: time.Second, InFlightWait: time.Second, Now: clk.Now})
	merchant, key, err := merchants.NewMerchant("Acme", clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateMerchant(context.Background(), merchant, key); err != nil {
		t.Fatal(err)
	}
	lost := func(k, method string, f fake.Fault) {
		t.Helper()
		m.FailNextCharges(f, 1)
		_, err := svc.Create(context.Background(), payments.CreateRequest{
			MerchantID: merchant.ID, IdempotencyKey: k, Amount: payments.Money{Minor: 700, Currency: "EUR"}, PaymentMethod: method,
		})
		if errs.CodeOf(err) != errs.CodePSPUnknown {
			t.Fatalf("%s: %v", k, err)
		}
	}
	lost("charged", fake.MethodOK, fake.FaultUnknownAfterCharge)
	lost("declined", fake.MethodDeclined, fake.FaultUnknownAfterCharge)
	lost("never", fake.MethodOK, fake.FaultUnknownBeforeCharge)
	lost("unanswerable", fake.MethodOK, fake.FaultUnknownBeforeCharge)
	advance := func(d time.Duration) { clk.Advance(d); mysqltest.Advance(t, dbx, d) }
	advance(window + time.Second)
	lost("young", fake.MethodOK, fake.FaultUnknownBeforeCharge)
	advance(lease + time.Second)

	adapter := lookupFails{Adapter: m, orders: map[string]bool{payments.MerchantOrderID(merchant.ID, "unanswerable"): true}}
	var out, shown bytes.Buffer
	// On a terminal the pass shows its progress (the reconciler is told through its observer).
	prog := &progress{w: &shown}
	r := reconcile.New(st, payments.OnePSP(adapter), reconcile.Config{Lease: lease, PSPTimeout: time.Second, MaxAttempts: 1, Now: clk.Now,
		Observer: newPassProgress(prog)})
	err = reconcileOnce(context.Background(), r, false, &out, prog)
	if exitCode(err) != exitNeedsReview {
		t.Fatalf("exit %d (%v), want %d", exitCode(err), err, exitNeedsReview)
	}
	report := out.String()
	for _, want := range []string{
		`5 unfinished payment\(s\) examined`,
		`succeeded +1 `, `declined +1 `, `failed +0 `,
		`deferred +2 `, `requires_review +1 `, `retrying +0 `,
		`Payments needing review: 1`,
	} {
		if !regexp.MustCompile(want).MatchString(report) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	if strings.Count(report, "pay_") != 5 {
		t.Errorf("report does not list the 5 payments:\n%s", report)
	}
	if p := shown.String(); !strings.Contains(p, "reconciling: 1 examined") || !strings.HasSuffix(p, "\r\033[K") {
		t.Errorf("progress %q: want a status line, cleared before the report", p)
	}

	// A second pass has nothing to do but still reports the payment in review, as JSON.
	out.Reset()
	err = reconcileOnce(context.Background(), r, true, &out, nil)
	if exitCode(err) != exitNeedsReview {
		t.Fatalf("second pass exit %d", exitCode(err))
	}
	var doc map[string]any
	decodeOne(t, out.String(), &doc)
	wantKeys(t, "reconcile --once --json", doc, "examined", "counts", "purged_keys", "needs_review", "refunds_need_review", "elapsed_seconds", "backlog", "results")
	wantKeys(t, "backlog", doc["backlog"], "oldest_unfinished_seconds", "quarantined", "needs_review", "oldest_review_seconds", "refunds_need_review", "oldest_refund_review_seconds")
	var outcomes []string
	for _, o := range reconcile.Outcomes {
		outcomes = append(outcomes, string(o))
	}
	wantKeys(t, "counts (every outcome, zeros included)", doc["counts"], outcomes...)
	if doc["examined"] != 0.0 || doc["needs_review"] != 1.0 || len(doc["results"].([]any)) != 0 {
		t.Fatalf("second pass: %v", doc)
	}
	if _, ok := doc["elapsed_seconds"].(float64); !ok {
		t.Fatalf("elapsed_seconds: %v", doc["elapsed_seconds"])
	}

	// Ops resolve it: the pass is clean again.
	getenv := env("GATEWAY_DATABASE_DSN", mysqltest.DSNOf(t, dbx))
	listed, _, err := runCmd(t, getenv, "payments", "list", "--status", "requires_review")
	if err != nil || !strings.Contains(listed, "1 payment(s)") {
		t.Fatalf("list: %v\n%s", err, listed)
	}
	id := strings.Fields(strings.Split(listed, "\n")[1])[0]
	if _, _, err := runCmd(t, getenv, "payments", "resolve", id, "--as", "failed", "--actor", "alice"); exitCode(err) != 2 {
		t.Fatalf("resolve without a reason: %v", err)
	}
	// This process cannot ask the payment's PSP (an in-process fake of another process): only --force records it.
	if _, _, err := runCmd(t, getenv, "payments", "resolve", id, "--as", "failed", "--reason", "not in the PSP dashboard", "--actor", "alice"); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("resolve without the PSP's word: %v", err)
	}
	done, _, err := runCmd(t, getenv, "payments", "resolve", id, "--as", "failed", "--reason", "not in the PSP dashboard", "--actor", "alice", "--force")
	if err != nil || !strings.Contains(done, "is now failed") {
		t.Fatalf("resolve: %v %s", err, done)
	}
	out.Reset()
	if err := reconcileOnce(context.Background(), r, false, &out, nil); err != nil {
		t.Fatalf("after resolution: %v\n%s", err, out.String())
	}
	if m.ChargeCalls() != 5 {
		t.Fatalf("%d charge calls: the reconciler charged", m.ChargeCalls())
	}
}

func TestReconcileCommandRefusesInProcessFake(t *testing.T) {
	_, _, err := runCmd(t, env("GATEWAY_DATABASE_DSN", "root@tcp(127.0.0.1:1)/x"), "reconcile", "--once")
	if err == nil || !strings.Contains(err.Error(), "in-process") {
		t.Fatalf("err %v", err)
	}
}
