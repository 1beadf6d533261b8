package jsclient_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strconv"
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
)

func TestMain(m *testing.M) { mysqltest.Main(m) }

// The client's own tests (test/*.test.js) run with node's test runner
// against a real gateway: the API over a private database and the
// in-process fake PSP, reached through a proxy that can fail as networks
// and load balancers do (answer 429 or 503 itself, drop a connection before
// forwarding the request, or after the gateway answered it). A control
// server lets the tests queue those faults, make the PSP fail or wait, and
// read what the proxy saw, the PSP's ledger and the database.
//
// The node tests read the addresses from GATEWAY_TEST_URL,
// GATEWAY_TEST_CONTROL, GATEWAY_TEST_SECRET_KEY and
// GATEWAY_TEST_PUBLISHABLE_KEY; run alone (npm test), they skip.
func TestNodeClient(t *testing.T) {
	node := lookNode(t)
	gw := startGateway(t)
	start := time.Now()
	cmd := exec.Command(node, "--test", "--test-reporter=spec", "test/")
	cmd.Env = append(os.Environ(),
		"GATEWAY_TEST_URL="+gw.proxy.URL,
		"GATEWAY_TEST_CONTROL="+gw.control.URL,
		"GATEWAY_TEST_SECRET_KEY="+gw.secretKey,
		"GATEWAY_TEST_PUBLISHABLE_KEY="+gw.publishableKey,
	)
	out, err := cmd.CombinedOutput()
	t.Logf("node --test (%s):\n%s", time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("the client's node tests failed: %v", err)
	}
	if n := summary(out, "pass"); n == 0 {
		t.Fatal("node ran no passing test")
	}
	if n := summary(out, "skipped"); n != 0 {
		t.Fatalf("node skipped %d test(s) although a gateway was given", n)
	}
}

// summary reads a count of the spec reporter's summary ("ℹ pass 28"); -1
// when it is missing.
func summary(out []byte, what string) int {
	m := regexp.MustCompile(`(?m)^\S* ` + what + ` (\d+)$`).FindSubmatch(out)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// TestNpmPack: the package packs (npm pack, dry run, offline) with the
// module, its types and its README, and nothing else of this directory.
func TestNpmPack(t *testing.T) {
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm is not installed (Debian package npm): the package's packing is not checked")
	}
	cmd := exec.Command(npm, "pack", "--dry-run", "--json", "--ignore-scripts")
	cmd.Env = append(os.Environ(), "npm_config_cache="+t.TempDir(), "npm_config_update_notifier=false", "npm_config_offline=true")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("npm pack --dry-run: %v\n%s", err, out)
	}
	var packs []struct {
		Name  string `json:"name"`
		Files []struct {
			Path string `json:"path"`
		} `json:"files"`
	}
	if err := json.Unmarshal(out, &packs); err != nil || len(packs) != 1 {
		t.Fatalf("npm pack --json: %v\n%s", err, out)
	}
	var files []string
	for _, f := range packs[0].Files {
		files = append(files, f.Path)
	}
	want := []string{"README.md", "gateway.d.ts", "gateway.js", "package.json"}
	if strings.Join(files, " ") != strings.Join(want, " ") {
		t.Fatalf("npm pack ships %v, want %v", files, want)
	}
}

// lookNode finds node, or skips with what to install.
func lookNode(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed (Debian package nodejs, 18 or later): the browser client's tests cannot run")
	}
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		t.Skipf("node --version: %v", err)
	}
	major, _ := strconv.Atoi(strings.TrimPrefix(strings.SplitN(strings.TrimSpace(string(out)), ".", 2)[0], "v"))
	if major < 18 {
		t.Skipf("node %s is too old for the test runner and fetch: 18 or later is needed", strings.TrimSpace(string(out)))
	}
	return node
}

// gateway is the real API behind a fault proxy, and the tests' control.
type gateway struct {
	db                        *sqlx.DB
	psp                       *fake.PSP
	proxy, control            *httptest.Server
	faults                    *faultProxy
	secretKey, publishableKey string
	hold                      *chargeHold
}

