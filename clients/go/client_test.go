package gateway_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	gateway "gateway/clients/go"
)

// answer is what the test server does with one request.
type answer struct {
	status      int
	contentType string // application/problem+json when empty and status ≥ 400, else application/json
	body        string
	header      map[string]string
	drop        bool // close the connection without an answer, after reading the request
}

// request is one request the server saw.
type request struct {
	method, path, query, key, body, contentType, auth, requestID, version string
}

// server answers requests from a script, the last answer repeated, and
// records them.
type server struct {
	*httptest.Server
	mu      sync.Mutex
	script  []answer
	seen    []request
	handler func(r *http.Request) answer // instead of the script, when set
}

func newServer(t *testing.T, script ...answer) *server {
	t.Helper()
	s := &server{script: script}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.seen = append(s.seen, request{method: r.Method, path: r.URL.Path, query: r.URL.RawQuery, key: r.Header.Get("Idempotency-Key"),
		body: string(body), contentType: r.Header.Get("Content-Type"), auth: r.Header.Get("Authorization"), requestID: r.Header.Get("X-Request-Id"),
		version: r.Header.Get("Gateway-Version")})
	n := len(s.seen)
	var a answer
	switch {
	case s.handler != nil:
		a = s.handler(r)
	case len(s.script) > 1:
		a, s.script = s.script[0], s.script[1:]
	case len(s.script) == 1:
		a = s.script[0]
	default:
		a = answer{status: 200, body: "{}"}
	}
	s.mu.Unlock()
	if a.drop {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
		return
	}
	ct := a.contentType
	if ct == "" {
		ct = "application/json"
		if a.status >= 400 {
			ct = "application/problem+json"
		}
	}
	w.Header().Set("Content-Type", ct)
	w.Header().Set("X-Request-Id", "req_test"+strconv.Itoa(n))
	for k, v := range a.header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(a.status)
	_, _ = io.WriteString(w, a.body)
}

func (s *server) requests() []request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]request(nil), s.seen...)
}

// waits records the client's waits before retries, without waiting.
type waits struct {
	mu sync.Mutex
	d  []time.Duration
}

func (w *waits) sleep(ctx context.Context, d time.Duration) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.d = append(w.d, d)
	return ctx.Err()
}

func (w *waits) all() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]time.Duration(nil), w.d...)
}

