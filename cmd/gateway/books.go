package main

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jmoiron/sqlx"

	"gateway/books"
	"gateway/metrics"
	"gateway/mysql"
	"gateway/payments"
	"gateway/psp"
	"gateway/reconcile"
)

// booksConfig tunes the books job (design §17), in serve and in
// `gateway books reconcile`.
type booksConfig struct {
	Schedule string        `name:"books-schedule" env:"GATEWAY_BOOKS_SCHEDULE" default:"@every 1h" placeholder:"SPEC" group:"books" help:"when serve reconciles each account's closed UTC days against its PSP's ledger (each day once, whatever the replicas): a cron spec, @every DURATION, or off"`
	Days     int           `name:"books-days" env:"GATEWAY_BOOKS_DAYS" default:"3" group:"books" help:"how many closed UTC days back the schedule makes sure were reconciled"`
	Page     int           `name:"books-page" env:"GATEWAY_BOOKS_PAGE" default:"1000" group:"books" help:"ledger lines asked for per page"`
	Lease    time.Duration `name:"books-lease" env:"GATEWAY_BOOKS_LEASE" default:"2m" group:"books" help:"how long a books pass holds its run between pages before another may take it over"`
	Timeout  time.Duration `name:"books-psp-timeout" env:"GATEWAY_BOOKS_PSP_TIMEOUT" default:"90s" group:"books" help:"deadline of each ledger page and lookup"`
	Rest     float64       `name:"books-rest" env:"GATEWAY_BOOKS_REST" default:"1" group:"books" help:"how long a pass rests after each page, as a multiple of the page's time (0 to 10; 0: none), so that it leaves the database to payments"`
}

func (c *booksConfig) check() []error {
	var errs []error
	if _, err := reconcile.ParseSchedule(c.Schedule); err != nil {
		errs = append(errs, problem("GATEWAY_BOOKS_SCHEDULE", "%v", err))
	}
	errs = positive(errs, "GATEWAY_BOOKS_DAYS", c.Days)
	if c.Page < 1 || c.Page > 5000 {
		errs = append(errs, problem("GATEWAY_BOOKS_PAGE", "must be an integer from 1 to 5000"))
	}
	if !(c.Rest >= 0 && c.Rest <= 10) { // NaN is refused too
		errs = append(errs, problem("GATEWAY_BOOKS_REST", "must be a number from 0 to 10"))
	}
	errs = positiveDuration(errs, "GATEWAY_BOOKS_LEASE", c.Lease)
	return positiveDuration(errs, "GATEWAY_BOOKS_PSP_TIMEOUT", c.Timeout)
}

func newBooks(cfg booksConfig, dbx *sqlx.DB, psps *payments.PSPs, log *slog.Logger, found func(books.Discrepancy), progress func(books.Run)) *books.Job {
	return books.New(books.Config{Store: mysql.NewStore(dbx).Books(), PSPs: psps, Logger: log, Lease: cfg.Lease,
		PageSize: cfg.Page, PSPTimeout: cfg.Timeout, Rest: cfg.Rest, Found: found, Progress: progress})
}

// ledgerAccounts are the accounts whose adapters list their ledger, but
// for an in-process fake, whose ledger is only this process's life.
func ledgerAccounts(psps *payments.PSPs) []string {
	var out []string
	for _, name := range psps.Names() {
		a, _ := psps.For(name)
		if _, ok := psp.LedgerOf(a); ok && inProcessFake(payments.OnePSP(a)) == nil {
			out = append(out, name)
		}
	}
	return out
}

// startBooks runs the books' schedule; stop waits for a running tick.
func startBooks(cfg booksConfig, dbx *sqlx.DB, psps *payments.PSPs, m *metrics.Metrics, log *slog.Logger) (stop func()) {
	sched, _ := reconcile.ParseSchedule(cfg.Schedule)
	accounts := ledgerAccounts(psps)
	if sched == nil || len(accounts) == 0 {
		return func() {}
	}
	m.BooksAccounts(accounts)
	s := books.Schedule(sched, newBooks(cfg, dbx, psps, log, m.BooksFound, nil), accounts, cfg.Days, m.BooksStanding, log)
	return s.Stop
}

