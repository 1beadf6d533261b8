package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"

	"gateway/metrics"
	"gateway/mysql"
	"gateway/payments"
	"gateway/psp"
	"gateway/psp/fake"
	"gateway/reconcile"
	"gateway/reconcile/reconciletest"
	"gateway/versions"
)

// Scenario parameters from the issue.
const (
	freshClients   = 64
	replayClients  = 64
	slowClients    = 512
	slowPSP        = 100 * time.Millisecond
	hammerClients  = 64
	lookupLatency  = 20 * time.Millisecond
	reconcileConc  = 16 // GATEWAY_RECONCILE_CONCURRENCY's default
	reconcileBatch = 100
)

func (b *bench) runAll(ctx context.Context) (*report, error) {
	rep := newReport(b)
	hc := httpClient()
	b.hc = hc
	defer hc.CloseIdleConnections()
	for _, sc := range b.opts.scenarios {
		var err error
		switch sc {
		case scFresh:
			err = b.scenarioFresh(ctx, hc, rep)
		case scReplay:
			err = b.scenarioReplay(ctx, hc, rep)
		case scSlowPSP:
			err = b.scenarioSlowPSP(ctx, hc, rep)
		case scHammer:
			err = b.scenarioHammer(ctx, hc, rep)
		case scReconcile:
			err = b.scenarioReconcile(ctx, rep)
		case scWebhooks:
			err = b.scenarioWebhooks(ctx, hc, rep)
		case scRefund:
			err = b.scenarioRefund(ctx, hc, rep)
		case scCapture:
			err = b.scenarioCapture(ctx, hc, rep)
		case scRoutes:
			err = b.scenarioRoutes(ctx, hc, rep)
		case scBooks:
			err = b.scenarioBooks(ctx, hc, rep)
		}
		if err != nil {
			rep.PeakRSSBytes = b.rss.overall()
			return rep, err
		}
	}
	if b.opts.charts != "" {
		if err := b.runSweep(ctx, hc, rep); err != nil {
			rep.PeakRSSBytes = b.rss.overall()
			return rep, err
		}
	}
	if b.opts.large {
		if err := b.runLarge(ctx, hc, rep); err != nil {
			rep.PeakRSSBytes = b.rss.overall()
			return rep, err
		}
	}
	rep.PeakRSSBytes = b.rss.overall()
	return rep, nil
}

// key names a fresh idempotency key, unique to this run, phase and client.
func (b *bench) key(phase string, c *client) string {
	return fmt.Sprintf("%s-%s-c%03d-%07d", phase, b.nonce, c.id, c.seq)
}

func labels(role, scenario string) []string { return []string{"role", role, "scenario", scenario} }

func (b *bench) freshGroup(hc *http.Client, name, phase string, clients int) group {
	return group{name: name, clients: clients, op: func(ctx context.Context, c *client) error {
		key := b.key(phase, c)
		a, err := b.gw.createPayment(ctx, hc, key, paymentBody(key))
		if err != nil {
			return err
		}
		return wantFresh(a)
	}}
}

func (b *bench) floorFreshGroup(phase string, clients int, pspWait time.Duration) group {
	return group{name: "floor", clients: clients, op: func(ctx context.Context, c *client) error {
		return b.floorFresh(ctx, b.key(phase, c), pspWait)
	}}
}

// gatewayPhase runs groups against the gateway, tagging its goroutines and
// measuring the process's peak RSS during the phase.
func (b *bench) gatewayPhase(ctx context.Context, title, scenario string, groups ...group) ([]stats, int64, error) {
	return b.gatewayPhaseAfter(ctx, title, scenario, nil, groups...)
}

// gatewayPhaseAfter is gatewayPhase with prepare run first, once the PSP's
// ledger is emptied (what it creates stays in the ledger for the phase).
func (b *bench) gatewayPhaseAfter(ctx context.Context, title, scenario string, prepare func() error, groups ...group) ([]stats, int64, error) {
	return b.gatewayPhaseIn(ctx, title, scenario, prepare, b.fixedWindow(), groups...)
}

