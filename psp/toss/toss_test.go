package toss_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
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
	"gateway/psp/toss/tosstest"
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
		fake := tosstest.New(secret)
		faults := &psptest.HTTPFaults{
			Handler: fake,
			OpOf:    opOf,
			Refuse: func(w http.ResponseWriter, r *http.Request) {
				tosstest.Write(w, http.StatusTooManyRequests, tosstest.Error{Code: "TOO_MANY_REQUESTS", Message: "요청이 너무 많습니다."})
			},
			ServerError: func(w http.ResponseWriter, r *http.Request) {
				tosstest.Write(w, http.StatusInternalServerError, tosstest.Error{Code: "FAILED_INTERNAL_SYSTEM_PROCESSING", Message: "내부 시스템 처리 작업이 실패했습니다."})
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
	case psptest.DeclinedOther:
		return "tgen_newcode_" + orderID
	case psptest.Invalid:
		return "tgen_belowmin_" + orderID
	case psptest.Pending:
		return "tgen_vbank_" + orderID
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
	fake *tosstest.Server
}

func (b backend) Charges(orderID string) int  { return b.fake.Charges(orderID) }
func (b backend) Refunds(refundID string) int { return b.fake.Refunds(refundID) }
func (b backend) Settle(orderID string, o psptest.Outcome) {
	b.fake.Deposit(orderID, o == psptest.Success)
}

// The requests are the documented ones: path, Basic auth with the secret key
// and an empty password, Idempotency-Key, JSON body.
func TestRequestShape(t *testing.T) {
	type seen struct {
		method, path, auth, idem, ctype, version string
		body                                     map[string]any
	}
	var got []seen
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := seen{method: r.Method, path: r.URL.Path, auth: r.Header.Get("Authorization"),
			idem: r.Header.Get("Idempotency-Key"), ctype: r.Header.Get("Content-Type"), version: r.Header.Get("TossPayments-API-Version")}
		if r.Body != nil {
			b, _ := io.ReadAll(r.Body)
			_ = json.Unmarshal(b, &s.body)
		}
		got = append(got, s)
		tosstest.Write(w, http.StatusOK, tosstest.Payment{PaymentKey: "tgen_x", OrderID: "ord_000000000000000000000001", Status: "DONE",
			TotalAmount: 15000, BalanceAmount: 5000, Currency: "KRW", ApprovedAt: tosstest.Now(),
			Cancels: []tosstest.Cancel{{TransactionKey: "txk_1", CancelReason: "changed mind [ref:rfd_000001]", CancelAmount: 10000, CancelStatus: "DONE"}}})
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
	const v = toss.APIVersion
	want := []seen{
		{"POST", "/v1/payments/confirm", auth, "gw-confirm-ord_000000000000000000000001", "application/json", v,
			map[string]any{"paymentKey": "tgen_x", "orderId": "ord_000000000000000000000001", "amount": 15000.0}},
		{"GET", "/v1/payments/orders/ord_000000000000000000000001", auth, "", "", v, nil},
		{"POST", "/v1/payments/tgen_x/cancel", auth, "gw-cancel-rfd_000001", "application/json", v,
			map[string]any{"cancelReason": "changed mind [ref:rfd_000001]", "cancelAmount": 10000.0}},
		{"GET", "/v1/payments/tgen_x", auth, "", "", v, nil},
	}
	if v != "2022-11-16" {
		t.Fatalf("APIVersion %q: the adapter is written against 2022-11-16; review the release notes before moving it", v)
	}
	if len(got) != len(want) {
		t.Fatalf("got %d requests, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.method != w.method || g.path != w.path || g.auth != w.auth || g.idem != w.idem || g.ctype != w.ctype ||
			g.version != w.version || !equalJSON(g.body, w.body) {
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
	done := `{"paymentKey":"tgen_x","orderId":"ord_000000000000000000000001","status":"DONE","approvedAt":"2024-01-01T00:00:00+09:00","totalAmount":15000,"currency":"KRW"}`
	tests := []struct {
		name   string
		status int
		body   string
		// want: a status with a decline code, or a class
		want    psp.ChargeStatus
		decline string
		class   psp.Class
		is      error
	}{
		{"approved", 200, done, psp.Succeeded, "", 0, nil},
		{"approved, amount with a fraction part", 200, strings.Replace(done, "15000", "15000.0", 1), psp.Succeeded, "", 0, nil},
		{"approved, amount in exponent form", 200, strings.Replace(done, "15000", "1.5e4", 1), psp.Succeeded, "", 0, nil},
		{"amount not whole", 200, strings.Replace(done, "15000", "15000.5", 1), "", "", psp.Unknown, nil},
		{"limit or funds", 403, `{"code":"REJECT_CARD_PAYMENT","message":"한도초과 혹은 잔액부족으로 결제에 실패했습니다."}`, psp.Declined, psp.DeclineInsufficientFunds, 0, nil},
		{"card company refuses", 403, `{"code":"REJECT_CARD_COMPANY","message":"결제 승인이 거절되었습니다."}`, psp.Declined, psp.DeclineCardDeclined, 0, nil},
		{"refer to issuer", 400, `{"code":"INVALID_REJECT_CARD","message":"카드 사용이 거절되었습니다. 카드사 문의가 필요합니다."}`, psp.Declined, psp.DeclineCardDeclined, 0, nil},
		{"points not allowed", 400, `{"code":"NOT_ALLOWED_POINT_USE","message":"포인트 사용이 불가한 카드로 카드 포인트 결제에 실패했습니다."}`, psp.Declined, "not_allowed_point_use", 0, nil},
		{"expired card", 400, `{"code":"INVALID_CARD_EXPIRATION","message":"카드 정보를 다시 확인해주세요."}`, psp.Declined, "invalid_card_expiration", 0, nil},
		{"unknown payment key", 404, `{"code":"NOT_FOUND_PAYMENT","message":"존재하지 않는 결제 정보 입니다."}`, psp.Declined, psp.DeclineInvalidPaymentMethod, 0, nil},
		{"session expired", 404, `{"code":"NOT_FOUND_PAYMENT_SESSION","message":"결제 시간이 만료되어 결제 진행 데이터가 존재하지 않습니다."}`, psp.Declined, "payment_session_expired", 0, nil},
		{"below minimum", 400, `{"code":"BELOW_MINIMUM_AMOUNT","message":"신용카드는 결제금액이 100원 이상, 계좌는 200원이상부터 결제가 가능합니다."}`, "", "", psp.Rejected, nil},
		{"invalid request", 400, `{"code":"INVALID_REQUEST","message":"잘못된 요청입니다."}`, "", "", psp.Rejected, nil},
		{"bad secret key", 401, `{"code":"UNAUTHORIZED_KEY","message":"인증되지 않은 시크릿 키 혹은 클라이언트 키 입니다."}`, "", "", psp.NotProcessed, nil},
		{"wrong secret key", 400, `{"code":"INVALID_API_KEY","message":"잘못된 시크릿키 연동 정보 입니다."}`, "", "", psp.NotProcessed, nil},
		{"out of hours", 403, `{"code":"NOT_AVAILABLE_PAYMENT","message":"결제가 불가능한 시간대입니다"}`, "", "", psp.NotProcessed, nil},
		{"rate limited", 429, `{"code":"TOO_MANY_REQUESTS","message":"..."}`, "", "", psp.NotProcessed, nil},
		{"card company error", 400, `{"code":"PROVIDER_ERROR","message":"일시적인 오류가 발생했습니다. 잠시 후 다시 시도해주세요."}`, "", "", psp.Unknown, nil},
		{"same key in flight", 409, `{"code":"IDEMPOTENT_REQUEST_PROCESSING","message":"..."}`, "", "", psp.Unknown, nil},
		{"internal error", 500, `{"code":"FAILED_INTERNAL_SYSTEM_PROCESSING","message":"내부 시스템 처리 작업이 실패했습니다."}`, "", "", psp.Unknown, nil},
		{"payment internal error", 500, `{"code":"FAILED_PAYMENT_INTERNAL_SYSTEM_PROCESSING","message":"결제가 완료되지 않았어요."}`, "", "", psp.Unknown, nil},
		{"5xx with a code never seen", 503, `{"code":"SOMETHING_NEW","message":"..."}`, "", "", psp.Unknown, nil},
		{"gateway html", 502, `<html>Bad Gateway</html>`, "", "", psp.Unknown, nil},
		{"4xx unreadable", 400, `<html>Bad Request</html>`, "", "", psp.Unknown, nil},
		{"200 unreadable", 200, `{"paymentKey":`, "", "", psp.Unknown, nil},
		{"200 for another order", 200, strings.Replace(done, "ord_000000000000000000000001", "ord_000000000000000000000002", 1), "", "", psp.Unknown, psp.ErrMismatch},
		{"200 other amount", 200, strings.Replace(done, "15000", "15001", 1), "", "", psp.Unknown, psp.ErrMismatch},
		{"200 other currency", 200, strings.Replace(done, "KRW", "USD", 1), "", "", psp.Unknown, psp.ErrMismatch},
		{"200 virtual account", 200, strings.Replace(done, `"DONE"`, `"WAITING_FOR_DEPOSIT"`, 1), psp.Pending, "", 0, nil},
		{"200 never confirmed", 200, strings.Replace(done, `"DONE"`, `"IN_PROGRESS"`, 1), "", "", psp.Unknown, nil},
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
				if tt.is != nil && !errors.Is(err, tt.is) {
					t.Fatalf("err = %v, want %v", err, tt.is)
				}
				if e := new(psp.Error); errors.As(err, &e) && e.Class != psp.Unknown && strings.HasPrefix(tt.body, "{\"code\"") && e.Code == "" {
					t.Fatalf("err = %v: the raw code is lost", err)
				}
				return
			}
			if err != nil || c.Status != tt.want || c.DeclineCode != tt.decline || c.Reference != "tgen_x" || c.Amount != 15000 {
				t.Fatalf("Charge = %+v, %v; want %s %q", c, err, tt.want, tt.decline)
			}
			if c.Status == psp.Declined && !strings.Contains(tt.body, `"code":"`+c.Code+`"`) {
				t.Fatalf("Charge = %+v: the raw code is not Toss's", c)
			}
		})
	}
}

// A payment's status read by Lookup.
func TestLookupStatuses(t *testing.T) {
	const order = "ord_000000000000000000000001"
	tests := []struct {
		name    string
		p       tosstest.Payment
		status  psp.ChargeStatus
		decline string
		err     error // psp.ErrNotFound, or a class below
		class   psp.Class
	}{
		{"done", tosstest.Payment{Status: "DONE", ApprovedAt: tosstest.Now()}, psp.Succeeded, "", nil, 0},
		{"refunded", tosstest.Payment{Status: "CANCELED", ApprovedAt: tosstest.Now()}, psp.Succeeded, "", nil, 0},
		{"partly refunded", tosstest.Payment{Status: "PARTIAL_CANCELED", ApprovedAt: tosstest.Now()}, psp.Succeeded, "", nil, 0},
		{"cancelled before approval", tosstest.Payment{Status: "CANCELED"}, psp.Declined, "canceled", nil, 0},
		{"refused", tosstest.Payment{Status: "ABORTED", Failure: &tosstest.Error{Code: "REJECT_CARD_PAYMENT", Message: "잔액부족"}}, psp.Declined, psp.DeclineInsufficientFunds, nil, 0},
		{"refused unlisted code", tosstest.Payment{Status: "ABORTED", Failure: &tosstest.Error{Code: "SOME_NEW_REFUSAL", Message: "?"}}, psp.Declined, "some_new_refusal", nil, 0},
		{"refused without failure", tosstest.Payment{Status: "ABORTED"}, psp.Declined, psp.DeclineCardDeclined, nil, 0},
		{"expired", tosstest.Payment{Status: "EXPIRED"}, psp.Declined, "expired", nil, 0},
		{"expired with failure", tosstest.Payment{Status: "EXPIRED", Failure: &tosstest.Error{Code: "EXPIRED_PAYMENT", Message: "결제가 만료되었습니다."}}, psp.Declined, "expired_payment", nil, 0},
		{"authenticated, not confirmed", tosstest.Payment{Status: "IN_PROGRESS"}, "", "", psp.ErrNotFound, 0},
		{"ready", tosstest.Payment{Status: "READY"}, "", "", psp.ErrNotFound, 0},
		{"virtual account waiting", tosstest.Payment{Status: "WAITING_FOR_DEPOSIT", VirtualAccount: &tosstest.VirtualAccount{}}, psp.Pending, "", nil, 0},
		{"virtual account expired", tosstest.Payment{Status: "WAITING_FOR_DEPOSIT", VirtualAccount: &tosstest.VirtualAccount{Expired: true}}, psp.Declined, "virtual_account_expired", nil, 0},
		{"a status never seen", tosstest.Payment{Status: "PARTIALLY_DONE"}, "", "", nil, psp.Unknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := tosstest.New(secret)
			tt.p.PaymentKey, tt.p.OrderID, tt.p.TotalAmount, tt.p.Currency = "tgen_x", order, 15000, "KRW"
			fake.Seed(tt.p)
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
				if tt.status == psp.Declined {
					want.Code = tt.p.Status
					if tt.p.Failure != nil {
						want.Code = tt.p.Failure.Code
					} else if tt.p.VirtualAccount != nil {
						want.Code = "VIRTUAL_ACCOUNT_EXPIRED"
					}
				}
				if err != nil || !c.Equal(want) {
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
			fake := tosstest.New(secret)
			ts := httptest.NewServer(fake)
			defer ts.Close()
			a := mustNew(t, ts.URL)
			req := psp.ChargeRequest{MerchantOrderID: payments.MerchantOrderID("mer_1", "key-1"), Amount: 15000, Currency: "KRW", PaymentMethod: "tgen_ok_a"}
			first, err := a.Charge(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			fake.ForgetIdempotencyKeys()
			req.PaymentMethod = tt.secondKey
			second, err := a.Charge(t.Context(), req)
			if err != nil || second != first {
				t.Fatalf("repeat = %+v, %v; want %+v", second, err, first)
			}
			if n := fake.Charges(req.MerchantOrderID); n != 1 {
				t.Fatalf("%d charges, want 1", n)
			}
			// A refund repeated after its key expired finds its cancel.
			r := psp.RefundRequest{RefundOrderID: "rfd_000000000001", MerchantOrderID: req.MerchantOrderID, ChargeReference: first.Reference,
				Amount: 15000, Currency: "KRW"}
			rf, err := a.Refund(t.Context(), r)
			if err != nil {
				t.Fatal(err)
			}
			fake.ForgetIdempotencyKeys()
			again, err := a.Refund(t.Context(), r)
			if err != nil || again != rf || fake.Refunds(r.RefundOrderID) != 1 {
				t.Fatalf("repeated refund = %+v, %v; want %+v once", again, err, rf)
			}
		})
	}
}

// The gateway's order ids fit Toss's orderId rule; ids that do not are
// refused before anything is sent.
func TestOrderIDRules(t *testing.T) {
	fake := tosstest.New(secret)
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
			before := fake.RequestCount()
			c, err := a.Charge(t.Context(), psp.ChargeRequest{MerchantOrderID: tt.orderID, Amount: 1000, Currency: "KRW", PaymentMethod: "tgen_ok_" + tt.name})
			if tt.ok {
				if err != nil || c.Status != psp.Succeeded {
					t.Fatalf("Charge = %+v, %v", c, err)
				}
				return
			}
			if class, ok := psp.ClassOf(err); !ok || class != psp.Rejected {
				t.Fatalf("Charge = %v, want Rejected", err)
			}
			if fake.RequestCount() != before {
				t.Fatal("an invalid order id was sent to Toss")
			}
		})
	}
	for _, r := range []psp.ChargeRequest{
		{MerchantOrderID: gw, Amount: 1000, Currency: "USD", PaymentMethod: "tgen_ok_x"},
		{MerchantOrderID: gw, Amount: 99, Currency: "KRW", PaymentMethod: "tgen_ok_x"},
		{MerchantOrderID: gw, Amount: 1000, Currency: "KRW", PaymentMethod: ""},
	} {
		before := fake.RequestCount()
		_, err := a.Charge(t.Context(), r)
		if class, _ := psp.ClassOf(err); class != psp.Rejected || fake.RequestCount() != before {
			t.Fatalf("Charge(%+v) = %v, want Rejected before sending", r, err)
		}
	}
}

