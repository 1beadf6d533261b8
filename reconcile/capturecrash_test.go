package reconcile_test

import (
	"bufio"
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"gateway/idemkeys"
	"gateway/merchants"
	"gateway/mysql"
	"gateway/mysql/mysqltest"
	"gateway/payments"
	"gateway/psp/fake"
	"gateway/psp/fake/fakeclient"
	"gateway/psp/fake/fakeserver"
	"gateway/reconcile"
)

// A crash between every two steps of the capture path (design §15): each
// statement and each commit of the claim and of the settle, and the PSP
// call between them. The capture runs in a worker process (this test
// binary again, TestCaptureCrashWorker) whose database connections and PSP
// client stop before the chosen step and wait there; the test kills the
// process with SIGKILL, as a crash would, so the database sees its
// connections drop mid-transaction. The PSP is the standalone fake, served
// by the test, so its ledger outlives the worker; one more crash point is
// the PSP's own: it captures and its answer never leaves. After each
// crash, a retry with the same key, or the reconciler, must end with
// exactly one capture at the PSP and the payment succeeded with what it
// captured.

// crashWorkerEnv carries a crashJob to the worker process.
const crashWorkerEnv = "GATEWAY_CAPTURE_CRASH_JOB"

// crashJob is one capture for the worker to run: of PaymentID, with Key,
// at the PSP at PSPURL, stopping before step StopAt (0: runs to the end).
type crashJob struct {
	DSN, PSPURL, MerchantID, PaymentID, Key string
	Amount                                  int64
	StopAt                                  int
}

// What the worker prints, one line each, for the test to read.
const (
	lineConn    = "crash-worker conn "    // a database connection's CONNECTION_ID()
	lineStep    = "crash-worker step "    // a step about to run: its number and label
	lineStopped = "crash-worker stopped " // the worker waits before this step, to be killed
	lineDone    = "crash-worker done "    // the capture answered
)

const crashCapture = 600 // of an authorization of 1000: a partial capture

func TestCaptureCrashes(t *testing.T) {
	c := newCrashEnv(t)

	// A run without a crash lists the steps, and shows that the worker's
	// hooks see the whole path: the claim, the PSP call, the settle.
	dry := c.authorized("dry")
	w := c.start(dry, "dry-cap", 0)
	w.wait(t)
	steps := w.steps()
	if !w.done() || c.ledgerCaptures(dry) != 1 {
		t.Fatalf("the run without a crash did not capture once:\n%s", w.output())
	}
	path := strings.Join(steps, "\n")
	for _, want := range []string{`(?m)^ClaimOperation: INSERT idempotency_keys`, `(?m)^ClaimOperation: SELECT payments FOR UPDATE`,
		`(?m)^ClaimOperation: COMMIT\nPSP: POST /v1/captures\nSettleOperation: `, `(?m)^SettleOperation: UPDATE payments`,
		`(?m)^SettleOperation: INSERT events`, `SettleOperation: COMMIT$`} {
		if !regexp.MustCompile(want).MatchString(path) {
			t.Fatalf("the capture path's steps lack %s:\n%s", want, path)
		}
	}
	t.Logf("the capture path, %d steps:\n%s", len(steps), path)

	type point struct {
		name   string
		stopAt int  // the worker stops before this step
		acted  bool // or: the PSP captures and its answer never leaves
		// What the crash leaves: the claim committed, the PSP captured.
		claimed, captured bool
	}
	var points []point
	claimed, sent := false, false
	for i, s := range steps {
		points = append(points, point{name: fmt.Sprintf("%02d before %s", i+1, s), stopAt: i + 1, claimed: claimed, captured: sent})
		switch {
		case s == "ClaimOperation: COMMIT":
			claimed = true
		case s == "PSP: POST /v1/captures":
			points = append(points, point{name: fmt.Sprintf("%02d PSP captured, its answer lost", i+1), acted: true, claimed: true, captured: true})
			sent = true
		}
	}
	for _, recovery := range []string{"retry", "reconciler"} {
		for _, pt := range points {
			t.Run(recovery+"/"+pt.name, func(t *testing.T) {
				key := fmt.Sprintf("%s-%d-%t", recovery, pt.stopAt, pt.acted)
				p := c.authorized("auth-" + key)
				var acted <-chan struct{}
				if pt.acted {
					acted = c.hook.loseNextCaptureAnswer()
				}
				w := c.start(p, key, pt.stopAt)
				w.crash(t, acted)
				c.waitGone(w.conns())
				c.leftBehind(t, p, key, pt.claimed, pt.captured)
				c.advance(lease + time.Second)
				if recovery == "retry" {
					c.retry(t, p, key)
				} else {
					c.reconcile(t, p, key)
				}
				c.captured(t, p)
			})
		}
	}
}

