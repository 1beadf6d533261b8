package books

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/oklog/ulid/v2"

	"gateway/errs"
	"gateway/payments"
	"gateway/psp"
	"gateway/routing"
)

// Defaults of a Job.
const (
	DefaultLease      = 2 * time.Minute
	DefaultPageSize   = 1000
	DefaultSkew       = 5 * time.Minute
	DefaultPSPTimeout = 90 * time.Second
	// DefaultRest is the rest after each page a gateway's passes take, as
	// a multiple of the page's time (Config.Rest).
	DefaultRest = 1.0
	// DefaultFailoverSlack is how long after its payment was created a
	// failed-over attempt's charge may still be made: the overlap adds it.
	DefaultFailoverSlack = time.Hour
)

// Actor names the books job in the audit table.
const Actor = "books"

// Config tunes a Job.
type Config struct {
	Store Store
	PSPs  *payments.PSPs
	// Now is the job's clock for the closed-period check; time.Now when nil.
	// Leases are the database's.
	Now    func() time.Time
	Logger *slog.Logger
	// Lease is how long a pass holds its run between two saves.
	Lease time.Duration
	// PageSize is the most lines asked for a page.
	PageSize int
	// Skew is the most the PSP's clock and the database's may differ: the
	// listing starts that much before the period and the overlap adds it.
	Skew time.Duration
	// FailoverSlack: see DefaultFailoverSlack.
	FailoverSlack time.Duration
	// PSPTimeout bounds each listing page and lookup.
	PSPTimeout time.Duration
	// Progress, when set, is told of every page a pass checked.
	Progress func(Run)
	// Found, when set, is told of every discrepancy newly recorded.
	Found func(Discrepancy)
	// Rest is how long a pass rests after each page, as a multiple of the
	// time the page took (0: none). The books are background work: a pass
	// resting as long as it works holds the database at most half the
	// time, and leaves the rest to payments.
	Rest float64
	// Sleep waits d, or until ctx ends; a timer when nil.
	Sleep func(ctx context.Context, d time.Duration) error
}

// Job reconciles the books of the gateway's PSP accounts.
type Job struct {
	cfg Config
	log *slog.Logger
}

// New returns a Job.
func New(cfg Config) *Job {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.PageSize <= 0 {
		cfg.PageSize = DefaultPageSize
	}
	if cfg.Skew <= 0 {
		cfg.Skew = DefaultSkew
	}
	if cfg.FailoverSlack <= 0 {
		cfg.FailoverSlack = DefaultFailoverSlack
	}
	if cfg.PSPTimeout <= 0 {
		cfg.PSPTimeout = DefaultPSPTimeout
	}
	if cfg.Sleep == nil {
		cfg.Sleep = sleep
	}
	return &Job{cfg: cfg, log: cfg.Logger}
}

// Report is a run as it stands after a pass, with its discrepancies.
type Report struct {
	Run           Run
	Discrepancies []Discrepancy
	// New counts the discrepancies this pass recorded.
	New int
}

// Balanced reports whether the period's books balance: a complete run
// without discrepancies.
func (r Report) Balanced() bool { return r.Run.Status == RunComplete && len(r.Discrepancies) == 0 }

// Listing is account's adapter and its ledger, or ErrNoLedger.
func (j *Job) Listing(account string) (psp.Adapter, psp.Ledger, error) {
	a, ok := j.cfg.PSPs.For(account)
	if !ok {
		return nil, nil, &errs.Error{Code: errs.CodeInvalid, Message: fmt.Sprintf("no PSP account is named %q", account)}
	}
	l, ok := psp.LedgerOf(a)
	if !ok {
		return nil, nil, fmt.Errorf("%w: %s (%s)", ErrNoLedger, account, a.Capabilities().Name)
	}
	return a, l, nil
}

// Overlap is how far past a period the ledger is read for the charges of
// the period's payments: the PSP's creation window, a failover's slack and
// the clocks' skew.
func (j *Job) Overlap(a psp.Adapter) time.Duration {
	return a.Capabilities().CreationWindow + j.cfg.FailoverSlack + j.cfg.Skew
}