func TestCancelReasonFitsTossLimit(t *testing.T) {
	fake := tosstest.New(secret)
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
	if caps := a.Capabilities(); caps.Name != "toss" || !caps.AuthoritativeLookup || !caps.DedupesOrderID || caps.MaxOrderIDLen != 64 || caps.Account != "" {
		t.Fatalf("Capabilities = %+v", caps)
	}
	labelled, err := toss.New(toss.Config{SecretKey: secret, BaseURL: "http://127.0.0.1:1", Account: "tosspayments-mid"})
	if err != nil || labelled.Capabilities().Account != "tosspayments-mid" {
		t.Fatalf("the configured account label is not advertised: %v", err)
	}
}

// Toss takes the money when a payment is confirmed: the adapter says it
// cannot capture later, so that the gateway refuses manual capture for it.
func TestNoManualCapture(t *testing.T) {
	var a psp.Adapter = mustNew(t, "http://127.0.0.1:1")
	if caps := a.Capabilities(); caps.ManualCapture || caps.AuthorizationValidity != 0 {
		t.Fatalf("Capabilities = %+v, want no manual capture", caps)
	}
	if _, ok := a.(psp.Capturer); ok {
		t.Fatal("the Toss adapter is a psp.Capturer but does not declare ManualCapture")
	}
}

