package payments

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
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
	// ReplayCacheSize is how many final answers this process keeps for
	// replays without a database read; 0 keeps none.
	ReplayCacheSize int
	// Retention is how long a completed key replays (the reconciler purges
	// it after); DefaultRetention when zero.
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
	// UnconfiguredPSP counts payments this replica could not resume because
	// the PSP they were sent to is not configured here.
	UnconfiguredPSP()
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
func (noObserver) UnconfiguredPSP()             {}

// Service runs the idempotent payment flow.
type Service struct {
	store    FlowStore
	psps     *PSPs
	hash     *idemkeys.Hasher
	cfg      Config
	waiter   *idemkeys.Waiter
	log      *slog.Logger
	obs      Observer
	replays  *replayCache
	pace     *pacer
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
	if cfg.Hasher == nil {
		cfg.Hasher = idemkeys.NewHasher(nil)
	}
	return &Service{replays: newReplayCache(cfg.ReplayCacheSize, cfg.Retention), pace: &pacer{tat: map[idemkeys.Ref]time.Time{}},
		store: store, psps: psps, hash: cfg.Hasher, cfg: cfg, waiter: idemkeys.NewWaiter(), log: cfg.Logger, obs: cfg.Observer}
}

// Drain stops this replica from sending charges it has not sent yet: a
// request that reaches the charge from now on gives its key back (503, the
// client's retry resumes elsewhere) instead of starting a PSP call that a
// shutdown could cut short. Requests already calling the PSP finish.
func (s *Service) Drain() { s.draining.Store(true) }

// Outcome is the answer to a create request.
type Outcome struct {
	Response idemkeys.Response
	// Replayed is true when the response was stored by an earlier request.
	Replayed  bool
	PaymentID string
}

// Polling bounds for a duplicate waiting on a key held by another replica
// (a key held in this process wakes its duplicates itself).
const (
	firstPoll = 10 * time.Millisecond
	maxPoll   = 500 * time.Millisecond
	// maxClaims bounds how often one request goes back to the INSERT after the
	// key vanished under it (a claim rolled back, or a record purged).
	maxClaims = 3
	// flowMargin is what a claimed payment's work may take beyond its lease
	// and PSP call (database round trips) before it is abandoned.
	flowMargin = 10 * time.Second
)

// attempt carries one request through the flow.
type attempt struct {
	ref idemkeys.Ref
	fp  [32]byte
	// client ends when the client goes away: waits and paced replays stop
	// then. Work on a claimed key runs on work, which the client cannot cancel.
	client context.Context
	work   context.Context
	// waitCtx ends when the request has waited long enough for a duplicate in flight.
	waitCtx context.Context
	// working marks the key as worked on by this request in this process
	// while it holds the lease, so duplicates here wait to be woken.
	working *workMark
}

type workMark struct{ end func() }

// begin marks a's key as worked on here by a, once.
func (s *Service) begin(a attempt) {
	if a.working.end == nil {
		a.working.end = s.waiter.Begin(a.ref)
	}
}

// finish ends a's mark and wakes the key's waiters.
func (s *Service) finish(a attempt) {
	if a.working.end != nil {
		a.working.end()
		a.working.end = nil
	}
}

// holding is the lease a worker holds on a key and the PSP it charges.
type holding struct {
	token   idemkeys.Token
	adapter psp.Adapter
}