// gatewayPhaseIn is gatewayPhaseAfter with the measured window w.
func (b *bench) gatewayPhaseIn(ctx context.Context, title, scenario string, prepare func() error, w window, groups ...group) ([]stats, int64, error) {
	b.gw.scenario.Store(&scenario)
	// Connections of earlier phases go: each phase dials its own (in its
	// warm-up), so that profile labels name the phase that uses them.
	b.hc.CloseIdleConnections()
	b.gw.fake.Reset()
	b.gw.fake.SetLatency(b.gw.pspLatency)
	if prepare != nil {
		if err := prepare(); err != nil {
			return nil, 0, err
		}
	}
	b.rss.reset()
	st, err := b.runPhaseIn(ctx, title, labels("client", scenario), w, groups...)
	return st, b.rss.peak(), err
}

// roundTitle names round r (from 0) of a phase when there are several.
func (b *bench) roundTitle(title string, r int) string {
	if b.opts.rounds == 1 {
		return title
	}
	return fmt.Sprintf("%s (round %d/%d)", title, r+1, b.opts.rounds)
}

// pairs runs a floor phase and a gateway phase, alternately, for every
// round, so that both see the same drift in whatever else the machine does,
// and merges the rounds.
func (b *bench) pairs(ctx context.Context, title, scenario string, floor, gateway func(r int) group) (fl, gw stats, rss int64, err error) {
	var fls, gws []stats
	for r := range b.opts.rounds {
		f, err := b.runPhase(ctx, b.roundTitle(title+" · floor", r), labels("floor", scenario), floor(r))
		if err != nil {
			return fl, gw, 0, err
		}
		g, peak, err := b.gatewayPhase(ctx, b.roundTitle(title+" · gateway", r), scenario, gateway(r))
		if err != nil {
			return fl, gw, 0, err
		}
		fls, gws, rss = append(fls, f[0]), append(gws, g[0]), max(rss, peak)
	}
	return mergeStats(fls), mergeStats(gws), rss, nil
}

func (b *bench) scenarioFresh(ctx context.Context, hc *http.Client, rep *report) error {
	fl, gw, rss, err := b.pairs(ctx, "1 fresh", "fresh",
		func(r int) group { return b.floorFreshGroup(fmt.Sprintf("f1r%d", r), freshClients, 0) },
		func(r int) group { return b.freshGroup(hc, "gateway", fmt.Sprintf("g1r%d", r), freshClients) })
	if err != nil {
		return err
	}
	rep.add(row{Scenario: scFresh, Name: "fresh payments, 64 clients, PSP 0 ms", Unit: "req/s",
		Gateway: gw, Floor: &fl, FloorLabel: "raw SQL", Reference: fl.Throughput,
		Goal: 0.80, GoalText: ">= 0.80 x floor", PeakRSSBytes: rss})
	return b.minimalRow(ctx, rep, scFresh, "f1m", freshClients, 0, gw)
}

// minimalRow measures the minimal durable work (two commits of the
// smallest row) with the scenario's clients and PSP time, and reports the
// gateway's throughput gw against it.
func (b *bench) minimalRow(ctx context.Context, rep *report, sc int, phase string, clients int, pspWait time.Duration, gw stats) error {
	var ms []stats
	for r := range b.opts.rounds {
		p := fmt.Sprintf("%sr%d", phase, r)
		m, err := b.runPhase(ctx, b.roundTitle(fmt.Sprintf("%d · minimal durable work", sc), r), labels("floor", "minimal"),
			group{name: "minimal", clients: clients, op: func(ctx context.Context, c *client) error {
				return b.floorMinimal(ctx, b.key(p, c), pspWait)
			}})
		if err != nil {
			return err
		}
		ms = append(ms, m[0])
	}
	m := mergeStats(ms)
	rep.add(row{Scenario: sc, Name: "  same gateway run vs minimal durable work (2 commits, smallest row)", Unit: "req/s",
		Gateway: gw, Floor: &m, FloorLabel: "minimal", Reference: m.Throughput, GoalText: "(info)", NoLatency: true})
	return nil
}

