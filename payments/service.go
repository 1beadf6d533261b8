package payments

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/oklog/ulid/v2"

	"gateway/idemkeys"
	"gateway/psp"
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
	// Now is the clock leases are measured with; time.Now when nil.
	Now func() time.Time
	// Logger receives settlement, takeover and fencing events; keys are hashed.
	Logger *slog.Logger
	// Observer is told what the flow does, for metrics; nil observes nothing.
	Observer Observer
	// Hasher names keys and merchants in logs; a random key when nil.
	Hasher *idemkeys.Hasher
	// ReplayCacheSize is how many final answers this process keeps for
	// replays without a database read; 0 keeps none.
	ReplayCacheSize int
	// Retention is how long a completed key replays (the reconciler purges
	// it after); 7 days when zero.
	Retention time.Duration
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

func (noObserver) KeyOutcome(KeyOutcome)        {}
func (noObserver) InFlightWaited(time.Duration) {}
func (noObserver) LeaseTakenOver()              {}
func (noObserver) FencingRefused()              {}

// Service runs the idempotent payment flow.
type Service struct {
	store   FlowStore
	psp     psp.Adapter
	hash    *idemkeys.Hasher
	cfg     Config
	waiter  *idemkeys.Waiter
	log     *slog.Logger
	obs     Observer
	replays *replayCache
	pace    *pacer
}

