package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"gateway/psp/fake/fakeserver"
)

// event is one entry of the fault plan. The plan is drawn from the seed
// before the run starts, so a seed names one plan; what the faults hit
// depends on timing, as with any real outage.
type event struct {
	At      time.Duration
	Kind    string
	Target  int           // replica, for kill, freeze and partition
	For     time.Duration // how long the fault lasts (kill: until the restart)
	Profile string        // for the *-profile kinds
}

func (ev event) String() string {
	s := fmt.Sprintf("%6.1fs  %-11s", ev.At.Seconds(), ev.Kind)
	switch ev.Kind {
	case "db-profile", "psp-profile", "psp2-profile":
		s += " " + ev.Profile
	case "kill", "restart":
		s += fmt.Sprintf(" replica %d, started again after %s", ev.Target, ev.For.Round(time.Millisecond))
	case "node-kill":
		s += fmt.Sprintf(" node %d, restarted after %s", ev.Target, ev.For.Round(time.Millisecond))
	case "node-isolate":
		s += fmt.Sprintf(" node %d for %s", ev.Target, ev.For.Round(time.Millisecond))
	case "freeze", "partition":
		s += fmt.Sprintf(" replica %d for %s", ev.Target, ev.For.Round(time.Millisecond))
	case "db-half-open":
		s += fmt.Sprintf(" replica %d", ev.Target)
	default:
		s += fmt.Sprintf(" for %s", ev.For.Round(time.Millisecond))
	}
	return s
}

// Fault profiles. DB rates are per chunk (about one per statement and
// direction); PSP rates are per charge call.
var (
	dbProfiles = map[string]proxyFaults{
		"calm":   {},
		"noisy":  {LatencyMax: 5 * time.Millisecond, ResetRate: 0.0005, DropResponseRate: 0.0005},
		"stormy": {LatencyMin: time.Millisecond, LatencyMax: 25 * time.Millisecond, ResetRate: 0.002, DropResponseRate: 0.002},
	}
	pspProfiles = map[string]fakeserver.Faults{
		"calm":   {Latency: fakeserver.Latency{Max: 10}, ErrorBeforeCharge: 0.01, ErrorAfterCharge: 0.01, TimeoutAfterCharge: 0.005, DropConnectionAfterCharge: 0.01},
		"noisy":  {Latency: fakeserver.Latency{Max: 100}, ErrorBeforeCharge: 0.05, ErrorAfterCharge: 0.05, TimeoutAfterCharge: 0.03, DropConnectionAfterCharge: 0.05},
		"stormy": {Latency: fakeserver.Latency{Max: 300}, ErrorBeforeCharge: 0.10, ErrorAfterCharge: 0.10, TimeoutAfterCharge: 0.05, DropConnectionAfterCharge: 0.10},
		// Slower than the gateway's PSP deadline: charges land after it gave up.
		"slow": {Latency: fakeserver.Latency{Min: 300, Max: 1500}, ErrorBeforeCharge: 0.02, ErrorAfterCharge: 0.02, TimeoutAfterCharge: 0.01, DropConnectionAfterCharge: 0.02},
	}
	// Resets between the gateway and the PSP, on lookups as well as charges.
	pspProxyProfiles = map[string]proxyFaults{
		"calm":   {},
		"noisy":  {ResetRate: 0.002},
		"stormy": {ResetRate: 0.005},
		"slow":   {ResetRate: 0.002},
	}
)

