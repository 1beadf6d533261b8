package toss_test

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gateway/psp"
	"gateway/psp/psptest"
	"gateway/psp/toss"
	"gateway/psp/toss/tosstest"
)

var seoul = time.FixedZone("KST", 9*60*60)

// clock is a time the test sets and the fake reads, from its own goroutine.
type clock struct{ ns atomic.Int64 }

func (c *clock) set(t time.Time)     { c.ns.Store(t.UnixNano()) }
func (c *clock) now() time.Time      { return time.Unix(0, c.ns.Load()) }
func newClock(t time.Time) *clock    { c := &clock{}; c.set(t); return c }
func kstDay(y, m, d int) time.Time   { return time.Date(y, time.Month(m), d, 0, 0, 0, 0, seoul) }
func order(n int) string             { return fmt.Sprintf("ord_%024d", n) }
func approved(orderID string) string { return "tgen_ok_" + orderID }

// listAll pages through q's period from q's cursor to its end.
func listAll(t *testing.T, l psp.Ledger, q psp.LedgerQuery) []psp.Transaction {
	t.Helper()
	var all []psp.Transaction
	for range 1000 {
		page, err := l.ListTransactions(t.Context(), q)
		if err != nil {
			t.Fatalf("ListTransactions(cursor %q): %v", q.Cursor, err)
		}
		all = append(all, page.Transactions...)
		if q.Cursor = page.Next; q.Cursor == "" {
			return all
		}
	}
	t.Fatal("the listing never ended")
	return nil
}

// A ledger of the fake's approvals, deposits and cancels, as the adapter
// lists it: approvals and deposits are charges that succeeded, cancels are
// refunds of their own transactionKey, a virtual account waiting for its
// deposit is not listed, and paging one line at a time loses and repeats
// nothing.
func TestLedgerOverTheFake(t *testing.T) {
	fake := tosstest.New(secret)
	day := kstDay(2024, 3, 1)
	clk := newClock(day.Add(9 * time.Hour))
	fake.SetClock(clk.now)
	ts := httptest.NewServer(fake)
	defer ts.Close()
	a := mustNew(t, ts.URL)
	ctx := t.Context()

	card, err := a.Charge(ctx, psp.ChargeRequest{MerchantOrderID: order(1), MerchantID: "mer_1", Amount: 15000, Currency: "KRW", PaymentMethod: approved(order(1))})
	if err != nil {
		t.Fatal(err)
	}
	clk.set(day.Add(10 * time.Hour))
	if c, err := a.Charge(ctx, psp.ChargeRequest{MerchantOrderID: order(2), Amount: 30000, Currency: "KRW", PaymentMethod: "tgen_vbank_" + order(2)}); err != nil || c.Status != psp.Pending {
		t.Fatalf("virtual account = %+v, %v", c, err)
	}
	clk.set(day.Add(11 * time.Hour))
	rf, err := a.Refund(ctx, psp.RefundRequest{RefundOrderID: "rfd_000001", MerchantOrderID: order(1), ChargeReference: card.Reference, Amount: 5000, Currency: "KRW"})
	if err != nil {
		t.Fatal(err)
	}
	clk.set(day.Add(12 * time.Hour))
	fake.Deposit(order(2), true)
	clk.set(day.Add(13 * time.Hour))
	if _, err := a.Charge(ctx, psp.ChargeRequest{MerchantOrderID: order(3), Amount: 20000, Currency: "KRW", PaymentMethod: "tgen_declined_" + order(3)}); err != nil {
		t.Fatal(err)
	}
	clk.set(day.Add(14 * time.Hour))
	rest, err := a.Refund(ctx, psp.RefundRequest{RefundOrderID: "rfd_000002", MerchantOrderID: order(1), ChargeReference: card.Reference, Amount: 10000, Currency: "KRW"})
	if err != nil {
		t.Fatal(err)
	}
	clk.set(day.Add(15 * time.Hour))
	if c, err := a.Charge(ctx, psp.ChargeRequest{MerchantOrderID: order(4), Amount: 9000, Currency: "KRW", PaymentMethod: "tgen_vbank_" + order(4)}); err != nil || c.Status != psp.Pending {
		t.Fatalf("virtual account = %+v, %v", c, err)
	}

	at := func(h int) time.Time { return day.Add(time.Duration(h) * time.Hour).UTC() }
	want := []psp.Transaction{
		{Kind: psp.TransactionCharge, MerchantOrderID: order(1), Reference: card.Reference, Status: "succeeded", Amount: 15000, AmountCaptured: 15000, Currency: "KRW", CreatedAt: at(9)},
		{Kind: psp.TransactionRefund, MerchantOrderID: order(1), Reference: rf.Reference, ChargeReference: card.Reference, Status: "succeeded", Amount: 5000, Currency: "KRW", CreatedAt: at(11)},
		{Kind: psp.TransactionCharge, MerchantOrderID: order(2), Reference: "tgen_vbank_" + order(2), Status: "succeeded", Amount: 30000, AmountCaptured: 30000, Currency: "KRW", CreatedAt: at(12)},
		{Kind: psp.TransactionRefund, MerchantOrderID: order(1), Reference: rest.Reference, ChargeReference: card.Reference, Status: "succeeded", Amount: 10000, Currency: "KRW", CreatedAt: at(14)},
	}
	for _, limit := range []int{1, 2, 0} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			got := listAll(t, a, psp.LedgerQuery{From: day, To: day.Add(24 * time.Hour), Limit: limit})
			if len(got) != len(want) {
				t.Fatalf("listing %+v, want %d lines", got, len(want))
			}
			for i := range got {
				if got[i] != want[i] {
					t.Errorf("line %d = %+v, want %+v", i, got[i], want[i])
				}
			}
		})
	}
	if got := listAll(t, a, psp.LedgerQuery{From: day.Add(24 * time.Hour), To: day.Add(48 * time.Hour)}); len(got) != 0 {
		t.Fatalf("the next day lists %+v", got)
	}
}