// TestCaptureCrashWorker is TestCaptureCrashes' worker process: it runs the
// capture its job describes and stops where it says. Run by itself it does
// nothing (as os/exec's helper processes do), rather than skip: it proves
// nothing alone, and no proof is missing when it is not a worker.
func TestCaptureCrashWorker(t *testing.T) {
	spec := os.Getenv(crashWorkerEnv)
	if spec == "" {
		return
	}
	var job crashJob
	if err := json.Unmarshal([]byte(spec), &job); err != nil {
		t.Fatal(err)
	}
	st := &crashSteps{stopAt: job.StopAt}
	cfg, err := mysql.Config(job.DSN)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sqlx.NewDb(sql.OpenDB(stepConnector{Connector: conn, steps: st}), "mysql")
	defer db.Close()
	adapter, err := fakeclient.New(fakeclient.Config{BaseURL: job.PSPURL, CreationWindow: creationWindow,
		HTTPClient: &http.Client{Transport: stepTransport{steps: st}}})
	if err != nil {
		t.Fatal(err)
	}
	svc := payments.NewService(mysql.NewStore(db), payments.OnePSP(adapter), payments.Config{
		Lease: lease, PSPTimeout: 5 * time.Second, InFlightWait: 10 * time.Second,
	})
	amount := job.Amount
	st.arm()
	out, err := svc.Capture(context.Background(), payments.CaptureRequest{MerchantID: job.MerchantID, PaymentID: job.PaymentID,
		IdempotencyKey: job.Key, AmountToCapture: &amount})
	if err != nil {
		t.Fatalf("capture: %v", err)
	}
	fmt.Printf("%s%d %s\n", lineDone, out.Response.Status, out.Response.Body)
}

// crashSteps counts the worker's steps once armed, says each, and stops
// before step stopAt: it holds every other step behind it and waits, until
// the test kills the process (or goes away itself, closing stdin).
type crashSteps struct {
	mu     sync.Mutex
	armed  bool
	n      int
	stopAt int
}

func (s *crashSteps) arm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.armed = true
}

func (s *crashSteps) step(label string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.armed {
		return
	}
	s.n++
	fmt.Printf("%s%d %s\n", lineStep, s.n, label)
	if s.n == s.stopAt {
		fmt.Printf("%s%d\n", lineStopped, s.n)
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(2) // the test went away without killing the worker
	}
}

// stepConnector is the worker's database: every statement and commit on
// its connections is a step. A new connection says its CONNECTION_ID(),
// so that the test can wait for the server to drop it.
type stepConnector struct {
	driver.Connector
	steps *crashSteps
}

func (c stepConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := conn.(driver.QueryerContext).QueryContext(ctx, `SELECT CONNECTION_ID()`, nil)
	if err != nil {
		return nil, err
	}
	id := make([]driver.Value, 1)
	err = rows.Next(id)
	if cerr := rows.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	if b, ok := id[0].([]byte); ok {
		id[0] = string(b)
	}
	fmt.Printf("%s%v\n", lineConn, id[0])
	return &stepConn{Conn: conn, steps: c.steps}, nil
}

// stepConn passes everything to the driver's connection, each statement
// and commit a step first, and forwards every optional interface the
// MySQL driver's connection has.
type stepConn struct {
	driver.Conn
	steps *crashSteps
}

var (
	_ driver.ExecerContext      = (*stepConn)(nil)
	_ driver.QueryerContext     = (*stepConn)(nil)
	_ driver.ConnPrepareContext = (*stepConn)(nil)
	_ driver.ConnBeginTx        = (*stepConn)(nil)
	_ driver.Pinger             = (*stepConn)(nil)
	_ driver.SessionResetter    = (*stepConn)(nil)
	_ driver.Validator          = (*stepConn)(nil)
	_ driver.NamedValueChecker  = (*stepConn)(nil)
)

