package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"gateway/metrics"
	"gateway/payments"
	"gateway/psp"
	"gateway/reconcile"
)

// reconcileCmd is `gateway reconcile`: the reconciler in its own process.
type reconcileCmd struct {
	Once bool `name:"once" help:"run one pass, print what it did and exit (status 3 when payments need review)"`
	JSON bool `name:"json" help:"with --once: print one JSON document instead of tables, and no progress"`

	DB        dsnConfig       `embed:""`
	Pool      poolConfig      `embed:""`
	Admin     adminConfig     `embed:""`
	Flow      flowConfig      `embed:""`
	PSP       pspConfig       `embed:""`
	Reconcile reconcileConfig `embed:""`
	Log       logConfig       `embed:""`
}

func (c *reconcileCmd) check() []error {
	errs := c.DB.require()
	if c.JSON && !c.Once {
		errs = append(errs, errors.New("--json goes with --once"))
	}
	if c.PSP.adapter() == "fake" {
		errs = append(errs, errors.New("GATEWAY_PSP=fake is an in-process fake that knows only its own process's charges, so a separate reconciler would see every charge as missing; run the reconciler inside `gateway serve` (GATEWAY_RECONCILE_SCHEDULE) or use a PSP reachable from both"))
	}
	return errs
}

func (c *reconcileCmd) Run(ctx context.Context, a *app) error {
	dbx, err := openDB(ctx, c.DB, c.Pool)
	if err != nil {
		return err
	}
	defer dbx.Close()
	log := newLogger(c.Log, a.stderr)
	if c.Once {
		psps, err := newPSPs(c.PSP, noInstrument)
		if err != nil {
			return err
		}
		prog := a.progress(c.JSON)
		r := newReconciler(c.Flow, c.Reconcile, &c.Log, dbx, psps, nil, log, newPassProgress(prog))
		return reconcileOnce(ctx, r, c.JSON, a.stdout, prog)
	}
	// The daemon's metrics are served on GATEWAY_ADMIN_ADDR when it is set.
	var obs reconcile.Observer
	instrument := noInstrument
	if c.Admin.AdminAddr != "" {
		reg := newRegistry(dbx)
		m := metrics.New(reg)
		instrument, obs = func(a psp.Adapter) psp.Adapter { return metrics.InstrumentPSP(a, m) }, m
		stopAdmin, err := serveAdmin(c.Admin.AdminAddr, metrics.Handler(reg), nil, log)
		if err != nil {
			return err
		}
		defer stopAdmin()
	}
	psps, err := newPSPs(c.PSP, instrument)
	if err != nil {
		return err
	}
	build := readBuildInfo()
	log.Info("reconciler starting", "version", build.Version, "revision", build.Revision)
	stop := startReconciler(c.Reconcile.Schedule, newReconciler(c.Flow, c.Reconcile, &c.Log, dbx, psps, nil, log, obs), log)
	<-ctx.Done()
	stop()
	return nil
}

// reconcileOnce runs one pass and reports it for a person or, with asJSON, a program.
func reconcileOnce(ctx context.Context, r *reconcile.Reconciler, asJSON bool, stdout io.Writer, prog *progress) error {
	sum, err := r.RunOnce(ctx)
	prog.done()
	if asJSON {
		if jerr := writeJSON(stdout, summaryJSON(sum)); jerr != nil {
			return jerr
		}
	} else {
		printSummary(stdout, sum)
	}
	if err != nil {
		return fmt.Errorf("reconcile pass stopped: %w", err)
	}
	switch {
	case sum.NeedsReview > 0 && sum.RefundsNeedReview > 0:
		return exitStatus{code: exitNeedsReview, msg: fmt.Sprintf("%d payment(s) and %d refund(s) need review: gateway payments list --status requires_review, gateway refunds list --status requires_review",
			sum.NeedsReview, sum.RefundsNeedReview)}
	case sum.NeedsReview > 0:
		return exitStatus{code: exitNeedsReview, msg: fmt.Sprintf("%d payment(s) need review: gateway payments list --status requires_review", sum.NeedsReview)}
	case sum.RefundsNeedReview > 0:
		return exitStatus{code: exitNeedsReview, msg: fmt.Sprintf("%d refund(s) need review: gateway refunds list --status requires_review", sum.RefundsNeedReview)}
	}
	return nil
}

// passJSON is a pass as --json prints it: every outcome counted, zeros
// included, durations in seconds.
type passJSON struct {
	Examined       int            `json:"examined"`
	Counts         map[string]int `json:"counts"`
	PurgedKeys     int64          `json:"purged_keys"`
	NeedsReview    int            `json:"needs_review"`
	RefundsReview  int            `json:"refunds_need_review"`
	ElapsedSeconds float64        `json:"elapsed_seconds"`
	Backlog        backlogJSON    `json:"backlog"`
	Results        []resultJSON   `json:"results"`
}

