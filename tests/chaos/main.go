// Command chaos runs the gateway under faults and counts every charge.
//
//	go run ./tests/chaos [--duration 3m] [--seed N] [--replicas 2] [--clients 64] [--refund-clients 8] [--capture-clients 8] [--json FILE]
//
// It builds the gateway, starts a fresh migrated MariaDB database (a private
// server in a temporary directory, or a new database on GATEWAY_TEST_DSN's
// server, dropped afterwards), the standalone fake PSP with its faults on, a
// fault-injecting TCP proxy in front of the database (one per replica) and
// one in front of the PSP, and N `gateway serve` replicas as child processes
// with the reconciler running on each. Then, for --duration, many clients
// pay, a few refund what was paid (refunds.go), and a few authorize and then
// capture, void or let lapse, or cancel a key whatever it did (captures.go,
// cancelbykey.go), retrying with the same key and body as a correct client
// does, while a plan drawn from --seed resets and delays database
// connections, takes the database and the PSP away for a moment, partitions
// one replica from the database and pauses another, changes the PSP's fault
// rates, and SIGKILLs and restarts replicas.
//
// Afterwards every fault stops, the reconcilers settle what is left, and the
// invariants of design §7, the refunds' and the captures' among them, are
// checked against the PSP's ledger, the database and every answer a client
// received. The counts are printed; the exit status is 1 when any invariant
// was violated (2: bad flags, 3: the run itself failed).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jmoiron/sqlx"

	"gateway/psp/fake/fakeserver"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rep, err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	var u usageError
	switch {
	case errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.As(err, &u):
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(2)
	case err != nil:
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(3)
	case rep.Violations > 0:
		os.Exit(1)
	}
}

type usageError struct{ error }

// options are the command line.
type options struct {
	duration       time.Duration
	seed           uint64
	replicas       int
	clients        int
	refundClients  int
	captureClients int
	merchants      int
	settle         time.Duration
	jsonPath       string
	logDir         string
	gatewayBin     string
	lease          time.Duration
	pspTimeout     time.Duration
	creationWindow time.Duration
	reconcileEvery time.Duration
	// keepDB keeps a failed run's database for a look.
	keepDB bool
	// psps is how many standalone fake PSPs the replicas route between
	// (design §16): 2 gives every merchant a route of two accounts, and
	// the plan takes the second down, browns it out and flaps it.
	psps         int
	authValidity time.Duration // how long the fake PSP's authorizations stay capturable
	partitions   bool
	freezes      bool
	halfOpen     bool
	verbose      bool
	planOnly     bool
	// cluster runs against a private Galera cluster of nodes nodes, with
	// node faults unless nodeFaults is off; syncWait > 0 sets
	// wsrep_sync_wait on the replicas' connections.
	cluster    bool
	nodes      int
	nodeFaults bool
	syncWait   int
	throughput bool
	// gatewayEnv overrides the replicas' GATEWAY_* settings, replicaEnv
	// those of one replica (tests).
	gatewayEnv map[string]string
	replicaEnv map[int]map[string]string
}

