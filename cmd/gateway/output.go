package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"text/tabwriter"
	"time"
)

// How commands print. A listing prints a table for a person or, with
// --json, one JSON document for a program: stable snake_case names, counts
// present even when zero, times in RFC 3339 (UTC) and durations in seconds.
// Progress goes to stderr on a terminal only, never with --json.

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// newTable writes aligned columns; call flush when done.
func newTable(w io.Writer, header ...any) *tabwriter.Writer {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	row(tw, header...)
	return tw
}

func row(tw *tabwriter.Writer, cells ...any) {
	for i, c := range cells {
		if i > 0 {
			fmt.Fprint(tw, "\t")
		}
		fmt.Fprint(tw, c)
	}
	fmt.Fprintln(tw)
}

// timestamp writes a time for a table; "-" for none.
func timestamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// jsonTime is a time for JSON: RFC 3339 in UTC, null for none.
func jsonTime(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(time.RFC3339Nano)
	return &s
}

// progress reports a long operation on a terminal; a nil one is silent.
type progress struct {
	w          io.Writer
	mu         sync.Mutex
	lastStatus time.Time
	statusOn   bool
}

// progress returns a reporter on stderr when stderr is a terminal and the
// output is not for a program.
func (a *app) progress(quiet bool) *progress {
	if quiet || !a.terminal(a.stderr) {
		return nil
	}
	return &progress{w: a.stderr}
}

// linef prints a line that stays.
func (p *progress) linef(format string, args ...any) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
	fmt.Fprintf(p.w, format+"\n", args...)
}

// statusf rewrites the one status line, at most ten times a second.
func (p *progress) statusf(format string, args ...any) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if now := time.Now(); now.Sub(p.lastStatus) >= 100*time.Millisecond {
		p.lastStatus = now
		fmt.Fprintf(p.w, "\r\033[K"+format, args...)
		p.statusOn = true
	}
}

// done removes the status line before the report is printed.
func (p *progress) done() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.clear()
}

func (p *progress) clear() {
	if p.statusOn {
		fmt.Fprint(p.w, "\r\033[K")
		p.statusOn = false
	}
}
