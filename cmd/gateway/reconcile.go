package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/jmoiron/sqlx"

	"gateway/metrics"
	"gateway/payments"
	"gateway/payments/store"
	"gateway/psp"
	"gateway/reconcile"
)

// exitError ends the program with a chosen status after its output was written.
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string { return e.msg }

// exitNeedsReview is `reconcile --once`'s status when payments await ops.
const exitNeedsReview = 3

func newReconciler(cfg Config, dbx *sqlx.DB, psps *payments.PSPs, gate func() error, log *slog.Logger, obs reconcile.Observer) *reconcile.Reconciler {
	return reconcile.New(store.New(dbx), psps, reconcile.Config{
		Gate:        gate,
		Lease:       cfg.Lease,
		PSPTimeout:  cfg.PSPTimeout,
		BatchSize:   cfg.ReconcileBatch,
		Concurrency: cfg.ReconcileConcurrency,
		MaxAttempts: cfg.ReconcileMaxAttempts,
		BackoffBase: cfg.ReconcileBackoff,
		BackoffMax:  cfg.ReconcileBackoffMax,
		Retention:   cfg.Retention,
		PurgeBatch:  cfg.PurgeBatch,
		Logger:      log,
		Observer:    obs,
		Hasher:      cfg.hasher(),
	})
}

// startReconciler schedules the reconciler inside a long-running process;
// the returned stop waits for a running pass. A nil schedule ("off") starts nothing.
func startReconciler(cfg Config, dbx *sqlx.DB, psps *payments.PSPs, gate func() error, log *slog.Logger, obs reconcile.Observer) (stop func()) {
	sched, err := reconcile.ParseSchedule(cfg.ReconcileSchedule)
	if err != nil || sched == nil { // validated with the configuration
		log.Info("reconciler disabled", "schedule", cfg.ReconcileSchedule)
		return func() {}
	}
	s := reconcile.Schedule(sched, newReconciler(cfg, dbx, psps, gate, log, obs), log)
	log.Info("reconciler scheduled", "schedule", cfg.ReconcileSchedule)
	return s.Stop
}

func runReconcile(ctx context.Context, cfg Config, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("reconcile", "gateway reconcile [--once [--json]]", stderr)
	once := fs.Bool("once", false, "run one pass, print what it did and exit (status 3 when payments need review)")
	asJSON := fs.Bool("json", false, "with --once: print the summary as JSON")
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	if fs.NArg() > 0 || (*asJSON && !*once) {
		fs.Usage()
		return usageError{"reconcile takes only --once and --json (with --once)"}
	}
	if err := cfg.requireDSN(); err != nil {
		return err
	}
	if cfg.PSP == "fake" {
		return errors.New("GATEWAY_PSP=fake is an in-process fake that knows only its own process's charges, so a separate reconciler would see every charge as missing; run the reconciler inside `gateway serve` (GATEWAY_RECONCILE_SCHEDULE) or use a PSP reachable from both")
	}
	dbx, err := openDB(ctx, cfg)
	if err != nil {
		return err
	}
	defer dbx.Close()
	log := newLogger(cfg, stderr)
	if !*once {
		// The daemon's metrics are served on GATEWAY_ADMIN_ADDR when it is set.
		var obs reconcile.Observer
		instrument := func(a psp.Adapter) psp.Adapter { return a }
		if cfg.AdminAddr != "" {
			reg := newRegistry()
			m := metrics.New(reg)
			instrument, obs = func(a psp.Adapter) psp.Adapter { return metrics.InstrumentPSP(a, m) }, m
			stopAdmin, err := serveAdmin(cfg.AdminAddr, metrics.Handler(reg), log)
			if err != nil {
				return err
			}
			defer stopAdmin()
		}
		psps, err := newPSPs(cfg, instrument)
		if err != nil {
			return err
		}
		stop := startReconciler(cfg, dbx, psps, nil, log, obs)
		<-ctx.Done()
		stop()
		return nil
	}
	psps, err := newPSPs(cfg, func(a psp.Adapter) psp.Adapter { return a })
	if err != nil {
		return err
	}
	return reconcileOnce(ctx, newReconciler(cfg, dbx, psps, nil, log, nil), *asJSON, stdout)
}

// reconcileOnce runs one pass and reports it for a person or, with asJSON, a program.
func reconcileOnce(ctx context.Context, r *reconcile.Reconciler, asJSON bool, stdout io.Writer) error {
	sum, err := r.RunOnce(ctx)
	if asJSON {
		if jerr := json.NewEncoder(stdout).Encode(sum); jerr != nil {
			return jerr
		}
	} else {
		printSummary(stdout, sum)
	}
	if err != nil {
		return fmt.Errorf("reconcile pass stopped: %w", err)
	}
	if sum.NeedsReview > 0 {
		return exitError{code: exitNeedsReview, msg: fmt.Sprintf("%d payment(s) need review: gateway payments list --status requires_review", sum.NeedsReview)}
	}
	return nil
}

func printSummary(w io.Writer, sum reconcile.Summary) {
	fmt.Fprintf(w, "Reconcile pass: %d unfinished payment(s) examined in %s, %d expired key(s) purged.\n\n",
		len(sum.Results), sum.Elapsed.Round(time.Millisecond), sum.Purged)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "OUTCOME\tCOUNT\tMEANING")
	for _, o := range reconcile.Outcomes {
		fmt.Fprintf(tw, "%s\t%d\t%s\n", o, sum.Counts[o], reconcile.Meaning(o))
	}
	_ = tw.Flush()
	if len(sum.Results) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "PAYMENT\tMERCHANT\tOUTCOME\tATTEMPTS\tAGE\tDETAIL")
		for _, r := range sum.Results {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\n", r.PaymentID, r.MerchantID, r.Outcome, r.Attempts,
				r.Age.Round(time.Second), r.Detail)
		}
		_ = tw.Flush()
	}
	fmt.Fprintf(w, "\nPayments needing review: %d\n", sum.NeedsReview)
}