func mustClient(t *testing.T, baseURL string, w *waits, opts ...gateway.Option) *gateway.Client {
	t.Helper()
	opts = append([]gateway.Option{gateway.WithBaseURL(baseURL), gateway.WithSleep(w.sleep)}, opts...)
	c, err := gateway.New("sk_test", opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func problem(status int, typ string) answer {
	return answer{status: status, body: fmt.Sprintf(`{"type":"/problems/%s","title":"t","status":%d,"instance":"/payments","request_id":"req_x"}`, typ, status)}
}

const paymentJSON = `{"id":"pay_01M8SVRZDH8JWSTQVXXY9DNHZC","status":"succeeded","amount":1000,"currency":"KRW","payment_method":"pm_card_ok",
"merchant_order_id":"ord_04a29bc9e93c14028c95a6ae","psp_reference":"fake_ch_1","decline_code":null,"description":"","metadata":{},
"amount_refunded":0,"refunded":false,"created_at":"2026-12-01T22:32:00.689911Z"}`

var created = answer{status: 201, body: paymentJSON}

func createPayment(c *gateway.Client, opts ...gateway.CallOption) (*gateway.Payment, error) {
	return c.Payments.Create(context.Background(), &gateway.CreatePaymentRequest{Amount: 1000, Currency: "KRW", PaymentMethod: "pm_card_ok"}, opts...)
}

// Which answers the client sends again (with the same key), and which it
// returns at once: the browser client's rules.
func TestRetryClassification(t *testing.T) {
	const maxRetries = 3
	for _, c := range []struct {
		name     string
		first    answer
		attempts int // with every answer the same
	}{
		{"400 invalid-request", problem(400, "invalid-request"), 1},
		{"400 invalid-idempotency-key", problem(400, "invalid-idempotency-key"), 1},
		{"401 unauthorized", problem(401, "unauthorized"), 1},
		{"403 forbidden", problem(403, "forbidden"), 1},
		{"404 not-found", problem(404, "not-found"), 1},
		{"413 request-too-large", problem(413, "request-too-large"), 1},
		{"422 idempotency-key-mismatch", problem(422, "idempotency-key-mismatch"), 1},
		{"422 psp-cannot-accept", problem(422, "psp-cannot-accept"), 1},
		{"409 idempotency-key-reused (an expired key)", problem(409, "idempotency-key-reused"), 1},
		{"409 canceled-by-key", problem(409, "canceled-by-key"), 1},
		{"409 payment-not-confirmable", problem(409, "payment-not-confirmable"), 1},
		{"409 without a problem", answer{status: 409, contentType: "text/plain", body: "conflict"}, 1},
		{"409 request-in-flight", problem(409, "request-in-flight"), maxRetries + 1},
		{"429 rate-limited", problem(429, "rate-limited"), maxRetries + 1},
		{"500 internal", problem(500, "internal"), maxRetries + 1},
		{"502 psp-outcome-unknown", problem(502, "psp-outcome-unknown"), maxRetries + 1},
		{"503 psp-unavailable", problem(503, "psp-unavailable"), maxRetries + 1},
		{"503 from a load balancer", answer{status: 503, contentType: "text/html", body: "<h1>busy</h1>"}, maxRetries + 1},
		{"504 from a proxy", answer{status: 504, contentType: "text/plain", body: "timeout"}, maxRetries + 1},
		{"the connection dropped after the request was sent", answer{drop: true}, maxRetries + 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := newServer(t, c.first)
			w := &waits{}
			client := mustClient(t, srv.URL, w, gateway.WithMaxRetries(maxRetries))
			_, err := createPayment(client)
			var gerr *gateway.Error
			if !errors.As(err, &gerr) {
				t.Fatalf("Create = %v, want an *Error", err)
			}
			seen := srv.requests()
			if len(seen) < c.attempts || !c.first.drop && len(seen) != c.attempts {
				// net/http itself may send a dropped request again on a
				// kept-alive connection (with its key): never fewer.
				t.Fatalf("the server saw %d requests, want %d", len(seen), c.attempts)
			}
			if gerr.Attempts != c.attempts {
				t.Errorf("Error.Attempts = %d, want %d", gerr.Attempts, c.attempts)
			}
			if len(w.all()) != c.attempts-1 {
				t.Errorf("the client waited %d times, want %d", len(w.all()), c.attempts-1)
			}
			if retried := c.attempts > 1; gateway.IsRetryable(err) != retried {
				t.Errorf("IsRetryable = %v, want %v", !retried, retried)
			}
		})
	}
}

// A transient failure, then the answer: the call returns the answer.
func TestRetryThenAnswer(t *testing.T) {
	srv := newServer(t, problem(503, "psp-unavailable"), answer{drop: true}, problem(409, "request-in-flight"), problem(429, "rate-limited"), created)
	client := mustClient(t, srv.URL, &waits{}, gateway.WithMaxRetries(4))
	p, err := createPayment(client)
	if err != nil {
		t.Fatal(err)
	}
	if p.Status != gateway.PaymentSucceeded || p.Amount != 1000 || p.PSPReference != "fake_ch_1" || p.DeclineCode != "" {
		t.Fatalf("payment = %+v", p)
	}
	if n := len(srv.requests()); n < 5 {
		t.Fatalf("the server saw %d requests, want 5", n)
	}
}

var uuid4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// One key per call, made once and sent by every retry with the same body;
// another call gets another key; the caller's key is sent as given.
func TestKeyReusedAcrossRetries(t *testing.T) {
	srv := newServer(t, problem(502, "psp-outcome-unknown"), answer{drop: true}, problem(409, "request-in-flight"), created,
		problem(503, "service-unavailable"), created, answer{drop: true}, created)
	client := mustClient(t, srv.URL, &waits{})
	if _, err := createPayment(client); err != nil {
		t.Fatal(err)
	}
	first := srv.requests()
	if len(first) < 4 {
		t.Fatalf("saw %d requests, want 4", len(first))
	}
	key := first[0].key
	if !uuid4.MatchString(key) {
		t.Fatalf("key %q is not a UUIDv4", key)
	}
	for i, r := range first {
		if r.key != key || r.body != first[0].body || r.method != http.MethodPost || r.path != "/payments" {
			t.Fatalf("attempt %d: %s %s key %q body %s; want the first's (%q, %s)", i+1, r.method, r.path, r.key, r.body, key, first[0].body)
		}
	}
	if want := `{"amount":1000,"currency":"KRW","payment_method":"pm_card_ok"}`; first[0].body != want {
		t.Fatalf("body %s, want %s", first[0].body, want)
	}
	if _, err := createPayment(client); err != nil {
		t.Fatal(err)
	}
	second := srv.requests()[len(first):]
	if second[0].key == key || second[0].key != second[len(second)-1].key {
		t.Fatalf("the second call's keys %q…%q: want one new key", second[0].key, second[len(second)-1].key)
	}
	n := len(srv.requests())
	if _, err := createPayment(client, gateway.WithIdempotencyKey("order-1001")); err != nil {
		t.Fatal(err)
	}
	for _, r := range srv.requests()[n:] {
		if r.key != "order-1001" {
			t.Fatalf("key %q, want the caller's order-1001", r.key)
		}
	}
}

func TestInvalidKeyRefusedBeforeSending(t *testing.T) {
	srv := newServer(t, created)
	client := mustClient(t, srv.URL, &waits{})
	for _, k := range []string{"has space", strings.Repeat("k", 256), "ключ"} {
		if _, err := createPayment(client, gateway.WithIdempotencyKey(k)); err == nil {
			t.Errorf("key %q accepted", k)
		}
	}
	if n := len(srv.requests()); n != 0 {
		t.Fatalf("%d requests sent", n)
	}
}

// A wait is never shorter than Retry-After, in seconds or as a date.
func TestRetryAfterHonoured(t *testing.T) {
	for _, c := range []struct {
		name  string
		value string
		least time.Duration
	}{
		{"seconds", "3", 3 * time.Second},
		{"an HTTP date", time.Now().Add(30 * time.Second).UTC().Format(http.TimeFormat), 28 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			limited := problem(429, "rate-limited")
			limited.header = map[string]string{"Retry-After": c.value}
			srv := newServer(t, limited, created)
			w := &waits{}
			client := mustClient(t, srv.URL, w, gateway.WithBackoff(time.Millisecond, 2*time.Millisecond))
			if _, err := createPayment(client); err != nil {
				t.Fatal(err)
			}
			got := w.all()
			if len(got) != 1 || got[0] < c.least {
				t.Fatalf("waits %v, want one of at least %v", got, c.least)
			}
		})
	}
}

