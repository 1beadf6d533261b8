// Package reconcile owns the reconciler: the job that settles every payment
// a crash, a deploy or a lost PSP response left unfinished, by asking the
// payment's own PSP what really happened; that keeps looking at payments in
// review until their PSP answers with authority; and that purges idempotency
// keys past retention. It never charges. Any number of replicas may run it
// at once: rows are claimed with SKIP LOCKED and every write is fenced.
// Every time it compares is the database's (design §14).
package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"gateway/idemkeys"
	"gateway/payments"
	"gateway/psp"
)

// Store is what the reconciler reads and writes. Every write after a claim
// is fenced on what the claim returned.
type Store interface {
	// ClaimStale takes over up to limit unfinished keys whose lease expired
	// and whose next look is due, with leases of `lease`, and sets aside the
	// unreadable ones. Rows locked by a concurrent claimer are skipped.
	ClaimStale(ctx context.Context, lease time.Duration, limit int) (payments.Claimed, error)
	// Settle records a payment's final state (or its review) and its key's
	// stored answer while the caller holds token; idemkeys.ErrFenced otherwise.
	Settle(ctx context.Context, ref idemkeys.Ref, token idemkeys.Token, c payments.PaymentChange) error
	// Reschedule gives back a lease without settling; idemkeys.ErrFenced when
	// the caller no longer holds it.
	Reschedule(ctx context.Context, ref idemkeys.Ref, token idemkeys.Token, r payments.Reschedule) error
	// PurgeKeys is one step of a purge: it deletes up to limit completed
	// keys older than retention found after the cursor, and returns the
	// cursor to go on from; done when none is left after it.
	PurgeKeys(ctx context.Context, retention time.Duration, after payments.PurgeCursor, limit int) (n int64, next payments.PurgeCursor, done bool, err error)
	// PurgeEvents deletes, of the next limit events after the cursor, those
	// older than retention, but none with a webhook delivery still pending;
	// done says no event is left to walk.
	PurgeEvents(ctx context.Context, retention time.Duration, after payments.EventPurgeCursor, limit int) (n int64, next payments.EventPurgeCursor, done bool, err error)
	// PurgeDeliveries deletes up to limit ended webhook deliveries older
	// than retention.
	PurgeDeliveries(ctx context.Context, retention time.Duration, limit int) (int64, error)
	// Backlog reports what is left unfinished and in review.
	Backlog(ctx context.Context) (payments.Backlog, error)
	// ClaimReview marks up to limit payments in review, due for a look, as
	// looked at for `lease`.
	ClaimReview(ctx context.Context, lease time.Duration, limit int) ([]payments.InReview, error)
	// RescheduleReview sets a payment in review's next look, fenced on the
	// claim's mark; idemkeys.ErrFenced when another look or a person moved it.
	RescheduleReview(ctx context.Context, p payments.Payment, r payments.Reschedule) error
	// Resolve applies decide to a payment under its row lock with an audit row.
	Resolve(ctx context.Context, id string, decide func(before payments.Payment, dbNow time.Time) (payments.PaymentChange, error), res payments.Resolution) (payments.Payment, error)

	// SettleOperation records an unfinished capture's or void's outcome on
	// its payment and its key's answer while the caller holds token and the
	// operation is still the payment's; idemkeys.ErrFenced otherwise.
	SettleOperation(ctx context.Context, ref idemkeys.Ref, token idemkeys.Token, c payments.PaymentChange) error
	// SettleRefund records an unfinished refund's state and its key's answer
	// while the caller holds token; idemkeys.ErrFenced otherwise.
	SettleRefund(ctx context.Context, ref idemkeys.Ref, token idemkeys.Token, c payments.RefundChange) error
	// ClaimRefundChecks marks up to limit refunds pending at their PSP or in
	// review, due for a look, as looked at for `lease`.
	ClaimRefundChecks(ctx context.Context, lease time.Duration, limit int) ([]payments.RefundCheck, error)
	// RescheduleRefundCheck sets such a refund's next look, fenced on the claim's mark.
	RescheduleRefundCheck(ctx context.Context, r payments.Refund, rs payments.Reschedule) error
	// ResolveRefund applies decide to a refund under its and its payment's
	// row locks, moving the payment's amounts with it, with an audit row.
	ResolveRefund(ctx context.Context, id string, decide func(before payments.Refund, dbNow time.Time) (payments.RefundChange, error), res payments.Resolution) (payments.Refund, error)

	// ClaimActions is ClaimReview for payments waiting for their customer
	// (requires_action); RescheduleReview and Resolve settle them likewise.
	ClaimActions(ctx context.Context, lease time.Duration, limit int) ([]payments.InReview, error)
	// ExpireUnconfirmed cancels up to limit payments still awaiting their
	// confirmation past their expiry, with a compare-and-set on the status,
	// skipping those a confirm holds, and returns them.
	ExpireUnconfirmed(ctx context.Context, limit int, expire func(payments.Payment) payments.PaymentChange) ([]payments.Payment, error)
	// ExpireAuthorizations records as lapsed up to limit authorizations
	// past their capture_before with no capture or void in flight, with a
	// compare-and-set, skipping those an operation holds, and returns them.
	ExpireAuthorizations(ctx context.Context, limit int, expire func(payments.Payment) payments.PaymentChange) ([]payments.Payment, error)
	// ClaimCancellations takes up to limit cancellations by key still to be
	// carried out, due for a look, and pushes their next look a lease out.
	ClaimCancellations(ctx context.Context, lease time.Duration, limit int) ([]payments.KeyCancellation, error)

	// ClaimAttemptChecks marks up to limit earlier attempts due for their
	// check as looked at for lease and returns them with their payments.
	ClaimAttemptChecks(ctx context.Context, lease time.Duration, limit int) ([]payments.AttemptCheck, error)
	// RecordAttemptCheck records c.Attempt's outcome and PSP reference,
	// fenced on c.Mark, with its next check at next (zero: none).
	RecordAttemptCheck(ctx context.Context, c payments.AttemptCheck, next time.Time) error
	// ReviewAttempt is RecordAttemptCheck and, in the same transaction,
	// decide's change of the payment (its review) with an audit row;
	// decide's idemkeys.ErrFenced records the attempt alone.
	ReviewAttempt(ctx context.Context, c payments.AttemptCheck, next time.Time, decide func(payments.Payment, time.Time) (payments.PaymentChange, error), res payments.Resolution) error
}