type booksCmd struct {
	Reconcile booksReconcileCmd `cmd:"" help:"Reconcile an account's period against its PSP's ledger: record what the gateway does not know, send what disagrees to review (exit 4 when anything does)."`
	Resolve   booksResolveCmd   `cmd:"" help:"Acknowledge a discrepancy (one recorded alone, or one settled in the PSP's dashboard) so that it no longer alerts."`
}

// booksResolveCmd is `gateway books resolve ID`.
type booksResolveCmd struct {
	ID     int64     `arg:"" name:"id" help:"the discrepancy's id, as books reconcile lists it"`
	Reason string    `name:"reason" required:"" help:"what was done about it"`
	Actor  string    `name:"actor" env:"GATEWAY_ACTOR" required:"" help:"who decided"`
	DB     dsnConfig `embed:""`
}

func (c *booksResolveCmd) check() []error {
	errs := c.DB.require()
	if c.ID < 1 {
		errs = append(errs, errors.New("the discrepancy id is a positive integer"))
	}
	if strings.TrimSpace(c.Reason) == "" || len(c.Reason)+len(c.Actor) > 990 {
		errs = append(errs, errors.New("--reason must say what was done, in fewer than 990 characters with --actor"))
	}
	return errs
}

func (c *booksResolveCmd) Run(ctx context.Context, a *app) error {
	dbx, err := openDB(ctx, c.DB, poolConfig{MaxOpenConns: 2})
	if err != nil {
		return err
	}
	defer dbx.Close()
	if err := mysql.NewStore(dbx).Books().ResolveDiscrepancy(ctx, c.ID, c.Actor+": "+c.Reason); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "discrepancy %d resolved\n", c.ID)
	return nil
}

// booksReconcileCmd is `gateway books reconcile`.
type booksReconcileCmd struct {
	Account string `name:"account" required:"" help:"the PSP account (gateway psps list names them)"`
	From    string `name:"from" required:"" placeholder:"TIME" help:"start of the period, included: RFC 3339 (2026-11-30T00:00:00+09:00) or a date (midnight UTC)"`
	To      string `name:"to" required:"" placeholder:"TIME" help:"end of the period, excluded, as --from"`
	Again   bool   `name:"again" help:"run a period whose run is complete once more (what it found before is not acted on twice)"`
	JSON    bool   `name:"json" help:"print one JSON document instead of tables, and no progress"`
	CSV     string `name:"csv" placeholder:"FILE" help:"also write the run's discrepancies to FILE as CSV"`

	DB    dsnConfig   `embed:""`
	Pool  poolConfig  `embed:""`
	PSP   pspConfig   `embed:""`
	Books booksConfig `embed:""`
	Log   logConfig   `embed:""`

	from, to time.Time
}

func (c *booksReconcileCmd) check() []error {
	errs := c.DB.require()
	var err error
	if c.from, err = parsePeriodEnd(c.From); err != nil {
		errs = append(errs, fmt.Errorf("--from: %v", err))
	}
	if c.to, err = parsePeriodEnd(c.To); err != nil {
		errs = append(errs, fmt.Errorf("--to: %v", err))
	}
	if err == nil && !c.from.IsZero() && !c.from.Before(c.to) {
		errs = append(errs, errors.New("--to must be after --from: a period is [from, to)"))
	}
	if c.JSON && c.CSV == "-" {
		errs = append(errs, errors.New("--csv - and --json would both write to stdout"))
	}
	if c.PSP.adapter() == "fake" && c.PSP.Accounts.File == "" && c.PSP.Accounts.JSON == "" {
		errs = append(errs, errors.New("GATEWAY_PSP=fake is an in-process fake whose ledger is only its own process's charges; reconcile the books inside `gateway serve` tests, or against a PSP reachable from both (fakehttp)"))
	}
	return errs
}

