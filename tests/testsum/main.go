// Command testsum runs `go test -json …` and reports it the way a person
// reads a test run: a line per package as it finishes, the whole output of
// every test that failed, and at the end every test that was skipped, with
// the reason it gave, so that nothing is skipped in silence.
//
//	go run ./tests/testsum -- go test -json -short ./...
//
// It exits with the command's status (1 when a test failed even though the
// command did not say so).
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"
)

func main() {
	args := os.Args[1:]
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: testsum -- go test -json [flags] [packages]")
		os.Exit(2)
	}
	os.Exit(run(args, os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(stderr, "testsum:", err)
		return 1
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(stderr, "testsum:", err)
		return 1
	}
	// An interrupt reaches the command through the terminal's process group;
	// testsum waits for it to finish its report.
	signal.Ignore(syscall.SIGINT)
	r := newReport(stdout)
	r.read(out)
	werr := cmd.Wait()
	r.summary()
	var ee *exec.ExitError
	switch {
	case errors.As(werr, &ee):
		return max(ee.ExitCode(), 1)
	case werr != nil:
		fmt.Fprintln(stderr, "testsum:", werr)
		return 1
	case r.failed > 0:
		return 1
	}
	return 0
}

// event is one line of `go test -json` (test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Elapsed float64
	Output  string
}

type testID struct{ pkg, test string }

type report struct {
	w       io.Writer
	start   time.Time
	output  map[testID][]string // a test's output, kept until it ends
	skipped []skip
	failed  int
	passed  int
}

type skip struct {
	id     testID
	reason string
}

func newReport(w io.Writer) *report {
	return &report{w: w, start: time.Now(), output: map[testID][]string{}}
}

func (r *report) read(in io.Reader) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			// Not test2json (a build error, say): pass it on as it is.
			fmt.Fprintln(r.w, sc.Text())
			continue
		}
		r.event(e)
	}
}

func (r *report) event(e event) {
	id := testID{e.Package, e.Test}
	switch e.Action {
	case "output":
		if e.Test == "" {
			// Package-level lines: its ok/FAIL line is written below; the rest
			// (a panic outside a test, a build failure) is shown as it comes.
			if !strings.HasPrefix(e.Output, "ok ") && !strings.HasPrefix(e.Output, "PASS") &&
				!strings.HasPrefix(e.Output, "FAIL") && !strings.HasPrefix(e.Output, "?") &&
				!strings.HasPrefix(e.Output, "coverage:") {
				fmt.Fprint(r.w, e.Output)
			}
			return
		}
		r.output[id] = append(r.output[id], e.Output)
	case "pass":
		if e.Test == "" {
			fmt.Fprintf(r.w, "ok   %s\t%.1fs\n", e.Package, e.Elapsed)
			return
		}
		r.passed++
		delete(r.output, id)
	case "skip":
		if e.Test == "" {
			fmt.Fprintf(r.w, "?    %s\t[no test files]\n", e.Package)
			return
		}
		r.skipped = append(r.skipped, skip{id: id, reason: skipReason(r.output[id])})
		delete(r.output, id)
	case "fail":
		if e.Test == "" {
			fmt.Fprintf(r.w, "FAIL %s\t%.1fs\n", e.Package, e.Elapsed)
			return
		}
		r.failed++
		fmt.Fprintf(r.w, "--- FAIL: %s (%s, %.2fs)\n", e.Test, e.Package, e.Elapsed)
		for _, l := range r.output[id] {
			if !strings.HasPrefix(l, "=== ") {
				fmt.Fprint(r.w, l)
			}
		}
		delete(r.output, id)
	}
}

// skipReason is what a skipped test said: the lines after its "=== RUN"
// and before its "--- SKIP", joined.
func skipReason(lines []string) string {
	var parts []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		parts = append(parts, t)
	}
	if len(parts) == 0 {
		return "(no reason given)"
	}
	return strings.Join(parts, " ")
}

func (r *report) summary() {
	fmt.Fprintf(r.w, "\n%d tests passed, %d failed, %d skipped in %s\n", r.passed, r.failed, len(r.skipped),
		time.Since(r.start).Round(time.Second))
	if len(r.skipped) == 0 {
		return
	}
	sort.Slice(r.skipped, func(i, j int) bool {
		a, b := r.skipped[i].id, r.skipped[j].id
		return a.pkg < b.pkg || (a.pkg == b.pkg && a.test < b.test)
	})
	fmt.Fprintln(r.w, "Skipped:")
	for _, s := range r.skipped {
		fmt.Fprintf(r.w, "  %s %s: %s\n", strings.TrimPrefix(s.id.pkg, "gateway/"), s.id.test, s.reason)
	}
}