// makePlan draws the fault plan of a run from its seed.
func makePlan(o options) []event {
	r := rand.New(rand.NewPCG(o.seed, o.seed^0x243f6a8885a308d3))
	d := o.duration
	var evs []event
	between := func(lo, hi time.Duration) time.Duration {
		return lo + time.Duration(r.Int64N(int64(hi-lo)+1))
	}
	pick := func(weights map[string]float64) string {
		names := make([]string, 0, len(weights))
		for n := range weights {
			names = append(names, n)
		}
		sort.Strings(names) // map order must not leak into a seeded draw
		x := r.Float64()
		for _, n := range names {
			if x < weights[n] {
				return n
			}
			x -= weights[n]
		}
		return names[len(names)-1]
	}

	// Background weather, changing every few seconds.
	for t := time.Duration(0); t < d; t += between(3*time.Second, 7*time.Second) {
		evs = append(evs,
			event{At: t, Kind: "db-profile", Profile: pick(map[string]float64{"calm": 0.25, "noisy": 0.45, "stormy": 0.30})},
			event{At: t, Kind: "psp-profile", Profile: pick(map[string]float64{"calm": 0.2, "noisy": 0.4, "stormy": 0.25, "slow": 0.15})})
	}
	// Short database outages: refused and reset, or everything stalled.
	for t := between(3*time.Second, 8*time.Second); t < d-2*time.Second; {
		kind := "db-down"
		if r.IntN(2) == 0 {
			kind = "db-stall"
		}
		f := between(time.Second, 3*time.Second)
		evs = append(evs, event{At: t, Kind: kind, For: f})
		t += f + between(8*time.Second, 16*time.Second)
	}
	// The PSP unreachable for a moment (connections refused).
	for t := between(5*time.Second, 12*time.Second); t < d-2*time.Second; {
		f := between(500*time.Millisecond, 2*time.Second)
		evs = append(evs, event{At: t, Kind: "psp-down", For: f})
		t += f + between(12*time.Second, 25*time.Second)
	}
	// SIGKILL a replica, restart it a moment later; now and then a graceful
	// restart (SIGTERM: in-flight requests drain) instead.
	for t := between(2*time.Second, 6*time.Second); t < d-time.Second; t += between(3*time.Second, 9*time.Second) {
		kind := "kill"
		if r.IntN(4) == 0 {
			kind = "restart"
		}
		evs = append(evs, event{At: t, Kind: kind, Target: r.IntN(o.replicas), For: between(100*time.Millisecond, 1500*time.Millisecond)})
	}
	// Long faults of one replica, longer than lease + creation window: a
	// partition from the database, and a paused process (SIGSTOP). One of
	// each per minute, apart so that some replica keeps serving; a run
	// shorter than 40s gets one of the two.
	long := func() time.Duration { return o.lease + o.creationWindow + between(time.Second, 3*time.Second) }
	var kinds []string
	if o.partitions {
		kinds = append(kinds, "partition")
	}
	if o.freezes {
		kinds = append(kinds, "freeze")
	}
	if len(kinds) == 2 && d < 40*time.Second {
		kinds = kinds[r.IntN(2):][:1]
	}
	if d >= 15*time.Second && len(kinds) > 0 {
		slots := max(1, int(d/time.Minute))
		slot := d / time.Duration(slots)
		for i := range slots {
			for j, kind := range kinds {
				// Each kind has its own part of the slot.
				part := slot / time.Duration(len(kinds))
				at := time.Duration(i)*slot + time.Duration(j)*part + between(part/10, part/4)
				evs = append(evs, event{At: at, Kind: kind, Target: r.IntN(o.replicas), For: long()})
			}
		}
	}
	// Cluster faults, one at a time, alternating: SIGKILL a node and
	// restart it once the others have noticed (they need about 3 s), or
	// cut a node off the others for longer than that, so that it leaves
	// the primary component, and heal it.
	if o.cluster && o.nodeFaults {
		kinds := []string{"node-kill", "node-isolate"}
		k := r.IntN(2)
		for t := between(8*time.Second, 15*time.Second); t < d-10*time.Second; k++ {
			ev := event{At: t, Kind: kinds[k%2], Target: r.IntN(o.nodes)}
			if ev.Kind == "node-kill" {
				ev.For = between(5*time.Second, 9*time.Second)
			} else {
				ev.For = between(6*time.Second, 14*time.Second)
			}
			evs = append(evs, ev)
			t += ev.For + between(12*time.Second, 20*time.Second)
		}
	}
	// Half-open sessions: a database connection of one replica loses its
	// client side mid-transaction, its server side left open. Drawn from a
	// stream of their own, so that they leave a seed's other faults as
	// they were. Each is watched until the server ends it (about
	// db.IdleTransactionTimeout), so the last comes that long before the end.
	if o.halfOpen {
		h := rand.New(rand.NewPCG(o.seed, o.seed^0x13198a2e03707344))
		for t := 2*time.Second + time.Duration(h.Int64N(int64(2*time.Second))); t < d-15*time.Second; t += 15*time.Second + time.Duration(h.Int64N(int64(15*time.Second))) {
			evs = append(evs, event{At: t, Kind: "db-half-open", Target: h.IntN(o.replicas)})
		}
	}
	// The second PSP (fake_b): its own weather, and now and then a full
	// outage (every connection refused, several seconds), a brownout (slow,
	// timing out after it charged) or a flap (down and up, again and again).
	// Drawn from a stream of their own, so that --psps leaves the others' draws alone.
	if o.psps == 2 {
		r2 := rand.New(rand.NewPCG(o.seed^0x9e3779b97f4a7c15, o.seed))
		between2 := func(lo, hi time.Duration) time.Duration { return lo + time.Duration(r2.Int64N(int64(hi-lo)+1)) }
		weather := []string{"calm", "calm", "noisy", "noisy", "stormy"}
		for t := time.Duration(0); t < d; t += between2(3*time.Second, 7*time.Second) {
			evs = append(evs, event{At: t, Kind: "psp2-profile", Profile: weather[r2.IntN(len(weather))]})
		}
		kinds := []string{"psp2-outage", "psp2-brownout", "psp2-flap"}
		for i, t := 0, between2(4*time.Second, 7*time.Second); t < d-3*time.Second; i++ {
			f := between2(3*time.Second, 6*time.Second)
			evs = append(evs, event{At: t, Kind: kinds[i%len(kinds)], For: f})
			t += f + between2(4*time.Second, 9*time.Second)
		}
	}
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].At < evs[j].At })
	return evs
}

