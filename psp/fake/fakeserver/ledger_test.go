package fakeserver_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"gateway/psp/fake/fakeserver"
)

// list asks for one page of the listing of [from, to).
func (e *env) list(from, to time.Time, cursor string, limit int) (int, fakeserver.TransactionPage, string) {
	e.t.Helper()
	v := url.Values{"from": {from.Format(time.RFC3339Nano)}, "to": {to.Format(time.RFC3339Nano)}}
	if cursor != "" {
		v.Set("cursor", cursor)
	}
	if limit > 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	status, body := e.mustCall("GET", "/v1/transactions?"+v.Encode(), "")
	var page fakeserver.TransactionPage
	if status == http.StatusOK {
		if err := json.Unmarshal([]byte(body), &page); err != nil {
			e.t.Fatalf("listing answered %s: %v", body, err)
		}
	}
	return status, page, body
}

// listAll pages through [from, to) two lines at a time.
func (e *env) listAll(from, to time.Time) []fakeserver.Transaction {
	e.t.Helper()
	var all []fakeserver.Transaction
	cursor := ""
	for range 100 {
		status, page, body := e.list(from, to, cursor, 2)
		if status != http.StatusOK {
			e.t.Fatalf("listing from cursor %q = %d %s", cursor, status, body)
		}
		if len(page.Data) > 2 {
			e.t.Fatalf("a page of limit 2 has %d lines", len(page.Data))
		}
		all = append(all, page.Data...)
		if cursor = page.NextCursor; cursor == "" {
			return all
		}
	}
	e.t.Fatal("the listing never ended")
	return nil
}

