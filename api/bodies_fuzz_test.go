package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gateway/api"
	"gateway/mysql"
	"gateway/payments"
	"gateway/psp"
	"gateway/webhooks"
)

// The bodies of the API's other commands, fuzzed through the handler over
// a real database: a refused body changes nothing (not a row of any table
// the API writes, not a call to the PSP), an accepted one does what it
// says, and every exchange conforms to the OpenAPI document.

// fuzzDo serves one request of the env's merchant in process and checks
// the exchange against the OpenAPI document; a finding, or a 5xx, fails
// the input.
func (e *env) fuzzDo(t *testing.T, method, target string, hdr http.Header, body []byte) response {
	t.Helper()
	return e.fuzzDoAs(t, e.apiKey, method, target, hdr, body)
}

// fuzzDoAs is fuzzDo as the merchant of apiKey.
func (e *env) fuzzDoAs(t testing.TB, apiKey, method, target string, hdr http.Header, body []byte) response {
	t.Helper()
	r := httptest.NewRequest(method, target, bytes.NewReader(body))
	r.Header.Set("Authorization", "Bearer "+apiKey)
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		r.Header[k] = v
	}
	reqHeader := r.Header.Clone()
	w := httptest.NewRecorder()
	e.raw.ServeHTTP(w, r)
	x := exchange{method: method, target: target, reqHeader: reqHeader, reqBody: body,
		status: w.Code, header: w.Header(), body: w.Body.Bytes()}
	c, err := published()
	if err != nil {
		t.Fatal(err)
	}
	if findings := c.check(x); len(findings) > 0 {
		t.Fatalf("%s: %s", x, strings.Join(findings, "; "))
	}
	if x.status >= 500 {
		t.Fatalf("%s", x)
	}
	return response{status: x.status, header: x.header, body: x.body}
}

// state is everything a request may change: a checksum of each table of
// the database (but the migrations'), and the PSP's calls.
func (e *env) state(t *testing.T) string {
	t.Helper()
	var tables []string
	if err := e.db.SelectContext(t.Context(), &tables, `SELECT TABLE_NAME FROM information_schema.TABLES
		WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME <> 'schema_migrations' ORDER BY TABLE_NAME`); err != nil {
		t.Fatal(err)
	}
	rows, err := e.db.QueryContext(t.Context(), `CHECKSUM TABLE `+strings.Join(tables, ", "))
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var table string
		var sum *int64
		if err := rows.Scan(&table, &sum); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%s %v, ", table[strings.IndexByte(table, '.')+1:], *sum)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(&b, "PSP charge calls %d, refund calls %d, captures %d, voids %d",
		e.psp.ChargeCalls(), e.psp.RefundCalls(), len(e.psp.Captures()), len(e.psp.Voids()))
	return b.String()
}

// keys numbers the fuzz inputs' idempotency keys, unique per process.
type keys struct {
	mu sync.Mutex
	n  int
}

func (k *keys) next(prefix string) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.n++
	return fmt.Sprintf("%s-%d", prefix, k.n)
}

func idem(key string) http.Header { return http.Header{"Idempotency-Key": {key}} }