func runPayments(ctx context.Context, cfg Config, args []string, stdout, stderr io.Writer) error {
	const synopsis = "gateway payments list --status STATUS [--limit N] [--json]\n       gateway payments resolve PAYMENT_ID --as succeeded|failed --reason TEXT [--psp-reference REF] [--actor NAME]"
	if len(args) == 0 || (args[0] != "list" && args[0] != "resolve") {
		fmt.Fprintln(stderr, "Usage: "+synopsis)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			return nil
		}
		return usageError{"payments needs a subcommand: list or resolve"}
	}
	switch args[0] {
	case "list":
		fs := newFlags("payments list", "gateway payments list --status STATUS [--limit N] [--json]", stderr)
		status := fs.String("status", string(payments.RequiresReview), "processing, succeeded, declined, failed or requires_review")
		limit := fs.Int("limit", 100, "most payments to list, oldest first")
		asJSON := fs.Bool("json", false, "print JSON lines instead of a table")
		if help, err := parseFlags(fs, args[1:]); help || err != nil {
			return err
		}
		switch payments.Status(*status) {
		case payments.Processing, payments.Succeeded, payments.Declined, payments.Failed, payments.RequiresReview:
		default:
			return usageError{fmt.Sprintf("unknown status %q", *status)}
		}
		if *limit < 1 || fs.NArg() > 0 {
			return usageError{"--limit must be positive and no arguments are taken"}
		}
		return withAdmin(ctx, cfg, func(adm *payments.Admin) error {
			ps, err := adm.ListPayments(ctx, payments.Status(*status), *limit)
			if err != nil {
				return err
			}
			return printPayments(stdout, ps, *asJSON)
		})
	default:
		if len(args) < 2 || args[1] == "" || args[1][0] == '-' {
			if len(args) > 1 && (args[1] == "-h" || args[1] == "--help") {
				fmt.Fprintln(stderr, "Usage: "+synopsis)
				return nil
			}
			return usageError{"usage: " + synopsis}
		}
		id := args[1]
		fs := newFlags("payments resolve", "gateway payments resolve PAYMENT_ID --as succeeded|failed --reason TEXT [--force]", stderr)
		as := fs.String("as", "", "the outcome: succeeded or failed (required)")
		reason := fs.String("reason", "", "why; kept in the audit table (required)")
		ref := fs.String("psp-reference", "", "the PSP's id of the charge, when known")
		actor := fs.String("actor", os.Getenv("USER"), "who decides; kept in the audit table")
		force := fs.Bool("force", false, "record the decision even when the PSP's answer contradicts it or the PSP cannot be asked")
		if help, err := parseFlags(fs, args[2:]); help || err != nil {
			return err
		}
		if fs.NArg() > 0 {
			return usageError{"unexpected arguments after the flags"}
		}
		res := payments.Resolution{PaymentID: id, To: payments.Status(*as), Reason: *reason, PSPReference: *ref, Actor: *actor, Force: *force}
		if err := res.Validate(); err != nil {
			return usageError{describe(err)}
		}
		return withAdmin(ctx, cfg, func(adm *payments.Admin) error {
			p, err := adm.Resolve(ctx, res)
			if err != nil {
				return errors.New(describe(err))
			}
			fmt.Fprintf(stdout, "payment %s is now %s (recorded: %s by %s)\n", p.ID, p.Status, res.Reason, res.Actor)
			return nil
		})
	}
}

// withDB runs fn on a pool for the configured database, for one-shot commands.
func withDB(ctx context.Context, cfg Config, fn func(*sqlx.DB) error) error {
	if err := cfg.requireDSN(); err != nil {
		return err
	}
	dbx, err := openDB(ctx, cfg)
	if err != nil {
		return err
	}
	defer dbx.Close()
	return fn(dbx)
}

// withService runs fn with a payment service that never calls a PSP (ops commands).
// withAdmin runs fn with merchant and ops administration on the configured database.
func withAdmin(ctx context.Context, cfg Config, fn func(*payments.Admin) error) error {
	return withDB(ctx, cfg, func(dbx *sqlx.DB) error {
		psps, err := newPSPs(cfg, func(a psp.Adapter) psp.Adapter { return a })
		if err != nil {
			return err
		}
		return fn(payments.NewAdmin(store.New(dbx), payments.AdminConfig{Hasher: cfg.hasher(), PSPs: psps, PSPTimeout: cfg.PSPTimeout}))
	})
}

func printPayments(w io.Writer, ps []payments.Payment, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		for _, p := range ps {
			v := struct {
				payments.View
				MerchantID string `json:"merchant_id"`
			}{payments.ToView(p), p.MerchantID}
			if err := enc.Encode(v); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "PAYMENT\tMERCHANT\tSTATUS\tAMOUNT\tCURRENCY\tORDER\tCREATED")
	for _, p := range ps {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.ID, p.MerchantID, p.Status,
			strconv.FormatInt(p.Amount.Minor, 10), p.Amount.Currency, p.MerchantOrderID, p.CreatedAt.Format(time.RFC3339))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "%d payment(s)\n", len(ps))
	return nil
}

// describe renders a domain error with its field problems for a terminal.
func describe(err error) string {
	var e *payments.Error
	if !errors.As(err, &e) {
		return err.Error()
	}
	msg := e.Message
	for _, f := range e.Fields {
		msg += fmt.Sprintf("; %s %s", f.Field, f.Reason)
	}
	return msg
}