func parseOptions(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.DurationVar(&o.duration, "duration", 3*time.Minute, "how long the clients pay under faults (the settle phase and the checks come on top)")
	fs.Uint64Var(&o.seed, "seed", 0, "seed of the fault plan and the clients (0: a random one, printed)")
	fs.IntVar(&o.replicas, "replicas", 2, "gateway replicas (child processes)")
	fs.IntVar(&o.clients, "clients", 64, "concurrent clients")
	fs.IntVar(&o.refundClients, "refund-clients", 8, "concurrent clients refunding the payments that succeeded (0: no refunds)")
	fs.IntVar(&o.captureClients, "capture-clients", 8, "concurrent clients authorizing payments and capturing, voiding or canceling them by key (0: none)")
	fs.DurationVar(&o.authValidity, "authorization-validity", 10*time.Second, "how long the fake PSP's authorizations stay capturable before they lapse (the settle phase waits for the last one)")
	fs.IntVar(&o.merchants, "merchants", 3, "merchants (2 or 3 keep key sharing between merchants frequent)")
	fs.DurationVar(&o.settle, "settle", 60*time.Second, "longest wait, after the faults stop, for the reconcilers to finish every payment")
	fs.StringVar(&o.jsonPath, "json", "", "also write the report as JSON to `FILE`")
	fs.BoolVar(&o.keepDB, "keep-db", false, "keep the run's database when an invariant fails, on a server of GATEWAY_TEST_DSN (a private server is stopped anyway)")
	fs.StringVar(&o.logDir, "log-dir", "", "keep the replicas' logs in `DIR` (default: a temporary directory, kept only when an invariant fails)")
	fs.StringVar(&o.gatewayBin, "gateway-bin", "", "use this gateway binary instead of building cmd/gateway")
	fs.DurationVar(&o.lease, "lease", 3*time.Second, "GATEWAY_LEASE of the replicas")
	fs.DurationVar(&o.pspTimeout, "psp-timeout", time.Second, "GATEWAY_PSP_TIMEOUT of the replicas")
	fs.DurationVar(&o.creationWindow, "creation-window", 5*time.Second, "GATEWAY_PSP_CREATION_WINDOW of the replicas")
	fs.IntVar(&o.psps, "psps", 2, "standalone fake PSPs (1 or 2): with 2, each merchant's route has two accounts and the plan takes the second down, browns it out and flaps it")
	fs.DurationVar(&o.reconcileEvery, "reconcile-every", time.Second, "the replicas' reconciler runs @every this")
	fs.BoolVar(&o.partitions, "partitions", true, "cut one replica off the database for longer than lease + creation window, once a minute")
	fs.BoolVar(&o.freezes, "freezes", true, "pause one replica (SIGSTOP) for longer than lease + creation window, once a minute")
	fs.BoolVar(&o.halfOpen, "half-open", true, "cut the replicas' side of a database connection mid-transaction, leaving the server's side open, every 15-30s, and measure how long its locks are held (not with --cluster)")
	fs.BoolVar(&o.verbose, "v", false, "print the fault plan")
	fs.BoolVar(&o.planOnly, "plan", false, "print the fault plan of --seed and --duration, and exit")
	fs.BoolVar(&o.cluster, "cluster", false, "run against a private MariaDB Galera cluster, the replicas spread over its nodes, adding node kills and partitions")
	fs.IntVar(&o.nodes, "nodes", 3, "--cluster: nodes in the cluster (node faults need at least 3)")
	fs.BoolVar(&o.nodeFaults, "node-faults", true, "--cluster: SIGKILL and restart nodes, and cut nodes off the others, one at a time")
	fs.IntVar(&o.syncWait, "sync-wait", 0, "--cluster: set wsrep_sync_wait to `N` on the replicas' database connections (causal reads on every statement)")
	fs.BoolVar(&o.throughput, "throughput", false, "measure fresh payments per second without faults, on one server and on a 3-node cluster, for --duration each; no chaos")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, err
		}
		return o, usageError{err}
	}
	replicasSet := false
	fs.Visit(func(f *flag.Flag) { replicasSet = replicasSet || f.Name == "replicas" })
	if (o.cluster || o.throughput) && !replicasSet {
		o.replicas = o.nodes // one replica on every node
	}
	if o.nodes < 3 {
		o.nodeFaults = false // one node down of two costs the quorum
	}
	if o.cluster || o.throughput {
		// The watch reads innodb_trx of the server behind the cut session,
		// which on a cluster is one node of several.
		o.halfOpen = false
	}
	switch {
	case fs.NArg() > 0:
		return o, usageError{fmt.Errorf("unexpected arguments %q", fs.Args())}
	case o.duration < 5*time.Second:
		return o, usageError{errors.New("--duration must be at least 5s")}
	case o.cluster && (o.nodes < 1 || o.nodes > 9):
		return o, usageError{errors.New("--nodes must be 1 to 9")}
	case o.replicas < 1 || o.clients < 1 || o.merchants < 1:
		return o, usageError{errors.New("--replicas, --clients and --merchants must be at least 1")}
	case o.psps < 1 || o.psps > 2:
		return o, usageError{errors.New("--psps must be 1 or 2")}
	case o.refundClients < 0 || o.captureClients < 0:
		return o, usageError{errors.New("--refund-clients and --capture-clients must not be negative")}
	case o.authValidity < time.Second:
		return o, usageError{errors.New("--authorization-validity must be at least 1s")}
	case o.lease <= o.pspTimeout:
		return o, usageError{errors.New("--lease must exceed --psp-timeout")}
	case o.reconcileEvery < time.Second || o.reconcileEvery%time.Second != 0:
		return o, usageError{errors.New("--reconcile-every must be whole seconds (a cron @every)")}
	}
	if o.seed == 0 {
		o.seed = rand.Uint64()%1_000_000 + 1
	}
	return o, nil
}