// Create charges the customer for req at most once per (merchant, key),
// whatever number of times it is called and from however many replicas.
//
// ctx is the client's: when it ends, waiting for a duplicate and paced
// replays end too, but a payment this request claimed is finished anyway
// while its worker holds the lease, so that the client's retry finds a
// stored answer.
//
// Errors are *Error: CodeInvalidKey and CodeInvalid (nothing stored),
// CodeKeyMismatch (the key was used for another request), CodeInFlight (the
// key is being processed; retry later), CodeKeyReused, CodePSPUnavailable and
// CodePSPUnknown (retry with the same key), CodeUnavailable, CodeInternal.
func (s *Service) Create(ctx context.Context, req CreateRequest) (Outcome, error) {
	if err := idemkeys.ValidateKey(req.IdempotencyKey); err != nil {
		return Outcome{}, &Error{Code: CodeInvalidKey, Message: err.Error()}
	}
	req.Normalize()
	if err := req.Validate(); err != nil {
		return Outcome{}, err
	}
	if err := s.accepts(req.Amount); err != nil {
		return Outcome{}, err
	}
	work, cancelWork := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Lease+s.cfg.PSPTimeout+flowMargin)
	defer cancelWork()
	waitCtx, cancel := context.WithTimeout(ctx, s.cfg.InFlightWait)
	defer cancel()
	a := attempt{
		ref:     idemkeys.Ref{MerchantID: req.MerchantID, Endpoint: EndpointCreatePayment, Key: req.IdempotencyKey},
		fp:      req.Fingerprint(),
		client:  ctx,
		work:    work,
		waitCtx: waitCtx,
		working: &workMark{},
	}
	defer s.finish(a)
	if e, ok := s.replays.get(a.ref, s.cfg.Now()); ok && e.fp == a.fp {
		return s.replay(a, e.paymentID, e.resp), nil
	}
	for range maxClaims {
		out, err := s.claim(a, req)
		if !errors.Is(err, errVanished) {
			return out, err
		}
	}
	return Outcome{}, internal(fmt.Errorf("key %s vanished %d times in a row", s.hash.Key(a.ref), maxClaims))
}

// accepts refuses, before anything is stored or sent, an amount the PSP new
// payments go to can never take (a currency it does not take, an amount it
// cannot represent or below its minimum).
func (s *Service) accepts(m Money) error {
	_, adapter := s.psps.Default()
	err := adapter.Capabilities().Check(m.Minor, m.Currency)
	if err == nil {
		return nil
	}
	e := &Error{Code: CodePSPCannotAccept, Message: "the payment provider cannot accept this payment", Err: err}
	var ce *psp.CheckError
	if errors.As(err, &ce) {
		e.Fields = []FieldError{{Field: ce.Field, Reason: ce.Reason}}
	} else {
		e.Fields = []FieldError{{Field: "amount", Reason: err.Error()}}
	}
	return e
}

// replay answers with a completed key's stored response, at the key's pace.
func (s *Service) replay(a attempt, paymentID string, resp idemkeys.Response) Outcome {
	s.pace.wait(a.client, a.ref)
	s.obs.KeyOutcome(OutcomeReplayed)
	s.log.InfoContext(a.client, "idempotent replay", s.hash.Attr(a.ref), "payment_id", paymentID, "status", resp.Status)
	return Outcome{Response: resp, Replayed: true, PaymentID: paymentID}
}

// errVanished: the key's record disappeared between the INSERT that found it and
// the read (the other claim rolled back, or the record was purged); claim again.
var errVanished = errors.New("payments: key vanished; claim again")

// closed answers a request this replica may not claim or charge for now.
func (s *Service) closed() *Error {
	if err := s.cfg.Gate(); err != nil {
		return &Error{Code: CodeUnavailable, Message: "this replica cannot take payments right now; retry with the same Idempotency-Key", RetryAfter: time.Second, Err: err}
	}
	return nil
}

