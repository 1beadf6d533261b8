package demo_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/jmoiron/sqlx"

	"gateway/mysql/mysqltest"
	"gateway/payments"
	"gateway/psp/fake/fakeserver"
)

func TestMain(m *testing.M) { mysqltest.Main(m) }

// The reference checkout page in a real, headless Chromium, against a real
// `gateway dev` process (so that it can be killed) over a private database
// and the standalone fake PSP. Every scenario asserts on the PSP's ledger and
// the database, not only on what the page shows, and leaves a screenshot
// of its final state in the artifacts directory (GATEWAY_ARTIFACTS, or a
// directory under the system's temporary directory, named in the log).
func TestCheckoutInABrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts Chromium and a gateway process: make proofs runs it")
	}
	chromium := findChromium(t)
	start := time.Now()
	w := newWorld(t, chromium)
	t.Logf("setup (gateway built and started, Chromium up) in %s", time.Since(start).Round(time.Millisecond))

	for _, sc := range []struct {
		name string
		run  func(t *testing.T, w *world)
	}{
		{"double click pays once", doubleClick},
		{"declined is shown, not retried", declined},
		{"needs action", needsAction},
		{"reload mid-attempt resumes the same key", reloadMidAttempt},
		{"gateway killed after charging, then restarted", killedAfterCharging},
		{"try again after the gateway was unreachable", tryAgain},
		{"a publishable key cannot create or read another payment", publishableKeyLimits},
		{"an origin not allowed is refused", originNotAllowed},
	} {
		t.Run(sc.name, func(t *testing.T) {
			began := time.Now()
			sc.run(t, w)
			t.Logf("%s: %s", sc.name, time.Since(began).Round(time.Millisecond))
		})
	}
	t.Logf("screenshots in %s", w.artifacts)
}

// world is everything the scenarios share: the database, the fake PSP, the
// gateway process and the browser.
type world struct {
	t         *testing.T
	db        *sqlx.DB
	psp       *pspHooks
	gw        *gatewayProc
	browser   context.Context
	artifacts string
}

func newWorld(t *testing.T, chromium string) *world {
	w := &world{t: t, db: mysqltest.MustOpen(t), artifacts: artifactsDir(t)}
	srv, err := fakeserver.New(fakeserver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	w.psp = &pspHooks{srv: srv}
	pspSrv := httptest.NewServer(w.psp)
	t.Cleanup(func() { w.psp.release(); srv.Close(); pspSrv.Close() })

	w.gw = &gatewayProc{t: t, bin: buildGateway(t), addr: freeAddr(t), logPath: filepath.Join(w.artifacts, "gateway.log"),
		env: []string{
			"GATEWAY_DATABASE_DSN=" + mysqltest.DSNOf(t, w.db),
			"GATEWAY_PSP=fakehttp",
			"GATEWAY_PSP_URL=" + pspSrv.URL,
			// A lease short enough that a restarted gateway takes over the
			// killed one's payment within seconds; long enough for a charge.
			"GATEWAY_LEASE=8s",
			"GATEWAY_PSP_TIMEOUT=3s",
			"GATEWAY_SHUTDOWN_TIMEOUT=11s",
			"GATEWAY_INFLIGHT_WAIT=1s",
			// No reconciler: what settles a payment here is the page's retry.
			"GATEWAY_RECONCILE_SCHEDULE=off",
			"GATEWAY_LOG_FORMAT=text",
		}}
	w.gw.start()
	t.Cleanup(w.gw.stop)

	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(chromium),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(600, 1000),
	)
	browser, cancelBrowser := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancelBrowser(); cancelAlloc() })
	if err := chromedp.Do(browser, chromedp.Navigate("about:blank")); err != nil {
		t.Skipf("headless Chromium (%s) does not start here: %v", chromium, err)
	}
	w.browser = browser
	return w
}

// page is one tab on the checkout page, with the confirm requests the
// browser sent from it.
type page struct {
	t   *testing.T
	w   *world
	ctx context.Context

	mu       sync.Mutex
	confirms []string // the Idempotency-Key of each POST …/confirm, in order
}

