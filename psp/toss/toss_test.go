package toss_test

import (
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"gateway/payments"
	"gateway/psp"
	"gateway/psp/psptest"
	"gateway/psp/toss"
)

const secret = "test_sk_zXLkKEypNArWmo50nX3lmeaxYG5R"

func mustNew(t *testing.T, url string) *toss.Adapter {
	t.Helper()
	a, err := toss.New(toss.Config{SecretKey: secret, BaseURL: url})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestConformance(t *testing.T) {
	psptest.Run(t, func(t *testing.T) psptest.Harness {
		fake := newFakeToss(secret)
		faults := &psptest.HTTPFaults{
			Handler: fake,
			OpOf:    opOf,
			Refuse: func(w http.ResponseWriter, r *http.Request) {
				writeFake(w, http.StatusTooManyRequests, fakeError{"TOO_MANY_REQUESTS", "요청이 너무 많습니다."})
			},
			ServerError: func(w http.ResponseWriter, r *http.Request) {
				writeFake(w, http.StatusInternalServerError, fakeError{"FAILED_INTERNAL_SYSTEM_PROCESSING", "내부 시스템 처리 작업이 실패했습니다."})
			},
		}
		ts := httptest.NewServer(faults)
		t.Cleanup(ts.Close)
		return psptest.Harness{
			Adapter:     mustNew(t, ts.URL),
			Backend:     backend{faults, fake},
			Method:      paymentKey,
			Unreachable: mustNew(t, psptest.UnreachableURL(t)),
		}
	})
}

// paymentKey mints the widget's paymentKey for an order.
func paymentKey(o psptest.Outcome, orderID string) string {
	switch o {
	case psptest.DeclinedCard:
		return "tgen_declined_" + orderID
	case psptest.DeclinedFunds:
		return "tgen_nofunds_" + orderID
	}
	return "tgen_ok_" + orderID
}

func opOf(r *http.Request) psptest.Op {
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/payments/confirm":
		return psptest.OpCharge
	case r.Method == http.MethodPost:
		return psptest.OpRefund
	case strings.HasPrefix(r.URL.Path, "/v1/payments/orders/"):
		return psptest.OpLookup
	}
	return psptest.OpLookupRefund
}

type backend struct {
	*psptest.HTTPFaults
	fake *fakeToss
}

func (b backend) Charges(orderID string) int  { return b.fake.charges(orderID) }
func (b backend) Refunds(refundID string) int { return b.fake.refunds(refundID) }