func (s *Service) claim(a attempt, req CreateRequest) (Outcome, error) {
	if e := s.closed(); e != nil {
		// Nothing new starts here; a stored answer is still an answer.
		out, err := s.join(a)
		if errors.Is(err, errVanished) {
			return Outcome{}, e
		}
		return out, err
	}
	name, adapter := s.psps.Default()
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
		PSP:             name,
	}
	h := holding{token: idemkeys.FirstToken(), adapter: adapter}
	// The database stamps the claim after this instant, so the charge
	// window measured locally from it ends no later than the one recorded.
	start := s.cfg.Now()
	now, err := s.store.Claim(a.work, Claim{Ref: a.ref, Fingerprint: a.fp, Token: h.token, Lease: s.cfg.Lease, Payment: p})
	p.CreatedAt, p.UpdatedAt = now, now
	switch {
	case err == nil:
		s.obs.KeyOutcome(OutcomeFresh)
		s.begin(a)
		return s.charge(a, h, p, start.Add(s.cfg.Lease))
	case errors.Is(err, idemkeys.ErrExists):
		return s.join(a)
	case errors.Is(err, ErrWriteUnknown):
		// Find out whether our claim committed before the connection broke.
		got, gp, gerr := s.store.LoadKey(a.work, a.ref)
		switch {
		case errors.Is(gerr, idemkeys.ErrNotFound):
			return Outcome{}, errVanished
		case gerr != nil:
			return Outcome{}, internal(errors.Join(err, gerr))
		case got.PaymentID == p.ID && got.State == idemkeys.InProgress && got.Token == h.token:
			s.obs.KeyOutcome(OutcomeFresh)
			s.begin(a)
			return s.charge(a, h, gp, start.Add(s.cfg.Lease))
		}
		return s.join(a)
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
// wait for the holder, or take over an expired lease and resume. Whether a
// lease is alive is the database's call, made with its clock as it reads.
func (s *Service) join(a attempt) (Outcome, error) {
	s.finish(a) // a request that joins works on nothing itself
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
		readAt := s.cfg.Now()
		rec, err := s.store.Record(a.work, a.ref)
		rec.ReadAt = readAt
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
			s.log.InfoContext(a.client, "idempotency key mismatch", s.hash.Attr(a.ref), "payment_id", rec.PaymentID)
			return Outcome{}, &Error{
				Code:    CodeKeyMismatch,
				Message: "this Idempotency-Key was already used with a different request; use a new key for a new payment",
			}
		}
		if rec.State == idemkeys.Completed {
			stop()
			waited()
			// Cached no longer than the key replays: its age is the database's to tell.
			left := s.cfg.Retention - rec.DBNow.Sub(rec.CompletedAt)
			s.replays.put(a.ref, cachedReplay{fp: rec.Fingerprint, paymentID: rec.PaymentID, resp: rec.Response, expires: s.cfg.Now().Add(left)})
			return s.replay(a, rec.PaymentID, rec.Response), nil
		}
		if !rec.LeaseActive() {
			stop()
			out, err, again := s.takeOver(a, rec)
			if !again {
				waited()
				return out, err
			}
			// Another worker moved first: it holds the key now; wait for it.
		}
		if waitStart.IsZero() {
			waitStart = time.Now()
		}
		// A key held by another request of this process wakes us when it
		// finishes; one held by another replica is polled, less often the
		// longer it takes.
		var (
			tick  <-chan time.Time
			timer *time.Timer
		)
		if !s.waiter.Working(a.ref) {
			timer = time.NewTimer(poll)
			tick = timer.C
			poll = min(2*poll, maxPoll)
		}
		select {
		case <-done:
		case <-tick:
		case <-a.waitCtx.Done():
			if timer != nil {
				timer.Stop()
			}
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
		if timer != nil {
			timer.Stop()
		}
		stop()
	}
}