// open loads the checkout page in a new tab (query: the page's test knobs)
// and waits until it is ready to pay.
func (w *world) open(t *testing.T, query string) *page {
	ctx, cancel := chromedp.NewContext(w.browser)
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() { cancelTimeout(); cancel() })
	p := &page{t: t, w: w, ctx: ctx}
	requests := chromedp.Events(ctx, network.RequestWillBeSent)
	go func() {
		for ev, err := range requests {
			if err != nil {
				return
			}
			if ev.Request.Method == http.MethodPost && strings.HasSuffix(ev.Request.URL, "/confirm") {
				p.mu.Lock()
				p.confirms = append(p.confirms, header(ev.Request.Headers, "Idempotency-Key"))
				p.mu.Unlock()
			}
		}
	}()
	p.do(chromedp.Navigate(w.gw.demoURL + query))
	p.waitState("ready")
	return p
}

func header(h network.Headers, name string) string {
	for k, v := range h {
		if strings.EqualFold(k, name) {
			s, _ := v.(string)
			return s
		}
	}
	return ""
}

func (p *page) do(actions ...chromedp.Action[chromedp.Void]) {
	p.t.Helper()
	if err := chromedp.Do(p.ctx, actions...); err != nil {
		p.shot("failed")
		p.t.Fatalf("browser: %v\n%s", err, p.w.gw.logTail())
	}
}

// waitState waits until the page shows state (#status[data-state]).
func (p *page) waitState(state string) {
	p.t.Helper()
	p.do(chromedp.WaitVisible(chromedp.CSS(`#status[data-state="` + state + `"]`)))
}

func (p *page) eval(js string) string {
	p.t.Helper()
	v, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](js, chromedp.EvalAwaitPromise))
	if err != nil {
		p.t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// paymentID is the order's payment, as the page shows it.
func (p *page) paymentID() string {
	p.t.Helper()
	return strings.TrimSpace(p.eval(`document.getElementById('payment-id').textContent`))
}

// attemptKey is the Idempotency-Key of the attempt the page's client keeps.
func (p *page) attemptKey() string {
	return p.eval(`(() => { const k = Object.keys(sessionStorage).find((k) => k.startsWith('gateway.attempt.'));
		return k ? JSON.parse(sessionStorage.getItem(k)).key : '' })()`)
}

func (p *page) pay(method string) {
	p.t.Helper()
	p.do(chromedp.Click(chromedp.CSS(`input[value="`+method+`"]`)), chromedp.Click(chromedp.CSS("#pay")))
}

func (p *page) sentConfirms() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.confirms...)
}

// shot writes a screenshot of the tab to the artifacts directory, with
// the page's trace of what its client did unfolded.
func (p *page) shot(name string) {
	_ = chromedp.Do(p.ctx, chromedp.Evaluate[chromedp.Void](`document.getElementById('trace')?.setAttribute('open', '')`))
	buf, err := chromedp.Run(p.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Logf("screenshot %s: %v", name, err)
		return
	}
	path := filepath.Join(p.w.artifacts, name+".png")
	if err := os.WriteFile(path, buf, 0o644); err != nil {
		p.t.Errorf("screenshot %s: %v", name, err)
	}
}

// ends waits for the page's final state, leaves its screenshot, and
// checks the payment (see settled); it returns the attempt's key.
func (p *page) ends(state, shot string, status payments.Status, charges int) string {
	p.t.Helper()
	p.waitState(state)
	p.shot(shot)
	return p.settled(status, charges)
}