// The requests are the documented ones: path, Basic auth with the secret key
// and an empty password, Idempotency-Key, JSON body.
func TestRequestShape(t *testing.T) {
	type seen struct {
		method, path, auth, idem, ctype string
		body                            map[string]any
	}
	var got []seen
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := seen{method: r.Method, path: r.URL.Path, auth: r.Header.Get("Authorization"),
			idem: r.Header.Get("Idempotency-Key"), ctype: r.Header.Get("Content-Type")}
		if r.Body != nil {
			b, _ := io.ReadAll(r.Body)
			_ = json.Unmarshal(b, &s.body)
		}
		got = append(got, s)
		writeFake(w, http.StatusOK, fakePayment{PaymentKey: "tgen_x", OrderID: "ord_000000000000000000000001", Status: "DONE",
			TotalAmount: 15000, BalanceAmount: 5000, Currency: "KRW",
			Cancels: []fakeCancel{{TransactionKey: "txk_1", CancelReason: "changed mind [ref:rfd_000001]", CancelAmount: 10000, CancelStatus: "DONE"}}})
	}))
	defer ts.Close()
	a := mustNew(t, ts.URL)
	ctx := t.Context()
	if _, err := a.Charge(ctx, psp.ChargeRequest{MerchantOrderID: "ord_000000000000000000000001", Amount: 15000, Currency: "KRW", PaymentMethod: "tgen_x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Lookup(ctx, "ord_000000000000000000000001"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Refund(ctx, psp.RefundRequest{RefundOrderID: "rfd_000001", MerchantOrderID: "ord_000000000000000000000001",
		ChargeReference: "tgen_x", Amount: 10000, Currency: "KRW", Reason: "changed mind"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.LookupRefund(ctx, "tgen_x", "rfd_000001"); err != nil {
		t.Fatal(err)
	}
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte(secret+":"))
	want := []seen{
		{"POST", "/v1/payments/confirm", auth, "gw-confirm-ord_000000000000000000000001", "application/json",
			map[string]any{"paymentKey": "tgen_x", "orderId": "ord_000000000000000000000001", "amount": 15000.0}},
		{"GET", "/v1/payments/orders/ord_000000000000000000000001", auth, "", "", nil},
		{"POST", "/v1/payments/tgen_x/cancel", auth, "gw-cancel-rfd_000001", "application/json",
			map[string]any{"cancelReason": "changed mind [ref:rfd_000001]", "cancelAmount": 10000.0}},
		{"GET", "/v1/payments/tgen_x", auth, "", "", nil},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d requests, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.method != w.method || g.path != w.path || g.auth != w.auth || g.idem != w.idem || g.ctype != w.ctype || !equalJSON(g.body, w.body) {
			t.Errorf("request %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
}

func equalJSON(a, b map[string]any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// Each documented answer to a confirm lands in its outcome class.
func TestConfirmAnswers(t *testing.T) {
	done := `{"paymentKey":"tgen_x","orderId":"ord_000000000000000000000001","status":"DONE","totalAmount":15000,"currency":"KRW"}`
	tests := []struct {
		name   string
		status int
		body   string
		// want: a decline code ("" for success) or a class
		decline string
		class   psp.Class
	}{
		{"approved", 200, done, "", 0},
		{"limit or funds", 403, `{"code":"REJECT_CARD_PAYMENT","message":"한도초과 혹은 잔액부족으로 결제에 실패했습니다."}`, psp.DeclineInsufficientFunds, 0},
		{"card company refuses", 403, `{"code":"REJECT_CARD_COMPANY","message":"결제 승인이 거절되었습니다."}`, psp.DeclineCardDeclined, 0},
		{"expired card", 400, `{"code":"INVALID_CARD_EXPIRATION","message":"카드 정보를 다시 확인해주세요."}`, "invalid_card_expiration", 0},
		{"unknown payment key", 404, `{"code":"NOT_FOUND_PAYMENT","message":"존재하지 않는 결제 정보 입니다."}`, psp.DeclineInvalidPaymentMethod, 0},
		{"session expired", 404, `{"code":"NOT_FOUND_PAYMENT_SESSION","message":"결제 시간이 만료되어 결제 진행 데이터가 존재하지 않습니다."}`, "payment_session_expired", 0},
		{"bad secret key", 401, `{"code":"UNAUTHORIZED_KEY","message":"인증되지 않은 시크릿 키 혹은 클라이언트 키 입니다."}`, "", psp.NotProcessed},
		{"invalid request", 400, `{"code":"INVALID_REQUEST","message":"잘못된 요청입니다."}`, "", psp.NotProcessed},
		{"rate limited", 429, `{"code":"TOO_MANY_REQUESTS","message":"..."}`, "", psp.NotProcessed},
		{"card company error", 400, `{"code":"PROVIDER_ERROR","message":"일시적인 오류가 발생했습니다. 잠시 후 다시 시도해주세요."}`, "", psp.Unknown},
		{"same key in flight", 409, `{"code":"IDEMPOTENT_REQUEST_PROCESSING","message":"..."}`, "", psp.Unknown},
		{"internal error", 500, `{"code":"FAILED_INTERNAL_SYSTEM_PROCESSING","message":"내부 시스템 처리 작업이 실패했습니다."}`, "", psp.Unknown},
		{"payment internal error", 500, `{"code":"FAILED_PAYMENT_INTERNAL_SYSTEM_PROCESSING","message":"결제가 완료되지 않았어요."}`, "", psp.Unknown},
		{"gateway html", 502, `<html>Bad Gateway</html>`, "", psp.Unknown},
		{"4xx unreadable", 400, `<html>Bad Request</html>`, "", psp.Unknown},
		{"200 unreadable", 200, `{"paymentKey":`, "", psp.Unknown},
		{"200 for another order", 200, strings.Replace(done, "ord_000000000000000000000001", "ord_000000000000000000000002", 1), "", psp.Unknown},
		{"200 virtual account", 200, strings.Replace(done, `"DONE"`, `"WAITING_FOR_DEPOSIT"`, 1), "", psp.Unknown},
		{"200 other amount", 200, strings.Replace(done, "15000", "15001", 1), "", psp.NotProcessed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.body)
			}))
			defer ts.Close()
			c, err := mustNew(t, ts.URL).Charge(t.Context(), psp.ChargeRequest{
				MerchantOrderID: "ord_000000000000000000000001", Amount: 15000, Currency: "KRW", PaymentMethod: "tgen_x"})
			if tt.class != 0 {
				if class, ok := psp.ClassOf(err); !ok || class != tt.class {
					t.Fatalf("Charge = %+v, %v; want class %s", c, err, tt.class)
				}
				return
			}
			wantStatus := psp.Succeeded
			if tt.decline != "" {
				wantStatus = psp.Declined
			}
			if err != nil || c.Status != wantStatus || c.DeclineCode != tt.decline || c.Reference != "tgen_x" {
				t.Fatalf("Charge = %+v, %v; want %s %q", c, err, wantStatus, tt.decline)
			}
		})
	}
}