// takeOver takes an expired lease and resumes the payment. again reports
// that another worker took it first (or it is not for this replica to take
// yet) and the caller should wait and look again.
func (s *Service) takeOver(a attempt, rec idemkeys.Record) (out Outcome, err error, again bool) {
	if e := s.closed(); e != nil {
		return Outcome{}, e, false
	}
	p, err := s.store.Payment(a.work, a.ref.MerchantID, rec.PaymentID)
	if err != nil {
		return Outcome{}, internal(err), false
	}
	adapter, ok := s.psps.For(p.PSP)
	if !ok {
		// Asking another PSP would turn "not theirs" into "never charged".
		s.obs.UnconfiguredPSP()
		s.log.WarnContext(a.client, "payment's PSP is not configured on this replica", s.hash.Attr(a.ref),
			"payment_id", p.ID, "psp", p.PSP)
		return Outcome{}, &Error{Code: CodeUnavailable, PaymentID: p.ID, RetryAfter: 5 * time.Second,
			Message: "this payment cannot be resumed here right now; retry with the same Idempotency-Key"}, false
	}
	token, err := s.store.TakeOver(a.work, a.ref, rec.Token, s.cfg.Lease)
	if errors.Is(err, idemkeys.ErrFenced) {
		return Outcome{}, nil, true
	}
	if err != nil {
		return Outcome{}, internal(err), false
	}
	s.obs.LeaseTakenOver()
	s.begin(a)
	s.log.InfoContext(a.client, "idempotency lease taken over", s.hash.Attr(a.ref), "payment_id", p.ID, "grant", token.Grant())
	out, err = s.resume(a, rec, holding{token: token, adapter: adapter}, p)
	return out, err, false
}

// resume continues a payment whose earlier worker lost or gave up its lease.
// It asks the PSP first: a charge may exist that nobody recorded.
func (s *Service) resume(a attempt, rec idemkeys.Record, h holding, p Payment) (Outcome, error) {
	lctx, cancel := context.WithTimeout(a.work, s.cfg.PSPTimeout)
	c, err := h.adapter.Lookup(lctx, p.MerchantOrderID)
	cancel()
	switch {
	case err == nil:
		return s.settle(a, h, p, c)
	case errors.Is(err, psp.ErrNotFound):
		if !MayChargeAgain(rec, p, h.adapter.Capabilities(), s.cfg.PSPTimeout, s.cfg.Now()) {
			return s.release(a, h, p, false, pspError(&psp.Error{Class: psp.Unknown, Op: "lookup", Err: err}))
		}
		armed := s.cfg.Now()
		err := s.store.ArmCharge(s.writeCtx(a), a.ref, h.token, s.cfg.PSPTimeout)
		if errors.Is(err, idemkeys.ErrFenced) {
			s.obs.FencingRefused()
			return s.join(a)
		}
		if err != nil {
			// Nothing was sent; whether the arm landed or not, no charge follows it.
			return s.release(a, h, p, true, internal(err))
		}
		return s.charge(a, h, p, armed.Add(s.cfg.PSPTimeout))
	}
	return s.release(a, h, p, false, pspError(err))
}

// MayChargeAgain decides whether a charge the PSP says it does not have may
// be sent again with the same order id, at the local instant now. While the
// PSP still deduplicates that order id, a repeat cannot charge twice; past
// that, it is safe only when the PSP's "not found" is authoritative and no
// earlier send can still materialise: the database's clock (as the record
// was read, so never ahead of the truth) is past may_charge_until plus the
// creation window. The dedupe window is judged with the database's clock
// bounded from above, plus the time the new send may take.
func MayChargeAgain(rec idemkeys.Record, p Payment, caps psp.Capabilities, pspTimeout time.Duration, now time.Time) bool {
	if caps.DedupesOrderID {
		if caps.DedupeWindow == 0 {
			return true
		}
		// The first send followed the payment's creation; its dedupe lasts DedupeWindow from then.
		if rec.DBNowAtMost(now).Add(pspTimeout).Before(p.CreatedAt.Add(caps.DedupeWindow)) {
			return true
		}
	}
	if !caps.AuthoritativeLookup || rec.MayChargeUntil.IsZero() {
		return false
	}
	return rec.DBNow.After(rec.MayChargeUntil.Add(caps.CreationWindow))
}

