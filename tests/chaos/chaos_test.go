package main

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestChaosShort is the chaos run of `make proofs`: the whole thing, shortened,
// with a fixed seed. It fails on any invariant violation, and when the run
// proved too little (no PSP fault after charging, no refund race, no
// partial capture, void, lapse or cancellation by key). The database is
// GATEWAY_TEST_DSN's server when set, a private MariaDB otherwise.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos run takes about a minute: make proofs runs it")
	}
	var out bytes.Buffer
	rep, err := run(t.Context(), []string{"--duration", "20s", "--seed", "3", "--clients", "32"},
		os.Getenv, &out, logWriter{t})
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Violations > 0 {
		t.Fatalf("%d invariant violation(s), see the report above", rep.Violations)
	}
	f := rep.Faults
	if f["replicas"]["kills"]+f["replicas"]["graceful stops"] == 0 || f["psp"]["error_after_charge"] == 0 ||
		f["db proxies"]["resets"]+f["db proxies"]["dropped_responses"]+f["db proxies"]["outage_resets"] == 0 ||
		f["db proxies"]["half_open"] == 0 {
		t.Fatalf("the run injected too few faults to prove anything: %v", rep.Faults)
	}
	if r := rep.Refunds; r == nil || r.Ledger == 0 || r.Rows["succeeded"] == 0 || r.Jobs["concurrent"] == 0 || len(r.PSPFaults) == 0 {
		t.Fatalf("the run refunded too little to prove anything: %+v", rep.Refunds)
	}
	if c := rep.Captures; c == nil || c.Captures == 0 || c.Partial == 0 || c.Voids == 0 || c.Authorizations["lapsed"] == 0 ||
		c.Jobs["concurrent"]+c.Jobs["race"] == 0 || len(c.Cancellations) == 0 || len(c.PSPFaults) == 0 {
		t.Fatalf("the run captured, voided or canceled too little to prove anything: %+v", rep.Captures)
	}
}

// logWriter sends progress lines to the test log.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func TestPlanIsSeeded(t *testing.T) {
	o := options{duration: 3 * time.Minute, seed: 7, replicas: 2, lease: 3 * time.Second, creationWindow: 5 * time.Second, partitions: true, freezes: true, halfOpen: true}
	a, b := makePlan(o), makePlan(o)
	if len(a) == 0 || len(a) != len(b) {
		t.Fatalf("plans of one seed differ in length: %d, %d", len(a), len(b))
	}
	kinds := map[string]int{}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("plans of one seed differ at %d: %v / %v", i, a[i], b[i])
		}
		kinds[a[i].Kind]++
	}
	for _, k := range []string{"kill", "restart", "db-down", "db-stall", "psp-down", "partition", "freeze", "db-profile", "psp-profile", "db-half-open"} {
		if kinds[k] == 0 {
			t.Errorf("a 3-minute plan has no %s: %v", k, kinds)
		}
	}
	// A second PSP adds its outages, brownouts and flaps without changing the others' draws.
	o.psps = 2
	var others []event
	psp2 := map[string]int{}
	for _, ev := range makePlan(o) {
		if strings.HasPrefix(ev.Kind, "psp2-") {
			psp2[ev.Kind]++
		} else {
			others = append(others, ev)
		}
	}
	if !slices.Equal(others, a) {
		t.Errorf("--psps 2 changed the plan's other faults")
	}
	for _, k := range []string{"psp2-outage", "psp2-brownout", "psp2-flap", "psp2-profile"} {
		if psp2[k] == 0 {
			t.Errorf("a 3-minute plan with two PSPs has no %s: %v", k, psp2)
		}
	}
	o.psps = 0
	if kinds["node-kill"]+kinds["node-isolate"] > 0 {
		t.Errorf("a plan without --cluster has node faults: %v", kinds)
	}
	o.seed = 8
	if c := makePlan(o); len(c) == len(a) && c[0] == a[0] && c[len(c)-1] == a[len(a)-1] {
		t.Errorf("seeds 7 and 8 drew the same plan")
	}
	// Half-open faults are drawn apart: without them, the plan is the same less them.
	o.seed, o.halfOpen = 7, false
	var noHalf []event
	for _, ev := range a {
		if ev.Kind != "db-half-open" {
			noHalf = append(noHalf, ev)
		}
	}
	if !slices.Equal(makePlan(o), noHalf) {
		t.Errorf("--half-open changed the plan's other faults")
	}
	o.halfOpen = true
	// A cluster run adds node faults without changing the draws of the others.
	o.seed, o.cluster, o.nodes, o.nodeFaults = 7, true, 3, true
	withNodes := makePlan(o)
	var rest []event
	var nodeFaults []event
	for _, ev := range withNodes {
		if ev.Kind == "node-kill" || ev.Kind == "node-isolate" {
			nodeFaults = append(nodeFaults, ev)
			continue
		}
		rest = append(rest, ev)
	}
	if !slices.Equal(rest, a) {
		t.Errorf("--cluster changed the plan's other faults")
	}
	seen := map[string]bool{}
	for i, ev := range nodeFaults {
		seen[ev.Kind] = true
		if i > 0 && ev.At < nodeFaults[i-1].At+nodeFaults[i-1].For {
			t.Errorf("node faults overlap: %v and %v", nodeFaults[i-1], ev)
		}
		if ev.Kind == "node-isolate" && ev.For < 6*time.Second {
			t.Errorf("%v is too short to leave the primary component", ev)
		}
	}
	if !seen["node-kill"] || !seen["node-isolate"] {
		t.Errorf("a 3-minute cluster plan lacks a node kill or a node isolation: %v", nodeFaults)
	}
}

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func newTestProxy(t *testing.T) *faultProxy {
	t.Helper()
	p, err := newFaultProxy("test", echoServer(t), 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.close)
	return p
}