// CheckPeriod refuses a period that is empty, not whole microseconds, or
// not closed yet: one whose overlap has not passed by now.
func (j *Job) CheckPeriod(a psp.Adapter, from, to time.Time) error {
	switch {
	case !from.Before(to):
		return &errs.Error{Code: errs.CodeInvalid, Message: fmt.Sprintf("the period [%s, %s) is empty", from.Format(time.RFC3339Nano), to.Format(time.RFC3339Nano))}
	case !from.Equal(from.Truncate(time.Microsecond)) || !to.Equal(to.Truncate(time.Microsecond)):
		return &errs.Error{Code: errs.CodeInvalid, Message: "a period's ends are whole microseconds"}
	}
	if closed := to.Add(j.Overlap(a)); j.cfg.Now().Before(closed) {
		return &errs.Error{Code: errs.CodeInvalid, Message: fmt.Sprintf("the period is not closed until %s (its end, plus the PSP's creation window, a failover's slack and the clocks' skew)", closed.UTC().Format(time.RFC3339))}
	}
	return nil
}

// Reconcile runs one pass of the books of account for [from, to): it
// claims the period's run (again reruns a complete one), checks the
// ledger's lines and then the gateway's records, and returns the report.
// A pass that stops short (the PSP's listing failed) leaves the run
// incomplete, to be resumed from its cursor, and returns its error with
// the report.
func (j *Job) Reconcile(ctx context.Context, account string, from, to time.Time, again bool) (Report, error) {
	from, to = from.UTC(), to.UTC()
	a, l, err := j.Listing(account)
	if err != nil {
		return Report{}, err
	}
	if err := j.CheckPeriod(a, from, to); err != nil {
		return Report{}, err
	}
	run, err := j.cfg.Store.ClaimRun(ctx, account, from, to, j.cfg.Lease, again)
	if err != nil {
		return Report{}, err
	}
	p := &pass{job: j, run: run, adapter: a, ledger: l, seen: newSeen()}
	err = p.work(ctx)
	if err != nil {
		p.run.Status, p.run.LastError = RunIncomplete, truncate(err.Error(), 500)
	} else {
		p.run.Status, p.run.Phase, p.run.LastError = RunComplete, PhaseDone, ""
	}
	// The run's end is saved even when ctx ended: another pass would wait
	// out the lease otherwise.
	saveCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if serr := j.cfg.Store.SaveRun(saveCtx, p.run, j.cfg.Lease); serr != nil && err == nil {
		err = serr
	}
	ds, derr := j.cfg.Store.RunDiscrepancies(saveCtx, p.run.ID)
	if derr != nil && err == nil {
		err = derr
	}
	return Report{Run: p.run, Discrepancies: ds, New: p.found}, err
}

// pass is one pass over a run.
type pass struct {
	job     *Job
	run     Run
	adapter psp.Adapter
	ledger  psp.Ledger
	// seen holds the order ids and refund order ids of the ledger's lines
	// this pass read; a record of the period that is not among them is
	// looked up at the PSP one by one.
	seen  *seen
	lost  map[string]lostOrder // by order id; nil until first needed
	found int
}

func (p *pass) work(ctx context.Context) error {
	// A pass that resumes another in the ledger's phase learns what the
	// pages before its cursor showed, so that the gateway's records on
	// them are not looked up one by one. One that resumes another in the
	// gateway's phase starts again from the ledger's first page: its
	// counts would otherwise count twice the records checked before.
	if p.run.Phase == PhaseLedger && p.run.Cursor != "" {
		if err := p.reread(ctx, p.run.Cursor); err != nil {
			return err
		}
	} else {
		p.run.Phase, p.run.Cursor, p.run.Counts = PhaseLedger, "", Counts{}
	}
	if err := p.ledgerPhase(ctx); err != nil {
		return err
	}
	p.run.Phase, p.run.Cursor = PhaseGateway, ""
	if err := p.save(ctx); err != nil {
		return err
	}
	return p.gatewayPhase(ctx)
}

func (p *pass) save(ctx context.Context) error {
	if err := p.job.cfg.Store.SaveRun(ctx, p.run, p.job.cfg.Lease); err != nil {
		return err
	}
	if f := p.job.cfg.Progress; f != nil {
		f(p.run)
	}
	return nil
}