// parsePeriodEnd reads RFC 3339 (any offset) or a bare date (midnight UTC).
func parsePeriodEnd(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("%q is neither RFC 3339 (2026-11-30T00:00:00+09:00) nor a date (2026-11-30)", s)
}

func (c *booksReconcileCmd) Run(ctx context.Context, a *app) error {
	psps, err := newPSPs(c.PSP, noInstrument)
	if err != nil {
		return err
	}
	dbx, err := openDB(ctx, c.DB, c.Pool)
	if err != nil {
		return err
	}
	defer dbx.Close()
	prog := a.progress(c.JSON)
	job := newBooks(c.Books, dbx, psps, newLogger(c.Log, a.stderr), nil, func(r books.Run) {
		prog.statusf("books %s: %s phase, %d lines, %d matched, %d checked", r.Account, r.Phase, r.Counts.Lines, r.Counts.Matched, r.Counts.Checked)
	})
	rep, err := job.Reconcile(ctx, c.Account, c.from, c.to, c.Again)
	prog.done()
	switch {
	case errors.Is(err, books.ErrNoLedger):
		return usageError{err.Error()}
	case errors.Is(err, books.ErrRunComplete):
		return usageError{fmt.Sprintf("the books of %s for [%s, %s) are reconciled already; --again runs them once more", c.Account, c.from.Format(time.RFC3339), c.to.Format(time.RFC3339))}
	case errors.Is(err, books.ErrRunHeld):
		return fmt.Errorf("another pass is reconciling this period now; try again after GATEWAY_BOOKS_LEASE (%s)", c.Books.Lease)
	case err != nil && rep.Run.ID == 0:
		return err
	}
	if c.JSON {
		if jerr := writeJSON(a.stdout, reportJSON(rep)); jerr != nil {
			return jerr
		}
	} else {
		printReport(a.stdout, rep)
	}
	if c.CSV != "" {
		if cerr := writeDiscrepanciesCSV(c.CSV, a.stdout, rep.Discrepancies); cerr != nil {
			return cerr
		}
	}
	if err != nil {
		return fmt.Errorf("the run is incomplete (run it again to resume from where it stopped): %w", err)
	}
	if len(rep.Discrepancies) > 0 {
		return exitStatus{code: exitDiscrepancies, msg: fmt.Sprintf("%d discrepancies (%d new): gateway payments list --status requires_review, gateway refunds list --status requires_review",
			len(rep.Discrepancies), rep.New)}
	}
	return nil
}

type runJSON struct {
	ID        int64        `json:"id"`
	Account   string       `json:"account"`
	From      time.Time    `json:"from"`
	To        time.Time    `json:"to"`
	Status    string       `json:"status"`
	Passes    int          `json:"passes"`
	Counts    books.Counts `json:"counts"`
	LastError string       `json:"last_error,omitempty"`
	Completed *time.Time   `json:"completed_at"`
}

type discrepancyJSON struct {
	ID            int64            `json:"id"`
	Class         books.Class      `json:"class"`
	Subject       string           `json:"subject"`
	Action        books.Action     `json:"action"`
	MerchantID    string           `json:"merchant_id,omitempty"`
	PaymentID     string           `json:"payment_id,omitempty"`
	RefundID      string           `json:"refund_id,omitempty"`
	Detail        string           `json:"detail"`
	PSPRecord     *psp.Transaction `json:"psp_record"`
	GatewayRecord any              `json:"gateway_record"`
	CreatedAt     time.Time        `json:"created_at"`
}