// report is what a run prints (and writes with --json).
type report struct {
	// Outage is invariant 28's figure (--psps 2).
	Outage    *outageIntents `json:"outage,omitempty"`
	Seed      uint64         `json:"seed"`
	Duration  string         `json:"duration"`
	Replicas  int            `json:"replicas"`
	Clients   int            `json:"clients"`
	Merchants int            `json:"merchants"`
	Plan      []string       `json:"plan"`

	Requests  int64            `json:"requests"`
	Retries   int64            `json:"retries"`
	NetErrors int64            `json:"network_errors"`
	Answers   map[string]int64 `json:"answers_by_status"`
	// NoRetryAfter counts 429, 502, 503 and 504 answers and 409
	// request-in-flight ones without the Retry-After header the HTTP
	// contract promises.
	NoRetryAfter int64            `json:"answers_without_retry_after"`
	Clientele    map[string]int64 `json:"client_jobs"`

	Faults   map[string]map[string]int64 `json:"faults"`
	PSPStats fakeserver.Stats            `json:"psp_stats"`

	Charges        map[string]int `json:"charges"`
	Payments       map[string]int `json:"payments_by_status"`
	Keys           int            `json:"idempotency_keys"`
	RequiresReview int            `json:"requires_review"`

	Refunds  *refundReport   `json:"refunds,omitempty"`
	Captures *captureReport  `json:"captures,omitempty"`
	Cluster  *clusterReport  `json:"cluster,omitempty"`
	HalfOpen *halfOpenReport `json:"half_open,omitempty"`

	Settled    bool         `json:"settled"`
	SettleTime string       `json:"settle_time"`
	Invariants []*invariant `json:"invariants"`
	// Books is what invariants 29 and 30 did (absent when the run did not settle).
	Books      *booksFigures `json:"books,omitempty"`
	Violations int           `json:"violations"`
	WallTime   string        `json:"wall_time"`
	LogDir     string        `json:"log_dir,omitempty"`
}

// run is the whole program; tests call it.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) (*report, error) {
	began := time.Now()
	opts, err := parseOptions(args, stderr)
	if err != nil {
		return nil, err
	}
	return runOptions(ctx, opts, getenv, stdout, stderr, began)
}