// FuzzRefundBody: POST /payments/{id}/refunds. A body refused with a 400
// changes nothing; any other refusal refunds nothing; an accepted one
// refunds what it asks (its amount, or the whole remainder without one)
// with its reason and metadata, as encoding/json reads them.
func FuzzRefundBody(f *testing.F) {
	for _, b := range []string{
		`{"amount": 300, "reason": "one item returned", "metadata": {"rma": "7"}}`, `{}`, `{"amount": 1}`,
		`{"amount": null}`, `{"amount": 0}`, `{"amount": -5}`, `{"amount": 1.5}`, `{"amount": "300"}`,
		`{"amount": 1, "amount": 2}`, `{"Amount": 1}`, `{"amount": 1, "currency": "KRW"}`, `{"reason": "\ud800"}`,
		`{"metadata": {"a": "b", "a": "c"}}`, `{"metadata": {"a": 1}}`, `{"amount": 99999999999999999999}`,
		`{"amount": 1} {}`, `[]`, `null`, ``, "{\"reason\": \"\xff\"}",
	} {
		f.Add([]byte(b))
	}
	e := newEnv(f)
	var k keys
	var pay payments.View
	left := int64(0)
	f.Fuzz(func(t *testing.T, body []byte) {
		if left == 0 {
			res := e.fuzzDo(t, http.MethodPost, "/payments", idem(k.next("pay")),
				[]byte(`{"amount": 1000000, "currency": "KRW", "payment_method": "pm_card_ok"}`))
			if err := json.Unmarshal(res.body, &pay); err != nil || res.status != http.StatusCreated {
				t.Fatalf("payment: %d %s", res.status, res.body)
			}
			left = pay.Amount
		}
		before := e.state(t)
		refundCalls := e.psp.RefundCalls()
		res := e.fuzzDo(t, http.MethodPost, "/payments/"+pay.ID+"/refunds", idem(k.next("re")), body)
		switch res.status {
		case http.StatusCreated, http.StatusAccepted:
		case http.StatusBadRequest:
			if after := e.state(t); after != before {
				t.Fatalf("refused body %q changed the state:\n%s\n%s", body, before, after)
			}
			return
		default:
			if n := e.psp.RefundCalls() - refundCalls; n != 0 {
				t.Fatalf("body %q refused with %d after %d refund calls", body, res.status, n)
			}
			return
		}
		var want struct {
			Amount   *int64
			Reason   *string
			Metadata map[string]string
		}
		if err := json.Unmarshal(body, &want); err != nil {
			t.Fatalf("accepted body %q, which encoding/json refuses: %v", body, err)
		}
		var got payments.RefundView
		if err := json.Unmarshal(res.body, &got); err != nil {
			t.Fatal(err)
		}
		amount := left
		if want.Amount != nil {
			amount = *want.Amount
		}
		if got.Amount != amount || got.PaymentID != pay.ID || got.Reason != deref(want.Reason) || !sameMetadata(got.Metadata, want.Metadata) {
			t.Fatalf("body %q made refund %s (%d left to refund)", body, res.body, left)
		}
		left -= got.Amount
	})
}

// FuzzConfirmBody: POST /payments/{id}/confirm of a payment created with
// "confirm": false. A body refused with a 400 changes nothing; any other
// refusal charges nothing; an accepted one charges the payment once, with
// the payment method (or Toss payment key) it names, and only when the
// amount and order id it checks are the payment's.
func FuzzConfirmBody(f *testing.F) {
	for _, b := range []string{
		`{"payment_method": "pm_card_ok"}`, `{"payment_method": "pm_card_declined", "amount": 1000}`,
		`{"payment_key": "pm_card_ok"}`, `{"payment_method": "pm_card_ok", "payment_key": "pm_card_ok"}`,
		`{"payment_method": "pm_card_ok", "amount": 999}`, `{"payment_method": "pm_card_ok", "order_id": "ord_x"}`,
		`{"payment_method": "pm_card_3ds"}`, `{"payment_method": null}`, `{"payment_method": 1}`, `{}`,
		`{"payment_method": "pm_card_ok", "Payment_Method": "pm_card_declined"}`, `{"amount": 1000, "amount": 1}`,
		`{"payment_method": "pm_card_ok"} x`, `null`, ``,
	} {
		f.Add([]byte(b))
	}
	var charged []psp.ChargeRequest
	var mu sync.Mutex
	e := newEnv(f)
	e.psp.SetChargeHook(func(_ context.Context, req psp.ChargeRequest) {
		mu.Lock()
		defer mu.Unlock()
		charged = append(charged, req)
	})
	var k keys
	var pay payments.View
	f.Fuzz(func(t *testing.T, body []byte) {
		if pay.ID == "" {
			res := e.fuzzDo(t, http.MethodPost, "/payments", idem(k.next("pay")), []byte(laterBody))
			if err := json.Unmarshal(res.body, &pay); err != nil || res.status != http.StatusAccepted {
				t.Fatalf("payment: %d %s", res.status, res.body)
			}
		}
		before := e.state(t)
		mu.Lock()
		calls := len(charged)
		mu.Unlock()
		res := e.fuzzDo(t, http.MethodPost, "/payments/"+pay.ID+"/confirm", idem(k.next("confirm")), body)
		mu.Lock()
		sent := charged[calls:]
		mu.Unlock()
		if res.status == http.StatusBadRequest {
			if after := e.state(t); after != before {
				t.Fatalf("refused body %q changed the state:\n%s\n%s", body, before, after)
			}
			return
		}
		if len(sent) == 0 {
			return // refused by the flow (409, 422): nothing charged
		}
		id := pay.ID
		pay = payments.View{} // charged: the next input confirms another payment
		var want struct {
			PaymentMethod *string `json:"payment_method"`
			PaymentKey    *string `json:"payment_key"`
			Amount        *int64
			OrderID       *string `json:"order_id"`
		}
		if err := json.Unmarshal(body, &want); err != nil {
			t.Fatalf("body %q, which encoding/json refuses, charged %s", body, id)
		}
		method := deref(want.PaymentMethod) + deref(want.PaymentKey)
		if len(sent) != 1 || sent[0].PaymentMethod != method || sent[0].Amount != 1000 {
			t.Fatalf("body %q sent charges %+v for %s", body, sent, id)
		}
		if want.Amount != nil && *want.Amount != 1000 || want.OrderID != nil && *want.OrderID != sent[0].MerchantOrderID {
			t.Fatalf("body %q charged %s although it checks another amount or order", body, id)
		}
	})
}

