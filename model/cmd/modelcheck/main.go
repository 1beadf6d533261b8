// Command modelcheck runs the SPIN models of the payment protocol: every
// property over every interleaving of the modelled world, then every mutant
// and every known gap of the protocol text, which must each produce a
// counter-example. It prints one line per check and a summary table, and
// exits non-zero when any check misses its expectation.
//
//	go run ./model/cmd/modelcheck              # the full suite (make model)
//	go run ./model/cmd/modelcheck -quick       # the smaller worlds go test checks
//	go run ./model/cmd/modelcheck -run mutant/ -trail   # with counter-examples
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"gateway/model"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "modelcheck:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("modelcheck", flag.ContinueOnError)
	quick := fs.Bool("quick", false, "check the smaller worlds (what go test runs)")
	pattern := fs.String("run", "", "only the checks whose name matches this regular expression")
	jobs := fs.Int("j", min(2, runtime.NumCPU()), "checks run at once")
	trail := fs.Bool("trail", false, "print the counter-example of every check that found one")
	list := fs.Bool("list", false, "list the checks and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	re, err := regexp.Compile(*pattern)
	if err != nil {
		return fmt.Errorf("-run: %w", err)
	}
	var checks []model.Check
	for _, c := range model.Suite(*quick) {
		if re.MatchString(c.Name) {
			checks = append(checks, c)
		}
	}
	if *list {
		for _, c := range checks {
			fmt.Fprintf(stdout, "%-42s %s %s\n", c.Name, c.Model, strings.Join(c.Flags, " "))
		}
		return nil
	}
	tools, err := model.FindTools()
	if err != nil {
		return err
	}
	scratch, err := os.MkdirTemp("", "modelcheck-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(scratch)

	start := time.Now()
	results := make([]model.Result, len(checks))
	errs := make([]error, len(checks))
	stories := make([]string, len(checks))
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		next = make(chan int)
	)
	// Checks start in table order, so the largest worlds (listed first) do
	// not end up running alone at the end.
	for range max(1, *jobs) {
		wg.Go(func() {
			for i := range next {
				c := checks[i]
				results[i] = model.Result{Check: c}
				dir, err := os.MkdirTemp(scratch, "check-")
				if err == nil {
					results[i], err = model.Run(ctx, tools, dir, c)
				}
				if err == nil && *trail && results[i].Violated != "" {
					stories[i], err = model.Trail(ctx, tools, dir, c)
				}
				errs[i] = err
				os.RemoveAll(dir)
				mu.Lock()
				fmt.Fprintln(stdout, line(results[i], err))
				mu.Unlock()
			}
		})
	}
	for i := range checks {
		next <- i
	}
	close(next)
	wg.Wait()

	fmt.Fprintf(stdout, "\nSPIN model of the payment protocol: %d checks in %s (%d at once)\n\n",
		len(checks), time.Since(start).Round(time.Second), max(1, *jobs))
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tKIND\tEXPECTED\tRESULT\tSTATES\tTRANSITIONS\tDEPTH\tMEMORY\tSEARCH\tCPU\tCOMPILE\t")
	failed := 0
	var cpu time.Duration
	for i, r := range results {
		ok := errs[i] == nil && r.OK()
		if !ok {
			failed++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%.3g\t%d\t%.0f MB\t%s\t%s\t%s\t\n", checks[i].Name, kind(checks[i]),
			expected(checks[i]), verdict(r, errs[i]), r.States, r.Transitions, r.Depth, r.MemoryMB,
			r.Elapsed.Round(10*time.Millisecond), r.CPU.Round(10*time.Millisecond), r.Compile.Round(100*time.Millisecond))
		cpu += r.CPU
	}
	tw.Flush()
	fmt.Fprintf(stdout, "\nsearch CPU time in all: %s\n", cpu.Round(time.Second))
	for i, s := range stories {
		if s != "" {
			fmt.Fprintf(stdout, "\n=== counter-example of %s (%s)\n%s", checks[i].Name, results[i].Violated, s)
		}
	}
	for i, err := range errs {
		if err != nil {
			fmt.Fprintf(stdout, "\n=== %s: %v\n", checks[i].Name, err)
		}
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d checks missed their expectation", failed, len(checks))
	}
	fmt.Fprintf(stdout, "\nall %d checks as expected: every property holds, every mutant and known gap is caught\n", len(checks))
	return nil
}

func kind(c model.Check) string {
	if c.LTL != "" {
		return "liveness"
	}
	return "safety"
}

func expected(c model.Check) string {
	if len(c.Expect) == 0 {
		return "holds"
	}
	return "fails " + strings.Join(c.Expect, "|")
}

func verdict(r model.Result, err error) string {
	switch {
	case err != nil:
		return "ERROR"
	case r.Violated == "" && r.OK():
		return "holds"
	case r.Violated == "":
		return "NOT CAUGHT"
	case r.OK():
		return "caught: " + r.Violated
	}
	return "VIOLATED: " + r.Violated
}

func line(r model.Result, err error) string {
	mark := "ok  "
	if err != nil || !r.OK() {
		mark = "FAIL"
	}
	return fmt.Sprintf("%s %-44s %-22s %10d states %8s", mark, r.Check.Name, verdict(r, err), r.States,
		r.Elapsed.Round(10*time.Millisecond))
}
