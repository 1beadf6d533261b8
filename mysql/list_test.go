package mysql_test

import (
	"context"
	"database/sql/driver"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"gateway/errs"
	"gateway/listings"
	"gateway/mysql"
	"gateway/mysql/mysqltest"
	"gateway/payments"
)

// listing is one documented filter of a listing, read through the store.
type listing struct {
	name string
	list func(ctx context.Context, s *mysql.Store) (items int, err error)
	// index is the index the page must be read on; sorts says that its
	// rows are sorted after they are read (an object's handful of events).
	index string
	sorts bool
	items int
}

func paymentsOf(q listings.Query) func(context.Context, *mysql.Store) (int, error) {
	return func(ctx context.Context, s *mysql.Store) (int, error) {
		q.MerchantID, q.Limit = "mer_a", 10
		p, err := s.MerchantPayments(ctx, q)
		return len(p.Items), err
	}
}

func refundsOf(q listings.Query) func(context.Context, *mysql.Store) (int, error) {
	return func(ctx context.Context, s *mysql.Store) (int, error) {
		q.MerchantID, q.Limit = "mer_a", 10
		p, err := s.MerchantRefunds(ctx, q)
		return len(p.Items), err
	}
}

func eventsOf(q listings.EventQuery) func(context.Context, *mysql.Store) (int, error) {
	return func(ctx context.Context, s *mysql.Store) (int, error) {
		q.MerchantID, q.Limit = "mer_a", 10
		p, err := s.MerchantEvents(ctx, q)
		return len(p.Items), err
	}
}

// at is the creation time of a seed's row n.
func at(n int) time.Time { return seedBase.Add(time.Duration(n) * time.Second) }

// documentedListings are every documented filter of GET /payments, GET /refunds,
// GET /payments/{id}/refunds and GET /events (docs/api.md), alone and with
// the others they combine with, over mustSeed's merchant "a" (4,000 rows
// of each, 5 succeeded: rows 0, 800, … 3200).
var documentedListings = []listing{
	{"payments", paymentsOf(listings.Query{}), "payments_list", false, 10},
	{"payments created in a range", paymentsOf(listings.Query{CreatedFrom: at(1000), CreatedBefore: at(1005)}), "payments_list", false, 5},
	{"payments after a cursor", paymentsOf(listings.Query{StartingAfter: "pay_a_00002000"}), "payments_list", false, 10},
	{"payments before a cursor", paymentsOf(listings.Query{EndingBefore: "pay_a_00002000"}), "payments_list", false, 10},
	{"payments by status", paymentsOf(listings.Query{Status: "succeeded"}), "payments_status", false, 5},
	{"payments by status after a cursor", paymentsOf(listings.Query{Status: "succeeded", StartingAfter: "pay_a_00002400"}), "payments_status", false, 3},
	{"payments by status before a cursor", paymentsOf(listings.Query{Status: "succeeded", EndingBefore: "pay_a_00000800"}), "payments_status", false, 3},
	{"payments by status created in a range", paymentsOf(listings.Query{Status: "succeeded", CreatedFrom: at(800), CreatedBefore: at(2400)}), "payments_status", false, 2},
	{"refunds", refundsOf(listings.Query{}), "refunds_list", false, 10},
	{"refunds created in a range", refundsOf(listings.Query{CreatedFrom: at(1000), CreatedBefore: at(1005)}), "refunds_list", false, 5},
	{"refunds by status", refundsOf(listings.Query{Status: "succeeded"}), "refunds_status", false, 5},
	{"refunds by status after a cursor", refundsOf(listings.Query{Status: "succeeded", StartingAfter: "re_a_00002400"}), "refunds_status", false, 3},
	{"refunds by status created in a range", refundsOf(listings.Query{Status: "succeeded", CreatedFrom: at(800), CreatedBefore: at(2400)}), "refunds_status", false, 2},
	{"refunds of a payment", refundsOf(listings.Query{PaymentID: "pay_a_00000200"}), "refunds_payment", false, 4},
	{"refunds of a payment by status", refundsOf(listings.Query{PaymentID: "pay_a_00000200", Status: "succeeded"}), "refunds_payment", false, 1},
	{"events", eventsOf(listings.EventQuery{}), "events_merchant", false, 10},
	{"events after a cursor", eventsOf(listings.EventQuery{StartingAfter: "evt_a_00002000"}), "events_merchant", false, 10},
	{"events by type", eventsOf(listings.EventQuery{Type: payments.EventRefundSucceeded}), "events_merchant_type", false, 5},
	{"events by type after a cursor", eventsOf(listings.EventQuery{Type: payments.EventRefundSucceeded, StartingAfter: "evt_a_00000800"}), "events_merchant_type", false, 3},
	{"events of an object", eventsOf(listings.EventQuery{ObjectID: "pay_a_00000200"}), "events_object_seq", true, 4},
	{"events of an object by type", eventsOf(listings.EventQuery{ObjectID: "pay_a_00000200", Type: payments.EventRefundSucceeded}), "events_object_seq", true, 1},
}