// Canceler carries out a cancellation by key (payments.Service does):
// done is false while what it waits for is not known yet.
type Canceler interface {
	FinishCancellation(ctx context.Context, kc payments.KeyCancellation) (resp idemkeys.Response, done bool, err error)
}

// Config tunes a reconciler.
type Config struct {
	// Lease is how long the reconciler owns a claimed key; it must outlast PSPTimeout.
	Lease time.Duration
	// PSPTimeout bounds each lookup.
	PSPTimeout time.Duration
	// BatchSize is how many keys one claim transaction takes.
	BatchSize int
	// Concurrency bounds the lookups in flight.
	Concurrency int
	// Writers is how many writes of what lookups decided run at once, each
	// its own short fenced transaction, so that no lookup waits on the
	// database; Concurrency when zero.
	Writers int
	// MaxAttempts is how many passes may fail to learn an outcome before the
	// payment is handed to the review queue as requires_review.
	MaxAttempts int
	// BackoffBase and BackoffMax shape the wait between failed passes on one
	// key: base, 2×base, 4×base … capped at max, each with ±20 % jitter.
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// ReviewBackoffBase and ReviewBackoffMax shape the review queue's looks
	// at one payment the same way.
	ReviewBackoffBase time.Duration
	ReviewBackoffMax  time.Duration
	// ActionBackoffBase and ActionBackoffMax shape the looks at a payment
	// waiting for its customer (3-D Secure, a deposit) the same way.
	ActionBackoffBase time.Duration
	ActionBackoffMax  time.Duration
	// Canceler carries out the cancellations by key the pass finds due;
	// nil leaves them to a process that has one.
	Canceler Canceler
	// Retention is how long a completed key keeps its stored response.
	Retention time.Duration
	// EventRetention is how long an event is kept (and listed).
	EventRetention time.Duration
	// PurgeBatch is how many keys one DELETE removes. After each batch the
	// purge rests PurgeRest times as long as the batch took, and at least
	// PurgePause, so that a large purge never crowds out payments: it holds
	// one connection at most 1/(1+PurgeRest) of the time, and its batches
	// (and so its pace) slow down by themselves when the database is busy.
	PurgeBatch int
	PurgePause time.Duration
	PurgeRest  float64
	// PurgeSleep is how the purge rests between batches; nil waits on a
	// timer (tests record the rests instead).
	PurgeSleep func(ctx context.Context, d time.Duration) error
	// Now is this process's clock, for how much of its own lease is left; the
	// rest is judged on the database's clock. time.Now when nil.
	Now func() time.Time
	// Gate, when set, says whether this replica may claim now (see
	// payments.Config.Gate); a closed gate skips the pass.
	Gate func() error
	// Logger receives one event per settlement; keys are hashed.
	Logger *slog.Logger
	// Hasher names keys and merchants in logs and reports.
	Hasher *idemkeys.Hasher
	// Observer is told what each pass did, for metrics; nil observes nothing.
	Observer Observer
}

