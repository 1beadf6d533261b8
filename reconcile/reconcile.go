// Package reconcile owns the reconciler: the job that settles every payment
// a crash, a deploy or a lost PSP response left unfinished, by asking the PSP
// what really happened, and that purges idempotency keys past retention. It
// never charges. Any number of replicas may run it at once: rows are claimed
// with SKIP LOCKED and every write is fenced on the lease version.
package reconcile

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"gateway/idemkeys"
	"gateway/payments"
	"gateway/psp"
)

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
	// MaxAttempts is how many passes may fail to learn an outcome before the
	// payment is handed to ops as requires_review.
	MaxAttempts int
	// BackoffBase and BackoffMax shape the wait between failed passes on one
	// key: base, 2×base, 4×base … capped at max.
	BackoffBase time.Duration
	BackoffMax  time.Duration
	// Retention is how long a completed key keeps its stored response.
	Retention time.Duration
	// PurgeBatch is how many keys one DELETE removes.
	PurgeBatch int
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// Logger receives one event per settlement; keys are hashed.
	Logger *slog.Logger
	// Hasher names keys and merchants in logs and reports.
	Hasher *idemkeys.Hasher
	// Observer is told what each pass did, for metrics; nil observes nothing.
	Observer Observer
}

// Store is what the reconciler reads and writes. Every write after a claim
// is fenced on the lease version the claim returned.
type Store interface {
	// ClaimStale takes over up to limit unfinished keys whose lease expired,
	// with leases ending at until. Rows locked by a concurrent claimer are
	// skipped, never waited for.
	ClaimStale(ctx context.Context, now, until time.Time, limit int) ([]payments.Pending, error)
	// Settle records a payment's final state and its key's stored answer while
	// the caller holds lease version held; idemkeys.ErrFenced otherwise.
	Settle(ctx context.Context, ref idemkeys.Ref, held int64, p payments.Payment, resp idemkeys.Response, now time.Time) error
	// Reschedule gives back a lease without settling: the lease ends now, the
	// reconciler looks again from after; idemkeys.ErrFenced when the caller
	// no longer holds it.
	Reschedule(ctx context.Context, ref idemkeys.Ref, held int64, after time.Time, attempts int, now time.Time) error
	// PurgeKeys deletes up to limit completed keys finished before `before`.
	PurgeKeys(ctx context.Context, before time.Time, limit int) (int64, error)
	// CountPayments counts payments in a status across merchants.
	CountPayments(ctx context.Context, status payments.Status) (int, error)
	// OldestUnfinished returns when the oldest unfinished key was created; zero when none is.
	OldestUnfinished(ctx context.Context) (time.Time, error)
}

// Observer is told what the reconciler does. Implementations must be safe
// for concurrent use.
type Observer interface {
	// Settled counts one key's outcome.
	Settled(o Outcome)
	// Purged counts deleted keys.
	Purged(n int64)
	// PassDone reports, after a pass, the payments awaiting review and the age
	// of the oldest unfinished key (0 when there is none).
	PassDone(needsReview int, oldestUnfinished time.Duration)
}

type noObserver struct{}

func (noObserver) Settled(Outcome)             {}
func (noObserver) Purged(int64)                {}
func (noObserver) PassDone(int, time.Duration) {}