func runOptions(ctx context.Context, opts options, getenv func(string) string, stdout, stderr io.Writer, began time.Time) (_ *report, err error) {
	if opts.throughput {
		return &report{Seed: opts.seed}, measureThroughput(ctx, opts, stdout, stderr, began)
	}
	if opts.planOnly {
		fmt.Fprintf(stdout, "fault plan of seed %d over %s:\n", opts.seed, opts.duration)
		for _, ev := range makePlan(opts) {
			fmt.Fprintln(stdout, ev)
		}
		return &report{Seed: opts.seed}, nil
	}
	say := func(format string, args ...any) {
		fmt.Fprintf(stderr, "chaos %6.1fs  %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, args...))
	}
	say("seed %d: %s of faults, %d replicas, %d clients, %d merchants (lease %s, PSP timeout %s, creation window %s, reconciler @every %s)",
		opts.seed, opts.duration, opts.replicas, opts.clients, opts.merchants, opts.lease, opts.pspTimeout, opts.creationWindow, opts.reconcileEvery)
	e, err := setup(ctx, opts, getenv, say)
	if err != nil {
		return nil, err
	}
	rep := &report{Seed: opts.seed, Duration: opts.duration.String(), Replicas: opts.replicas, Clients: opts.clients, Merchants: opts.merchants}
	defer func() { e.teardown(err != nil || rep.Violations > 0) }()
	if e.cc != nil {
		monCtx, stopMon := context.WithCancel(ctx)
		defer stopMon()
		go e.cc.mon.run(monCtx)
	}

	plan := makePlan(opts)
	for _, ev := range plan {
		rep.Plan = append(rep.Plan, ev.String())
		if opts.verbose {
			say("plan %s", ev)
		}
	}
	var urls []string
	for _, r := range e.replicas {
		urls = append(urls, r.url())
	}
	w := newWorkload(opts, e.merchants, urls)
	rl := newRefundLoad(w, opts.refundClients)
	cl := newCaptureLoad(w, opts.captureClients)
	rl.captured = cl.pickCaptured
	x := newInjector(ctx, e, plan)

	say("chaos for %s", opts.duration)
	chaosCtx, cancel := context.WithTimeout(ctx, opts.duration)
	defer cancel()
	start := time.Now()
	injected := make(chan struct{})
	go func() { x.run(chaosCtx, start); close(injected) }()
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-chaosCtx.Done():
				return
			case <-t.C:
				say("%s: %d requests, %d retries, %d network errors, %d kills",
					time.Since(start).Round(time.Second), w.requests.Load(), w.retries.Load(), w.netErrors.Load(), x.kills.Load())
			}
		}
	}()
	refunded := make(chan struct{})
	go func() { rl.run(chaosCtx); close(refunded) }()
	captured := make(chan struct{})
	go func() { cl.run(chaosCtx); close(captured) }()
	consumers := newEventConsumers(urls, e.merchants)
	var consuming sync.WaitGroup
	for i, ec := range consumers {
		consuming.Go(func() { ec.run(chaosCtx, rand.New(rand.NewPCG(opts.seed, uint64(i)))) })
	}
	w.run(chaosCtx)
	<-refunded
	<-captured
	consuming.Wait()
	<-injected
	<-progressDone
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}

	// Faults off. The clients are gone, but their last requests may still
	// run inside the replicas (a create finishes without its client): stop
	// every replica gracefully, which drains them, and start it again, so
	// that nothing but the reconcilers writes from here on.
	x.calm()
	if e.cc != nil {
		say("faults off; bringing every node back into one synced cluster")
		rctx, rcancel := context.WithTimeout(ctx, 3*time.Minute)
		err := e.cc.restore(rctx)
		rcancel()
		if err != nil {
			return nil, fmt.Errorf("the cluster did not come back whole: %w", err)
		}
	}
	say("faults off after %d requests; draining and restarting every replica", w.requests.Load())
	drained := make(chan struct{}, len(e.replicas))
	for _, r := range e.replicas {
		go func() { r.stop(15 * time.Second); drained <- struct{}{} }()
	}
	for range e.replicas {
		<-drained
	}
	upCtx, upCancel := context.WithTimeout(ctx, 60*time.Second)
	for _, r := range e.replicas {
		if err := r.ensureUp(upCtx); err != nil {
			upCancel()
			return nil, err
		}
	}
	upCancel()
	settleStart := time.Now()
	settled, inProgress, processing, err := waitSettled(ctx, e.db, opts.settle)
	if err != nil {
		return nil, err
	}
	rep.Settled, rep.SettleTime = settled, time.Since(settleStart).Round(10*time.Millisecond).String()
	refundsSettled, refundsInProgress, refundsPending, err := waitRefundsSettled(ctx, e.db, max(opts.settle-time.Since(settleStart), 5*time.Second))
	if err != nil {
		return nil, err
	}
	// Authorizations nobody captured end at their capture_before.
	capturesSettled, capturesLeft, err := waitCapturesSettled(ctx, e.db, max(opts.settle-time.Since(settleStart), opts.authValidity+5*time.Second))
	if err != nil {
		return nil, err
	}
	rep.SettleTime = time.Since(settleStart).Round(10 * time.Millisecond).String()
	say("settled=%v after %s (%d keys IN_PROGRESS, %d payments processing, %d refunds pending, %s); checking the invariants",
		settled && refundsSettled && capturesSettled, rep.SettleTime, inProgress, processing, refundsPending, capturesLeft)

	pspStats, err := fetchStats(ctx, e.pspURL)
	if err != nil {
		return nil, err
	}
	c := &checker{e: e, w: w, http: &http.Client{Timeout: 15 * time.Second}}
	invs, err := c.check(ctx, settled, inProgress, processing)
	if err != nil {
		return nil, err
	}
	hooksInv, err := e.checkWebhooks(ctx)
	if err != nil {
		return nil, err
	}
	invs = append(invs, hooksInv)
	consumersInv, err := c.checkConsumers(ctx, consumers)
	if err != nil {
		return nil, err
	}
	invs = append(invs, consumersInv)
	refundInvs, refundEv, err := rl.check(ctx, c, refundsSettled, refundsInProgress, refundsPending)
	if err != nil {
		return nil, err
	}
	invs = append(invs, refundInvs...)
	captureInvs, captureEv, err := cl.check(ctx, c, capturesSettled, capturesLeft)
	if err != nil {
		return nil, err
	}
	invs = append(invs, captureInvs...)
	if settled && refundsSettled && capturesSettled {
		booksInvs, fig, err := c.checkBooks(ctx, began, opts.seed)
		if err != nil {
			return nil, err
		}
		invs = append(invs, booksInvs...)
		rep.Books = &fig
		say("books: %d ledger lines, %d matched; %d rows deleted, %d recorded by the books", fig.Lines, fig.Matched, len(fig.Deleted), len(fig.Recorded))
	} else {
		for _, inv := range booksInvariants() {
			inv.Notes = append(inv.Notes, "not checked: the run did not settle (invariant 3 says what was left)")
			invs = append(invs, inv)
		}
	}
	if e.psp2 != nil {
		x.mu.Lock()
		outages, aDowns := append([]window(nil), x.outages...), append([]window(nil), x.pspADowns...)
		x.mu.Unlock()
		outInv, fig, err := c.checkOutages(ctx, outages, aDowns)
		if err != nil {
			return nil, err
		}
		invs = append(invs, c.checkFailovers(), outInv)
		rep.Outage = &fig
		say("fake_b outages: %d intents routed to it, %d (%.2f %%) charged, %d of them at fake_a", fig.Intents, fig.Succeeded, fig.Percent, fig.ThroughOther)
	}
	if opts.halfOpen {
		rep.HalfOpen = x.halfOpenReport(e)
		invs = append(invs, checkHalfOpen(rep.HalfOpen))
	}
	rep.Invariants = invs
	for _, inv := range invs {
		rep.Violations += inv.Violations
	}
	rep.fill(w, x, e, c, pspStats)
	rep.Refunds = rl.report(refundEv, pspStats)
	rep.Captures = cl.report(captureEv)
	if e.cc != nil {
		rep.Cluster = e.clusterFigures(w, len(c.payments))
	}
	rep.WallTime = time.Since(began).Round(100 * time.Millisecond).String()
	if rep.Violations > 0 {
		rep.LogDir = e.logDir
	}
	rep.print(stdout)
	if opts.jsonPath != "" {
		b, _ := json.MarshalIndent(rep, "", "  ")
		if err := os.WriteFile(opts.jsonPath, append(b, '\n'), 0o644); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// waitSettled polls until no key is IN_PROGRESS and no payment processing.
func waitSettled(ctx context.Context, dbx *sqlx.DB, limit time.Duration) (ok bool, inProgress, processing int, err error) {
	deadline := time.Now().Add(limit)
	for {
		err := dbx.QueryRowxContext(ctx, `SELECT
    (SELECT COUNT(*) FROM idempotency_keys WHERE state = 'IN_PROGRESS'),
    (SELECT COUNT(*) FROM payments WHERE status = 'processing')`).Scan(&inProgress, &processing)
		if err != nil {
			return false, 0, 0, fmt.Errorf("count unfinished payments: %w", err)
		}
		if inProgress == 0 && processing == 0 {
			return true, 0, 0, nil
		}
		if time.Now().After(deadline) {
			return false, inProgress, processing, nil
		}
		if !sleepCtx(ctx, 250*time.Millisecond) {
			return false, inProgress, processing, ctx.Err()
		}
	}
}

func fetchStats(ctx context.Context, pspURL string) (fakeserver.Stats, error) {
	var st fakeserver.Stats
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, pspURL+"/admin/stats", nil)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, fmt.Errorf("GET /admin/stats: %w", err)
	}
	defer res.Body.Close()
	if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("GET /admin/stats: %w", err)
	}
	return st, nil
}