// Observer is told what the reconciler does. Implementations must be safe
// for concurrent use.
type Observer interface {
	// Settled counts one key's (or one reviewed payment's) outcome.
	Settled(o Outcome)
	// Purged counts deleted keys.
	Purged(n int64)
	// PassDone reports, after a pass, what is left unfinished and in review.
	PassDone(b payments.Backlog)
	// ExtraCharge counts an earlier attempt its account charged although
	// it answered not processed; returned says it was given back there.
	ExtraCharge(account string, returned bool)
}

type noObserver struct{}

func (noObserver) Settled(Outcome)           {}
func (noObserver) Purged(int64)              {}
func (noObserver) PassDone(payments.Backlog) {}
func (noObserver) ExtraCharge(string, bool)  {}

// Defaults of the reconciler's own settings; the flow's (lease, PSP
// timeout, retention) come from package payments.
const (
	DefaultBatchSize         = 100
	DefaultConcurrency       = 16
	DefaultMaxAttempts       = 10
	DefaultBackoffBase       = 30 * time.Second
	DefaultBackoffMax        = 30 * time.Minute
	DefaultReviewBackoffBase = payments.ReviewFirstLook
	DefaultReviewBackoffMax  = time.Hour
	DefaultActionBackoffBase = payments.ActionFirstLook
	DefaultActionBackoffMax  = time.Hour
	DefaultPurgeBatch        = 500
	DefaultPurgePause        = 5 * time.Millisecond
	DefaultPurgeRest         = 0.25
	DefaultSchedule          = "@every 30s"
)