// settled checks the database and the ledger for the page's payment: its
// status, one confirm key (the one the browser sent every time), and the
// PSP's charges for its order.
func (p *page) settled(status payments.Status, charges int) string {
	p.t.Helper()
	id := p.paymentID()
	var row struct {
		Status  string `db:"status"`
		OrderID string `db:"merchant_order_id"`
	}
	if err := p.w.db.Get(&row, `SELECT status, merchant_order_id FROM payments WHERE id = ?`, id); err != nil {
		p.t.Fatalf("payment %s: %v", id, err)
	}
	if row.Status != string(status) {
		p.t.Errorf("payment %s is %s in the database, want %s", id, row.Status, status)
	}
	if got := p.w.psp.charges(row.OrderID); got != charges {
		p.t.Errorf("the PSP holds %d charge(s) for the order, want %d", got, charges)
	}
	var keys []string
	if err := p.w.db.Select(&keys, `SELECT idem_key FROM idempotency_keys WHERE endpoint = ? AND subject_id = ?`,
		payments.EndpointConfirmPayment, id); err != nil {
		p.t.Fatal(err)
	}
	sent := p.sentConfirms()
	if len(keys) != 1 {
		p.t.Fatalf("%d confirm keys in the database, want 1: %v (the browser sent %v)", len(keys), keys, sent)
	}
	for _, k := range sent {
		if k != keys[0] {
			p.t.Errorf("the browser sent the key %q besides the attempt's %q", k, keys[0])
		}
	}
	return keys[0]
}

func doubleClick(t *testing.T, w *world) {
	p := w.open(t, "")
	p.do(chromedp.DoubleClick(chromedp.CSS("#pay")))
	p.ends("succeeded", "succeeded", payments.Succeeded, 1)
	if n := len(p.sentConfirms()); n != 1 {
		t.Errorf("the browser sent %d confirms for a double click, want 1", n)
	}
}

func declined(t *testing.T, w *world) {
	p := w.open(t, "")
	p.pay("pm_card_declined")
	p.ends("declined", "declined", payments.Declined, 1)
	if n := len(p.sentConfirms()); n != 1 {
		t.Errorf("a decline was sent %d times, want once (never retried)", n)
	}
	if text := p.eval(`document.getElementById('status-detail').textContent`); !strings.Contains(text, "card_declined") {
		t.Errorf("the page does not say why: %q", text)
	}
}

func needsAction(t *testing.T, w *world) {
	p := w.open(t, "")
	p.pay("pm_card_3ds")
	p.ends("requires_action", "needs-action", payments.RequiresAction, 1)
	href := p.eval(`document.getElementById('next-action').href`)
	if !strings.Contains(href, "/3ds/") || !strings.HasPrefix(href, "http://127.0.0.1:") {
		t.Errorf("the 3-D Secure link is %q", href)
	}
	if p.attemptKey() == "" {
		t.Error("the attempt was dropped while the payment waits for its customer")
	}
}

func reloadMidAttempt(t *testing.T, w *world) {
	p := w.open(t, "")
	arrived := w.psp.hold()
	p.pay("pm_card_ok")
	waitFor(t, arrived, "the charge at the PSP")
	key := p.attemptKey()
	if key == "" {
		t.Fatal("no attempt kept in sessionStorage while paying")
	}
	// Reload while the charge is at the PSP: the new page resumes the attempt.
	before := len(p.sentConfirms())
	p.do(chromedp.Reload())
	deadline := time.Now().Add(20 * time.Second)
	for len(p.sentConfirms()) == before && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // polling the browser's events, bounded
	}
	if len(p.sentConfirms()) == before {
		t.Fatal("the reloaded page did not resume the attempt")
	}
	w.psp.release()
	if got := p.ends("succeeded", "reload-succeeded", payments.Succeeded, 1); got != key {
		t.Errorf("the database holds key %q, the page had %q before the reload", got, key)
	}
}

func killedAfterCharging(t *testing.T, w *world) {
	// The page's client may take its time: the restarted gateway takes over
	// the payment only when the killed one's lease ends.
	p := w.open(t, "?attempts=40")
	charged := w.psp.killAfterCharge()
	p.pay("pm_card_ok")
	waitFor(t, charged, "the charge")
	w.gw.kill()
	w.gw.start()
	p.ends("succeeded", "restart-succeeded", payments.Succeeded, 1)
	if n := len(p.sentConfirms()); n < 2 {
		t.Errorf("the browser sent %d confirm(s), want a retry after the gateway died", n)
	}
}

func tryAgain(t *testing.T, w *world) {
	p := w.open(t, "?attempts=2&poll_ms=1000")
	w.gw.kill()
	p.pay("pm_card_ok")
	p.waitState("retry")
	p.shot("try-again")
	w.gw.start()
	p.do(chromedp.Click(chromedp.CSS("#try-again")))
	p.waitState("succeeded")
	p.settled(payments.Succeeded, 1)
	if n := len(p.sentConfirms()); n < 3 {
		t.Errorf("the browser sent %d confirm(s), want 2 that failed and 1 after \"try again\"", n)
	}
}

