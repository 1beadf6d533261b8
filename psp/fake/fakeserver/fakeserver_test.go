package fakeserver_test

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"gateway/psp/fake/fakeserver"
)

type env struct {
	t   *testing.T
	srv *fakeserver.Server
	url string
}

func newEnv(t *testing.T, opts fakeserver.Options) *env {
	t.Helper()
	srv, err := fakeserver.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	t.Cleanup(srv.Close) // runs first: releases held answers so ts.Close can finish
	return &env{t: t, srv: srv, url: ts.URL}
}

// call sends one request; err is a transport error (a dropped connection).
func (e *env) call(ctx context.Context, method, path, body string) (int, string, error) {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.url+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, string(b), err
}

func (e *env) mustCall(method, path, body string) (int, string) {
	e.t.Helper()
	status, b, err := e.call(context.Background(), method, path, body)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	return status, b
}

func charge(order, method string, amount int) string {
	b, _ := json.Marshal(fakeserver.ChargeRequest{MerchantOrderID: order, Amount: int64(amount), Currency: "KRW", PaymentMethod: method})
	return string(b)
}

func TestChargeAPI(t *testing.T) {
	e := newEnv(t, fakeserver.Options{})
	steps := []struct {
		name, method, path, body string
		status                   int
		contains                 string
	}{
		{"create", "POST", "/v1/charges", charge("ord_1", "pm_card_ok", 1000), 201, `"status":"succeeded"`},
		{"same order dedupes", "POST", "/v1/charges", charge("ord_1", "pm_card_ok", 1000), 200, `"reference":"fake_ch_1"`},
		{"same order other amount", "POST", "/v1/charges", charge("ord_1", "pm_card_ok", 1001), 409, `"code":"order_id_reused"`},
		{"declined", "POST", "/v1/charges", charge("ord_2", "pm_card_insufficient_funds", 1000), 201, `"decline_code":"insufficient_funds"`},
		{"unknown method", "POST", "/v1/charges", charge("ord_3", "pm_nope", 1000), 201, `"decline_code":"invalid_payment_method"`},
		{"invalid amount", "POST", "/v1/charges", charge("ord_4", "pm_card_ok", 0), 400, `"code":"invalid_request"`},
		{"unknown field", "POST", "/v1/charges", `{"merchant_order_id":"ord_5","amount":1,"currency":"KRW","capture":true}`, 400, `"code":"invalid_request"`},
		{"not json", "POST", "/v1/charges", `amount=1`, 400, `"code":"invalid_request"`},
		{"lookup", "GET", "/v1/charges/ord_1", "", 200, `"merchant_order_id":"ord_1"`},
		{"lookup declined", "GET", "/v1/charges/ord_2", "", 200, `"status":"declined"`},
		{"lookup missing", "GET", "/v1/charges/ord_9", "", 404, `"code":"not_found"`},
		{"refund", "POST", "/v1/refunds", `{"refund_order_id":"rfd_1","merchant_order_id":"ord_1","charge_reference":"fake_ch_1","amount":400,"currency":"KRW"}`, 201, `"status":"succeeded"`},
		{"refund repeat", "POST", "/v1/refunds", `{"refund_order_id":"rfd_1","merchant_order_id":"ord_1","charge_reference":"fake_ch_1","amount":400,"currency":"KRW"}`, 200, `"refund_order_id":"rfd_1"`},
		{"refund reused", "POST", "/v1/refunds", `{"refund_order_id":"rfd_1","merchant_order_id":"ord_1","charge_reference":"fake_ch_1","amount":401,"currency":"KRW"}`, 409, `"code":"order_id_reused"`},
		{"refund too much", "POST", "/v1/refunds", `{"refund_order_id":"rfd_2","merchant_order_id":"ord_1","charge_reference":"fake_ch_1","amount":601,"currency":"KRW"}`, 200, `"decline_code":"amount_exceeds_refundable"`},
		{"refund lookup", "GET", "/v1/refunds/rfd_1", "", 200, `"amount":400`},
		{"refund lookup by charge", "GET", "/v1/refunds/rfd_1?charge_reference=fake_ch_1", "", 200, `"amount":400`},
		{"refund lookup other charge", "GET", "/v1/refunds/rfd_1?charge_reference=fake_ch_2", "", 404, `"code":"not_found"`},
		{"declined refund left nothing", "GET", "/v1/refunds/rfd_2", "", 404, `"code":"not_found"`},
		{"unknown route", "GET", "/v2/charges", "", 404, `"code":"route_not_found"`},
		{"health", "GET", "/healthz", "", 200, `"ok"`},
	}
	// Sequential on purpose: each step sees the ledger the previous ones made.
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			status, body := e.mustCall(st.method, st.path, st.body)
			if status != st.status || !strings.Contains(body, st.contains) {
				t.Fatalf("%s %s = %d %s; want %d containing %s", st.method, st.path, status, body, st.status, st.contains)
			}
		})
	}

	status, body := e.mustCall("GET", "/admin/ledger", "")
	var l fakeserver.Ledger
	if err := json.Unmarshal([]byte(body), &l); err != nil || status != 200 {
		t.Fatalf("ledger: %d %s %v", status, body, err)
	}
	if len(l.Charges) != 3 || len(l.Refunds) != 1 || l.Refunds[0].Amount != 400 {
		t.Fatalf("ledger %+v, want 3 charges and one refund of 400", l)
	}
	st := e.srv.Stats()
	if st.ChargeCalls != 8 || st.RefundCalls != 4 || st.LookupCalls != 7 {
		t.Fatalf("stats %+v", st)
	}

	if status, _ := e.mustCall("POST", "/admin/reset", ""); status != http.StatusNoContent {
		t.Fatalf("reset: %d", status)
	}
	if l := e.srv.LedgerSnapshot(); len(l.Charges) != 0 || len(l.Refunds) != 0 {
		t.Fatalf("ledger after reset: %+v", l)
	}
	if status, body := e.mustCall("POST", "/v1/charges", charge("ord_1", "pm_card_ok", 5)); status != 201 || strings.Contains(body, "fake_ch_1\"") {
		t.Fatalf("charge after reset = %d %s; want a new charge with a new reference", status, body)
	}
}

