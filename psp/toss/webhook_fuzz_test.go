package toss_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"slices"
	"sync"
	"testing"

	"gateway/psp"
	"gateway/psp/toss"
	"gateway/psp/toss/tosstest"
)

// asked records the requests a handler receives: method and path, as sent.
type asked struct {
	next http.Handler
	mu   sync.Mutex
	reqs []string
}

func (a *asked) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	a.reqs = append(a.reqs, r.Method+" "+r.URL.EscapedPath())
	a.mu.Unlock()
	a.next.ServeHTTP(w, r)
}

func (a *asked) since(n int) []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.reqs[n:]...)
}

func (a *asked) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.reqs)
}

// FuzzTossNotice: Toss's notifications are unsigned, so nothing a body
// says is believed but the name of its payment. Whatever the body, the
// adapter only reads from Toss (GETs, never a write), and only the payment
// the body names; a refused body is an empty notice; an accepted one holds
// exactly what Toss's own notification of that payment holds (its charge
// and the gateway's refunds, as Toss has them), whatever status, amount or
// cancels the body claims.
func FuzzTossNotice(f *testing.F) {
	fake := tosstest.New(secret)
	rec := &asked{next: fake}
	ts := httptest.NewServer(rec)
	f.Cleanup(ts.Close)
	a, err := toss.New(toss.Config{SecretKey: secret, BaseURL: ts.URL})
	if err != nil {
		f.Fatal(err)
	}
	seeded := []tosstest.Payment{
		{PaymentKey: "tgen_done_f01", OrderID: "ord_000000000000000000000f01", Status: "DONE", TotalAmount: 15000, BalanceAmount: 15000, Currency: "KRW", ApprovedAt: tosstest.Now()},
		{PaymentKey: "tgen_vbank_f02", OrderID: "ord_000000000000000000000f02", Status: "WAITING_FOR_DEPOSIT", TotalAmount: 30000, BalanceAmount: 30000, Currency: "KRW",
			VirtualAccount: &tosstest.VirtualAccount{AccountNumber: "X1234", DueDate: "2026-12-08T00:00:00+09:00"}},
		{PaymentKey: "tgen_ready_f03", OrderID: "ord_000000000000000000000f03", Status: "READY", TotalAmount: 1000, BalanceAmount: 1000, Currency: "KRW"},
		{PaymentKey: "tgen_part_f04", OrderID: "ord_000000000000000000000f04", Status: "PARTIAL_CANCELED", TotalAmount: 20000, BalanceAmount: 15000, Currency: "KRW", ApprovedAt: tosstest.Now(),
			Cancels: []tosstest.Cancel{
				{TransactionKey: "txk_1", CancelReason: "requested_by_customer [ref:rfd_000000000000000000000f04]", CancelAmount: 5000, CanceledAt: *tosstest.Now(), CancelStatus: "DONE"},
				{TransactionKey: "txk_2", CancelReason: "by the shop, not the gateway", CancelAmount: 0, CanceledAt: *tosstest.Now(), CancelStatus: "DONE"},
			}},
	}
	// want is each payment's notice as Toss's own notification reads.
	want := map[string]psp.Notice{}
	for _, p := range seeded {
		fake.Seed(p)
		n, err := a.ReadNotice(f.Context(), http.Header{}, fake.Notification(p.OrderID))
		if err != nil {
			f.Fatal(err)
		}
		want["GET /v1/payments/"+p.PaymentKey], want["GET /v1/payments/orders/"+p.OrderID] = n, n
		f.Add(fake.Notification(p.OrderID))
		f.Add(tosstest.DepositCallback(p.OrderID, "DONE"))
	}
	for _, s := range []string{
		`{"eventType":"PAYMENT_STATUS_CHANGED","data":{"paymentKey":"tgen_ready_f03","orderId":"ord_000000000000000000000f03","status":"DONE","totalAmount":1000}}`,
		`{"eventType":"PAYMENT_STATUS_CHANGED","data":{"paymentKey":"tgen_done_f01","orderId":"ord_000000000000000000000f03"}}`,
		`{"eventType":"CANCEL_STATUS_CHANGED","data":{"paymentKey":"tgen_done_f01/cancel","orderId":"ord_000000000000000000000f01"}}`,
		`{"orderId":"ord_000000000000000000000f01/../f02"}`, `{"orderId":"ord_000000000000000000000f99"}`, `{"PAYMENTKEY":"tgen_done_f01"}`,
		`{"data":{"paymentKey":"tgen_done_f01","cancels":[{"cancelReason":"[ref:rfd_000000000000000000000f01]","cancelAmount":15000}]}}`,
		`{"data":null,"orderId":"x y"}`, `[]`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		before := rec.count()
		n, err := a.ReadNotice(t.Context(), http.Header{}, body)
		reqs := rec.since(before)
		named := namedIn(body)
		for _, r := range reqs {
			if !slices.Contains(named, r) {
				t.Fatalf("body %q made the adapter send %s, which reads none of the payments it names (%q)", body, r, named)
			}
		}
		if len(reqs) > 1 {
			t.Fatalf("body %q made %d requests, want at most one: %q", body, len(reqs), reqs)
		}
		if err != nil {
			if !errors.Is(err, psp.ErrUnverified) {
				t.Fatalf("body %q: %v", body, err)
			}
			if !reflect.DeepEqual(n, psp.Notice{}) {
				t.Fatalf("refused body %q gave notice %+v", body, n)
			}
			return
		}
		var w psp.Notice
		if len(reqs) == 1 {
			w = want[reqs[0]]
		}
		if !reflect.DeepEqual(n.Charges, w.Charges) || !reflect.DeepEqual(n.Refunds, w.Refunds) {
			t.Fatalf("body %q (asked %q) reads charges %+v, refunds %+v; Toss's own notification of the payment reads %+v, %+v",
				body, reqs, n.Charges, n.Refunds, w.Charges, w.Refunds)
		}
	})
}

// namedIn lists the reads of the payments body names, as encoding/json
// reads its paymentKey and orderIds (whatever the case of their names).
func namedIn(body []byte) []string {
	var b struct {
		OrderID string `json:"orderId"`
		Data    *struct {
			PaymentKey string `json:"paymentKey"`
			OrderID    string `json:"orderId"`
		} `json:"data"`
	}
	if json.Unmarshal(body, &b) != nil {
		return nil
	}
	orders := []string{b.OrderID}
	var out []string
	if b.Data != nil {
		orders = append(orders, b.Data.OrderID)
		if b.Data.PaymentKey != "" {
			out = append(out, "GET /v1/payments/"+url.PathEscape(b.Data.PaymentKey))
		}
	}
	for _, o := range orders {
		if o != "" {
			out = append(out, "GET /v1/payments/orders/"+url.PathEscape(o))
		}
	}
	return out
}