// Without Retry-After the waits are the back-off's, within its bounds.
func TestBackoffWithoutRetryAfter(t *testing.T) {
	srv := newServer(t, problem(503, "service-unavailable"))
	w := &waits{}
	client := mustClient(t, srv.URL, w, gateway.WithMaxRetries(6), gateway.WithBackoff(10*time.Millisecond, 40*time.Millisecond))
	if _, err := createPayment(client); err == nil {
		t.Fatal("no error")
	}
	got := w.all()
	if len(got) != 6 {
		t.Fatalf("%d waits, want 6", len(got))
	}
	for i, d := range got {
		ceiling := min(40*time.Millisecond, 10*time.Millisecond<<i)
		if d < 0 || d >= ceiling {
			t.Errorf("wait %d: %v, outside [0, %v)", i+1, d, ceiling)
		}
	}
}

// A Retry-After past MaxRetryAfter, or past the caller's deadline, ends the
// call with the answer rather than holding the caller.
func TestRetryAfterBeyondReach(t *testing.T) {
	for _, c := range []struct {
		name       string
		retryAfter string
		deadline   time.Duration // 0: none
	}{
		{"past MaxRetryAfter", "3600", 0},
		{"past the context's deadline", "5", time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			busy := problem(503, "psp-unavailable")
			busy.header = map[string]string{"Retry-After": c.retryAfter}
			srv := newServer(t, busy, created)
			w := &waits{}
			client := mustClient(t, srv.URL, w)
			ctx := context.Background()
			if c.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, c.deadline)
				defer cancel()
			}
			_, err := client.Payments.Create(ctx, &gateway.CreatePaymentRequest{Amount: 1, Currency: "KRW"})
			var gerr *gateway.Error
			if !errors.As(err, &gerr) || gerr.Code != gateway.CodePSPUnavailable || gerr.Attempts != 1 {
				t.Fatalf("Create = %v, want the 503 after one attempt", err)
			}
			if want, _ := strconv.Atoi(c.retryAfter); gerr.RetryAfter != time.Duration(want)*time.Second {
				t.Errorf("RetryAfter = %v", gerr.RetryAfter)
			}
			if len(w.all()) != 0 {
				t.Errorf("waited %v", w.all())
			}
		})
	}
}

