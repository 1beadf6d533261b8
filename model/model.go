// Package model owns the SPIN models of the payment protocol (charge.pml,
// refund.pml; capture.pml: captures and voids of an authorization;
// cancelkey.pml: cancel-by-key; attempts.pml: failover between PSP
// accounts), of the paths around it (notice.pml: PSP notifications
// against final answers; eventlog.pml: GET /events paging; delivery.pml:
// webhook deliveries against the purge; refundq.pml: the refund queue) and
// the runner that checks them: every property over every interleaving of a
// small world, and every mutant and known gap, which must fail. The models
// name, beside each atomic step, the Go function and the SQL it stands
// for; README.md in this directory says what each check shows.
package model

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

//go:embed charge.pml refund.pml capture.pml cancelkey.pml notice.pml eventlog.pml delivery.pml refundq.pml attempts.pml
var models embed.FS

// Check is one run of the model checker over one configuration of a model.
type Check struct {
	// Name identifies the check in the summary and in -run patterns.
	Name string
	// Model is the file checked: charge.pml, refund.pml, capture.pml,
	// cancelkey.pml, attempts.pml, notice.pml, eventlog.pml, delivery.pml or
	// refundq.pml.
	Model string
	// Flags configure the model (spin -D…), see the model's header.
	Flags []string
	// LTL names the formula of a liveness check (pan -a -f); empty for a
	// safety check (assertions and end states).
	LTL string
	// Expect lists the properties of which one must be violated; empty
	// means every property must hold.
	Expect []string
	// What says in one line what the check shows.
	What string
	// Quick marks the checks go test runs (in their smaller worlds): every
	// mutant and fixed finding, and the properties in worlds that take seconds.
	Quick bool
	// Optimize compiles the verifier with -O2: worth it for a search of
	// millions of states, not for one that stops at its first counter-example.
	Optimize bool
	// HashBits is log2 of the slots of pan's hash table (-w) in an
	// optimized search; 0 means 26. A smaller table saves its memory where
	// the states are a few times 2^HashBits.
	HashBits int
}

// Result is what pan reported for a check.
type Result struct {
	Check       Check
	States      int64   // states stored
	Transitions float64 // stored + matched
	MemoryMB    float64 // pan's total actual memory usage
	Depth       int64
	Compile     time.Duration // spin -a and the C compiler, wall clock
	Elapsed     time.Duration // the search, wall clock (pan's own figure)
	CPU         time.Duration // the search, CPU time (user + system)
	// Violated names what pan found: a property (p1_once, …, p5, p6live,
	// p7_truth, …, p10live, p11_cap, …, p12_late, p13_once, …), or
	// "invalid end state"; empty when the search found nothing.
	Violated string
	// Output is pan's full report.
	Output string
}

// OK reports whether the result is what the check expects: every property
// holds, or one of the expected ones is violated.
func (r Result) OK() bool {
	if len(r.Check.Expect) == 0 {
		return r.Violated == ""
	}
	for _, p := range r.Check.Expect {
		if r.Violated == p {
			return true
		}
	}
	return false
}

// Tools are the programs a run needs.
type Tools struct {
	Spin, CC string
}

// FindTools locates spin and a C compiler, or says what to install.
func FindTools() (Tools, error) {
	spin, err := exec.LookPath("spin")
	if err != nil {
		return Tools{}, errors.New("the SPIN model checker is not installed: apt-get install spin (Debian/Ubuntu package \"spin\")")
	}
	for _, cc := range []string{"gcc", "cc", "clang"} {
		if p, err := exec.LookPath(cc); err == nil {
			return Tools{Spin: spin, CC: p}, nil
		}
	}
	return Tools{}, errors.New("no C compiler for SPIN's verifier: apt-get install gcc")
}

// ErrIncomplete is returned when pan could not search the whole state space
// (memory or depth ran out): its silence would prove nothing.
var ErrIncomplete = errors.New("model: the search did not complete")

// Run checks c in dir, an empty scratch directory: it writes the model
// there, generates the verifier with spin, compiles it and runs it.
func Run(ctx context.Context, tools Tools, dir string, c Check) (Result, error) {
	res := Result{Check: c}
	src, err := models.ReadFile(c.Model)
	if err != nil {
		return res, fmt.Errorf("model.Run(%s): %w", c.Name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, c.Model), src, 0o644); err != nil {
		return res, fmt.Errorf("model.Run(%s): %w", c.Name, err)
	}
	start := time.Now()
	if out, _, err := command(ctx, dir, tools.Spin, append(append([]string{"-a"}, c.Flags...), c.Model)...); err != nil {
		return res, fmt.Errorf("model.Run(%s): spin -a: %w\n%s", c.Name, err, out)
	}
	// Safety checks leave out the never claim and the cycle detection;
	// liveness checks need weak fairness over the model's six processes.
	opt := "-O0"
	if c.Optimize {
		opt = "-O2"
	}
	cflags := []string{opt, "-w", "-DMEMLIM=6144", "-o", "pan", "pan.c"}
	if c.LTL == "" {
		cflags = append([]string{"-DSAFETY", "-DNOCLAIM"}, cflags...)
	} else {
		cflags = append([]string{"-DNFAIR=3"}, cflags...)
	}
	if out, _, err := command(ctx, dir, tools.CC, cflags...); err != nil {
		return res, fmt.Errorf("model.Run(%s): compiling pan: %w\n%s", c.Name, err, out)
	}
	res.Compile = time.Since(start)
	// The hash table only speeds the search up: large for the big worlds,
	// small where its allocation would cost more than the search.
	args := []string{"-m1000000", "-w22"}
	if c.Optimize {
		args[1] = "-w26"
		if c.HashBits > 0 {
			args[1] = "-w" + strconv.Itoa(c.HashBits)
		}
	}
	if c.LTL != "" {
		args = append([]string{"-a", "-f", "-N", c.LTL}, args...)
	}
	out, cpu, err := command(ctx, dir, "./pan", args...)
	res.Output, res.CPU = out, cpu
	if err != nil {
		return res, fmt.Errorf("model.Run(%s): pan: %w\n%s", c.Name, err, out)
	}
	if err := parse(&res); err != nil {
		return res, fmt.Errorf("model.Run(%s): %w", c.Name, err)
	}
	return res, nil
}

