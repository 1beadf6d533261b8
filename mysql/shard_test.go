package mysql_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/oklog/ulid/v2"

	"gateway/errs"
	"gateway/idemkeys"
	"gateway/listings"
	"gateway/merchants"
	"gateway/mysql"
	"gateway/mysql/mysqltest"
	"gateway/payments"
	"gateway/review"
	"gateway/routing"
)

// The gateway is meant to move to Vitess, sharded by merchant, without a
// change to its statements: every statement a request sends must reach one
// shard. TestStatementsAreSingleShard records every statement the store
// sends while a scenario runs each of its methods on a real database, and
// checks each one with Vitess's SQL parser: single-shard, or one of the few
// scatter statements declared here with the reason they may scatter.

// scatter is a statement allowed to run on every shard: background work
// and ops, never a payment request. A statement matches when the store
// method that sent it, its verb and its first table are these.
type scatter struct {
	name   string
	method string // the Store method that sends it
	verb   string
	table  string
	// lookup names the table.column a lookup vindex routes the statement on
	// (deploy/vitess): the statement must fix it with an equality. Empty:
	// a true scatter.
	lookup string
}

var scatters = append([]scatter{
	{"the reconciler's claim scan: unfinished keys of every merchant", "ClaimStale", "SELECT", "idempotency_keys", ""},
	{"the reconciler's token bump of the keys it just claimed, of several merchants", "ClaimStale", "UPDATE", "idempotency_keys", ""},
	{"the payments of the claimed keys, by (merchant_id, id) pairs", "ClaimStale", "SELECT", "payments", ""},
	{"the refunds of the claimed keys, by (merchant_id, id) pairs", "ClaimStale", "SELECT", "refunds", ""},
	{"the review queue's scan: payments in review due for a look", "ClaimReview", "SELECT", "payments", ""},
	{"the refund check queue's scan: refunds pending or in review due for a look", "ClaimRefundChecks", "SELECT", "refunds", ""},
	{"the scan of payments waiting for their customer, due for a look", "ClaimActions", "SELECT", "payments", ""},
	{"the expiry's scan: payments awaiting confirmation past their expiry", "ExpireUnconfirmed", "SELECT", "payments", ""},
	{"a PSP's notification: the payments of the order id it names (a PSP knows no merchant)", "PaymentsByOrder", "SELECT", "payments", "payments.merchant_order_id"},
	{"a PSP's notification: the refunds of the refund order id it names", "RefundsByOrder", "SELECT", "refunds", "refunds.refund_order_id"},
	{"backlog gauges: oldest unfinished key, quarantined keys", "Backlog", "SELECT", "idempotency_keys", ""},
	{"backlog gauges: payments in review", "Backlog", "SELECT", "payments", ""},
	{"backlog gauges: refunds in review", "Backlog", "SELECT", "refunds", ""},
	{"ops: merchants with their API key counts", "Merchants", "SELECT", "merchants", ""},
	{"ops: payments by status, merchant and age, across merchants", "FindPayments", "SELECT", "payments", ""},
	{"ops: refunds by status, merchant or payment, across merchants", "FindRefunds", "SELECT", "refunds", ""},
	{"the purge's walk over completed keys past retention, in the order of their index, from a cursor", "PurgeKeys", "SELECT", "idempotency_keys", ""},
	{"the purge's delete of the keys it just read, of several merchants, by primary key", "PurgeKeys", "DELETE", "idempotency_keys", ""},
	{"the purge's walk over events past retention, in the order of their index, from a cursor", "PurgeEvents", "SELECT", "events", ""},
	{"the expiry's scan: authorizations past their capture_before", "ExpireAuthorizations", "SELECT", "payments", ""},
	{"the scan of cancellations by key still to be carried out", "ClaimCancellations", "SELECT", "key_cancellations", ""},
	{"the attempt checks' scan: earlier attempts of every merchant due for their check", "ClaimAttemptChecks", "SELECT", "payment_attempts", ""},
	{"the purge of ended webhook deliveries past retention (run it per shard: Vitess refuses a multi-shard DELETE … LIMIT)", "PurgeDeliveries", "DELETE", "webhook_deliveries", ""},
	{"the purge of the delivery log's attempts past retention (run it per shard, as the deliveries')", "PurgeDeliveries", "DELETE", "webhook_delivery_attempts", ""},
	{"ops: a payment by its id", "PaymentByID", "SELECT", "payments", "payments.id"},
	{"ops: a payment by its id, to show it with its history", "PaymentRecord", "SELECT", "payments", "payments.id"},
	{"ops: a payment by its id, locked to resolve it", "Resolve", "SELECT", "payments", "payments.id"},
	{"ops: a refund by its id", "RefundByID", "SELECT", "refunds", "refunds.id"},
	{"ops: a refund by its id, locked to resolve it", "ResolveRefund", "SELECT", "refunds", "refunds.id"},
	{"authentication: API keys by their visible prefix, before the merchant is known", "ActiveKeysByPrefix", "SELECT", "api_keys", "api_keys.prefix"},
	{"browser authentication: publishable keys by their visible prefix, before the merchant is known", "ActivePublishableKeysByPrefix", "SELECT", "publishable_keys", "publishable_keys.prefix"},
	{"the origins CORS preflights are judged against, every merchant's (a preflight carries no key), read once per auth cache TTL", "AllowedOrigins", "SELECT", "merchant_origins", ""},
}, webhookScatters...)

// sendsNothing lists the Store's methods that send no statement.
var sendsNothing = map[string]string{
	"DB":    "returns the pool",
	"Books": "returns the books job's store, whose tables are in the unsharded keyspace (deploy/vitess/README.md)",
	"Ping":  "a protocol ping, not a statement",
}