// authorized is a payment of 1000 KRW authorized for a manual capture.
func (e *env) authorized(t *testing.T, k *keys) payments.View {
	t.Helper()
	res := e.fuzzDo(t, http.MethodPost, "/payments", idem(k.next("auth")),
		[]byte(`{"amount": 1000, "currency": "KRW", "payment_method": "pm_card_ok", "capture_method": "manual"}`))
	var p payments.View
	if err := json.Unmarshal(res.body, &p); err != nil || res.status != http.StatusCreated || p.Status != payments.RequiresCapture {
		t.Fatalf("authorization: %d %s", res.status, res.body)
	}
	return p
}

// FuzzCaptureBody: POST /payments/{id}/capture of an authorization. A
// body refused with a 400 changes nothing; any other refusal captures
// nothing; an accepted one captures once what it asks (its
// amount_to_capture, or the whole authorization without one).
func FuzzCaptureBody(f *testing.F) {
	for _, b := range []string{
		`{}`, `{"amount_to_capture": 400}`, `{"amount_to_capture": 1000}`, `{"amount_to_capture": 1001}`,
		`{"amount_to_capture": 0}`, `{"amount_to_capture": -1}`, `{"amount_to_capture": null}`, `{"amount_to_capture": 4e2}`,
		`{"amount_to_capture": "400"}`, `{"amount_to_capture": 1, "amount_to_capture": 2}`, `{"Amount_To_Capture": 1}`,
		`{"amount": 400}`, `{} {}`, `null`, ``,
	} {
		f.Add([]byte(b))
	}
	var mu sync.Mutex
	var captured []psp.CaptureRequest
	e := newEnv(f)
	e.psp.SetCaptureHook(func(_ context.Context, req psp.CaptureRequest) {
		mu.Lock()
		defer mu.Unlock()
		captured = append(captured, req)
	})
	var k keys
	var pay payments.View
	f.Fuzz(func(t *testing.T, body []byte) {
		if pay.ID == "" {
			pay = e.authorized(t, &k)
		}
		before := e.state(t)
		mu.Lock()
		calls := len(captured)
		mu.Unlock()
		res := e.fuzzDo(t, http.MethodPost, "/payments/"+pay.ID+"/capture", idem(k.next("capture")), body)
		mu.Lock()
		sent := captured[calls:]
		mu.Unlock()
		switch {
		case res.status == http.StatusBadRequest:
			if after := e.state(t); after != before {
				t.Fatalf("refused body %q changed the state:\n%s\n%s", body, before, after)
			}
			return
		case len(sent) == 0:
			if res.status < 300 {
				t.Fatalf("body %q answered %d without a capture: %s", body, res.status, res.body)
			}
			return // refused by the flow (409, 422): nothing captured
		}
		id := pay.ID
		pay = payments.View{}
		var want struct {
			AmountToCapture *int64 `json:"amount_to_capture"`
		}
		if err := json.Unmarshal(body, &want); err != nil {
			t.Fatalf("body %q, which encoding/json refuses, captured %s", body, id)
		}
		amount := int64(1000)
		if want.AmountToCapture != nil {
			amount = *want.AmountToCapture
		}
		var got payments.View
		if err := json.Unmarshal(res.body, &got); err != nil {
			t.Fatal(err)
		}
		if len(sent) != 1 || sent[0].Amount != amount || got.AmountCaptured == nil || *got.AmountCaptured != amount {
			t.Fatalf("body %q: captures sent %+v, answer %d %s; want one of %d", body, sent, res.status, res.body, amount)
		}
	})
}