// A payment's status read by Lookup.
func TestLookupStatuses(t *testing.T) {
	const order = "ord_000000000000000000000001"
	tests := []struct {
		name    string
		p       fakePayment
		status  psp.ChargeStatus
		decline string
		err     error // psp.ErrNotFound, or a class below
		class   psp.Class
	}{
		{"done", fakePayment{Status: "DONE"}, psp.Succeeded, "", nil, 0},
		{"refunded", fakePayment{Status: "CANCELED"}, psp.Succeeded, "", nil, 0},
		{"partly refunded", fakePayment{Status: "PARTIAL_CANCELED"}, psp.Succeeded, "", nil, 0},
		{"refused", fakePayment{Status: "ABORTED", Failure: &fakeError{"REJECT_CARD_PAYMENT", "잔액부족"}}, psp.Declined, psp.DeclineInsufficientFunds, nil, 0},
		{"refused unlisted code", fakePayment{Status: "ABORTED", Failure: &fakeError{"SOME_NEW_REFUSAL", "?"}}, psp.Declined, "some_new_refusal", nil, 0},
		{"refused without failure", fakePayment{Status: "ABORTED"}, psp.Declined, psp.DeclineCardDeclined, nil, 0},
		{"expired", fakePayment{Status: "EXPIRED"}, psp.Declined, "expired", nil, 0},
		{"authenticated, not confirmed", fakePayment{Status: "IN_PROGRESS"}, "", "", psp.ErrNotFound, 0},
		{"ready", fakePayment{Status: "READY"}, "", "", psp.ErrNotFound, 0},
		{"virtual account", fakePayment{Status: "WAITING_FOR_DEPOSIT"}, "", "", nil, psp.Unknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := newFakeToss(secret)
			tt.p.PaymentKey, tt.p.OrderID, tt.p.TotalAmount, tt.p.Currency = "tgen_x", order, 15000, "KRW"
			fake.seed(tt.p)
			ts := httptest.NewServer(fake)
			defer ts.Close()
			c, err := mustNew(t, ts.URL).Lookup(t.Context(), order)
			switch {
			case tt.err != nil:
				if err != tt.err {
					t.Fatalf("Lookup = %+v, %v; want %v", c, err, tt.err)
				}
			case tt.class != 0:
				if class, ok := psp.ClassOf(err); !ok || class != tt.class {
					t.Fatalf("Lookup = %+v, %v; want class %s", c, err, tt.class)
				}
			default:
				want := psp.Charge{MerchantOrderID: order, Reference: "tgen_x", Status: tt.status, DeclineCode: tt.decline, Amount: 15000, Currency: "KRW"}
				if err != nil || c != want {
					t.Fatalf("Lookup = %+v, %v; want %+v", c, err, want)
				}
			}
		})
	}
	t.Run("404 from something else", func(t *testing.T) {
		ts := httptest.NewServer(http.NotFoundHandler())
		defer ts.Close()
		_, err := mustNew(t, ts.URL).Lookup(t.Context(), order)
		if class, ok := psp.ClassOf(err); !ok || class != psp.Unknown {
			t.Fatalf("Lookup = %v; a 404 that is not Toss's NOT_FOUND_PAYMENT must be Unknown", err)
		}
	})
}

// Once Toss has forgotten the idempotency key, a repeated confirm is answered
// ALREADY_PROCESSED_PAYMENT (or DUPLICATED_ORDER_ID with another paymentKey):
// still one charge, and the adapter returns it.
func TestRepeatAfterIdempotencyKeyExpired(t *testing.T) {
	tests := []struct {
		name, secondKey string
	}{
		{"same payment key", "tgen_ok_a"},
		{"another payment key", "tgen_ok_b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := newFakeToss(secret)
			ts := httptest.NewServer(fake)
			defer ts.Close()
			a := mustNew(t, ts.URL)
			req := psp.ChargeRequest{MerchantOrderID: payments.MerchantOrderID("mer_1", "key-1"), Amount: 15000, Currency: "KRW", PaymentMethod: "tgen_ok_a"}
			first, err := a.Charge(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			fake.forgetIdempotencyKeys()
			req.PaymentMethod = tt.secondKey
			second, err := a.Charge(t.Context(), req)
			if err != nil || second != first {
				t.Fatalf("repeat = %+v, %v; want %+v", second, err, first)
			}
			if n := fake.charges(req.MerchantOrderID); n != 1 {
				t.Fatalf("%d charges, want 1", n)
			}
			// A refund repeated after its key expired finds its cancel.
			r := psp.RefundRequest{RefundOrderID: "rfd_000000000001", MerchantOrderID: req.MerchantOrderID, ChargeReference: first.Reference,
				Amount: 15000, Currency: "KRW"}
			rf, err := a.Refund(t.Context(), r)
			if err != nil {
				t.Fatal(err)
			}
			fake.forgetIdempotencyKeys()
			again, err := a.Refund(t.Context(), r)
			if err != nil || again != rf || fake.refunds(r.RefundOrderID) != 1 {
				t.Fatalf("repeated refund = %+v, %v; want %+v once", again, err, rf)
			}
		})
	}
}