// The context ends the call: while waiting, the last answer is returned;
// during an attempt, the context's error.
func TestContextEndsCall(t *testing.T) {
	srv := newServer(t, problem(503, "service-unavailable"))
	ctx, cancel := context.WithCancel(context.Background())
	client := mustClient(t, srv.URL, &waits{}, gateway.WithSleep(func(context.Context, time.Duration) error {
		cancel()
		return context.Canceled
	}))
	_, err := client.Payments.Create(ctx, &gateway.CreatePaymentRequest{Amount: 1, Currency: "KRW"})
	if gateway.CodeOf(err) != gateway.CodeServiceUnavailable {
		t.Fatalf("Create = %v, want the last answer", err)
	}
	if _, err := client.Payments.Get(ctx, "pay_1"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Get with a canceled context = %v", err)
	}
}

func TestErrorDecoding(t *testing.T) {
	srv := newServer(t, answer{status: 422, header: map[string]string{"X-Request-Id": "req_c486076822fc5e67c0e17e7a"},
		body: `{"type":"/problems/refund-exceeds-refundable","title":"The refund exceeds what is left to refund","status":422,
"detail":"at most 700 KRW is left","instance":"/payments/pay_1/refunds","request_id":"req_c486076822fc5e67c0e17e7a",
"errors":[{"field":"amount","reason":"at most 700 KRW of payment pay_1 is left to refund"}],"payment_id":"pay_01M8SVRZDH8JWSTQVXXY9DNHZC","future":1}`})
	client := mustClient(t, srv.URL, &waits{})
	_, err := client.Refunds.Create(context.Background(), "pay_1", &gateway.CreateRefundRequest{Amount: 1000}, gateway.WithIdempotencyKey("refund-secret-key"))
	var e *gateway.Error
	if !errors.As(err, &e) {
		t.Fatalf("Create = %v", err)
	}
	want := gateway.Error{Op: "POST /payments/pay_1/refunds", Status: 422, Type: "/problems/refund-exceeds-refundable",
		Code: gateway.CodeRefundExceedsRefundable, Title: "The refund exceeds what is left to refund", Detail: "at most 700 KRW is left",
		RequestID: "req_c486076822fc5e67c0e17e7a", PaymentID: "pay_01M8SVRZDH8JWSTQVXXY9DNHZC", Attempts: 1, IdempotencyKey: "refund-secret-key"}
	got := *e
	got.Fields = nil
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Error\n got %+v\nwant %+v", got, want)
	}
	if len(e.Fields) != 1 || e.Fields[0].Field != "amount" {
		t.Errorf("Fields = %+v", e.Fields)
	}
	if gateway.CodeOf(fmt.Errorf("refund: %w", err)) != gateway.CodeRefundExceedsRefundable || gateway.IsRetryable(err) {
		t.Errorf("CodeOf/IsRetryable wrong for %v", err)
	}
	msg := err.Error()
	for _, part := range []string{"422", "refund-exceeds-refundable", "at most 700 KRW is left", "req_c486076822fc5e67c0e17e7a"} {
		if !strings.Contains(msg, part) {
			t.Errorf("Error() = %q lacks %q", msg, part)
		}
	}
	if strings.Contains(msg, "refund-secret-key") || strings.Contains(msg, "sk_test") {
		t.Errorf("Error() = %q shows the key", msg)
	}
}

// An answer that is no problem (a proxy's) is an *Error with its status.
func TestErrorWithoutProblem(t *testing.T) {
	srv := newServer(t, answer{status: 502, contentType: "text/html", body: "<h1>Bad gateway</h1>"})
	client := mustClient(t, srv.URL, &waits{}, gateway.WithMaxRetries(0))
	_, err := client.Events.Get(context.Background(), "evt_1")
	var e *gateway.Error
	if !errors.As(err, &e) || e.Status != 502 || e.Code != "" || e.Title != "Bad Gateway" || !gateway.IsRetryable(err) {
		t.Fatalf("Get = %#v", err)
	}
}

