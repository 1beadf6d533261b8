package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"
)

// throughputCase is one database set-up the throughput mode measures.
type throughputCase struct {
	name     string
	cluster  bool
	syncWait int
}

// throughputResult is what one case measured.
type throughputResult struct {
	name       string
	fresh      int64 // 201 answers to new keys
	other      map[string]int64
	elapsed    time.Duration
	p50, p99   time.Duration
	conflicts  int64 // certification failures and BF aborts (cluster)
	deadlocks  int64 // 1213 errors delivered to the replicas
	setupTaken time.Duration
}

// measureThroughput runs the same load of fresh payments (new keys, a card
// that succeeds, no faults anywhere) against the gateway on one private
// server and on a private three-node cluster with the replicas spread over
// the nodes (without and with causal reads on every statement), and prints
// payments per second of each. It is informational:
// one machine shows what certification costs, not what a cluster of
// machines gains.
func measureThroughput(ctx context.Context, opts options, stdout, stderr io.Writer, began time.Time) error {
	say := func(format string, args ...any) {
		fmt.Fprintf(stderr, "chaos %6.1fs  %s\n", time.Since(began).Seconds(), fmt.Sprintf(format, args...))
	}
	if opts.gatewayBin == "" {
		dir, err := os.MkdirTemp("", "gateway-throughput-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		say("building the gateway")
		if opts.gatewayBin, err = buildGateway(ctx, dir); err != nil {
			return err
		}
	}
	cases := []throughputCase{
		{name: "one server"},
		{name: fmt.Sprintf("Galera, %d nodes", opts.nodes), cluster: true},
		{name: fmt.Sprintf("Galera, %d nodes, wsrep_sync_wait=1", opts.nodes), cluster: true, syncWait: 1},
	}
	noEnv := func(string) string { return "" } // private servers for both, alike
	var results []throughputResult
	for _, tc := range cases {
		o := opts
		o.cluster, o.nodeFaults, o.syncWait = tc.cluster, false, tc.syncWait
		say("%s: starting %d replicas", tc.name, o.replicas)
		t0 := time.Now()
		e, err := setup(ctx, o, noEnv, say)
		if err != nil {
			return err
		}
		res, err := e.loadFresh(ctx, o)
		e.teardown(false)
		if err != nil {
			return err
		}
		res.name, res.setupTaken = tc.name, time.Since(t0)-res.elapsed
		say("%s: %d fresh payments in %s", tc.name, res.fresh, res.elapsed.Round(time.Millisecond))
		results = append(results, res)
	}
	tw := tabwriter.NewWriter(stdout, 2, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "\nFresh payments, no faults: %d replicas, %d clients, %s each (after a 2s warm-up)\n\n", opts.replicas, opts.clients, opts.duration)
	fmt.Fprintln(tw, "DATABASE\tPAYMENTS/S\tP50\tP99\tCERT CONFLICTS\t1213 ERRORS\tOTHER ANSWERS")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%d\t%d\t%s\n", r.name, float64(r.fresh)/r.elapsed.Seconds(),
			r.p50.Round(100*time.Microsecond), r.p99.Round(100*time.Microsecond), r.conflicts, r.deadlocks, kv(r.other))
	}
	_ = tw.Flush()
	fmt.Fprintln(stdout)
	if base := results[0]; base.fresh > 0 {
		rate := func(r throughputResult) float64 { return float64(r.fresh) / r.elapsed.Seconds() }
		for _, r := range results[1:] {
			fmt.Fprintf(stdout, "%s / %s: %.2f\n", r.name, base.name, rate(r)/rate(base))
		}
	}
	return nil
}

// loadFresh posts fresh payments from o.clients clients, round robin over
// the replicas, for 2s of warm-up and then o.duration.
func (e *env) loadFresh(ctx context.Context, o options) (throughputResult, error) {
	res := throughputResult{other: map[string]int64{}}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.clients, MaxIdleConns: 4 * o.clients}}
	defer client.CloseIdleConnections()
	body := []byte(`{"amount": 1000, "currency": "KRW", "payment_method": "pm_card_ok"}`)

	var counting atomic.Bool
	var fresh atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	runCtx, cancel := context.WithTimeout(ctx, 2*time.Second+o.duration)
	defer cancel()
	var startCert int64
	if e.cc != nil {
		e.cc.mon.poll(ctx)
	}
	var wg sync.WaitGroup
	for id := range o.clients {
		wg.Go(func() {
			m := e.merchants[id%len(e.merchants)]
			for seq := 0; runCtx.Err() == nil; seq++ {
				key := fmt.Sprintf("tp-%d-%d-%d", o.seed, id, seq)
				r := e.replicas[(id+seq)%len(e.replicas)]
				t := time.Now()
				a, err := doPost(runCtx, client, r.url(), m.APIKey, key, body, 10*time.Second)
				d := time.Since(t)
				if runCtx.Err() != nil || !counting.Load() {
					continue
				}
				mu.Lock()
				switch {
				case err != nil:
					res.other["network error"]++
				case a.Status == http.StatusCreated && !a.Replayed:
					fresh.Add(1)
					lat = append(lat, d)
				default:
					res.other[fmt.Sprint(a.Status)]++
				}
				mu.Unlock()
			}
		})
	}
	if !sleepCtx(ctx, 2*time.Second) {
		cancel()
		wg.Wait()
		return res, ctx.Err()
	}
	if e.cc != nil {
		e.cc.mon.poll(ctx)
		startCert = e.conflicts()
	}
	deadlocksBefore := e.deadlocks()
	counting.Store(true)
	t0 := time.Now()
	<-runCtx.Done()
	counting.Store(false)
	res.elapsed = time.Since(t0)
	wg.Wait()
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	if e.cc != nil {
		e.cc.mon.poll(ctx)
		res.conflicts = e.conflicts() - startCert
	}
	res.deadlocks = e.deadlocks() - deadlocksBefore
	res.fresh = fresh.Load()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	if len(lat) > 0 {
		res.p50, res.p99 = lat[len(lat)/2], lat[len(lat)*99/100]
	}
	return res, nil
}

// conflicts is the cluster's certification failures and BF aborts so far.
func (e *env) conflicts() int64 {
	e.cc.mon.mu.Lock()
	defer e.cc.mon.mu.Unlock()
	var n int64
	for i := range e.cc.mon.cert {
		n += e.cc.mon.cert[i] + e.cc.mon.bf[i]
	}
	return n
}

// deadlocks is the 1213 errors the database proxies delivered so far.
func (e *env) deadlocks() int64 {
	var n int64
	for _, p := range e.dbProxies {
		n += p.mysqlErrors()[1213]
	}
	return n
}
