// Command bench measures the gateway against what the database physically
// allows: every scenario runs the real stack in-process over real HTTP and,
// in the same run and with the same driver settings, pool size and
// concurrency, a raw-SQL loop issuing exactly the statements the design
// needs (the floor). It reports throughput, p50/p99 latency and the ratio to
// the floor, and checks that a hammered key is charged exactly once.
//
//	cd bench && go run . [--duration 10s] [--scenarios 1,2,3,4,5] [--json FILE]
//
// The database is a private MariaDB started in a temporary directory, unless
// GATEWAY_BENCH_DSN (or GATEWAY_TEST_DSN) names a server: then a fresh
// database is created there and dropped afterwards.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		var u usageError
		if errors.As(err, &u) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// usageError is a mistake on the command line: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// options are the command line.
type options struct {
	duration      time.Duration
	rounds        int
	warmup        time.Duration
	scenarios     []int
	jsonFile      string
	replayKeys    int
	reconcileRows int
	cpuProfile    string
	memProfile    string
	mutexProfile  string
	blockProfile  string
	pprofAddr     string
	gatewayLog    string
	large         bool
	largeRows     int
	largeDB       string
	backlogRows   int
	charts        string
	sweepClients  []int
	sweepDuration time.Duration
	// booksLines is scenario 11's ledger; largeBooksLines --large's (0: none).
	booksLines      int
	largeBooksLines int
}

// Scenario numbers, as the issue lists them.
const (
	scFresh = iota + 1
	scReplay
	scSlowPSP
	scHammer
	scReconcile
	scWebhooks
	scRefund
	// scLarge numbers the rows of --large.
	scLarge
	scCapture
	scRoutes
	scBooks
)

// allScenarios are the scenarios --scenarios all runs, in order.
func allScenarios() []int {
	return []int{scFresh, scReplay, scSlowPSP, scHammer, scReconcile, scWebhooks, scRefund, scCapture, scRoutes, scBooks}
}

const usageText = `Usage: go run . [flags]   (in bench/; or make bench BENCH_ARGS='...')

Scenarios (--scenarios takes numbers or names, comma-separated; default all):
  1 fresh        fresh payments, 64 clients, PSP without latency        goal >= 0.80 x floor
  2 replay       replays of completed keys, 64 clients                 goal >= 0.70 x floor
  3 psp-latency  fresh payments, PSP 100 ms, 512 clients, <= 32 conns   goal >= 0.80 x min(floor, 512/0.1 s)
  4 hammer       one key hammered by 64 clients while 64 pay fresh      exactly 1 charge; others >= 0.70 x unhammered
  5 reconcile    reconciler settling stale rows, lookup 20 ms, 1 and 3 reconcilers goal >= 0.95 x lookup bound
  6 webhooks     fresh payments with an endpoint delivered to              goal >= 0.90 x without one
                 dispatcher vs receivers answering in 20 ms               goal >= 0.80 x endpoints x concurrency / 20 ms
  7 refund       fresh partial refunds of succeeded payments, 64 clients   goal >= 0.80 x floor
  9 capture      captures of manual authorizations, 64 clients             goal >= 0.85 x floor
  10 routes      fresh payments, 2 accounts 1:1 vs 1 account, 64 clients  goal >= 0.95 x 1 account
                 DB statements per payment, 2 accounts vs 1               <= 1 account's + 0.05; 1 charge per 201, ~1:1
  11 books       one books pass: --books-lines ledger lines vs 5x as many payments, planted discrepancies found exactly
                 (lines/s, wall time); peak Go heap of a gateway running it   goal <= 256 MiB
                 fresh payments, 64 clients, during books passes             goal >= 0.85 x without
                 (8 is the history, --large)

Environment:
  GATEWAY_BENCH_DSN, GATEWAY_TEST_DSN  a MySQL/MariaDB server DSN to create a throwaway database on
                                       (default: a private MariaDB in a temporary directory)

Exit status: 0 when every check held (goals are reported, not enforced), 1 when the
hammered key was charged other than once, requests failed unexpectedly, or a routes phase
charged other than once per 201, left an account unused or issued more statements per payment
with 2 accounts than with 1, or a books pass stopped short or found other discrepancies than the
planted ones; 2 on usage errors.

Flags:
`