func (c *stepConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	c.steps.step(statementLabel(query))
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, query, args)
}

func (c *stepConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.steps.step(statementLabel(query))
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, query, args)
}

func (c *stepConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	c.steps.step(statementLabel(query))
	return c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
}

func (c *stepConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return stepTx{Tx: tx, steps: c.steps}, nil
}

func (c *stepConn) Ping(ctx context.Context) error { return c.Conn.(driver.Pinger).Ping(ctx) }

func (c *stepConn) ResetSession(ctx context.Context) error {
	return c.Conn.(driver.SessionResetter).ResetSession(ctx)
}

func (c *stepConn) IsValid() bool { return c.Conn.(driver.Validator).IsValid() }

func (c *stepConn) CheckNamedValue(nv *driver.NamedValue) error {
	return c.Conn.(driver.NamedValueChecker).CheckNamedValue(nv)
}

type stepTx struct {
	driver.Tx
	steps *crashSteps
}

func (t stepTx) Commit() error {
	t.steps.step(storeMethod() + ": COMMIT")
	return t.Tx.Commit()
}

// stepTransport makes each PSP call a step.
type stepTransport struct{ steps *crashSteps }

func (t stepTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.steps.step("PSP: " + r.Method + " " + r.URL.Path)
	return http.DefaultTransport.RoundTrip(r)
}

var (
	tableAfter = regexp.MustCompile(`(?i)\b(?:FROM|INTO|UPDATE)\s+([a-z_]+)`)
	spaces     = regexp.MustCompile(`\s+`)
)

// statementLabel names a statement by the store method that sent it, its
// verb and its table: "ClaimOperation: SELECT payments FOR UPDATE".
func statementLabel(query string) string {
	q := strings.TrimSpace(spaces.ReplaceAllString(query, " "))
	verb, _, _ := strings.Cut(q, " ")
	label := q
	if m := tableAfter.FindStringSubmatch(q); m != nil {
		label = verb + " " + m[1]
	}
	if strings.HasSuffix(q, " FOR UPDATE") || strings.Contains(q, " FOR UPDATE ") {
		label += " FOR UPDATE"
	}
	return storeMethod() + ": " + label
}

// storeMethod is the outermost method of mysql.Store on the stack, the
// one the flow called, "?" when none is.
func storeMethod() string {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	name := "?"
	for {
		f, more := frames.Next()
		if rest, ok := strings.CutPrefix(f.Function, "gateway/mysql.(*Store)."); ok {
			name, _, _ = strings.Cut(rest, ".")
		}
		if !more {
			return name
		}
	}
}

// crashEnv is a database, the standalone fake PSP behind a hook, the live
// payment service of the test's own process, and a merchant.
type crashEnv struct {
	t     *testing.T
	db    *sqlx.DB
	dsn   string
	store *mysql.Store
	hook  *captureHook
	url   string
	clock *clock
	svc   *payments.Service
	rec   *reconcile.Reconciler
	merch merchants.Merchant
}