// maxRowsRead bounds the index and table rows a page of ten may read: its
// own eleven and a few the ranges' ends touch, never the thousands of the
// merchant's other rows.
const maxRowsRead = 20

// Every documented filter of a listing is read on an index holding the
// filter, the merchant and the listing's order: EXPLAIN names that index
// and no sort, and the server reads a page's rows only, though the
// merchant has thousands of rows of other statuses and types and another
// merchant thousands of the status asked for.
func TestListingsReadOnlyTheirRows(t *testing.T) {
	var (
		mu   sync.Mutex
		last struct {
			query string
			args  []any
		}
	)
	dbx := mysqltest.MustOpenRewritten(t, func(query string, args []driver.NamedValue) string {
		if strings.HasPrefix(query, "SELECT ") && strings.HasSuffix(query, " LIMIT ?") { // a page
			mu.Lock()
			defer mu.Unlock()
			last.query, last.args = query, nil
			for _, a := range args {
				last.args = append(last.args, a.Value)
			}
		}
		return query
	})
	setup := openSetup(t, dbx)
	mustSeed(t, setup, seed{merchant: "a", count: 4000, every: 800})
	mustSeed(t, setup, seed{merchant: "b", count: 4000, every: 1})
	s := mysql.NewStore(dbx)
	ctx := context.Background()
	for _, l := range documentedListings {
		t.Run(l.name, func(t *testing.T) {
			mu.Lock()
			last.query = ""
			mu.Unlock()
			n, err := l.list(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			if n != l.items {
				t.Fatalf("%d items, want %d", n, l.items)
			}
			mu.Lock()
			query, args := last.query, last.args
			mu.Unlock()
			if query == "" {
				t.Fatal("no page read")
			}
			plan, read := explain(t, setup, query, args)
			if plan["key"] != l.index {
				t.Errorf("read on %q, want %s; plan %v", plan["key"], l.index, plan)
			}
			if plan["type"] == "ALL" || plan["type"] == "index" {
				t.Errorf("a scan of the whole %s; plan %v", plan["key"], plan)
			}
			if strings.Contains(plan["Extra"], "filesort") != l.sorts {
				t.Errorf("Extra %q, want a sort: %v", plan["Extra"], l.sorts)
			}
			if read > maxRowsRead {
				t.Errorf("the server read %d rows for a page of %d, want at most %d; plan %v", read, n, maxRowsRead, plan)
			}
		})
	}
}

// openSetup opens a plain pool on the database of dbx, for what the test
// itself runs there.
func openSetup(tb testing.TB, dbx *sqlx.DB) *sqlx.DB {
	tb.Helper()
	setup, err := mysql.Open(context.Background(), mysqltest.DSNOf(tb, dbx), mysql.PoolOptions{MaxOpen: 4})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { setup.Close() })
	return setup
}