func TestStatementsAreSingleShard(t *testing.T) {
	dbx, rec := mysqltest.MustOpenRecorded(t)
	runScenario(t, mysql.NewStore(dbx), setupPool(t, dbx))

	vs := loadVSchema(t, vschemaFile)
	shardCols := vs.shardColumns()
	p := newParser(t)
	used := map[int]bool{}
	methods := map[string]bool{}
	stmts := rec.Statements()
	for _, st := range stmts {
		r, err := routeOf(p, st.SQL, shardCols)
		if err != nil {
			t.Errorf("the store sends a statement Vitess's parser refuses (%v):\n%s", err, st.SQL)
			continue
		}
		for _, callers := range st.Callers {
			method := storeMethod(callers)
			if method == "" {
				t.Errorf("a statement sent from outside the store's methods (%s):\n%s", strings.Join(callers, " < "), st.SQL)
				continue
			}
			methods[method] = true
			if r.multiTable {
				t.Errorf("Store.%s writes several tables in one statement; write each with its own, in one transaction:\n  %s",
					method, oneLine(st.SQL))
				continue
			}
			if r.singleShard() {
				continue
			}
			i := declared(r, method)
			if i < 0 {
				t.Errorf("Store.%s sends a statement that is neither single-shard nor a declared scatter:\n  %s\n  why: %s\n"+
					"Make it name its merchant (an equality on merchant_id in its WHERE, in every joined table's join or WHERE, "+
					"or merchant_id among an INSERT's VALUES), or, for background or ops work only, declare it in scatters "+
					"(mysql/shard_test.go) and in deploy/vitess/README.md.",
					method, oneLine(st.SQL), strings.Join(r.scattered, "; "))
				continue
			}
			if s := scatters[i]; s.lookup != "" && !r.pinned[s.lookup] {
				t.Errorf("Store.%s: %q is declared routed by the lookup on %s, but the statement fixes no %s:\n  %s",
					method, s.name, s.lookup, s.lookup, oneLine(st.SQL))
			}
			used[i] = true
		}
	}
	for i, s := range scatters {
		if !used[i] {
			t.Errorf("declared scatter %q (Store.%s, %s %s) was not sent by the scenario: remove it, or exercise it in runScenario",
				s.name, s.method, s.verb, s.table)
		}
	}
	st := reflect.TypeOf((*mysql.Store)(nil))
	for i := range st.NumMethod() {
		name := st.Method(i).Name
		if _, ok := sendsNothing[name]; !ok && !methods[name] {
			t.Errorf("Store.%s sent no statement in the scenario: call it in runScenario (mysql/shard_test.go), "+
				"so that its statements are checked too", name)
		}
	}
	t.Logf("%d distinct statements from %d store methods checked", len(stmts), len(methods))
}

// declared returns the index of the scatter that r, sent by method, is.
func declared(r route, method string) int {
	for i, s := range scatters {
		if s.method == method && s.verb == r.verb && len(r.tables) > 0 && r.tables[0] == s.table {
			return i
		}
	}
	return -1
}

// storeMethod names the outermost Store method among callers (innermost
// first): the store's entry point that sent the statement.
func storeMethod(callers []string) string {
	const prefix = "gateway/mysql.(*Store)."
	method := ""
	for _, f := range callers {
		if name, ok := strings.CutPrefix(f, prefix); ok {
			method, _, _ = strings.Cut(name, ".") // ClaimStale.func1 → ClaimStale
		}
	}
	return method
}

func oneLine(sql string) string { return strings.Join(strings.Fields(sql), " ") }

// TestSingleShardCheckRefuses shows that the check tells a scatter statement
// from a single-shard one.
func TestSingleShardCheckRefuses(t *testing.T) {
	shardCols := loadVSchema(t, vschemaFile).shardColumns()
	p := newParser(t)
	for _, c := range []struct {
		sql    string
		single bool
	}{
		{`SELECT id FROM payments WHERE merchant_id = ? AND id = ?`, true},
		{`SELECT id FROM payments WHERE id = ?`, false},
		{`SELECT id FROM payments WHERE merchant_id = ? OR id = ?`, false},
		{`SELECT id FROM payments WHERE (merchant_id = ? AND id = ?) OR (merchant_id = ? AND id = ?)`, false},
		{`SELECT id FROM payments WHERE merchant_id > ?`, false},
		{`SELECT id FROM payments WHERE merchant_id = NOW()`, false},
		{`SELECT k.prefix FROM api_keys k JOIN merchants m ON m.id = k.merchant_id WHERE k.merchant_id = ?`, true},
		{`SELECT k.prefix FROM api_keys k JOIN merchants m ON m.id = k.merchant_id WHERE k.prefix = ?`, false},
		{`SELECT k.prefix FROM api_keys k JOIN payments p ON p.id = k.merchant_id WHERE k.merchant_id = ?`, false},
		{`SELECT prefix FROM api_keys k JOIN merchants m ON m.id = k.merchant_id WHERE merchant_id = ?`, false},
		{`UPDATE idempotency_keys SET state = ? WHERE merchant_id = ? AND endpoint = ? AND idem_key = ? AND lease_version = ?`, true},
		{`UPDATE idempotency_keys k JOIN payments p ON p.merchant_id = k.merchant_id AND p.id = k.subject_id SET p.status = ? WHERE k.merchant_id = ?`, false},
		{`DELETE k FROM idempotency_keys k JOIN payments p ON p.merchant_id = k.merchant_id AND p.id = k.subject_id WHERE k.merchant_id = ?`, false},
		{`INSERT INTO events (id, merchant_id, type, object_type, object_id, seq, data, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, NOW(6))`, true},
		{`SELECT pos FROM events WHERE merchant_id = ? AND pos > ? ORDER BY pos LIMIT ?`, true},
		{`DELETE FROM events WHERE created_at < ? LIMIT ?`, false},
		{`UPDATE payments SET status = ? WHERE id = ?`, false},
		{`DELETE FROM idempotency_keys WHERE merchant_id = ? AND idem_key = ?`, true},
		{`DELETE FROM idempotency_keys WHERE completed_at < ?`, false},
		{`INSERT INTO payments (merchant_id, id) VALUES (?, ?)`, true},
		{`INSERT INTO payments (id) VALUES (?)`, false},
		{`INSERT INTO payments (merchant_id, id) SELECT merchant_id, id FROM refunds WHERE merchant_id = ?`, false},
		{`SELECT id FROM payments WHERE merchant_id = ? AND id IN (SELECT payment_id FROM refunds WHERE id = ?)`, false},
		{`SELECT id FROM somewhere_new WHERE merchant_id = ?`, false},
		{`SELECT NOW(6)`, true},
	} {
		r, err := routeOf(p, c.sql, shardCols)
		if err != nil {
			t.Fatalf("%s: %v", c.sql, err)
		}
		if r.singleShard() != c.single {
			t.Errorf("%s: single-shard %v, want %v (%s)", c.sql, r.singleShard(), c.single, strings.Join(r.scattered, "; "))
		}
	}
}