func TestFaultsValidate(t *testing.T) {
	tests := []struct {
		name string
		f    fakeserver.Faults
		ok   bool
	}{
		{"zero", fakeserver.Faults{}, true},
		{"issue example", fakeserver.Faults{Latency: fakeserver.Latency{Max: 300}, ErrorBeforeCharge: 0.05, ErrorAfterCharge: 0.05,
			TimeoutAfterCharge: 0.1, DropConnectionAfterCharge: 0.05}, true},
		{"all one kind", fakeserver.Faults{DropConnectionAfterCharge: 1}, true},
		{"negative rate", fakeserver.Faults{ErrorAfterCharge: -0.1}, false},
		{"rate above one", fakeserver.Faults{ErrorAfterCharge: 1.5}, false},
		{"NaN rate", fakeserver.Faults{TimeoutAfterCharge: math.NaN()}, false},
		{"sum above one", fakeserver.Faults{ErrorBeforeCharge: 0.6, ErrorAfterCharge: 0.6}, false},
		{"min above max", fakeserver.Faults{Latency: fakeserver.Latency{Min: 10, Max: 5}}, false},
		{"negative latency", fakeserver.Faults{Latency: fakeserver.Latency{Min: -1, Max: 5}}, false},
		{"latency too long", fakeserver.Faults{Latency: fakeserver.Latency{Max: 60_001}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.f.Validate(); (err == nil) != tt.ok {
				t.Fatalf("Validate() = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestAdminFaults(t *testing.T) {
	e := newEnv(t, fakeserver.Options{})
	body := `{"latency_ms": {"min": 0, "max": 3}, "error_before_charge": 0.05, "error_after_charge": 0.05, "timeout_after_charge": 0.1, "drop_connection_after_charge": 0.05}`
	if status, b := e.mustCall("PUT", "/admin/faults", body); status != 200 {
		t.Fatalf("PUT /admin/faults = %d %s", status, b)
	}
	want := fakeserver.Faults{Latency: fakeserver.Latency{Max: 3}, ErrorBeforeCharge: 0.05, ErrorAfterCharge: 0.05,
		TimeoutAfterCharge: 0.1, DropConnectionAfterCharge: 0.05}
	if got := e.srv.Faults(); got != want {
		t.Fatalf("faults %+v, want %+v", got, want)
	}
	for name, bad := range map[string]string{
		"rate":          `{"error_after_charge": 2}`,
		"unknown field": `{"error_rate": 0.1}`,
		"not json":      `error_after_charge=1`,
	} {
		t.Run(name, func(t *testing.T) {
			if status, b := e.mustCall("PUT", "/admin/faults", bad); status != 400 {
				t.Fatalf("PUT %s = %d %s, want 400", bad, status, b)
			}
			if got := e.srv.Faults(); got != want {
				t.Fatalf("a refused PUT changed the faults to %+v", got)
			}
		})
	}
	status, b := e.mustCall("GET", "/admin/faults", "")
	var got fakeserver.Faults
	if err := json.Unmarshal([]byte(b), &got); err != nil || status != 200 || got != want {
		t.Fatalf("GET /admin/faults = %d %s", status, b)
	}
}

// Each fault at rate 1: the "after" kinds really record the charge first.
func TestFaultKinds(t *testing.T) {
	tests := []struct {
		name     string
		faults   fakeserver.Faults
		status   int // 0: the connection is dropped
		code     string
		recorded int
	}{
		{"error_before_charge", fakeserver.Faults{ErrorBeforeCharge: 1}, 503, fakeserver.CodeNotProcessed, 0},
		{"error_after_charge", fakeserver.Faults{ErrorAfterCharge: 1}, 500, fakeserver.CodeInternal, 1},
		{"drop_connection_after_charge", fakeserver.Faults{DropConnectionAfterCharge: 1}, 0, "", 1},
		{"timeout_after_charge", fakeserver.Faults{TimeoutAfterCharge: 1}, 0, "", 1},
		{"latency only", fakeserver.Faults{Latency: fakeserver.Latency{Min: 1, Max: 2}}, 201, "", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			// A held answer is given up on once the server holds it, the
			// way a client's deadline passes.
			e := newEnv(t, fakeserver.Options{Faults: tt.faults, OnHold: cancel})
			status, body, err := e.call(ctx, "POST", "/v1/charges", charge("ord_1", "pm_card_ok", 1000))
			if tt.status == 0 {
				if err == nil {
					t.Fatalf("got %d %s, want a dropped connection", status, body)
				}
			} else if err != nil || status != tt.status || !strings.Contains(body, tt.code) {
				t.Fatalf("got %d %s %v, want %d %s", status, body, err, tt.status, tt.code)
			}
			if n := len(e.srv.LedgerSnapshot().Charges); n != tt.recorded {
				t.Fatalf("ledger has %d charges, want %d", n, tt.recorded)
			}
			injected := 0
			for _, n := range e.srv.Stats().Injected {
				injected += n
			}
			if want := e.srv.Stats().Injected[tt.name]; injected != want || (tt.status != 201) != (want == 1) {
				t.Fatalf("stats %+v after %s", e.srv.Stats().Injected, tt.name)
			}
			// Faults are per request and lookups are never faulted: the ledger
			// tells the truth.
			wantLookup := 404
			if tt.recorded == 1 {
				wantLookup = 200
			}
			if status, body := e.mustCall("GET", "/v1/charges/ord_1", ""); status != wantLookup {
				t.Fatalf("lookup = %d %s, want %d", status, body, wantLookup)
			}
		})
	}
}

// Close releases an answer held for a client that never gives up, so that
// the HTTP server can shut down.
func TestCloseReleasesHeldAnswers(t *testing.T) {
	var srv *fakeserver.Server
	held := make(chan struct{})
	srv, err := fakeserver.New(fakeserver.Options{Faults: fakeserver.Faults{TimeoutAfterCharge: 1}, OnHold: func() { close(held) }})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	done := make(chan error, 1)
	go func() {
		res, err := http.Post(ts.URL+"/v1/charges", "application/json", strings.NewReader(charge("ord_1", "pm_card_ok", 1)))
		if err == nil {
			res.Body.Close()
		}
		done <- err
	}()
	<-held
	srv.Close()
	if err := <-done; err == nil {
		t.Fatal("a held answer was delivered; want the connection dropped")
	}
	if n := len(srv.LedgerSnapshot().Charges); n != 1 {
		t.Fatalf("ledger has %d charges, want 1", n)
	}
}

// A seed makes the fault sequence repeatable.
func TestSeededDraws(t *testing.T) {
	faults := fakeserver.Faults{ErrorBeforeCharge: 0.3, ErrorAfterCharge: 0.3}
	run := func() []int {
		e := newEnv(t, fakeserver.Options{Faults: faults, Seed: 42})
		var statuses []int
		for i := range 30 {
			status, _ := e.mustCall("POST", "/v1/charges", charge("ord_"+string(rune('a'+i)), "pm_card_ok", 1))
			statuses = append(statuses, status)
		}
		return statuses
	}
	a, b := run(), run()
	seen := map[int]bool{}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("same seed, different draws: %v vs %v", a, b)
		}
		seen[a[i]] = true
	}
	if !seen[201] || !seen[500] || !seen[503] {
		t.Fatalf("30 draws at 30%%/30%% produced only %v", a)
	}
}

func TestNewRefusesBadFaults(t *testing.T) {
	_, err := fakeserver.New(fakeserver.Options{Faults: fakeserver.Faults{ErrorAfterCharge: 2}})
	if err == nil || !strings.Contains(err.Error(), "error_after_charge") {
		t.Fatalf("New = %v, want an error naming error_after_charge", err)
	}
}

// Pending charges, their next action, the 3-D Secure page, settling a
// deposit, and requests the server can never accept.
func TestPendingAndRejected(t *testing.T) {
	e := newEnv(t, fakeserver.Options{})
	threeDS := `{"merchant_order_id":"ord_3ds","amount":1000,"currency":"KRW","payment_method":"pm_card_3ds","allow_next_action":true}`
	steps := []struct {
		name, method, path, body string
		status                   int
		contains                 string
	}{
		{"3ds pending", "POST", "/v1/charges", threeDS, 201, `"next_action":{"type":"redirect","url":"` + e.url + `/3ds/fake_ch_1"}`},
		{"3ds pending lookup", "GET", "/v1/charges/ord_3ds", "", 200, `"status":"pending"`},
		{"3ds one step", "POST", "/v1/charges", charge("ord_1step", "pm_card_3ds", 1000), 201, `"code":"authentication_required"`},
		{"virtual account", "POST", "/v1/charges", charge("ord_va", "pm_virtual_account", 1000), 201, `"status":"pending"`},
		{"lost card", "POST", "/v1/charges", charge("ord_lost", "pm_card_lost", 1000), 201, `"decline_code":"lost_card","code":"lost_card"`},
		{"invalid request", "POST", "/v1/charges", charge("ord_bad", "pm_invalid_request", 1000), 400, `"code":"invalid_request"`},
		{"currency not taken", "POST", "/v1/charges", `{"merchant_order_id":"ord_xts","amount":1,"currency":"XTS","payment_method":"pm_card_ok"}`, 400, `XTS`},
		{"nothing recorded", "GET", "/v1/charges/ord_bad", "", 404, `"code":"not_found"`},
		{"3ds page passes", "GET", "/3ds/fake_ch_1", "", 200, "3-D Secure passed"},
		{"3ds done", "GET", "/v1/charges/ord_3ds", "", 200, `"status":"succeeded"`},
		{"3ds page again", "GET", "/3ds/fake_ch_1", "", 409, `"code":"not_pending"`},
		{"3ds page unknown", "GET", "/3ds/fake_ch_99", "", 404, `"code":"not_found"`},
		{"settle bad status", "POST", "/admin/charges/ord_va/settle", `{"status":"pending"}`, 400, `"code":"invalid_request"`},
		{"deposit expired", "POST", "/admin/charges/ord_va/settle", `{"status":"declined","decline_code":"deposit_expired"}`, 200, `"decline_code":"deposit_expired"`},
		{"settle twice", "POST", "/admin/charges/ord_va/settle", `{"status":"succeeded"}`, 409, `"code":"not_pending"`},
		{"settle unknown", "POST", "/admin/charges/ord_none/settle", `{"status":"succeeded"}`, 409, `"code":"not_pending"`},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			status, body := e.mustCall(st.method, st.path, st.body)
			if status != st.status || !strings.Contains(body, st.contains) {
				t.Fatalf("%s %s = %d %s; want %d containing %s", st.method, st.path, status, body, st.status, st.contains)
			}
		})
	}
	// A customer who fails 3-D Secure: the charge is declined.
	body := strings.Replace(threeDS, "ord_3ds", "ord_3ds_fail", 1)
	if status, b := e.mustCall("POST", "/v1/charges", body); status != 201 || !strings.Contains(b, "fake_ch_") {
		t.Fatalf("%d %s", status, b)
	}
	var c fakeserver.Charge
	_, b := e.mustCall("GET", "/v1/charges/ord_3ds_fail", "")
	if err := json.Unmarshal([]byte(b), &c); err != nil {
		t.Fatal(err)
	}
	if status, b := e.mustCall("GET", "/3ds/"+c.Reference+"?result=failed", ""); status != 200 || !strings.Contains(b, "failed") {
		t.Fatalf("%d %s", status, b)
	}
	if _, b := e.mustCall("GET", "/v1/charges/ord_3ds_fail", ""); !strings.Contains(b, `"decline_code":"authentication_failed"`) {
		t.Fatalf("after a failed check: %s", b)
	}
}