func parseOptions(args []string, stderr io.Writer) (options, bool, error) {
	o := options{}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usageText)
		fs.PrintDefaults()
	}
	fs.DurationVar(&o.duration, "duration", 10*time.Second, "how long each measured phase runs")
	fs.DurationVar(&o.warmup, "warmup", 2*time.Second, "warm-up before each measured phase (not counted)")
	fs.IntVar(&o.rounds, "rounds", 1, "measure each floor and gateway phase this many times, alternately, and report the median\n(steadier numbers on a machine shared with other work)")
	scen := fs.String("scenarios", "all", "scenarios to run: numbers or names, comma-separated, or all")
	fs.StringVar(&o.jsonFile, "json", "", "also write the results as JSON to `FILE`")
	fs.IntVar(&o.replayKeys, "replay-keys", 1024, "completed keys the replay scenario cycles through")
	fs.IntVar(&o.reconcileRows, "reconcile-rows", 10_000, "stale rows the reconciler scenario settles")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to `FILE` (samples carry pprof labels role=server|client|floor|reconciler and scenario)")
	fs.StringVar(&o.memProfile, "memprofile", "", "write an allocation profile to `FILE` at the end")
	fs.StringVar(&o.mutexProfile, "mutexprofile", "", "write a mutex contention profile to `FILE` at the end")
	fs.StringVar(&o.blockProfile, "blockprofile", "", "write a blocking profile to `FILE` at the end")
	fs.StringVar(&o.pprofAddr, "pprof", "", "serve net/http/pprof on `ADDR` (e.g. 127.0.0.1:6060) while running")
	fs.StringVar(&o.gatewayLog, "gateway-log", "", "write the gateway's JSON log to `FILE` (default: formatted, then discarded)")
	fs.BoolVar(&o.large, "large", false, "also run the history scenarios (8): fresh, cold replays and PSP 100 ms on tables holding --large-rows\npayments and keys vs the same on empty tables, the purge of the history's expired keys under load, a\nreconciler backlog of --backlog-rows and a books pass over --large-books-lines ledger lines")
	fs.IntVar(&o.largeRows, "large-rows", 5_000_000, "payments (each with its key) in the history of --large")
	fs.StringVar(&o.largeDB, "large-db", "", "database that keeps the history between runs (default gwbench_history_<rows>; filled where it lacks rows, never dropped)")
	fs.IntVar(&o.backlogRows, "backlog-rows", 100_000, "stale rows of --large's reconciler backlog (0: none)")
	fs.IntVar(&o.booksLines, "books-lines", 20_000, fmt.Sprintf("ledger lines of scenario 11's books pass, against a history of %d times as many payments", booksPerLine))
	fs.IntVar(&o.largeBooksLines, "large-books-lines", 1_000_000, "ledger lines of --large's books pass, against the history of --large-rows payments (0: none)")
	fs.StringVar(&o.charts, "charts", ".artifacts/bench", "write SVG charts (throughput and p99 against clients; with --large, against table size) into `DIR` (empty: none)")
	sweep := fs.String("sweep", "1,4,16,64,256,512", "numbers of clients the charts' sweep of fresh payments measures, gateway and floor")
	fs.DurationVar(&o.sweepDuration, "sweep-duration", 3*time.Second, "measured time of each point of the sweep")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, true, nil
		}
		return o, false, usageError{err.Error()}
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return o, false, usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	switch {
	case o.duration <= 0:
		return o, false, usageError{"--duration must be positive"}
	case o.rounds < 1:
		return o, false, usageError{"--rounds must be at least 1"}
	case o.warmup < 0:
		return o, false, usageError{"--warmup must not be negative"}
	case o.replayKeys < 1:
		return o, false, usageError{"--replay-keys must be at least 1"}
	case o.reconcileRows < 1:
		return o, false, usageError{"--reconcile-rows must be at least 1"}
	case o.largeRows < fillMerchants:
		return o, false, usageError{fmt.Sprintf("--large-rows must be at least %d", fillMerchants)}
	case o.backlogRows < 0:
		return o, false, usageError{"--backlog-rows must not be negative"}
	case booksHistoryFor(o.booksLines) < 1:
		return o, false, usageError{fmt.Sprintf("--books-lines must be more than %d (the planted orphans and changed charges)", booksOrphans+booksChanged)}
	case o.large && o.largeBooksLines != 0 && (booksHistoryFor(o.largeBooksLines) < 1 || booksHistoryFor(o.largeBooksLines) >= o.largeRows):
		return o, false, usageError{fmt.Sprintf("--large-books-lines must be 0, or more than %d and less than --large-rows + %d",
			booksOrphans+booksChanged, booksOrphans+booksChanged)}
	}
	if o.charts != "" {
		var err error
		if o.sweepClients, err = parseSweep(*sweep); err != nil {
			return o, false, usageError{err.Error()}
		}
		if o.sweepDuration <= 0 {
			return o, false, usageError{"--sweep-duration must be positive"}
		}
	}
	sc, err := parseScenarios(*scen)
	if err != nil {
		return o, false, usageError{err.Error()}
	}
	o.scenarios = sc
	return o, false, nil
}