// charge sends the charge with the key's order id, outside any transaction.
// The call's deadline never passes deadline (a local instant no later than
// the key's may_charge_until): the reconciler counts on no charge leaving
// after it when it decides a payment was never charged. A worker delayed too
// close to it (a slow commit, a pause) gives the key back instead of sending.
func (s *Service) charge(a attempt, h holding, p Payment, deadline time.Time) (Outcome, error) {
	now := s.cfg.Now()
	left := deadline.Sub(now)
	switch {
	case s.draining.Load():
		return s.release(a, h, p, true, &Error{Code: CodePSPUnavailable, RetryAfter: time.Second,
			Message: "the gateway is restarting; retry with the same Idempotency-Key",
			Err:     errors.New("draining: charge not sent")})
	case left < s.cfg.PSPTimeout/2:
		return s.release(a, h, p, true, &Error{
			Code:       CodePSPUnavailable,
			Message:    "the payment was not sent to the provider in time; retry with the same Idempotency-Key",
			RetryAfter: time.Second,
			Err:        fmt.Errorf("only %s of the lease left to send the charge", left),
		})
	}
	cctx, cancel := context.WithTimeout(a.work, min(left, s.cfg.PSPTimeout))
	c, err := h.adapter.Charge(cctx, psp.ChargeRequest{
		MerchantOrderID: p.MerchantOrderID,
		Amount:          p.Amount.Minor,
		Currency:        p.Amount.Currency,
		PaymentMethod:   p.PaymentMethod,
		Description:     p.Description,
	})
	cancel()
	if err == nil {
		return s.settle(a, h, p, c)
	}
	class, _ := psp.ClassOf(err)
	switch {
	case class == psp.Rejected:
		// A request the PSP can never accept: certainly nothing was charged,
		// and sending it again cannot help. A final answer, stored.
		p.Status, p.DeclineCode, p.PSPCode = Failed, DeclineRejected, rejectionCode(err)
		s.log.WarnContext(a.client, "PSP refused the request as invalid", s.hash.Attr(a.ref), "payment_id", p.ID, "err", err)
		return s.write(a, h, p)
	case errors.Is(err, psp.ErrOrderConflict):
		// The PSP holds another charge under this payment's order id: the
		// gateway's record and the PSP's disagree, and only a person can say why.
		p.Status, p.ReviewReason = RequiresReview, "the PSP refused the charge: its order id is already used with another amount or currency"
		s.log.WarnContext(a.client, "order id taken at the PSP", s.hash.Attr(a.ref), "payment_id", p.ID, "err", err)
		return s.write(a, h, p)
	case class == psp.NotProcessed:
		s.log.WarnContext(a.client, "PSP did not process the charge", s.hash.Attr(a.ref), "payment_id", p.ID, "err", err)
		return s.release(a, h, p, true, pspError(err))
	}
	s.log.WarnContext(a.client, "PSP charge outcome unknown", s.hash.Attr(a.ref), "payment_id", p.ID, "err", err)
	return s.release(a, h, p, false, pspError(err))
}

// settle records the PSP's answer with a write fenced on the lease token.
func (s *Service) settle(a attempt, h holding, p Payment, c psp.Charge) (Outcome, error) {
	settled, err := ApplyCharge(p, c)
	if errors.Is(err, ErrChargePending) {
		// Accepted, not settled: the key stays unfinished and free for the
		// client's poll or retry, and the reconciler looks again later.
		s.release(a, h, p, false, nil)
		return Outcome{Response: Render(p), PaymentID: p.ID}, nil
	}
	if err != nil {
		return s.release(a, h, p, false, pspError(&psp.Error{Class: psp.Unknown, Op: "charge", Err: err}))
	}
	if settled.Status == RequiresReview {
		s.log.WarnContext(a.client, "PSP answer does not match the payment", s.hash.Attr(a.ref), "payment_id", p.ID, "reason", settled.ReviewReason)
	}
	return s.write(a, h, settled)
}