// A line at 23:59:59.999 KST is the day's that ends at midnight, one at
// midnight the next day's: each lands in exactly one period, whether the
// periods are listed whole or a line at a time, and whether Toss writes
// the millisecond or not.
func TestLedgerDayBoundary(t *testing.T) {
	fake := tosstest.New(secret)
	day := kstDay(2024, 3, 2)
	clk := newClock(day.Add(-time.Millisecond))
	fake.SetClock(clk.now)
	ts := httptest.NewServer(fake)
	defer ts.Close()
	a := mustNew(t, ts.URL)
	for i, at := range []time.Time{day.Add(-time.Millisecond), day, day.Add(24*time.Hour - time.Millisecond)} {
		clk.set(at)
		if _, err := a.Charge(t.Context(), psp.ChargeRequest{MerchantOrderID: order(i), Amount: 1000, Currency: "KRW", PaymentMethod: approved(order(i))}); err != nil {
			t.Fatal(err)
		}
	}
	periods := []struct {
		from, to time.Time
		want     []string
	}{
		{day.Add(-24 * time.Hour), day, []string{order(0)}},
		{day, day.Add(24 * time.Hour), []string{order(1), order(2)}},
		{day.Add(24 * time.Hour), day.Add(48 * time.Hour), nil},
	}
	for _, limit := range []int{1, 0} {
		for _, p := range periods {
			got := listAll(t, a, psp.LedgerQuery{From: p.from.UTC(), To: p.to.UTC(), Limit: limit})
			var orders []string
			for _, l := range got {
				orders = append(orders, l.MerchantOrderID)
				if l.CreatedAt.Before(p.from) || !l.CreatedAt.Before(p.to) {
					t.Errorf("[%s, %s) lists a line of %s", p.from, p.to, l.CreatedAt.In(seoul))
				}
			}
			if strings.Join(orders, " ") != strings.Join(p.want, " ") {
				t.Errorf("limit %d: [%s, %s) lists %v, want %v", limit, p.from, p.to, orders, p.want)
			}
		}
	}

	// Toss's samples write transactionAt to the second: the line of
	// 23:59:59.999 then reads 23:59:59, still the first day's.
	secondsOnly := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tosstest.Write(w, http.StatusOK, []tosstest.Transaction{
			{TransactionKey: "T1", PaymentKey: "tgen_1", OrderID: order(0), Status: "DONE", TransactionAt: "2024-03-01T23:59:59+09:00", Currency: "KRW", Amount: 1000},
			{TransactionKey: "T2", PaymentKey: "tgen_2", OrderID: order(1), Status: "DONE", TransactionAt: "2024-03-02T00:00:00+09:00", Currency: "KRW", Amount: 1000},
		})
	}))
	defer secondsOnly.Close()
	b := mustNew(t, secondsOnly.URL)
	for _, p := range periods[:2] {
		got := listAll(t, b, psp.LedgerQuery{From: p.from, To: p.to})
		if len(got) != 1 || got[0].MerchantOrderID != p.want[0] {
			t.Errorf("[%s, %s) lists %+v, want only %s", p.from, p.to, got, p.want[0])
		}
	}
}