func publishableKeyLimits(t *testing.T, w *world) {
	p := w.open(t, "")
	other := w.gw.newOrder(t) // another payment of the same merchant
	before := mysqltest.Count(t, w.db, `SELECT COUNT(*) FROM payments`)
	// From the page, with its publishable key and its own client secret.
	got := p.eval(`(async () => {
		const o = JSON.parse(sessionStorage.getItem('demo.checkout.order'));
		const api = document.body.dataset.apiBase, pk = document.body.dataset.publishableKey;
		const h = { Authorization: 'Bearer ' + pk, 'Client-Secret': o.client_secret };
		const create = await fetch(api + '/payments', { method: 'POST', headers: { ...h, 'Idempotency-Key': 'x', 'Content-Type': 'application/json' },
			body: JSON.stringify({ amount: 1000, currency: 'KRW', payment_method: 'pm_card_ok' }) }).then((r) => r.status, (e) => 'error: ' + e);
		const list = await fetch(api + '/payments', { headers: h }).then((r) => r.status, (e) => 'error: ' + e);
		const read = await fetch(api + '/payments/` + other.PaymentID + `', { headers: h }).then((r) => r.status, (e) => 'error: ' + e);
		const confirm = await fetch(api + '/payments/` + other.PaymentID + `/confirm', { method: 'POST',
			headers: { ...h, 'Idempotency-Key': 'y', 'Content-Type': 'application/json' }, body: '{"payment_method":"pm_card_ok"}' })
			.then((r) => r.status, (e) => 'error: ' + e);
		const mine = await fetch(api + '/payments/' + o.payment_id, { headers: h }).then((r) => r.status, (e) => 'error: ' + e);
		return [create, list, read, confirm, mine].join(' ');
	})()`)
	// POST /payments and GET /payments take no publishable key: their
	// preflight is not answered, so the browser refuses them itself.
	// Another payment is not found; the page's own is read.
	if !regexp.MustCompile(`^error: TypeError\S* error: TypeError\S* 404 404 200$`).MatchString(strings.ReplaceAll(got, ": Failed to fetch", "")) {
		t.Errorf("create, list, read another, confirm another, read mine: %s", got)
	}
	if after := mysqltest.Count(t, w.db, `SELECT COUNT(*) FROM payments`); after != before {
		t.Errorf("%d payments after, %d before", after, before)
	}
	var status string
	if err := w.db.Get(&status, `SELECT status FROM payments WHERE id = ?`, other.PaymentID); err != nil || status != string(payments.RequiresConfirmation) {
		t.Errorf("the other payment is %q (%v), want untouched", status, err)
	}
	// Without the browser: the same key on POST /payments is refused 403.
	res := w.gw.call(t, http.MethodPost, "/payments", map[string]string{"Authorization": "Bearer " + w.gw.publishableKey,
		"Idempotency-Key": "z", "Content-Type": "application/json"}, `{"amount": 1000, "currency": "KRW", "payment_method": "pm_card_ok"}`)
	if res.StatusCode != http.StatusForbidden {
		t.Errorf("POST /payments with a publishable key: %d, want 403", res.StatusCode)
	}
	p.shot("publishable-key-limits")
}