// A decline is an answer: 402 with the payment, returned as such and never
// retried; a 402 problem would be an error.
func TestDeclineIsAnAnswer(t *testing.T) {
	declined := strings.Replace(strings.Replace(paymentJSON, `"succeeded"`, `"declined"`, 1), `"decline_code":null`, `"decline_code":"card_declined"`, 1)
	srv := newServer(t, answer{status: 402, contentType: "application/json", body: declined})
	client := mustClient(t, srv.URL, &waits{})
	p, err := createPayment(client)
	if err != nil {
		t.Fatal(err)
	}
	if p.Status != gateway.PaymentDeclined || p.DeclineCode != "card_declined" {
		t.Fatalf("payment %+v", p)
	}
	if n := len(srv.requests()); n != 1 {
		t.Fatalf("%d requests", n)
	}
}

// Each method asks what api/routes.go serves, with the body it documents.
func TestRoutes(t *testing.T) {
	srv := newServer(t, answer{status: 200, body: `{"data":[],"has_more":false}`})
	client := mustClient(t, srv.URL, &waits{})
	ctx := context.Background()
	drain := func(seq func(func(gateway.Payment, error) bool)) {
		for range seq {
		}
	}
	for _, c := range []struct {
		call         func() error
		method, path string
		query, body  string
		keyed        bool
	}{
		{func() error { _, err := createPayment(client); return err }, "POST", "/payments", "",
			`{"amount":1000,"currency":"KRW","payment_method":"pm_card_ok"}`, true},
		{func() error {
			_, err := client.Payments.Create(ctx, &gateway.CreatePaymentRequest{Amount: 5, Currency: "USD", Confirm: new(false), CaptureMethod: gateway.CaptureManual})
			return err
		}, "POST", "/payments", "", `{"amount":5,"currency":"USD","confirm":false,"capture_method":"manual"}`, true},
		{func() error { _, err := client.Payments.Get(ctx, "pay_1"); return err }, "GET", "/payments/pay_1", "", "", false},
		{func() error { _, err := client.Payments.GetByKey(ctx, "order-1"); return err }, "GET", "/payments", "idempotency_key=order-1", "", false},
		{func() error { drain(client.Payments.List(ctx, nil)); return nil }, "GET", "/payments", "", "", false},
		{func() error {
			drain(client.Payments.List(ctx, &gateway.PaymentListParams{Limit: 20, Status: gateway.PaymentSucceeded,
				CreatedGTE: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), StartingAfter: "pay_2"}))
			return nil
		}, "GET", "/payments", "created%5Bgte%5D=2026-01-02T03%3A04%3A05Z&limit=20&starting_after=pay_2&status=succeeded", "", false},
		{func() error {
			_, err := client.Payments.Confirm(ctx, "pay_1", &gateway.ConfirmPaymentRequest{PaymentMethod: "pm_card_ok", Amount: 1000})
			return err
		}, "POST", "/payments/pay_1/confirm", "", `{"payment_method":"pm_card_ok","amount":1000}`, true},
		{func() error { _, err := client.Payments.Capture(ctx, "pay_1", nil); return err }, "POST", "/payments/pay_1/capture", "", `{}`, true},
		{func() error {
			_, err := client.Payments.Capture(ctx, "pay_1", &gateway.CapturePaymentRequest{AmountToCapture: 12000})
			return err
		}, "POST", "/payments/pay_1/capture", "", `{"amount_to_capture":12000}`, true},
		{func() error {
			_, err := client.Payments.Cancel(ctx, "pay_1", &gateway.CancelPaymentRequest{CancellationReason: gateway.ReasonAbandoned})
			return err
		}, "POST", "/payments/pay_1/cancel", "", `{"cancellation_reason":"abandoned"}`, true},
		{func() error {
			_, err := client.Payments.CancelByKey(ctx, &gateway.CancelByKeyRequest{IdempotencyKey: "order-3001"})
			return err
		}, "POST", "/payments/cancel_by_key", "", `{"idempotency_key":"order-3001"}`, true},
		{func() error { _, err := client.Refunds.Create(ctx, "pay_1", nil); return err }, "POST", "/payments/pay_1/refunds", "", `{}`, true},
		{func() error { _, err := client.Refunds.Get(ctx, "re_1"); return err }, "GET", "/refunds/re_1", "", "", false},
		{func() error {
			for range client.Refunds.List(ctx, &gateway.RefundListParams{Status: gateway.RefundPending}) {
			}
			return nil
		}, "GET", "/refunds", "status=pending", "", false},
		{func() error {
			for range client.Refunds.ListForPayment(ctx, "pay_1", nil) {
			}
			return nil
		}, "GET", "/payments/pay_1/refunds", "", "", false},
		{func() error { _, err := client.Events.Get(ctx, "evt_1"); return err }, "GET", "/events/evt_1", "", "", false},
		{func() error {
			for range client.Events.List(ctx, &gateway.EventListParams{Type: gateway.EventPaymentSucceeded, ObjectID: "pay_1", StartingAfter: "evt_0"}) {
			}
			return nil
		}, "GET", "/events", "object_id=pay_1&starting_after=evt_0&type=payment.succeeded", "", false},
		{func() error {
			_, err := client.WebhookEndpoints.Create(ctx, &gateway.CreateWebhookEndpointRequest{URL: "https://shop.example/hooks", EventTypes: []string{"*"}})
			return err
		}, "POST", "/webhook_endpoints", "", `{"url":"https://shop.example/hooks","event_types":["*"]}`, true},
		{func() error { _, err := client.WebhookEndpoints.Get(ctx, "we_1"); return err }, "GET", "/webhook_endpoints/we_1", "", "", false},
		{func() error { _, err := client.WebhookEndpoints.List(ctx); return err }, "GET", "/webhook_endpoints", "", "", false},
		{func() error { _, err := client.WebhookEndpoints.Delete(ctx, "we_1"); return err }, "DELETE", "/webhook_endpoints/we_1", "", "", false},
		{func() error { _, err := client.WebhookEndpoints.Rotate(ctx, "we_1", nil); return err }, "POST", "/webhook_endpoints/we_1/rotate", "", `{}`, true},
		{func() error {
			for range client.WebhookEndpoints.ListDeliveries(ctx, "we_1", &gateway.DeliveryListParams{Limit: 5, StartingAfter: "wd_1"}) {
			}
			return nil
		}, "GET", "/webhook_endpoints/we_1/deliveries", "limit=5&starting_after=wd_1", "", false},
		{func() error {
			for range client.Events.ListDeliveries(ctx, "evt_1", nil) {
			}
			return nil
		}, "GET", "/events/evt_1/deliveries", "", "", false},
		{func() error {
			_, err := client.Events.Redeliver(ctx, "evt_1", &gateway.RedeliverEventRequest{EndpointID: "we_1"})
			return err
		}, "POST", "/events/evt_1/redeliver", "", `{"endpoint_id":"we_1"}`, true},
		{func() error { _, err := client.WebhookDeliveries.Get(ctx, "wd_1"); return err }, "GET", "/webhook_deliveries/wd_1", "", "", false},
		{func() error {
			_, err := client.WebhookEndpoints.Rotate(ctx, "we_1", &gateway.RotateWebhookSecretRequest{GracePeriodSeconds: new(int64(0))})
			return err
		}, "POST", "/webhook_endpoints/we_1/rotate", "", `{"grace_period_seconds":0}`, true},
	} {
		t.Run(c.method+" "+c.path+"?"+c.query+" "+c.body, func(t *testing.T) {
			n := len(srv.requests())
			if err := c.call(); err != nil {
				t.Fatal(err)
			}
			seen := srv.requests()[n:]
			if len(seen) != 1 {
				t.Fatalf("%d requests", len(seen))
			}
			r := seen[0]
			if r.method != c.method || r.path != c.path || r.query != c.query || r.body != c.body {
				t.Fatalf("sent %s %s?%s %s", r.method, r.path, r.query, r.body)
			}
			if (r.key != "") != c.keyed || r.auth != "Bearer sk_test" || r.version != gateway.APIVersion {
				t.Fatalf("key %q, authorization %q, version %q", r.key, r.auth, r.version)
			}
			if (r.contentType == "application/json") != (c.body != "") {
				t.Fatalf("Content-Type %q", r.contentType)
			}
		})
	}
}