// The listing asks Toss for the period in Korean date-times to the
// millisecond, both ends inclusive, wide enough for lines written to the
// second, with the cursor as startingAfter and a limit its answer can hold.
func TestLedgerRequestShape(t *testing.T) {
	var got []string
	var auth, version string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.Path+" "+r.URL.Query().Encode())
		auth, version = r.Header.Get("Authorization"), r.Header.Get("TossPayments-API-Version")
		tosstest.Write(w, http.StatusOK, []tosstest.Transaction{})
	}))
	defer ts.Close()
	a := mustNew(t, ts.URL)
	day := kstDay(2024, 3, 1)
	queries := []psp.LedgerQuery{
		{From: day.UTC(), To: day.Add(24 * time.Hour).UTC()},
		{From: day, To: day.Add(24 * time.Hour), Cursor: "42B9BB5ECF555F940E064C5D18CBE3BE", Limit: 5000},
		// Ends inside a second: from cut to its millisecond, to raised to
		// its second.
		{From: day.Add(250*time.Millisecond + 400*time.Microsecond), To: day.Add(time.Hour + 500*time.Millisecond), Limit: 10},
		{From: day.Add(-time.Hour), To: day.Add(-time.Hour + time.Microsecond), Limit: 1},
	}
	for _, q := range queries {
		if page, err := a.ListTransactions(t.Context(), q); err != nil || page.Next != "" || len(page.Transactions) != 0 {
			t.Fatalf("ListTransactions(%+v) = %+v, %v", q, page, err)
		}
	}
	want := []string{
		"GET /v1/transactions endDate=2024-03-01T23%3A59%3A59.999&limit=100&startDate=2024-03-01T00%3A00%3A00.000",
		"GET /v1/transactions endDate=2024-03-01T23%3A59%3A59.999&limit=1000&startDate=2024-03-01T00%3A00%3A00.000&startingAfter=42B9BB5ECF555F940E064C5D18CBE3BE",
		"GET /v1/transactions endDate=2024-03-01T01%3A00%3A00.999&limit=10&startDate=2024-03-01T00%3A00%3A00.250",
		"GET /v1/transactions endDate=2024-02-29T23%3A00%3A00.999&limit=1&startDate=2024-02-29T23%3A00%3A00.000",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("requests\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if auth != "Basic "+base64.StdEncoding.EncodeToString([]byte(secret+":")) || version != toss.APIVersion {
		t.Fatalf("Authorization %q, version %q", auth, version)
	}
}