func originNotAllowed(t *testing.T, w *world) {
	o := w.gw.newOrder(t)
	// A page on an origin the merchant does not allow, holding the
	// merchant's publishable key and a real client secret.
	evil := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(rw, `<!doctype html><title>Elsewhere</title><body><h1>Another site</h1><p id="result">working</p>
<script type="module">
const r = document.getElementById('result');
try {
  const res = await fetch(%q, { method: 'POST', body: '{"payment_method":"pm_card_ok"}',
    headers: { Authorization: 'Bearer %s', 'Client-Secret': %q, 'Idempotency-Key': 'evil', 'Content-Type': 'application/json' } });
  r.textContent = 'answered ' + res.status;
} catch (e) { r.textContent = 'refused: ' + e; }
r.dataset.done = 'yes';
</script></body>`, w.gw.apiBase+"/payments/"+o.PaymentID+"/confirm", w.gw.publishableKey, o.ClientSecret)
	}))
	t.Cleanup(evil.Close)
	ctx, cancel := chromedp.NewContext(w.browser)
	ctx, cancelTimeout := context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(func() { cancelTimeout(); cancel() })
	p := &page{t: t, w: w, ctx: ctx}
	p.do(chromedp.Navigate(evil.URL), chromedp.WaitVisible(chromedp.CSS(`#result[data-done="yes"]`)))
	p.shot("origin-refused")
	if got := p.eval(`document.getElementById('result').textContent`); !strings.HasPrefix(got, "refused: TypeError") {
		t.Errorf("the page on %s got %q, want the browser's refusal", evil.URL, got)
	}
	var status string
	if err := w.db.Get(&status, `SELECT status FROM payments WHERE id = ?`, o.PaymentID); err != nil || status != string(payments.RequiresConfirmation) {
		t.Errorf("the payment is %q (%v), want untouched", status, err)
	}
	if n := mysqltest.Count(t, w.db, `SELECT COUNT(*) FROM idempotency_keys WHERE endpoint = ? AND subject_id = ?`, payments.EndpointConfirmPayment, o.PaymentID); n != 0 {
		t.Errorf("%d confirm keys stored for a refused origin", n)
	}
	// The preflight the browser sent was refused, without CORS headers.
	res := w.gw.call(t, http.MethodOptions, "/payments/"+o.PaymentID+"/confirm", map[string]string{"Origin": evil.URL,
		"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,client-secret,content-type,idempotency-key"}, "")
	if res.StatusCode != http.StatusForbidden || res.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("preflight from %s: %d %v", evil.URL, res.StatusCode, res.Header)
	}
}

func waitFor(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("waited 30 s for %s", what)
	}
}

// pspHooks stands in front of the fake PSP: it can hold the next charges
// until released, or let the PSP charge and then never answer (the gateway
// is killed meanwhile).
type pspHooks struct {
	srv *fakeserver.Server

	mu      sync.Mutex
	held    chan struct{} // closed to release held charges
	arrived chan struct{} // closed when a held charge arrives
	charged chan struct{} // set: the next charge is made and never answered
}

func (h *pspHooks) hold() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held, h.arrived = make(chan struct{}), make(chan struct{})
	return h.arrived
}

func (h *pspHooks) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.held != nil {
		close(h.held)
		h.held = nil
	}
}

func (h *pspHooks) killAfterCharge() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.charged = make(chan struct{})
	return h.charged
}

func (h *pspHooks) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/charges" {
		h.srv.ServeHTTP(w, r)
		return
	}
	h.mu.Lock()
	held, arrived, charged := h.held, h.arrived, h.charged
	if arrived != nil {
		close(arrived)
		h.arrived = nil
	}
	h.charged = nil
	h.mu.Unlock()
	if held != nil {
		select {
		case <-held:
		case <-r.Context().Done():
			return // the gateway gave up before the PSP saw it: nothing charged
		}
	}
	if charged != nil {
		h.srv.ServeHTTP(httptest.NewRecorder(), r) // the charge is made ...
		close(charged)
		<-r.Context().Done() // ... and its answer never leaves: the gateway dies first
		return
	}
	h.srv.ServeHTTP(w, r)
}

// charges counts the PSP's charges for an order.
func (h *pspHooks) charges(orderID string) int {
	n := 0
	for _, c := range h.srv.LedgerSnapshot().Charges {
		if c.MerchantOrderID == orderID {
			n++
		}
	}
	return n
}

// gatewayProc is `gateway dev` as a process, killable and restartable on
// the same address.
type gatewayProc struct {
	t       *testing.T
	bin     string
	addr    string
	env     []string
	logPath string

	cmd            *exec.Cmd
	exited         chan struct{}
	apiBase        string
	demoURL        string
	publishableKey string // this run's (a restart mints another; pages keep theirs)
}