// roundTrip sends line and reads the echo within timeout.
func roundTrip(c net.Conn, line string, timeout time.Duration) (string, error) {
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		return "", err
	}
	return bufio.NewReader(c).ReadString('\n')
}

func TestProxyPassesStallsAndRecovers(t *testing.T) {
	p := newTestProxy(t)
	c, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := roundTrip(c, "one", time.Second); err != nil || got != "one\n" {
		t.Fatalf("through a calm proxy: %q, %v", got, err)
	}
	end := p.stall()
	if _, err := roundTrip(c, "two", 200*time.Millisecond); err == nil {
		t.Fatal("an answer came through a stalled proxy")
	}
	end()
	// The held bytes arrive once the stall ends.
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if got, err := bufio.NewReader(c).ReadString('\n'); err != nil || got != "two\n" {
		t.Fatalf("after the stall: %q, %v", got, err)
	}
}

func TestProxyDownRefusesThenListensAgain(t *testing.T) {
	p := newTestProxy(t)
	c, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := roundTrip(c, "one", time.Second); err != nil {
		t.Fatal(err)
	}
	up := p.down()
	if _, err := roundTrip(c, "two", time.Second); err == nil {
		t.Fatal("an open connection survived the outage")
	}
	if c2, err := net.Dial("tcp", p.addr); err == nil {
		c2.Close()
		t.Fatal("a new connection was accepted during the outage")
	}
	up()
	c3, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatalf("after the outage: %v", err)
	}
	defer c3.Close()
	if got, err := roundTrip(c3, "three", time.Second); err != nil || got != "three\n" {
		t.Fatalf("after the outage: %q, %v", got, err)
	}
}

func TestProxyDropsResponsesAfterDelivering(t *testing.T) {
	p := newTestProxy(t)
	p.setFaults(proxyFaults{DropResponseRate: 1})
	c, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = roundTrip(c, "lost", time.Second)
	var ne net.Error
	if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("want the connection reset instead of the answer, got %v", err)
	}
	if n := p.stats.DroppedResponses.Load(); n != 1 {
		t.Fatalf("%d dropped responses counted, want 1", n)
	}
}
