package api_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gateway/api"
	"gateway/listings"
	"gateway/merchants"
	"gateway/payments"
)

// rawConn is one client speaking HTTP/1.1 over TCP by hand.
type rawConn struct {
	t *testing.T
	c net.Conn
	r *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &rawConn{t: t, c: c, r: bufio.NewReader(c)}
}

func (rc *rawConn) send(s string) {
	rc.t.Helper()
	if _, err := rc.c.Write([]byte(s)); err != nil {
		rc.t.Fatal(err)
	}
}

// response reads one answer; nil when the server closed the connection
// without one.
func (rc *rawConn) response() *http.Response {
	rc.t.Helper()
	_ = rc.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(rc.r, nil)
	if err != nil {
		return nil
	}
	body := new(strings.Builder)
	_, _ = bufio.NewReader(res.Body).WriteTo(body)
	_ = res.Body.Close()
	res.Header.Set("X-Test-Body", body.String())
	return res
}

// closed reports whether the server closed the connection (reading gives EOF).
func (rc *rawConn) closed() bool {
	_ = rc.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := rc.r.ReadByte()
	return err != nil && !isTimeout(err)
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// A body the client fails to deliver (cut short, too slow for the read
// timeout, in broken chunked encoding) is the client's doing: a 400 (or no
// answer, the connection being gone), logged at INFO, never a 500 logged
// at ERROR that would feed the server-error alerts; nothing is stored.
func TestUnreadableBodiesAreClientErrors(t *testing.T) {
	var logs syncBuffer
	log := slog.New(api.LogHandler(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	e := newEnv(t, func(s *envSetup) {
		s.cfg.Logger = log
		s.api = func(o *api.Options) { o.Logger = log }
	})
	addr := e.serve(api.ServerOptions{ReadTimeout: 300 * time.Millisecond, Logger: log}, api.ListenOptions{})
	head := "POST /payments HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer " + e.apiKey + "\r\nContent-Type: application/json\r\nIdempotency-Key: k\r\n"

	cases := []struct {
		name string
		send func(rc *rawConn)
	}{
		{"truncated", func(rc *rawConn) {
			rc.send(head + "Content-Length: 100\r\n\r\n" + okBody[:20])
			_ = rc.c.(*net.TCPConn).CloseWrite()
		}},
		{"slow body cut at the read timeout", func(rc *rawConn) {
			rc.send(head + "Content-Length: 100\r\n\r\n" + okBody[:20]) // and the rest never comes
		}},
		{"malformed chunked encoding", func(rc *rawConn) {
			rc.send(head + "Transfer-Encoding: chunked\r\n\r\n14\r\n" + okBody[:20] + "\r\nzz\r\n")
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rc := dialRaw(t, addr)
			tc.send(rc)
			if res := rc.response(); res != nil && res.StatusCode != http.StatusBadRequest {
				t.Fatalf("status %d, want 400 or no answer: %s", res.StatusCode, res.Header.Get("X-Test-Body"))
			}
		})
	}
	e.wantCounts(counts{})
	text := logs.text()
	if strings.Contains(text, `"level":"ERROR"`) {
		t.Fatalf("a client's broken body was logged as an error:\n%s", text)
	}
	if n := strings.Count(text, "request body unreadable"); n != len(cases) {
		t.Fatalf("%d INFO lines about unreadable bodies, want %d:\n%s", n, len(cases), text)
	}
}

// A request with both Content-Length and Transfer-Encoding (where request
// smuggling starts) is refused with 400 and its connection closed, before
// anything is read or stored; the same connection's earlier requests, with
// one framing each, are served.
func TestAmbiguousFramingIsRefusedAndClosed(t *testing.T) {
	e := newEnv(t)
	addr := e.serve(api.ServerOptions{}, api.ListenOptions{})
	head := "POST /payments HTTP/1.1\r\nHost: gw\r\nAuthorization: Bearer " + e.apiKey + "\r\nContent-Type: application/json\r\n"
	chunked := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(okBody), okBody)

	rc := dialRaw(t, addr)
	// A request the server could answer itself, two well-framed requests
	// of each kind on one connection, then the ambiguous one.
	rc.send("OPTIONS * HTTP/1.1\r\nHost: gw\r\n\r\n")
	if res := rc.response(); res == nil || res.StatusCode == http.StatusBadRequest {
		t.Fatalf("OPTIONS *: %v", res)
	}
	rc.send(head + "Idempotency-Key: a\r\nContent-Length: " + fmt.Sprint(len(okBody)) + "\r\n\r\n" + okBody)
	if res := rc.response(); res == nil || res.StatusCode != http.StatusCreated {
		t.Fatalf("a request with Content-Length: %v", res)
	}
	rc.send(head + "Idempotency-Key: b\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked)
	if res := rc.response(); res == nil || res.StatusCode != http.StatusCreated {
		t.Fatalf("a chunked request: %v", res)
	}
	rc.send(head + "Idempotency-Key: c\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked)
	res := rc.response()
	if res == nil || res.StatusCode != http.StatusBadRequest {
		t.Fatalf("both Content-Length and Transfer-Encoding: %v", res)
	}
	if !strings.Contains(res.Header.Get("X-Test-Body"), "not both") {
		t.Fatalf("the refusal does not say why: %s", res.Header.Get("X-Test-Body"))
	}
	if !rc.closed() {
		t.Fatal("the connection stayed open after an ambiguously framed request")
	}
	if n := e.count(`SELECT COUNT(*) FROM idempotency_keys WHERE idem_key = 'c'`); n != 0 {
		t.Fatalf("the refused request stored %d key(s)", n)
	}
	e.wantCounts(counts{payments: 2, keys: 2, completed: 2, charges: 2, chargeCalls: 2})

	// The order of the two headers does not matter, nor their case.
	rc = dialRaw(t, addr)
	rc.send(head + "Idempotency-Key: d\r\ntransfer-encoding: chunked\r\ncontent-length: 4\r\n\r\n" + chunked)
	if res := rc.response(); res == nil || res.StatusCode != http.StatusBadRequest || !rc.closed() {
		t.Fatalf("TE before CL: %v", res)
	}
}

// Answers are stored and sent without HTML escaping (<, > and & each took
// six bytes), so a stored answer is about the size of the text it holds,
// and that text is capped as a whole: a request whose text fields
// together exceed payments.MaxTextBytes is refused, nothing stored.
func TestStoredAnswersAreNotInflated(t *testing.T) {
	e := newEnv(t, func(s *envSetup) { s.api = func(o *api.Options) { o.MaxBodyBytes = 64 << 10 } })
	md := map[string]string{}
	for i := range payments.MaxMetadataKeys {
		md[fmt.Sprintf("k%02d", i)] = strings.Repeat("<&>", 150)
	}
	body := map[string]any{"amount": 1000, "currency": "KRW", "payment_method": "pm_card_ok",
		"description": strings.Repeat("<b>Tom & Jerry</b>", 50), "metadata": md}
	raw := encodeUnescaped(t, body)
	res := e.post("html", string(raw))
	wantStatus(t, res, http.StatusCreated)
	var stored []byte
	if err := e.db.Get(&stored, `SELECT response_body FROM idempotency_keys WHERE idem_key = 'html'`); err != nil {
		t.Fatal(err)
	}
	text := len(body["description"].(string)) + len(md)*(3+450)
	if len(stored) > text+1024 {
		t.Fatalf("%d bytes of text stored as %d bytes", text, len(stored))
	}
	for _, b := range [][]byte{stored, res.body, e.get("/payments/" + decodeView(t, res.body).ID).body} {
		if !bytes.Contains(b, []byte("<b>Tom & Jerry</b>")) || bytes.Contains(b, []byte(`\u003c`)) {
			t.Fatalf("HTML-escaped answer: %.200s", b)
		}
	}
	if again := e.post("html", string(raw)); !bytes.Equal(again.body, res.body) {
		t.Fatal("the replay differs")
	}
	before := e.counts()

	// Within every per-field limit, too much text all together.
	for k := range md {
		md[k] = strings.Repeat("é", payments.MaxMetadataValueLen)
	}
	raw = encodeUnescaped(t, body)
	res = e.post("too-much", string(raw))
	wantProblem(t, res, http.StatusBadRequest, "invalid-request")
	if !strings.Contains(string(res.body), fmt.Sprint(payments.MaxTextBytes)) {
		t.Fatalf("the refusal does not name the limit: %s", res.body)
	}
	if got := e.counts(); got != before {
		t.Fatalf("a refused request changed state: %+v → %+v", before, got)
	}
}

func encodeUnescaped(t *testing.T, v any) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// countingAuthStore counts the key lookups authentication sends to the database.
type countingAuthStore struct {
	merchants.AuthStore
	reads atomic.Int64
}

func (s *countingAuthStore) ActiveKeysByPrefix(ctx context.Context, prefix string) ([]merchants.StoredKey, []merchants.Merchant, error) {
	s.reads.Add(1)
	return s.AuthStore.ActiveKeysByPrefix(ctx, prefix)
}

// A flood of bad API keys costs the database almost nothing and leaves a
// good merchant served: malformed keys never reach the database, a
// repeated unknown prefix is remembered, and an address that keeps failing
// gets 429 with Retry-After after a burst, before its key is looked at.
func TestBadKeyFloodLeavesGoodMerchantServed(t *testing.T) {
	const burst = 5
	counting := &countingAuthStore{}
	_, proxy, _ := net.ParseCIDR("127.0.0.1/32")
	e := newEnv(t, func(s *envSetup) {
		s.authTTL = 10 * time.Second
		s.authStore = func(st merchants.AuthStore) merchants.AuthStore { counting.AuthStore = st; return counting }
		s.api = func(o *api.Options) {
			// Refills so slowly that the test's own duration never matters.
			o.AuthFailureRate, o.AuthFailureBurst = 1e-6, burst
			o.TrustedProxies = []*net.IPNet{proxy}
		}
	})
	wantStatus(t, e.post("good-0", okBody), http.StatusCreated)
	// Unchecked against the contract, which would take most of the time.
	plain := httptest.NewServer(e.raw)
	defer plain.Close()
	get := func(apiKey, from string) response {
		req, err := http.NewRequest(http.MethodGet, plain.URL+"/payments?idempotency_key=good-0", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+apiKey)
		req.Header.Set("X-Forwarded-For", from)
		res, err := plain.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return response{status: res.StatusCode, header: res.Header, body: b}
	}
	randomKey := func() string {
		b := make([]byte, 32)
		for i := range b {
			b[i] = "abcdefghijklmnopqrstuvwxyz234567"[rand.IntN(32)]
		}
		return "sk_" + string(b)
	}

	// Malformed keys: refused without a read, however many addresses send them.
	before := counting.reads.Load()
	for i, k := range []string{"sk_short", "sk_" + strings.Repeat("A", 32), "sk_" + strings.Repeat("a", 33), "xk_" + strings.Repeat("a", 32), "sk_" + strings.Repeat("a", 31) + "!"} {
		wantProblem(t, get(k, fmt.Sprintf("192.0.2.%d", i+1)), http.StatusUnauthorized, "unauthorized")
	}
	// One unknown key sent from five addresses: one read.
	repeated := randomKey()
	for i := range 5 {
		wantProblem(t, get(repeated, fmt.Sprintf("198.51.100.%d", i+1)), http.StatusUnauthorized, "unauthorized")
	}
	if n := counting.reads.Load() - before; n != 1 {
		t.Fatalf("malformed and repeated keys cost %d database reads, want 1", n)
	}

	// The flood: 2,000 random well-formed keys from one address, while the
	// good merchant keeps asking from another.
	before = counting.reads.Load()
	var (
		wg                        sync.WaitGroup
		unauthorized, limited, ok atomic.Int64
	)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 250 {
				res := get(randomKey(), "203.0.113.7")
				switch res.status {
				case http.StatusUnauthorized:
					unauthorized.Add(1)
				case http.StatusTooManyRequests:
					if res.header.Get("Retry-After") == "" {
						t.Error("429 without Retry-After")
					}
					limited.Add(1)
				}
			}
		}()
		if w == 0 {
			for range 200 {
				if res := get(e.apiKey, "198.51.100.200"); res.status == http.StatusOK {
					ok.Add(1)
				}
			}
		}
	}
	wg.Wait()
	floodReads := counting.reads.Load() - before
	t.Logf("flood: %d refused 401, %d refused 429, %d database reads; good merchant: %d of 200 served",
		unauthorized.Load(), limited.Load(), floodReads, ok.Load())
	if ok.Load() != 200 {
		t.Fatalf("the good merchant was served %d of 200 requests during the flood", ok.Load())
	}
	if unauthorized.Load() > burst || floodReads > burst {
		t.Fatalf("the flooding address got %d answers 401 and cost %d reads; the limit is a burst of %d", unauthorized.Load(), floodReads, burst)
	}
	if limited.Load() < 2000-burst {
		t.Fatalf("%d of 2000 flood requests were limited", limited.Load())
	}
	// The good merchant's own address was never limited, nor the good key.
	wantStatus(t, get(e.apiKey, "198.51.100.200"), http.StatusOK)
	// The flooding address is refused even with a good key until its bucket refills.
	wantProblem(t, get(e.apiKey, "203.0.113.7"), http.StatusTooManyRequests, "rate-limited")
}

// A revoked key stops working on every replica within the auth cache's
// TTL (2 s by default), not only in the process that revoked it: two API
// servers on one database, each having trusted the key, refuse it once
// that much time has passed on their clock.
func TestRevocationReachesEveryReplica(t *testing.T) {
	e := newEnv(t, func(s *envSetup) { s.authTTL = merchants.DefaultAuthCacheTTL })
	other := httptest.NewServer(api.NewHandler(e.svc,
		merchants.NewAuth(e.store, merchants.AuthConfig{CacheTTL: merchants.DefaultAuthCacheTTL, Now: e.clock.Now}), e.store, api.Options{Listings: listings.New(e.store)}))
	defer other.Close()
	second := &env{t: t, srv: other, db: e.db}
	for _, r := range []*env{e, second} {
		wantStatus(t, r.getAs(e.apiKey, "/payments"), http.StatusOK) // each replica now trusts the key
	}
	if err := e.merchantAdmin().RevokeAPIKey(context.Background(), e.merch.ID, merchants.KeyPrefix(e.apiKey)); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(2 * time.Second) // the bound docs/operations.md documents
	for i, r := range []*env{e, second} {
		if res := r.getAs(e.apiKey, "/payments"); res.status != http.StatusUnauthorized {
			t.Fatalf("replica %d still accepts the revoked key %s after its revocation: %d", i+1, 2*time.Second, res.status)
		}
	}
}

// stalledAuthStore is a database that accepted the query and never answers
// (until the caller gives up).
type stalledAuthStore struct{ merchants.AuthStore }

func (stalledAuthStore) ActiveKeysByPrefix(ctx context.Context, _ string) ([]merchants.StoredKey, []merchants.Merchant, error) {
	<-ctx.Done()
	return nil, nil, ctx.Err()
}

// A stalled database does not hold requests outside the payment flow:
// authentication and lookups run under a deadline of their own and answer
// 503 with Retry-After when it passes.
func TestStalledDatabaseReadsHaveADeadline(t *testing.T) {
	e := newEnv(t, func(s *envSetup) {
		s.authStore = func(st merchants.AuthStore) merchants.AuthStore { return stalledAuthStore{st} }
		s.api = func(o *api.Options) { o.LookupTimeout = 200 * time.Millisecond }
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct{ method, path, body string }{
		{http.MethodGet, "/payments", ""},
		{http.MethodGet, "/refunds", ""},
		{http.MethodPost, "/payments", okBody},
	} {
		res, err := e.do(ctx, tc.method, tc.path, e.apiKey, map[string]string{"Idempotency-Key": "k"}, tc.body)
		if err != nil {
			t.Fatalf("%s %s: no answer: %v", tc.method, tc.path, err)
		}
		wantProblem(t, res, http.StatusServiceUnavailable, "service-unavailable")
		if res.header.Get("Retry-After") == "" {
			t.Fatalf("%s %s: 503 without Retry-After", tc.method, tc.path)
		}
	}
	e.wantCounts(counts{})
}

// OPTIONS on a merchant route tells its methods to a merchant only; the
// browser routes' CORS preflights still work without a key. Answers that
// carry payment data (refusals too) are never stored by caches, and a
// client's X-Request-Id is kept only when short and plain.
func TestMerchantRoutesTellNothingWithoutAKey(t *testing.T) {
	e := newEnv(t)
	created := decodeView(t, e.post("k", okBody).body)
	refund, err := e.do(t.Context(), http.MethodPost, "/payments/"+created.ID+"/refunds", e.apiKey, map[string]string{"Idempotency-Key": "r1"}, `{"amount": 100}`)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, refund, http.StatusCreated)
	refundID := decodeJSON[refundView](t, refund.body).ID
	opts := func(apiKey, path string) response {
		res, err := e.do(context.Background(), http.MethodOptions, path, apiKey, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for path, allow := range map[string]string{
		"/payments":                            "GET, POST, OPTIONS",
		"/payments/" + created.ID + "/refunds": "GET, POST, OPTIONS",
		"/refunds":                             "GET, OPTIONS",
		"/refunds/" + refundID:                 "GET, OPTIONS",
	} {
		wantProblem(t, opts("", path), http.StatusUnauthorized, "unauthorized")
		res := opts(e.apiKey, path)
		wantStatus(t, res, http.StatusNoContent)
		if got := res.header.Get("Allow"); got != allow {
			t.Fatalf("OPTIONS %s: Allow %q, want %q", path, got, allow)
		}
	}
	// The browser routes' preflights are answered before any key, as browsers need.
	e.newBrowserSide(e.merch, shopOrigin)
	pre, err := e.do(context.Background(), http.MethodOptions, "/payments/"+created.ID+"/confirm", "",
		map[string]string{"Origin": shopOrigin, "Access-Control-Request-Method": http.MethodPost}, "")
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, pre, http.StatusNoContent)

	for _, res := range []response{
		e.get("/payments"), e.get("/payments?idempotency_key=k"), e.get("/payments/" + created.ID),
		e.get("/refunds"), e.get("/payments/" + created.ID + "/refunds"), e.post("k", okBody), refund,
		e.getAs("", "/payments"), e.getAs("", "/refunds"),
	} {
		if cc := res.header.Get("Cache-Control"); cc != "no-store" {
			t.Fatalf("an answer (%d %.80s) carries Cache-Control %q, want no-store", res.status, res.body, cc)
		}
	}

	for sent, kept := range map[string]bool{
		"order-42_retry.1":          true,
		strings.Repeat("a", 64):     true,
		strings.Repeat("a", 65):     false,
		"<script>alert(1)</script>": false,
		"id with spaces":            false,
		"ünïcode":                   false,
	} {
		res, err := e.do(context.Background(), http.MethodGet, "/healthz", "", map[string]string{"X-Request-Id": sent}, "")
		if err != nil {
			t.Fatal(err)
		}
		got := res.header.Get("X-Request-Id")
		if kept && got != sent || !kept && (got == sent || !strings.HasPrefix(got, "req_")) {
			t.Fatalf("X-Request-Id %q sent, %q answered", sent, got)
		}
	}
}

// Connections are capped: at the cap an idle keep-alive connection is
// closed to make room for a new client; when every connection is busy the
// next one waits until one finishes, and is then served.
func TestConnectionCap(t *testing.T) {
	e := newEnv(t)
	entered, release := make(chan struct{}, 4), make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/block" {
			entered <- struct{}{}
			<-release
		}
		e.raw.ServeHTTP(w, r)
	})
	full := make(chan struct{}, 16)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := api.NewHTTPServer(h, api.ServerOptions{})
	go func() {
		_ = srv.Serve(api.Listen(ln, api.ListenOptions{MaxConns: 2, OnFull: func() { full <- struct{}{} }}))
	}()
	defer srv.Close()
	addr := ln.Addr().String()
	health := "GET /healthz HTTP/1.1\r\nHost: gw\r\n\r\n"
	served := func(rc *rawConn) bool {
		rc.send(health)
		res := rc.response()
		return res != nil && res.StatusCode == http.StatusOK
	}

	// Two idle keep-alive connections fill the cap; a third client is
	// served, and one of the idle ones was closed for it.
	a, b := dialRaw(t, addr), dialRaw(t, addr)
	if !served(a) || !served(b) {
		t.Fatal("the first two connections were not served")
	}
	c := dialRaw(t, addr)
	if !served(c) {
		t.Fatal("a new client was not served while the cap was held by idle connections")
	}
	<-full
	var survivor *rawConn
	switch sa, sb := served(a), served(b); {
	case sa && !sb:
		survivor = a
	case sb && !sa:
		survivor = b
	default:
		t.Fatalf("idle connections still served: %v, %v; want exactly one closed", sa, sb)
	}

	// Both connections busy: the next client waits, then is served.
	for _, rc := range []*rawConn{c, survivor} {
		rc.send("GET /block HTTP/1.1\r\nHost: gw\r\n\r\n")
		<-entered
	}
	d := dialRaw(t, addr)
	d.send(health)
	<-full // its connection waits for a slot
	_ = d.c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, err := d.r.Peek(1); err == nil || !isTimeout(err) {
		t.Fatalf("a client beyond the cap was answered while every connection was busy: %v", err)
	}
	close(release)
	for _, rc := range []*rawConn{c, survivor} {
		if res := rc.response(); res == nil {
			t.Fatal("a busy connection was dropped")
		}
	}
	if res := d.response(); res == nil || res.StatusCode != http.StatusOK {
		t.Fatalf("the waiting client was not served once a slot freed: %v", res)
	}
}