// command runs name in dir and returns its output and the CPU time it used.
func command(ctx context.Context, dir, name string, args ...string) (string, time.Duration, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var cpu time.Duration
	if cmd.ProcessState != nil {
		cpu = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	return out.String(), cpu, err
}

var (
	reStored  = regexp.MustCompile(`(\d+) states, stored`)
	reTrans   = regexp.MustCompile(`([0-9.e+]+) transitions \(= `)
	reMemory  = regexp.MustCompile(`([0-9.]+)\s+total actual memory usage`)
	reElapsed = regexp.MustCompile(`pan: elapsed time ([0-9.e+]+) seconds`)
	reDepth   = regexp.MustCompile(`depth reached (\d+), errors: (\d+)`)
	reProp    = regexp.MustCompile(`\b(p[0-9]+_[a-z]+)\b`)
)

func parse(r *Result) error {
	out := r.Output
	m := reDepth.FindStringSubmatch(out)
	if m == nil {
		return fmt.Errorf("unexpected pan output:\n%s", out)
	}
	r.Depth, _ = strconv.ParseInt(m[1], 10, 64)
	errs, _ := strconv.Atoi(m[2])
	// pan stops at the first error and says so; without one, a stop means
	// part of the state space was never looked at.
	if errs == 0 && (strings.Contains(out, "Search not completed") ||
		strings.Contains(out, "max search depth too small") || strings.Contains(out, "out of memory")) {
		return ErrIncomplete
	}
	if m := reStored.FindStringSubmatch(out); m != nil {
		r.States, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if m := reTrans.FindStringSubmatch(out); m != nil {
		r.Transitions, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := reMemory.FindStringSubmatch(out); m != nil {
		r.MemoryMB, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := reElapsed.FindStringSubmatch(out); m != nil {
		s, _ := strconv.ParseFloat(m[1], 64)
		r.Elapsed = time.Duration(s * float64(time.Second))
	}
	if errs == 0 {
		return nil
	}
	line := ""
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "pan:1:") {
			line = l
			break
		}
	}
	switch {
	case strings.Contains(line, "assertion violated"):
		// The model's assertions start with an always-false ghost bit named
		// after the property: assert(p1_once || …).
		if m := reProp.FindStringSubmatch(line); m != nil {
			r.Violated = m[1]
		} else {
			r.Violated = "assertion: " + strings.TrimPrefix(line, "pan:1: ")
		}
	case strings.Contains(line, "acceptance cycle"), strings.Contains(line, "non-progress cycle"):
		r.Violated = r.Check.LTL
	case strings.Contains(line, "invalid end state"):
		r.Violated = "invalid end state"
	default:
		r.Violated = strings.TrimPrefix(line, "pan:1: ")
	}
	return nil
}

// Trail replays the counter-example a failed Run left in dir and returns it
// as one line per step: the actor and the statements it executed. Clock
// ticks are one line each.
func Trail(ctx context.Context, tools Tools, dir string, c Check) (string, error) {
	out, _, err := command(ctx, dir, tools.Spin, append(append([]string{"-t", "-p"}, c.Flags...), c.Model)...)
	if err != nil {
		return "", fmt.Errorf("model.Trail(%s): %w\n%s", c.Name, err, out)
	}
	return story(out), nil
}

var reStep = regexp.MustCompile(`^\s*(\d+):\s+proc\s+(\d+) \((\w+)[^)]*\) \S+:\d+ \(state \d+\)\s+\[(.*)\]$`)

// noise are statements that say nothing about the protocol.
var noise = regexp.MustCompile(`^(nt = |DO$|goto |\.\(goto\)|\(1\)$|else$|break$|undo_ok|assert\(|D_STEP)`)

func story(trail string) string {
	type step struct {
		actor string
		stmts []string
	}
	var (
		steps []step
		last  string
		b     strings.Builder
	)
	for _, l := range strings.Split(trail, "\n") {
		m := reStep.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		key := m[1] + "/" + m[2]
		if key != last {
			steps = append(steps, step{actor: m[3] + "#" + m[2]})
			last = key
		}
		steps[len(steps)-1].stmts = append(steps[len(steps)-1].stmts, m[4])
	}
	for i := 0; i < len(steps); i++ {
		s := steps[i]
		if strings.HasPrefix(s.actor, "Clock") {
			// One tick is several steps of the Clock process in a row.
			for i+1 < len(steps) && steps[i+1].actor == s.actor {
				i++
			}
			b.WriteString("            --- tick ---\n")
			continue
		}
		var keep []string
		for _, st := range s.stmts {
			if !noise.MatchString(st) {
				keep = append(keep, st)
			}
		}
		if len(keep) > 0 {
			fmt.Fprintf(&b, "%-12s%s\n", s.actor, strings.Join(keep, "; "))
		}
	}
	return b.String()
}