func startGateway(t *testing.T) *gateway {
	t.Helper()
	dbx := mysqltest.MustOpen(t)
	st := mysql.NewStore(dbx)
	p := fake.New()
	// A short in-flight wait, so that a duplicate of a request held at the
	// PSP gets its 409 quickly.
	svc := payments.NewService(st, payments.OnePSP(p), payments.Config{Lease: 30 * time.Second, PSPTimeout: 5 * time.Second,
		InFlightWait: 300 * time.Millisecond})
	handler := api.NewHandler(svc, merchants.NewAuth(st, merchants.AuthConfig{}), st, api.Options{
		Listings: listings.New(st),
		Browser:  merchants.NewBrowserAuth(st, merchants.AuthConfig{}),
	})
	upstream := httptest.NewServer(handler)
	t.Cleanup(upstream.Close)

	ctx := context.Background()
	m, key, err := merchants.NewAdmin(st, nil).CreateMerchant(ctx, "Node tests")
	if err != nil {
		t.Fatal(err)
	}
	pk, err := merchants.NewBrowserAccess(st, nil).CreatePublishableKey(ctx, m.ID)
	if err != nil {
		t.Fatal(err)
	}
	g := &gateway{db: dbx, psp: p, secretKey: key.Plaintext, publishableKey: pk.Plaintext,
		faults: &faultProxy{upstream: upstream.URL, client: upstream.Client()}, hold: &chargeHold{}}
	p.SetChargeHook(g.hold.wait)
	g.proxy = httptest.NewServer(g.faults)
	t.Cleanup(g.proxy.Close)
	g.control = httptest.NewServer(g.controlHandler(t))
	t.Cleanup(g.control.Close)
	t.Cleanup(g.hold.release) // no charge stays held past the test
	return g
}

// fault is what the proxy does to one request instead of forwarding it.
type fault struct {
	// Kind: "status" answers Status itself (with Retry-After when
	// RetryAfter > 0); "drop_before" closes the connection unforwarded;
	// "drop_after" forwards, lets the gateway answer, then closes the
	// connection without passing the answer on.
	Kind       string `json:"kind"`
	Status     int    `json:"status"`
	RetryAfter int    `json:"retry_after"`
}

// seen is one request through the proxy, as the tests read it.
type seen struct {
	Method string  `json:"method"`
	Path   string  `json:"path"`
	Key    string  `json:"key"`
	Body   string  `json:"body"`
	Fault  string  `json:"fault"`
	Status int     `json:"status"`
	At     float64 `json:"at_ms"` // since the proxy started, in milliseconds
}

// faultProxy forwards to the gateway, applying queued faults to the
// requests of the paths they name.
type faultProxy struct {
	upstream string
	client   *http.Client
	start    time.Time
	mu       sync.Mutex
	queue    map[string][]fault // by path suffix ("/confirm", or "" for any)
	log      []seen
}

func (f *faultProxy) next(path string) (fault, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for suffix, q := range f.queue {
		if len(q) > 0 && strings.HasSuffix(path, suffix) {
			f.queue[suffix] = q[1:]
			return q[0], true
		}
	}
	return fault{}, false
}

func (f *faultProxy) record(s seen) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.start.IsZero() {
		f.start = time.Now()
	}
	s.At = float64(time.Since(f.start).Microseconds()) / 1000
	f.log = append(f.log, s)
}

func (f *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s := seen{Method: r.Method, Path: r.URL.Path, Key: r.Header.Get("Idempotency-Key"), Body: string(body)}
	ft, faulty := f.next(r.URL.Path)
	if faulty && ft.Kind == "status" {
		s.Fault, s.Status = "status", ft.Status
		f.record(s)
		if ft.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(ft.RetryAfter))
		}
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(ft.Status)
		_, _ = io.WriteString(w, "injected by the test proxy\n")
		return
	}
	if faulty && ft.Kind == "drop_before" {
		s.Fault = ft.Kind
		f.record(s)
		drop(w)
		return
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, f.upstream+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	req.Header = r.Header.Clone()
	res, err := f.client.Do(req)
	if err != nil {
		s.Fault = "upstream: " + err.Error()
		f.record(s)
		drop(w)
		return
	}
	answer, _ := io.ReadAll(res.Body)
	res.Body.Close()
	s.Status = res.StatusCode
	if faulty && ft.Kind == "drop_after" {
		s.Fault = ft.Kind
		f.record(s)
		drop(w)
		return
	}
	f.record(s)
	for k, vs := range res.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(res.StatusCode)
	_, _ = w.Write(answer)
}

// drop closes the client's connection without an answer.
func drop(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

// chargeHold makes the PSP hold charges until released: a request stays
// in flight while the tests act.
type chargeHold struct {
	mu      sync.Mutex
	held    chan struct{} // closed to release; nil when charges pass
	arrived chan struct{} // closed when a held charge arrives
}

func (h *chargeHold) set() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held, h.arrived = make(chan struct{}), make(chan struct{})
}