func newCrashEnv(t *testing.T) *crashEnv {
	t.Helper()
	srv, err := fakeserver.New(fakeserver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hook := &captureHook{srv: srv}
	ts := httptest.NewServer(hook)
	t.Cleanup(func() { srv.Close(); ts.Close() })
	db := mysqltest.MustOpen(t)
	c := &crashEnv{t: t, db: db, dsn: mysqltest.DSNOf(t, db), store: mysql.NewStore(db), hook: hook, url: ts.URL,
		clock: &clock{now: time.Now().UTC()}}
	adapter, err := fakeclient.New(fakeclient.Config{BaseURL: ts.URL, CreationWindow: creationWindow})
	if err != nil {
		t.Fatal(err)
	}
	c.svc = payments.NewService(c.store, payments.OnePSP(adapter), payments.Config{
		Lease: lease, PSPTimeout: 5 * time.Second, InFlightWait: 10 * time.Second, Now: c.clock.Now,
	})
	c.rec = reconcile.New(c.store, payments.OnePSP(adapter), reconcile.Config{
		Lease: lease, PSPTimeout: 5 * time.Second, MaxAttempts: 3,
		BackoffBase: time.Minute, BackoffMax: 10 * time.Minute, Now: c.clock.Now,
	})
	m, key, err := merchants.NewMerchant("Crash merchant", c.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.store.CreateMerchant(context.Background(), m, key); err != nil {
		t.Fatal(err)
	}
	c.merch = m
	return c
}

// authorized is a manual-capture payment of 1000, authorized at the PSP.
func (c *crashEnv) authorized(key string) payments.Payment {
	c.t.Helper()
	out, err := c.svc.Create(context.Background(), payments.CreateRequest{
		MerchantID: c.merch.ID, IdempotencyKey: key, Amount: payments.Money{Minor: 1000, Currency: "KRW"},
		PaymentMethod: fake.MethodOK, CaptureMethod: payments.CaptureManual,
	})
	if err != nil || out.Response.Status != http.StatusCreated {
		c.t.Fatalf("authorize: %+v %v", out, err)
	}
	p, err := c.store.Payment(context.Background(), c.merch.ID, out.SubjectID)
	if err != nil || p.Status != payments.RequiresCapture {
		c.t.Fatalf("authorization %+v %v", p, err)
	}
	return p
}

// advance lets d pass: on the test's clock and on the database's.
func (c *crashEnv) advance(d time.Duration) {
	c.clock.Advance(d)
	mysqltest.Advance(c.t, c.db, d)
}

// start runs the worker process on a capture of crashCapture of p with key.
func (c *crashEnv) start(p payments.Payment, key string, stopAt int) *worker {
	c.t.Helper()
	job, err := json.Marshal(crashJob{DSN: c.dsn, PSPURL: c.url, MerchantID: c.merch.ID, PaymentID: p.ID, Key: key,
		Amount: crashCapture, StopAt: stopAt})
	if err != nil {
		c.t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCaptureCrashWorker$", "-test.count=1", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), crashWorkerEnv+"="+string(job))
	w := &worker{cmd: cmd, stopped: make(chan struct{}), exited: make(chan struct{})}
	cmd.Stderr = &w.stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	// Its stdin stays open and silent: a stopped worker waits on it.
	if w.stdin, err = cmd.StdinPipe(); err != nil {
		c.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(w.kill)
	go w.read(stdout)
	return w
}

// worker is one worker process and what it said.
type worker struct {
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	stderr  syncBuffer
	stopped chan struct{} // closed when it says it stopped
	exited  chan struct{} // closed once its output is read and it is reaped

	mu    sync.Mutex
	lines []string
}

func (w *worker) read(stdout io.Reader) {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		w.mu.Lock()
		w.lines = append(w.lines, sc.Text())
		w.mu.Unlock()
		if strings.HasPrefix(sc.Text(), lineStopped) {
			close(w.stopped)
		}
	}
	_ = w.cmd.Wait()
	close(w.exited)
}

// crash waits until the worker stops at its step (or, with acted, until
// the PSP captured for it) and kills it.
func (w *worker) crash(t *testing.T, acted <-chan struct{}) {
	t.Helper()
	stopped := w.stopped
	if acted != nil {
		stopped = nil // the worker runs on; the PSP holds its answer
	}
	select {
	case <-stopped:
	case <-acted:
	case <-w.exited:
		t.Fatalf("the worker ended before its crash point:\n%s", w.output())
	case <-time.After(time.Minute):
		t.Fatalf("the worker did not reach its crash point within a minute:\n%s", w.output())
	}
	w.kill()
}

func (w *worker) kill() {
	_ = w.cmd.Process.Kill() // SIGKILL
	<-w.exited
	_ = w.stdin.Close()
}

func (w *worker) wait(t *testing.T) {
	t.Helper()
	select {
	case <-w.exited:
	case <-time.After(time.Minute):
		t.Fatalf("the worker did not finish within a minute:\n%s", w.output())
	}
}

func (w *worker) said(prefix string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, l := range w.lines {
		if rest, ok := strings.CutPrefix(l, prefix); ok {
			out = append(out, rest)
		}
	}
	return out
}

// steps are the labels of the steps it ran, in order.
func (w *worker) steps() []string {
	var out []string
	for _, s := range w.said(lineStep) {
		_, label, _ := strings.Cut(s, " ")
		out = append(out, label)
	}
	return out
}

func (w *worker) conns() []int64 {
	var ids []int64
	for _, s := range w.said(lineConn) {
		if id, err := strconv.ParseInt(s, 10, 64); err == nil {
			ids = append(ids, id)
		}
	}
	return ids
}

func (w *worker) done() bool { return len(w.said(lineDone)) == 1 }

func (w *worker) output() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.lines, "\n") + "\n" + w.stderr.String()
}

// syncBuffer is a strings.Builder safe for the process's writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitGone waits until the server has dropped the killed worker's
// connections, and with them rolled back what they left uncommitted.
func (c *crashEnv) waitGone(ids []int64) {
	c.t.Helper()
	if len(ids) == 0 {
		return
	}
	list := make([]string, len(ids))
	for i, id := range ids {
		list[i] = strconv.FormatInt(id, 10)
	}
	q := `SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID IN (` + strings.Join(list, ",") + `)`
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
	for mysqltest.Count(c.t, c.db, q) > 0 {
		select {
		case <-tick.C:
		case <-deadline:
			c.t.Fatalf("the killed worker's connections %v are still open after 30 s", ids)
		}
	}
}

// leftBehind checks what the killed worker left: its claim, committed or
// rolled back with its connection; the capture at the PSP, or none.
func (c *crashEnv) leftBehind(t *testing.T, p payments.Payment, key string, claimed, captured bool) {
	t.Helper()
	rec, err := c.store.Record(context.Background(), idemkeys.Ref{MerchantID: c.merch.ID, Endpoint: payments.EndpointCapturePayment, Key: key})
	switch {
	case !claimed && !errors.Is(err, idemkeys.ErrNotFound):
		t.Fatalf("the claim did not commit, yet its key is %s (%v)", rec.State, err)
	case claimed && (err != nil || rec.State != idemkeys.InProgress):
		t.Fatalf("the claim committed; its key is %s %d (%v), want %s", rec.State, rec.Response.Status, err, idemkeys.InProgress)
	}
	inFlight := c.reread(p).Operation != nil
	if inFlight != claimed {
		t.Fatalf("the payment's operation in flight: %t, want %t", inFlight, claimed)
	}
	if n := c.ledgerCaptures(p); n != map[bool]int{false: 0, true: 1}[captured] {
		t.Fatalf("%d captures at the PSP after the crash, want captured %t", n, captured)
	}
}

// retry sends the capture again with the crashed worker's key.
func (c *crashEnv) retry(t *testing.T, p payments.Payment, key string) {
	t.Helper()
	amount := int64(crashCapture)
	out, err := c.svc.Capture(context.Background(), payments.CaptureRequest{MerchantID: c.merch.ID, PaymentID: p.ID,
		IdempotencyKey: key, AmountToCapture: &amount})
	if err != nil || out.Response.Status != http.StatusCreated {
		t.Fatalf("the retry: %+v %v", out, err)
	}
	if v := view(t, out.Response.Body); v.Status != payments.Succeeded || v.AmountCaptured == nil || *v.AmountCaptured != crashCapture {
		t.Fatalf("the retry answered %s", out.Response.Body)
	}
}

// reconcile lets the reconciler settle what the crash left, passes a
// creation window apart, until no capture key of p's is unfinished. A
// capture the PSP made is settled by it alone; one it never received is
// proven absent and dropped, the authorization intact, its key answering
// that it did not happen; then a capture with a new key takes it.
func (c *crashEnv) reconcile(t *testing.T, p payments.Payment, key string) {
	t.Helper()
	ref := idemkeys.Ref{MerchantID: c.merch.ID, Endpoint: payments.EndpointCapturePayment, Key: key}
	for pass := 0; ; pass++ {
		rec, err := c.store.Record(context.Background(), ref)
		if err != nil || rec.State != idemkeys.InProgress {
			break
		}
		if pass == 6 {
			t.Fatalf("the capture key is still unfinished after %d passes", pass)
		}
		runOnce(t, c.rec)
		c.advance(creationWindow + time.Second)
	}
	rec, err := c.store.Record(context.Background(), ref)
	got := c.reread(p)
	if c.ledgerCaptures(p) > 0 {
		if err != nil || rec.State != idemkeys.Completed || rec.Response.Status != http.StatusCreated {
			t.Fatalf("the PSP captured; the key is %s %d %s (%v), want %s 201", rec.State, rec.Response.Status, rec.Response.Body, err, idemkeys.Completed)
		}
		if got.Status != payments.Succeeded {
			t.Fatalf("the PSP captured; the reconciler left the payment %s", got.Status)
		}
		return
	}
	if got.Status != payments.RequiresCapture || got.Operation != nil {
		t.Fatalf("nothing captured; the reconciler left the payment %s, operation %+v", got.Status, got.Operation)
	}
	switch {
	case errors.Is(err, idemkeys.ErrNotFound):
		// The claim never committed: nothing of the capture is stored.
	case err != nil:
		t.Fatal(err)
	case rec.State != idemkeys.Completed || rec.Response.Status != http.StatusPaymentRequired:
		t.Fatalf("nothing captured; the key holds %d %s", rec.Response.Status, rec.Response.Body)
	}
	c.retry(t, p, key+"-again")
}

// captured checks the end of every crash: one capture at the PSP, of what
// was asked; the payment succeeded with it, nothing in flight; one event.
func (c *crashEnv) captured(t *testing.T, p payments.Payment) {
	t.Helper()
	var caps []fakeserver.Capture
	for _, x := range c.hook.srv.LedgerSnapshot().Captures {
		if x.MerchantOrderID == p.MerchantOrderID {
			caps = append(caps, x)
		}
	}
	if len(caps) != 1 || caps[0].Amount != crashCapture {
		t.Fatalf("the PSP's captures of the authorization: %+v, want one of %d", caps, crashCapture)
	}
	got := c.reread(p)
	if got.Status != payments.Succeeded || got.AmountCaptured != crashCapture || got.Operation != nil {
		t.Fatalf("payment %s, amount_captured %d, operation %+v", got.Status, got.AmountCaptured, got.Operation)
	}
	if n := mysqltest.Count(t, c.db, `SELECT COUNT(*) FROM events WHERE object_id = ? AND type = ?`, p.ID, payments.EventPaymentPartiallyCaptured); n != 1 {
		t.Fatalf("%d payment.partially_captured events", n)
	}
	if n := mysqltest.Count(t, c.db, `SELECT COUNT(*) FROM idempotency_keys WHERE endpoint = ? AND state <> ?`,
		payments.EndpointCapturePayment, string(idemkeys.Completed)); n != 0 {
		t.Fatalf("%d capture keys left unfinished", n)
	}
}

func (c *crashEnv) reread(p payments.Payment) payments.Payment {
	c.t.Helper()
	got, err := c.store.Payment(context.Background(), c.merch.ID, p.ID)
	if err != nil {
		c.t.Fatal(err)
	}
	return got
}

func (c *crashEnv) ledgerCaptures(p payments.Payment) int {
	n := 0
	for _, x := range c.hook.srv.LedgerSnapshot().Captures {
		if x.MerchantOrderID == p.MerchantOrderID {
			n++
		}
	}
	return n
}

// captureHook stands in front of the fake PSP: armed, it lets the next
// capture be made and holds its answer until the client is gone.
type captureHook struct {
	srv *fakeserver.Server

	mu    sync.Mutex
	acted chan struct{}
}

// loseNextCaptureAnswer arms the hook; the channel closes once the PSP
// made the capture.
func (h *captureHook) loseNextCaptureAnswer() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.acted = make(chan struct{})
	return h.acted
}

func (h *captureHook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && r.URL.Path == "/v1/captures" {
		h.mu.Lock()
		acted := h.acted
		h.acted = nil
		h.mu.Unlock()
		if acted != nil {
			h.srv.ServeHTTP(httptest.NewRecorder(), r) // the capture is made ...
			close(acted)
			<-r.Context().Done() // ... and its answer never leaves: the worker dies first
			return
		}
	}
	h.srv.ServeHTTP(w, r)
}