// FuzzCancelBody: POST /payments/{id}/cancel of an authorization. A body
// refused with a 400 changes nothing; an accepted one voids the
// authorization once, with the reason it gives (requested_by_customer
// without one).
func FuzzCancelBody(f *testing.F) {
	for _, b := range []string{
		`{}`, `{"cancellation_reason": "duplicate"}`, `{"cancellation_reason": "fraudulent"}`, `{"cancellation_reason": "abandoned"}`,
		`{"cancellation_reason": "authorization_expired"}`, `{"cancellation_reason": "Duplicate"}`, `{"cancellation_reason": null}`,
		`{"cancellation_reason": 1}`, `{"cancellation_reason": "duplicate", "cancellation_reason": "fraudulent"}`,
		`{"Cancellation_Reason": "duplicate"}`, `{"reason": "duplicate"}`, `null`, ``,
	} {
		f.Add([]byte(b))
	}
	var mu sync.Mutex
	var voided []psp.VoidRequest
	e := newEnv(f)
	e.psp.SetVoidHook(func(_ context.Context, req psp.VoidRequest) {
		mu.Lock()
		defer mu.Unlock()
		voided = append(voided, req)
	})
	var k keys
	var pay payments.View
	f.Fuzz(func(t *testing.T, body []byte) {
		if pay.ID == "" {
			pay = e.authorized(t, &k)
		}
		before := e.state(t)
		mu.Lock()
		calls := len(voided)
		mu.Unlock()
		res := e.fuzzDo(t, http.MethodPost, "/payments/"+pay.ID+"/cancel", idem(k.next("cancel")), body)
		mu.Lock()
		sent := voided[calls:]
		mu.Unlock()
		switch {
		case res.status == http.StatusBadRequest:
			if after := e.state(t); after != before {
				t.Fatalf("refused body %q changed the state:\n%s\n%s", body, before, after)
			}
			return
		case len(sent) == 0:
			if res.status < 300 {
				t.Fatalf("body %q answered %d without a void: %s", body, res.status, res.body)
			}
			return
		}
		id := pay.ID
		pay = payments.View{}
		var want struct {
			CancellationReason *string `json:"cancellation_reason"`
		}
		if err := json.Unmarshal(body, &want); err != nil {
			t.Fatalf("body %q, which encoding/json refuses, canceled %s", body, id)
		}
		reason := payments.CancelRequestedByCustomer
		if want.CancellationReason != nil {
			reason = *want.CancellationReason
		}
		var got payments.View
		if err := json.Unmarshal(res.body, &got); err != nil {
			t.Fatal(err)
		}
		if len(sent) != 1 || sent[0].Reason != reason || got.Status != payments.Canceled || deref(got.CancellationReason) != reason {
			t.Fatalf("body %q: voids sent %+v, answer %d %s; want one, %s", body, sent, res.status, res.body, reason)
		}
	})
}