func (rep *report) fill(w *workload, x *injector, e *env, c *checker, st fakeserver.Stats) {
	rep.Requests, rep.Retries, rep.NetErrors = w.requests.Load(), w.retries.Load(), w.netErrors.Load()
	rep.Answers = map[string]int64{}
	for code := range w.byStatus {
		if n := w.byStatus[code].Load(); n > 0 {
			rep.Answers[strconv.Itoa(code)] = n
		}
	}
	if rep.NetErrors > 0 {
		rep.Answers["network error"] = rep.NetErrors
	}
	rep.NoRetryAfter = w.noRetryAfter.Load()
	var answered, canceled, crashed, gaveUp, abandoned, unanswered int64
	for _, r := range w.order {
		switch {
		case len(r.Answers) > 0:
			answered++
		case len(r.Canceled) > 0:
			canceled++
		case r.Crashed:
			crashed++
		case r.GaveUp:
			gaveUp++
		case r.Abandoned:
			abandoned++
		default:
			unanswered++
		}
	}
	rep.Clientele = map[string]int64{
		"jobs": w.jobs.Load(), "keys": int64(len(w.order)), "keys answered": answered, "keys canceled by key before their request": canceled,
		"keys crashed (client gave up on purpose)": crashed, "keys out of attempts": gaveUp,
		"keys cut by the end of the run": abandoned, "keys otherwise unanswered": unanswered,
		"bursts": w.bursts.Load(), "keys shared by merchants": w.shared.Load(),
		"conflicting bodies": w.conflicts.Load(), "of them mid-flight": w.midflight.Load(),
		"refused requests (400/401)": int64(len(w.bad)),
	}
	rep.Faults = map[string]map[string]int64{
		"db proxies": {},
		"psp proxy":  e.pspProxy.stats.snapshot(),
		"psp":        {},
		"replicas": {"kills": x.kills.Load(), "graceful stops": x.terms.Load(), "kills skipped": x.killsSkipped.Load(), "restarts": x.restarts.Load(),
			"freezes": x.freezes.Load(), "partitions": x.partitions.Load()},
		"outages": {"db down": x.dbDowns.Load(), "db stalled": x.dbStalls.Load(), "psp down": x.pspDowns.Load(),
			"psp2 outage": x.psp2Outages.Load(), "psp2 brownout": x.psp2Brownouts.Load(), "psp2 flap": x.psp2Flaps.Load()},
	}
	for _, p := range e.dbProxies {
		for k, v := range p.stats.snapshot() {
			rep.Faults["db proxies"][k] += v
		}
	}
	for _, r := range e.replicas {
		rep.Faults["replicas"]["failed starts"] += int64(r.exits)
	}
	for k, v := range st.Injected {
		rep.Faults["psp"][k] = int64(v)
	}
	rep.PSPStats = st
	rep.Charges = map[string]int{"total": len(c.ledger.Charges)}
	for _, ch := range c.ledger.Charges {
		rep.Charges[ch.Status]++
	}
	rep.Payments = map[string]int{}
	for _, p := range c.payments {
		rep.Payments[p.Status]++
	}
	rep.Keys = len(c.keys)
	rep.RequiresReview = rep.Payments["requires_review"]
}