func (h *chargeHold) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held != nil {
		close(h.held)
		h.held = nil
	}
}

func (h *chargeHold) wait(ctx context.Context, _ psp.ChargeRequest) {
	h.mu.Lock()
	held, arrived := h.held, h.arrived
	if held != nil {
		select {
		case <-arrived:
		default:
			close(arrived)
		}
	}
	h.mu.Unlock()
	if held != nil {
		select {
		case <-held:
		case <-ctx.Done():
		}
	}
}

func (h *chargeHold) waitArrival(d time.Duration) bool {
	h.mu.Lock()
	arrived := h.arrived
	h.mu.Unlock()
	if arrived == nil {
		return false
	}
	select {
	case <-arrived:
		return true
	case <-time.After(d):
		return false
	}
}

// controlHandler is what the node tests call to arrange and to check.
func (g *gateway) controlHandler(t *testing.T) http.Handler {
	mux := http.NewServeMux()
	reply := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	// POST /faults {"path": "/confirm", "faults": [...]}: queue faults.
	mux.HandleFunc("POST /faults", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Path   string  `json:"path"`
			Faults []fault `json:"faults"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		g.faults.mu.Lock()
		if g.faults.queue == nil {
			g.faults.queue = map[string][]fault{}
		}
		g.faults.queue[req.Path] = append(g.faults.queue[req.Path], req.Faults...)
		g.faults.mu.Unlock()
		reply(w, map[string]bool{"queued": true})
	})
	// DELETE /faults: drop the queued faults.
	mux.HandleFunc("DELETE /faults", func(w http.ResponseWriter, r *http.Request) {
		g.faults.mu.Lock()
		g.faults.queue = nil
		g.faults.mu.Unlock()
		reply(w, map[string]bool{"cleared": true})
	})
	// GET /seen?payment=pay_…: the requests the proxy saw for a payment.
	mux.HandleFunc("GET /seen", func(w http.ResponseWriter, r *http.Request) {
		id := r.URL.Query().Get("payment")
		g.faults.mu.Lock()
		out := []seen{}
		for _, s := range g.faults.log {
			if strings.HasPrefix(s.Path, "/payments/"+id) {
				out = append(out, s)
			}
		}
		g.faults.mu.Unlock()
		reply(w, out)
	})
	// POST /psp/fail {"n": 1}: the PSP's next charges are lost after it
	// charged (the gateway answers 502 psp-outcome-unknown).
	mux.HandleFunc("POST /psp/fail", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			N int `json:"n"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		g.psp.FailNextCharges(fake.FaultUnknownAfterCharge, req.N)
		reply(w, map[string]bool{"armed": true})
	})
	// POST /psp/hold, then GET /psp/arrived (waits up to 10 s for a held
	// charge), then POST /psp/release.
	mux.HandleFunc("POST /psp/hold", func(w http.ResponseWriter, r *http.Request) {
		g.hold.set()
		reply(w, map[string]bool{"holding": true})
	})
	mux.HandleFunc("GET /psp/arrived", func(w http.ResponseWriter, r *http.Request) {
		reply(w, map[string]bool{"arrived": g.hold.waitArrival(10 * time.Second)})
	})
	mux.HandleFunc("POST /psp/release", func(w http.ResponseWriter, r *http.Request) {
		g.hold.release()
		reply(w, map[string]bool{"released": true})
	})
	// GET /state?payment=pay_…: the PSP's charges for the payment's order,
	// the payment's status and its confirm keys in the database.
	mux.HandleFunc("GET /state", func(w http.ResponseWriter, r *http.Request) {
		id := r.URL.Query().Get("payment")
		var st struct {
			Status          string `db:"status" json:"status"`
			MerchantOrderID string `db:"merchant_order_id" json:"merchant_order_id"`
		}
		if err := g.db.GetContext(r.Context(), &st, `SELECT status, merchant_order_id FROM payments WHERE id = ?`, id); err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		var keys []string
		if err := g.db.SelectContext(r.Context(), &keys, `SELECT idem_key FROM idempotency_keys WHERE endpoint = ? AND subject_id = ?`,
			payments.EndpointConfirmPayment, id); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		reply(w, map[string]any{"status": st.Status, "charges": g.psp.ChargesFor(st.MerchantOrderID), "confirm_keys": keys})
	})
	return mux
}
