package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime"
	rtmetrics "runtime/metrics"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"

	"gateway/books"
	"gateway/mysql"
	"gateway/payments"
	"gateway/psp/fake"
)

// The books scenario (11, and a row of --large): one pass of the books job
// (books.Job.Reconcile with serve's page size, on the gateway's own pool as
// serve runs it) over a period of a history, against a fake PSP whose
// ledger holds a charge for each payment of the period (same order id,
// amount, currency and time) and the discrepancies the bench plants: charges
// the gateway has no record of, charges of another amount than the
// gateway's, and settled payments the ledger lacks. The pass must find
// those, no more and no fewer. It reports the pass's lines per second, its
// wall time and its Go heap, and the fresh payment rate through the HTTP
// gateway while passes run against the same without them.
//
// The planted discrepancies' payments are the run's own, added to the
// period (ids and order ids carry the run's nonce), so that the history's
// rows stay as they were and a kept history (--large-db) serves the next
// run alike; the period's run and its discrepancies of an earlier run are
// deleted first, so that the measured pass is a period's first.

const (
	booksOrphans = 10 // ledger charges for order ids the gateway has no payment for
	booksChanged = 10 // ledger charges of another amount than their payment's
	booksMissing = 10 // settled payments of the period the ledger lacks
	// booksPerLine is how many payments scenario 11's history holds per
	// ledger line: as --large's 5,000,000 for 1,000,000.
	booksPerLine = 5
	booksPage    = 1000 // GATEWAY_BOOKS_PAGE's default
	booksAccount = "fake"
	booksGoal    = 0.85
	// booksHeapGoal is the most Go heap a gateway running a pass may hold.
	booksHeapGoal = 256 << 20
	// booksPlantRead is how many of the period's payments one read of the
	// ledger's source returns.
	booksPlantRead = 20_000
	unitLines      = "lines/s"
	unitMiB        = "MiB"
)

// booksHistoryFor is how many of the history's payments the period of a
// ledger of lines spans: every line but the orphans and the changed charges
// is one of theirs (the changed charges' payments and the missing ones are
// the run's own).
func booksHistoryFor(lines int) int { return lines - booksOrphans - booksChanged }

// booksReport is what one books scenario measured and checked.
type booksReport struct {
	Title       string    `json:"title"`
	Database    string    `json:"database"`
	HistoryRows int       `json:"history_rows"`
	From        time.Time `json:"period_from"`
	To          time.Time `json:"period_to"`
	// PlantSeconds is how long the fake's ledger took to fill (not measured
	// work: the PSP's side).
	PlantSeconds float64 `json:"ledger_plant_seconds"`
	// Seconds is the pass's wall time; LedgerSeconds its ledger phase's, the
	// rest its check of the gateway's records of the period.
	Seconds        float64    `json:"pass_seconds"`
	LedgerSeconds  float64    `json:"ledger_phase_seconds"`
	LinesPerSecond float64    `json:"lines_per_second"`
	Heap           booksHeap  `json:"heap"`
	Check          booksCheck `json:"check"`
	// LoadedPasses are the passes (reruns of the period) that ran while
	// the gateway took fresh payments, and their lines per second.
	LoadedPasses         []booksPass `json:"passes_under_load"`
	LoadedLinesPerSecond float64     `json:"lines_per_second_under_load"`
}

// booksPass is one pass under load.
type booksPass struct {
	Seconds float64 `json:"seconds"`
	Lines   int64   `json:"lines"`
	New     int     `json:"new_discrepancies"`
	Status  string  `json:"status"`
	Error   string  `json:"error,omitempty"`
}

// booksHeap is the Go heap around the measured pass. The fake PSP's ledger
// lives in this process; a real PSP's does not, so the goal is judged on
// Estimate, the heap a gateway would have without it.
type booksHeap struct {
	// Peak is the process's heap (objects, live and not yet collected) at
	// the highest sample taken during the pass, every 100 ms.
	Peak int64 `json:"peak_heap_bytes"`
	// Ledger is the live heap the fake's ledger of the period took.
	Ledger int64 `json:"fake_ledger_bytes"`
	// Before is the live heap after a collection right before the pass,
	// the fake's ledger included.
	Before int64 `json:"live_before_bytes"`
	// Pass is the pass's own: the highest live heap a collection found
	// during the pass, less Before.
	Pass int64 `json:"pass_live_bytes"`
	GOGC int64 `json:"gogc_percent"`
	// Estimate is the heap goal the collector of a gateway without the
	// fake's ledger reaches during the pass: (1 + GOGC/100) × (Before −
	// Ledger + Pass). The heap peaks there.
	Estimate int64 `json:"estimate_bytes"`
}