// A 4xx with a code the adapter does not know is a refusal, believed only
// once the order is seen to hold no approved payment.
func TestUnknownCodeIsCheckedBeforeItIsBelieved(t *testing.T) {
	const order = "ord_000000000000000000000001"
	tests := []struct {
		name    string
		lookup  func(w http.ResponseWriter) // the answer to GET /v1/payments/orders/{order}
		status  psp.ChargeStatus
		decline string
		class   psp.Class
	}{
		{"no payment", func(w http.ResponseWriter) {
			tosstest.Write(w, 404, tosstest.Error{Code: "NOT_FOUND_PAYMENT", Message: "존재하지 않는 결제 정보 입니다."})
		}, psp.Declined, "some_new_refusal", 0},
		{"aborted", func(w http.ResponseWriter) {
			tosstest.Write(w, 200, tosstest.Payment{PaymentKey: "tgen_x", OrderID: order, Status: "ABORTED", TotalAmount: 15000, Currency: "KRW",
				Failure: &tosstest.Error{Code: "SOME_NEW_REFUSAL", Message: "?"}})
		}, psp.Declined, "some_new_refusal", 0},
		{"authenticated only", func(w http.ResponseWriter) {
			tosstest.Write(w, 200, tosstest.Payment{PaymentKey: "tgen_x", OrderID: order, Status: "IN_PROGRESS", TotalAmount: 15000, Currency: "KRW"})
		}, psp.Declined, "some_new_refusal", 0},
		{"approved after all", func(w http.ResponseWriter) {
			tosstest.Write(w, 200, tosstest.Payment{PaymentKey: "tgen_x", OrderID: order, Status: "DONE", ApprovedAt: tosstest.Now(), TotalAmount: 15000, Currency: "KRW"})
		}, psp.Succeeded, "", 0},
		{"approved for another amount", func(w http.ResponseWriter) {
			tosstest.Write(w, 200, tosstest.Payment{PaymentKey: "tgen_x", OrderID: order, Status: "DONE", ApprovedAt: tosstest.Now(), TotalAmount: 500, Currency: "KRW"})
		}, "", "", psp.Unknown},
		{"lookup fails", func(w http.ResponseWriter) {
			tosstest.Write(w, 500, tosstest.Error{Code: "FAILED_INTERNAL_SYSTEM_PROCESSING", Message: "..."})
		}, "", "", psp.Unknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost {
					tosstest.Write(w, http.StatusForbidden, tosstest.Error{Code: "SOME_NEW_REFUSAL", Message: "새로운 거절 사유"})
					return
				}
				tt.lookup(w)
			}))
			defer ts.Close()
			c, err := mustNew(t, ts.URL).Charge(t.Context(), psp.ChargeRequest{MerchantOrderID: order, Amount: 15000, Currency: "KRW", PaymentMethod: "tgen_x"})
			if tt.class != 0 {
				if class, _ := psp.ClassOf(err); class != tt.class {
					t.Fatalf("Charge = %+v, %v; want class %s", c, err, tt.class)
				}
				return
			}
			if err != nil || c.Status != tt.status || c.DeclineCode != tt.decline {
				t.Fatalf("Charge = %+v, %v; want %s %q", c, err, tt.status, tt.decline)
			}
			if c.Status == psp.Declined && c.Code != "SOME_NEW_REFUSAL" {
				t.Fatalf("Charge = %+v, want the raw code kept", c)
			}
		})
	}
}