// Defaults for fields left zero.
func (c *Config) setDefaults() {
	if c.Lease == 0 {
		c.Lease = payments.DefaultLease
	}
	if c.PSPTimeout == 0 {
		c.PSPTimeout = payments.DefaultPSPTimeout
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.Concurrency == 0 {
		c.Concurrency = DefaultConcurrency
	}
	if c.Writers <= 0 {
		c.Writers = c.Concurrency
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.BackoffBase == 0 {
		c.BackoffBase = DefaultBackoffBase
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = DefaultBackoffMax
	}
	if c.ReviewBackoffBase == 0 {
		c.ReviewBackoffBase = DefaultReviewBackoffBase
	}
	if c.ReviewBackoffMax == 0 {
		c.ReviewBackoffMax = DefaultReviewBackoffMax
	}
	if c.ActionBackoffBase == 0 {
		c.ActionBackoffBase = DefaultActionBackoffBase
	}
	if c.ActionBackoffMax == 0 {
		c.ActionBackoffMax = DefaultActionBackoffMax
	}
	if c.Retention == 0 {
		c.Retention = payments.DefaultRetention
	}
	if c.EventRetention == 0 {
		c.EventRetention = payments.DefaultEventRetention
	}
	if c.PurgeBatch == 0 {
		c.PurgeBatch = DefaultPurgeBatch
	}
	if c.PurgeRest == 0 {
		c.PurgeRest = DefaultPurgeRest
	}
	if c.PurgeSleep == nil {
		c.PurgeSleep = sleep
	}
	if c.Gate == nil {
		c.Gate = func() error { return nil }
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Hasher == nil {
		c.Hasher = idemkeys.NewHasher(nil)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Observer == nil {
		c.Observer = noObserver{}
	}
}

// Outcome is what one pass did with one key or one payment in review.
type Outcome string

const (
	// Succeeded, Declined: the PSP had the charge; the payment is settled with it.
	Succeeded Outcome = "succeeded"
	Declined  Outcome = "declined"
	// Failed: proven never charged (two authoritative "not found" answers a
	// creation window apart, or every send refused unprocessed).
	Failed Outcome = "failed"
	// Deferred: no charge at the PSP yet, but proof that none will come is
	// not complete; looked at again when it can be.
	Deferred Outcome = "deferred"
	// Retrying: the PSP could not answer; the attempt is counted and backed off.
	Retrying Outcome = "retrying"
	// Review: attempts exhausted, or the PSP's answer does not match the
	// payment; the payment is requires_review and joins the review queue.
	Review Outcome = "requires_review"
	// StillInReview: a payment in review whose PSP still gave no answer that
	// settles it; looked at again later.
	StillInReview Outcome = "still_in_review"
	// AwaitingCustomer: a payment in requires_action whose PSP still waits
	// for the customer (3-D Secure, a deposit), or could not say; looked at
	// again later.
	AwaitingCustomer Outcome = "awaiting_customer"
	// Canceled: a payment awaiting confirmation past its expiry, or an
	// authorization past its capture_before, canceled; a void (or a
	// capture that found its authorization lapsed) settled canceled; a
	// cancellation by key carried out.
	Canceled Outcome = "canceled"
	// Unconfigured: the payment's PSP is not configured on this replica; left
	// alone for a replica that has it, or for a person.
	Unconfigured Outcome = "psp_not_configured"
	// Quarantined: the key's row cannot be read (its payment missing or
	// undecodable); set aside, never settled by itself.
	Quarantined Outcome = "quarantined"
	// Fenced: another worker took the key over meanwhile; it owns the outcome.
	Fenced Outcome = "fenced"
	// DatabaseError: a database error; the lease will expire and a later pass retries.
	DatabaseError Outcome = "error"
)

// Outcomes lists every outcome in report order.
var Outcomes = []Outcome{Succeeded, Declined, Failed, Deferred, Retrying, Review, StillInReview, AwaitingCustomer, Canceled,
	Unconfigured, Quarantined, Fenced, DatabaseError}

// Meaning says what an outcome means, for reports.
func Meaning(o Outcome) string {
	switch o {
	case Succeeded:
		return "the PSP had the charge; payment settled succeeded"
	case Declined:
		return "the PSP declined it; payment settled declined"
	case Failed:
		return "proven never charged; payment failed"
	case Deferred:
		return "not at the PSP; proof that it never will be is not complete yet"
	case Retrying:
		return "the PSP could not answer; retried with back-off"
	case Review:
		return "unresolvable for now; in the review queue (looked at again; gateway payments resolve)"
	case StillInReview:
		return "in review; the PSP still gave no settling answer"
	case AwaitingCustomer:
		return "waiting for the customer (3-D Secure, a deposit); looked at again later"
	case Canceled:
		return "canceled: unconfirmed or uncaptured past its expiry, voided, or canceled by key"
	case Unconfigured:
		return "the payment's PSP is not configured on this replica; left alone"
	case Quarantined:
		return "the row cannot be read; set aside for a person"
	case Fenced:
		return "another worker took the payment over meanwhile"
	case DatabaseError:
		return "database error; retried on a later pass"
	}
	return string(o)
}

// Result is one key's (or reviewed payment's) outcome in a pass.
type Result struct {
	PaymentID  string  `json:"payment_id"`
	RefundID   string  `json:"refund_id,omitempty"`
	MerchantID string  `json:"merchant_id"`
	Key        string  `json:"key_hash,omitempty"`
	Outcome    Outcome `json:"outcome"`
	Attempts   int     `json:"attempts"`
	// InReview is true for a payment the review queue looked at.
	InReview bool          `json:"in_review"`
	Age      time.Duration `json:"age_ns"`
	Detail   string        `json:"detail,omitempty"`
}

// Summary is what a pass did.
type Summary struct {
	Results []Result        `json:"results"`
	Counts  map[Outcome]int `json:"counts"`
	Purged  int64           `json:"purged_keys"`
	// Attempts is what the checks of earlier attempts found (design §16).
	Attempts AttemptChecks `json:"attempts"`
	// NeedsReview counts every payment in requires_review after the pass,
	// not only new ones; RefundsNeedReview every refund.
	NeedsReview       int `json:"needs_review"`
	RefundsNeedReview int `json:"refunds_need_review"`
	// Backlog is what the pass left unfinished and in review.
	Backlog payments.Backlog `json:"-"`
	Elapsed time.Duration    `json:"elapsed_ns"`
}

// Reconciler settles unfinished payments.
type Reconciler struct {
	store Store
	psps  *payments.PSPs
	cfg   Config
	log   *slog.Logger
	hash  *idemkeys.Hasher
}

// New returns a Reconciler asking the payments' own PSPs among psps and
// writing to store.
func New(store Store, psps *payments.PSPs, cfg Config) *Reconciler {
	cfg.setDefaults()
	return &Reconciler{store: store, psps: psps, cfg: cfg, log: cfg.Logger, hash: cfg.Hasher}
}

// maxPerPass bounds one pass, so a flood of new stale keys cannot keep it running forever.
const maxPerPass = 1_000_000

// job is one claimed key, one payment in review or waiting for its
// customer, or one refund to check.
type job struct {
	pending *payments.Pending
	review  *payments.InReview
	action  *payments.InReview
	refund  *payments.RefundCheck
}

// RunOnce claims and settles stale keys until none is left, looks at the
// payments in review that are due, then purges keys past retention.
// A pass is a pipeline: claims run one batch ahead of the lookups, so a
// lookup waits on a claim transaction only when that takes longer than a
// lookup; lookup workers (at most Concurrency PSP calls in flight) hand
// what they decided to writers, so a lookup never waits on a write. A key
// handled in this pass is not claimed again by it: every outcome either
// completes the key or moves its next look into the future. One unreadable
// row never stops a pass: it is quarantined.
func (r *Reconciler) RunOnce(ctx context.Context) (Summary, error) {
	start := time.Now()
	sum := Summary{Counts: map[Outcome]int{}}
	if err := r.cfg.Gate(); err != nil {
		return sum, fmt.Errorf("reconcile: pass skipped: %w", err)
	}
	// Claimed leases tick while they wait: claim in batches no larger than
	// the lookups that can start at once and hand them over unbuffered, so
	// the claimer holds the next batch while the current one is looked up
	// and a key waits one lookup at most; a worker skips a key whose lease
	// ran too short. A slow PSP then cannot make this pass race its own
	// expired leases. A decision waiting for a writer needs no such rule:
	// its write is fenced.
	batch := min(r.cfg.BatchSize, r.cfg.Concurrency)
	work := make(chan job)
	writes := make(chan decision, r.cfg.Writers)
	results := make(chan Result, batch)
	var (
		stages sync.WaitGroup
		err    error
	)
	stages.Go(func() {
		defer close(work)
		err = errors.Join(r.claimUnfinished(ctx, batch, work, results), r.claimReview(ctx, batch, work),
			r.claimActions(ctx, batch, work), r.claimRefundChecks(ctx, batch, work))
	})
	stages.Go(func() {
		defer close(writes)
		fanOut(r.cfg.Concurrency, func() {
			for j := range work {
				writes <- r.look(ctx, j)
			}
		})
	})
	stages.Go(func() {
		defer close(results)
		fanOut(r.cfg.Writers, func() {
			for d := range writes {
				results <- d(ctx)
			}
		})
	})
	for res := range results {
		sum.Results = append(sum.Results, res)
		sum.Counts[res.Outcome]++
		r.cfg.Observer.Settled(res.Outcome)
	}
	// Every goroutine of the pass has ended before it goes on.
	stages.Wait()
	expired, eerr := r.expire(ctx)
	canceled, cerr := r.cancellations(ctx)
	expired, eerr = append(expired, canceled...), errors.Join(eerr, cerr)
	for _, res := range expired {
		sum.Results = append(sum.Results, res)
		sum.Counts[res.Outcome]++
		r.cfg.Observer.Settled(res.Outcome)
	}
	attempts, aerr := r.checkAttempts(ctx)
	sum.Attempts = attempts
	err = errors.Join(err, eerr, aerr)
	// The purge runs whatever the claims met: it needs no row to be readable.
	purged, perr := r.Purge(ctx)
	sum.Purged = purged
	return r.finish(ctx, sum, start), errors.Join(err, perr)
}

// fanOut runs f on n goroutines and waits for them all.
func fanOut(n int, f func()) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(f)
	}
	wg.Wait()
}

// decision is what a look decided: the write that records it (fenced, one
// short transaction) and the result it reports once written. Lookup workers
// make decisions; writers run them.
type decision func(context.Context) Result

// look asks the PSP about one job and returns what to write.
func (r *Reconciler) look(ctx context.Context, j job) decision {
	switch {
	case j.pending != nil:
		return r.settle(ctx, *j.pending)
	case j.review != nil:
		return r.reexamine(ctx, *j.review)
	case j.action != nil:
		return r.recheckAction(ctx, *j.action)
	}
	return r.recheckRefund(ctx, *j.refund)
}

func (r *Reconciler) claimUnfinished(ctx context.Context, batch int, work chan<- job, results chan<- Result) error {
	claimed := 0
	for claimed < maxPerPass && ctx.Err() == nil {
		readAt := r.cfg.Now()
		c, err := r.store.ClaimStale(ctx, r.cfg.Lease, batch)
		if err != nil {
			return err
		}
		for _, q := range c.Quarantined {
			results <- r.logged(q.Key.Ref, q.Key.Token, Result{
				PaymentID: q.Key.SubjectID, MerchantID: q.Key.MerchantID, Key: r.hash.Key(q.Key.Ref),
				Outcome: Quarantined, Detail: q.Reason,
			})
		}
		if len(c.Pending) == 0 && len(c.Quarantined) == 0 {
			return nil
		}
		claimed += len(c.Pending) + len(c.Quarantined)
		for i := range c.Pending {
			c.Pending[i].Key.ReadAt = readAt
			work <- job{pending: &c.Pending[i]}
		}
	}
	return ctx.Err()
}

func (r *Reconciler) claimReview(ctx context.Context, batch int, work chan<- job) error {
	return r.claimLooks(ctx, batch, work, r.store.ClaimReview, func(item *payments.InReview) job { return job{review: item} })
}

func (r *Reconciler) claimActions(ctx context.Context, batch int, work chan<- job) error {
	return r.claimLooks(ctx, batch, work, r.store.ClaimActions, func(item *payments.InReview) job { return job{action: item} })
}

// claimLooks hands the payments claim marks as looked at to the workers.
func (r *Reconciler) claimLooks(ctx context.Context, batch int, work chan<- job,
	claim func(context.Context, time.Duration, int) ([]payments.InReview, error), as func(*payments.InReview) job) error {
	claimed := 0
	for claimed < maxPerPass && ctx.Err() == nil {
		items, err := claim(ctx, r.cfg.Lease, batch)
		if err != nil || len(items) == 0 {
			return err
		}
		claimed += len(items)
		for i := range items {
			work <- as(&items[i])
		}
	}
	return ctx.Err()
}

func (r *Reconciler) finish(ctx context.Context, sum Summary, start time.Time) Summary {
	b, err := r.store.Backlog(ctx)
	if err != nil {
		// A failed read must not look like "nothing stuck": the gauges keep their last values.
		r.log.Error("read the backlog", "err", err)
	} else {
		r.cfg.Observer.PassDone(b)
	}
	sum.Backlog, sum.NeedsReview, sum.RefundsNeedReview = b, b.NeedsReview, b.RefundsNeedReview
	sum.Elapsed = time.Since(start)
	return sum
}

// subject is what an unfinished key created, in the terms the reconciler
// settles it in: a payment's charge, or a refund.
type subject struct {
	id  string
	psp string
	// lookup asks the PSP and says what to record: the write of the
	// subject's new state (final, or requires_review) and its outcome; or,
	// pending, that the PSP holds it and it is to be looked at later. err is
	// the lookup's own (psp.ErrNotFound, a failure) or an unreadable answer.
	lookup func(ctx context.Context, a psp.Adapter) (record func(context.Context) error, o Outcome, detail string, pending bool, err error)
	// fail is the write of "proven never sent"; review that of requires_review.
	fail   func(context.Context) error
	review func(why string) func(context.Context) error
}

// subjectOf is what p's key created.
func (r *Reconciler) subjectOf(p payments.Pending) subject {
	key, pay := p.Key, p.Payment
	if p.Refund != nil {
		return r.refundSubject(key, pay, *p.Refund)
	}
	if kind, _ := payments.KindOf(key.Ref.Endpoint); kind == payments.KindCapture || kind == payments.KindVoid {
		return r.operationSubject(key, pay, kind)
	}
	write := func(pay payments.Payment) func(context.Context) error {
		return func(ctx context.Context) error {
			return r.store.Settle(ctx, key.Ref, key.Token, payments.PaymentSettled(pay))
		}
	}
	return subject{
		id:  pay.ID,
		psp: pay.PSP,
		lookup: func(ctx context.Context, a psp.Adapter) (func(context.Context) error, Outcome, string, bool, error) {
			c, err := a.Lookup(ctx, pay.MerchantOrderID)
			if err != nil {
				return nil, "", "", false, err
			}
			settled, err := payments.ApplyCharge(pay, c)
			switch {
			case errors.Is(err, payments.ErrChargePending) && payments.AtFrontEnd(key.Ref.Endpoint):
				// A confirm's customer is at a front end: the payment waits
				// for it, as the live confirm would have recorded.
				return write(payments.AwaitCustomer(pay, c)), AwaitingCustomer, "the PSP waits for the customer", false, nil
			case errors.Is(err, payments.ErrChargePending):
				return nil, "", "", true, nil
			case err != nil:
				return nil, "", "", false, err
			}
			return write(settled), outcomeOf(settled.Status), settled.ReviewReason, false, nil
		},
		fail: func(ctx context.Context) error {
			failed := pay
			failed.Status, failed.DeclineCode = payments.Failed, payments.DeclineNotProcessed
			return write(failed)(ctx)
		},
		review: func(why string) func(context.Context) error {
			reviewed := pay
			reviewed.Status, reviewed.ReviewReason = payments.RequiresReview, why
			return write(reviewed)
		},
	}
}

// settle decides one unfinished key. The lookup runs outside any
// transaction; every write after it is fenced on the claim's token.
func (r *Reconciler) settle(ctx context.Context, p payments.Pending) decision {
	key, pay := p.Key, p.Payment
	sub := r.subjectOf(p)
	res := Result{
		PaymentID:  pay.ID,
		MerchantID: pay.MerchantID,
		Key:        r.hash.Key(key.Ref),
		Attempts:   key.ReconcileAttempts,
		Age:        key.DBNow.Sub(pay.CreatedAt),
	}
	if p.Refund != nil {
		res.RefundID, res.Age = p.Refund.ID, key.DBNow.Sub(p.Refund.CreatedAt)
	}
	// The claim's lease ends no earlier, in this process's time, than this.
	if left := key.ReadAt.Add(r.cfg.Lease).Sub(r.cfg.Now()); left < r.cfg.PSPTimeout {
		// Not enough lease left to look up and write: leave it to expire and be claimed afresh.
		res.Outcome, res.Detail = Fenced, "lease ran short before the lookup"
		return r.reported(key.Ref, key.Token, res)
	}
	adapter, ok := r.psps.For(sub.psp)
	if !ok {
		res.Outcome, res.Detail = Unconfigured, fmt.Sprintf("PSP %q is not configured on this replica", sub.psp)
		return r.reschedule(key, res, payments.Reschedule{After: r.cfg.BackoffMax, Attempts: key.ReconcileAttempts})
	}
	if key.NothingSent() {
		// Every send the key was allowed ended "not processed" or never left.
		res.Outcome, res.Detail = Failed, fmt.Sprintf("all %d attempt(s) to send certainly did nothing", key.SendAttempts)
		return r.written(key, res, sub.fail)
	}
	lctx, cancel := context.WithTimeout(ctx, r.cfg.PSPTimeout)
	record, o, detail, pending, err := sub.lookup(lctx, adapter)
	cancel()
	caps := adapter.Capabilities()
	switch {
	case err == nil && pending:
		// Accepted and waiting (a deposit, the customer): not a failed
		// look, so no attempt is spent; looked at again on the back-off.
		res.Outcome, res.Detail = Deferred, "pending at the PSP"
		return r.reschedule(key, res, payments.Reschedule{After: jitter(r.cfg.BackoffBase), Attempts: key.ReconcileAttempts})
	case err == nil:
		res.Outcome, res.Detail = o, detail
		return r.written(key, res, record)
	case errors.Is(err, psp.ErrNotFound) && caps.AuthoritativeLookup:
		return r.notFound(key, sub, res, caps.CreationWindow)
	case errors.Is(err, psp.ErrNotFound):
		return r.retry(key, sub, res, "not found, but the PSP's lookup is not authoritative")
	}
	return r.retry(key, sub, res, err.Error())
}

// notFound weighs an authoritative "no such charge" (or refund). "Failed"
// needs proof that nothing can still appear: the database's clock at the
// claim (which preceded the lookup) is past may_send_until plus the
// creation window, and an earlier authoritative "not found", recorded under
// a reconciler's own lease after its lookup, is itself a creation window
// old. Anything less defers the verdict; nothing is guessed.
func (r *Reconciler) notFound(key idemkeys.Record, sub subject, res Result, window time.Duration) decision {
	switch {
	case key.MaySendUntil.IsZero():
		return r.retry(key, sub, res, "no record of when the last send could have left")
	case key.DBNow.Before(key.MaySendUntil.Add(window)):
		at := key.MaySendUntil.Add(window)
		res.Outcome, res.Detail = Deferred, "not at the PSP yet; it may still appear until "+at.UTC().Format(time.RFC3339)
		return r.reschedule(key, res, payments.Reschedule{NotBefore: at, Attempts: key.ReconcileAttempts})
	case key.NotFoundAt.IsZero():
		res.Outcome, res.Detail = Deferred, "first authoritative not-found; confirmed after the creation window"
		return r.reschedule(key, res, payments.Reschedule{After: window, Attempts: key.ReconcileAttempts, NotFound: true})
	case key.DBNow.Before(key.NotFoundAt.Add(window)):
		at := key.NotFoundAt.Add(window)
		res.Outcome, res.Detail = Deferred, "second not-found due at "+at.UTC().Format(time.RFC3339)
		return r.reschedule(key, res, payments.Reschedule{NotBefore: at, Attempts: key.ReconcileAttempts})
	}
	res.Outcome, res.Detail = Failed, "the PSP has none, twice a creation window apart"
	return r.written(key, res, sub.fail)
}

func outcomeOf(s payments.Status) Outcome {
	switch s {
	case payments.Succeeded:
		return Succeeded
	case payments.Declined:
		return Declined
	case payments.Failed:
		return Failed
	case payments.Canceled:
		return Canceled
	}
	return Review
}

// retry counts a pass that learned nothing, backs off, and hands the
// subject to the review queue once the attempts are spent. It never guesses.
func (r *Reconciler) retry(key idemkeys.Record, sub subject, res Result, why string) decision {
	res.Attempts = key.ReconcileAttempts + 1
	res.Detail = why
	if res.Attempts >= r.cfg.MaxAttempts {
		res.Outcome = Review
		return r.written(key, res, sub.review(fmt.Sprintf("%d lookups learned nothing; the last: %s", res.Attempts, why)))
	}
	res.Outcome = Retrying
	return r.reschedule(key, res, payments.Reschedule{After: jitter(backoff(r.cfg.BackoffBase, r.cfg.BackoffMax, res.Attempts)), Attempts: res.Attempts})
}

// backoff is base × 2^(attempts-1), capped.
func backoff(base, max time.Duration, attempts int) time.Duration {
	d := base
	for i := 1; i < attempts && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}

// jitter spreads d over ±20 %, so that payments stuck together (a PSP
// outage) are not all looked at again at the same instant.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// written is the write that stores a subject's new state and the answer a
// retry will replay (rendered by the same functions as the live path's),
// reported once it ran.
func (r *Reconciler) written(key idemkeys.Record, res Result, write func(context.Context) error) decision {
	return func(ctx context.Context) Result {
		return r.logged(key.Ref, key.Token, r.outcome(res, write(ctx)))
	}
}

func (r *Reconciler) reschedule(key idemkeys.Record, res Result, rs payments.Reschedule) decision {
	return func(ctx context.Context) Result {
		err := r.store.Reschedule(ctx, key.Ref, key.Token, rs)
		return r.logged(key.Ref, key.Token, r.outcome(res, err))
	}
}

// reported is a decision with nothing to write.
func (r *Reconciler) reported(ref idemkeys.Ref, token idemkeys.Token, res Result) decision {
	return func(context.Context) Result { return r.logged(ref, token, res) }
}

// outcome is res as the write that ended it left it.
func (r *Reconciler) outcome(res Result, err error) Result {
	switch {
	case err == nil:
	case errors.Is(err, idemkeys.ErrFenced):
		res.Outcome, res.Detail = Fenced, "another worker took the key over"
	default:
		res.Outcome, res.Detail = DatabaseError, err.Error()
	}
	return res
}

func (r *Reconciler) logged(ref idemkeys.Ref, token idemkeys.Token, res Result) Result {
	level := slog.LevelInfo
	switch res.Outcome {
	case Review, DatabaseError, Quarantined:
		level = slog.LevelError
	case Retrying, Fenced, Unconfigured, StillInReview:
		level = slog.LevelWarn
	}
	r.log.Log(context.Background(), level, "reconcile",
		"outcome", string(res.Outcome), "payment_id", res.PaymentID, "refund_id", res.RefundID, r.hash.Attr(ref),
		"grant", token.Grant(), "attempts", res.Attempts, "in_review", res.InReview, "detail", res.Detail)
	return res
}

// Purge deletes completed keys past retention, then events and ended
// webhook deliveries past the events' retention, in small batches, and
// returns the keys it deleted. The keys' batches each start where the last
// one ended (a cursor on completion time, then primary key), so no batch
// walks again over what was deleted.
func (r *Reconciler) Purge(ctx context.Context) (int64, error) {
	var cursor payments.PurgeCursor
	keys, err := r.purge(ctx, "idempotency keys", r.cfg.Retention, func(ctx context.Context) (int64, bool, error) {
		n, next, done, err := r.store.PurgeKeys(ctx, r.cfg.Retention, cursor, r.cfg.PurgeBatch)
		cursor = next
		return n, done, err
	}, r.cfg.Observer.Purged)
	if err != nil {
		return keys, err
	}
	var events payments.EventPurgeCursor
	_, err = r.purge(ctx, "events", r.cfg.EventRetention, func(ctx context.Context) (int64, bool, error) {
		n, next, done, err := r.store.PurgeEvents(ctx, r.cfg.EventRetention, events, r.cfg.PurgeBatch)
		events = next
		return n, done, err
	}, func(int64) {})
	if err != nil {
		return keys, err
	}
	_, err = r.purge(ctx, "webhook deliveries", r.cfg.EventRetention, func(ctx context.Context) (int64, bool, error) {
		n, err := r.store.PurgeDeliveries(ctx, r.cfg.EventRetention, r.cfg.PurgeBatch)
		return n, n < int64(r.cfg.PurgeBatch), err
	}, func(int64) {})
	return keys, err
}

// purge runs one batch (step) after another until one says it was the
// last, resting after each PurgeRest times as long as it took and at least
// PurgePause (see Config), and logging its progress every purgeProgress.
// Batches are timed on this process's clock (Config.Now).
func (r *Reconciler) purge(ctx context.Context, what string, retention time.Duration,
	step func(context.Context) (n int64, done bool, err error), counted func(int64)) (int64, error) {
	var (
		total    int64
		now      = r.cfg.Now
		start    = now()
		reported = start
	)
	for {
		began := now()
		n, done, err := step(ctx)
		took := now().Sub(began)
		total += n
		counted(n)
		if err != nil || done {
			if total > 0 {
				r.log.Info("purged "+what, "count", total, "retention", retention.String(),
					"elapsed", now().Sub(start).Round(time.Millisecond).String())
			}
			return total, err
		}
		if now().Sub(reported) >= purgeProgress {
			reported = now()
			el := reported.Sub(start)
			r.log.Info("purging "+what, "count", total, "elapsed", el.Round(time.Second).String(),
				"rows_per_second", int64(float64(total)/el.Seconds()))
		}
		if rest := r.purgeRest(took); rest > 0 {
			if err := r.cfg.PurgeSleep(ctx, rest); err != nil {
				return total, err
			}
		}
	}
}

// purgeRest is the rest after a purge batch that took took.
func (r *Reconciler) purgeRest(took time.Duration) time.Duration {
	return max(r.cfg.PurgePause, time.Duration(float64(max(took, 0))*r.cfg.PurgeRest))
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

// purgeProgress is how often a long purge logs how far it got.
const purgeProgress = 10 * time.Second