// backlogJSON is what a pass left behind.
type backlogJSON struct {
	OldestUnfinishedSeconds float64 `json:"oldest_unfinished_seconds"`
	Quarantined             int     `json:"quarantined"`
	NeedsReview             int     `json:"needs_review"`
	OldestReviewSeconds     float64 `json:"oldest_review_seconds"`
	RefundsNeedReview       int     `json:"refunds_need_review"`
	OldestRefundReviewSecs  float64 `json:"oldest_refund_review_seconds"`
}

type resultJSON struct {
	PaymentID  string  `json:"payment_id"`
	MerchantID string  `json:"merchant_id"`
	KeyHash    string  `json:"key_hash"`
	Outcome    string  `json:"outcome"`
	Attempts   int     `json:"attempts"`
	InReview   bool    `json:"in_review"`
	AgeSeconds float64 `json:"age_seconds"`
	Detail     string  `json:"detail"`
}

func summaryJSON(sum reconcile.Summary) passJSON {
	out := passJSON{Examined: len(sum.Results), Counts: map[string]int{}, PurgedKeys: sum.Purged,
		NeedsReview: sum.NeedsReview, RefundsReview: sum.RefundsNeedReview, ElapsedSeconds: sum.Elapsed.Seconds(), Results: []resultJSON{},
		Backlog: backlogJSON{OldestUnfinishedSeconds: sum.Backlog.OldestUnfinished.Seconds(), Quarantined: sum.Backlog.Quarantined,
			NeedsReview: sum.Backlog.NeedsReview, OldestReviewSeconds: sum.Backlog.OldestReview.Seconds(),
			RefundsNeedReview: sum.Backlog.RefundsNeedReview, OldestRefundReviewSecs: sum.Backlog.OldestRefundReview.Seconds()}}
	for _, o := range reconcile.Outcomes {
		out.Counts[string(o)] = sum.Counts[o]
	}
	for _, r := range sum.Results {
		out.Results = append(out.Results, resultJSON{PaymentID: r.PaymentID, MerchantID: r.MerchantID, KeyHash: r.Key,
			Outcome: string(r.Outcome), Attempts: r.Attempts, InReview: r.InReview, AgeSeconds: r.Age.Seconds(), Detail: r.Detail})
	}
	return out
}

func printSummary(w io.Writer, sum reconcile.Summary) {
	fmt.Fprintf(w, "Reconcile pass: %d unfinished payment(s) examined in %s, %d expired key(s) purged.\n\n",
		len(sum.Results), sum.Elapsed.Round(time.Millisecond), sum.Purged)
	tw := newTable(w, "OUTCOME", "COUNT", "MEANING")
	for _, o := range reconcile.Outcomes {
		row(tw, o, sum.Counts[o], reconcile.Meaning(o))
	}
	_ = tw.Flush()
	if len(sum.Results) > 0 {
		fmt.Fprintln(w)
		tw = newTable(w, "PAYMENT", "MERCHANT", "OUTCOME", "ATTEMPTS", "AGE", "DETAIL")
		for _, r := range sum.Results {
			row(tw, r.PaymentID, r.MerchantID, r.Outcome, r.Attempts, r.Age.Round(time.Second), r.Detail)
		}
		_ = tw.Flush()
	}
	fmt.Fprintf(w, "\nPayments needing review: %d\nRefunds needing review: %d\n", sum.NeedsReview, sum.RefundsNeedReview)
}

// passProgress shows a pass as it goes: one status line of counts, and a
// line per purge batch.
type passProgress struct {
	p      *progress
	mu     sync.Mutex
	n      int
	counts map[reconcile.Outcome]int
	purged int64
}

// newPassProgress is nil (observing nothing) when there is nothing to show.
func newPassProgress(p *progress) reconcile.Observer {
	if p == nil {
		return nil
	}
	return &passProgress{p: p, counts: map[reconcile.Outcome]int{}}
}

func (o *passProgress) Settled(out reconcile.Outcome) {
	o.mu.Lock()
	o.n++
	o.counts[out]++
	n, settled := o.n, o.counts[reconcile.Succeeded]+o.counts[reconcile.Declined]+o.counts[reconcile.Failed]
	review, waiting := o.counts[reconcile.Review], o.counts[reconcile.Deferred]+o.counts[reconcile.Retrying]
	o.mu.Unlock()
	o.p.statusf("reconciling: %d examined, %d settled, %d waiting, %d to review", n, settled, waiting, review)
}

func (o *passProgress) Purged(n int64) {
	o.mu.Lock()
	o.purged += n
	total := o.purged
	o.mu.Unlock()
	if n > 0 {
		o.p.statusf("purging expired keys: %d deleted", total)
	}
}

func (o *passProgress) PassDone(payments.Backlog) {}

func (o *passProgress) ExtraCharge(string, bool) {}
