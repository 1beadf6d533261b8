package main

import (
	"context"
	"fmt"
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
	"gateway/versions"
)

// opsFixture is a database with two merchants: Acme has a succeeded and a
// declined payment, Globex one that the reconciler handed to ops.
type opsFixture struct {
	getenv                      func(string) string
	acme, globex                merchants.Merchant
	succeeded, declined, review string
}

func newOpsFixture(t *testing.T) opsFixture {
	t.Helper()
	dbx := mysqltest.MustOpen(t)
	st := mysql.NewStore(dbx)
	ctx := context.Background()
	clk := &testClock{now: time.Now().UTC()}
	// Time passes on both clocks: the gateway judges leases on the database's.
	advance := func(d time.Duration) { clk.Advance(d); mysqltest.Advance(t, dbx, d) }
	const lease, window = 30 * time.Second, time.Minute
	m := fake.New(fake.WithCreationWindow(window))
	svc := payments.NewService(st, payments.OnePSP(m), payments.Config{Lease: lease, PSPTimeout: time.Second, InFlightWait: time.Second, Now: clk.Now})
	f := opsFixture{getenv: env("GATEWAY_DATABASE_DSN", mysqltest.DSNOf(t, dbx))}
	newMerchant := func(name string) merchants.Merchant {
		mer, key, err := merchants.NewMerchant(name, clk.Now())
		if err != nil {
			t.Fatal(err)
		}
		if err := st.CreateMerchant(ctx, mer, key); err != nil {
			t.Fatal(err)
		}
		return mer
	}
	pay := func(mer merchants.Merchant, key, method string) string {
		out, err := svc.Create(ctx, payments.CreateRequest{MerchantID: mer.ID, IdempotencyKey: key,
			Amount: payments.Money{Minor: 1500, Currency: "USD"}, PaymentMethod: method})
		if err != nil && errs.CodeOf(err) != errs.CodePSPUnknown {
			t.Fatal(err)
		}
		return out.SubjectID
	}
	f.acme, f.globex = newMerchant("Acme"), newMerchant("Globex")
	f.succeeded = pay(f.acme, "a-1", fake.MethodOK)
	advance(time.Minute)
	f.declined = pay(f.acme, "a-2", fake.MethodDeclined)
	advance(time.Minute)
	// The PSP cannot answer about Globex's payment: one failed lookup sends it to review.
	m.FailNextCharges(fake.FaultUnknownBeforeCharge, 1)
	pay(f.globex, "g-1", fake.MethodOK)
	advance(lease + window + time.Second)
	adapter := lookupFails{Adapter: m, orders: map[string]bool{payments.MerchantOrderID(f.globex.ID, "g-1"): true}}
	r := reconcile.New(st, payments.OnePSP(adapter), reconcile.Config{Lease: lease, PSPTimeout: time.Second, MaxAttempts: 1, Now: clk.Now})
	if sum, err := r.RunOnce(ctx); err != nil || sum.NeedsReview != 1 {
		t.Fatalf("reconcile: %+v %v", sum, err)
	}
	p, err := st.PaymentByKey(ctx, f.globex.ID, "g-1")
	if err != nil || p.Status != payments.RequiresReview {
		t.Fatalf("review payment: %+v %v", p, err)
	}
	f.review = p.ID
	return f
}