var (
	demoLine = regexp.MustCompile(`Checkout demo \(confirms in the browser with publishable key (pk_[a-z2-7]+)\):\n  (http://\S+)`)
	readyAt  = regexp.MustCompile(`Gateway ready on (http://\S+) `)
)

func (g *gatewayProc) start() {
	g.t.Helper()
	logf, err := os.OpenFile(g.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		g.t.Fatal(err)
	}
	cmd := exec.Command(g.bin, "dev")
	cmd.Env = append(append(os.Environ(), g.env...), "GATEWAY_ADDR="+g.addr)
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		g.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		g.t.Fatal(err)
	}
	g.cmd, g.exited = cmd, make(chan struct{})
	banner := make(chan string, 1)
	go func() {
		var b strings.Builder
		sc := bufio.NewScanner(stdout)
		sent := false
		for sc.Scan() {
			b.WriteString(sc.Text() + "\n")
			if !sent && strings.Contains(sc.Text(), "Press Ctrl-C") {
				banner <- b.String()
				sent = true
			}
		}
		if !sent {
			banner <- b.String()
		}
	}()
	go func() { _ = cmd.Wait(); logf.Close(); close(g.exited) }()
	var out string
	select {
	case out = <-banner:
	case <-time.After(60 * time.Second):
		g.t.Fatalf("gateway dev did not start within 60 s:\n%s", g.logTail())
	}
	m, r := demoLine.FindStringSubmatch(out), readyAt.FindStringSubmatch(out)
	if m == nil || r == nil {
		g.t.Fatalf("gateway dev's banner names no checkout demo:\n%s\n%s", out, g.logTail())
	}
	g.publishableKey, g.demoURL, g.apiBase = m[1], m[2], r[1]
}

// kill ends the process at once, as a crash would.
func (g *gatewayProc) kill() {
	if g.cmd == nil {
		return
	}
	_ = g.cmd.Process.Signal(syscall.SIGKILL)
	<-g.exited
	g.cmd = nil
}

func (g *gatewayProc) stop() {
	if g.cmd == nil {
		return
	}
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.exited:
	case <-time.After(15 * time.Second):
		g.kill()
	}
	g.cmd = nil
}

func (g *gatewayProc) logTail() string {
	b, err := os.ReadFile(g.logPath)
	if err != nil {
		return ""
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return "gateway log (tail):\n" + string(b)
}

// call sends one request to the gateway, outside the browser.
func (g *gatewayProc) call(t *testing.T, method, path string, hdr map[string]string, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(method, g.apiBase+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res
}

// order is what the merchant-server stub answers.
type order struct {
	PaymentID    string `json:"payment_id"`
	ClientSecret string `json:"client_secret"`
}

// newOrder asks the demo's merchant-server stub for an order's payment.
func (g *gatewayProc) newOrder(t *testing.T) order {
	t.Helper()
	base := strings.TrimSuffix(g.demoURL, "/demo/checkout")
	res, err := http.Post(base+"/demo/orders", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var o order
	if err := json.NewDecoder(res.Body).Decode(&o); err != nil || o.ClientSecret == "" {
		t.Fatalf("new order: %d %v", res.StatusCode, err)
	}
	return o
}

// freeAddr picks a loopback address that is free now; the gateway binds it
// again after every restart.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// buildGateway builds cmd/gateway (with the race detector when this test
// binary has it) into the test's temporary directory.
func buildGateway(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "gateway")
	args := []string{"build", "-o", bin}
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			if s.Key == "-race" && s.Value == "true" {
				args = append(args, "-race")
			}
		}
	}
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), append(args, "gateway/cmd/gateway")...)
	cmd.Dir = ".."
	began := time.Now()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/gateway: %v\n%s", err, out)
	}
	t.Logf("built the gateway in %s", time.Since(began).Round(time.Millisecond))
	return bin
}

// artifactsDir is where the screenshots and the gateway's log go: kept
// after the test, under GATEWAY_ARTIFACTS when it is set.
func artifactsDir(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("GATEWAY_ARTIFACTS"); dir != "" {
		dir = filepath.Join(dir, "browser")
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	dir, err := os.MkdirTemp("", "gateway-browser-")
	if err != nil {
		t.Fatal(err)
	}
	return dir
}
