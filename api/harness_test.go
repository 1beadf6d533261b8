package api_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"gateway/api"
	"gateway/listings"
	"gateway/merchants"
	"gateway/mysql"
	"gateway/mysql/mysqltest"
	"gateway/payments"
	"gateway/psp"
	"gateway/psp/fake"
	"gateway/review"
	"gateway/webhooks"
)

func TestMain(m *testing.M) { mysqltest.Main(m) }

// clock is an injected time source that only moves when a test says so.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// env is one gateway over a real database and a fresh fake PSP.
type env struct {
	t     *testing.T
	tb    testing.TB // t, or a benchmark's *testing.B
	db    *sqlx.DB
	store *mysql.Store
	psp   *fake.PSP
	clock *clock
	svc   *payments.Service
	srv   *httptest.Server
	// handler is what srv serves: the API, checked against the contract;
	// raw is the API alone, for clients whose requests do not parse.
	handler, raw http.Handler
	apiKey       string
	merch        merchants.Merchant
	// checked is set when srv checks every exchange against the OpenAPI
	// contract itself; otherwise do checks what the client sees.
	checked bool
}

// envSetup is what options may change before the gateway is built.
type envSetup struct {
	cfg payments.Config
	// wrap, when set, decorates the real store (to lose a commit's acknowledgement, say).
	wrap func(payments.FlowStore) payments.FlowStore
	// adapter, when set, replaces the in-process fake PSP (env.psp stays unused).
	adapter psp.Adapter
	// api, when set, adjusts the handler's options (rate limits, say).
	api func(*api.Options)
	// authTTL is how long a verified API key is trusted without a read.
	authTTL time.Duration
	// authStore, when set, decorates what authentication reads (to count its reads, say).
	authStore func(merchants.AuthStore) merchants.AuthStore
	// notices, when set, receives the PSPs' notifications (webhooks).
	notices func(*mysql.Store) api.NoticeReceiver
	// webhooks, when set, manages the webhook endpoints.
	webhooks func(*mysql.Store) api.WebhookEndpoints
}

type envOption func(*envSetup)

// newEnv builds the gateway on a fresh database; a benchmark's env has no
// *testing.T (e.t is nil) and serves through e.raw.
func newEnv(t testing.TB, opts ...envOption) *env {
	t.Helper()
	dbx := mysqltest.MustOpen(t)
	st := mysql.NewStore(dbx)
	clk := &clock{now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	setup := envSetup{cfg: payments.Config{
		Lease:        30 * time.Second,
		PSPTimeout:   5 * time.Second,
		InFlightWait: 10 * time.Second,
		Now:          clk.Now,
	}}
	for _, o := range opts {
		o(&setup)
	}
	var svcStore payments.FlowStore = st
	if setup.wrap != nil {
		svcStore = setup.wrap(st)
	}
	p := fake.New()
	var adapter psp.Adapter = p
	if setup.adapter != nil {
		adapter = setup.adapter
	}
	svc := payments.NewService(svcStore, payments.OnePSP(adapter), setup.cfg)
	apiOpts := api.Options{MaxBodyBytes: 16 << 10, Listings: listings.New(st),
		Browser: merchants.NewBrowserAuth(st, merchants.AuthConfig{CacheTTL: setup.authTTL, Now: clk.Now})}
	if setup.api != nil {
		setup.api(&apiOpts)
	}
	if setup.notices != nil {
		apiOpts.Notices = setup.notices(st)
	}
	if setup.webhooks != nil {
		apiOpts.Webhooks, apiOpts.Deliveries = setup.webhooks(st), webhooks.NewLog(st, st)
	}
	contract, err := published()
	if err != nil {
		t.Fatalf("api/openapi.json: %v", err)
	}
	tt, _ := t.(*testing.T)
	e := &env{t: tt, tb: t, db: dbx, store: st, psp: p, clock: clk, svc: svc, checked: true}
	// Every exchange of the test, including those whose client went away, is
	// checked against the published OpenAPI document; a finding fails the test.
	var tally exchangeTally
	t.Cleanup(func() { t.Logf("OpenAPI contract checked %s", tally.String()) }) // after srv.Close: all served
	var authStore merchants.AuthStore = st
	if setup.authStore != nil {
		authStore = setup.authStore(st)
	}
	e.raw = api.NewHandler(svc, merchants.NewAuth(authStore, merchants.AuthConfig{CacheTTL: setup.authTTL, Now: clk.Now}), st, apiOpts)
	e.handler = contract.checked(e.raw, func(x exchange, findings []string) {
		tally.add(x.status)
		if len(findings) > 0 {
			reportFindings(t, x, findings)
		}
	})
	e.srv = httptest.NewServer(e.handler)
	t.Cleanup(e.srv.Close)
	e.merch, e.apiKey = e.newMerchant("Test merchant")
	return e
}

func (e *env) admin() *review.Admin {
	return review.New(e.store, review.Config{Now: e.clock.Now, PSPs: payments.OnePSP(e.psp)})
}

func (e *env) merchantAdmin() *merchants.Admin { return merchants.NewAdmin(e.store, e.clock.Now) }

// advance lets d pass, on the gateway's clock and on the database's.
func (e *env) advance(d time.Duration) {
	e.clock.Advance(d)
	mysqltest.Advance(e.t, e.db, d)
}

func (e *env) newMerchant(name string) (merchants.Merchant, string) {
	e.tb.Helper()
	m, key, err := merchants.NewMerchant(name, e.clock.Now())
	if err != nil {
		e.tb.Fatal(err)
	}
	if err := e.store.CreateMerchant(context.Background(), m, key); err != nil {
		e.tb.Fatal(err)
	}
	return m, key.Plaintext
}

// response is what a client saw.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (e *env) do(ctx context.Context, method, path, apiKey string, hdr map[string]string, body string) (response, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.srv.URL+path, rd)
	if err != nil {
		return response{}, err
	}
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header[k] = []string{v}
	}
	res, err := e.srv.Client().Do(req)
	if err != nil {
		return response{}, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err == nil && !e.checked {
		// A server this harness did not build: check the exchange as the client saw it.
		e.checkContract(req, body, res, b)
	}
	return response{status: res.StatusCode, header: res.Header, body: b}, err
}