// injector carries out a plan against an env.
type injector struct {
	e    *env
	plan []event
	wg   sync.WaitGroup

	mu         sync.Mutex
	restarting map[int]bool
	held       map[int]string // replicas under a long fault (partition, freeze): not killed meanwhile

	kills, terms, killsSkipped, restarts, freezes, partitions atomic.Int64
	dbDowns, dbStalls, pspDowns                               atomic.Int64
	psp2Outages, psp2Brownouts, psp2Flaps                     atomic.Int64

	// outages are the second PSP's full outages, pspADowns the first's
	// short ones, as they happened; aHeld holds the first's weather off
	// during the second's outage, aProfile is the weather to go back to.
	outages, pspADowns []window // under mu
	aHeld              bool
	aProfile           string

	// outer bounds what outlives the chaos phase: the watch of a half-open
	// session, which ends when the server ends the session.
	outer     context.Context
	halfArmed atomic.Int64
	halfOpens []halfOpenSession // under mu
}

func newInjector(outer context.Context, e *env, plan []event) *injector {
	return &injector{outer: outer, e: e, plan: plan, restarting: map[int]bool{}, held: map[int]string{}}
}

// run applies the plan from start until ctx ends, then waits until every
// fault it started has ended.
func (x *injector) run(ctx context.Context, start time.Time) {
	for _, ev := range x.plan {
		if !sleepCtx(ctx, time.Until(start.Add(ev.At))) {
			break
		}
		x.wg.Go(func() { x.apply(ctx, ev) })
	}
	<-ctx.Done()
	x.wg.Wait()
}

// sleepCtx waits d; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (x *injector) apply(ctx context.Context, ev event) {
	e := x.e
	switch ev.Kind {
	case "db-profile":
		for _, p := range e.dbProxies {
			p.setFaults(dbProfiles[ev.Profile])
		}
	case "psp-profile":
		x.mu.Lock()
		x.aProfile = ev.Profile
		held := x.aHeld
		x.mu.Unlock()
		if !held {
			x.setWeather(e.psp, e.pspProxy, ev.Profile)
		}
	case "db-down", "db-stall":
		var ends []func()
		for _, p := range e.dbProxies {
			if ev.Kind == "db-down" {
				ends = append(ends, p.down())
			} else {
				ends = append(ends, p.stall())
			}
		}
		if ev.Kind == "db-down" {
			x.dbDowns.Add(1)
		} else {
			x.dbStalls.Add(1)
		}
		sleepCtx(ctx, ev.For)
		for _, end := range ends {
			end()
		}
	case "partition":
		t, ok := x.hold(ev.Target, ev.Kind)
		if !ok {
			return
		}
		defer x.release(t)
		x.partitions.Add(1)
		end := e.dbProxies[t].stall()
		e.say("partition: replica %d cut off from the database for %s", t, ev.For.Round(time.Millisecond))
		sleepCtx(ctx, ev.For)
		end()
	case "psp-down":
		x.pspDowns.Add(1)
		x.down(ctx, e.pspProxy, ev.For, &x.pspADowns)
	case "psp2-profile":
		x.setWeather(e.psp2, e.psp2Proxy, ev.Profile)
	case "psp2-outage":
		// A full outage of one PSP with the other working: fake_a's weather
		// holds off meanwhile (its short outages are left out of the count).
		x.psp2Outages.Add(1)
		x.mu.Lock()
		x.aHeld = true
		x.mu.Unlock()
		_ = e.psp.SetFaults(fakeserver.Faults{})
		e.pspProxy.setFaults(proxyFaults{})
		x.down(ctx, e.psp2Proxy, ev.For, &x.outages)
		// The intents of the outage's last moments are still being charged.
		sleepCtx(ctx, aCalmAfter)
		x.mu.Lock()
		x.aHeld = false
		profile := x.aProfile
		x.mu.Unlock()
		if profile != "" {
			x.setWeather(e.psp, e.pspProxy, profile)
		}
	case "psp2-brownout":
		x.psp2Brownouts.Add(1)
		maxMS := int(x.e.opts.creationWindow / 2 / time.Millisecond)
		f := fakeserver.Faults{Latency: fakeserver.Latency{Min: min(400, maxMS), Max: min(2000, maxMS)}, TimeoutAfterCharge: 0.3, ErrorAfterCharge: 0.1}
		if err := e.psp2.SetFaults(f); err != nil {
			e.say("psp2 faults: %v", err)
		}
		sleepCtx(ctx, ev.For)
		_ = e.psp2.SetFaults(pspProfiles["calm"])
	case "psp2-flap":
		x.psp2Flaps.Add(1)
		for end := time.Now().Add(ev.For); time.Now().Before(end); {
			up := e.psp2Proxy.down()
			if !sleepCtx(ctx, 300*time.Millisecond) {
				up()
				break
			}
			up()
			if !sleepCtx(ctx, 400*time.Millisecond) {
				break
			}
		}
	case "freeze":
		t, ok := x.hold(ev.Target, ev.Kind)
		if !ok {
			return
		}
		defer x.release(t)
		thaw := e.replicas[t].freeze()
		if thaw == nil {
			return
		}
		x.freezes.Add(1)
		e.say("freeze: replica %d stopped (SIGSTOP) for %s", t, ev.For.Round(time.Millisecond))
		sleepCtx(ctx, ev.For)
		thaw()
	case "kill", "restart":
		x.kill(ctx, ev)
	case "node-kill", "node-isolate":
		x.e.cc.apply(ctx, ev)
	case "db-half-open":
		x.halfOpen(ctx, ev)
	}
}