// FuzzCancelByKeyBody: POST /payments/cancel_by_key. A body refused with
// a 400 changes nothing; an accepted one cancels exactly the key it names
// (as encoding/json reads it), with its reason, and nothing else: one
// cancellation more, of that key, and no charge.
func FuzzCancelByKeyBody(f *testing.F) {
	for _, b := range []string{
		`{"idempotency_key": "order-1"}`, `{"idempotency_key": "order-2", "cancellation_reason": "abandoned"}`,
		`{"idempotency_key": "\"order-3\""}`, `{"idempotency_key": ""}`, `{"idempotency_key": "a b"}`,
		`{"idempotency_key": null}`, `{"idempotency_key": 7}`, `{"cancellation_reason": "duplicate"}`,
		`{"idempotency_key": "k", "idempotency_key": "j"}`, `{"Idempotency_Key": "k"}`, `{"idempotency_key": "k\u0000"}`,
		`{"idempotency_key": "k", "cancellation_reason": "authorization_expired"}`, `null`, ``,
	} {
		f.Add([]byte(b))
	}
	e := newEnv(f)
	var k keys
	f.Fuzz(func(t *testing.T, body []byte) {
		before := e.state(t)
		charges := e.psp.ChargeCalls()
		var n int
		if err := e.db.GetContext(t.Context(), &n, `SELECT COUNT(*) FROM key_cancellations`); err != nil {
			t.Fatal(err)
		}
		res := e.fuzzDo(t, http.MethodPost, "/payments/cancel_by_key", idem(k.next("cbk")), body)
		switch {
		case res.status == http.StatusBadRequest:
			if after := e.state(t); after != before {
				t.Fatalf("refused body %q changed the state:\n%s\n%s", body, before, after)
			}
			return
		case res.status >= 300: // a key canceled already (409): the first cancellation stands
			var after int
			if err := e.db.GetContext(t.Context(), &after, `SELECT COUNT(*) FROM key_cancellations`); err != nil || after != n {
				t.Fatalf("body %q refused with %d left %d cancellations, were %d (%v)", body, res.status, after, n, err)
			}
			return
		}
		var want struct {
			IdempotencyKey     *string `json:"idempotency_key"`
			CancellationReason *string `json:"cancellation_reason"`
		}
		if err := json.Unmarshal(body, &want); err != nil || want.IdempotencyKey == nil {
			t.Fatalf("accepted body %q, which encoding/json reads as %+v (%v)", body, want, err)
		}
		reason := payments.CancelRequestedByCustomer
		if want.CancellationReason != nil {
			reason = *want.CancellationReason
		}
		var rows []struct {
			Key    string `db:"idem_key"`
			Reason string `db:"reason"`
		}
		if err := e.db.SelectContext(t.Context(), &rows, `SELECT idem_key, reason FROM key_cancellations WHERE merchant_id = ? AND idem_key = ?`,
			e.merch.ID, *want.IdempotencyKey); err != nil {
			t.Fatal(err)
		}
		var total int
		if err := e.db.GetContext(t.Context(), &total, `SELECT COUNT(*) FROM key_cancellations`); err != nil {
			t.Fatal(err)
		}
		if len(rows) != 1 || rows[0].Reason != reason || total != n+1 || e.psp.ChargeCalls() != charges {
			t.Fatalf("body %q (%d %s) left cancellations %+v (%d, were %d), charge calls %d → %d; want key %q canceled, %s",
				body, res.status, res.body, rows, total, n, charges, e.psp.ChargeCalls(), *want.IdempotencyKey, reason)
		}
	})
}

// noDNS resolves nothing: the fuzzed URLs never leave the machine.
type noDNS struct{}

func (noDNS) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	return nil, errors.New("no such host")
}