func (e *env) checkContract(req *http.Request, body string, res *http.Response, b []byte) {
	e.t.Helper()
	c, err := published()
	if err != nil {
		e.t.Errorf("api/openapi.json: %v", err)
		return
	}
	x := exchange{method: req.Method, target: req.URL.RequestURI(), reqHeader: req.Header, reqBody: []byte(body),
		status: res.StatusCode, header: res.Header, body: b}
	if findings := c.check(x); len(findings) > 0 {
		reportFindings(e.t, x, findings)
	}
}

// post sends POST /payments as the env's merchant.
func (e *env) post(key, body string) response {
	e.t.Helper()
	return e.postAs(e.apiKey, key, body)
}

func (e *env) postAs(apiKey, key, body string) response {
	e.t.Helper()
	res, err := e.do(context.Background(), http.MethodPost, "/payments", apiKey,
		map[string]string{"Idempotency-Key": key}, body)
	if err != nil {
		e.t.Fatalf("POST /payments: %v", err)
	}
	return res
}

func (e *env) get(path string) response {
	e.t.Helper()
	return e.getAs(e.apiKey, path)
}

func (e *env) getAs(apiKey, path string) response {
	e.t.Helper()
	res, err := e.do(context.Background(), http.MethodGet, path, apiKey, nil, "")
	if err != nil {
		e.t.Fatalf("GET %s: %v", path, err)
	}
	return res
}

func (e *env) count(query string, args ...any) int {
	e.t.Helper()
	return mysqltest.Count(e.t, e.db, query, args...)
}

// counts is the state the invariants are checked against.
type counts struct {
	payments, keys, completed, charges, chargeCalls int
}

func (e *env) counts() counts {
	e.t.Helper()
	return counts{
		payments:    e.count(`SELECT COUNT(*) FROM payments`),
		keys:        e.count(`SELECT COUNT(*) FROM idempotency_keys`),
		completed:   e.count(`SELECT COUNT(*) FROM idempotency_keys WHERE state = 'COMPLETED'`),
		charges:     e.psp.ChargeCount(),
		chargeCalls: e.psp.ChargeCalls(),
	}
}

func (e *env) wantCounts(want counts) {
	e.t.Helper()
	if got := e.counts(); got != want {
		e.t.Fatalf("state: got %+v, want %+v", got, want)
	}
}

func wantStatus(t *testing.T, res response, status int) {
	t.Helper()
	if res.status != status {
		t.Fatalf("status %d, want %d; body %s", res.status, status, res.body)
	}
}

// wantProblem checks a problem+json answer and its stable type.
func wantProblem(t *testing.T, res response, status int, slug string) {
	t.Helper()
	wantStatus(t, res, status)
	if ct := res.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json", ct)
	}
	if want := `"type":"/problems/` + slug + `"`; !bytes.Contains(res.body, []byte(want)) {
		t.Fatalf("problem body %s lacks %s", res.body, want)
	}
}

const okBody = `{"amount": 1000, "currency": "KRW", "payment_method": "pm_card_ok", "description": "Order A-1", "metadata": {"order": "A-1", "channel": "web"}}`

// serve runs the env's API in the server the gateway runs it in, on a
// listener of its own, and returns its address: for tests that speak raw
// HTTP/1.1 over TCP.
func (e *env) serve(o api.ServerOptions, l api.ListenOptions) string {
	e.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		e.t.Fatal(err)
	}
	srv := api.NewHTTPServer(e.raw, o)
	go func() { _ = srv.Serve(api.Listen(ln, l)) }()
	e.t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}
