package fakeclient_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gateway/psp"
	"gateway/psp/fake"
	"gateway/psp/fake/fakeclient"
	"gateway/psp/fake/fakeserver"
	"gateway/psp/psptest"
)

// ledgerNow is the clock of the server of newLedgerEnv.
var ledgerNow = time.Date(2024, 3, 5, 9, 0, 0, 0, time.UTC)

// ledgerEnv is a fake PSP server, its clock stopped at ledgerNow, and the
// adapter talking to it.
type ledgerEnv struct {
	t   *testing.T
	url string
	a   *fakeclient.Adapter
}

func newLedgerEnv(t *testing.T) *ledgerEnv {
	t.Helper()
	srv, err := fakeserver.New(fakeserver.Options{Now: func() time.Time { return ledgerNow }})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	t.Cleanup(srv.Close)
	return &ledgerEnv{t: t, url: ts.URL, a: mustNew(t, ts.URL)}
}

// admin posts body to the server's admin API, as a chaos run would.
func (e *ledgerEnv) admin(path, body string, want int) {
	e.t.Helper()
	res, err := http.Post(e.url+path, "application/json", bytes.NewReader([]byte(body)))
	if err != nil {
		e.t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != want {
		e.t.Fatalf("POST %s = %s, want %d", path, res.Status, want)
	}
}

// listAll pages through [from, to) limit lines at a time.
func listAll(t *testing.T, l psp.Ledger, from, to time.Time, limit int) []psp.Transaction {
	t.Helper()
	return listFrom(t, l, psp.LedgerQuery{From: from, To: to, Limit: limit})
}

// listFrom pages through q's period from q's cursor to the end.
func listFrom(t *testing.T, l psp.Ledger, q psp.LedgerQuery) []psp.Transaction {
	t.Helper()
	limit := q.Limit
	var all []psp.Transaction
	for range 1000 {
		page, err := l.ListTransactions(t.Context(), q)
		if err != nil {
			t.Fatalf("ListTransactions(cursor %q): %v", q.Cursor, err)
		}
		if limit > 0 && len(page.Transactions) > limit {
			t.Fatalf("a page of limit %d has %d lines", limit, len(page.Transactions))
		}
		all = append(all, page.Transactions...)
		if q.Cursor = page.Next; q.Cursor == "" {
			return all
		}
	}
	t.Fatal("the listing never ended")
	return nil
}

// The adapter lists what the server made, as it stands: the merchant the
// charges named, a partial capture, refunds of the charges, a charge planted
// at the server (the gateway never asked for it) in the period of its time,
// and not a charge the server lost.
func TestLedgerOverHTTP(t *testing.T) {
	e := newLedgerEnv(t)
	ctx := t.Context()
	ok, err := e.a.Charge(ctx, psp.ChargeRequest{MerchantOrderID: "ord_1", MerchantID: "mer_1", Amount: 1000, Currency: "KRW", PaymentMethod: fake.MethodOK})
	if err != nil {
		t.Fatal(err)
	}
	held, err := e.a.Charge(ctx, psp.ChargeRequest{MerchantOrderID: "ord_2", MerchantID: "mer_1", Amount: 2000, Currency: "KRW",
		PaymentMethod: fake.MethodOK, CaptureMethod: psp.CaptureManual})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.a.Capture(ctx, psp.CaptureRequest{OrderID: "cap_2", MerchantOrderID: "ord_2", ChargeReference: held.Reference, Amount: 500, Currency: "KRW"}); err != nil {
		t.Fatal(err)
	}
	declined, err := e.a.Charge(ctx, psp.ChargeRequest{MerchantOrderID: "ord_3", Amount: 3000, Currency: "KRW", PaymentMethod: fake.MethodDeclined})
	if err != nil {
		t.Fatal(err)
	}
	rf, err := e.a.Refund(ctx, psp.RefundRequest{RefundOrderID: "rfd_1", MerchantOrderID: "ord_1", ChargeReference: ok.Reference, Amount: 400, Currency: "KRW"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.a.Charge(ctx, psp.ChargeRequest{MerchantOrderID: "ord_lost", Amount: 100, Currency: "KRW", PaymentMethod: fake.MethodOK}); err != nil {
		t.Fatal(err)
	}
	e.admin("/admin/charges/ord_lost/drop", "", http.StatusNoContent)
	day := time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC)
	e.admin("/admin/ledger/charges", `{"merchant_order_id":"ord_p","merchant_id":"mer_9","amount":5000,"currency":"USD","created_at":"2024-03-01T23:59:59.999999Z"}`, http.StatusCreated)

	got := listAll(t, e.a, ledgerNow, ledgerNow.Add(time.Second), 2)
	want := []psp.Transaction{
		{Kind: psp.TransactionCharge, MerchantOrderID: "ord_1", Reference: ok.Reference, Status: "succeeded", Amount: 1000, AmountCaptured: 1000, Currency: "KRW", MerchantID: "mer_1"},
		{Kind: psp.TransactionCharge, MerchantOrderID: "ord_2", Reference: held.Reference, Status: "succeeded", Amount: 2000, AmountCaptured: 500, Currency: "KRW", MerchantID: "mer_1"},
		{Kind: psp.TransactionCharge, MerchantOrderID: "ord_3", Reference: declined.Reference, Status: "declined", Amount: 3000, Currency: "KRW"},
		{Kind: psp.TransactionRefund, MerchantOrderID: "ord_1", RefundOrderID: "rfd_1", Reference: rf.Reference, ChargeReference: ok.Reference, Status: "succeeded", Amount: 400, Currency: "KRW"},
	}
	if len(got) != len(want) {
		t.Fatalf("listing %+v, want %d lines", got, len(want))
	}
	for i, l := range got {
		if l.CreatedAt != ledgerNow {
			t.Errorf("line %d created at %v, want %v", i, l.CreatedAt, ledgerNow)
		}
		l.CreatedAt = time.Time{}
		if l != want[i] {
			t.Errorf("line %d = %+v, want %+v", i, l, want[i])
		}
	}
	// The planted charge is in the period of its time and in no other.
	for _, p := range []struct {
		from, to time.Time
		n        int
	}{
		{day, day.Add(24 * time.Hour), 1},
		{day.Add(24 * time.Hour), day.Add(48 * time.Hour), 0},
		{day.Add(-24 * time.Hour), day, 0},
	} {
		lines := listAll(t, e.a, p.from, p.to, 0)
		if len(lines) != p.n || p.n == 1 && (lines[0].MerchantID != "mer_9" || lines[0].Currency != "USD" || lines[0].Status != "succeeded") {
			t.Errorf("[%s, %s) lists %+v, want %d planted lines", p.from, p.to, lines, p.n)
		}
	}
}

// A listing page that fails is NotProcessed and is asked again from the
// same cursor: the listing then goes on as if it had not failed.
func TestLedgerResumesFromItsCursor(t *testing.T) {
	e := newLedgerEnv(t)
	for i := range 5 {
		if _, err := e.a.Charge(t.Context(), psp.ChargeRequest{MerchantOrderID: fmt.Sprintf("ord_%d", i), Amount: 100, Currency: "KRW", PaymentMethod: fake.MethodOK}); err != nil {
			t.Fatal(err)
		}
	}
	q := psp.LedgerQuery{From: ledgerNow, To: ledgerNow.Add(time.Second), Limit: 2}
	first, err := e.a.ListTransactions(t.Context(), q)
	if err != nil || len(first.Transactions) != 2 || first.Next == "" {
		t.Fatalf("first page %+v, %v", first, err)
	}
	e.admin("/admin/ledger/fail", `{"listings":1}`, http.StatusNoContent)
	q.Cursor = first.Next
	_, err = e.a.ListTransactions(t.Context(), q)
	if class, _ := psp.ClassOf(err); class != psp.NotProcessed {
		t.Fatalf("a failed page = %v, want NotProcessed", err)
	}
	rest := listAll(t, e.a, q.From, q.To, 2)
	resumed := append(first.Transactions, listFrom(t, e.a, q)...)
	if len(rest) != 5 || len(resumed) != 5 {
		t.Fatalf("%d lines listed whole, %d resumed; want 5", len(rest), len(resumed))
	}
	for i := range rest {
		if rest[i] != resumed[i] {
			t.Errorf("line %d: %+v listed whole, %+v resumed", i, rest[i], resumed[i])
		}
	}
}

// Each answer to a listing lands in its class: a page, or NotProcessed or
// Unknown; an empty period is Rejected before anything is sent, and a
// cursor the server does not know is Rejected by it.
func TestLedgerAnswers(t *testing.T) {
	from := time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC)
	line := func(kind, status, at string) string {
		return `{"kind":"` + kind + `","merchant_order_id":"ord_1","reference":"fake_ch_1","status":"` + status +
			`","amount":100,"currency":"KRW","created_at":"` + at + `"}`
	}
	page := func(lines ...string) string { return `{"data":[` + strings.Join(lines, ",") + `],"next_cursor":"7"}` }
	in := "2024-03-01T10:00:00Z"
	tests := []struct {
		name   string
		status int
		body   string
		class  psp.Class // 0: a page of one line
		is     error
	}{
		{"a page", 200, page(line("charge", "succeeded", in)), 0, nil},
		{"a refund line", 200, page(line("refund", "pending", in)), 0, nil},
		{"a cursor not of this ledger", 400, `{"error":{"code":"invalid_request","message":"x"}}`, psp.Rejected, nil},
		{"listing down", 503, `{"error":{"code":"not_processed","message":"x"}}`, psp.NotProcessed, nil},
		{"rate limited", 429, `{"error":{"code":"rate_limited","message":"x"}}`, psp.NotProcessed, nil},
		{"internal error", 500, `{"error":{"code":"internal_error","message":"x"}}`, psp.Unknown, nil},
		{"wrong route", 404, `{"error":{"code":"route_not_found","message":"x"}}`, psp.Unknown, nil},
		{"a proxy's page", 502, `<html>bad gateway</html>`, psp.Unknown, nil},
		{"unreadable", 200, `{"data":[`, psp.Unknown, nil},
		{"no data", 200, `{"next_cursor":"7"}`, psp.Unknown, nil},
		{"unknown kind", 200, page(line("capture", "succeeded", in)), psp.Unknown, nil},
		{"a refund's status on a charge", 200, page(line("charge", "refunded", in)), psp.Unknown, nil},
		{"a charge's status on a refund", 200, page(line("refund", "authorized", in)), psp.Unknown, nil},
		{"captured more than charged", 200, page(strings.Replace(line("charge", "succeeded", in), `"amount":100`, `"amount":100,"amount_captured":101`, 1)), psp.Unknown, nil},
		{"no created_at", 200, page(strings.Replace(line("charge", "succeeded", in), `,"created_at":"`+in+`"`, "", 1)), psp.Unknown, nil},
		{"a line before the period", 200, page(line("charge", "succeeded", "2024-02-29T23:59:59.999Z")), psp.Unknown, psp.ErrMismatch},
		{"a line at the period's end", 200, page(line("charge", "succeeded", "2024-03-02T00:00:00Z")), psp.Unknown, psp.ErrMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.body))
			}))
			defer ts.Close()
			got, err := mustNew(t, ts.URL).ListTransactions(t.Context(), psp.LedgerQuery{From: from, To: from.Add(24 * time.Hour)})
			if tt.class == 0 {
				if err != nil || len(got.Transactions) != 1 || got.Next != "7" || got.Transactions[0].Reference != "fake_ch_1" {
					t.Fatalf("got %+v, %v; want one line and cursor 7", got, err)
				}
				return
			}
			if class, ok := psp.ClassOf(err); !ok || class != tt.class {
				t.Fatalf("got %+v, %v; want class %s", got, err, tt.class)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Fatalf("err = %v, want %v", err, tt.is)
			}
		})
	}

	t.Run("empty period", func(t *testing.T) {
		var asked atomic.Int32
		ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { asked.Add(1) }))
		defer ts.Close()
		_, err := mustNew(t, ts.URL).ListTransactions(t.Context(), psp.LedgerQuery{From: from, To: from})
		if class, _ := psp.ClassOf(err); class != psp.Rejected || asked.Load() != 0 {
			t.Fatalf("err = %v after %d requests; want Rejected, unsent", err, asked.Load())
		}
	})
	t.Run("unreachable", func(t *testing.T) {
		_, err := mustNew(t, psptest.UnreachableURL(t)).ListTransactions(t.Context(), psp.LedgerQuery{From: from, To: from.Add(time.Hour)})
		if class, _ := psp.ClassOf(err); class != psp.NotProcessed {
			t.Fatalf("err = %v, want NotProcessed", err)
		}
	})
	t.Run("the real server's refusal of a cursor", func(t *testing.T) {
		e := newLedgerEnv(t)
		_, err := e.a.ListTransactions(t.Context(), psp.LedgerQuery{From: from, To: from.Add(time.Hour), Cursor: "not-a-position"})
		var pe *psp.Error
		if !errors.As(err, &pe) || pe.Class != psp.Rejected || pe.Code != fakeserver.CodeInvalidRequest || pe.Op != "list" {
			t.Fatalf("err = %v, want Rejected invalid_request of op list", err)
		}
	})
}