func (b *bench) scenarioReplay(ctx context.Context, hc *http.Client, rep *report) error {
	keys, err := b.seedCompleted(ctx, hc, b.opts.replayKeys)
	if err != nil {
		return err
	}
	pick := func(c *client) string { return keys[c.rng.IntN(len(keys))] }
	fl, gw, rss, err := b.pairs(ctx, "2 replay", "replay",
		func(int) group {
			return group{name: "floor", clients: replayClients,
				op: func(ctx context.Context, c *client) error { return b.floorReplay(ctx, pick(c)) }}
		},
		func(int) group { return group{name: "gateway", clients: replayClients, op: b.replayOp(hc, pick, "")} })
	if err != nil {
		return err
	}
	rep.add(row{Scenario: scReplay, Name: fmt.Sprintf("replays of %d completed keys, 64 clients", len(keys)), Unit: "req/s",
		Gateway: gw, Floor: &fl, FloorLabel: "raw SQL", Reference: fl.Throughput,
		Goal: 0.70, GoalText: ">= 0.70 x floor", PeakRSSBytes: rss})
	// What HTTP alone costs on this machine: the same server and clients
	// answering GET /healthz, which touches no database. A replay cannot be
	// faster than this, so it says how much of the goal is reachable at all.
	var hzs []stats
	for r := range b.opts.rounds {
		hz, _, err := b.gatewayPhase(ctx, b.roundTitle("2 replay · HTTP alone", r), "http-alone", group{name: "healthz", clients: replayClients,
			op: func(ctx context.Context, c *client) error { return b.gw.healthz(ctx, hc) }})
		if err != nil {
			return err
		}
		hzs = append(hzs, hz[0])
	}
	hz := mergeStats(hzs)
	rep.add(row{Scenario: scReplay, Name: "HTTP alone: GET /healthz, 64 clients (info)", Unit: "req/s",
		Gateway: hz, FloorLabel: "replay floor", Reference: fl.Throughput, GoalText: "(ceiling)"})
	rep.add(row{Scenario: scReplay, Name: "  replays vs HTTP alone (same run)", Unit: "req/s",
		Gateway: gw, Floor: &hz, FloorLabel: "GET /healthz", Reference: hz.Throughput,
		Goal: 0.75, GoalText: ">= 0.75 x HTTP alone", NoLatency: true})
	return b.versionedReplays(ctx, hc, rep, pick)
}

// replayOp replays the payment of the key pick chooses, naming version
// (Gateway-Version) unless it is empty, and wants a replay.
func (b *bench) replayOp(hc *http.Client, pick func(*client) string, version string) func(context.Context, *client) error {
	return func(ctx context.Context, c *client) error {
		key := pick(c)
		var a answer
		var err error
		if version == "" {
			a, err = b.gw.createPayment(ctx, hc, key, paymentBody(key))
		} else {
			a, err = b.gw.createPaymentIn(ctx, hc, version, key, paymentBody(key))
		}
		if err != nil {
			return err
		}
		return wantReplay(a)
	}
}

// versionedReplays measures what naming an API version costs a replay:
// the same replays naming the latest version (Gateway-Version) and naming
// none, in alternating rounds of the same run.
func (b *bench) versionedReplays(ctx context.Context, hc *http.Client, rep *report, pick func(*client) string) error {
	var plain, named []stats
	for r := range b.opts.rounds {
		p, _, err := b.gatewayPhase(ctx, b.roundTitle("2 replay · naming no version", r), "replay", group{name: "gateway", clients: replayClients,
			op: b.replayOp(hc, pick, "")})
		if err != nil {
			return err
		}
		v, _, err := b.gatewayPhase(ctx, b.roundTitle("2 replay · naming Gateway-Version", r), "replay-version", group{name: "gateway", clients: replayClients,
			op: b.replayOp(hc, pick, string(versions.Latest))})
		if err != nil {
			return err
		}
		plain, named = append(plain, p[0]), append(named, v[0])
	}
	p, v := mergeStats(plain), mergeStats(named)
	rep.add(row{Scenario: scReplay, Name: "  replays naming Gateway-Version vs naming none (same run)", Unit: "req/s",
		Gateway: v, Floor: &p, FloorLabel: "no header", Reference: p.Throughput,
		Goal: 0.97, GoalText: ">= 0.97 x no header", NoLatency: true})
	return nil
}

// seedCompleted makes n payments through the API and returns their keys,
// for the replay scenario (and its floor) to read back.
func (b *bench) seedCompleted(ctx context.Context, hc *http.Client, n int) ([]string, error) {
	b.prog.line("seeding %d completed keys through the API", n)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("r-%s-%06d", b.nonce, i)
	}
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range min(replayClients, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n && ctx.Err() == nil; i = int(next.Add(1)) - 1 {
				a, err := b.gw.createPayment(ctx, hc, keys[i], paymentBody(keys[i]))
				if err == nil {
					err = wantFresh(a)
				}
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		return nil, fmt.Errorf("seed completed keys: %w", errs[0])
	}
	return keys, ctx.Err()
}