// Refunds draw the same faults as charges: the "after" kinds record the
// refund first, and Stats counts what refund calls drew apart.
func TestRefundFaultKinds(t *testing.T) {
	tests := []struct {
		name     string
		faults   fakeserver.Faults
		status   int // 0: the connection is dropped
		recorded int
	}{
		{"error_before_charge", fakeserver.Faults{ErrorBeforeCharge: 1}, 503, 0},
		{"error_after_charge", fakeserver.Faults{ErrorAfterCharge: 1}, 500, 1},
		{"drop_connection_after_charge", fakeserver.Faults{DropConnectionAfterCharge: 1}, 0, 1},
		{"timeout_after_charge", fakeserver.Faults{TimeoutAfterCharge: 1}, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			e := newEnv(t, fakeserver.Options{OnHold: cancel})
			if status, body := e.mustCall("POST", "/v1/charges", charge("ord_1", "pm_card_ok", 1000)); status != 201 {
				t.Fatalf("charge = %d %s", status, body)
			}
			if err := e.srv.SetFaults(tt.faults); err != nil {
				t.Fatal(err)
			}
			status, body, err := e.call(ctx, "POST", "/v1/refunds",
				`{"refund_order_id":"rfd_1","merchant_order_id":"ord_1","charge_reference":"fake_ch_1","amount":400,"currency":"KRW"}`)
			if tt.status == 0 && err == nil || tt.status != 0 && (err != nil || status != tt.status) {
				t.Fatalf("got %d %s %v, want %d (0: a dropped connection)", status, body, err, tt.status)
			}
			if n := len(e.srv.LedgerSnapshot().Refunds); n != tt.recorded {
				t.Fatalf("ledger has %d refunds, want %d", n, tt.recorded)
			}
			st := e.srv.Stats()
			if st.InjectedRefunds[tt.name] != 1 || st.Injected[tt.name] != 1 || len(st.InjectedRefunds) != 1 {
				t.Fatalf("stats %+v after a refund under %s", st, tt.name)
			}
		})
	}
}

