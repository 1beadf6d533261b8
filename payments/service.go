package payments

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"gateway/errs"
	"gateway/idemkeys"
)

// Config tunes the payment flow.
type Config struct {
	// Lease is how long a worker owns an unfinished key before a retry or the
	// reconciler may take it over. It must outlast PSPTimeout.
	Lease time.Duration
	// PSPTimeout bounds each PSP call.
	PSPTimeout time.Duration
	// InFlightWait bounds how long a duplicate waits for the first request with
	// its key to finish before it is answered 409.
	InFlightWait time.Duration
	// WriteTimeout bounds each write made after a PSP call
	// (DefaultWriteTimeout when zero).
	WriteTimeout time.Duration
	// Now is this process's clock, for what only this process compares: how
	// much of its own charge window is left, the replay cache's ages. Leases,
	// deadlines and expiry that replicas share are judged on the database's
	// clock. time.Now when nil (whose monotonic reading makes intervals exact).
	Now func() time.Time
	// Gate, when set, says whether this replica may claim and charge now;
	// an error (a clock that drifted from the database's, say) is the reason
	// it may not. Replays of stored answers go on.
	Gate func() error
	// Logger receives settlement, takeover and fencing events; keys are hashed.
	Logger *slog.Logger
	// Hasher names keys and merchants in logs; a random key when nil.
	Hasher *idemkeys.Hasher
	// Observer is told what the flow does, for metrics; nil observes nothing.
	Observer Observer
	// ReplayCacheBytes bounds the final answers this process keeps for
	// replays without a database read; 0 keeps none.
	ReplayCacheBytes int64
	// ReplayCacheTTL is how long an answer is replayed from memory before
	// the stored one is read again; DefaultReplayCacheTTL when zero.
	ReplayCacheTTL time.Duration
	// Retention is how long a completed key replays (the reconciler purges
	// it after); DefaultRetention when zero.
	Retention time.Duration
	// ConfirmExpiry is how long a payment created with "confirm": false
	// waits for its confirmation before the reconciler cancels it;
	// DefaultConfirmExpiry when zero.
	ConfirmExpiry time.Duration
}

// Observer is told what the payment flow does. Implementations must be
// cheap and safe for concurrent use.
type Observer interface {
	// KeyOutcome counts how a create request's key was used.
	KeyOutcome(outcome KeyOutcome)
	// InFlightWaited records how long a duplicate waited for the first request.
	InFlightWaited(d time.Duration)
	// LeaseTakenOver counts takeovers of expired leases.
	LeaseTakenOver()
	// FencingRefused counts writes refused because the writer lost its lease.
	FencingRefused()
	// FailedOver counts a payment's next attempt, started at account to
	// after its attempt at account from certainly did nothing.
	FailedOver(from, to string)
	// UnconfiguredPSP counts payments this replica could not resume because
	// the PSP they were sent to is not configured here.
	UnconfiguredPSP()
	// PaymentRecorded counts a payment the flow recorded final or in
	// review (once per payment: the write that recorded it), with its
	// decline code ("" when none).
	PaymentRecorded(status Status, declineCode string)
	// RefundRecorded counts a refund the flow recorded final or in review.
	RefundRecorded(status RefundStatus)
}

// KeyOutcome is how a request used its idempotency key.
type KeyOutcome string

// Every KeyOutcome, for metrics that count each from zero.
const (
	// OutcomeFresh: the request claimed the key and ran the payment.
	OutcomeFresh KeyOutcome = "fresh"
	// OutcomeReplayed: the key's stored answer was replayed.
	OutcomeReplayed KeyOutcome = "replayed"
	// OutcomeMismatch: the key was used before with another request (422).
	OutcomeMismatch KeyOutcome = "mismatch"
	// OutcomeInFlight: the key's first request was still running (409).
	OutcomeInFlight KeyOutcome = "in_flight"
	// OutcomeKeyReused: the key was purged but its payment exists (409).
	OutcomeKeyReused KeyOutcome = "key_reused"
)

// KeyOutcomes lists every KeyOutcome.
var KeyOutcomes = []KeyOutcome{OutcomeFresh, OutcomeReplayed, OutcomeMismatch, OutcomeInFlight, OutcomeKeyReused}

type noObserver struct{}

func (noObserver) KeyOutcome(KeyOutcome)          {}
func (noObserver) InFlightWaited(time.Duration)   {}
func (noObserver) LeaseTakenOver()                {}
func (noObserver) FencingRefused()                {}
func (noObserver) UnconfiguredPSP()               {}
func (noObserver) FailedOver(string, string)      {}
func (noObserver) PaymentRecorded(Status, string) {}
func (noObserver) RefundRecorded(RefundStatus)    {}

// Service runs the idempotent payment flow.
type Service struct {
	store    FlowStore
	psps     *PSPs
	hash     *idemkeys.Hasher
	cfg      Config
	waiter   *idemkeys.Waiter
	log      *slog.Logger
	obs      Observer
	replays  *idemkeys.ReplayCache
	pace     *idemkeys.Pacer
	draining atomic.Bool
}

// NewService returns a Service charging through psps and storing in store.
func NewService(store FlowStore, psps *PSPs, cfg Config) *Service {
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.PSPTimeout <= 0 {
		cfg.PSPTimeout = DefaultPSPTimeout
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultWriteTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Gate == nil {
		cfg.Gate = func() error { return nil }
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Observer == nil {
		cfg.Observer = noObserver{}
	}
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.ConfirmExpiry <= 0 {
		cfg.ConfirmExpiry = DefaultConfirmExpiry
	}
	if cfg.ReplayCacheTTL <= 0 {
		cfg.ReplayCacheTTL = DefaultReplayCacheTTL
	}
	if cfg.Hasher == nil {
		cfg.Hasher = idemkeys.NewHasher(nil)
	}
	return &Service{replays: idemkeys.NewReplayCache(cfg.ReplayCacheBytes, cfg.ReplayCacheTTL), pace: idemkeys.NewPacer(),
		store: store, psps: psps, hash: cfg.Hasher, cfg: cfg, waiter: idemkeys.NewWaiter(), log: cfg.Logger, obs: cfg.Observer}
}

// Drain stops this replica from sending charges it has not sent yet: a
// request that reaches the charge from now on gives its key back (503, the
// client's retry resumes elsewhere) instead of starting a PSP call that a
// shutdown could cut short. Requests already calling the PSP finish.
func (s *Service) Drain() { s.draining.Store(true) }

// Payment returns one of the merchant's payments; CodeNotFound otherwise.
func (s *Service) Payment(ctx context.Context, merchantID, id string) (Payment, error) {
	p, err := s.store.Payment(ctx, merchantID, id)
	return s.withCheckout(p), notFound(err, "payment not found")
}

// PaymentByKey returns the payment created with a key, so a client can poll
// instead of posting again.
func (s *Service) PaymentByKey(ctx context.Context, merchantID, key string) (Payment, error) {
	if err := idemkeys.ValidateKey(key); err != nil {
		return Payment{}, &errs.Error{Code: errs.CodeInvalidKey, Message: err.Error()}
	}
	p, err := s.store.PaymentByKey(ctx, merchantID, key)
	return s.withCheckout(p), notFound(err, "no payment was created with this idempotency key")
}

func notFound(err error, msg string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errs.ErrNotFound):
		return &errs.Error{Code: errs.CodeNotFound, Message: msg}
	}
	return errs.Internal(err)
}