func (b *bench) scenarioSlowPSP(ctx context.Context, hc *http.Client, rep *report) error {
	b.gw.pspLatency = slowPSP
	fl, gw, rss, err := b.pairs(ctx, "3 fresh, PSP 100 ms", "psp-latency",
		func(r int) group { return b.floorFreshGroup(fmt.Sprintf("f3r%d", r), slowClients, slowPSP) },
		func(r int) group { return b.freshGroup(hc, "gateway", fmt.Sprintf("g3r%d", r), slowClients) })
	b.gw.pspLatency = 0
	if err != nil {
		return err
	}
	bound := float64(slowClients) / slowPSP.Seconds()
	rep.add(row{Scenario: scSlowPSP, Name: "fresh payments, PSP 100 ms, 512 clients, pool 32", Unit: "req/s",
		Gateway: gw, Floor: &fl, FloorLabel: "raw SQL + 100 ms", Reference: min(fl.Throughput, bound),
		Goal: 0.80, GoalText: fmt.Sprintf(">= 0.80 x min(floor, %.0f/s)", bound), PeakRSSBytes: rss, PSPLatencyMS: slowPSP.Seconds() * 1000,
		Note: fmt.Sprintf("latency bound 512/0.1 s = %.0f req/s", bound)})
	return nil
}

// hammerCheck is what the hammer scenario verified about one hammered key.
type hammerCheck struct {
	Key              string `json:"key"`
	MerchantOrderID  string `json:"merchant_order_id"`
	GatewayCharges   int64  `json:"gateway_charge_calls"`
	LedgerCharges    int    `json:"fake_ledger_charges"`
	DBPayments       int    `json:"db_payments"`
	DBPaymentStatus  string `json:"db_payment_status"`
	DBKeyState       string `json:"db_key_state"`
	FirstAnswers     int64  `json:"first_answers"`
	Replays          int64  `json:"replays"`
	InFlight         int64  `json:"in_flight_409"`
	DifferentReplays int64  `json:"replays_differing_from_first_answer"`
	OK               bool   `json:"ok"`
}

// scenarioHammer measures, in each round, the 64 fresh-paying clients alone
// and then beside 64 clients hammering one key, so that the two numbers it
// compares see the same machine.
func (b *bench) scenarioHammer(ctx context.Context, hc *http.Client, rep *report) error {
	var base, fresh, hammering []stats
	var rss int64
	allOK := true
	for r := range b.opts.rounds {
		u, _, err := b.gatewayPhase(ctx, b.roundTitle("4 hammer · unhammered", r), "hammer-baseline",
			b.freshGroup(hc, "gateway", fmt.Sprintf("g4br%d", r), freshClients))
		if err != nil {
			return err
		}
		f, h, peak, chk, err := b.hammerRound(ctx, hc, r)
		if err != nil {
			return err
		}
		base, fresh, hammering, rss = append(base, u[0]), append(fresh, f), append(hammering, h), max(rss, peak)
		rep.Hammer = append(rep.Hammer, chk)
		if !chk.OK {
			allOK = false
			rep.Violations = append(rep.Violations, fmt.Sprintf("hammered key %s: %d Charge call(s) from the gateway, %d charge(s) in the fake ledger, %d payment row(s) (%s), key %s, %d first answer(s), %d replay(s) differing from the first answer",
				chk.Key, chk.GatewayCharges, chk.LedgerCharges, chk.DBPayments, chk.DBPaymentStatus, chk.DBKeyState, chk.FirstAnswers, chk.DifferentReplays))
		}
	}
	unhammered := mergeStats(base)
	rep.add(row{Scenario: scHammer, Name: "hammer: 64 clients paying fresh beside it", Unit: "req/s",
		Gateway: mergeStats(fresh), Floor: &unhammered, FloorLabel: "unhammered", Reference: unhammered.Throughput,
		Goal: 0.70, GoalText: ">= 0.70 x unhammered", PeakRSSBytes: rss})
	charges := int64(0)
	for _, c := range rep.Hammer {
		charges = max(charges, c.GatewayCharges)
	}
	rep.add(row{Scenario: scHammer, Name: "hammer: 64 clients on one key (other merchant)", Unit: "req/s",
		Gateway: mergeStats(hammering), GoalText: "exactly 1 charge",
		MetText: fmt.Sprintf("%s (%d)", map[bool]string{true: "yes", false: "NO"}[allOK], charges)})
	return nil
}