// unshardedTables are the migrations' tables of no merchant, kept in the
// unsharded keyspace: the books' runs and discrepancies, per PSP account.
var unshardedTables = []string{"books_runs", "books_discrepancies"}

// TestVSchemaNamesEveryTable: every table the migrations create is sharded
// in the VSchema (so a new table cannot be forgotten there), the VSchema
// names no table that does not exist, and every lookup vindex's table is
// in the lookup keyspace.
func TestVSchemaNamesEveryTable(t *testing.T) {
	p := newParser(t)
	vs := loadVSchema(t, vschemaFile)
	created := createdTables(t, p, migrationsDir)
	lookup := loadVSchema(t, lookupVSchemaFile)
	for _, table := range created {
		if slices.Contains(unshardedTables, table) {
			if _, ok := lookup.Tables[table]; !ok {
				t.Errorf("table %s is declared unsharded, but %s does not name it", table, lookupVSchemaFile)
			}
			continue
		}
		if _, ok := vs.Tables[table]; !ok {
			t.Errorf("the migrations create table %s, which %s does not name: shard it by merchant_id (the merchant vindex) there", table, vschemaFile)
		}
	}
	for table, tv := range vs.Tables {
		if !slices.Contains(created, table) {
			t.Errorf("%s names table %s, which the migrations do not create", vschemaFile, table)
		}
		if len(tv.ColumnVindexes) == 0 || tv.ColumnVindexes[0].Name != "merchant" {
			t.Errorf("%s: table %s's primary vindex must be the merchant vindex", vschemaFile, table)
		}
	}
	lookupTables := createdTables(t, p, lookupSchemaFile)
	names := make([]string, 0, len(vs.Vindexes))
	for name := range vs.Vindexes {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		v := vs.Vindexes[name]
		tbl, ok := v.Params["table"]
		if !ok {
			continue
		}
		_, short, _ := strings.Cut(tbl, ".")
		if _, ok := lookup.Tables[short]; !ok {
			t.Errorf("vindex %s: table %s is not in %s", name, tbl, lookupVSchemaFile)
		}
		if !slices.Contains(lookupTables, short) {
			t.Errorf("vindex %s: table %s is not created in %s", name, tbl, lookupSchemaFile)
		}
	}
}