func reportJSON(rep books.Report) any {
	r := rep.Run
	run := runJSON{ID: r.ID, Account: r.Account, From: r.From, To: r.To, Status: r.Status, Passes: r.Passes, Counts: r.Counts, LastError: r.LastError}
	if !r.CompletedAt.IsZero() {
		run.Completed = &r.CompletedAt
	}
	byClass := map[books.Class]int{}
	for _, c := range books.Classes {
		byClass[c] = 0
	}
	ds := make([]discrepancyJSON, 0, len(rep.Discrepancies))
	for _, d := range rep.Discrepancies {
		byClass[d.Class]++
		var gw any
		if d.GatewayRecord != nil {
			gw = d.GatewayRecord
		}
		ds = append(ds, discrepancyJSON{ID: d.ID, Class: d.Class, Subject: d.Subject, Action: d.Action, MerchantID: d.MerchantID,
			PaymentID: d.PaymentID, RefundID: d.RefundID, Detail: d.Detail, PSPRecord: d.PSPRecord, GatewayRecord: gw, CreatedAt: d.CreatedAt})
	}
	return struct {
		Run           runJSON             `json:"run"`
		Balanced      bool                `json:"balanced"`
		New           int                 `json:"new"`
		ByClass       map[books.Class]int `json:"by_class"`
		Discrepancies []discrepancyJSON   `json:"discrepancies"`
	}{run, rep.Balanced(), rep.New, byClass, ds}
}

func printReport(w io.Writer, rep books.Report) {
	r := rep.Run
	fmt.Fprintf(w, "books of %s for [%s, %s): %s (pass %d)\n", r.Account, r.From.Format(time.RFC3339), r.To.Format(time.RFC3339), r.Status, r.Passes)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	c := r.Counts
	fmt.Fprintf(tw, "ledger lines\t%d\nmatched\t%d\nunsettled at the gateway\t%d\nno money moved\t%d\noverlap lines read\t%d\ngateway records checked\t%d\n",
		c.Lines, c.Matched, c.Unsettled, c.NoMoney, c.Outside, c.Checked)
	byClass := map[books.Class]int{}
	for _, d := range rep.Discrepancies {
		byClass[d.Class]++
	}
	for _, cl := range books.Classes {
		fmt.Fprintf(tw, "%s\t%d\n", cl, byClass[cl])
	}
	_ = tw.Flush()
	if len(rep.Discrepancies) == 0 {
		if r.Status == books.RunComplete {
			fmt.Fprintln(w, "all matched")
		}
		return
	}
	fmt.Fprintf(w, "\n%d discrepancies (%d new this pass):\n", len(rep.Discrepancies), rep.New)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tCLASS\tACTION\tSUBJECT\tPAYMENT\tREFUND\tDETAIL")
	for _, d := range rep.Discrepancies {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", d.ID, d.Class, d.Action, d.Subject, dash(d.PaymentID), dash(d.RefundID), d.Detail)
	}
	_ = tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// writeDiscrepanciesCSV writes ds to path ("-": stdout).
func writeDiscrepanciesCSV(path string, stdout io.Writer, ds []books.Discrepancy) (err error) {
	w := stdout
	if path != "-" {
		f, err := os.Create(path)
		if err != nil {
			return err
		}
		defer func() {
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}()
		w = f
	}
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"id", "class", "action", "subject", "merchant_id", "payment_id", "refund_id", "psp_reference", "psp_amount", "psp_currency", "psp_status", "detail"})
	for _, d := range ds {
		var ref, amount, currency, status string
		if t := d.PSPRecord; t != nil {
			ref, amount, currency, status = t.Reference, strconv.FormatInt(t.Amount, 10), t.Currency, t.Status
		}
		_ = cw.Write([]string{strconv.FormatInt(d.ID, 10), string(d.Class), string(d.Action), d.Subject, d.MerchantID, d.PaymentID,
			d.RefundID, ref, amount, currency, status, strings.ReplaceAll(d.Detail, "\n", " ")})
	}
	cw.Flush()
	return cw.Error()
}