func (rep *report) print(out io.Writer) {
	tw := tabwriter.NewWriter(out, 2, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "\nChaos run: seed %d, %s, %d replicas, %d clients, %d merchants; wall time %s\n\n",
		rep.Seed, rep.Duration, rep.Replicas, rep.Clients, rep.Merchants, rep.WallTime)
	fmt.Fprintf(tw, "requests\t%d\n", rep.Requests)
	fmt.Fprintf(tw, "retries\t%d\n", rep.Retries)
	fmt.Fprintf(tw, "answers\t%s\n", kv(rep.Answers))
	fmt.Fprintf(tw, "retryable answers without Retry-After\t%d\n", rep.NoRetryAfter)
	fmt.Fprintf(tw, "clients\t%s\n", kv(rep.Clientele))
	for _, name := range sortedKeys(rep.Faults) {
		fmt.Fprintf(tw, "faults: %s\t%s\n", name, kv(rep.Faults[name]))
	}
	fmt.Fprintf(tw, "psp calls\tcharge %d, lookup %d, refund %d, capture %d, void %d\n", rep.PSPStats.ChargeCalls, rep.PSPStats.LookupCalls,
		rep.PSPStats.RefundCalls, rep.PSPStats.CaptureCalls, rep.PSPStats.VoidCalls)
	fmt.Fprintf(tw, "charges (ledger)\t%s\n", kv(rep.Charges))
	fmt.Fprintf(tw, "payments\t%s\n", kv(rep.Payments))
	fmt.Fprintf(tw, "idempotency keys\t%d\n", rep.Keys)
	fmt.Fprintf(tw, "requires_review\t%d (allowed; a person decides)\n", rep.RequiresReview)
	fmt.Fprintf(tw, "settled\t%v after %s\n", rep.Settled, rep.SettleTime)
	line := func(label, format string, args ...any) {
		fmt.Fprintf(tw, "%s\t%s\n", label, fmt.Sprintf(format, args...))
	}
	if rep.Refunds != nil {
		rep.Refunds.print(line)
	}
	if rep.Captures != nil {
		rep.Captures.print(line)
	}
	if rep.HalfOpen != nil {
		rep.HalfOpen.print(line)
	}
	if rep.Cluster != nil {
		rep.Cluster.print(line)
	}
	_ = tw.Flush()
	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "INVARIANT (design §7)\tCHECKED\tVIOLATIONS")
	for _, inv := range rep.Invariants {
		fmt.Fprintf(tw, "%d. %s\t%d\t%d\n", inv.ID, inv.Name, inv.Checked, inv.Violations)
	}
	_ = tw.Flush()
	for _, inv := range rep.Invariants {
		for _, n := range inv.Notes {
			fmt.Fprintf(out, "  note %d: %s\n", inv.ID, n)
		}
		for _, ex := range inv.Examples {
			fmt.Fprintf(out, "  VIOLATION %d: %s\n", inv.ID, ex)
		}
	}
	if rep.Violations > 0 {
		fmt.Fprintf(out, "\nFAIL: %d violation(s); replica logs in %s; rerun with --seed %d\n", rep.Violations, rep.LogDir, rep.Seed)
	} else {
		fmt.Fprintln(out, "\nOK: no invariant violated")
	}
	failed := 0
	for _, inv := range rep.Invariants {
		if inv.Violations > 0 {
			failed++
		}
	}
	fmt.Fprintf(out, "invariants: %d passed, %d failed\n", len(rep.Invariants)-failed, failed)
}

func kv[V int | int64](m map[string]V) string {
	var parts []string
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