// A merchant's API version: shown, pinned to another, a version the
// gateway does not render refused with the usage status.
func TestMerchantsVersionCommand(t *testing.T) {
	f := newOpsFixture(t)
	var v struct{ MerchantID, APIVersion, Latest string }
	read := func(out string) {
		t.Helper()
		v.MerchantID, v.APIVersion, v.Latest = "", "", ""
		var doc map[string]string
		decodeOne(t, out, &doc)
		v.MerchantID, v.APIVersion, v.Latest = doc["merchant_id"], doc["api_version"], doc["latest"]
	}
	out, _, err := runCmd(t, f.getenv, "merchants", "version", "--merchant", f.acme.ID)
	if err != nil {
		t.Fatal(err)
	}
	read(out)
	if v.MerchantID != f.acme.ID || v.APIVersion != string(versions.Latest) || v.Latest != string(versions.Latest) {
		t.Fatalf("merchants version: %s", out)
	}
	if out, _, err = runCmd(t, f.getenv, "merchants", "version", "--merchant", f.acme.ID, "--set", "2026-12-01"); err != nil {
		t.Fatal(err)
	}
	read(out)
	if v.APIVersion != "2026-12-01" {
		t.Fatalf("after --set 2026-12-01: %s", out)
	}
	out, _, err = runCmd(t, f.getenv, "merchants", "list")
	if err != nil || !strings.Contains(out, "2026-12-01") {
		t.Fatalf("merchants list does not show the version: %v\n%s", err, out)
	}
	if _, _, err := runCmd(t, f.getenv, "merchants", "version", "--merchant", f.acme.ID, "--set", "2030-01-01"); exitCode(err) != exitUsage {
		t.Fatalf("an unknown version: %v, want the usage status", err)
	}
	if _, _, err := runCmd(t, f.getenv, "merchants", "version", "--merchant", "mer_01KB0000000000000000000000", "--set", "2026-12-01"); exitCode(err) != 1 {
		t.Fatalf("an unknown merchant: %v, want exit 1", err)
	}
}

func TestMerchantsCommands(t *testing.T) {
	f := newOpsFixture(t)
	out, _, err := runCmd(t, f.getenv, "merchants", "list")
	if err != nil || !strings.Contains(out, "Acme") || !strings.Contains(out, f.globex.ID) || !strings.HasSuffix(out, "2 merchant(s)\n") {
		t.Fatalf("merchants list: %v\n%s", err, out)
	}
	out, _, err = runCmd(t, f.getenv, "merchants", "list", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	decodeOne(t, out, &doc)
	wantKeys(t, "merchants list", doc, "merchants", "count")
	ms := doc["merchants"].([]any)
	if len(ms) != 2 || doc["count"] != 2.0 {
		t.Fatalf("merchants: %v", doc)
	}
	wantKeys(t, "merchant", ms[0], "id", "name", "api_version", "created_at", "active_keys", "revoked_keys")
	if m := ms[0].(map[string]any); m["id"] != f.acme.ID || m["active_keys"] != 1.0 || m["revoked_keys"] != 0.0 {
		t.Fatalf("first merchant (zero counts included): %v", m)
	}

	// Rotation: create a key, list, revoke the old one, list again.
	out, _, err = runCmd(t, f.getenv, "merchants", "keys", "create", "--merchant", f.acme.ID)
	if err != nil {
		t.Fatal(err)
	}
	doc = nil
	decodeOne(t, out, &doc)
	wantKeys(t, "keys create", doc, "merchant_id", "api_key", "prefix")
	newPrefix := doc["prefix"].(string)
	out, _, err = runCmd(t, f.getenv, "merchants", "keys", "list", "--json", "--merchant", f.acme.ID)
	if err != nil {
		t.Fatal(err)
	}
	doc = nil
	decodeOne(t, out, &doc)
	wantKeys(t, "keys list", doc, "merchant_id", "keys", "count", "active")
	keys := doc["keys"].([]any)
	wantKeys(t, "key", keys[0], "prefix", "created_at", "revoked_at", "active")
	oldPrefix := keys[0].(map[string]any)["prefix"].(string)
	if oldPrefix == newPrefix || doc["active"] != 2.0 {
		t.Fatalf("keys: %v", doc)
	}
	if _, _, err := runCmd(t, f.getenv, "merchants", "keys", "revoke", "--merchant", f.acme.ID, "--prefix", oldPrefix); err != nil {
		t.Fatal(err)
	}
	out, _, err = runCmd(t, f.getenv, "merchants", "keys", "list", "--merchant", f.acme.ID)
	if err != nil || !strings.HasSuffix(out, "2 key(s), 1 active\n") {
		t.Fatalf("keys list: %v\n%s", err, out)
	}
	if _, _, err := runCmd(t, f.getenv, "merchants", "keys", "revoke", "--merchant", f.acme.ID, "--prefix", oldPrefix); exitCode(err) != exitError || !strings.Contains(err.Error(), "no active key") {
		t.Fatalf("revoking twice: %v", err)
	}
	// A merchant that does not exist is said so, not listed empty.
	const nope = "mer_01M8SVR4W86J66YMKHTJN3EH0A"
	for _, args := range [][]string{
		{"merchants", "keys", "list", "--merchant", nope},
		{"merchants", "publishable-keys", "list", "--merchant", nope},
		{"merchants", "origins", "list", "--merchant", nope},
	} {
		if _, _, err := runCmd(t, f.getenv, args...); exitCode(err) != exitError || !strings.Contains(fmt.Sprint(err), "no merchant "+nope) {
			t.Errorf("gateway %s: %v, want exit %d naming the merchant", strings.Join(args, " "), err, exitError)
		}
	}
	if _, _, err := runCmd(t, f.getenv, "merchants", "create", "--name", strings.Repeat("x", 300)); exitCode(err) != exitUsage {
		t.Fatalf("an invalid name is a usage error: %v", err)
	}
}

func TestPaymentsList(t *testing.T) {
	f := newOpsFixture(t)
	ids := func(args ...string) []string {
		t.Helper()
		out, _, err := runCmd(t, f.getenv, append([]string{"payments", "list", "--json"}, args...)...)
		if err != nil {
			t.Fatalf("payments list %v: %v", args, err)
		}
		var doc struct {
			Payments []map[string]any `json:"payments"`
			Count    int              `json:"count"`
			More     bool             `json:"more"`
		}
		decodeOne(t, out, &doc)
		var got []string
		for _, p := range doc.Payments {
			got = append(got, p["id"].(string))
		}
		if doc.Count != len(got) {
			t.Fatalf("count %d for %d payments", doc.Count, len(got))
		}
		if doc.More {
			got = append(got, "more")
		}
		return got
	}
	same := func(what string, got []string, want ...string) {
		t.Helper()
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: %v, want %v", what, got, want)
		}
	}
	same("all, oldest first", ids(), f.succeeded, f.declined, f.review)
	same("by status", ids("--status", "requires_review"), f.review)
	same("by merchant", ids("--merchant", f.acme.ID), f.succeeded, f.declined)
	same("by merchant and status", ids("--merchant", f.acme.ID, "--status", "declined"), f.declined)
	same("limited", ids("--limit", "2"), f.succeeded, f.declined, "more")
	same("since, relative", ids("--since", "3m"), f.declined, f.review)
	same("since, in the future", ids("--since", time.Now().Add(time.Hour).UTC().Format(time.RFC3339)))

	out, _, err := runCmd(t, f.getenv, "payments", "list", "--limit", "1")
	if err != nil || !strings.Contains(out, f.succeeded) || !strings.Contains(out, "1 payment(s); more match: raise --limit") {
		t.Fatalf("table: %v\n%s", err, out)
	}
	out, _, err = runCmd(t, f.getenv, "payments", "list", "--json", "--status", "failed")
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	decodeOne(t, out, &doc)
	wantKeys(t, "payments list", doc, "payments", "count", "limit", "more")
	if ps, ok := doc["payments"].([]any); !ok || len(ps) != 0 || doc["count"] != 0.0 {
		t.Fatalf("an empty listing is an empty array with a zero count: %v", doc)
	}
}