// Cancels in answers older than 2022-06-08 have no cancelStatus and no
// transactionKey: they are finished cancels.
func TestOlderCancelShapes(t *testing.T) {
	const order, key = "ord_000000000000000000000001", "tgen_x"
	tests := []struct {
		name   string
		cancel tosstest.Cancel
		status psp.RefundStatus
		ref    string
	}{
		{"current", tosstest.Cancel{TransactionKey: "txk_1", CancelAmount: 5000, CancelStatus: "DONE", CanceledAt: "2022-01-01T11:32:04+09:00"}, psp.RefundSucceeded, "txk_1"},
		{"in progress", tosstest.Cancel{TransactionKey: "txk_1", CancelAmount: 5000, CancelStatus: "IN_PROGRESS", CanceledAt: "2022-01-01T11:32:04+09:00"}, psp.RefundPending, "txk_1"},
		{"older shape", tosstest.Cancel{CancelAmount: 5000, CanceledAt: "2022-01-01T11:32:04+09:00"}, psp.RefundSucceeded, key + "@2022-01-01T11:32:04+09:00"},
		{"aborted", tosstest.Cancel{TransactionKey: "txk_1", CancelAmount: 5000, CancelStatus: "ABORTED"}, psp.RefundDeclined, "txk_1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := tosstest.New(secret)
			tt.cancel.CancelReason = "changed mind [ref:rfd_000001]"
			fake.Seed(tosstest.Payment{PaymentKey: key, OrderID: order, Status: "PARTIAL_CANCELED", ApprovedAt: tosstest.Now(), TotalAmount: 15000,
				BalanceAmount: 10000, Currency: "KRW", Cancels: []tosstest.Cancel{tt.cancel}})
			ts := httptest.NewServer(fake)
			defer ts.Close()
			r, err := mustNew(t, ts.URL).LookupRefund(t.Context(), key, "rfd_000001")
			if err != nil || r.Status != tt.status || r.Reference != tt.ref || r.Amount != 5000 || r.MerchantOrderID != order {
				t.Fatalf("LookupRefund = %+v, %v; want %s with reference %s", r, err, tt.status, tt.ref)
			}
		})
	}
}