// Each answer to a listing lands in its class, and each status of a line
// in its kind of line, or none.
func TestLedgerAnswers(t *testing.T) {
	day := kstDay(2024, 3, 1)
	q := psp.LedgerQuery{From: day, To: day.Add(24 * time.Hour), Limit: 2}
	line := func(status, amount string) string {
		return `{"mId":"tvivarepublica","transactionKey":"TK1","paymentKey":"tgen_1","orderId":"` + order(1) + `","method":"카드",` +
			`"customerKey":null,"useEscrow":false,"receiptUrl":"https://x","status":"` + status + `","transactionAt":"2024-03-01T12:00:00+09:00",` +
			`"currency":"KRW","amount":` + amount + `}`
	}
	type want struct {
		kind   psp.TransactionKind // "": no line
		status string
		ref    string
		amount int64
	}
	tests := []struct {
		name  string
		code  int
		body  string
		want  want
		class psp.Class
		is    error
	}{
		{"approved", 200, `[` + line("DONE", "15000.0") + `]`, want{psp.TransactionCharge, "succeeded", "tgen_1", 15000}, 0, nil},
		{"cancelled", 200, `[` + line("CANCELED", "15000") + `]`, want{psp.TransactionRefund, "succeeded", "TK1", 15000}, 0, nil},
		{"cancelled in part", 200, `[` + line("PARTIAL_CANCELED", "5000") + `]`, want{psp.TransactionRefund, "succeeded", "TK1", 5000}, 0, nil},
		{"a cancel written negative", 200, `[` + line("PARTIAL_CANCELED", "-5000") + `]`, want{psp.TransactionRefund, "succeeded", "TK1", 5000}, 0, nil},
		{"refused", 200, `[` + line("ABORTED", "15000") + `]`, want{psp.TransactionCharge, "declined", "tgen_1", 15000}, 0, nil},
		{"expired", 200, `[` + line("EXPIRED", "15000") + `]`, want{psp.TransactionCharge, "declined", "tgen_1", 15000}, 0, nil},
		{"virtual account issued", 200, `[` + line("WAITING_FOR_DEPOSIT", "0") + `]`, want{}, 0, nil},
		{"never confirmed", 200, `[` + line("IN_PROGRESS", "15000") + `]`, want{}, 0, nil},
		{"a cancel of nothing", 200, `[` + line("CANCELED", "0") + `]`, want{}, 0, nil},
		{"outside the period", 200, `[` + strings.Replace(line("DONE", "1"), "2024-03-01T12", "2024-03-02T00", 1) + `]`, want{}, 0, nil},
		{"written without an offset", 200, `[` + strings.Replace(line("DONE", "100"), "+09:00", "", 1) + `]`, want{psp.TransactionCharge, "succeeded", "tgen_1", 100}, 0, nil},
		{"an empty page", 200, `[]`, want{}, 0, nil},
		{"a status never seen", 200, `[` + line("HALF_DONE", "1") + `]`, want{}, psp.Unknown, nil},
		{"another currency", 200, `[` + strings.Replace(line("DONE", "181.56"), "KRW", "USD", 1) + `]`, want{}, psp.Unknown, psp.ErrMismatch},
		{"a fraction of a won", 200, `[` + line("DONE", "100.5") + `]`, want{}, psp.Unknown, nil},
		{"no transactionAt", 200, `[` + strings.Replace(line("DONE", "1"), "2024-03-01T12:00:00+09:00", "", 1) + `]`, want{}, psp.Unknown, nil},
		{"no paymentKey", 200, `[` + strings.Replace(line("DONE", "1"), "tgen_1", "", 1) + `]`, want{}, psp.Unknown, nil},
		{"not a list", 200, `{"code":"x"}`, want{}, psp.Unknown, nil},
		{"null", 200, `null`, want{}, psp.Unknown, nil},
		{"unreadable", 200, `[{"transactionKey":`, want{}, psp.Unknown, nil},
		{"rate limited", 429, `{"code":"TOO_MANY_REQUESTS","message":"..."}`, want{}, psp.NotProcessed, nil},
		{"bad secret key", 401, `{"code":"UNAUTHORIZED_KEY","message":"..."}`, want{}, psp.NotProcessed, nil},
		{"refused as invalid", 400, `{"code":"INVALID_REQUEST","message":"..."}`, want{}, psp.Unknown, nil},
		{"unprocessable", 422, `{"code":"INVALID_DATE","message":"..."}`, want{}, psp.Unknown, nil},
		{"internal error", 500, `{"code":"FAILED_INTERNAL_SYSTEM_PROCESSING","message":"..."}`, want{}, psp.Unknown, nil},
		{"gateway html", 502, `<html>Bad Gateway</html>`, want{}, psp.Unknown, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tt.code)
				_, _ = io.WriteString(w, tt.body)
			}))
			defer ts.Close()
			page, err := mustNew(t, ts.URL).ListTransactions(t.Context(), q)
			if tt.class != 0 {
				if class, ok := psp.ClassOf(err); !ok || class != tt.class {
					t.Fatalf("got %+v, %v; want class %s", page, err, tt.class)
				}
				if tt.is != nil && !errors.Is(err, tt.is) {
					t.Fatalf("err = %v, want %v", err, tt.is)
				}
				return
			}
			if err != nil || page.Next != "" {
				t.Fatalf("got %+v, %v; want one short page", page, err)
			}
			if tt.want.kind == "" {
				if len(page.Transactions) != 0 {
					t.Fatalf("lines %+v, want none", page.Transactions)
				}
				return
			}
			if len(page.Transactions) != 1 {
				t.Fatalf("lines %+v, want one", page.Transactions)
			}
			l := page.Transactions[0]
			if l.Kind != tt.want.kind || l.Status != tt.want.status || l.Reference != tt.want.ref || l.Amount != tt.want.amount ||
				l.MerchantOrderID != order(1) || l.Currency != "KRW" || !l.CreatedAt.Equal(day.Add(12*time.Hour)) || l.CreatedAt.Location() != time.UTC {
				t.Fatalf("line %+v, want %+v", l, tt.want)
			}
			if l.Kind == psp.TransactionRefund && (l.ChargeReference != "tgen_1" || l.AmountCaptured != 0 || l.RefundOrderID != "") {
				t.Fatalf("refund line %+v", l)
			}
		})
	}

	t.Run("a full page has a next one", func(t *testing.T) {
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// Two lines of which one is outside the period: the page is
			// still full, and its cursor the last line's.
			_, _ = io.WriteString(w, `[`+line("DONE", "1")+`,`+strings.Replace(strings.Replace(line("DONE", "1"), "TK1", "TK2", 1), "2024-03-01T12", "2024-03-02T01", 1)+`]`)
		}))
		defer ts.Close()
		page, err := mustNew(t, ts.URL).ListTransactions(t.Context(), q)
		if err != nil || len(page.Transactions) != 1 || page.Next != "TK2" {
			t.Fatalf("got %+v, %v; want one line and cursor TK2", page, err)
		}
	})
	t.Run("refused unsent", func(t *testing.T) {
		var asked atomic.Int32
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { asked.Add(1) }))
		defer ts.Close()
		a := mustNew(t, ts.URL)
		for _, bad := range []psp.LedgerQuery{
			{From: day, To: day},
			{From: day, To: day.Add(-time.Hour)},
			{From: day, To: day.Add(time.Hour), Cursor: "not a key"},
			{From: day, To: day.Add(time.Hour), Cursor: strings.Repeat("A", 65)},
		} {
			_, err := a.ListTransactions(t.Context(), bad)
			var e *psp.Error
			if !errors.As(err, &e) || e.Class != psp.Rejected || e.Op != "list" {
				t.Errorf("ListTransactions(%+v) = %v, want Rejected", bad, err)
			}
		}
		if asked.Load() != 0 {
			t.Fatalf("%d requests sent", asked.Load())
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		_, err := mustNew(t, psptest.UnreachableURL(t)).ListTransactions(t.Context(), q)
		if class, _ := psp.ClassOf(err); class != psp.NotProcessed {
			t.Fatalf("err = %v, want NotProcessed", err)
		}
	})
	t.Run("the fake's refusal of a cursor it never gave", func(t *testing.T) {
		ts := httptest.NewServer(tosstest.New(secret))
		defer ts.Close()
		_, err := mustNew(t, ts.URL).ListTransactions(t.Context(), psp.LedgerQuery{From: day, To: day.Add(time.Hour), Cursor: "txk_999"})
		if class, _ := psp.ClassOf(err); class != psp.Unknown {
			t.Fatalf("err = %v, want Unknown", err)
		}
	})
}

// The adapter is a psp.Ledger, and says nothing more in its Capabilities.
func TestTossIsALedger(t *testing.T) {
	var a psp.Adapter = mustNew(t, "http://127.0.0.1:1")
	if _, ok := psp.LedgerOf(a); !ok {
		t.Fatal("the Toss adapter does not list its ledger")
	}
}

// Toss's confirm takes no metadata: a charge sends the documented three
// fields whatever its merchant.
func TestConfirmSendsNoMerchant(t *testing.T) {
	var body string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		body = string(b)
		tosstest.Write(w, http.StatusOK, tosstest.Payment{PaymentKey: "tgen_x", OrderID: order(1), Status: "DONE", TotalAmount: 1000,
			Currency: "KRW", ApprovedAt: tosstest.Now()})
	}))
	defer ts.Close()
	if _, err := mustNew(t, ts.URL).Charge(t.Context(), psp.ChargeRequest{MerchantOrderID: order(1), MerchantID: "mer_1", Amount: 1000, Currency: "KRW", PaymentMethod: "tgen_x"}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(body, "mer_1") || strings.Contains(body, "metadata") {
		t.Fatalf("confirm body %s", body)
	}
}