// Authorize, capture and void over the API, and the ledger they leave.
func TestCaptureAPI(t *testing.T) {
	e := newEnv(t, fakeserver.Options{})
	manual := func(order string) string {
		b, _ := json.Marshal(fakeserver.ChargeRequest{MerchantOrderID: order, Amount: 1000, Currency: "KRW",
			PaymentMethod: "pm_card_ok", CaptureMethod: "manual"})
		return string(b)
	}
	capture := func(id, order, ref string, amount int) string {
		b, _ := json.Marshal(fakeserver.CaptureRequest{CaptureOrderID: id, MerchantOrderID: order, ChargeReference: ref,
			Amount: int64(amount), Currency: "KRW"})
		return string(b)
	}
	void := func(id, order, ref string) string {
		b, _ := json.Marshal(fakeserver.VoidRequest{VoidOrderID: id, MerchantOrderID: order, ChargeReference: ref, Reason: "duplicate"})
		return string(b)
	}
	steps := []struct {
		name, method, path, body string
		status                   int
		contains                 string
	}{
		{"authorize", "POST", "/v1/charges", manual("ord_1"), 201, `"status":"authorized"`},
		{"authorize again", "POST", "/v1/charges", manual("ord_1"), 200, `"capture_before":"`},
		{"same order taken at once", "POST", "/v1/charges", charge("ord_1", "pm_card_ok", 1000), 409, `"code":"order_id_reused"`},
		{"bad capture method", "POST", "/v1/charges", strings.Replace(manual("ord_x"), "manual", "later", 1), 400, `"code":"invalid_request"`},
		{"capture too much", "POST", "/v1/captures", capture("cap_1", "ord_1", "fake_ch_1", 1001), 400, `"code":"invalid_request"`},
		{"capture no such charge", "POST", "/v1/captures", capture("cap_1", "ord_1", "fake_ch_9", 400), 400, `"code":"invalid_request"`},
		{"capture", "POST", "/v1/captures", capture("cap_1", "ord_1", "fake_ch_1", 400), 201, `"status":"succeeded","amount":1000,"currency":"KRW","amount_captured":400`},
		{"capture repeat", "POST", "/v1/captures", capture("cap_1", "ord_1", "fake_ch_1", 400), 200, `"amount_captured":400`},
		{"capture reused", "POST", "/v1/captures", capture("cap_1", "ord_1", "fake_ch_1", 401), 409, `"code":"order_id_reused"`},
		{"another capture takes nothing", "POST", "/v1/captures", capture("cap_2", "ord_1", "fake_ch_1", 100), 200, `"amount_captured":400`},
		{"void of a capture", "POST", "/v1/voids", void("vod_1", "ord_1", "fake_ch_1"), 200, `"status":"succeeded"`},
		{"lookup captured", "GET", "/v1/charges/ord_1", "", 200, `"amount_captured":400`},
		{"refund more than captured", "POST", "/v1/refunds", `{"refund_order_id":"rfd_1","merchant_order_id":"ord_1","charge_reference":"fake_ch_1","amount":401,"currency":"KRW"}`, 200, `"decline_code":"amount_exceeds_refundable"`},
		{"authorize another", "POST", "/v1/charges", manual("ord_2"), 201, `"reference":"fake_ch_3"`},
		{"void", "POST", "/v1/voids", void("vod_2", "ord_2", "fake_ch_3"), 201, `"status":"voided"`},
		{"void repeat", "POST", "/v1/voids", void("vod_2", "ord_2", "fake_ch_3"), 200, `"status":"voided"`},
		{"capture of a void", "POST", "/v1/captures", capture("cap_3", "ord_2", "fake_ch_3", 1000), 200, `"status":"voided"`},
		{"authorize a third", "POST", "/v1/charges", manual("ord_3"), 201, `"reference":"fake_ch_4"`},
		{"lapse", "POST", "/admin/charges/ord_3/lapse", "", 200, `"status":"voided"`},
		{"lapse again", "POST", "/admin/charges/ord_3/lapse", "", 409, `"code":"not_authorized"`},
		{"capture unknown field", "POST", "/v1/captures", `{"capture_order_id":"cap_4","final":true}`, 400, `"code":"invalid_request"`},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			status, body := e.mustCall(st.method, st.path, st.body)
			if status != st.status || !strings.Contains(body, st.contains) {
				t.Fatalf("%s %s = %d %s; want %d containing %s", st.method, st.path, status, body, st.status, st.contains)
			}
		})
	}
	status, body := e.mustCall("GET", "/admin/ledger", "")
	var l fakeserver.Ledger
	if err := json.Unmarshal([]byte(body), &l); err != nil || status != 200 {
		t.Fatalf("ledger: %d %s %v", status, body, err)
	}
	want := []fakeserver.Authorization{
		{MerchantOrderID: "ord_1", Reference: "fake_ch_1", Status: "succeeded", Amount: 1000, AmountCaptured: 400, Currency: "KRW"},
		{MerchantOrderID: "ord_2", Reference: "fake_ch_3", Status: "voided", Amount: 1000, Currency: "KRW"},
		{MerchantOrderID: "ord_3", Reference: "fake_ch_4", Status: "voided", Amount: 1000, Currency: "KRW", Lapsed: true},
	}
	if len(l.Authorizations) != len(want) {
		t.Fatalf("authorizations %+v, want %+v", l.Authorizations, want)
	}
	for i, a := range l.Authorizations {
		if a.CaptureBefore.IsZero() {
			t.Errorf("authorization %d has no capture_before", i)
		}
		a.CaptureBefore = time.Time{}
		if a != want[i] {
			t.Errorf("authorization %d = %+v, want %+v", i, a, want[i])
		}
	}
	if len(l.Captures) != 1 || l.Captures[0].CaptureOrderID != "cap_1" || l.Captures[0].Amount != 400 || l.Captures[0].Reference == "" ||
		len(l.Voids) != 1 || l.Voids[0] != (fakeserver.Void{VoidOrderID: "vod_2", MerchantOrderID: "ord_2", ChargeReference: "fake_ch_3", Reason: "duplicate"}) {
		t.Fatalf("captures %+v, voids %+v", l.Captures, l.Voids)
	}
	if st := e.srv.Stats(); st.CaptureCalls != 8 || st.VoidCalls != 3 {
		t.Fatalf("stats %+v", st)
	}
	if status, _ := e.mustCall("POST", "/admin/reset", ""); status != http.StatusNoContent {
		t.Fatalf("reset: %d", status)
	}
	if l := e.srv.LedgerSnapshot(); len(l.Authorizations)+len(l.Captures)+len(l.Voids) != 0 {
		t.Fatalf("ledger after reset: %+v", l)
	}
}

