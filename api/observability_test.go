package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"gateway/api"
	"gateway/metrics"
	"gateway/psp"
	"gateway/psp/fake"
)

// metricValue reads one sample from reg: a counter's or gauge's value, or a histogram's count.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if matches(m, labels) {
				switch {
				case m.Counter != nil:
					return m.GetCounter().GetValue()
				case m.Gauge != nil:
					return m.GetGauge().GetValue()
				case m.Histogram != nil:
					return float64(m.GetHistogram().GetSampleCount())
				}
			}
		}
	}
	return 0
}

func matches(m *dto.Metric, labels map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := labels[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(labels)
}

type observed struct {
	*env
	reg *prometheus.Registry
	psp *fake.PSP
	log *bytes.Buffer
}

// newObservedEnv is an env with metrics on and every log line captured.
func newObservedEnv(t *testing.T, mod func(*envSetup)) *observed {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	p := fake.New()
	logs := &syncBuffer{}
	log := slog.New(api.LogHandler(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	e := newEnv(t, func(s *envSetup) {
		s.adapter = metrics.InstrumentPSP(p, m)
		s.cfg.Observer = m
		s.cfg.Logger = log
		s.api = func(o *api.Options) {
			o.Observer, o.Logger = m, log
		}
		if mod != nil {
			mod(s)
		}
	})
	return &observed{env: e, reg: reg, psp: p, log: &logs.buf}
}

// scrape reads reg as Prometheus would (the gateway serves it on its admin address).
func scrape(t *testing.T, reg *prometheus.Registry) response {
	t.Helper()
	rec := httptest.NewRecorder()
	metrics.Handler(reg).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return response{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
}

type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// Metrics move as a scripted scenario says: fresh, replay, mismatch, in-flight, PSP unknown.
func TestMetricsFollowTheScenario(t *testing.T) {
	o := newObservedEnv(t, func(s *envSetup) { s.cfg.InFlightWait = 50 * time.Millisecond })
	key := func(outcome string) float64 {
		return metricValue(t, o.reg, "gateway_idempotency_requests_total", map[string]string{"outcome": outcome})
	}
	http := func(status string) float64 {
		return metricValue(t, o.reg, "gateway_http_requests_total", map[string]string{"route": "/payments", "method": "POST", "status": status})
	}
	pspCalls := func(op, outcome string) float64 {
		return metricValue(t, o.reg, "gateway_psp_calls_total", map[string]string{"adapter": "fake", "op": op, "outcome": outcome})
	}

	wantStatus(t, o.post("a", okBody), 201)
	wantStatus(t, o.post("a", okBody), 201)
	wantStatus(t, o.post("a", strings.Replace(okBody, "1000", "5", 1)), 422)
	if key("fresh") != 1 || key("replayed") != 1 || key("mismatch") != 1 || http("201") != 2 || http("422") != 1 {
		t.Fatalf("after fresh, replay, mismatch: fresh=%v replayed=%v mismatch=%v 201=%v 422=%v",
			key("fresh"), key("replayed"), key("mismatch"), http("201"), http("422"))
	}
	if pspCalls("charge", "result") != 1 {
		t.Fatalf("psp charge results %v", pspCalls("charge", "result"))
	}

	// In flight: the first request is stuck at the PSP while a duplicate waits 50 ms, then gets 409.
	arrived, release := make(chan struct{}), make(chan struct{})
	o.psp.SetChargeHook(func(ctx context.Context, req psp.ChargeRequest) { close(arrived); <-release })
	first := make(chan response, 1)
	go func() { first <- o.post("b", okBody) }()
	<-arrived
	wantProblem(t, o.post("b", okBody), 409, "request-in-flight")
	close(release)
	wantStatus(t, <-first, 201)
	o.psp.SetChargeHook(nil)
	if key("in_flight") != 1 || metricValue(t, o.reg, "gateway_idempotency_inflight_wait_seconds", nil) != 1 {
		t.Fatalf("in flight: %v, waits observed %v", key("in_flight"), metricValue(t, o.reg, "gateway_idempotency_inflight_wait_seconds", nil))
	}

	// PSP unknown after charging, then the retry resumes: a lookup, and a takeover-free settle.
	o.psp.FailNextCharges(fake.FaultUnknownAfterCharge, 1)
	wantStatus(t, o.post("c", okBody), 502)
	if pspCalls("charge", "unknown") != 1 || http("502") != 1 {
		t.Fatalf("unknown outcome not counted: %v", pspCalls("charge", "unknown"))
	}
	wantStatus(t, o.post("c", okBody), 201)
	if pspCalls("lookup", "result") != 1 {
		t.Fatalf("resume lookup not counted")
	}

	// A request without a key.
	res, err := o.do(context.Background(), "POST", "/payments", o.apiKey, nil, okBody)
	if err != nil || res.status != 400 {
		t.Fatalf("no key: %v %d", err, res.status)
	}
	if metricValue(t, o.reg, "gateway_idempotency_missing_key_total", nil) != 1 {
		t.Fatal("missing key not counted")
	}
	// The exposition endpoint serves the same numbers.
	page := scrape(t, o.reg)
	wantStatus(t, page, 200)
	if !bytes.Contains(page.body, []byte(`gateway_idempotency_requests_total{outcome="replayed"} 1`)) {
		t.Fatalf("/metrics lacks the replay count:\n%s", page.body)
	}
}

// A burst beyond a merchant's bucket gets 429 with Retry-After, is never
// stored, and does not touch another merchant.
func TestRateLimitPerMerchant(t *testing.T) {
	var e *env
	e = newEnv(t, func(s *envSetup) {
		s.api = func(o *api.Options) {
			o.RatePerSecond, o.RateBurst = 1, 3
			o.Now = func() time.Time { return e.clock.Now() }
		}
	})
	statuses := map[int]int{}
	for i := range 5 {
		res := e.post("burst-"+string(rune('a'+i)), okBody)
		statuses[res.status]++
		if res.status == 429 {
			wantProblem(t, res, 429, "rate-limited")
			if res.header.Get("Retry-After") == "" {
				t.Fatal("429 without Retry-After")
			}
		}
	}
	if statuses[201] != 3 || statuses[429] != 2 {
		t.Fatalf("statuses %v, want 3×201 2×429", statuses)
	}
	_, otherKey := e.newMerchant("Other")
	wantStatus(t, e.postAs(otherKey, "other", okBody), 201)
	e.clock.Advance(time.Second)
	wantStatus(t, e.post("burst-e", okBody), 201) // the refused key was not stored: it runs now
	e.wantCounts(counts{payments: 5, keys: 5, completed: 5, charges: 5, chargeCalls: 5})
}

// Logs carry request ids and hashes, never API keys, raw idempotency keys or card numbers.
func TestLogsHoldNoSecrets(t *testing.T) {
	o := newObservedEnv(t, func(s *envSetup) { s.cfg.Lease, s.cfg.PSPTimeout = time.Second, 500*time.Millisecond })
	const (
		secretKey = "idem-Secret-7f3a"
		card      = "4242424242424242"
	)
	body := strings.Replace(okBody, "Order A-1", "card "+card, 1)
	wantStatus(t, o.post(secretKey, body), 201)
	wantStatus(t, o.post(secretKey, body), 201)
	wantStatus(t, o.post(secretKey, strings.Replace(body, "1000", "7", 1)), 422)
	o.psp.FailNextCharges(fake.FaultUnknownAfterCharge, 1)
	wantStatus(t, o.post(secretKey+"-2", body), 502)
	o.clock.Advance(2 * time.Second)
	wantStatus(t, o.post(secretKey+"-2", body), 201)
	wantStatus(t, o.postAs(o.apiKey+"x", secretKey+"-3", body), 401)
	if _, err := o.db.Exec(`CREATE TRIGGER fail_insert BEFORE INSERT ON payments FOR EACH ROW SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'boom'`); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, o.post(secretKey+"-4", body), 500)

	logs := o.log.String()
	if !strings.Contains(logs, "payment settled") || !strings.Contains(logs, `"replayed":true`) ||
		!strings.Contains(logs, "idempotency key mismatch") || !strings.Contains(logs, "request failed") {
		t.Fatalf("expected events missing from the logs:\n%s", logs)
	}
	for _, secret := range []string{o.apiKey, secretKey, card, o.merch.ID} {
		if strings.Contains(logs, secret) {
			t.Errorf("logs contain %q", secret)
		}
	}
	// A card number is a whole token of 13–19 digits passing Luhn's check;
	// digit runs inside hex ids and hashes are not.
	for _, m := range regexp.MustCompile(`(?:^|[^0-9A-Za-z_])(\d{13,19})(?:[^0-9A-Za-z_]|$)`).FindAllStringSubmatch(logs, -1) {
		if luhn(m[1]) {
			t.Errorf("logs contain a card-like number %s", m[1])
		}
	}
	dec := json.NewDecoder(strings.NewReader(logs))
	for {
		var line map[string]any
		if err := dec.Decode(&line); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if id, _ := line["request_id"].(string); !strings.HasPrefix(id, "req_") {
			t.Errorf("log line without a request id: %v", line)
		}
	}
}

func luhn(digits string) bool {
	sum := 0
	for i := range len(digits) {
		d := int(digits[len(digits)-1-i] - '0')
		if i%2 == 1 {
			d *= 2
			if d > 9 {
				d -= 9
			}
		}
		sum += d
	}
	return sum%10 == 0
}

// seriesCount counts the series of the HTTP metrics on reg.
func seriesCount(t *testing.T, reg *prometheus.Registry) int {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range families {
		if strings.HasPrefix(f.GetName(), "gateway_http_") {
			n += len(f.GetMetric())
		}
	}
	return n
}

// Whatever methods and paths a client makes up, with or without a key, the
// HTTP metrics keep a fixed set of series.
func TestHTTPLabelsComeFromAFixedSet(t *testing.T) {
	o := newObservedEnv(t, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	word := func(n int, alphabet string) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return string(b)
	}
	const upper, lower = "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz0123456789"
	// Each round sends every kind of made-up request, each with new text.
	round := func(n int) {
		for range n {
			paths := []string{"/" + word(8, lower), "/payments/" + word(10, lower), "/payments/pay_" + word(10, lower) + "/" + word(6, lower),
				"/refunds/" + word(9, lower), "/" + word(3, lower) + "/" + word(5, lower) + "?q=" + word(4, lower)}
			methods := []string{word(12, upper), "GET", "POST", "DELETE", word(1+rng.IntN(20), upper)}
			for _, path := range paths {
				for _, method := range methods {
					for _, key := range []string{"", o.apiKey} {
						res, err := o.do(context.Background(), method, path, key, nil, "")
						if err != nil {
							t.Fatal(err)
						}
						if res.status < 400 || res.status >= 500 {
							t.Fatalf("%s %s answered %d: %s", method, path, res.status, res.body)
						}
					}
				}
			}
		}
	}
	round(1)
	before := seriesCount(t, o.reg)
	round(4)
	if after := seriesCount(t, o.reg); after != before {
		t.Fatalf("made-up methods and paths grew the HTTP series from %d to %d", before, after)
	}
	for _, route := range []string{"other", "/payments/:id"} {
		if metricValue(t, o.reg, "gateway_http_requests_total", map[string]string{"route": route}) == 0 {
			t.Errorf("no request counted under route %q", route)
		}
	}
	if metricValue(t, o.reg, "gateway_http_requests_total", map[string]string{"method": "other"}) == 0 {
		t.Error("no request counted under method other")
	}
	// The alerts' 5xx series exist before the first failure.
	page := scrape(t, o.reg)
	if !bytes.Contains(page.body, []byte(`gateway_http_requests_total{method="POST",route="/payments",status="500"} 0`)) {
		t.Fatalf("the 500 series of POST /payments is not pre-initialised:\n%s", page.body)
	}
}

// logLines decodes the captured JSON log lines whose msg is msg ("" for all).
func logLines(t *testing.T, logs string, msg string) []map[string]any {
	t.Helper()
	var out []map[string]any
	dec := json.NewDecoder(strings.NewReader(logs))
	for {
		var line map[string]any
		if err := dec.Decode(&line); err == io.EOF {
			return out
		} else if err != nil {
			t.Fatal(err)
		}
		if msg == "" || line["msg"] == msg {
			out = append(out, line)
		}
	}
}

// Every request leaves one access line: method, route template, status,
// duration, request id, the merchant hashed, the payment where known; INFO
// below 500, WARN for a 5xx the flow chose, with the payment id and no ERROR.
func TestAccessLog(t *testing.T) {
	o := newObservedEnv(t, nil)
	const key = "access-Key-91c2"
	created := o.post(key, okBody)
	wantStatus(t, created, 201)
	id := created.header.Get("Location")[len("/payments/"):]
	wantStatus(t, o.get("/payments/"+id), 200)
	wantStatus(t, o.getAs("", "/payments/"+id+"/elsewhere"), 404)
	o.psp.FailNextCharges(fake.FaultUnknownAfterCharge, 1)
	wantStatus(t, o.post(key+"-2", okBody), 502)

	logs := o.log.String()
	lines := logLines(t, logs, "request")
	if len(lines) != 4 {
		t.Fatalf("%d access lines for 4 requests:\n%s", len(lines), logs)
	}
	type want struct {
		level, method, route string
		status               float64
		merchant, payment    bool
	}
	wants := []want{
		{"INFO", "POST", "/payments", 201, true, true},
		{"INFO", "GET", "/payments/:id", 200, true, true},
		{"INFO", "GET", "other", 404, false, false},
		{"WARN", "POST", "/payments", 502, true, true},
	}
	merchant := ""
	for i, w := range wants {
		l := lines[i]
		if l["level"] != w.level || l["method"] != w.method || l["route"] != w.route || l["status"] != w.status {
			t.Errorf("line %d: %v, want %+v", i, l, w)
		}
		if d, ok := l["duration_seconds"].(float64); !ok || d < 0 {
			t.Errorf("line %d: duration %v", i, l["duration_seconds"])
		}
		if id, _ := l["request_id"].(string); !strings.HasPrefix(id, "req_") {
			t.Errorf("line %d without a request id: %v", i, l)
		}
		m, _ := l["merchant"].(string)
		if w.merchant != (m != "") || (m != "" && merchant != "" && m != merchant) {
			t.Errorf("line %d: merchant %q (want one: %v, the same on every line)", i, m, w.merchant)
		}
		if m != "" {
			merchant = m
		}
		p, _ := l["payment_id"].(string)
		if w.payment != strings.HasPrefix(p, "pay_") {
			t.Errorf("line %d: payment_id %q", i, p)
		}
	}
	if lines[0]["payment_id"] != id || lines[1]["payment_id"] != id {
		t.Errorf("the created payment is not named: %v / %v", lines[0]["payment_id"], lines[1]["payment_id"])
	}
	if lines[3]["problem"] != "psp-outcome-unknown" {
		t.Errorf("the 502's line names no problem: %v", lines[3])
	}
	// The PSP's unknown outcome, handled by the flow: WARN with the payment, never ERROR.
	for _, l := range logLines(t, logs, "") {
		if l["level"] == "ERROR" {
			t.Errorf("an ERROR line for a handled PSP outcome: %v", l)
		}
		if l["msg"] == "PSP charge outcome unknown" && (l["level"] != "WARN" || l["payment_id"] != lines[3]["payment_id"]) {
			t.Errorf("the PSP's unknown outcome: %v", l)
		}
	}
	for _, secret := range []string{key, o.apiKey, o.merch.ID, "/elsewhere"} {
		if strings.Contains(logs, secret) {
			t.Errorf("logs contain %q", secret)
		}
	}
}

// The series alerts count exist at zero before the first event, and the
// business series count payments by final status and decline code, a PSP's
// own code as "other".
func TestBusinessMetricsCountFromZero(t *testing.T) {
	o := newObservedEnv(t, nil)
	page := string(scrape(t, o.reg).body)
	for _, zero := range []string{
		`gateway_idempotency_requests_total{outcome="fresh"} 0`,
		`gateway_idempotency_requests_total{outcome="mismatch"} 0`,
		`gateway_payments_total{decline_code="none",status="succeeded"} 0`,
		`gateway_payments_total{decline_code="card_declined",status="declined"} 0`,
		`gateway_refunds_total{status="succeeded"} 0`,
		`gateway_reconcile_settlements_total{outcome="error"} 0`,
		`gateway_psp_calls_total{adapter="fake",op="charge",outcome="unknown"} 0`,
	} {
		if !strings.Contains(page, zero) {
			t.Errorf("/metrics lacks %s before the first event", zero)
		}
	}
	payments := func(status, code string) float64 {
		return metricValue(t, o.reg, "gateway_payments_total", map[string]string{"status": status, "decline_code": code})
	}
	paid := o.post("biz-1", okBody)
	wantStatus(t, paid, 201)
	wantStatus(t, o.post("biz-1", okBody), 201) // a replay records nothing
	wantStatus(t, o.post("biz-2", strings.Replace(okBody, "pm_card_ok", "pm_card_declined", 1)), 402)
	wantStatus(t, o.post("biz-3", strings.Replace(okBody, "pm_card_ok", "pm_card_lost", 1)), 402)
	if payments("succeeded", "none") != 1 || payments("declined", "card_declined") != 1 || payments("declined", "other") != 1 {
		t.Fatalf("payments by status: succeeded %v, card_declined %v, other %v",
			payments("succeeded", "none"), payments("declined", "card_declined"), payments("declined", "other"))
	}
	for range 2 { // the second is a replay
		res, err := o.do(t.Context(), http.MethodPost, paid.header.Get("Location")+"/refunds", o.apiKey,
			map[string]string{"Idempotency-Key": "biz-r1"}, `{"amount": 300}`)
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, res, 201)
	}
	if n := metricValue(t, o.reg, "gateway_refunds_total", map[string]string{"status": "succeeded"}); n != 1 {
		t.Fatalf("refunds succeeded: %v", n)
	}
	if strings.Contains(string(scrape(t, o.reg).body), "lost_card") {
		t.Error("a PSP's own decline code became a label value")
	}
}