// Defaults of the reconciler's own settings; the flow's (lease, PSP
// timeout, retention) come from package payments.
const (
	DefaultBatchSize   = 100
	DefaultConcurrency = 16
	DefaultMaxAttempts = 10
	DefaultBackoffBase = 30 * time.Second
	DefaultBackoffMax  = 30 * time.Minute
	DefaultPurgeBatch  = 500
	DefaultSchedule    = "@every 30s"
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
	if c.MaxAttempts == 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.BackoffBase == 0 {
		c.BackoffBase = DefaultBackoffBase
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = DefaultBackoffMax
	}
	if c.Retention == 0 {
		c.Retention = payments.DefaultRetention
	}
	if c.PurgeBatch == 0 {
		c.PurgeBatch = DefaultPurgeBatch
	}
	if c.Hasher == nil {
		c.Hasher = idemkeys.NewHasher(nil)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Observer == nil {
		c.Observer = noObserver{}
	}
}

// Outcome is what one pass did with one key.
type Outcome string

const (
	// Succeeded, Declined: the PSP had the charge; the payment is settled with it.
	Succeeded Outcome = "succeeded"
	Declined  Outcome = "declined"
	// Failed: the PSP authoritatively never charged and the creation window is over.
	Failed Outcome = "failed"
	// Deferred: the PSP has no charge yet, but one may still appear; look again later.
	Deferred Outcome = "deferred"
	// Retrying: the PSP could not answer; the attempt is counted and backed off.
	Retrying Outcome = "retrying"
	// Review: attempts exhausted; the payment is requires_review for ops.
	Review Outcome = "requires_review"
	// Fenced: another worker took the key over meanwhile; it owns the outcome.
	Fenced Outcome = "fenced"
	// DatabaseError: a database error; the lease will expire and a later pass retries.
	DatabaseError Outcome = "error"
)

// Outcomes lists every outcome in report order.
var Outcomes = []Outcome{Succeeded, Declined, Failed, Deferred, Retrying, Review, Fenced, DatabaseError}

// Result is one key's outcome in a pass.
type Result struct {
	PaymentID  string        `json:"payment_id"`
	MerchantID string        `json:"merchant_id"`
	Key        string        `json:"key_hash"`
	Outcome    Outcome       `json:"outcome"`
	Attempts   int           `json:"attempts"`
	Age        time.Duration `json:"age_ns"`
	Detail     string        `json:"detail,omitempty"`
}

// Summary is what a pass did.
type Summary struct {
	Results []Result        `json:"results"`
	Counts  map[Outcome]int `json:"counts"`
	Purged  int64           `json:"purged_keys"`
	// NeedsReview counts every payment in requires_review after the pass, not only new ones.
	NeedsReview int           `json:"needs_review"`
	Elapsed     time.Duration `json:"elapsed_ns"`
}

// Reconciler settles unfinished payments.
type Reconciler struct {
	store Store
	psp   psp.Adapter
	cfg   Config
	log   *slog.Logger
}

// New returns a Reconciler asking adapter and writing to store.
func New(store Store, adapter psp.Adapter, cfg Config) *Reconciler {
	cfg.setDefaults()
	return &Reconciler{store: store, psp: adapter, cfg: cfg, log: cfg.Logger}
}

// maxPerPass bounds one pass, so a flood of new stale keys cannot keep it running forever.
const maxPerPass = 1_000_000

// RunOnce claims and settles stale keys until none is left, then purges keys
// past retention. Claiming runs one batch ahead of the lookups so the PSP
// calls never wait on a claim transaction. A key handled in this pass is not
// claimed again by it: every outcome either completes the key or moves its
// next look into the future.
func (r *Reconciler) RunOnce(ctx context.Context) (Summary, error) {
	start := time.Now()
	sum := Summary{Counts: map[Outcome]int{}}
	// Claimed leases tick while they wait: claim no more than the workers can
	// start at once, hand them over unbuffered, and let a worker skip a key
	// whose lease ran too short, so a slow PSP cannot make this pass race
	// its own expired leases.
	batch := min(r.cfg.BatchSize, r.cfg.Concurrency)
	work := make(chan payments.Pending)
	results := make(chan Result, batch)
	var workers sync.WaitGroup
	for range r.cfg.Concurrency {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for p := range work {
				results <- r.settle(ctx, p)
			}
		}()
	}
	claimErr := make(chan error, 1)
	go func() {
		defer close(work)
		claimed := 0
		for claimed < maxPerPass && ctx.Err() == nil {
			now := r.now()
			claimedNow, err := r.store.ClaimStale(ctx, now, now.Add(r.cfg.Lease), batch)
			if err != nil {
				claimErr <- err
				return
			}
			if len(claimedNow) == 0 {
				break
			}
			claimed += len(claimedNow)
			for _, p := range claimedNow {
				work <- p
			}
		}
		claimErr <- ctx.Err()
	}()
	go func() { workers.Wait(); close(results) }()
	for res := range results {
		sum.Results = append(sum.Results, res)
		sum.Counts[res.Outcome]++
		r.cfg.Observer.Settled(res.Outcome)
	}
	if err := <-claimErr; err != nil {
		return r.finish(ctx, sum, start), err
	}
	purged, err := r.Purge(ctx)
	sum.Purged = purged
	return r.finish(ctx, sum, start), err
}

func (r *Reconciler) finish(ctx context.Context, sum Summary, start time.Time) Summary {
	n, err := r.store.CountPayments(ctx, payments.RequiresReview)
	if err != nil {
		r.log.Error("count payments in review", "err", err)
	}
	sum.NeedsReview = n
	var age time.Duration
	oldest, oerr := r.store.OldestUnfinished(ctx)
	if oerr != nil {
		r.log.Error("find the oldest unfinished key", "err", oerr)
	} else if !oldest.IsZero() {
		age = r.now().Sub(oldest)
	}
	if err == nil && oerr == nil {
		// A failed read must not look like "nothing stuck": the gauges keep their last values.
		r.cfg.Observer.PassDone(n, age)
	}
	sum.Elapsed = time.Since(start)
	return sum
}