// A call that got no answer says so without its URL's query (a key, for
// GetByKey) and still wraps the transport's error.
func TestNetworkErrorHidesTheQuery(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	client := mustClient(t, "http://"+addr, &waits{}, gateway.WithMaxRetries(1))
	_, err = client.Payments.GetByKey(context.Background(), "order-secret-key")
	var op *net.OpError
	if !errors.As(err, &op) || strings.Contains(err.Error(), "order-secret-key") || !strings.Contains(err.Error(), "GET /payments") {
		t.Fatalf("GetByKey = %v", err)
	}
}

func TestRequestID(t *testing.T) {
	srv := newServer(t, created)
	client := mustClient(t, srv.URL, &waits{})
	if _, err := createPayment(client, gateway.WithRequestID("order-7.attempt_1")); err != nil {
		t.Fatal(err)
	}
	if got := srv.requests()[0].requestID; got != "order-7.attempt_1" {
		t.Fatalf("X-Request-Id %q", got)
	}
}

// An operation the gateway does not deduplicate (a webhook endpoint's
// creation or rotation) is sent again only when it certainly did nothing.
func TestUndeduplicatedOperations(t *testing.T) {
	for _, c := range []struct {
		name     string
		answer   answer
		attempts int
	}{
		{"a lost answer", answer{drop: true}, 1},
		{"500", problem(500, "internal"), 1},
		{"503", problem(503, "service-unavailable"), 1},
		{"429", problem(429, "rate-limited"), 4},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := newServer(t, c.answer)
			client := mustClient(t, srv.URL, &waits{})
			// A kept-alive connection, as a busy client has one.
			if _, err := client.WebhookEndpoints.List(context.Background()); err == nil {
				t.Fatal("List: no error")
			}
			n := len(srv.requests())
			_, err := client.WebhookEndpoints.Rotate(context.Background(), "we_1", nil)
			if err == nil {
				t.Fatal("Rotate: no error")
			}
			if got := len(srv.requests()) - n; got != c.attempts {
				t.Fatalf("the server saw %d rotations, want %d", got, c.attempts)
			}
		})
	}
	t.Run("a connection never made", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		w := &waits{}
		client := mustClient(t, "http://"+addr, w)
		_, err = client.WebhookEndpoints.Create(context.Background(), &gateway.CreateWebhookEndpointRequest{URL: "https://x.example", EventTypes: []string{"*"}})
		var e *gateway.Error
		if !errors.As(err, &e) || e.Status != 0 || e.Attempts != 4 || len(w.all()) != 3 || !gateway.IsRetryable(err) {
			t.Fatalf("Create = %v after %d waits", err, len(w.all()))
		}
	})
}