// hold reserves a replica for a long fault: the target, or the next one
// that is neither restarting nor under another long fault.
func (x *injector) hold(target int, kind string) (int, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	n := len(x.e.replicas)
	for i := range n {
		t := (target + i) % n
		if x.held[t] == "" && !x.restarting[t] {
			x.held[t] = kind
			return t, true
		}
	}
	return 0, false
}

func (x *injector) release(t int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.held, t)
}

// kill SIGKILLs a replica (or, for "restart", stops it with SIGTERM) and
// starts it again after ev.For, unless that would leave no replica running
// or the replica is already down or under a long fault.
func (x *injector) kill(ctx context.Context, ev event) {
	r := x.e.replicas[ev.Target]
	x.mu.Lock()
	live := 0
	for i, o := range x.e.replicas {
		if !x.restarting[i] && o.running() != nil {
			live++
		}
	}
	if x.restarting[ev.Target] || x.held[ev.Target] != "" || (len(x.e.replicas) > 1 && live <= 1) {
		x.mu.Unlock()
		x.killsSkipped.Add(1)
		return
	}
	x.restarting[ev.Target] = true
	x.mu.Unlock()
	defer func() {
		x.mu.Lock()
		x.restarting[ev.Target] = false
		x.mu.Unlock()
	}()
	if ev.Kind == "restart" {
		if r.running() == nil {
			x.killsSkipped.Add(1)
			return
		}
		r.stop(15 * time.Second)
		x.terms.Add(1)
	} else {
		if !r.kill() {
			x.killsSkipped.Add(1)
			return
		}
		x.kills.Add(1)
	}
	if !sleepCtx(ctx, ev.For) {
		return // the end of the run brings every replica up
	}
	if err := r.ensureUp(ctx); err == nil {
		x.restarts.Add(1)
	}
}

// calm ends every fault: proxies pass everything, the PSP behaves, no
// replica stays stopped. Call it after run returned.
func (x *injector) calm() {
	for _, p := range x.e.dbProxies {
		p.calm()
	}
	x.e.pspProxy.calm()
	_ = x.e.psp.SetFaults(fakeserver.Faults{})
	if x.e.psp2 != nil {
		x.e.psp2Proxy.calm()
		_ = x.e.psp2.SetFaults(fakeserver.Faults{})
	}
	for _, r := range x.e.replicas {
		r.thaw()
	}
}

// aCalmAfter is how long fake_a's weather stays held off after an outage of fake_b.
const aCalmAfter = 3 * time.Second

// setWeather gives a PSP (and its proxy) a fault profile.
func (x *injector) setWeather(p *fakeserver.Server, proxy *faultProxy, profile string) {
	f := pspProfiles[profile]
	if maxMS := int(x.e.opts.creationWindow / 2 / time.Millisecond); f.Latency.Max > maxMS {
		f.Latency.Max = maxMS // a charge must land within the creation window
		f.Latency.Min = min(f.Latency.Min, maxMS)
	}
	if err := p.SetFaults(f); err != nil {
		x.e.say("psp faults: %v", err)
	}
	proxy.setFaults(pspProxyProfiles[profile])
}

// down takes proxy down for d and records when, in windows (under mu).
func (x *injector) down(ctx context.Context, proxy *faultProxy, d time.Duration, windows *[]window) {
	w := window{From: time.Now()}
	end := proxy.down()
	sleepCtx(ctx, d)
	end()
	w.To = time.Now()
	x.mu.Lock()
	*windows = append(*windows, w)
	x.mu.Unlock()
}