// The gateway's order ids fit Toss's orderId rule; ids that do not are
// refused before anything is sent.
func TestOrderIDRules(t *testing.T) {
	fake := newFakeToss(secret)
	ts := httptest.NewServer(fake)
	defer ts.Close()
	a := mustNew(t, ts.URL)
	gw := payments.MerchantOrderID("mer_01J0000000000000000000000", "any key")
	tests := []struct {
		name, orderID string
		ok            bool
	}{
		{"gateway order id", gw, true},
		{"shortest", "abc-12", true},
		{"longest", strings.Repeat("a", 64), true},
		{"too short", "abc12", false},
		{"too long", strings.Repeat("a", 65), false},
		{"bad character", "ord#000001", false},
		{"non-ascii", "주문-000001", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := fake.requestCount()
			c, err := a.Charge(t.Context(), psp.ChargeRequest{MerchantOrderID: tt.orderID, Amount: 1000, Currency: "KRW", PaymentMethod: "tgen_ok_" + tt.name})
			if tt.ok {
				if err != nil || c.Status != psp.Succeeded {
					t.Fatalf("Charge = %+v, %v", c, err)
				}
				return
			}
			if class, ok := psp.ClassOf(err); !ok || class != psp.NotProcessed {
				t.Fatalf("Charge = %v, want NotProcessed", err)
			}
			if fake.requestCount() != before {
				t.Fatal("an invalid order id was sent to Toss")
			}
		})
	}
	if _, err := a.Charge(t.Context(), psp.ChargeRequest{MerchantOrderID: gw, Amount: 1000, Currency: "USD", PaymentMethod: "tgen_ok_x"}); err == nil {
		t.Fatal("a USD charge was accepted")
	}
}

func TestCancelReasonFitsTossLimit(t *testing.T) {
	fake := newFakeToss(secret)
	ts := httptest.NewServer(fake)
	defer ts.Close()
	a := mustNew(t, ts.URL)
	c, err := a.Charge(t.Context(), psp.ChargeRequest{MerchantOrderID: "ord_000000000000000000000009", Amount: 1000, Currency: "KRW", PaymentMethod: "tgen_ok_x"})
	if err != nil {
		t.Fatal(err)
	}
	id := strings.Repeat("r", 64)
	r, err := a.Refund(t.Context(), psp.RefundRequest{RefundOrderID: id, MerchantOrderID: c.MerchantOrderID, ChargeReference: c.Reference,
		Amount: 1000, Currency: "KRW", Reason: strings.Repeat("환불", 200)})
	if err != nil || r.Status != psp.RefundSucceeded {
		t.Fatalf("Refund with a long reason = %+v, %v", r, err)
	}
	if got, err := a.LookupRefund(t.Context(), c.Reference, id); err != nil || got != r {
		t.Fatalf("LookupRefund = %+v, %v", got, err)
	}
}

func TestConfig(t *testing.T) {
	if _, err := toss.New(toss.Config{}); err == nil {
		t.Fatal("New accepted an empty secret key")
	}
	if _, err := toss.New(toss.Config{SecretKey: secret, BaseURL: "ftp://x"}); err == nil {
		t.Fatal("New accepted an ftp URL")
	}
	var b strings.Builder
	slog.New(slog.NewTextHandler(&b, nil)).Info("psp", "toss", toss.Config{SecretKey: secret})
	if strings.Contains(b.String(), secret[8:]) || !strings.Contains(b.String(), "test_sk_****") {
		t.Fatalf("log line leaks the secret or hides its kind: %s", b.String())
	}
	a := mustNew(t, "http://127.0.0.1:1")
	if caps := a.Capabilities(); caps.Name != "toss" || !caps.AuthoritativeLookup || !caps.DedupesOrderID || caps.MaxOrderIDLen != 64 {
		t.Fatalf("Capabilities = %+v", caps)
	}
}