func parseScenarios(s string) ([]int, error) {
	if s == "" || s == "all" {
		return allScenarios(), nil
	}
	seen := map[int]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(strings.ToLower(f))
		n, ok := map[string]int{
			"fresh": scFresh, "replay": scReplay, "psp-latency": scSlowPSP, "hammer": scHammer, "reconcile": scReconcile,
			"webhooks": scWebhooks, "refund": scRefund, "capture": scCapture, "routes": scRoutes, "books": scBooks,
		}[f]
		if !ok {
			var err error
			n, err = strconv.Atoi(f)
			if err != nil || !slices.Contains(allScenarios(), n) {
				return nil, fmt.Errorf("unknown scenario %q: use 1-7, 9-11 or fresh, replay, psp-latency, hammer, reconcile, webhooks, refund, capture, routes, books", f)
			}
		}
		seen[n] = true
	}
	var out []int
	for _, n := range allScenarios() {
		if seen[n] {
			out = append(out, n)
		}
	}
	return out, nil
}

// run is the whole program; main only wires the process to it, and the test calls it.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	opts, help, err := parseOptions(args, stderr)
	if help || err != nil {
		return err
	}
	stopProfiles, err := startProfiles(opts, stderr)
	if err != nil {
		return err
	}
	prog := newProgress(stderr)
	b, err := setup(ctx, opts, getenv, prog)
	if err != nil {
		return errors.Join(err, stopProfiles())
	}
	rep, runErr := b.runAll(ctx)
	closeErr := b.close()
	profErr := stopProfiles()
	if rep != nil {
		rep.print(stdout)
		if opts.charts != "" {
			files, err := writeCharts(rep, opts.charts)
			if err != nil {
				runErr = errors.Join(runErr, fmt.Errorf("charts: %w", err))
			}
			for _, f := range files {
				fmt.Fprintln(stdout, "chart:", f)
			}
		}
		if opts.jsonFile != "" {
			if err := rep.writeJSON(opts.jsonFile); err != nil {
				runErr = errors.Join(runErr, err)
			}
		}
		if v := rep.problems(); v != nil {
			runErr = errors.Join(runErr, v)
		}
	}
	return errors.Join(runErr, closeErr, profErr)
}