// The request carries the period as instants, the cursor as the server
// gave it, and a limit the answer can hold.
func TestLedgerRequestShape(t *testing.T) {
	var got []string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.RequestURI())
		_, _ = w.Write([]byte(`{"data":[]}`))
	}))
	defer ts.Close()
	a := mustNew(t, ts.URL)
	seoul := time.FixedZone("KST", 9*3600)
	from := time.Date(2024, 3, 1, 9, 0, 0, 500, seoul)
	for _, q := range []psp.LedgerQuery{
		{From: from, To: from.Add(time.Hour)},
		{From: from, To: from.Add(time.Hour), Cursor: "12", Limit: 10},
		{From: from, To: from.Add(time.Hour), Limit: fake.MaxLedgerPage},
	} {
		if page, err := a.ListTransactions(t.Context(), q); err != nil || page.Next != "" || len(page.Transactions) != 0 {
			t.Fatalf("ListTransactions(%+v) = %+v, %v", q, page, err)
		}
	}
	want := []string{
		"GET /v1/transactions?from=2024-03-01T00%3A00%3A00.0000005Z&to=2024-03-01T01%3A00%3A00.0000005Z",
		"GET /v1/transactions?cursor=12&from=2024-03-01T00%3A00%3A00.0000005Z&limit=10&to=2024-03-01T01%3A00%3A00.0000005Z",
		"GET /v1/transactions?from=2024-03-01T00%3A00%3A00.0000005Z&limit=2000&to=2024-03-01T01%3A00%3A00.0000005Z",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("requests\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// A charge sends the gateway's merchant, and a charge without one sends
// none.
func TestChargeSendsTheMerchant(t *testing.T) {
	var bodies []string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b bytes.Buffer
		_, _ = b.ReadFrom(r.Body)
		bodies = append(bodies, b.String())
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"merchant_order_id":"ord_1","reference":"fake_ch_1","status":"succeeded","amount":100,"currency":"KRW"}`))
	}))
	defer ts.Close()
	a := mustNew(t, ts.URL)
	for _, m := range []string{"mer_1", ""} {
		if _, err := a.Charge(t.Context(), psp.ChargeRequest{MerchantOrderID: "ord_1", MerchantID: m, Amount: 100, Currency: "KRW", PaymentMethod: fake.MethodOK}); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(bodies[0], `"merchant_id":"mer_1"`) || strings.Contains(bodies[1], "merchant_id") {
		t.Fatalf("charge bodies %q", bodies)
	}
}