// hammerRound hammers a key of its own with 64 clients while 64 others make
// fresh payments, then checks that the key was charged exactly once.
func (b *bench) hammerRound(ctx context.Context, hc *http.Client, r int) (fresh, hammering stats, rss int64, chk hammerCheck, err error) {
	key := fmt.Sprintf("hammer-%s-r%d", b.nonce, r)
	body := paymentBody(key)
	hammerer := b.gw.hammerer.ID
	order := payments.MerchantOrderID(hammerer, key)
	b.gw.charges.watchOrder(order)
	chk = hammerCheck{Key: key, MerchantOrderID: order}
	var (
		first             atomic.Pointer[[]byte]
		firsts, replays   atomic.Int64
		inflight, differs atomic.Int64
	)
	hammer := group{name: "hammer", clients: hammerClients, op: func(ctx context.Context, c *client) error {
		a, err := b.gw.post(ctx, hc, b.gw.hammererKey, key, body)
		if err != nil {
			return err
		}
		switch {
		case a.status == http.StatusConflict:
			inflight.Add(1)
			return nil
		case a.status != http.StatusCreated:
			return fmt.Errorf("hammered key: status %d: %.200s", a.status, a.body)
		case !a.replayed:
			firsts.Add(1)
		default:
			replays.Add(1)
		}
		if !first.CompareAndSwap(nil, &a.body) && !bytes.Equal(*first.Load(), a.body) {
			differs.Add(1)
		}
		return nil
	}}
	st, rss, err := b.gatewayPhase(ctx, b.roundTitle("4 hammer · gateway", r), "hammer",
		b.freshGroup(hc, "fresh", fmt.Sprintf("g4r%d", r), freshClients), hammer)
	if err != nil {
		return fresh, hammering, 0, chk, err
	}
	chk.GatewayCharges = b.gw.charges.calls.Load()
	chk.LedgerCharges = b.gw.fake.ChargesFor(order)
	chk.FirstAnswers, chk.Replays, chk.InFlight, chk.DifferentReplays = firsts.Load(), replays.Load(), inflight.Load(), differs.Load()
	if err := b.gw.dbx.GetContext(ctx, &chk.DBPayments, `SELECT COUNT(*) FROM payments WHERE merchant_id = ? AND idem_key = ?`,
		hammerer, key); err != nil {
		return fresh, hammering, 0, chk, err
	}
	if chk.DBPayments == 1 {
		if err := b.gw.dbx.GetContext(ctx, &chk.DBPaymentStatus, `SELECT status FROM payments WHERE merchant_id = ? AND idem_key = ?`,
			hammerer, key); err != nil {
			return fresh, hammering, 0, chk, err
		}
	}
	if err := b.gw.dbx.GetContext(ctx, &chk.DBKeyState, `SELECT state FROM idempotency_keys WHERE merchant_id = ? AND endpoint = ? AND idem_key = ?`,
		hammerer, payments.EndpointCreatePayment, key); err != nil {
		return fresh, hammering, 0, chk, err
	}
	chk.OK = chk.GatewayCharges == 1 && chk.LedgerCharges == 1 && chk.DBPayments == 1 &&
		chk.DBPaymentStatus == string(payments.Succeeded) && chk.DBKeyState == "COMPLETED" &&
		chk.FirstAnswers == 1 && chk.DifferentReplays == 0
	return st[0], st[1], rss, chk, nil
}

func (b *bench) scenarioReconcile(ctx context.Context, rep *report) error {
	for _, replicas := range []int{1, 3} {
		var runs []stats
		var rss int64
		for r := range b.opts.rounds {
			st, peak, err := b.reconcileRun(ctx, rep, replicas, r)
			if err != nil {
				return err
			}
			runs, rss = append(runs, st), max(rss, peak)
		}
		bound := float64(replicas) * reconcileConc / lookupLatency.Seconds()
		rep.add(row{Scenario: scReconcile, Name: fmt.Sprintf("reconcile %d stale rows, lookup 20 ms, %d reconciler(s)", b.opts.reconcileRows, replicas),
			Unit: "rows/s", Gateway: mergeStats(runs), FloorLabel: "lookup bound", Reference: bound, Goal: 0.95, GoalText: ">= 0.95 x bound",
			PSPLatencyMS: lookupLatency.Seconds() * 1000,
			PeakRSSBytes: rss, NoLatency: true, Note: fmt.Sprintf("bound = %d x %d lookups / 0.02 s", replicas, reconcileConc)})
	}
	return nil
}

