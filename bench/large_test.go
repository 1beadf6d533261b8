package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"gateway/mysql"
	"gateway/payments"
)

// TestFillHistoryRows fills a small history and checks that the rows the
// database made are the ones the gateway would have stored: each key's
// fingerprint, stored answer (payments.Render of its payment) and times,
// each payment's merchant order id; that merchants come in runs of
// fillRun; and that a second fill finds the history complete, and one
// after a purge puts the keys back without new payments.
func TestFillHistoryRows(t *testing.T) {
	ctx := context.Background()
	dbe, err := openDatabase(ctx, os.Getenv, newProgress(io.Discard), 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dbe.cleanup() })
	dbx, err := mysql.Open(ctx, dbe.dsn, mysql.PoolOptions{MaxOpen: fillWorkers + 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dbx.Close() })
	const rows = 2*fillChunk + 500
	n, err := fillHistory(ctx, dbx, rows, newProgress(io.Discard))
	if err != nil || n != 2*rows {
		t.Fatalf("fill: %d rows, %v; want %d", n, err, 2*rows)
	}
	var ps []struct {
		MerchantID string    `db:"merchant_id"`
		ID         string    `db:"id"`
		Key        string    `db:"idem_key"`
		Order      string    `db:"merchant_order_id"`
		Amount     int64     `db:"amount"`
		Ref        string    `db:"psp_reference"`
		Metadata   string    `db:"metadata"`
		CreatedAt  time.Time `db:"created_at"`
	}
	if err := dbx.SelectContext(ctx, &ps, `SELECT merchant_id, id, idem_key, merchant_order_id, amount, psp_reference, metadata, created_at
FROM payments WHERE id LIKE 'pay_f%' ORDER BY id`); err != nil {
		t.Fatal(err)
	}
	if len(ps) != rows {
		t.Fatalf("%d payments, want %d", len(ps), rows)
	}
	var prev time.Time
	for i, p := range ps {
		key := fmt.Sprintf("fill-%011d", i)
		if p.ID != fmt.Sprintf("pay_f%011d", i) || p.Key != key || p.MerchantID != fillMerchant((i/fillRun)%fillMerchants) ||
			p.Order != payments.MerchantOrderID(p.MerchantID, key) || p.Amount != int64(1000+i%90000) ||
			p.Ref != fmt.Sprintf("fake_ch_f%d", i) || p.Metadata != `{"channel":"web","order":"`+key+`"}` {
			t.Fatalf("payment %d: %+v", i, p)
		}
		if p.CreatedAt.Before(prev) {
			t.Fatalf("payment %d made at %s, before the one before it (%s)", i, p.CreatedAt, prev)
		}
		prev = p.CreatedAt
	}
	if age := time.Since(ps[0].CreatedAt); age < (fillDays-1)*24*time.Hour || age > (fillDays+1)*24*time.Hour {
		t.Errorf("the oldest payment is %s old, want about %d days", age, fillDays)
	}
	var ks []struct {
		Key         string    `db:"idem_key"`
		Fingerprint []byte    `db:"fingerprint"`
		Status      int       `db:"response_status"`
		Body        []byte    `db:"response_body"`
		CompletedAt time.Time `db:"completed_at"`
	}
	if err := dbx.SelectContext(ctx, &ks, `SELECT idem_key, fingerprint, response_status, response_body, completed_at
FROM idempotency_keys WHERE idem_key LIKE 'fill-%' ORDER BY idem_key`); err != nil {
		t.Fatal(err)
	}
	if len(ks) != rows {
		t.Fatalf("%d keys, want %d", len(ks), rows)
	}
	for i, k := range ks {
		p := ps[i]
		pay := payments.Payment{ID: p.ID, MerchantID: p.MerchantID, IdempotencyKey: p.Key, MerchantOrderID: p.Order,
			Status: payments.Succeeded, Amount: payments.Money{Minor: p.Amount, Currency: "USD"}, PaymentMethod: "pm_card_ok",
			Description: "Order " + p.Key, Metadata: map[string]string{"order": p.Key, "channel": "web"},
			PSP: "fake", PSPReference: p.Ref, CreatedAt: p.CreatedAt, UpdatedAt: p.CreatedAt}
		want := payments.Render(pay)
		// The database writes the time with all six fractional digits.
		want.Body = bytes.Replace(want.Body, []byte(p.CreatedAt.UTC().Format(time.RFC3339Nano)),
			[]byte(p.CreatedAt.UTC().Format("2006-01-02T15:04:05.000000Z07:00")), 1)
		fp := sha256.Sum256([]byte(p.Key))
		if k.Key != p.Key || !bytes.Equal(k.Fingerprint, fp[:]) || k.Status != want.Status || !bytes.Equal(k.Body, want.Body) ||
			!k.CompletedAt.Equal(p.CreatedAt) {
			t.Fatalf("key %d: %s %x %d\n%s\nwant %s", i, k.Key, k.Fingerprint, k.Status, k.Body, want.Body)
		}
	}

	if n, err := fillHistory(ctx, dbx, rows, newProgress(io.Discard)); err != nil || n != 0 {
		t.Fatalf("second fill: %d rows, %v; want none", n, err)
	}
	// A purge took the first chunk's keys (the oldest): the next fill writes them again.
	if _, err := dbx.ExecContext(ctx, `DELETE FROM idempotency_keys WHERE idem_key LIKE 'fill-%' AND idem_key < ?`, fmt.Sprintf("fill-%011d", fillChunk)); err != nil {
		t.Fatal(err)
	}
	if err := markPurged(ctx, dbx); err != nil {
		t.Fatal(err)
	}
	// The oldest key left is the second chunk's first: the first two are marked.
	if got := count(t, dbx, `SELECT COUNT(*) FROM bench_fill WHERE has_keys = 0`); got != 2 {
		t.Errorf("%d chunks marked as purged, want 2", got)
	}
	if n, err := fillHistory(ctx, dbx, rows, newProgress(io.Discard)); err != nil || n != fillChunk {
		t.Fatalf("fill after a purge: %d rows, %v; want %d (the purged keys)", n, err, fillChunk)
	}
	if got := count(t, dbx, `SELECT COUNT(*) FROM idempotency_keys WHERE idem_key LIKE 'fill-%'`); got != rows {
		t.Errorf("%d keys after the fill after a purge, want %d", got, rows)
	}
	if got := count(t, dbx, `SELECT COUNT(*) FROM payments WHERE id LIKE 'pay_f%'`); got != rows {
		t.Errorf("%d payments after the fill after a purge, want %d", got, rows)
	}
}