// setupPool is a second pool on the recorded database, for what the
// scenario does behind the store's back (moving the clock, breaking rows):
// its statements are not the store's and are not recorded.
func setupPool(t *testing.T, dbx *sqlx.DB) *sqlx.DB {
	t.Helper()
	setup, err := mysql.Open(context.Background(), mysqltest.DSNOf(t, dbx), mysql.PoolOptions{MaxOpen: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { setup.Close() })
	return setup
}

// scenario drives the store through every method and the branches that
// send statements of their own, failing the test on any unexpected answer.
type scenario struct {
	t     *testing.T
	ctx   context.Context
	s     *mysql.Store
	setup *sqlx.DB
}

func (sc *scenario) must(err error, what string) {
	sc.t.Helper()
	if err != nil {
		sc.t.Fatalf("%s: %v", what, err)
	}
}

func (sc *scenario) mustIs(err, want error, what string) {
	sc.t.Helper()
	if !errors.Is(err, want) {
		sc.t.Fatalf("%s: got %v, want %v", what, err, want)
	}
}

func (sc *scenario) mustCode(err error, code errs.Code, what string) {
	sc.t.Helper()
	var pe *errs.Error
	if !errors.As(err, &pe) || pe.Code != code {
		sc.t.Fatalf("%s: got %v, want code %s", what, err, code)
	}
}

func (sc *scenario) exec(query string, args ...any) {
	sc.t.Helper()
	if _, err := sc.setup.ExecContext(sc.ctx, query, args...); err != nil {
		sc.t.Fatalf("%s: %v", query, err)
	}
}

func newID(prefix string) string { return prefix + "_" + ulid.Make().String() }

func (sc *scenario) merchant(name string) (merchants.Merchant, merchants.APIKey) {
	sc.t.Helper()
	m := merchants.Merchant{ID: newID("mer"), Name: name, CreatedAt: time.Now().UTC().Truncate(time.Microsecond)}
	k, err := merchants.NewAPIKey()
	sc.must(err, "new API key")
	sc.must(sc.s.CreateMerchant(sc.ctx, m, k), "CreateMerchant")
	return m, k
}

func (sc *scenario) claim(merchantID, key string, lease time.Duration) (payments.Payment, idemkeys.Ref, idemkeys.Token) {
	sc.t.Helper()
	ref := idemkeys.Ref{MerchantID: merchantID, Endpoint: payments.EndpointCreatePayment, Key: key}
	p := payments.Payment{
		ID: newID("pay"), MerchantID: merchantID, IdempotencyKey: key, MerchantOrderID: newID("ord"),
		Status: payments.Processing, Amount: payments.Money{Minor: 1000, Currency: "KRW"},
		PaymentMethod: "pm_card_ok", Description: "shard check", Metadata: map[string]string{"k": "v"}, PSP: "fake",
	}
	tok := idemkeys.FirstToken()
	c := sc.claimOf(ref, tok, lease, p)
	sc.must(sc.s.Claim(sc.ctx, c), "Claim")
	return c.Payment, ref, tok
}

// now reads the database's clock through the store.
func (sc *scenario) now() time.Time {
	sc.t.Helper()
	now, err := sc.s.Now(sc.ctx)
	sc.must(err, "Now")
	return now
}

// claimOf is the claim of ref for p, now.
func (sc *scenario) claimOf(ref idemkeys.Ref, tok idemkeys.Token, lease time.Duration, p payments.Payment) payments.Claim {
	return payments.NewClaim(ref, idemkeys.Fingerprint(ref.Key), tok, lease, p, sc.now())
}

// unconfirmed is the claim of ref for p to confirm later, expiring after
// expiry: its key completed at once with answer.
func (sc *scenario) unconfirmed(ref idemkeys.Ref, p payments.Payment, expiry time.Duration, answer idemkeys.Response) payments.Claim {
	now := sc.now()
	p.Status, p.ExpiresAt = payments.RequiresConfirmation, now.Add(expiry).Truncate(time.Microsecond)
	c := payments.NewClaim(ref, idemkeys.Fingerprint(ref.Key), idemkeys.FirstToken(), time.Minute, p, now)
	c.Answer = &answer
	return c
}

// reserving is a refund claim's decision: r, reserving amount.
func reserving(r payments.Refund, amount int64) func(payments.Payment, time.Time) (payments.RefundChange, error) {
	return payments.NewRefund(r, func(payments.Payment) (int64, error) { return amount, nil })
}

// confirming is a confirm claim's decision: the payment charged with method.
func confirming(key, method string) func(payments.Payment, time.Time) (payments.PaymentChange, error) {
	return payments.ChangePayment(func(p payments.Payment) (payments.Payment, error) {
		p.Status, p.PaymentMethod, p.ConfirmKey = payments.Processing, method, key
		return p, nil
	})
}

func (sc *scenario) claimRefund(p payments.Payment, key string, lease time.Duration) (payments.Refund, idemkeys.Ref, idemkeys.Token) {
	sc.t.Helper()
	ref := idemkeys.Ref{MerchantID: p.MerchantID, Endpoint: payments.EndpointCreateRefund, Key: key}
	r := payments.Refund{
		ID: newID("re"), MerchantID: p.MerchantID, PaymentID: p.ID, IdempotencyKey: key,
		RefundOrderID: payments.RefundOrderID(p.MerchantID, p.ID, key), Status: payments.RefundPending,
		Reason: "shard check", Metadata: map[string]string{"k": "v"},
	}
	tok := idemkeys.FirstToken()
	r, _, err := sc.s.ClaimRefund(sc.ctx, payments.RefundClaim{Ref: ref, Fingerprint: idemkeys.Fingerprint(key), Token: tok, Lease: lease, RefundID: r.ID, PaymentID: p.ID},
		reserving(r, 100))
	sc.must(err, "ClaimRefund")
	return r, ref, tok
}

func (sc *scenario) advance(d time.Duration) { mysqltest.Advance(sc.t, sc.setup, d) }

func runScenario(t *testing.T, s *mysql.Store, setup *sqlx.DB) {
	sc := &scenario{t: t, ctx: context.Background(), s: s, setup: setup}
	ctx := sc.ctx
	answer := idemkeys.Response{Status: 201, Body: []byte(`{"status":"succeeded"}`)}
	res := payments.Resolution{Reason: "shard check", Actor: "ops@example.com"}

	// Merchants and their API keys.
	m1, k1 := sc.merchant("one")
	m2, _ := sc.merchant("two")
	k3, err := merchants.NewAPIKey()
	sc.must(err, "new API key")
	sc.must(s.AddAPIKey(ctx, m1.ID, k3, time.Now()), "AddAPIKey")
	sc.mustIs(s.AddAPIKey(ctx, "mer_missing", k3, time.Now()), errs.ErrNotFound, "AddAPIKey of an unknown merchant")
	if keys, _, err := s.ActiveKeysByPrefix(ctx, k1.Prefix); err != nil || len(keys) != 1 {
		t.Fatalf("ActiveKeysByPrefix: %d keys, %v", len(keys), err)
	}
	if n, err := s.RevokeAPIKey(ctx, m1.ID, k3.Prefix, time.Now()); err != nil || n != 1 {
		t.Fatalf("RevokeAPIKey: %d, %v", n, err)
	}
	if keys, err := s.APIKeys(ctx, m1.ID); err != nil || len(keys) != 2 {
		t.Fatalf("APIKeys: %d keys, %v", len(keys), err)
	}
	sc.must(s.CausalReads(ctx), "CausalReads")

	// Browser access: a publishable key found by its prefix, listed and
	// revoked; an origin allowed (twice), found, listed and removed.
	pk, err := merchants.NewPublishableKey()
	sc.must(err, "new publishable key")
	sc.must(s.AddPublishableKey(ctx, m1.ID, pk, time.Now()), "AddPublishableKey")
	sc.mustIs(s.AddPublishableKey(ctx, "mer_missing", pk, time.Now()), errs.ErrNotFound, "AddPublishableKey of an unknown merchant")
	if keys, ms, err := s.ActivePublishableKeysByPrefix(ctx, pk.Prefix); err != nil || len(keys) != 1 || ms[0].ID != m1.ID {
		t.Fatalf("ActivePublishableKeysByPrefix: %d keys, %v", len(keys), err)
	}
	if keys, err := s.PublishableKeys(ctx, m1.ID); err != nil || len(keys) != 1 {
		t.Fatalf("PublishableKeys: %d keys, %v", len(keys), err)
	}
	if n, err := s.RevokePublishableKey(ctx, m1.ID, pk.Prefix, time.Now()); err != nil || n != 1 {
		t.Fatalf("RevokePublishableKey: %d, %v", n, err)
	}
	for i, want := range []bool{true, false} {
		if added, err := s.AddOrigin(ctx, m1.ID, "https://shop.example", time.Now()); err != nil || added != want {
			t.Fatalf("AddOrigin #%d: %v, %v; want %v", i+1, added, err, want)
		}
	}
	_, err = s.AddOrigin(ctx, "mer_missing", "https://shop.example", time.Now())
	sc.mustIs(err, errs.ErrNotFound, "AddOrigin of an unknown merchant")
	if origins, err := s.AllowedOrigins(ctx); err != nil || !slices.Contains(origins, "https://shop.example") {
		t.Fatalf("AllowedOrigins: %v, %v", origins, err)
	}
	if origins, err := s.MerchantOrigins(ctx, m1.ID); err != nil || len(origins) != 1 {
		t.Fatalf("MerchantOrigins: %v, %v", origins, err)
	}
	if removed, err := s.RemoveOrigin(ctx, m1.ID, "https://shop.example"); err != nil || !removed {
		t.Fatalf("RemoveOrigin: %v, %v", removed, err)
	}

	// A payment's life on the live path: claimed, a duplicate refused, read,
	// armed for a second charge, settled.
	p1, ref1, tok1 := sc.claim(m1.ID, "key-1", time.Minute)
	err = s.Claim(ctx, sc.claimOf(ref1, idemkeys.FirstToken(), time.Minute, payments.Payment{
		ID: newID("pay"), MerchantID: m1.ID, IdempotencyKey: "key-1", MerchantOrderID: newID("ord"), Amount: p1.Amount}))
	sc.mustIs(err, idemkeys.ErrExists, "Claim of a claimed key")
	_, err = s.Record(ctx, ref1)
	sc.must(err, "Record")
	_, _, err = s.LoadKey(ctx, ref1)
	sc.must(err, "LoadKey")
	// Its first attempt certainly did nothing: the next one, at another account.
	next := p1
	next.Attempts = []routing.Attempt{{Number: 1, PSP: p1.PSP, MerchantOrderID: p1.MerchantOrderID,
		Outcome: routing.AttemptNotProcessed, StartedAt: p1.CreatedAt}}
	next.Attempt, next.PSP, next.MerchantOrderID = 2, "fake_b", newID("ord")
	_, err = s.Failover(ctx, ref1, tok1, tok1.Next(), next, time.Minute)
	sc.must(err, "Failover")
	p1 = next
	rec1, err := s.Record(ctx, ref1)
	sc.must(err, "Record after the failover")
	tok1 = rec1.Token
	sc.must(s.ArmSend(ctx, ref1, tok1, time.Minute, payments.ArmGuard{Forever: true}), "ArmSend")
	p1.Status, p1.PSPReference = payments.Succeeded, "ch_1"
	sc.must(s.Settle(ctx, ref1, tok1, payments.PaymentSettled(p1)), "Settle")
	// The reconciler's check of its first attempt, at that attempt's account.
	attemptChecks, err := s.ClaimAttemptChecks(ctx, time.Minute, 10)
	if err != nil || len(attemptChecks) != 1 {
		t.Fatalf("ClaimAttemptChecks: %d, %v", len(attemptChecks), err)
	}
	// Looked at again at once, then recorded with the payment's review.
	sc.must(s.RecordAttemptCheck(ctx, attemptChecks[0], time.Now().Add(-time.Hour)), "RecordAttemptCheck")
	attemptChecks, err = s.ClaimAttemptChecks(ctx, time.Minute, 10)
	if err != nil || len(attemptChecks) != 1 {
		t.Fatalf("ClaimAttemptChecks again: %d, %v", len(attemptChecks), err)
	}
	attemptChecks[0].Attempt.Outcome = routing.AttemptCharged
	// (Its payment stays as it is here: decide finds nothing to change.)
	sc.must(s.ReviewAttempt(ctx, attemptChecks[0], time.Time{}, payments.ChangePayment(func(p payments.Payment) (payments.Payment, error) {
		return p, idemkeys.ErrFenced
	}), payments.Resolution{PaymentID: p1.ID, To: payments.RequiresReview, Reason: "shard check", Actor: "shard check"}), "ReviewAttempt")
	_, err = s.Payment(ctx, m1.ID, p1.ID)
	sc.must(err, "Payment")
	_, err = s.PaymentByKey(ctx, m1.ID, "key-1")
	sc.must(err, "PaymentByKey")
	_, err = s.PaymentByID(ctx, p1.ID)
	sc.must(err, "PaymentByID")

	// A retry takes over an expired lease and gives it back unsent.
	_, ref2, tok2 := sc.claim(m2.ID, "key-2", 0)
	tok2, err = s.TakeOver(ctx, ref2, tok2, 0)
	sc.must(err, "TakeOver")
	sc.must(s.Release(ctx, ref2, tok2, true), "Release")

	// Refunds of the settled payment: one claimed and settled pending at the
	// PSP, a duplicate refused, one left to the reconciler, one of an
	// unknown payment refused.
	r1, rref1, rtok1 := sc.claimRefund(p1, "refund-1", time.Minute)
	_, _, err = s.ClaimRefund(ctx, payments.RefundClaim{Ref: rref1, Token: idemkeys.FirstToken(), Lease: time.Minute, RefundID: newID("re"), PaymentID: p1.ID},
		reserving(r1, 100))
	sc.mustIs(err, idemkeys.ErrExists, "ClaimRefund of a claimed key")
	missing := payments.Refund{ID: newID("re"), MerchantID: m1.ID, PaymentID: "pay_missing", IdempotencyKey: "refund-x", RefundOrderID: newID("rord")}
	_, _, err = s.ClaimRefund(ctx, payments.RefundClaim{
		Ref:      idemkeys.Ref{MerchantID: m1.ID, Endpoint: payments.EndpointCreateRefund, Key: "refund-x"},
		Token:    idemkeys.FirstToken(),
		Lease:    time.Minute,
		RefundID: missing.ID, PaymentID: missing.PaymentID,
	}, reserving(missing, 100))
	sc.mustIs(err, errs.ErrNotFound, "ClaimRefund of an unknown payment")
	_, err = s.Refund(ctx, m1.ID, r1.ID)
	sc.must(err, "Refund")
	_, err = s.RefundByID(ctx, r1.ID)
	sc.must(err, "RefundByID")
	r1.Status = payments.RefundPending
	sc.must(s.SettleRefund(ctx, rref1, rtok1, payments.RefundSettled(r1)), "SettleRefund (pending at the PSP)")
	r2, _, _ := sc.claimRefund(p1, "refund-2", 0)
	r2b, _, _ := sc.claimRefund(p1, "refund-2b", 0)
	r3, rref3, rtok3 := sc.claimRefund(p1, "refund-3", time.Minute)
	r3.Status, r3.ReviewReason = payments.RefundRequiresReview, "shard check"
	sc.must(s.SettleRefund(ctx, rref3, rtok3, payments.RefundSettled(r3)), "SettleRefund (review)")

	// Unfinished keys for the reconciler: two payments (of two merchants)
	// and two refunds, plus one whose payment row is gone (quarantined).
	p3, _, _ := sc.claim(m1.ID, "key-3", 0)
	p4, _, _ := sc.claim(m2.ID, "key-4", 0)
	p5, _, _ := sc.claim(m1.ID, "key-5", 0)
	sc.exec(`DELETE FROM payments WHERE id = ?`, p5.ID)
	claimed, err := s.ClaimStale(ctx, time.Minute, 100)
	sc.must(err, "ClaimStale")
	if len(claimed.Pending) != 5 || len(claimed.Quarantined) != 1 {
		t.Fatalf("ClaimStale: %d pending, %d quarantined; want 5 and 1", len(claimed.Pending), len(claimed.Quarantined))
	}
	for _, pd := range claimed.Pending {
		switch {
		case pd.Refund != nil && pd.Refund.ID == r2.ID:
			r := *pd.Refund
			r.Status, r.ReviewReason = payments.RefundRequiresReview, "shard check"
			sc.must(s.SettleRefund(ctx, pd.Key.Ref, pd.Key.Token, payments.RefundSettled(r)), "SettleRefund by the reconciler")
		case pd.Refund != nil && pd.Refund.ID == r2b.ID:
			r := *pd.Refund
			r.Status, r.FailureCode = payments.RefundFailed, "shard_check"
			sc.must(s.SettleRefund(ctx, pd.Key.Ref, pd.Key.Token, payments.RefundSettled(r)), "SettleRefund (failed) by the reconciler")
		case pd.Payment.ID == p3.ID, pd.Payment.ID == p4.ID:
			p := pd.Payment
			p.Status, p.ReviewReason = payments.RequiresReview, "shard check"
			sc.must(s.Settle(ctx, pd.Key.Ref, pd.Key.Token, payments.PaymentSettled(p)), "Settle to review")
		default:
			sc.must(s.Reschedule(ctx, pd.Key.Ref, pd.Key.Token, payments.Reschedule{After: time.Minute, Attempts: 1, NotFound: true}), "Reschedule")
		}
	}

	// The review queues, once their first look is due: one unreadable row
	// of each is pushed aside.
	sc.exec(`UPDATE payments SET metadata = '{' WHERE id = ?`, p4.ID)
	sc.exec(`UPDATE refunds SET metadata = '{' WHERE id = ?`, r3.ID)
	sc.advance(payments.ReviewFirstLook + time.Second)
	inReview, err := s.ClaimReview(ctx, time.Minute, 100)
	sc.must(err, "ClaimReview")
	if len(inReview) != 1 || inReview[0].Payment.ID != p3.ID {
		t.Fatalf("ClaimReview: %d payments, want p3 alone", len(inReview))
	}
	sc.must(s.RescheduleReview(ctx, inReview[0].Payment, payments.Reschedule{After: time.Hour, Attempts: 1}), "RescheduleReview")
	_, err = s.Resolve(ctx, p3.ID, payments.ChangePayment(func(p payments.Payment) (payments.Payment, error) {
		p.Status, p.ReviewReason = payments.Succeeded, ""
		return p, nil
	}), res)
	sc.must(err, "Resolve")
	checks, err := s.ClaimRefundChecks(ctx, time.Minute, 100)
	sc.must(err, "ClaimRefundChecks")
	if len(checks) != 3 {
		t.Fatalf("ClaimRefundChecks: %d refunds, want 3 (r1 pending, r2 in review, r3 unreadable)", len(checks))
	}
	for _, c := range checks {
		if c.Unreadable != "" {
			if c.Refund.ID != r3.ID {
				t.Fatalf("ClaimRefundChecks: %s unreadable (%s), want r3 alone", c.Refund.ID, c.Unreadable)
			}
			continue
		}
		if c.Refund.ID == r1.ID {
			sc.must(s.RescheduleRefundCheck(ctx, c.Refund, payments.Reschedule{After: time.Minute, Attempts: 1}), "RescheduleRefundCheck")
			continue
		}
		_, err := s.ResolveRefund(ctx, c.Refund.ID, payments.ChangeRefund(func(r payments.Refund) (payments.Refund, error) {
			r.Status, r.ReviewReason = payments.RefundSucceeded, ""
			return r, nil
		}), res)
		sc.must(err, "ResolveRefund")
	}

	sc.exec(`UPDATE payments SET metadata = NULL WHERE id = ?`, p4.ID)
	sc.exec(`UPDATE refunds SET metadata = NULL WHERE id = ?`, r3.ID)

	// Two-step payments: one created to confirm later, confirmed (a second
	// confirm refused), waiting for its customer and looked at; one nobody
	// confirmed, canceled. A PSP's notification reads by order id and
	// hastens the looks.
	later := payments.Payment{ID: newID("pay"), MerchantID: m1.ID, IdempotencyKey: "later-1", MerchantOrderID: newID("ord"),
		Amount: payments.Money{Minor: 1000, Currency: "KRW"}, PSP: "fake"}
	lc := sc.unconfirmed(idemkeys.Ref{MerchantID: m1.ID, Endpoint: payments.EndpointCreatePayment, Key: "later-1"}, later, time.Hour, answer)
	sc.must(s.Claim(ctx, lc), "Claim (to confirm later)")
	later = lc.Payment
	confirmRef := func(key string) idemkeys.Ref {
		return idemkeys.Ref{MerchantID: m1.ID, Endpoint: payments.EndpointConfirmPayment, Key: key}
	}
	ctok := idemkeys.FirstToken()
	later, err = s.ClaimConfirm(ctx, payments.ConfirmClaim{Ref: confirmRef("confirm-1"), Token: ctok, Lease: time.Minute, PaymentID: later.ID},
		confirming("confirm-1", "pm_card_3ds"))
	sc.must(err, "ClaimConfirm")
	_, err = s.ClaimConfirm(ctx, payments.ConfirmClaim{Ref: confirmRef("confirm-2"), Token: idemkeys.FirstToken(), Lease: time.Minute, PaymentID: later.ID},
		func(p payments.Payment, _ time.Time) (payments.PaymentChange, error) {
			return payments.PaymentChange{}, &errs.Error{Code: errs.CodeNotConfirmable, Message: string(p.Status)}
		})
	sc.mustCode(err, errs.CodeNotConfirmable, "ClaimConfirm of a confirmed payment")
	if hastened, err := s.HastenKey(ctx, confirmRef("confirm-1")); err != nil || !hastened {
		t.Fatalf("HastenKey: %v, %v", hastened, err)
	}
	later.Status, later.ConfirmKey, later.NextAction = payments.RequiresAction, "confirm-1", &payments.NextAction{Type: "redirect", URL: "https://psp.example/3ds"}
	sc.must(s.Settle(ctx, confirmRef("confirm-1"), ctok, payments.PaymentSettled(later)), "Settle to requires_action")
	if ps, err := s.PaymentsByOrder(ctx, later.MerchantOrderID); err != nil || len(ps) != 1 || ps[0].NextAction == nil {
		t.Fatalf("PaymentsByOrder: %+v, %v", ps, err)
	}
	sc.must(s.HastenLook(ctx, later), "HastenLook")
	if rs, err := s.RefundsByOrder(ctx, r1.RefundOrderID); err != nil || len(rs) != 1 {
		t.Fatalf("RefundsByOrder: %d, %v", len(rs), err)
	}
	sc.must(s.HastenRefundCheck(ctx, r1), "HastenRefundCheck")
	waiting, err := s.ClaimActions(ctx, time.Minute, 100)
	sc.must(err, "ClaimActions")
	if len(waiting) != 1 || waiting[0].Payment.ID != later.ID {
		t.Fatalf("ClaimActions: %d payments, want the one waiting", len(waiting))
	}
	sc.must(s.RescheduleReview(ctx, waiting[0].Payment, payments.Reschedule{After: time.Minute, Attempts: 1}), "RescheduleReview of a payment waiting")
	for _, m := range []merchants.Merchant{m1, m2} { // two merchants' payments expire together
		unconfirmed := payments.Payment{ID: newID("pay"), MerchantID: m.ID, IdempotencyKey: "later-2", MerchantOrderID: newID("ord"),
			Amount: payments.Money{Minor: 1000, Currency: "KRW"}, PSP: "fake"}
		sc.must(s.Claim(ctx, sc.unconfirmed(idemkeys.Ref{MerchantID: m.ID, Endpoint: payments.EndpointCreatePayment, Key: "later-2"},
			unconfirmed, time.Microsecond, answer)), "Claim (to confirm later, expiring)")
	}
	sc.advance(time.Second)
	if expired, err := s.ExpireUnconfirmed(ctx, 100, payments.Expired); err != nil || len(expired) != 2 {
		t.Fatalf("ExpireUnconfirmed: %d, %v", len(expired), err)
	}

	// Gauges and ops' lists.
	_, err = s.Backlog(ctx)
	sc.must(err, "Backlog")
	_, err = s.Merchants(ctx)
	sc.must(err, "Merchants")
	_, err = s.Merchant(ctx, m1.ID)
	sc.must(err, "Merchant")
	_, err = s.Merchant(ctx, "mer_missing")
	sc.mustIs(err, errs.ErrNotFound, "Merchant of an unknown id")
	sc.must(s.SetMerchantAPIVersion(ctx, m1.ID, "2026-12-01"), "SetMerchantAPIVersion")
	sc.must(s.SetMerchantAPIVersion(ctx, m1.ID, "2026-12-02"), "SetMerchantAPIVersion back")
	_, err = s.FindPayments(ctx, review.PaymentFilter{Status: payments.RequiresReview, Since: time.Now().Add(-time.Hour), Limit: 10})
	sc.must(err, "FindPayments")
	_, err = s.PaymentRecord(ctx, p4.ID)
	sc.must(err, "PaymentRecord")
	_, err = s.FindRefunds(ctx, review.RefundFilter{Status: payments.RefundRequiresReview, Limit: 10})
	sc.must(err, "FindRefunds")

	// Merchants' listings, with every filter and both cursors.
	now := time.Now().UTC()
	for _, q := range []listings.Query{
		{MerchantID: m1.ID, Limit: 2},
		{MerchantID: m1.ID, Limit: 2, Status: string(payments.Succeeded), CreatedFrom: now.Add(-time.Hour), CreatedBefore: now.Add(time.Hour)},
		{MerchantID: m1.ID, Limit: 2, StartingAfter: p3.ID},
		{MerchantID: m1.ID, Limit: 2, EndingBefore: p1.ID},
	} {
		_, err := s.MerchantPayments(ctx, q)
		sc.must(err, fmt.Sprintf("MerchantPayments(%+v)", q))
	}
	_, err = s.MerchantPayments(ctx, listings.Query{MerchantID: m1.ID, Limit: 2, StartingAfter: "pay_missing"})
	sc.mustIs(err, listings.ErrCursorNotFound, "MerchantPayments with an unknown cursor")
	for _, q := range []listings.Query{
		{MerchantID: m1.ID, Limit: 2},
		{MerchantID: m1.ID, Limit: 2, PaymentID: p1.ID, StartingAfter: r1.ID},
		{MerchantID: m1.ID, Limit: 2, Status: string(payments.RefundSucceeded), EndingBefore: r1.ID},
	} {
		_, err := s.MerchantRefunds(ctx, q)
		sc.must(err, fmt.Sprintf("MerchantRefunds(%+v)", q))
	}
	_, err = s.MerchantRefunds(ctx, listings.Query{MerchantID: m2.ID, Limit: 2, PaymentID: p1.ID})
	sc.mustIs(err, errs.ErrNotFound, "MerchantRefunds of another merchant's payment")

	// The events API: a page, a page after a cursor with filters, one event,
	// an unknown cursor and event.
	if n, err := s.LogEvents(ctx, m1.ID, 1000); err != nil || n == 0 {
		t.Fatalf("LogEvents placed %d events: %v", n, err)
	}
	evs, err := s.MerchantEvents(ctx, listings.EventQuery{MerchantID: m1.ID, Limit: 2})
	if err != nil || len(evs.Items) != 2 {
		t.Fatalf("MerchantEvents: %+v, %v", evs, err)
	}
	_, err = s.MerchantEvents(ctx, listings.EventQuery{MerchantID: m1.ID, Limit: 2, StartingAfter: evs.Items[0].ID,
		Type: payments.EventPaymentSucceeded, ObjectID: p1.ID})
	sc.must(err, "MerchantEvents after a cursor, filtered")
	_, err = s.MerchantEvents(ctx, listings.EventQuery{MerchantID: m1.ID, Limit: 2, StartingAfter: "evt_missing"})
	sc.mustIs(err, listings.ErrCursorNotFound, "MerchantEvents with an unknown cursor")
	_, err = s.MerchantEvent(ctx, m1.ID, evs.Items[0].ID)
	sc.must(err, "MerchantEvent")
	_, err = s.MerchantEvent(ctx, m2.ID, evs.Items[0].ID)
	sc.mustIs(err, errs.ErrNotFound, "MerchantEvent of another merchant")

	// The purge, then keys reused after it: the payment and the refund they
	// made are named, never run again.
	sc.advance(48 * time.Hour)
	if n, _, _, err := s.PurgeKeys(ctx, 24*time.Hour, payments.PurgeCursor{}, 100); err != nil || n == 0 {
		t.Fatalf("PurgeKeys: %d keys, %v", n, err)
	}
	if n, _, _, err := s.PurgeEvents(ctx, 24*time.Hour, payments.EventPurgeCursor{}, 100); err != nil || n == 0 {
		t.Fatalf("PurgeEvents: %d events, %v", n, err)
	}
	if _, err := s.PurgeDeliveries(ctx, 24*time.Hour, 100); err != nil {
		t.Fatalf("PurgeDeliveries: %v", err)
	}
	err = s.Claim(ctx, sc.claimOf(ref1, idemkeys.FirstToken(), time.Minute, payments.Payment{
		ID: newID("pay"), MerchantID: m1.ID, IdempotencyKey: "key-1", MerchantOrderID: newID("ord"), Amount: p1.Amount,
		PaymentMethod: "pm_card_ok"}))
	sc.mustCode(err, errs.CodeKeyReused, "Claim of a purged key")
	again := payments.Refund{ID: newID("re"), MerchantID: m1.ID, PaymentID: p1.ID, IdempotencyKey: "refund-1", RefundOrderID: newID("rord")}
	_, _, err = s.ClaimRefund(ctx, payments.RefundClaim{Ref: rref1, Token: idemkeys.FirstToken(), Lease: time.Minute, RefundID: again.ID, PaymentID: p1.ID},
		reserving(again, 100))
	sc.mustCode(err, errs.CodeKeyReused, "ClaimRefund of a purged key")

	webhookScenario(sc, m1.ID)
	captureScenario(sc, m1.ID)
}

// captureScenario authorizes two payments, captures one (claim and
// settle), and lets the other lapse.
func captureScenario(sc *scenario, merchantID string) {
	authorize := func(key string) payments.Payment {
		ref := idemkeys.Ref{MerchantID: merchantID, Endpoint: payments.EndpointCreatePayment, Key: key}
		p := payments.Payment{
			ID: newID("pay"), MerchantID: merchantID, IdempotencyKey: key, MerchantOrderID: newID("ord"),
			Status: payments.Processing, Amount: payments.Money{Minor: 1000, Currency: "KRW"},
			PaymentMethod: "pm_card_ok", PSP: "fake", CaptureMethod: payments.CaptureManual,
		}
		tok := idemkeys.FirstToken()
		c := sc.claimOf(ref, tok, time.Minute, p)
		sc.must(sc.s.Claim(sc.ctx, c), "Claim (manual capture)")
		p = c.Payment
		p.Status, p.PSPReference, p.CaptureBefore = payments.RequiresCapture, "ch_"+key, sc.now().Add(time.Hour).Truncate(time.Microsecond)
		sc.must(sc.s.Settle(sc.ctx, ref, tok, payments.PaymentSettled(p)), "Settle (authorized)")
		return p
	}
	p, lapsing := authorize("auth-1"), authorize("auth-2")
	op := payments.Operation{Kind: payments.OpCapture, Key: "capture-1", Amount: 600}
	ref := op.Ref(merchantID)
	tok := idemkeys.FirstToken()
	claimed, err := sc.s.ClaimOperation(sc.ctx, payments.OperationClaim{Ref: ref, Fingerprint: idemkeys.Fingerprint("c"), Token: tok, Lease: time.Minute, PaymentID: p.ID},
		payments.NewOperation(op, func(payments.Payment) bool { return true }))
	sc.must(err, "ClaimOperation")
	captured := claimed
	captured.Status, captured.AmountCaptured, captured.CaptureBefore, captured.Operation = payments.Succeeded, 600, time.Time{}, nil
	sc.must(sc.s.SettleOperation(sc.ctx, ref, tok, payments.OperationSettled(payments.OpCapture, claimed, captured, false)), "SettleOperation")
	// A cancellation by key of a key nothing claimed, and one of an
	// authorization (requested, then finished).
	cancel := func(key, own string) payments.KeyCancellation {
		kc, _, err := sc.s.ClaimCancellation(sc.ctx, payments.CancelClaim{Ref: idemkeys.Ref{MerchantID: merchantID, Endpoint: payments.EndpointCancelByKey, Key: own},
			Fingerprint: idemkeys.Fingerprint(own), Token: idemkeys.FirstToken(), Target: idemkeys.Ref{MerchantID: merchantID, Endpoint: payments.EndpointCreatePayment, Key: key}},
			func(t payments.CancelTarget, now time.Time) (payments.CancelDecision, error) {
				kc := payments.KeyCancellation{MerchantID: merchantID, Key: key, CancelKey: own, Reason: payments.CancelAbandoned, Status: payments.CancellationCanceled, CreatedAt: now}
				d := payments.CancelDecision{Answer: idemkeys.Response{Status: 200, Body: []byte(`{}`)}}
				if t.Record == nil {
					d.Tombstone = &idemkeys.Response{Status: 409, Body: []byte(`{}`)}
				} else {
					kc.Status, kc.PaymentID = payments.CancellationRequested, t.Payment.ID
				}
				d.Cancellation = kc
				return d, nil
			})
		sc.must(err, "ClaimCancellation")
		return kc
	}
	cancel("never-sent", "cancel-1")
	requested := cancel("auth-2", "cancel-2")
	due, err := sc.s.ClaimCancellations(sc.ctx, time.Minute, 10)
	if err != nil || len(due) != 1 {
		sc.t.Fatalf("ClaimCancellations: %d, %v", len(due), err)
	}
	requested.Status = payments.CancellationVoided
	sc.must(sc.s.FinishCancellation(sc.ctx, requested, idemkeys.Response{Status: 200, Body: []byte(`{}`)}), "FinishCancellation")
	sc.advance(2 * time.Hour)
	expired, err := sc.s.ExpireAuthorizations(sc.ctx, 10, payments.AuthorizationExpired)
	sc.must(err, "ExpireAuthorizations")
	if len(expired) != 1 || expired[0].ID != lapsing.ID {
		sc.t.Fatalf("ExpireAuthorizations: %d payments, want the lapsing one", len(expired))
	}
}
