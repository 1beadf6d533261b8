package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"gateway/mysql"
)

// report is the outcome of a run, printed as a table and written as JSON.
type report struct {
	Started   time.Time     `json:"started"`
	GoVersion string        `json:"go_version"`
	CPUs      int           `json:"cpus"`
	Duration  float64       `json:"duration_s"`
	Rounds    int           `json:"rounds"`
	Warmup    float64       `json:"warmup_s"`
	DB        dbInfo        `json:"database"`
	Pool      poolInfo      `json:"pool"`
	Rows      []row         `json:"scenarios"`
	Hammer    []hammerCheck `json:"hammer"`
	// Routes are the routes scenario's phases, each checked.
	Routes []routesCheck `json:"routes,omitempty"`
	// PeakRSSBytes is the whole process's peak: the gateway, its clients
	// and the floor loops share it.
	PeakRSSBytes int64    `json:"peak_rss_bytes"`
	Violations   []string `json:"violations"`
	// Large is what --large measured beside the table.
	Large *largeReport `json:"large,omitempty"`
	// Sweep is the charts' fresh payments at each concurrency.
	Sweep []sweepPoint `json:"sweep,omitempty"`
	// Books are the books scenarios' passes, each checked (11, and --large's).
	Books []booksReport `json:"books,omitempty"`
}

type poolInfo struct {
	MaxOpen           int    `json:"max_open_conns"`
	MaxIdle           int    `json:"max_idle_conns"`
	MaxLifetime       string `json:"conn_max_lifetime"`
	InterpolateParams bool   `json:"interpolate_params"`
	ClientFoundRows   bool   `json:"client_found_rows"`
}

// row is one line of the table.
type row struct {
	Scenario int    `json:"scenario"`
	Name     string `json:"name"`
	Unit     string `json:"unit"`
	Gateway  stats  `json:"gateway"`
	Floor    *stats `json:"floor,omitempty"`
	// FloorLabel says what Reference is: the raw-SQL floor, the unhammered
	// throughput, or a latency bound.
	FloorLabel string  `json:"reference_kind"`
	Reference  float64 `json:"reference"`
	Ratio      float64 `json:"ratio"`
	Goal       float64 `json:"goal_ratio,omitempty"`
	GoalText   string  `json:"goal"`
	Met        *bool   `json:"met,omitempty"`
	MetText    string  `json:"-"`
	// PeakRSSBytes is the process's peak RSS during the gateway's phase.
	PeakRSSBytes int64 `json:"peak_rss_bytes,omitempty"`
	// PSPLatencyMS is the fake PSP's latency during the gateway's phase.
	PSPLatencyMS float64 `json:"psp_latency_ms"`
	NoLatency    bool    `json:"-"`
	Note         string  `json:"note,omitempty"`
}

func newReport(b *bench) *report {
	cfg, _ := mysql.Config(b.dbEnv.dsn)
	pool := poolOptions()
	return &report{
		Started:   time.Now().UTC(),
		GoVersion: runtime.Version(),
		CPUs:      runtime.NumCPU(),
		Duration:  b.opts.duration.Seconds(),
		Rounds:    b.opts.rounds,
		Warmup:    b.opts.warmup.Seconds(),
		DB:        b.dbEnv.info,
		Pool: poolInfo{MaxOpen: pool.MaxOpen, MaxIdle: pool.MaxIdle, MaxLifetime: pool.MaxLifetime.String(),
			InterpolateParams: cfg != nil && cfg.InterpolateParams, ClientFoundRows: cfg != nil && cfg.ClientFoundRows},
		Violations: []string{},
	}
}

func (r *report) add(w row) {
	if w.Reference > 0 {
		w.Ratio = w.Gateway.Throughput / w.Reference
	}
	if w.Goal > 0 {
		met := w.Ratio >= w.Goal
		w.Met = &met
	}
	if w.Gateway.Errors > 0 {
		r.Violations = append(r.Violations, fmt.Sprintf("scenario %d (%s): %d unexpected answer(s), first: %s",
			w.Scenario, w.Name, w.Gateway.Errors, w.Gateway.FirstError))
	}
	if w.Floor != nil && w.Floor.Errors > 0 {
		r.Violations = append(r.Violations, fmt.Sprintf("scenario %d %s: %d error(s), first: %s",
			w.Scenario, w.FloorLabel, w.Floor.Errors, w.Floor.FirstError))
	}
	r.Rows = append(r.Rows, w)
}