// explain returns the plan of query (its one row), and how many rows the
// server read running it: the session's Handler_read_* counters before and
// after, on one connection.
func explain(tb testing.TB, dbx *sqlx.DB, query string, args []any) (map[string]string, int) {
	tb.Helper()
	ctx := context.Background()
	conn, err := dbx.Connx(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close()
	rows, err := conn.QueryxContext(ctx, "EXPLAIN "+query, args...)
	if err != nil {
		tb.Fatalf("EXPLAIN %s: %v", query, err)
	}
	plan := map[string]string{}
	n := 0
	for rows.Next() {
		row := map[string]any{}
		if err := rows.MapScan(row); err != nil {
			tb.Fatal(err)
		}
		for k, v := range row {
			if b, ok := v.([]byte); ok {
				plan[k] = string(b)
			}
		}
		n++
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	rows.Close()
	if n != 1 {
		tb.Fatalf("EXPLAIN %s: %d rows, want one table read", query, n)
	}
	reads := func() int {
		var status []struct {
			Name  string `db:"Variable_name"`
			Value string `db:"Value"`
		}
		if err := sqlx.SelectContext(ctx, conn, &status, `SHOW SESSION STATUS LIKE 'Handler_read%'`); err != nil {
			tb.Fatal(err)
		}
		total := 0
		for _, st := range status {
			v, err := strconv.Atoi(st.Value)
			if err != nil {
				tb.Fatalf("%s = %q", st.Name, st.Value)
			}
			total += v
		}
		return total
	}
	before := reads()
	rs, err := conn.QueryContext(ctx, query, args...)
	if err != nil {
		tb.Fatal(err)
	}
	for rs.Next() { // the server reads as the rows are sent
	}
	if err := rs.Err(); err != nil {
		tb.Fatal(err)
	}
	rs.Close()
	return plan, reads() - before
}

// A listing whose request runs out of time stops on the server too: each
// read of every listing (the cursor's and the payment's look-ups first) is
// bounded by the request's deadline, so that a client giving up leaves no
// statement running for the next requests to pile onto.
func TestListingsStopOnTheServerAtTheirDeadline(t *testing.T) {
	var slow atomic.Bool
	dbx := mysqltest.MustOpenRewritten(t, mysqltest.SlowReads(&slow, "payments", "refunds", "events"))
	setup := openSetup(t, dbx)
	mustSeed(t, setup, seed{merchant: "a", count: 10, every: 2})
	s := mysql.NewStore(dbx)
	event := func(ctx context.Context, s *mysql.Store) (int, error) {
		_, err := s.MerchantEvent(ctx, "mer_a", "evt_a_00000001")
		return 1, err
	}
	cases := []listing{
		{name: "payments", list: paymentsOf(listings.Query{})},
		{name: "payments by status", list: paymentsOf(listings.Query{Status: "succeeded"})},
		{name: "payments after a cursor", list: paymentsOf(listings.Query{StartingAfter: "pay_a_00000005"})},
		{name: "refunds by status", list: refundsOf(listings.Query{Status: "succeeded"})},
		{name: "refunds of a payment", list: refundsOf(listings.Query{PaymentID: "pay_a_00000001"})},
		{name: "events by type", list: eventsOf(listings.EventQuery{Type: payments.EventRefundSucceeded})},
		{name: "events after a cursor", list: eventsOf(listings.EventQuery{StartingAfter: "evt_a_00000005"})},
		{name: "an event", list: event},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			slow.Store(true)
			defer slow.Store(false)
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			_, err := c.list(ctx, s)
			if !errs.Unavailable(err) {
				t.Fatalf("err = %v, want the database unavailable for now", err)
			}
			if left := mysqltest.Lingering(t, setup, mysqltest.SlowMarker, 3*time.Second); len(left) > 0 {
				t.Fatalf("still running on the server 3 s after the deadline: %q", left)
			}
		})
	}
}

func TestBoundSelect(t *testing.T) {
	tests := []struct {
		name, version string
		limit         time.Duration
		want          string
	}{
		{"MariaDB", "10.11.19-MariaDB-0+deb12u1", 4950 * time.Millisecond,
			"SET STATEMENT max_statement_time = 4.950 FOR SELECT id FROM payments WHERE merchant_id = ?"},
		{"MariaDB, under a millisecond", "11.4.2-MariaDB", time.Microsecond,
			"SET STATEMENT max_statement_time = 0.001 FOR SELECT id FROM payments WHERE merchant_id = ?"},
		{"MySQL", "8.0.36", 4950 * time.Millisecond,
			"SELECT /*+ MAX_EXECUTION_TIME(4950) */ id FROM payments WHERE merchant_id = ?"},
		{"MySQL, rounded up to a millisecond", "8.4.0-commercial", 1500 * time.Microsecond,
			"SELECT /*+ MAX_EXECUTION_TIME(2) */ id FROM payments WHERE merchant_id = ?"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := mysql.BoundSelect(tt.version, "SELECT id FROM payments WHERE merchant_id = ?", tt.limit)
			if err != nil || got != tt.want {
				t.Fatalf("BoundSelect = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
	if _, err := mysql.BoundSelect("8.0.36", "UPDATE payments SET status = ?", time.Second); err == nil {
		t.Fatal("BoundSelect of an UPDATE: no error")
	}
}