// settledCounter counts keys as the reconcilers settle them, for the progress line.
type settledCounter struct {
	reconcile.Observer
	n *atomic.Int64
}

func (s settledCounter) Settled(o reconcile.Outcome) {
	s.n.Add(1)
	s.Observer.Settled(o)
}

// reconcileRun seeds the stale rows and has `replicas` reconcilers, each
// with its own pool as separate processes would have, settle them in one
// pass each, started together.
func (b *bench) reconcileRun(ctx context.Context, rep *report, replicas, round int) (stats, int64, error) {
	rows := b.opts.reconcileRows
	b.prog.line("seeding %d stale rows for %d reconciler(s)", rows, replicas)
	m := fake.New(fake.WithCreationWindow(time.Minute))
	merchant, err := reconciletest.SeedStale(ctx, b.gw.dbx, m, rows, time.Hour)
	if err != nil {
		return stats{}, 0, err
	}
	m.SetLatency(lookupLatency)
	var done atomic.Int64
	recs := make([]*reconcile.Reconciler, replicas)
	for i := range recs {
		dbx, err := mysql.Open(ctx, b.dbEnv.dsn, poolOptions())
		if err != nil {
			return stats{}, 0, err
		}
		defer dbx.Close()
		met := metrics.New(prometheus.NewRegistry())
		recs[i] = newReconciler(dbx, metrics.InstrumentPSP(m, met), settledCounter{met, &done})
	}
	title := b.roundTitle(fmt.Sprintf("5 reconcile ×%d", replicas), round)
	stop := b.prog.count(title, int64(rows), &done)
	b.rss.reset()
	var wg sync.WaitGroup
	sums := make([]reconcile.Summary, replicas)
	errs := make([]error, replicas)
	cpu0 := takeCPU(b.dbEnv.pid)
	start := time.Now()
	for i, r := range recs {
		wg.Add(1)
		go pprof.Do(ctx, pprof.Labels(labels("reconciler", "reconcile")...), func(ctx context.Context) {
			defer wg.Done()
			sums[i], errs[i] = r.RunOnce(ctx)
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	cpu := cpuBetween(cpu0, takeCPU(b.dbEnv.pid))
	stop()
	settled := 0
	for i, s := range sums {
		if errs[i] != nil {
			return stats{}, 0, fmt.Errorf("%s: reconciler %d: %w", title, i+1, errs[i])
		}
		settled += s.Counts[reconcile.Succeeded] + s.Counts[reconcile.Failed]
	}
	var left int
	if err := b.gw.dbx.GetContext(ctx, &left, `SELECT COUNT(*) FROM idempotency_keys WHERE merchant_id = ? AND state = 'IN_PROGRESS'`, merchant.ID); err != nil {
		return stats{}, 0, err
	}
	if settled != rows || left != 0 {
		rep.Violations = append(rep.Violations, fmt.Sprintf("%s: settled %d of %d stale rows, %d left in progress", title, settled, rows, left))
	}
	st := stats{Clients: replicas, Requests: settled, Seconds: elapsed.Seconds(), Throughput: float64(settled) / elapsed.Seconds(), CPU: cpu}
	st.CPU.PerRequest = perRequest(cpu, st.Throughput)
	return st, b.rss.peak(), nil
}

// newReconciler builds a reconciler with serve's default settings.
func newReconciler(dbx *sqlx.DB, adapter psp.Adapter, obs reconcile.Observer) *reconcile.Reconciler {
	return reconcile.New(mysql.NewStore(dbx), payments.OnePSP(adapter), reconcile.Config{
		Lease:       serviceConfig().Lease,
		PSPTimeout:  serviceConfig().PSPTimeout,
		BatchSize:   reconcileBatch,
		Concurrency: reconcileConc,
		MaxAttempts: 10,
		BackoffBase: 30 * time.Second,
		BackoffMax:  30 * time.Minute,
		Retention:   7 * 24 * time.Hour,
		PurgeBatch:  500,
		Logger:      slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelInfo})),
		Observer:    obs,
	})
}