// met sets whether the last row met a goal that is not a ratio's lower bound.
func (r *report) met(ok bool) {
	r.Rows[len(r.Rows)-1].Met = &ok
}

// problems is non-nil when a check failed: a double charge, or answers that
// are not what the scenario expects.
func (r *report) problems() error {
	if len(r.Violations) == 0 {
		return nil
	}
	return errors.New(strings.Join(r.Violations, "\n"))
}

func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "\nGateway vs raw-SQL floor: %d CPUs, %s, %.0fs per phase after %.1fs warm-up",
		r.CPUs, r.GoVersion, r.Duration, r.Warmup)
	if r.Rounds > 1 {
		fmt.Fprintf(w, ", %d rounds (median)", r.Rounds)
	}
	fmt.Fprint(w, "\n\n")
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tTHROUGHPUT\tP50\tP99\tFLOOR\tRATIO\tGOAL\tMET?")
	for _, x := range r.Rows {
		p50, p99 := ms(x.Gateway.P50), ms(x.Gateway.P99)
		if x.NoLatency {
			p50, p99 = "-", "-"
		}
		floor, ratio := "-", "-"
		if x.Reference > 0 {
			floor = fmt.Sprintf("%s %s (%s)", amount(x.Reference, x.Unit), x.Unit, x.FloorLabel)
			ratio = fmt.Sprintf("%.2f", x.Ratio)
		}
		met := x.MetText
		if x.Met != nil {
			met = map[bool]string{true: "yes", false: "no"}[*x.Met]
		}
		if met == "" {
			met = "-"
		}
		fmt.Fprintf(tw, "%d %s\t%s %s\t%s\t%s\t%s\t%s\t%s\t%s\n",
			x.Scenario, x.Name, amount(x.Gateway.Throughput, x.Unit), x.Unit, p50, p99, floor, ratio, x.GoalText, met)
	}
	_ = tw.Flush()

	fmt.Fprintln(w, "\nReferences measured in this run (raw SQL: this process, same driver settings, pool size and concurrency\n"+
		"as the gateway; unhammered: the same 64 gateway clients without the hammering, right before):")
	tw = tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	for _, x := range r.Rows {
		if x.Floor != nil {
			fmt.Fprintf(tw, "  %d %s\t%s\t%.0f %s\tp50 %s\tp99 %s\n", x.Scenario, x.Name, x.FloorLabel, x.Floor.Throughput, x.Unit, ms(x.Floor.P50), ms(x.Floor.P99))
		}
	}
	_ = tw.Flush()

	if len(r.Hammer) > 0 {
		fmt.Fprintln(w, "\nHammered keys (charges counted at the gateway's PSP calls, in the fake ledger and in the database):")
		for _, h := range r.Hammer {
			fmt.Fprintf(w, "  %s: %d Charge call(s), %d ledger charge(s), %d payment row(s) %s, key %s; answers: %d first, %d replays (%d differing), %d in-flight 409 — %s\n",
				h.Key, h.GatewayCharges, h.LedgerCharges, h.DBPayments, h.DBPaymentStatus, h.DBKeyState,
				h.FirstAnswers, h.Replays, h.DifferentReplays, h.InFlight, map[bool]string{true: "exactly once", false: "VIOLATED"}[h.OK])
		}
	}

	printRoutes(w, r.Routes)

	fmt.Fprintf(w, "\nCPU cores busy in the measured windows, of %d (bench = this process: gateway, its clients, floor loops;\n"+
		"db = %s; irq = kernel interrupt work, mostly loopback TCP; other = every other process;\n"+
		"CPU µs/REQ = (bench + db + irq) / throughput, which other processes hardly disturb):\n", r.CPUs, r.DB.Server)
	tw = tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "  SCENARIO\tPHASE\tBENCH\tDB\tIRQ\tOTHER\tIDLE\tCPU µs/REQ")
	noisy := 0.0
	cpuRow := func(name, phase string, c cpuUse) {
		fmt.Fprintf(tw, "  %s\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.0f\n", name, phase, c.Bench, c.DB, c.IRQ, c.Other, c.Idle, c.PerRequest)
		noisy = max(noisy, c.Other)
	}
	for _, x := range r.Rows {
		if x.Scenario == scHammer && x.Reference == 0 {
			continue // the hammering clients share the phase, hence the numbers, of the row above
		}
		if x.Unit == unitStatements || x.Unit == unitMiB {
			continue // counted in the phases of the row above
		}
		name := fmt.Sprintf("%d %s", x.Scenario, x.Name)
		if x.Floor != nil {
			phase := x.FloorLabel
			if strings.HasPrefix(phase, "raw SQL") {
				phase = "floor"
			}
			cpuRow(name, phase, x.Floor.CPU)
			name = ""
		}
		phase := "gateway"
		switch {
		case x.Scenario == scReconcile:
			phase = "reconcilers"
		case x.Unit == unitLines:
			phase = "books pass"
		}
		cpuRow(name, phase, x.Gateway.CPU)
	}
	_ = tw.Flush()
	if noisy > 0.2 {
		fmt.Fprintf(w, "  NOTE: other processes kept up to %.2f cores busy; ratios are disturbed (--rounds 3 steadies them).\n", noisy)
	}

	if l := r.Large; l != nil {
		fmt.Fprintf(w, "\nHistory (--large): database %s, %d payments and keys over %d merchants and %d days; ", l.Database, l.Rows, fillMerchants, fillDays)
		if l.Filled > 0 {
			fmt.Fprintf(w, "filled %d rows in %.0f s (%.0f rows/s)\n", l.Filled, l.FillSeconds, l.FillRate)
		} else {
			fmt.Fprintln(w, "reused as it was")
		}
		fmt.Fprintf(w, "History tables (payments, idempotency_keys): %.0f MiB of data and indexes; buffer pool %.0f MiB\n",
			mib(l.TableBytes), mib(l.BufferPoolBytes))
		if pw := l.poolWarning(); pw != "" {
			fmt.Fprintln(w, "  WARNING:", pw)
		}
		fmt.Fprintf(w, "Purge under load: %d keys in its window, %.0f keys/s", l.Purged, l.PurgeRate)
		if l.PurgeErrors != "" {
			fmt.Fprintf(w, ", error: %s", l.PurgeErrors)
		}
		fmt.Fprintln(w)
		if l.BacklogRows > 0 {
			fmt.Fprintf(w, "Reconciler backlog: %d stale rows settled in %.0f s (lookup bound: %.0f s)\n", l.BacklogRows, l.BacklogSecs,
				float64(l.BacklogRows)/(reconcileConc/lookupLatency.Seconds()))
		}
	}
	for _, x := range r.Rows {
		if x.Note != "" && x.Scenario == scLarge {
			fmt.Fprintf(w, "  %d %s: %s\n", x.Scenario, x.Name, x.Note)
		}
	}
	printBooks(w, r.Books)

	fmt.Fprintln(w, "\nPeak RSS of the process (gateway, clients and floor loops share it):")
	tw = tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	for _, x := range r.Rows {
		if x.PeakRSSBytes > 0 {
			fmt.Fprintf(tw, "  during %d %s\t%6.1f MiB\n", x.Scenario, x.Name, mib(x.PeakRSSBytes))
		}
	}
	fmt.Fprintf(tw, "  whole run\t%6.1f MiB\n", mib(r.PeakRSSBytes))
	_ = tw.Flush()
	fmt.Fprintf(w, "\nDB pool (gateway and floor alike): max_open=%d max_idle=%d max_lifetime=%s interpolateParams=%v clientFoundRows=%v\n",
		r.Pool.MaxOpen, r.Pool.MaxIdle, r.Pool.MaxLifetime, r.Pool.InterpolateParams, r.Pool.ClientFoundRows)
	fmt.Fprintf(w, "Database: %s, %s, innodb_flush_log_at_trx_commit=%d, buffer pool %.0f MiB, binlog %s\n",
		r.DB.Server, r.DB.Version, r.DB.FlushLogAtCommit, mib(r.DB.BufferPoolBytes), map[bool]string{true: "on", false: "off"}[r.DB.LogBin != 0])
	for _, v := range r.Violations {
		fmt.Fprintln(w, "VIOLATION:", v)
	}
}

func (r *report) writeJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// amount is a figure of the table in unit: whole numbers, but statements
// per payment to two decimals.
func amount(v float64, unit string) string {
	if unit == unitStatements {
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func ms(v float64) string {
	if v >= 100 {
		return fmt.Sprintf("%.0fms", v)
	}
	return fmt.Sprintf("%.1fms", v)
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