// NewService returns a Service charging through adapter and storing in store.
func NewService(store FlowStore, adapter psp.Adapter, cfg Config) *Service {
	if cfg.Now == nil {
		cfg.Now = time.Now
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
	if cfg.Hasher == nil {
		cfg.Hasher = idemkeys.NewHasher(nil)
	}
	return &Service{replays: newReplayCache(cfg.ReplayCacheSize, cfg.Retention), pace: &pacer{tat: map[idemkeys.Ref]time.Time{}},
		store: store, psp: adapter, hash: cfg.Hasher, cfg: cfg, waiter: idemkeys.NewWaiter(), log: cfg.Logger, obs: cfg.Observer}
}

// Outcome is the answer to a create request.
type Outcome struct {
	Response idemkeys.Response
	// Replayed is true when the response was stored by an earlier request.
	Replayed  bool
	PaymentID string
}

// Polling bounds for a duplicate waiting on a key finished by another replica.
const (
	firstPoll = 5 * time.Millisecond
	maxPoll   = 100 * time.Millisecond
	// maxClaims bounds how often one request goes back to the INSERT after the
	// key vanished under it (a claim rolled back, or a record purged).
	maxClaims = 3
)

// attempt carries one request through the flow.
type attempt struct {
	ref idemkeys.Ref
	fp  [32]byte
	// waitCtx ends when the request has waited long enough for a duplicate in flight.
	waitCtx context.Context
}

// Create charges the customer for req at most once per (merchant, key),
// whatever number of times it is called and from however many replicas.
//
// Errors are *Error: CodeInvalidKey and CodeInvalid (nothing stored),
// CodeKeyMismatch (the key was used for another request), CodeInFlight (the
// key is being processed; retry later), CodeKeyReused, CodePSPUnavailable and
// CodePSPUnknown (retry with the same key), CodeInternal.
//
// The caller should not cancel ctx when its client goes away: once claimed,
// a payment is best finished while the worker still holds the lease.
func (s *Service) Create(ctx context.Context, req CreateRequest) (Outcome, error) {
	if err := idemkeys.ValidateKey(req.IdempotencyKey); err != nil {
		return Outcome{}, &Error{Code: CodeInvalidKey, Message: err.Error()}
	}
	req.Normalize()
	if err := req.Validate(); err != nil {
		return Outcome{}, err
	}
	waitCtx, cancel := context.WithTimeout(ctx, s.cfg.InFlightWait)
	defer cancel()
	a := attempt{
		ref:     idemkeys.Ref{MerchantID: req.MerchantID, Endpoint: EndpointCreatePayment, Key: req.IdempotencyKey},
		fp:      req.Fingerprint(),
		waitCtx: waitCtx,
	}
	if e, ok := s.replays.get(a.ref, s.cfg.Now()); ok && e.fp == a.fp {
		return s.replay(ctx, a, e.paymentID, e.resp), nil
	}
	for range maxClaims {
		out, err := s.claim(ctx, a, req)
		if !errors.Is(err, errVanished) {
			return out, err
		}
	}
	return Outcome{}, internal(fmt.Errorf("key %s vanished %d times in a row", s.hash.Key(a.ref), maxClaims))
}

// replay answers with a completed key's stored response, at the key's pace.
func (s *Service) replay(ctx context.Context, a attempt, paymentID string, resp idemkeys.Response) Outcome {
	s.pace.wait(ctx, a.ref)
	s.obs.KeyOutcome(OutcomeReplayed)
	s.log.InfoContext(ctx, "idempotent replay", s.hash.Attr(a.ref), "payment_id", paymentID, "status", resp.Status)
	return Outcome{Response: resp, Replayed: true, PaymentID: paymentID}
}

// errVanished: the key's record disappeared between the INSERT that found it and
// the read (the other claim rolled back, or the record was purged); claim again.
var errVanished = errors.New("payments: key vanished; claim again")

func (s *Service) claim(ctx context.Context, a attempt, req CreateRequest) (Outcome, error) {
	now := s.cfg.Now().UTC().Truncate(time.Microsecond)
	p := Payment{
		ID:              "pay_" + ulid.Make().String(),
		MerchantID:      req.MerchantID,
		IdempotencyKey:  req.IdempotencyKey,
		MerchantOrderID: MerchantOrderID(req.MerchantID, req.IdempotencyKey),
		Status:          Processing,
		Amount:          req.Amount,
		PaymentMethod:   req.PaymentMethod,
		Description:     req.Description,
		Metadata:        req.Metadata,
		CreatedAt:       now,
		UpdatedAt:       now,
	}
	rec := idemkeys.Record{
		Ref:          a.ref,
		Fingerprint:  a.fp,
		State:        idemkeys.InProgress,
		PaymentID:    p.ID,
		LeaseVersion: 1,
		LockedUntil:  now.Add(s.cfg.Lease),
		CreatedAt:    now,
	}
	err := s.store.Claim(ctx, rec, p)
	switch {
	case err == nil:
		s.obs.KeyOutcome(OutcomeFresh)
		return s.charge(ctx, a, 1, p, rec.LockedUntil)
	case errors.Is(err, idemkeys.ErrExists):
		return s.join(ctx, a)
	case errors.Is(err, ErrWriteUnknown):
		// Find out whether our claim committed before the connection broke.
		got, gp, gerr := s.store.LoadKey(ctx, a.ref)
		switch {
		case errors.Is(gerr, idemkeys.ErrNotFound):
			return Outcome{}, errVanished
		case gerr != nil:
			return Outcome{}, internal(errors.Join(err, gerr))
		case got.PaymentID == p.ID && got.State == idemkeys.InProgress && got.LeaseVersion == 1:
			s.obs.KeyOutcome(OutcomeFresh)
			return s.charge(ctx, a, 1, gp, got.LockedUntil)
		}
		return s.join(ctx, a)
	}
	var e *Error
	if errors.As(err, &e) {
		if e.Code == CodeKeyReused {
			s.obs.KeyOutcome(OutcomeKeyReused)
		}
		return Outcome{}, e
	}
	return Outcome{}, internal(err)
}

// join answers a request whose key is already claimed: mismatch, replay,
// wait for the holder, or take over an expired lease and resume.
func (s *Service) join(ctx context.Context, a attempt) (Outcome, error) {
	poll := firstPoll
	var waitStart time.Time // set once this request starts waiting for another
	waited := func() {
		if !waitStart.IsZero() {
			s.obs.InFlightWaited(time.Since(waitStart))
			waitStart = time.Time{}
		}
	}
	for {
		// Subscribe before reading, so a completion in between is not missed.
		done, stop := s.waiter.Wait(a.ref)
		// The record alone answers a replay; the payment is read only to resume.
		rec, err := s.store.Record(ctx, a.ref)
		if err != nil {
			stop()
			if errors.Is(err, idemkeys.ErrNotFound) {
				return Outcome{}, errVanished
			}
			return Outcome{}, internal(err)
		}
		if rec.Fingerprint != a.fp {
			stop()
			waited()
			s.obs.KeyOutcome(OutcomeMismatch)
			s.log.InfoContext(ctx, "idempotency key mismatch", s.hash.Attr(a.ref), "payment_id", rec.PaymentID)
			return Outcome{}, &Error{
				Code:    CodeKeyMismatch,
				Message: "this Idempotency-Key was already used with a different request; use a new key for a new payment",
			}
		}
		if rec.State == idemkeys.Completed {
			stop()
			waited()
			s.replays.put(a.ref, cachedReplay{fp: rec.Fingerprint, paymentID: rec.PaymentID, resp: rec.Response, completedAt: rec.CompletedAt})
			return s.replay(ctx, a, rec.PaymentID, rec.Response), nil
		}
		now := s.cfg.Now().UTC().Truncate(time.Microsecond)
		if !rec.LeaseActive(now) {
			stop()
			p, err := s.store.Payment(ctx, a.ref.MerchantID, rec.PaymentID)
			if err != nil {
				return Outcome{}, internal(err)
			}
			v, err := s.store.TakeOver(ctx, a.ref, rec.LeaseVersion, now, now.Add(s.cfg.Lease))
			if errors.Is(err, idemkeys.ErrFenced) {
				continue // another worker moved first; look again
			}
			if err != nil {
				return Outcome{}, internal(err)
			}
			waited()
			s.obs.LeaseTakenOver()
			s.log.InfoContext(ctx, "idempotency lease taken over", s.hash.Attr(a.ref), "payment_id", p.ID,
				"lease_version", v)
			return s.resume(ctx, a, rec, v, p)
		}
		if waitStart.IsZero() {
			waitStart = time.Now()
		}
		t := time.NewTimer(poll)
		select {
		case <-done:
		case <-t.C:
		case <-a.waitCtx.Done():
			t.Stop()
			stop()
			waited()
			s.obs.KeyOutcome(OutcomeInFlight)
			return Outcome{}, &Error{
				Code:       CodeInFlight,
				Message:    "a request with this Idempotency-Key is still being processed; retry later with the same key",
				PaymentID:  rec.PaymentID,
				RetryAfter: time.Second,
			}
		}
		t.Stop()
		stop()
		poll = min(2*poll, maxPoll)
	}
}

// resume continues a payment whose earlier worker lost or gave up its lease.
// It asks the PSP first: a charge may exist that nobody recorded.
func (s *Service) resume(ctx context.Context, a attempt, rec idemkeys.Record, v int64, p Payment) (Outcome, error) {
	lctx, cancel := context.WithTimeout(ctx, s.cfg.PSPTimeout)
	c, err := s.psp.Lookup(lctx, p.MerchantOrderID)
	cancel()
	switch {
	case err == nil:
		return s.settle(ctx, a, v, p, c)
	case errors.Is(err, psp.ErrNotFound):
		if s.mayChargeAgain(rec, p) {
			now := s.cfg.Now().UTC().Truncate(time.Microsecond)
			sendBy := now.Add(s.cfg.PSPTimeout)
			err := s.store.ArmCharge(ctx, a.ref, v, sendBy, now)
			if errors.Is(err, idemkeys.ErrFenced) {
				return s.join(ctx, a)
			}
			if err != nil {
				return s.release(ctx, a, v, internal(err))
			}
			return s.charge(ctx, a, v, p, sendBy)
		}
		return s.release(ctx, a, v, pspError(&psp.Error{Class: psp.Unknown, Op: "lookup", Err: err}))
	}
	return s.release(ctx, a, v, pspError(err))
}

// mayChargeAgain decides whether a charge the PSP says it does not have may be
// sent again with the same order id. While the PSP still deduplicates that
// order id, a repeat cannot charge twice; otherwise it is safe only once no
// earlier call can still materialise.
func (s *Service) mayChargeAgain(rec idemkeys.Record, p Payment) bool {
	caps := s.psp.Capabilities()
	now := s.cfg.Now()
	// The first charge was sent after the payment was created; its dedupe lasts DedupeWindow from then.
	if caps.DedupesOrderID && (caps.DedupeWindow == 0 || now.Before(p.CreatedAt.Add(caps.DedupeWindow))) {
		return true
	}
	return caps.AuthoritativeLookup && now.After(rec.MayChargeUntil.Add(caps.CreationWindow))
}

// charge sends the charge with the key's order id, outside any transaction.
// The call's deadline never passes chargeBy (the key's may_charge_until): the
// reconciler counts on no charge leaving after it when it decides a payment
// was never charged. A worker delayed too close to it (a slow commit, a
// pause) gives the key back instead of sending.
func (s *Service) charge(ctx context.Context, a attempt, v int64, p Payment, chargeBy time.Time) (Outcome, error) {
	left := chargeBy.Sub(s.cfg.Now())
	if left < s.cfg.PSPTimeout/2 {
		return s.release(ctx, a, v, &Error{
			Code:       CodePSPUnavailable,
			Message:    "the payment was not sent to the provider in time; retry with the same Idempotency-Key",
			RetryAfter: time.Second,
			Err:        fmt.Errorf("only %s of the lease left to send the charge", left),
		})
	}
	cctx, cancel := context.WithTimeout(ctx, min(s.cfg.PSPTimeout, left))
	c, err := s.psp.Charge(cctx, psp.ChargeRequest{
		MerchantOrderID: p.MerchantOrderID,
		Amount:          p.Amount.Minor,
		Currency:        p.Amount.Currency,
		PaymentMethod:   p.PaymentMethod,
		Description:     p.Description,
	})
	cancel()
	if err != nil {
		return s.release(ctx, a, v, pspError(err))
	}
	return s.settle(ctx, a, v, p, c)
}

// settle records the PSP's answer with a write fenced on lease version v.
func (s *Service) settle(ctx context.Context, a attempt, v int64, p Payment, c psp.Charge) (Outcome, error) {
	switch c.Status {
	case psp.Succeeded:
		p.Status = Succeeded
	case psp.Declined:
		p.Status = Declined
	default:
		return s.release(ctx, a, v, internal(fmt.Errorf("psp returned status %q", c.Status)))
	}
	p.PSPReference = c.Reference
	p.DeclineCode = c.DeclineCode
	now := s.cfg.Now().UTC().Truncate(time.Microsecond)
	p.UpdatedAt = now
	resp := Render(p)
	err := s.store.Settle(ctx, a.ref, v, p, resp, now)
	if errors.Is(err, ErrWriteUnknown) {
		rec, gerr := s.store.Record(ctx, a.ref)
		switch {
		case gerr != nil:
			return Outcome{}, internal(errors.Join(err, gerr))
		case rec.State == idemkeys.Completed && rec.LeaseVersion == v:
			err = nil // our commit landed
		case rec.State == idemkeys.InProgress && rec.LeaseVersion == v:
			err = s.store.Settle(ctx, a.ref, v, p, resp, now)
		default:
			err = idemkeys.ErrFenced
		}
	}
	switch {
	case err == nil:
		s.replays.put(a.ref, cachedReplay{fp: a.fp, paymentID: p.ID, resp: resp, completedAt: now})
		s.waiter.Notify(a.ref)
		s.log.InfoContext(ctx, "payment settled", s.hash.Attr(a.ref), "payment_id", p.ID,
			"status", string(p.Status), "lease_version", v)
		return Outcome{Response: resp, PaymentID: p.ID}, nil
	case errors.Is(err, idemkeys.ErrFenced):
		// Another worker holds a newer lease: its answer, not ours, is the truth.
		s.obs.FencingRefused()
		s.log.WarnContext(ctx, "stale worker refused by fencing token", s.hash.Attr(a.ref),
			"payment_id", p.ID, "lease_version", v)
		return s.join(ctx, a)
	}
	return Outcome{}, internal(err)
}

// release gives the lease back early after a PSP call that produced no
// result, so the client's retry resumes at once, and answers with cause.
func (s *Service) release(ctx context.Context, a attempt, v int64, cause *Error) (Outcome, error) {
	now := s.cfg.Now().UTC().Truncate(time.Microsecond)
	if err := s.store.Release(ctx, a.ref, v, now); err != nil && !errors.Is(err, idemkeys.ErrFenced) {
		// The lease will expire by itself; the retry just waits longer.
		s.log.ErrorContext(ctx, "release lease", s.hash.Attr(a.ref), "err", err)
	}
	s.waiter.Notify(a.ref)
	return Outcome{}, cause
}

// pspError turns a PSP failure into the client's answer: both classes are
// retried with the same key; an unclassified error is treated as unknown,
// because assuming "not charged" is the one mistake that double-charges.
func pspError(err error) *Error {
	if class, ok := psp.ClassOf(err); ok && class == psp.NotProcessed {
		return &Error{
			Code:       CodePSPUnavailable,
			Message:    "the payment provider did not process the payment; retry with the same Idempotency-Key",
			RetryAfter: time.Second,
			Err:        err,
		}
	}
	return &Error{
		Code:       CodePSPUnknown,
		Message:    "the payment provider did not confirm the outcome; retry with the same Idempotency-Key to learn it",
		RetryAfter: 2 * time.Second,
		Err:        err,
	}
}

// Payment returns one of the merchant's payments; CodeNotFound otherwise.
func (s *Service) Payment(ctx context.Context, merchantID, id string) (Payment, error) {
	p, err := s.store.Payment(ctx, merchantID, id)
	return p, notFound(err, "payment not found")
}

// PaymentByKey returns the payment created with a key, so a client can poll
// instead of posting again.
func (s *Service) PaymentByKey(ctx context.Context, merchantID, key string) (Payment, error) {
	if err := idemkeys.ValidateKey(key); err != nil {
		return Payment{}, &Error{Code: CodeInvalidKey, Message: err.Error()}
	}
	p, err := s.store.PaymentByKey(ctx, merchantID, key)
	return p, notFound(err, "no payment was created with this idempotency key")
}

func notFound(err error, msg string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrNotFound):
		return &Error{Code: CodeNotFound, Message: msg}
	}
	return internal(err)
}