// booksCheck is what the measured pass must have found.
type booksCheck struct {
	Status      string `json:"status"`
	Error       string `json:"error,omitempty"`
	Lines       int64  `json:"lines"`
	WantLines   int64  `json:"want_lines"`
	Matched     int64  `json:"matched"`
	WantMatched int64  `json:"want_matched"`
	Checked     int64  `json:"checked"`
	WantChecked int64  `json:"want_checked"`
	// Found are the run's discrepancies as stored, by class; New those
	// the pass recorded.
	Found   map[books.Class]int `json:"found"`
	New     int                 `json:"new"`
	Planted map[books.Class]int `json:"planted"`
	// InReview are the planted discrepancies' payments in review: the
	// gateway's put there, the orphans recorded there.
	InReview     int `json:"in_review"`
	WantInReview int `json:"want_in_review"`
	// Unplanted are the discrepancies found that the bench did not plant
	// (class and subject), or of another class than planted.
	Unplanted []string `json:"unplanted,omitempty"`
	Problems  []string `json:"problems,omitempty"`
	OK        bool     `json:"ok"`
}

// verify sets OK and Problems.
func (c *booksCheck) verify() {
	c.Problems = nil
	bad := func(format string, args ...any) { c.Problems = append(c.Problems, fmt.Sprintf(format, args...)) }
	if c.Status != books.RunComplete {
		// What it did not reach is not counted as found wrong.
		bad("the run is %s, not complete, after %d of %d ledger lines: %s", c.Status, c.Lines, c.WantLines, c.Error)
		c.OK = false
		return
	}
	if c.Lines != c.WantLines {
		bad("%d ledger lines checked in the period, want %d", c.Lines, c.WantLines)
	}
	if c.Matched != c.WantMatched {
		bad("%d lines matched, want %d", c.Matched, c.WantMatched)
	}
	if c.Checked != c.WantChecked {
		bad("%d of the gateway's records checked, want %d", c.Checked, c.WantChecked)
	}
	for _, cl := range books.Classes {
		if c.Found[cl] != c.Planted[cl] {
			bad("%d %s discrepancies found, %d planted", c.Found[cl], cl, c.Planted[cl])
		}
	}
	planted := 0
	for _, n := range c.Planted {
		planted += n
	}
	if c.New != planted {
		bad("the pass recorded %d discrepancies, %d planted", c.New, planted)
	}
	if c.InReview != c.WantInReview {
		bad("%d of the planted discrepancies' payments in review, want %d", c.InReview, c.WantInReview)
	}
	if len(c.Unplanted) > 0 {
		bad("found what was not planted: %s", strings.Join(c.Unplanted, ", "))
	}
	c.OK = len(c.Problems) == 0
}

// booksTarget is where a books scenario runs.
type booksTarget struct {
	sc    int    // the scenario number of its rows
	title string // its rows' and phases' prefix
	label string // its phases' keys' and profile labels' prefix
	g     *gateway
	// dbx is the history's pool for the bench's own reads and writes; the
	// job uses the gateway's.
	dbx      *sqlx.DB
	database string
	rows     int // payments in the history
	lines    int
}

// scenarioBooks is scenario 11: --books-lines ledger lines against a
// history of booksPerLine times as many payments, in a database of its own
// that is dropped afterwards, with a gateway of its own.
func (b *bench) scenarioBooks(ctx context.Context, hc *http.Client, rep *report) (err error) {
	lines := b.opts.booksLines
	rows := booksPerLine * lines
	name := "gwbench_books_" + b.nonce
	dsn, err := createHistoryDB(ctx, b.dbEnv.base, name)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, dropDatabase(b.dbEnv.base, name)) }()
	dbx, err := mysql.Open(ctx, dsn, mysql.PoolOptions{MaxOpen: fillWorkers + 2})
	if err != nil {
		return err
	}
	defer dbx.Close()
	start := time.Now()
	filled, err := fillHistory(ctx, dbx, rows, b.prog)
	if err != nil {
		return err
	}
	b.prog.line("books: filled %d rows in %.1f s", filled, time.Since(start).Seconds())
	g, err := startGateway(ctx, dsn, "", b.label)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, g.close()) }()
	return b.booksRun(ctx, hc, rep, booksTarget{sc: scBooks, title: "books", label: "bk", g: g, dbx: dbx,
		database: name, rows: rows, lines: lines})
}

