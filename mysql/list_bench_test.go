package mysql_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"gateway/listings"
	"gateway/mysql"
	"gateway/mysql/mysqltest"
)

// numbers is a derived table of n = 0 … 10^digits-1, in SQL both MariaDB
// and MySQL run: a seed of many rows is one INSERT … SELECT on the server.
func numbers(digits int) string {
	const digit = `(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)`
	var terms, tables []string
	scale := 1
	for i := range digits {
		terms = append(terms, fmt.Sprintf("%d * d%d.d", scale, i))
		tables = append(tables, fmt.Sprintf("%s AS d%d", digit, i))
		scale *= 10
	}
	return "(SELECT " + strings.Join(terms, " + ") + " AS n FROM " + strings.Join(tables, ", ") + ")"
}

// seed is a merchant's listings as the listing tests and benchmarks need
// them: count payments, count refunds (four to a payment) and count placed
// events (four to a payment), created a second apart, newest last. One row
// in every `every` is succeeded (a refund.succeeded event); the others
// failed. Merchant "a" owns ids pay_a_00000000, re_a_…, evt_a_….
type seed struct {
	merchant string // a short name: the merchant is mer_<name>
	count    int
	every    int  // 1: every row succeeded
	payments bool // payments only, no refunds or events
}

// seedBase is the creation time of a seed's row 0.
var seedBase = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func mustSeed(tb testing.TB, dbx *sqlx.DB, s seed) {
	tb.Helper()
	digits := len(fmt.Sprint(s.count - 1))
	from := numbers(digits) + ` AS nums WHERE n < ?`
	m, pre := "mer_"+s.merchant, "_"+s.merchant+"_"
	stmts := []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO payments (merchant_id, id, idem_key, merchant_order_id, status, amount, currency, payment_method, created_at, updated_at)
SELECT ?, CONCAT('pay` + pre + `', LPAD(n, 8, '0')), CONCAT('key-', n), CONCAT('order-', n),
       IF(n % ? = 0, 'succeeded', 'failed'), 1000, 'EUR', 'pm_card_ok', ? + INTERVAL n SECOND, ? + INTERVAL n SECOND
FROM ` + from, []any{m, s.every, seedBase, seedBase, s.count}},
		{`INSERT INTO refunds (merchant_id, id, payment_id, idem_key, refund_order_id, status, amount, currency, created_at, updated_at)
SELECT ?, CONCAT('re` + pre + `', LPAD(n, 8, '0')), CONCAT('pay` + pre + `', LPAD(n DIV 4, 8, '0')), CONCAT('key-', n), CONCAT('rorder-', n),
       IF(n % ? = 0, 'succeeded', 'failed'), 10, 'EUR', ? + INTERVAL n SECOND, ? + INTERVAL n SECOND
FROM ` + from, []any{m, s.every, seedBase, seedBase, s.count}},
		{`INSERT INTO events (log_pos, id, merchant_id, type, object_type, object_id, seq, data, created_at, fanned_out)
SELECT n + 1, CONCAT('evt` + pre + `', LPAD(n, 8, '0')), ?, IF(n % ? = 0, 'refund.succeeded', 'payment.failed'), 'payment',
       CONCAT('pay` + pre + `', LPAD(n DIV 4, 8, '0')), n % 4 + 1, '{}', ? + INTERVAL n SECOND, 1
FROM ` + from, []any{m, s.every, seedBase, s.count}},
	}
	if s.payments {
		stmts = stmts[:1]
	}
	ctx := context.Background()
	for _, st := range stmts {
		if _, err := dbx.ExecContext(ctx, st.sql, st.args...); err != nil {
			tb.Fatalf("seed %s: %v", m, err)
		}
	}
	if _, err := dbx.ExecContext(ctx, `ANALYZE TABLE payments, refunds, events`); err != nil {
		tb.Fatalf("analyze: %v", err)
	}
}

// BenchmarkFilteredListing reads one page of a merchant's payments with
// 200,000 of them stored, ten of which succeeded: by status, by status in
// a creation range, and unfiltered. Run it on the code before and after a
// change to the listing's SQL or indexes and compare:
//
//	GATEWAY_TEST_DSN='root@tcp(127.0.0.1:3306)/' go test ./mysql/ -run '^$' -bench FilteredListing -benchtime 20x
func BenchmarkFilteredListing(b *testing.B) {
	dbx := mysqltest.MustOpen(b)
	mustSeed(b, dbx, seed{merchant: "a", count: 200_000, every: 20_000, payments: true})
	s := mysql.NewStore(dbx)
	queries := []struct {
		name string
		q    listings.Query
	}{
		{"status", listings.Query{MerchantID: "mer_a", Limit: 10, Status: "succeeded"}},
		{"status and created", listings.Query{MerchantID: "mer_a", Limit: 10, Status: "succeeded",
			CreatedFrom: seedBase.Add(50_000 * time.Second), CreatedBefore: seedBase.Add(150_000 * time.Second)}},
		{"unfiltered", listings.Query{MerchantID: "mer_a", Limit: 10}},
	}
	for _, bq := range queries {
		b.Run(bq.name, func(b *testing.B) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			for b.Loop() {
				if _, err := s.MerchantPayments(ctx, bq.q); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