// The listing shows every charge as it stands now and every refund, with
// the merchant the charge named; lines planted through the admin API are
// listed at their time, and a dropped charge is not.
func TestTransactionsAPI(t *testing.T) {
	now := time.Date(2024, 3, 5, 9, 0, 0, 0, time.UTC)
	e := newEnv(t, fakeserver.Options{Now: func() time.Time { return now }})
	withMerchant := func(order, method, capture string) string {
		b, _ := json.Marshal(fakeserver.ChargeRequest{MerchantOrderID: order, MerchantID: "mer_1", Amount: 1000, Currency: "KRW",
			PaymentMethod: method, CaptureMethod: capture})
		return string(b)
	}
	past := time.Date(2024, 3, 1, 12, 0, 0, 0, time.UTC)
	steps := []struct {
		name, method, path, body string
		status                   int
	}{
		{"charge", "POST", "/v1/charges", withMerchant("ord_1", "pm_card_ok", ""), 201},
		{"declined", "POST", "/v1/charges", charge("ord_2", "pm_card_declined", 1000), 201},
		{"authorize", "POST", "/v1/charges", withMerchant("ord_3", "pm_card_ok", "manual"), 201},
		{"capture part", "POST", "/v1/captures", `{"capture_order_id":"cap_3","merchant_order_id":"ord_3","charge_reference":"fake_ch_3","amount":400,"currency":"KRW"}`, 201},
		{"refund", "POST", "/v1/refunds", `{"refund_order_id":"rfd_1","merchant_order_id":"ord_1","charge_reference":"fake_ch_1","amount":300,"currency":"KRW"}`, 201},
		{"charge to lose", "POST", "/v1/charges", charge("ord_4", "pm_card_ok", 1000), 201},
		{"drop it", "POST", "/admin/charges/ord_4/drop", "", 204},
		{"plant a charge", "POST", "/admin/ledger/charges", `{"merchant_order_id":"ord_p","merchant_id":"mer_2","amount":5000,"currency":"USD","created_at":"2024-03-01T12:00:00Z"}`, 201},
		{"plant a dashboard refund", "POST", "/admin/ledger/refunds", `{"merchant_order_id":"ord_p","amount":2000,"created_at":"2024-03-01T12:30:00Z"}`, 201},
	}
	for _, st := range steps {
		status, body := e.mustCall(st.method, st.path, st.body)
		if status != st.status {
			t.Fatalf("%s: %s %s = %d %s; want %d", st.name, st.method, st.path, status, body, st.status)
		}
	}

	got := e.listAll(now, now.Add(time.Second))
	want := []fakeserver.Transaction{
		{Kind: "charge", MerchantOrderID: "ord_1", Reference: "fake_ch_1", Status: "succeeded", Amount: 1000, AmountCaptured: 1000, Currency: "KRW", MerchantID: "mer_1"},
		{Kind: "charge", MerchantOrderID: "ord_2", Reference: "fake_ch_2", Status: "declined", Amount: 1000, Currency: "KRW"},
		{Kind: "charge", MerchantOrderID: "ord_3", Reference: "fake_ch_3", Status: "succeeded", Amount: 1000, AmountCaptured: 400, Currency: "KRW", MerchantID: "mer_1"},
		{Kind: "refund", MerchantOrderID: "ord_1", RefundOrderID: "rfd_1", ChargeReference: "fake_ch_1", Status: "succeeded", Amount: 300, Currency: "KRW"},
	}
	if len(got) != len(want) {
		t.Fatalf("listing %+v, want %d lines", got, len(want))
	}
	for i, l := range got {
		if !l.CreatedAt.Equal(now) || l.CreatedAt.Location() != time.UTC {
			t.Errorf("line %d created at %v, want %v", i, l.CreatedAt, now)
		}
		if l.Kind == "refund" && l.Reference == "" {
			t.Errorf("refund line %d has no reference", i)
		}
		l.CreatedAt, want[i].CreatedAt = time.Time{}, time.Time{}
		if l.Kind == "refund" {
			l.Reference = ""
		}
		if l != want[i] {
			t.Errorf("line %d = %+v, want %+v", i, l, want[i])
		}
	}

	planted := e.listAll(past, past.Add(time.Hour))
	if len(planted) != 2 || planted[0].MerchantID != "mer_2" || !planted[0].CreatedAt.Equal(past) ||
		planted[1].Kind != "refund" || planted[1].ChargeReference != planted[0].Reference || planted[1].RefundOrderID != "" {
		t.Fatalf("planted lines %+v", planted)
	}
	// Half-open: a line at the period's end is the next period's.
	if before := e.listAll(past.Add(-time.Hour), past); len(before) != 0 {
		t.Fatalf("the period ending at the planted charge lists %+v", before)
	}
	if before := e.listAll(now.Add(-time.Hour), now); len(before) != 0 {
		t.Fatalf("the period ending at the charges lists %+v", before)
	}
	if status, body := e.mustCall("GET", "/v1/charges/ord_4", ""); status != 404 {
		t.Fatalf("lookup of a dropped charge = %d %s", status, body)
	}
}

func TestTransactionsAPIRefusals(t *testing.T) {
	e := newEnv(t, fakeserver.Options{})
	from, to := url.QueryEscape("2024-03-01T00:00:00Z"), url.QueryEscape("2024-03-02T00:00:00Z")
	tests := []struct {
		name, query string
		status      int
		code        string
	}{
		{"no period", "", 400, fakeserver.CodeInvalidRequest},
		{"not a time", "from=yesterday&to=" + to, 400, fakeserver.CodeInvalidRequest},
		{"empty period", "from=" + to + "&to=" + from, 400, fakeserver.CodeInvalidRequest},
		{"not a cursor", "from=" + from + "&to=" + to + "&cursor=abc", 400, fakeserver.CodeInvalidRequest},
		{"negative limit", "from=" + from + "&to=" + to + "&limit=-1", 400, fakeserver.CodeInvalidRequest},
		{"well formed", "from=" + from + "&to=" + to + "&limit=10", 200, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := e.mustCall("GET", "/v1/transactions?"+tt.query, "")
			if status != tt.status || !strings.Contains(body, tt.code) {
				t.Fatalf("GET /v1/transactions?%s = %d %s; want %d %s", tt.query, status, body, tt.status, tt.code)
			}
		})
	}
	if status, body := e.mustCall("GET", "/v1/transactions?from="+from+"&to="+to, ""); status != 200 || strings.TrimSpace(body) != `{"data":[]}` {
		t.Fatalf("an empty listing = %d %s", status, body)
	}
}

