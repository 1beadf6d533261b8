package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"gateway/psp"
	"gateway/routing"
)

type pspsCmd struct {
	List pspsListCmd `cmd:"" help:"Each PSP account: its adapter, capabilities, the routes that use it, and whether it answers now."`
}

type pspsListCmd struct {
	PSP        pspConfig     `embed:""`
	Admin      adminConfig   `embed:""`
	PSPTimeout time.Duration `name:"psp-timeout" env:"GATEWAY_PSP_TIMEOUT" default:"10s" group:"psp" help:"deadline of each account's health probe"`
	JSON       bool          `name:"json" help:"print one JSON document instead of a table"`
}

func (l *pspsListCmd) check() []error {
	return positiveDuration(nil, "GATEWAY_PSP_TIMEOUT", l.PSPTimeout)
}

type pspAccountJSON struct {
	Name                string   `json:"name"`
	Adapter             string   `json:"adapter"`
	Default             bool     `json:"default"`
	Routes              []string `json:"routes"`
	Currencies          int      `json:"currencies"`
	ManualCapture       bool     `json:"manual_capture"`
	AuthoritativeLookup bool     `json:"authoritative_lookup"`
	DedupesOrderID      bool     `json:"dedupes_order_id"`
	CreationWindowS     float64  `json:"creation_window_seconds"`
	// Health is this command's probe: a lookup of an order id nobody
	// uses, answered "not found" by a healthy account. The breakers that
	// steer payments live in each serving replica (gateway_psp_breaker_state).
	Health    string  `json:"health"`
	ProbeMS   float64 `json:"probe_ms"`
	ProbeNote string  `json:"probe_note,omitempty"`
	// Breaker is the account's breaker in the serving replica at
	// GATEWAY_ADMIN_ADDR (closed, half_open, open); null without one.
	Breaker *string `json:"breaker"`
}

func (l *pspsListCmd) Run(ctx context.Context, a *app) error {
	psps, err := newPSPs(l.PSP, noInstrument)
	if err != nil {
		return err
	}
	def, _ := psps.Default()
	breakers, err := breakerStates(ctx, l.Admin.AdminAddr, l.PSPTimeout)
	if err != nil {
		return err
	}
	var out []pspAccountJSON
	for _, name := range psps.Names() {
		ad, _ := psps.For(name)
		caps := ad.Capabilities()
		health, took, note := probe(ctx, ad, l.PSPTimeout)
		out = append(out, pspAccountJSON{Name: name, Adapter: caps.Name, Default: name == def, Routes: routesOf(psps.Routes(), name),
			Currencies: len(caps.Currencies), ManualCapture: caps.ManualCapture, AuthoritativeLookup: caps.AuthoritativeLookup,
			DedupesOrderID: caps.DedupesOrderID, CreationWindowS: caps.CreationWindow.Seconds(), Health: health,
			ProbeMS: float64(took.Microseconds()) / 1000, ProbeNote: note})
		if st, ok := breakers[name]; ok {
			out[len(out)-1].Breaker = &st
		}
	}
	if l.JSON {
		return writeJSON(a.stdout, struct {
			Accounts []pspAccountJSON `json:"accounts"`
			Count    int              `json:"count"`
		}{Accounts: out, Count: len(out)})
	}
	tw := newTable(a.stdout, "ACCOUNT", "ADAPTER", "ROUTES", "CURRENCIES", "MANUAL CAPTURE", "CREATION WINDOW", "HEALTH", "PROBE", "BREAKER")
	for _, o := range out {
		routes := strings.Join(o.Routes, ",")
		if routes == "" {
			routes = "-"
		}
		breaker := "-"
		if o.Breaker != nil {
			breaker = *o.Breaker
		}
		row(tw, o.Name, o.Adapter, routes, o.Currencies, o.ManualCapture, time.Duration(o.CreationWindowS*float64(time.Second)),
			o.Health, fmt.Sprintf("%.1f ms", o.ProbeMS), breaker)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if l.Admin.AdminAddr == "" {
		fmt.Fprintln(a.stdout, "\nThe breakers that steer new payments live in each serving replica: set GATEWAY_ADMIN_ADDR to a replica's admin address to show its.")
	}
	return nil
}

// breakerStates reads gateway_psp_breaker_state from the /metrics of the
// replica at addr, by account; none when addr is empty.
func breakerStates(ctx context.Context, addr string, timeout time.Duration) (map[string]string, error) {
	if addr == "" {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("the breakers of the replica at GATEWAY_ADMIN_ADDR: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("the breakers of the replica at GATEWAY_ADMIN_ADDR: GET /metrics answered %s", res.Status)
	}
	names := map[float64]string{float64(routing.Closed): routing.Closed.String(), float64(routing.HalfOpen): routing.HalfOpen.String(), float64(routing.Open): routing.Open.String()}
	out := map[string]string{}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	const prefix = `gateway_psp_breaker_state{account="`
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), prefix)
		if !ok {
			continue
		}
		account, value, ok := strings.Cut(rest, `"} `)
		v, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if ok && err == nil {
			out[account] = names[v]
		}
	}
	return out, sc.Err()
}

// routesOf names the routes that use account: "default" and merchant ids.
func routesOf(t routing.Table, account string) []string {
	uses := func(r routing.Route) bool {
		return slices.ContainsFunc(r, func(e routing.Entry) bool { return e.Account == account })
	}
	out := []string{}
	if uses(t.Default) {
		out = append(out, "default")
	}
	ids := make([]string, 0, len(t.Merchants))
	for id, r := range t.Merchants {
		if uses(r) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return append(out, ids...)
}

// probeOrderID is an order id no payment ever has (the gateway's are ord_…).
const probeOrderID = "health_probe_0000000000000000"

// probe asks account about an order nobody made: "not found" (or any
// answer) means it is up and answering.
func probe(ctx context.Context, ad psp.Adapter, timeout time.Duration) (health string, took time.Duration, note string) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	_, err := ad.Lookup(ctx, probeOrderID)
	took = time.Since(start)
	if err == nil || errors.Is(err, psp.ErrNotFound) {
		return "up", took, ""
	}
	class, _ := psp.ClassOf(err)
	if class == 0 {
		class = psp.Unknown
	}
	return "down", took, class.String() + ": " + err.Error()
}