// settle decides one key. The lookup runs outside any transaction; every
// write after it is fenced on the version ClaimStale gave us.
func (r *Reconciler) settle(ctx context.Context, p payments.Pending) Result {
	key, pay := p.Key, p.Payment
	res := Result{
		PaymentID:  pay.ID,
		MerchantID: pay.MerchantID,
		Key:        r.cfg.Hasher.Key(key.Ref),
		Attempts:   key.ReconcileAttempts,
		Age:        r.now().Sub(pay.CreatedAt),
	}
	if left := key.LockedUntil.Sub(r.now()); left < r.cfg.PSPTimeout {
		// Not enough lease left to look up and write: leave it to expire and be claimed afresh.
		res.Outcome, res.Detail = Fenced, "lease ran short before the lookup"
		return r.logged(key, res)
	}
	lctx, cancel := context.WithTimeout(ctx, r.cfg.PSPTimeout)
	charge, err := r.psp.Lookup(lctx, pay.MerchantOrderID)
	cancel()
	caps := r.psp.Capabilities()
	now := r.now()
	switch {
	case err == nil:
		switch charge.Status {
		case psp.Succeeded:
			pay.Status, res.Outcome = payments.Succeeded, Succeeded
		case psp.Declined:
			pay.Status, res.Outcome = payments.Declined, Declined
		default:
			return r.retry(ctx, p, res, "psp returned status "+string(charge.Status), now)
		}
		pay.PSPReference, pay.DeclineCode = charge.Reference, charge.DeclineCode
		return r.complete(ctx, key, pay, res, now)
	case errors.Is(err, psp.ErrNotFound) && caps.AuthoritativeLookup:
		settleAt := key.MayChargeUntil.Add(caps.CreationWindow)
		if now.Before(settleAt) {
			// A charge sent under the last lease may still appear: look again once it cannot.
			res.Outcome = Deferred
			res.Detail = "not at the PSP yet; decidable at " + settleAt.UTC().Format(time.RFC3339)
			return r.reschedule(ctx, key, res, settleAt, key.ReconcileAttempts, now)
		}
		pay.Status, pay.DeclineCode = payments.Failed, payments.DeclineNotProcessed
		res.Outcome = Failed
		res.Detail = "the PSP never processed it"
		return r.complete(ctx, key, pay, res, now)
	case errors.Is(err, psp.ErrNotFound):
		return r.retry(ctx, p, res, "not found, but the PSP's lookup is not authoritative", now)
	}
	return r.retry(ctx, p, res, err.Error(), now)
}

// retry counts a pass that learned nothing, backs off, and hands the payment
// to ops once the attempts are spent. It never guesses an outcome.
func (r *Reconciler) retry(ctx context.Context, p payments.Pending, res Result, why string, now time.Time) Result {
	key, pay := p.Key, p.Payment
	res.Attempts = key.ReconcileAttempts + 1
	res.Detail = why
	if res.Attempts >= r.cfg.MaxAttempts {
		res.Outcome = Review
		pay.Status = payments.RequiresReview
		return r.complete(ctx, key, pay, res, now)
	}
	res.Outcome = Retrying
	return r.reschedule(ctx, key, res, now.Add(r.backoff(res.Attempts)), res.Attempts, now)
}

// backoff is base × 2^(attempts-1), capped.
func (r *Reconciler) backoff(attempts int) time.Duration {
	d := r.cfg.BackoffBase
	for i := 1; i < attempts && d < r.cfg.BackoffMax; i++ {
		d *= 2
	}
	return min(d, r.cfg.BackoffMax)
}

// complete stores the final state and the response a retry will replay,
// rendered by the same function as the live path's.
func (r *Reconciler) complete(ctx context.Context, key idemkeys.Record, pay payments.Payment, res Result, now time.Time) Result {
	pay.UpdatedAt = now
	err := r.store.Settle(ctx, key.Ref, key.LeaseVersion, pay, payments.Render(pay), now)
	return r.logged(key, r.written(res, err))
}

func (r *Reconciler) reschedule(ctx context.Context, key idemkeys.Record, res Result, after time.Time, attempts int, now time.Time) Result {
	err := r.store.Reschedule(ctx, key.Ref, key.LeaseVersion, after, attempts, now)
	return r.logged(key, r.written(res, err))
}

func (r *Reconciler) written(res Result, err error) Result {
	switch {
	case err == nil:
	case errors.Is(err, idemkeys.ErrFenced):
		res.Outcome, res.Detail = Fenced, "another worker took the key over"
	default:
		res.Outcome, res.Detail = DatabaseError, err.Error()
	}
	return res
}

func (r *Reconciler) logged(key idemkeys.Record, res Result) Result {
	level := slog.LevelInfo
	switch res.Outcome {
	case Review, DatabaseError:
		level = slog.LevelError
	case Retrying, Fenced:
		level = slog.LevelWarn
	}
	r.log.Log(context.Background(), level, "reconcile",
		"outcome", string(res.Outcome), "payment_id", res.PaymentID, r.cfg.Hasher.Attr(key.Ref), "lease_version", key.LeaseVersion, "attempts", res.Attempts, "detail", res.Detail)
	return res
}

// Purge deletes completed keys past retention in small batches.
func (r *Reconciler) Purge(ctx context.Context) (int64, error) {
	before := r.now().Add(-r.cfg.Retention)
	var total int64
	for {
		n, err := r.store.PurgeKeys(ctx, before, r.cfg.PurgeBatch)
		total += n
		r.cfg.Observer.Purged(n)
		if err != nil || n < int64(r.cfg.PurgeBatch) {
			if total > 0 {
				r.log.Info("purged idempotency keys", "count", total, "completed_before", before)
			}
			return total, err
		}
	}
}

func (r *Reconciler) now() time.Time { return r.cfg.Now().UTC().Truncate(time.Microsecond) }
