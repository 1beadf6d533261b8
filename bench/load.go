package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// group is a set of closed-loop clients running one operation: each client
// issues a request, waits for the answer, and issues the next at once.
type group struct {
	name    string
	clients int
	// op performs one request. An error is an unexpected answer: counted, but
	// neither in the throughput nor in the latencies.
	op func(ctx context.Context, c *client) error
}

// client is one closed-loop client's state.
type client struct {
	id  int
	seq int
	rng *rand.Rand
}

// stats is what one group did in the measured window.
type stats struct {
	Clients    int     `json:"clients"`
	Requests   int     `json:"requests"`
	Errors     int     `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	Seconds    float64 `json:"seconds"`
	Throughput float64 `json:"throughput"`
	P50        float64 `json:"p50_ms"`
	P99        float64 `json:"p99_ms"`
	CPU        cpuUse  `json:"cpu"`
	// Rounds holds each round's throughput when there were several.
	Rounds    []float64 `json:"round_throughputs,omitempty"`
	latencies []float64 // ms, sorted
}

// sample is one completed request: when it ended and how long it took,
// both relative to the phase's start.
type sample struct {
	end, took time.Duration
}

// Phase states.
const (
	warming int32 = iota
	measuring
	stopping
)

// window is a phase's measured window: wait blocks for as long as it lasts
// (false when ctx ended), expect is how long that is thought to be, for the
// progress line.
type window struct {
	expect time.Duration
	wait   func(ctx context.Context) bool
}

// fixedWindow is --duration.
func (b *bench) fixedWindow() window {
	d := b.opts.duration
	return window{expect: d, wait: func(ctx context.Context) bool { return sleep(ctx, d) }}
}

// runPhase runs the groups together: a warm-up, then a measured window of
// --duration. Requests completing within the window count; those in flight
// when it closes finish but are not counted. The labels tag the clients'
// goroutines for CPU profiles.
func (b *bench) runPhase(ctx context.Context, title string, labels []string, groups ...group) ([]stats, error) {
	return b.runPhaseIn(ctx, title, labels, b.fixedWindow(), groups...)
}

// runPhaseIn is runPhase with the measured window w.
func (b *bench) runPhaseIn(ctx context.Context, title string, labels []string, w window, groups ...group) ([]stats, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		state    atomic.Int32
		done     atomic.Int64 // completed in the window, for the progress line
		wg       sync.WaitGroup
		mu       sync.Mutex
		base     = time.Now()
		perGroup = make([][]sample, len(groups))
		errs     = make([]int, len(groups))
		firstErr = make([]error, len(groups))
	)
	var measureStart, measureEnd time.Duration
	run := func(gi int, id int) {
		defer wg.Done()
		g := groups[gi]
		c := &client{id: id, rng: rand.New(rand.NewPCG(uint64(id), uint64(base.UnixNano())))}
		var local []sample
		nerr := 0
		var ferr error
		for state.Load() != stopping && ctx.Err() == nil {
			t0 := time.Since(base)
			err := g.op(ctx, c)
			t1 := time.Since(base)
			c.seq++
			if state.Load() != measuring {
				continue
			}
			if err != nil {
				if ctx.Err() != nil {
					break
				}
				nerr++
				if ferr == nil {
					ferr = err
				}
				continue
			}
			local = append(local, sample{end: t1, took: t1 - t0})
			done.Add(1)
		}
		mu.Lock()
		perGroup[gi] = append(perGroup[gi], local...)
		errs[gi] += nerr
		if firstErr[gi] == nil {
			firstErr[gi] = ferr
		}
		mu.Unlock()
	}
	id := 0
	for gi, g := range groups {
		for range g.clients {
			wg.Add(1)
			id++
			cid := id
			go pprof.Do(ctx, pprof.Labels(labels...), func(context.Context) { run(gi, cid) })
		}
	}

	stop := b.prog.phase(title, b.opts.warmup, w.expect, &done)
	ok := sleep(ctx, b.opts.warmup)
	cpu0 := takeCPU(b.dbEnv.pid)
	measureStart = time.Since(base)
	state.Store(measuring)
	ok = ok && w.wait(ctx)
	measureEnd = time.Since(base)
	state.Store(stopping)
	cpu := cpuBetween(cpu0, takeCPU(b.dbEnv.pid))
	stop()
	wg.Wait()
	if !ok || ctx.Err() != nil {
		return nil, fmt.Errorf("%s: interrupted", title)
	}

	window := measureEnd - measureStart
	all := 0
	for gi := range groups {
		for _, s := range perGroup[gi] {
			if s.end >= measureStart && s.end < measureEnd {
				all++
			}
		}
	}
	// The groups share the machine: a request's CPU cost is the phase's CPU
	// over every group's requests.
	cpu.PerRequest = perRequest(cpu, float64(all)/window.Seconds())
	out := make([]stats, len(groups))
	for gi, g := range groups {
		var lat []float64
		for _, s := range perGroup[gi] {
			if s.end >= measureStart && s.end < measureEnd {
				lat = append(lat, float64(s.took)/float64(time.Millisecond))
			}
		}
		slices.Sort(lat)
		st := stats{Clients: g.clients, Requests: len(lat), Errors: errs[gi], Seconds: window.Seconds(),
			Throughput: float64(len(lat)) / window.Seconds(), CPU: cpu, latencies: lat}
		st.P50, st.P99 = quantile(lat, 0.50), quantile(lat, 0.99)
		if firstErr[gi] != nil {
			st.FirstError = firstErr[gi].Error()
		}
		out[gi] = st
	}
	return out, nil
}

// mergeStats combines the rounds of one measurement: the median round's
// throughput (robust to one round disturbed by the rest of the machine),
// latencies over every request of every round, the mean CPU use.
func mergeStats(rounds []stats) stats {
	if len(rounds) == 1 {
		return rounds[0]
	}
	out := stats{Clients: rounds[0].Clients}
	var thr []float64
	for _, r := range rounds {
		out.Requests += r.Requests
		out.Errors += r.Errors
		out.Seconds += r.Seconds
		if out.FirstError == "" {
			out.FirstError = r.FirstError
		}
		thr = append(thr, r.Throughput)
		out.latencies = append(out.latencies, r.latencies...)
		n := float64(len(rounds))
		out.CPU.Bench += r.CPU.Bench / n
		out.CPU.DB += r.CPU.DB / n
		out.CPU.IRQ += r.CPU.IRQ / n
		out.CPU.Other += r.CPU.Other / n
		out.CPU.Idle += r.CPU.Idle / n
		out.CPU.PerRequest += r.CPU.PerRequest / n
	}
	slices.Sort(thr)
	out.Throughput = thr[len(thr)/2]
	if len(thr)%2 == 0 {
		out.Throughput = (thr[len(thr)/2-1] + thr[len(thr)/2]) / 2
	}
	out.Rounds = thr
	slices.Sort(out.latencies)
	out.P50, out.P99 = quantile(out.latencies, 0.50), quantile(out.latencies, 0.99)
	return out
}

// perRequest is the CPU microseconds a request cost the machine.
func perRequest(c cpuUse, throughput float64) float64 {
	if throughput <= 0 {
		return 0
	}
	return (c.Bench + c.DB + c.IRQ) / throughput * 1e6
}

// quantile of sorted values, nearest rank.
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// sleep waits d or until ctx ends; false when ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