func TestCancelAnswers(t *testing.T) {
	const order, key = "ord_000000000000000000000001", "tgen_x"
	ok := tosstest.Payment{PaymentKey: key, OrderID: order, Status: "PARTIAL_CANCELED", ApprovedAt: tosstest.Now(), TotalAmount: 15000, BalanceAmount: 10000,
		Currency: "KRW", Cancels: []tosstest.Cancel{{TransactionKey: "txk_1", CancelReason: "refund [ref:rfd_000001]", CancelAmount: 5000, CancelStatus: "DONE"}}}
	other := ok
	other.Currency = "USD"
	tests := []struct {
		name    string
		status  int
		body    any
		decline string
		class   psp.Class
		is      error
	}{
		{"done", 200, ok, "", 0, nil},
		{"answer in another currency", 200, other, "", psp.Unknown, psp.ErrMismatch},
		{"answer without the cancel", 200, tosstest.Payment{PaymentKey: key, OrderID: order, Status: "DONE", ApprovedAt: tosstest.Now(), TotalAmount: 15000, Currency: "KRW"}, "", psp.Unknown, psp.ErrMismatch},
		{"not cancelable", 403, tosstest.Error{Code: "NOT_CANCELABLE_PAYMENT", Message: "취소 할 수 없는 결제 입니다."}, psp.RefundDeclineNotRefundable, 0, nil},
		{"refund period over", 403, tosstest.Error{Code: "EXCEED_MAX_REFUND_DUE", Message: "환불 가능한 기간이 지났습니다."}, psp.RefundDeclineNotRefundable, 0, nil},
		{"too soon again", 403, tosstest.Error{Code: "FORBIDDEN_CONSECUTIVE_REQUEST", Message: "반복적인 요청은 허용되지 않습니다. 잠시 후 다시 시도해주세요."}, "", psp.NotProcessed, nil},
		{"bank failed", 500, tosstest.Error{Code: "FAILED_REFUND_PROCESS", Message: "은행 응답시간 지연이나 일시적인 오류로 환불요청에 실패했습니다."}, "", psp.Unknown, nil},
		{"invalid", 400, tosstest.Error{Code: "INVALID_REQUEST", Message: "잘못된 요청입니다."}, "", psp.Rejected, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				tosstest.Write(w, tt.status, tt.body)
			}))
			defer ts.Close()
			r, err := mustNew(t, ts.URL).Refund(t.Context(), psp.RefundRequest{RefundOrderID: "rfd_000001", MerchantOrderID: order,
				ChargeReference: key, Amount: 5000, Currency: "KRW"})
			switch {
			case tt.class != 0:
				if class, _ := psp.ClassOf(err); class != tt.class || (tt.is != nil && !errors.Is(err, tt.is)) {
					t.Fatalf("Refund = %+v, %v; want class %s %v", r, err, tt.class, tt.is)
				}
			case tt.decline != "":
				if err != nil || r.Status != psp.RefundDeclined || r.DeclineCode != tt.decline || r.Code != tt.body.(tosstest.Error).Code {
					t.Fatalf("Refund = %+v, %v; want declined %s", r, err, tt.decline)
				}
			default:
				if err != nil || r.Status != psp.RefundSucceeded || r.Reference != "txk_1" {
					t.Fatalf("Refund = %+v, %v", r, err)
				}
			}
		})
	}
}
