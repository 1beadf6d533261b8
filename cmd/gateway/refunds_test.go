package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"gateway/errs"
	"gateway/merchants"
	"gateway/mysql"
	"gateway/mysql/mysqltest"
	"gateway/payments"
	"gateway/psp/fake"
	"gateway/reconcile"
)

// `gateway refunds list` and `gateway refunds resolve`: a refund the PSP
// cannot tell about goes to review, ops list it and decide, with the audit
// trail and the same checks as payments.
func TestRefundsCommands(t *testing.T) {
	dbx := mysqltest.MustOpen(t)
	st := mysql.NewStore(dbx)
	ctx := context.Background()
	clk := &testClock{now: time.Now().UTC()}
	m := fake.New()
	svc := payments.NewService(st, payments.OnePSP(m), payments.Config{Lease: 30 * time.Second, PSPTimeout: time.Second, InFlightWait: time.Second, Now: clk.Now})
	mer, key, err := merchants.NewMerchant("Acme", clk.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateMerchant(ctx, mer, key); err != nil {
		t.Fatal(err)
	}
	out, err := svc.Create(ctx, payments.CreateRequest{MerchantID: mer.ID, IdempotencyKey: "p",
		Amount: payments.Money{Minor: 1500, Currency: "USD"}, PaymentMethod: fake.MethodOK})
	if err != nil {
		t.Fatal(err)
	}
	m.FailNextRefunds(fake.FaultUnknownBeforeCharge, 1)
	if _, err := svc.CreateRefund(ctx, payments.RefundRequest{MerchantID: mer.ID, PaymentID: out.SubjectID, IdempotencyKey: "r"}); errs.CodeOf(err) != errs.CodePSPUnknown {
		t.Fatalf("refund: %v", err)
	}
	clk.Advance(time.Minute)
	mysqltest.Advance(t, dbx, time.Minute)
	r := reconcile.New(st, payments.OnePSP(lookupFails{Adapter: m, orders: map[string]bool{}}), reconcile.Config{MaxAttempts: 1, Now: clk.Now})
	m.FailNextLookups(1)
	if _, err := r.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	getenv := env("GATEWAY_DATABASE_DSN", mysqltest.DSNOf(t, dbx), "GATEWAY_ACTOR", "alice")

	listed, _, err := runCmd(t, getenv, "refunds", "list", "--status", "requires_review", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Refunds []map[string]any `json:"refunds"`
		Count   int              `json:"count"`
	}
	decodeOne(t, listed, &doc)
	if doc.Count != 1 || doc.Refunds[0]["status"] != "requires_review" || doc.Refunds[0]["review_reason"] == nil {
		t.Fatalf("refunds list: %s", listed)
	}
	id := doc.Refunds[0]["id"].(string)
	table, _, err := runCmd(t, getenv, "refunds", "list", "--payment", out.SubjectID)
	if err != nil || !strings.Contains(table, id) || !strings.Contains(table, "1 refund(s)") {
		t.Fatalf("refunds list table: %v\n%s", err, table)
	}
	if _, _, err := runCmd(t, getenv, "refunds", "list", "--status", "nope"); exitCode(err) != exitUsage {
		t.Fatalf("a bad status: %v", err)
	}
	// The CLI's in-process fake cannot vouch for another process's refund: only --force records it.
	if _, _, err := runCmd(t, getenv, "refunds", "resolve", id, "--as", "failed", "--reason", "not at the PSP"); exitCode(err) != exitError || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("unforced resolve: %v", err)
	}
	done, _, err := runCmd(t, getenv, "refunds", "resolve", "--as", "failed", "--reason", "not at the PSP", "--force", id)
	if err != nil || !strings.Contains(done, "is now failed") {
		t.Fatalf("resolve: %v %s", err, done)
	}
	if n := mysqltest.Count(t, dbx, `SELECT COUNT(*) FROM refund_resolutions WHERE refund_id = ? AND actor = 'alice' AND to_status = 'failed'`, id); n != 1 {
		t.Fatal("no audit row")
	}
	if n := mysqltest.Count(t, dbx, `SELECT amount_reserved FROM payments WHERE id = ?`, out.SubjectID); n != 0 {
		t.Fatalf("the failed refund still reserves %d", n)
	}
}