// The admin API plants, drops and fails what chaos runs need, and refuses
// what it cannot do.
func TestLedgerAdmin(t *testing.T) {
	now := time.Date(2024, 3, 5, 9, 0, 0, 0, time.UTC)
	e := newEnv(t, fakeserver.Options{Now: func() time.Time { return now }})
	steps := []struct {
		name, method, path, body string
		status                   int
		contains                 string
	}{
		{"plant", "POST", "/admin/ledger/charges", `{"merchant_order_id":"ord_p","amount":5000,"currency":"KRW"}`, 201, `"status":"succeeded"`},
		{"plant the same order", "POST", "/admin/ledger/charges", `{"merchant_order_id":"ord_p","amount":5000,"currency":"KRW"}`, 409, fakeserver.CodeOrderIDReused},
		{"plant a dashboard charge", "POST", "/admin/ledger/charges", `{"amount":700,"currency":"KRW"}`, 201, `"reference":"fake_ch_2"`},
		{"another dashboard charge", "POST", "/admin/ledger/charges", `{"amount":700,"currency":"KRW"}`, 201, `"reference":"fake_ch_3"`},
		{"plant without amount", "POST", "/admin/ledger/charges", `{"merchant_order_id":"ord_q","currency":"KRW"}`, 400, fakeserver.CodeInvalidRequest},
		{"plant unknown field", "POST", "/admin/ledger/charges", `{"merchant_order_id":"ord_q","amount":1,"currency":"KRW","status":"declined"}`, 400, fakeserver.CodeInvalidRequest},
		{"a planted charge is found", "GET", "/v1/charges/ord_p", "", 200, `"amount":5000`},
		{"plant a refund", "POST", "/admin/ledger/refunds", `{"refund_order_id":"rfd_p","merchant_order_id":"ord_p","amount":100}`, 201, `"refund_order_id":"rfd_p"`},
		{"a planted refund is found", "GET", "/v1/refunds/rfd_p", "", 200, `"amount":100`},
		{"refund of no charge", "POST", "/admin/ledger/refunds", `{"merchant_order_id":"ord_none","amount":100}`, 404, fakeserver.CodeNotFound},
		{"refund without order", "POST", "/admin/ledger/refunds", `{"amount":100}`, 400, fakeserver.CodeInvalidRequest},
		{"drop", "POST", "/admin/charges/ord_p/drop", "", 204, ""},
		{"drop again", "POST", "/admin/charges/ord_p/drop", "", 404, fakeserver.CodeNotFound},
		{"fail listings", "POST", "/admin/ledger/fail", `{"listings":2}`, 204, ""},
		{"fail a negative number", "POST", "/admin/ledger/fail", `{"listings":-1}`, 400, fakeserver.CodeInvalidRequest},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			status, body := e.mustCall(st.method, st.path, st.body)
			if status != st.status || !strings.Contains(body, st.contains) {
				t.Fatalf("%s %s = %d %s; want %d containing %s", st.method, st.path, status, body, st.status, st.contains)
			}
		})
	}
	for i := range 2 {
		if status, _, body := e.list(now, now.Add(time.Second), "", 0); status != 503 || !strings.Contains(body, fakeserver.CodeNotProcessed) {
			t.Fatalf("listing %d after 2 planted failures = %d %s", i, status, body)
		}
	}
	// The dropped charge is gone; its refund, and the dashboard charges,
	// planted now, stay.
	got := e.listAll(now, now.Add(time.Second))
	if len(got) != 3 || got[0].MerchantOrderID != "" || got[1].MerchantOrderID != "" || got[2].RefundOrderID != "rfd_p" {
		t.Fatalf("listing after the drop %+v", got)
	}
	if st := e.srv.Stats(); st.ListCalls != 4 {
		t.Fatalf("stats %+v, want 4 listings", st)
	}
}