// rest rests after a page that began at began (Config.Rest).
func (p *pass) rest(ctx context.Context, began time.Time) error {
	if p.job.cfg.Rest <= 0 {
		return nil
	}
	return p.job.cfg.Sleep(ctx, time.Duration(float64(time.Since(began))*p.job.cfg.Rest))
}

// sleep waits d, or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ledgerPhase pages through the ledger from the run's cursor, checking
// each page's lines in the period and saving the cursor after it.
func (p *pass) ledgerPhase(ctx context.Context) error {
	q := p.query()
	q.Cursor = p.run.Cursor
	for {
		began := time.Now()
		pctx, cancel := context.WithTimeout(ctx, p.job.cfg.PSPTimeout)
		page, err := p.ledger.ListTransactions(pctx, q)
		cancel()
		if err != nil {
			return fmt.Errorf("listing the ledger from cursor %q: %w", q.Cursor, err)
		}
		if err := p.checkPage(ctx, page.Transactions); err != nil {
			return err
		}
		p.run.Cursor = page.Next
		if err := p.save(ctx); err != nil {
			return err
		}
		if page.Next == "" {
			return nil
		}
		q.Cursor = page.Next
		if err := p.rest(ctx, began); err != nil {
			return err
		}
	}
}

// reread lists the ledger from its start up to the page at cursor until
// ("": to its end), only to learn which lines it holds.
func (p *pass) reread(ctx context.Context, until string) error {
	q := p.query()
	for {
		pctx, cancel := context.WithTimeout(ctx, p.job.cfg.PSPTimeout)
		page, err := p.ledger.ListTransactions(pctx, q)
		cancel()
		if err != nil {
			return fmt.Errorf("rereading the ledger from cursor %q: %w", q.Cursor, err)
		}
		for _, t := range page.Transactions {
			p.seen.add(subject(t))
		}
		if page.Next == "" || page.Next == until {
			return nil
		}
		q.Cursor = page.Next
	}
}

// query is the first page's query of the run's listing.
func (p *pass) query() psp.LedgerQuery {
	return psp.LedgerQuery{From: p.run.From.Add(-p.job.cfg.Skew), To: p.run.To.Add(p.job.Overlap(p.adapter)), Limit: p.job.cfg.PageSize}
}

// inPeriod reports whether the line is the run's to judge.
func (p *pass) inPeriod(t psp.Transaction) bool {
	return !t.CreatedAt.Before(p.run.From) && t.CreatedAt.Before(p.run.To)
}

// subject is what a discrepancy about t is about.
func subject(t psp.Transaction) string {
	switch {
	case t.Kind == psp.TransactionRefund && t.RefundOrderID != "":
		return t.RefundOrderID
	case t.Kind == psp.TransactionCharge && t.MerchantOrderID != "":
		return t.MerchantOrderID
	}
	return "psp:" + t.Reference
}