func count(t *testing.T, dbx *sqlx.DB, q string) int {
	t.Helper()
	var n int
	if err := dbx.Get(&n, q); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestPrivateBufferPool(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "GATEWAY_BENCH_BUFFER_POOL" {
				return v
			}
			return ""
		}
	}
	for _, c := range []struct {
		large  bool
		env    string
		memory int64
		want   int64
	}{
		{false, "", 64 << 30, 0},
		{true, "", 8 << 30, 2 << 30},
		{true, "", 64 << 30, 4 << 30},
		{true, "", 0, 512 << 20},
		{true, "768M", 64 << 30, 768 << 20},
		{false, "2G", 0, 2 << 30},
		{false, "3GiB", 0, 3 << 30},
		{false, "134217728", 0, 128 << 20},
	} {
		got, err := privateBufferPool(c.large, env(c.env), c.memory)
		if err != nil || got != c.want {
			t.Errorf("large=%v env=%q memory=%d: %d, %v; want %d", c.large, c.env, c.memory, got, err, c.want)
		}
	}
	for _, bad := range []string{"lots", "1T", "-1G", "1M"} {
		if _, err := privateBufferPool(true, env(bad), 0); err == nil {
			t.Errorf("GATEWAY_BENCH_BUFFER_POOL=%q accepted", bad)
		}
	}
}