func TestNew(t *testing.T) {
	for _, c := range []struct {
		name string
		key  string
		opts []gateway.Option
	}{
		{"no key", "", []gateway.Option{gateway.WithBaseURL("https://pay.example")}},
		{"a publishable key", "pk_abc", []gateway.Option{gateway.WithBaseURL("https://pay.example")}},
		{"no base URL", "sk_abc", nil},
		{"a base URL without scheme", "sk_abc", []gateway.Option{gateway.WithBaseURL("pay.example")}},
		{"a base URL with a query", "sk_abc", []gateway.Option{gateway.WithBaseURL("https://pay.example/?a=1")}},
		{"negative retries", "sk_abc", []gateway.Option{gateway.WithBaseURL("https://pay.example"), gateway.WithMaxRetries(-1)}},
		{"a back-off of zero", "sk_abc", []gateway.Option{gateway.WithBaseURL("https://pay.example"), gateway.WithBackoff(0, time.Second)}},
		{"no HTTP client", "sk_abc", []gateway.Option{gateway.WithBaseURL("https://pay.example"), gateway.WithHTTPClient(nil)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := gateway.New(c.key, c.opts...); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

// A base URL with a path prefix (a gateway behind a path-routing proxy).
func TestBaseURLWithPath(t *testing.T) {
	srv := newServer(t, created)
	client := mustClient(t, srv.URL+"/gw/", &waits{})
	if _, err := client.Payments.Get(context.Background(), "pay_1"); err != nil {
		t.Fatal(err)
	}
	if got := srv.requests()[0].path; got != "/gw/payments/pay_1" {
		t.Fatalf("path %q", got)
	}
}

func TestNewIdempotencyKey(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		k := gateway.NewIdempotencyKey()
		if !uuid4.MatchString(k) || seen[k] {
			t.Fatalf("key %q: not a fresh UUIDv4", k)
		}
		seen[k] = true
	}
}