// checkPage judges one page of lines against the gateway's records, read
// for the whole page at once.
func (p *pass) checkPage(ctx context.Context, lines []psp.Transaction) error {
	var orders, refundOrders, refs, subjects []string
	for _, t := range lines {
		if t.MerchantOrderID != "" {
			orders = append(orders, t.MerchantOrderID)
		}
		if t.Kind == psp.TransactionRefund {
			if t.RefundOrderID != "" {
				refundOrders = append(refundOrders, t.RefundOrderID)
			}
			if t.Reference != "" {
				refs = append(refs, t.Reference)
			}
		}
		if p.inPeriod(t) {
			subjects = append(subjects, subject(t))
		}
	}
	st := p.job.cfg.Store
	ps, attempts, err := st.PaymentsByOrder(ctx, p.run.Account, orders)
	if err != nil {
		return err
	}
	rs, err := st.RefundsByOrder(ctx, refundOrders, refs)
	if err != nil {
		return err
	}
	known, err := st.Known(ctx, p.run.Account, subjects)
	if err != nil {
		return err
	}
	byOrder := make(map[string]payments.Payment, len(ps))
	for _, x := range ps {
		byOrder[x.MerchantOrderID] = x
	}
	byAttempt := make(map[string]Attempt, len(attempts))
	for _, x := range attempts {
		byAttempt[x.MerchantOrderID] = x
	}
	byRefund := make(map[string]payments.Refund, 2*len(rs))
	for _, x := range rs {
		byRefund[x.RefundOrderID] = x
		if x.PSPReference != "" {
			byRefund["psp:"+x.PSPReference] = x
		}
	}
	isKnown := make(map[string]bool, len(known))
	for _, d := range known {
		isKnown[d.Subject] = true
	}

	for _, t := range lines {
		p.seen.add(subject(t))
		if !p.inPeriod(t) {
			p.run.Counts.Outside++
			continue
		}
		p.run.Counts.Lines++
		sub := subject(t)
		if isKnown[sub] {
			continue
		}
		var err error
		if t.Kind == psp.TransactionRefund {
			r, ok := byRefund[t.RefundOrderID]
			if !ok || t.RefundOrderID == "" {
				r, ok = byRefund["psp:"+t.Reference]
			}
			err = p.checkRefund(ctx, t, r, ok, byOrder, byAttempt)
		} else {
			err = p.checkCharge(ctx, t, byOrder, byAttempt)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (p *pass) checkCharge(ctx context.Context, t psp.Transaction, byOrder map[string]payments.Payment, byAttempt map[string]Attempt) error {
	if x, ok := byOrder[t.MerchantOrderID]; ok && t.MerchantOrderID != "" {
		v, detail := compareCharge(t, x)
		return p.judged(ctx, v, t, x, detail)
	}
	if a, ok := byAttempt[t.MerchantOrderID]; ok && t.MerchantOrderID != "" {
		v, detail := compareAttempt(t, a)
		if v != differs {
			p.count(v)
			return nil
		}
		d := p.discrepancy(Mismatch, subject(t), &t, nil, detail)
		d.MerchantID, d.PaymentID, d.Action = a.MerchantID, a.PaymentID, ActionReview
		return p.record(ctx, d, func(ctx context.Context, run Run, d Discrepancy) error {
			return p.job.cfg.Store.Review(ctx, run, d, "books: "+detail)
		})
	}
	if !t.MovedMoney() {
		p.run.Counts.NoMoney++
		return nil
	}
	return p.orphanCharge(ctx, t)
}

// judged records what compareCharge found for x.
func (p *pass) judged(ctx context.Context, v verdict, t psp.Transaction, x payments.Payment, detail string) error {
	if v != differs {
		p.count(v)
		return nil
	}
	body := payments.Render(x).Body
	d := p.discrepancy(Mismatch, x.MerchantOrderID, &t, body, detail)
	d.MerchantID, d.PaymentID, d.Action = x.MerchantID, x.ID, ActionReview
	return p.record(ctx, d, func(ctx context.Context, run Run, d Discrepancy) error {
		return p.job.cfg.Store.Review(ctx, run, d, "books: "+detail)
	})
}

func (p *pass) count(v verdict) {
	if v == matched {
		p.run.Counts.Matched++
	} else {
		p.run.Counts.Unsettled++
	}
}

// orphanCharge records a charge the PSP holds and the gateway has no
// record of as a payment in review, under the key it was derived from
// when the gateway still knows it, else with the merchant the PSP kept.
func (p *pass) orphanCharge(ctx context.Context, t psp.Transaction) error {
	d := p.discrepancy(OrphanCharge, subject(t), &t, nil, fmt.Sprintf("the PSP %s %d %s (%s) and the gateway has no record of it", t.Status, t.Amount, t.Currency, t.Reference))
	key, attempt, err := p.lostKey(ctx, t.MerchantOrderID)
	if err != nil {
		return err
	}
	merchant := t.MerchantID
	if key.PaymentID != "" {
		merchant = key.Ref.MerchantID
	}
	if merchant == "" {
		d.Action = ActionAlertOnly
		d.Detail += "; no merchant can be told: it is recorded here alone"
		return p.record(ctx, d, p.job.cfg.Store.Record)
	}
	x := payments.Payment{
		ID: key.PaymentID, MerchantID: merchant, IdempotencyKey: key.Ref.Key, MerchantOrderID: t.MerchantOrderID,
		Status: payments.RequiresReview, Amount: payments.Money{Minor: t.Amount, Currency: t.Currency},
		PaymentMethod: "psp_ledger", PSPReference: t.Reference, PSP: p.run.Account,
		ReviewReason: "books: " + d.Detail, CreatedAt: t.CreatedAt, UpdatedAt: p.job.cfg.Now().UTC(),
		Attempt: attempt,
	}
	if psp.ChargeStatus(t.Status) == psp.Succeeded && t.AmountCaptured > 0 && t.AmountCaptured < t.Amount {
		x.CaptureMethod, x.AmountCaptured = payments.CaptureManual, t.AmountCaptured
	}
	if psp.ChargeStatus(t.Status) == psp.Authorized {
		x.CaptureMethod = payments.CaptureManual
	}
	if x.ID == "" {
		x.ID = "pay_" + ulid.Make().String()
	}
	if x.IdempotencyKey == "" {
		x.IdempotencyKey = "books:" + subject(t)
	}
	if x.MerchantOrderID == "" {
		x.MerchantOrderID = subject(t)
	}
	d.MerchantID, d.PaymentID, d.Action = x.MerchantID, x.ID, ActionRecordedPayment
	e := payments.PaymentEvent(x)
	c := payments.PaymentChange{Payment: x, Event: &e}
	return p.record(ctx, d, func(ctx context.Context, run Run, d Discrepancy) error {
		return p.job.cfg.Store.RecordPayment(ctx, run, d, c)
	})
}

// lostOrder is a lost key by one of its attempts' order ids.
type lostOrder struct {
	key     LostKey
	attempt int
}

// lostKey is the key on the payments endpoint whose payment is gone that
// orderID was derived from, and the number of the attempt whose order id
// it is (1 for the first; a failed-over payment's later attempts have
// their own), or the zero LostKey.
func (p *pass) lostKey(ctx context.Context, orderID string) (LostKey, int, error) {
	if orderID == "" {
		return LostKey{}, 0, nil
	}
	if p.lost == nil {
		// A key is made before its payment's charge, by at most the
		// overlap (a creation window, a failover) and the clocks' skew.
		keys, err := p.job.cfg.Store.LostKeys(ctx, p.run.From.Add(-p.job.Overlap(p.adapter)), p.run.To.Add(p.job.cfg.Skew))
		if err != nil {
			return LostKey{}, 0, err
		}
		p.lost = make(map[string]lostOrder, len(keys)*maxAttempts)
		for _, k := range keys {
			for n := 1; n <= maxAttempts; n++ {
				p.lost[payments.AttemptOrderID(k.Ref.MerchantID, k.Ref.Key, n)] = lostOrder{k, n}
			}
		}
	}
	l := p.lost[orderID]
	return l.key, l.attempt, nil
}

// maxAttempts is how many attempts' order ids a lost key is tried with.
const maxAttempts = 4

func (p *pass) checkRefund(ctx context.Context, t psp.Transaction, r payments.Refund, ok bool, byOrder map[string]payments.Payment, byAttempt map[string]Attempt) error {
	if ok {
		v, detail := compareRefund(t, r)
		if v != differs {
			p.count(v)
			return nil
		}
		d := p.discrepancy(Mismatch, subject(t), &t, payments.RenderRefund(r).Body, detail)
		d.MerchantID, d.PaymentID, d.RefundID, d.Action = r.MerchantID, r.PaymentID, r.ID, ActionReview
		return p.record(ctx, d, func(ctx context.Context, run Run, d Discrepancy) error {
			return p.job.cfg.Store.Review(ctx, run, d, "books: "+detail)
		})
	}
	if !t.MovedMoney() {
		p.run.Counts.NoMoney++
		return nil
	}
	if a, ok := byAttempt[t.MerchantOrderID]; ok && routing.AttemptOutcome(a.Outcome) == routing.AttemptExtraReturned {
		// The gateway's own refund of an earlier attempt's extra charge
		// (design §16): its record is the attempt's.
		p.run.Counts.Matched++
		return nil
	}
	d := p.discrepancy(OrphanRefund, subject(t), &t, nil, fmt.Sprintf("the PSP refunded %d %s (%s) of order %s and the gateway has no record of it", t.Amount, t.Currency, t.Reference, t.MerchantOrderID))
	x, found := byOrder[t.MerchantOrderID]
	if !found || t.MerchantOrderID == "" || x.Amount.Currency != t.Currency {
		d.Action = ActionAlertOnly
		d.Detail += "; its payment is not the gateway's to hold it: it is recorded here alone"
		return p.record(ctx, d, p.job.cfg.Store.Record)
	}
	now := p.job.cfg.Now().UTC()
	orderID := t.RefundOrderID
	if orderID == "" {
		orderID = subject(t)
	}
	rf := payments.Refund{
		ID: "re_" + ulid.Make().String(), MerchantID: x.MerchantID, PaymentID: x.ID, IdempotencyKey: "books:" + subject(t),
		RefundOrderID: orderID, Status: payments.RefundRequiresReview, Amount: payments.Money{Minor: t.Amount, Currency: t.Currency},
		PSPReference: t.Reference, PSP: p.run.Account, ReviewReason: "books: " + d.Detail, CreatedAt: t.CreatedAt, UpdatedAt: now,
	}
	d.MerchantID, d.PaymentID, d.RefundID, d.Action = x.MerchantID, x.ID, rf.ID, ActionRecordedRefund
	c := payments.RefundRecorded(rf)
	err := p.record(ctx, d, func(ctx context.Context, run Run, d Discrepancy) error {
		return p.job.cfg.Store.RecordRefund(ctx, run, d, c)
	})
	if errors.Is(err, payments.ErrExceedsPayment) {
		d.Action, d.RefundID = ActionAlertOnly, ""
		d.Detail += "; its payment cannot hold it (its refunds reserve the rest): it is recorded here alone"
		return p.record(ctx, d, p.job.cfg.Store.Record)
	}
	return err
}

// pageDone ends a page of the gateway's records that began at began: the
// run's counts are saved (its lease extended with them) and the pass rests.
func (p *pass) pageDone(ctx context.Context, began time.Time) error {
	if err := p.save(ctx); err != nil {
		return err
	}
	return p.rest(ctx, began)
}

// gatewayPhase checks the gateway's payments and refunds of the period
// that say money moved: each one the ledger did not show is looked up.
func (p *pass) gatewayPhase(ctx context.Context) error {
	st := p.job.cfg.Store
	var at Position
	for {
		began := time.Now()
		ps, err := st.Settled(ctx, p.run.Account, p.run.From, p.run.To, at, p.job.cfg.PageSize)
		if err != nil {
			return err
		}
		for _, x := range ps {
			p.run.Counts.Checked++
			if p.seen.has(x.MerchantOrderID) {
				continue
			}
			if err := p.lookup(ctx, x); err != nil {
				return err
			}
		}
		if len(ps) < p.job.cfg.PageSize {
			break
		}
		last := ps[len(ps)-1]
		at = Position{CreatedAt: last.CreatedAt, MerchantID: last.MerchantID, ID: last.ID}
		if err := p.pageDone(ctx, began); err != nil {
			return err
		}
	}
	at = Position{}
	for {
		began := time.Now()
		rs, err := st.SettledRefunds(ctx, p.run.Account, p.run.From, p.run.To, at, p.job.cfg.PageSize)
		if err != nil {
			return err
		}
		for _, r := range rs {
			p.run.Counts.Checked++
			if p.seen.has(r.RefundOrderID) {
				continue
			}
			if r.PSPReference != "" && p.seen.has("psp:"+r.PSPReference) {
				continue
			}
			if err := p.lookupRefund(ctx, r.Refund, r.ChargeReference); err != nil {
				return err
			}
		}
		if len(rs) < p.job.cfg.PageSize {
			return p.save(ctx)
		}
		last := rs[len(rs)-1]
		at = Position{CreatedAt: last.CreatedAt, MerchantID: last.MerchantID, ID: last.ID}
		if err := p.pageDone(ctx, began); err != nil {
			return err
		}
	}
}

// lookup asks the PSP about a payment its ledger did not show.
func (p *pass) lookup(ctx context.Context, x payments.Payment) error {
	lctx, cancel := context.WithTimeout(ctx, p.job.cfg.PSPTimeout)
	c, err := p.adapter.Lookup(lctx, x.MerchantOrderID)
	cancel()
	switch {
	case errors.Is(err, psp.ErrNotFound):
		d := p.discrepancy(MissingAtPSP, x.MerchantOrderID, nil, payments.Render(x).Body,
			fmt.Sprintf("the gateway says %s %d %s and the PSP has no charge for order %s", x.Status, x.Amount.Minor, x.Amount.Currency, x.MerchantOrderID))
		d.MerchantID, d.PaymentID, d.Action = x.MerchantID, x.ID, ActionReview
		return p.record(ctx, d, func(ctx context.Context, run Run, d Discrepancy) error {
			return p.job.cfg.Store.Review(ctx, run, d, "books: "+d.Detail)
		})
	case err != nil:
		return fmt.Errorf("looking up order %s: %w", x.MerchantOrderID, err)
	}
	t := psp.Transaction{Kind: psp.TransactionCharge, MerchantOrderID: c.MerchantOrderID, Reference: c.Reference,
		Status: string(c.Status), Amount: c.Amount, AmountCaptured: c.AmountCaptured, Currency: c.Currency}
	// A record found by its lookup is counted as checked, not as a line.
	if v, detail := compareLookup(x, c); v == differs {
		return p.judged(ctx, v, t, x, detail)
	}
	return nil
}

// lookupRefund asks the PSP about a refund its ledger did not show.
func (p *pass) lookupRefund(ctx context.Context, r payments.Refund, chargeReference string) error {
	lctx, cancel := context.WithTimeout(ctx, p.job.cfg.PSPTimeout)
	got, err := p.adapter.LookupRefund(lctx, chargeReference, r.RefundOrderID)
	cancel()
	var t *psp.Transaction
	detail := ""
	switch {
	case errors.Is(err, psp.ErrNotFound):
		detail = fmt.Sprintf("the gateway says refund %s succeeded (%d %s) and the PSP has no such refund", r.RefundOrderID, r.Amount.Minor, r.Amount.Currency)
	case err != nil:
		return fmt.Errorf("looking up refund %s: %w", r.RefundOrderID, err)
	default:
		line := psp.Transaction{Kind: psp.TransactionRefund, MerchantOrderID: got.MerchantOrderID, RefundOrderID: got.RefundOrderID,
			Reference: got.Reference, Status: string(got.Status), Amount: got.Amount, Currency: got.Currency}
		v, why := compareRefund(line, r)
		if v != differs {
			return nil
		}
		t, detail = &line, why
	}
	class := Mismatch
	if t == nil {
		class = MissingAtPSP
	}
	d := p.discrepancy(class, r.RefundOrderID, t, payments.RenderRefund(r).Body, detail)
	d.MerchantID, d.PaymentID, d.RefundID, d.Action = r.MerchantID, r.PaymentID, r.ID, ActionReview
	return p.record(ctx, d, func(ctx context.Context, run Run, d Discrepancy) error {
		return p.job.cfg.Store.Review(ctx, run, d, "books: "+detail)
	})
}

func (p *pass) discrepancy(c Class, sub string, t *psp.Transaction, gateway json.RawMessage, detail string) Discrepancy {
	return Discrepancy{RunID: p.run.ID, Account: p.run.Account, Class: c, Subject: sub, PSPRecord: t,
		GatewayRecord: gateway, Detail: truncate(detail, 500)}
}

// record writes d with write; one recorded before is no action.
func (p *pass) record(ctx context.Context, d Discrepancy, write func(context.Context, Run, Discrepancy) error) error {
	err := write(ctx, p.run, d)
	switch {
	case errors.Is(err, ErrKnown):
		return nil
	case err != nil:
		return err
	}
	p.found++
	p.job.log.Warn("books: discrepancy", "account", d.Account, "class", string(d.Class), "action", string(d.Action),
		"payment_id", d.PaymentID, "refund_id", d.RefundID, "detail", d.Detail)
	if f := p.job.cfg.Found; f != nil {
		f(d)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