// dropDatabase drops a database of the run's making.
func dropDatabase(base, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := mysql.Open(ctx, base, mysql.PoolOptions{MaxOpen: 1})
	if err != nil {
		return err
	}
	_, err = admin.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`")
	return errors.Join(err, admin.Close())
}

// booksPeriod is the period a books scenario reconciles and what the bench
// planted in it.
type booksPeriod struct {
	from, to time.Time
	history  int // the history's payments in it: rows 0 to history-1
	// planted is each planted discrepancy's class, by subject (order id).
	planted map[string]books.Class
	// extras are the run's own payments added to the period: those whose
	// ledger line has another amount, and those the ledger lacks.
	extras []booksExtra
	// orphans are ledger charges for order ids no payment has.
	orphans []booksLine
}

// booksLine is one charge of the ledger.
type booksLine struct {
	order, merchant string
	amount          int64
	currency        string
	at              time.Time
}

// booksExtra is a payment the run adds to the period, and whether the
// ledger charges it (with another amount) or lacks it.
type booksExtra struct {
	booksLine
	id, key string
	charged bool
}

func (b *bench) booksRun(ctx context.Context, hc *http.Client, rep *report, t booksTarget) error {
	h := booksHistoryFor(t.lines)
	if h < 1 || h >= t.rows {
		return fmt.Errorf("books: %d ledger lines need a history of more than %d payments; it has %d", t.lines, h, t.rows)
	}
	p, err := b.booksPeriod(ctx, t, h)
	if err != nil {
		return err
	}
	out := booksReport{Title: t.title, Database: t.database, HistoryRows: t.rows, From: p.from, To: p.to}
	if err := booksForget(ctx, t.dbx, p); err != nil {
		return err
	}
	// The PSP's side, made before anything is measured.
	ledger, heapLedger, plant, err := b.booksLedger(ctx, t, p)
	if err != nil {
		return err
	}
	out.PlantSeconds, out.Heap.Ledger = plant.Seconds(), heapLedger
	if err := booksAddExtras(ctx, t.dbx, p); err != nil {
		return err
	}

	empty := b.gw
	b.gw = t.g
	defer func() { b.gw = empty }()
	// The job as serve builds it (newBooks): the gateway's pool, serve's page size.
	var ledgerDone atomic.Int64 // when the measured pass's ledger phase ended, ns after its start
	var progressed atomic.Int64
	var passStart time.Time
	job := books.New(books.Config{Store: mysql.NewStore(t.g.dbx).Books(), PSPs: payments.OnePSP(ledger), PageSize: booksPage, Rest: books.DefaultRest,
		Progress: func(r books.Run) {
			progressed.Store(r.Counts.Lines + r.Counts.Checked)
			if r.Phase != books.PhaseLedger {
				ledgerDone.CompareAndSwap(0, int64(time.Since(passStart)))
			}
		}})

	// The measured pass, alone: a period's first.
	title := fmt.Sprintf("%s · pass over %d ledger lines", t.title, t.lines)
	stop := b.prog.count(title, int64(t.lines+h+booksMissing), &progressed)
	b.rss.reset()
	before := liveHeapAfterGC()
	sampler := sampleHeap()
	cpu0 := takeCPU(b.dbEnv.pid)
	passStart = time.Now()
	var res books.Report
	var perr error
	pprof.Do(ctx, pprof.Labels(labels("books", t.label)...), func(ctx context.Context) {
		res, perr = job.Reconcile(ctx, booksAccount, p.from, p.to, false)
	})
	elapsed := time.Since(passStart)
	cpu := cpuBetween(cpu0, takeCPU(b.dbEnv.pid))
	peak, peakLive, gogc := sampler()
	stop()
	rss := b.rss.peak()
	if perr != nil && ctx.Err() != nil {
		return perr
	}
	out.Seconds, out.LedgerSeconds = elapsed.Seconds(), time.Duration(ledgerDone.Load()).Seconds()
	if ledgerDone.Load() == 0 {
		out.LedgerSeconds = out.Seconds // it never left its ledger phase
	}
	out.LinesPerSecond = float64(res.Run.Counts.Lines) / elapsed.Seconds()
	out.Heap.Peak, out.Heap.Before, out.Heap.Pass, out.Heap.GOGC = peak, before, max(peakLive-before, 0), gogc
	out.Heap.Estimate = int64((1 + float64(gogc)/100) * float64(max(before-heapLedger, 0)+out.Heap.Pass))
	if out.Check, err = b.booksChecked(ctx, t, p, res, perr); err != nil {
		return err
	}
	if !out.Check.OK {
		rep.Violations = append(rep.Violations, fmt.Sprintf("%s: %s", title, strings.Join(out.Check.Problems, "; ")))
	}
	st := stats{Clients: 1, Requests: int(res.Run.Counts.Lines), Seconds: elapsed.Seconds(), Throughput: out.LinesPerSecond, CPU: cpu}
	st.CPU.PerRequest = perRequest(cpu, st.Throughput)
	rep.add(row{Scenario: t.sc, Name: fmt.Sprintf("%s: one pass, %d ledger lines vs %d payments", t.title, t.lines, t.rows), Unit: unitLines,
		Gateway: st, GoalText: "planted found", NoLatency: true, PeakRSSBytes: rss})
	rep.met(out.Check.OK)
	rep.add(row{Scenario: t.sc, Name: fmt.Sprintf("%s: peak Go heap of a gateway during the pass (estimate)", t.title), Unit: unitMiB,
		Gateway: stats{Throughput: mib(out.Heap.Estimate)}, FloorLabel: "goal", Reference: mib(booksHeapGoal), NoLatency: true,
		GoalText: fmt.Sprintf("<= %.0f MiB", mib(booksHeapGoal))})
	// A pass that stopped short says nothing of the heap a whole one takes.
	rep.met(out.Check.Status == books.RunComplete && out.Heap.Estimate <= booksHeapGoal)

	// Fresh payments with and without passes.
	alone, with, passes, rssW, err := b.booksUnderLoad(ctx, hc, t, job, p, elapsed)
	if err != nil {
		return err
	}
	out.LoadedPasses = passes
	var loadedLines int64
	var loadedSecs float64
	failed := 0
	for _, ps := range passes {
		switch {
		case ps.Error != "":
			failed++
			rep.Violations = append(rep.Violations, fmt.Sprintf("%s: a pass under load failed: %s", t.title, ps.Error))
		case ps.New != 0:
			rep.Violations = append(rep.Violations, fmt.Sprintf("%s: a rerun of the period under load recorded %d new discrepancies, want none", t.title, ps.New))
		default:
			loadedLines += ps.Lines
			loadedSecs += ps.Seconds
		}
	}
	if loadedSecs > 0 {
		out.LoadedLinesPerSecond = float64(loadedLines) / loadedSecs
	}
	note := fmt.Sprintf("measured over %d whole pass(es), %.0f lines/s (alone %.0f)", len(passes), out.LoadedLinesPerSecond, out.LinesPerSecond)
	if failed > 0 {
		note = fmt.Sprintf("measured over %d pass(es), %d of them failed", len(passes), failed)
	}
	rep.add(row{Scenario: t.sc, Name: fmt.Sprintf("%s: fresh payments during books passes, 64 clients", t.title), Unit: "req/s",
		Gateway: with, Floor: &alone, FloorLabel: "no pass", Reference: alone.Throughput, Goal: booksGoal,
		GoalText: fmt.Sprintf(">= %.2f x no pass", booksGoal), PeakRSSBytes: rssW,
		Note: note})
	if failed > 0 {
		rep.met(false) // its window did not hold a whole pass
	}
	rep.Books = append(rep.Books, out)
	return nil
}

// booksChecked is what the measured pass found against what was planted,
// as the database holds it: the run's discrepancies, and the payments
// they put or recorded in review.
func (b *bench) booksChecked(ctx context.Context, t booksTarget, p booksPeriod, res books.Report, perr error) (booksCheck, error) {
	c := res.Run.Counts
	chk := booksCheck{Status: res.Run.Status, Lines: c.Lines, WantLines: int64(t.lines),
		Matched: c.Matched, WantMatched: int64(p.history), Checked: c.Checked, WantChecked: int64(p.history + booksMissing),
		New: res.New, Found: map[books.Class]int{}, Planted: map[books.Class]int{}, WantInReview: len(p.planted)}
	if perr != nil {
		chk.Error = perr.Error()
	}
	for _, cl := range p.planted {
		chk.Planted[cl]++
	}
	for _, d := range res.Discrepancies {
		chk.Found[d.Class]++
		if p.planted[d.Subject] != d.Class {
			chk.Unplanted = append(chk.Unplanted, string(d.Class)+" "+d.Subject)
		}
	}
	slices.Sort(chk.Unplanted)
	if err := t.dbx.GetContext(ctx, &chk.InReview, `SELECT COUNT(*) FROM payments FORCE INDEX (payments_books)
WHERE psp = ? AND created_at >= ? AND created_at < ? AND status = 'requires_review' AND (id LIKE ? OR merchant_order_id LIKE ?)`,
		booksAccount, p.from, p.to, "pay\\_bk"+b.nonce+"%", "ord\\_bk"+b.nonce+"%"); err != nil {
		return chk, fmt.Errorf("books: the payments in review: %w", err)
	}
	chk.verify()
	return chk, nil
}

// heapVerdict judges the heap of a whole pass against the goal.
func heapVerdict(c booksCheck, h booksHeap) string {
	switch {
	case c.Status != books.RunComplete:
		return "not judged: the pass stopped short"
	case h.Estimate <= booksHeapGoal:
		return "met"
	}
	return "NOT met"
}

// foundText is what a pass found, by class.
func foundText(c booksCheck) string {
	var parts []string
	for _, cl := range books.Classes {
		if c.Found[cl] > 0 || c.Planted[cl] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.Found[cl], cl))
		}
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}

// booksUnderLoad measures, in each round, 64 clients paying fresh through
// the gateway alone (--duration) and then while the job reruns the period
// on the gateway's pool: the measured window opens as the first pass
// starts and closes as the first pass to end after --duration ends, so
// that it holds whole passes, their ledger phase and their check of the
// gateway's records alike, and no pass is cut short (a cancelled one would
// leave the run for the next pass to resume).
func (b *bench) booksUnderLoad(ctx context.Context, hc *http.Client, t booksTarget, job *books.Job, p booksPeriod, expect time.Duration) (alone, with stats, passes []booksPass, rss int64, err error) {
	var as, ws []stats
	for r := range b.opts.rounds {
		a, _, err := b.gatewayPhase(ctx, b.roundTitle(t.title+" · fresh, no pass", r), t.label+"-alone",
			b.freshGroup(hc, "gateway", fmt.Sprintf("%sa%d", t.label, r), freshClients))
		if err != nil {
			return alone, with, passes, rss, err
		}
		w := window{expect: max(expect, b.opts.duration), wait: func(ctx context.Context) bool {
			start := time.Now()
			for {
				var ps booksPass
				pprof.Do(ctx, pprof.Labels(labels("books", t.label)...), func(ctx context.Context) {
					t0 := time.Now()
					res, err := job.Reconcile(ctx, booksAccount, p.from, p.to, true)
					ps = booksPass{Seconds: time.Since(t0).Seconds(), Lines: res.Run.Counts.Lines, New: res.New, Status: res.Run.Status}
					if err != nil {
						ps.Error = err.Error()
					}
				})
				if ctx.Err() != nil {
					return false
				}
				passes = append(passes, ps)
				if ps.Error != "" || time.Since(start) >= b.opts.duration {
					return true
				}
			}
		}}
		st, peak, err := b.gatewayPhaseIn(ctx, b.roundTitle(t.title+" · fresh, books passes", r), t.label+"-with", nil, w,
			b.freshGroup(hc, "gateway", fmt.Sprintf("%sw%d", t.label, r), freshClients))
		if err != nil {
			return alone, with, passes, rss, err
		}
		as, ws, rss = append(as, a[0]), append(ws, st[0]), max(rss, peak)
	}
	return mergeStats(as), mergeStats(ws), passes, rss, nil
}

// booksPeriod finds the period of the history's first h payments and
// names the discrepancies to plant in it, spread over it.
func (b *bench) booksPeriod(ctx context.Context, t booksTarget, h int) (booksPeriod, error) {
	at := func(i int) (time.Time, error) {
		var ts time.Time
		err := t.dbx.GetContext(ctx, &ts, `SELECT created_at FROM payments WHERE merchant_id = ? AND id = ?`,
			fillMerchantOf(i), fmt.Sprintf("pay_f%011d", i))
		if err != nil {
			return ts, fmt.Errorf("books: history payment %d: %w", i, err)
		}
		return ts.UTC(), nil
	}
	from, err := at(0)
	if err != nil {
		return booksPeriod{}, err
	}
	to, err := at(h)
	if err != nil {
		return booksPeriod{}, err
	}
	p := booksPeriod{from: from, to: to, history: h, planted: map[string]books.Class{}}
	// The kinds in turn, so that each is spread over the period.
	var kinds []books.Class
	for i := 0; len(kinds) < booksOrphans+booksChanged+booksMissing; i++ {
		for _, k := range []struct {
			n  int
			cl books.Class
		}{{booksOrphans, books.OrphanCharge}, {booksChanged, books.Mismatch}, {booksMissing, books.MissingAtPSP}} {
			if i < k.n {
				kinds = append(kinds, k.cl)
			}
		}
	}
	span := to.Sub(from)
	seq := map[books.Class]int{}
	for k, cl := range kinds {
		when := from.Add(time.Duration(float64(span) * float64(k+1) / float64(len(kinds)+1))).Truncate(time.Microsecond)
		merchant := fillMerchant(k % fillMerchants)
		i := seq[cl]
		seq[cl]++
		switch cl {
		case books.OrphanCharge:
			order := fmt.Sprintf("ord_bk%s_o%02d", b.nonce, i)
			p.orphans = append(p.orphans, booksLine{order: order, merchant: merchant, amount: 4200 + int64(i), currency: "USD", at: when})
			p.planted[order] = cl
		case books.Mismatch:
			p.extras = append(p.extras, b.booksExtra(merchant, "c", i, when, true))
			p.planted[p.extras[len(p.extras)-1].order] = cl
		default:
			p.extras = append(p.extras, b.booksExtra(merchant, "m", i, when, false))
			p.planted[p.extras[len(p.extras)-1].order] = cl
		}
	}
	return p, nil
}

func (b *bench) booksExtra(merchant, kind string, i int, at time.Time, charged bool) booksExtra {
	key := fmt.Sprintf("bk-%s-%s%02d", b.nonce, kind, i)
	return booksExtra{booksLine: booksLine{order: payments.MerchantOrderID(merchant, key), merchant: merchant,
		amount: 3100 + int64(i), currency: "USD", at: at}, id: fmt.Sprintf("pay_bk%s_%s%02d", b.nonce, kind, i), key: key, charged: charged}
}

// booksForget deletes the period's run and its discrepancies left by an
// earlier bench run, and takes out of the period's settled payments any
// planted one an interrupted run left unreviewed: the measured pass is the
// period's first, over the history and this run's plants alone.
func booksForget(ctx context.Context, dbx *sqlx.DB, p booksPeriod) error {
	if _, err := dbx.ExecContext(ctx, `DELETE d FROM books_discrepancies d JOIN books_runs r ON r.id = d.run_id
WHERE r.account = ? AND r.period_from = ? AND r.period_to = ?`, booksAccount, p.from, p.to); err != nil {
		return fmt.Errorf("books: forget the earlier run: %w", err)
	}
	if _, err := dbx.ExecContext(ctx, `DELETE FROM books_runs WHERE account = ? AND period_from = ? AND period_to = ?`,
		booksAccount, p.from, p.to); err != nil {
		return fmt.Errorf("books: forget the earlier run: %w", err)
	}
	if _, err := dbx.ExecContext(ctx, `UPDATE payments FORCE INDEX (payments_books) SET status = 'failed'
WHERE psp = ? AND created_at >= ? AND created_at < ? AND id LIKE 'pay\_bk%' AND status = 'succeeded'`, booksAccount, p.from, p.to); err != nil {
		return fmt.Errorf("books: an earlier run's plants: %w", err)
	}
	return nil
}

// booksLedger makes the fake PSP of the period: a charge for each settled
// payment of the history in it, read in the order of their times, merged
// with the planted charges. It returns the fake, the live heap its ledger
// took and how long planting took.
func (b *bench) booksLedger(ctx context.Context, t booksTarget, p booksPeriod) (*fake.PSP, int64, time.Duration, error) {
	var planted []booksLine
	planted = append(planted, p.orphans...)
	for _, x := range p.extras {
		if x.charged {
			l := x.booksLine
			l.amount += 100
			planted = append(planted, l)
		}
	}
	slices.SortFunc(planted, func(a, b booksLine) int { return a.at.Compare(b.at) })

	start := time.Now()
	live0 := liveHeapAfterGC()
	f := fake.New()
	var done atomic.Int64
	stop := b.prog.count(t.title+" · the PSP's ledger", int64(t.lines), &done)
	defer stop()
	merchants := map[string]string{} // one string per merchant, as a PSP's rows would share it
	plant := func(l booksLine) {
		m, ok := merchants[l.merchant]
		if !ok {
			merchants[l.merchant], m = l.merchant, l.merchant
		}
		f.PlantCharge(l.order, m, l.amount, l.currency, l.at)
		done.Add(1)
	}
	read := 0
	after := p.from.Add(-time.Microsecond)
	for {
		var rows []struct {
			Merchant  string    `db:"merchant_id"`
			Order     string    `db:"merchant_order_id"`
			Amount    int64     `db:"amount"`
			Currency  string    `db:"currency"`
			CreatedAt time.Time `db:"created_at"`
		}
		// The history's times are distinct: a page goes on after the last one's.
		if err := t.dbx.SelectContext(ctx, &rows, `SELECT merchant_id, merchant_order_id, amount, currency, created_at
FROM payments FORCE INDEX (payments_books)
WHERE psp = ? AND created_at > ? AND created_at < ? AND status = 'succeeded' AND id LIKE 'pay\_f%'
ORDER BY created_at LIMIT ?`, booksAccount, after, p.to, booksPlantRead); err != nil {
			return nil, 0, 0, fmt.Errorf("books: the ledger's charges: %w", err)
		}
		for _, r := range rows {
			for len(planted) > 0 && !planted[0].at.After(r.CreatedAt) {
				plant(planted[0])
				planted = planted[1:]
			}
			plant(booksLine{order: r.Order, merchant: r.Merchant, amount: r.Amount, currency: r.Currency, at: r.CreatedAt.UTC()})
			after = r.CreatedAt
		}
		read += len(rows)
		if len(rows) < booksPlantRead {
			break
		}
	}
	for _, l := range planted {
		plant(l)
	}
	if read != p.history {
		return nil, 0, 0, fmt.Errorf("books: the period [%s, %s) holds %d settled payments of the history, want %d",
			p.from.Format(time.RFC3339Nano), p.to.Format(time.RFC3339Nano), read, p.history)
	}
	clear(merchants)
	return f, max(liveHeapAfterGC()-live0, 0), time.Since(start), nil
}

// booksAddExtras inserts the run's own payments of the period, settled as
// the gateway would have them.
func booksAddExtras(ctx context.Context, dbx *sqlx.DB, p booksPeriod) error {
	var vals []string
	var args []any
	for _, x := range p.extras {
		vals = append(vals, "(?, ?, ?, ?, 'succeeded', ?, ?, 'pm_card_ok', ?, ?, ?, ?, ?)")
		args = append(args, x.merchant, x.id, x.key, x.order, x.amount, x.currency, "Order "+x.key, booksAccount,
			"fake_ch_"+x.id, x.at, x.at)
	}
	if _, err := dbx.ExecContext(ctx, `INSERT INTO payments (merchant_id, id, idem_key, merchant_order_id, status, amount,
    currency, payment_method, description, psp, psp_reference, created_at, updated_at) VALUES `+strings.Join(vals, ","), args...); err != nil {
		return fmt.Errorf("books: the run's payments: %w", err)
	}
	return nil
}

// Heap readings (runtime/metrics).
const (
	heapObjects = "/memory/classes/heap/objects:bytes"
	heapLive    = "/gc/heap/live:bytes"
	gcPercent   = "/gc/gogc:percent"
)

// liveHeapAfterGC collects and returns the live heap.
func liveHeapAfterGC() int64 {
	runtime.GC()
	s := []rtmetrics.Sample{{Name: heapLive}}
	rtmetrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// sampleHeap samples the heap every 100 ms until the function it returns
// is called, which gives the highest heap (objects, live and not yet
// collected), the highest live heap a collection found, and GOGC.
func sampleHeap() func() (peak, peakLive, gogc int64) {
	quit := make(chan struct{})
	var wg sync.WaitGroup
	var peak, peakLive, gogc int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		s := []rtmetrics.Sample{{Name: heapObjects}, {Name: heapLive}, {Name: gcPercent}}
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			rtmetrics.Read(s)
			peak, peakLive = max(peak, int64(s[0].Value.Uint64())), max(peakLive, int64(s[1].Value.Uint64()))
			gogc = int64(s[2].Value.Uint64())
			select {
			case <-quit:
				return
			case <-t.C:
			}
		}
	}()
	return func() (int64, int64, int64) {
		close(quit)
		wg.Wait()
		return peak, peakLive, gogc
	}
}

// printBooks prints what the books scenarios measured beside the table.
func printBooks(w io.Writer, reps []booksReport) {
	if len(reps) == 0 {
		return
	}
	fmt.Fprintf(w, "\nBooks passes (books.Job.Reconcile, page %d, resting %g× each page's time after it as a gateway does, on the gateway's pool; the fake PSP's ledger lives in this process):\n", booksPage, books.DefaultRest)
	for _, r := range reps {
		c := r.Check
		fmt.Fprintf(w, "  %s: %d ledger lines, period [%s, %s) of a history of %d payments (%s); ledger planted in %.1f s\n",
			r.Title, c.WantLines, r.From.Format(time.RFC3339), r.To.Format(time.RFC3339), r.HistoryRows, r.Database, r.PlantSeconds)
		split := fmt.Sprintf("ledger phase %.1f s, the gateway's records %.1f s", r.LedgerSeconds, r.Seconds-r.LedgerSeconds)
		if c.Status != books.RunComplete {
			split = "stopped short"
		}
		fmt.Fprintf(w, "    pass: %.1f s wall (%s), %.0f lines/s; %d lines, %d matched, %d records checked, run %s\n",
			r.Seconds, split, r.LinesPerSecond, c.Lines, c.Matched, c.Checked, c.Status)
		verdict := "exactly those"
		if !c.OK {
			verdict = "WRONG: " + strings.Join(c.Problems, "; ")
		}
		fmt.Fprintf(w, "    planted %d %s, %d %s, %d %s; found %s — %s\n", c.Planted[books.OrphanCharge], books.OrphanCharge,
			c.Planted[books.Mismatch], books.Mismatch, c.Planted[books.MissingAtPSP], books.MissingAtPSP, foundText(c), verdict)
		h := r.Heap
		fmt.Fprintf(w, "    Go heap: process peak %.0f MiB during the pass, of which the fake's ledger %.0f MiB live; live before the pass %.0f MiB,\n"+
			"      the pass's own live heap at most %.0f MiB; a gateway without the fake: (1 + GOGC %d/100) x (%.0f + %.0f) = %.0f MiB (goal <= %.0f MiB: %s)\n",
			mib(h.Peak), mib(h.Ledger), mib(h.Before), mib(h.Pass), h.GOGC, mib(max(h.Before-h.Ledger, 0)), mib(h.Pass), mib(h.Estimate),
			mib(booksHeapGoal), heapVerdict(c, h))
		if n := len(r.LoadedPasses); n > 0 {
			failed := 0
			for _, p := range r.LoadedPasses {
				if p.Error != "" {
					failed++
				}
			}
			fmt.Fprintf(w, "    under load: %d pass(es) rerunning the period (%d failed), %.0f lines/s in the whole ones\n", n, failed, r.LoadedLinesPerSecond)
		}
	}
}