func TestPaymentsShowAndResolve(t *testing.T) {
	f := newOpsFixture(t)
	show := func(id string) map[string]any {
		t.Helper()
		out, _, err := runCmd(t, f.getenv, "payments", "show", id, "--json")
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		decodeOne(t, out, &doc)
		return doc
	}
	doc := show(f.review)
	wantKeys(t, "payments show", doc, "payment", "key", "resolutions")
	wantKeys(t, "payment", doc["payment"], "id", "merchant_id", "status", "amount", "currency", "payment_method",
		"merchant_order_id", "psp_reference", "decline_code", "description", "metadata", "amount_refunded", "refunded", "created_at", "updated_at", "attempts")
	wantKeys(t, "key", doc["key"], "state", "fencing_token", "charge_attempts", "charges_not_sent", "locked_until", "reconcile_after", "reconcile_attempts", "completed_at", "response_status")
	if rs := doc["resolutions"].([]any); len(rs) != 0 {
		t.Fatalf("resolutions before any: %v", rs)
	}

	// --actor or GATEWAY_ACTOR: missing, the error names both.
	_, _, err := runCmd(t, f.getenv, "payments", "resolve", f.review, "--as", "succeeded", "--reason", "found")
	if exitCode(err) != exitUsage || !strings.Contains(err.Error(), "--actor or GATEWAY_ACTOR") {
		t.Fatalf("resolve without an actor: %v", err)
	}
	// The id after the flags, the actor from the variable.
	withActor := func(k string) string {
		if k == "GATEWAY_ACTOR" {
			return "alice"
		}
		return f.getenv(k)
	}
	// This process cannot ask the payment's PSP (an in-process fake of another process): only --force records it.
	_, _, err = runCmd(t, withActor, "payments", "resolve", f.review, "--as", "succeeded", "--reason", "found")
	if exitCode(err) != exitError || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("resolve without the PSP's word: %v", err)
	}
	out, _, err := runCmd(t, withActor, "payments", "resolve", "--as", "succeeded", "--psp-reference", "ch_42",
		"--reason", "found in the PSP dashboard", "--force", f.review, "--json")
	if err != nil {
		t.Fatal(err)
	}
	doc = nil
	decodeOne(t, out, &doc)
	wantKeys(t, "resolve", doc, "payment", "resolution")
	wantKeys(t, "resolve's resolution", doc["resolution"], "to", "reason", "actor", "psp_reference", "force")
	if p := doc["payment"].(map[string]any); p["status"] != "succeeded" || p["psp_reference"] != "ch_42" {
		t.Fatalf("resolved payment: %v", p)
	}

	doc = show(f.review)
	rs := doc["resolutions"].([]any)
	if len(rs) != 1 {
		t.Fatalf("resolutions: %v", rs)
	}
	wantKeys(t, "resolution", rs[0], "id", "from", "to", "psp_reference", "reason", "actor", "at")
	if r := rs[0].(map[string]any); r["from"] != "requires_review" || r["to"] != "succeeded" || r["actor"] != "alice" || !strings.HasPrefix(r["reason"].(string), "found in the PSP dashboard") {
		t.Fatalf("resolution: %v", r)
	}
	out, _, err = runCmd(t, f.getenv, "payments", "show", f.review)
	if err != nil || !strings.Contains(out, "Resolutions: 1") || !strings.Contains(out, "alice") || !strings.Contains(out, "COMPLETED") {
		t.Fatalf("show: %v\n%s", err, out)
	}

	// A settled payment is corrected only with --force, and the correction joins its history.
	_, _, err = runCmd(t, withActor, "payments", "resolve", f.succeeded, "--as", "failed", "--reason", "x")
	if exitCode(err) != exitError || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("resolving a settled payment: %v", err)
	}
	if _, _, err := runCmd(t, withActor, "payments", "resolve", f.succeeded, "--as", "failed", "--reason", "refunded outside the gateway", "--force"); err != nil {
		t.Fatalf("a forced correction: %v", err)
	}
	if rs := show(f.succeeded)["resolutions"].([]any); len(rs) != 1 || rs[0].(map[string]any)["from"] != "succeeded" {
		t.Fatalf("the correction's history: %v", rs)
	}
	const unknown = "pay_01M8SVRZDH8JWSTQVXXY9DNHZC"
	if _, _, err := runCmd(t, f.getenv, "payments", "show", unknown); exitCode(err) != exitError || !strings.Contains(err.Error(), "no payment "+unknown) {
		t.Fatalf("show unknown: %v", err)
	}
	if _, _, err := runCmd(t, withActor, "payments", "resolve", unknown, "--as", "failed", "--reason", "x"); exitCode(err) != exitError {
		t.Fatalf("resolve unknown: %v", err)
	}
}

// Admin commands refuse a database this release cannot use, with the fix.
func TestAdminCommandsCheckTheSchema(t *testing.T) {
	dbx := mysqltest.MustOpen(t)
	getenv := env("GATEWAY_DATABASE_DSN", mysqltest.DSNOf(t, dbx))
	if _, _, err := runCmd(t, getenv, "migrate", "down", "--yes"); err != nil {
		t.Fatal(err)
	}
	_, _, err := runCmd(t, getenv, "merchants", "list")
	if exitCode(err) != exitError || !strings.Contains(err.Error(), "run `gateway migrate up` first") {
		t.Fatalf("merchants list on an old schema: %v", err)
	}
}