// write stores p's final state (or its review) and the answer for replay,
// fenced on h's token, under a deadline of its own: the PSP's answer must
// reach the database whatever the request's remaining time.
func (s *Service) write(a attempt, h holding, p Payment) (Outcome, error) {
	resp := Render(p)
	err := s.store.Settle(s.writeCtx(a), a.ref, h.token, p, resp)
	if errors.Is(err, ErrWriteUnknown) {
		// The write's fate is unknown: read what is there and go on from it.
		rec, gerr := s.store.Record(s.writeCtx(a), a.ref)
		switch {
		case gerr != nil:
			s.log.WarnContext(a.client, "settle outcome unknown and the key cannot be read", s.hash.Attr(a.ref), "payment_id", p.ID, "err", errors.Join(err, gerr))
			return s.release(a, h, p, false, &Error{Code: CodeUnavailable, PaymentID: p.ID, RetryAfter: time.Second, Err: errors.Join(err, gerr),
				Message: "the payment's outcome could not be recorded yet; retry with the same Idempotency-Key"})
		case rec.State == idemkeys.Completed && rec.Token == h.token:
			err = nil // our write landed
		case rec.State == idemkeys.InProgress && rec.Token == h.token:
			err = s.store.Settle(s.writeCtx(a), a.ref, h.token, p, resp)
		default:
			err = idemkeys.ErrFenced
		}
	}
	switch {
	case err == nil:
		s.replays.put(a.ref, cachedReplay{fp: a.fp, paymentID: p.ID, resp: resp, expires: s.cfg.Now().Add(s.cfg.Retention)})
		s.finish(a)
		s.log.InfoContext(a.client, "payment settled", s.hash.Attr(a.ref), "payment_id", p.ID,
			"status", string(p.Status), "grant", h.token.Grant())
		return Outcome{Response: resp, PaymentID: p.ID}, nil
	case errors.Is(err, idemkeys.ErrFenced):
		// Another worker holds a newer lease: its answer, not ours, is the truth.
		s.obs.FencingRefused()
		s.log.WarnContext(a.client, "stale worker refused by fencing token", s.hash.Attr(a.ref),
			"payment_id", p.ID, "grant", h.token.Grant())
		return s.join(a)
	case errors.Is(err, ErrWriteUnknown):
		return s.release(a, h, p, false, &Error{Code: CodeUnavailable, PaymentID: p.ID, RetryAfter: time.Second, Err: err,
			Message: "the payment's outcome could not be recorded yet; retry with the same Idempotency-Key"})
	}
	return Outcome{}, internal(err)
}

// release gives the lease back early after a PSP call that produced no
// result, so the client's retry resumes at once, and answers with cause.
// notSent says the caller's send certainly did nothing.
func (s *Service) release(a attempt, h holding, p Payment, notSent bool, cause *Error) (Outcome, error) {
	if err := s.store.Release(s.writeCtx(a), a.ref, h.token, notSent); err != nil && !errors.Is(err, idemkeys.ErrFenced) {
		// The lease will expire by itself; the retry just waits longer.
		s.log.WarnContext(a.client, "release lease", s.hash.Attr(a.ref), "payment_id", p.ID, "err", err)
	}
	s.finish(a)
	if cause == nil {
		return Outcome{}, nil
	}
	if cause.PaymentID == "" {
		cause.PaymentID = p.ID
	}
	return Outcome{}, cause
}

// rejectionCode is the PSP's own code for a refusal, when it gave one.
func rejectionCode(err error) string {
	var pe *psp.Error
	if errors.As(err, &pe) && pe.Code != "" {
		return pe.Code
	}
	return ""
}

// writeCtx bounds one write after a PSP call, apart from the request's time.
func (s *Service) writeCtx(a attempt) context.Context {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(a.work), s.cfg.WriteTimeout)
	context.AfterFunc(ctx, cancel) // freed when it ends; the write returns long before
	return ctx
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