// Captures and voids draw the same faults as charges: the "after" kinds act
// first, and Stats counts what each kind drew apart.
func TestCommandFaultKinds(t *testing.T) {
	tests := []struct {
		name   string
		faults fakeserver.Faults
		status int // 0: the connection is dropped
		acted  bool
	}{
		{"error_before_charge", fakeserver.Faults{ErrorBeforeCharge: 1}, 503, false},
		{"error_after_charge", fakeserver.Faults{ErrorAfterCharge: 1}, 500, true},
		{"drop_connection_after_charge", fakeserver.Faults{DropConnectionAfterCharge: 1}, 0, true},
		{"timeout_after_charge", fakeserver.Faults{TimeoutAfterCharge: 1}, 0, true},
	}
	for _, tt := range tests {
		for _, op := range []string{"capture", "void"} {
			t.Run(op+"_"+tt.name, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				e := newEnv(t, fakeserver.Options{OnHold: cancel})
				if status, body := e.mustCall("POST", "/v1/charges",
					`{"merchant_order_id":"ord_1","amount":1000,"currency":"KRW","payment_method":"pm_card_ok","capture_method":"manual"}`); status != 201 {
					t.Fatalf("authorize = %d %s", status, body)
				}
				if err := e.srv.SetFaults(tt.faults); err != nil {
					t.Fatal(err)
				}
				path, body := "/v1/captures", `{"capture_order_id":"cap_1","merchant_order_id":"ord_1","charge_reference":"fake_ch_1","amount":1000,"currency":"KRW"}`
				if op == "void" {
					path, body = "/v1/voids", `{"void_order_id":"vod_1","merchant_order_id":"ord_1","charge_reference":"fake_ch_1"}`
				}
				status, answer, err := e.call(ctx, "POST", path, body)
				if tt.status == 0 && err == nil || tt.status != 0 && (err != nil || status != tt.status) {
					t.Fatalf("got %d %s %v, want %d (0: a dropped connection)", status, answer, err, tt.status)
				}
				l := e.srv.LedgerSnapshot()
				made := len(l.Captures)
				if op == "void" {
					made = len(l.Voids)
				}
				if want := map[bool]int{false: 0, true: 1}[tt.acted]; made != want {
					t.Fatalf("ledger has %d %ss, want %d: %+v", made, op, want, l)
				}
				st := e.srv.Stats()
				part := st.InjectedCaptures
				if op == "void" {
					part = st.InjectedVoids
				}
				if part[tt.name] != 1 || st.Injected[tt.name] != 1 || len(st.InjectedRefunds) != 0 {
					t.Fatalf("stats %+v after a %s under %s", st, op, tt.name)
				}
			})
		}
	}
}