// FuzzEndpointBody: POST /webhook_endpoints. A body refused with a 400
// changes nothing; an accepted one registers the URL, event types and
// description it says (the types deduplicated and sorted), shown back as
// such (then the endpoint is deleted, to stay under the merchant's limit).
func FuzzEndpointBody(f *testing.F) {
	for _, b := range []string{
		`{"url": "https://93.184.215.14/hooks", "event_types": ["payment.succeeded", "refund.failed", "payment.succeeded"], "description": "orders"}`,
		`{"url": "https://93.184.215.14/hooks", "event_types": ["*"]}`, `{"url": "http://127.0.0.1/", "event_types": ["*"]}`,
		`{"url": "https://shop.example/", "event_types": ["*"]}`, `{"url": "https://93.184.215.14/", "event_types": []}`,
		`{"url": "https://93.184.215.14/", "event_types": ["payment.nope"]}`, `{"url": null, "event_types": ["*"]}`,
		`{"event_types": ["*"]}`, `{"url": "https://93.184.215.14/", "url": "http://10.0.0.1/", "event_types": ["*"]}`,
		`{"URL": "https://93.184.215.14/", "event_types": ["*"]}`, `{"url": "https://93.184.215.14/", "event_types": "*"}`,
		`{"url": "https://93.184.215.14/", "event_types": ["*"], "description": 7}`, `{"url": "https://[::ffff:10.0.0.1]/", "event_types": ["*"]}`,
		`null`, ``,
	} {
		f.Add([]byte(b))
	}
	e := newEnv(f, func(s *envSetup) {
		s.webhooks = func(st *mysql.Store) api.WebhookEndpoints {
			key, _ := webhooks.ParseKey(strings.Repeat("ab", 32))
			c, _ := webhooks.NewCipher(key)
			return webhooks.NewEndpoints(st, c, webhooks.NewGuard(nil, noDNS{}), time.Hour)
		}
	})
	f.Fuzz(func(t *testing.T, body []byte) {
		before := e.state(t)
		res := e.fuzzDo(t, http.MethodPost, "/webhook_endpoints", nil, body)
		if res.status != http.StatusCreated {
			if after := e.state(t); after != before {
				t.Fatalf("refused body %q (%d) changed the state:\n%s\n%s", body, res.status, before, after)
			}
			return
		}
		var want struct {
			URL         *string  `json:"url"`
			EventTypes  []string `json:"event_types"`
			Description *string  `json:"description"`
		}
		if err := json.Unmarshal(body, &want); err != nil || want.URL == nil {
			t.Fatalf("accepted body %q, which encoding/json reads as %+v (%v)", body, want, err)
		}
		types := slices.Compact(slices.Sorted(slices.Values(want.EventTypes)))
		if slices.Contains(types, "*") {
			types = []string{"*"}
		}
		var created struct {
			ID          string   `json:"id"`
			URL         string   `json:"url"`
			EventTypes  []string `json:"event_types"`
			Description string   `json:"description"`
		}
		if err := json.Unmarshal(res.body, &created); err != nil {
			t.Fatal(err)
		}
		shown := created
		if err := json.Unmarshal(e.fuzzDo(t, http.MethodGet, "/webhook_endpoints/"+created.ID, nil, nil).body, &shown); err != nil {
			t.Fatal(err)
		}
		for _, got := range []any{created, shown} {
			if w := (struct {
				ID          string   `json:"id"`
				URL         string   `json:"url"`
				EventTypes  []string `json:"event_types"`
				Description string   `json:"description"`
			}{created.ID, *want.URL, types, deref(want.Description)}); !reflect.DeepEqual(got, any(w)) {
				t.Fatalf("body %q registered %+v, want %+v", body, got, w)
			}
		}
		if res := e.fuzzDo(t, http.MethodDelete, "/webhook_endpoints/"+created.ID, nil, nil); res.status != http.StatusOK {
			t.Fatalf("delete: %d %s", res.status, res.body)
		}
	})
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// sameMetadata compares metadata as the API shows it: none is empty.
func sameMetadata(a, b map[string]string) bool {
	return len(a) == 0 && len(b) == 0 || reflect.DeepEqual(a, b)
}
