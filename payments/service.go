package payments

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"

	"gateway/errs"
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
	// ReplayCacheBytes bounds the final answers this process keeps for
	// replays without a database read; 0 keeps none.
	ReplayCacheBytes int64
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
	if cfg.ConfirmExpiry <= 0 {
		cfg.ConfirmExpiry = DefaultConfirmExpiry
	}
	if cfg.Hasher == nil {
		cfg.Hasher = idemkeys.NewHasher(nil)
	}
	return &Service{replays: newReplayCache(cfg.ReplayCacheBytes, cfg.Retention), pace: &pacer{tat: map[idemkeys.Ref]time.Time{}},
		store: store, psps: psps, hash: cfg.Hasher, cfg: cfg, waiter: idemkeys.NewWaiter(), log: cfg.Logger, obs: cfg.Observer}
}

// Drain stops this replica from sending charges it has not sent yet: a
// request that reaches the charge from now on gives its key back (503, the
// client's retry resumes elsewhere) instead of starting a PSP call that a
// shutdown could cut short. Requests already calling the PSP finish.
func (s *Service) Drain() { s.draining.Store(true) }

// Create charges the customer for req at most once per (merchant, key),
// whatever number of times it is called and from however many replicas.
//
// ctx is the client's: when it ends, waiting for a duplicate and paced
// replays end too, but a payment this request claimed is finished anyway
// while its worker holds the lease, so that the client's retry finds a
// stored answer.
//
// Errors are *errs.Error: errs.CodeInvalidKey and errs.CodeInvalid (nothing stored),
// errs.CodeKeyMismatch (the key was used for another request), errs.CodeInFlight (the
// key is being processed; retry later), errs.CodeKeyReused, errs.CodePSPUnavailable and
// errs.CodePSPUnknown (retry with the same key), errs.CodeUnavailable, errs.CodeInternal.
func (s *Service) Create(ctx context.Context, req CreateRequest) (Outcome, error) {
	if err := idemkeys.ValidateKey(req.IdempotencyKey); err != nil {
		return Outcome{}, &errs.Error{Code: errs.CodeInvalidKey, Message: err.Error()}
	}
	req.Normalize()
	if err := req.Validate(); err != nil {
		return Outcome{}, err
	}
	if err := s.accepts(req.Amount); err != nil {
		return Outcome{}, err
	}
	a, done := s.newAttempt(ctx, idemkeys.Ref{MerchantID: req.MerchantID, Endpoint: EndpointCreatePayment, Key: req.IdempotencyKey}, req.Fingerprint())
	defer done()
	a.raw = req.BodyDigest
	if e, ok := s.replays.get(a.ref, s.cfg.Now()); ok && e.fp == a.fp {
		if e.raw != a.raw && a.raw != ([32]byte{}) {
			// These bytes are this command too: ReplayBody answers them next time.
			e.raw = a.raw
			s.replays.put(a.ref, e)
		}
		return s.replay(a, e.paymentID, e.resp), nil
	}
	claim := s.claim
	if req.ConfirmLater {
		claim = s.createUnconfirmed
	}
	for range maxClaims {
		out, err := claim(a, req)
		if !errors.Is(err, errVanished) {
			return out, err
		}
	}
	return Outcome{}, errs.Internal(fmt.Errorf("key %s vanished %d times in a row", s.hash.Key(a.ref), maxClaims))
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
	e := &errs.Error{Code: errs.CodePSPCannotAccept, Message: "the payment provider cannot accept this payment", Err: err}
	var ce *psp.CheckError
	if errors.As(err, &ce) {
		e.Fields = []errs.FieldError{{Field: ce.Field, Reason: ce.Reason}}
	} else {
		e.Fields = []errs.FieldError{{Field: "amount", Reason: err.Error()}}
	}
	return e
}

// whenClosed answers a request while this replica may not start anything
// (closed): nothing new starts here, but a stored answer is still an answer.
func (s *Service) whenClosed(a attempt) (out Outcome, err error, closed bool) {
	e := s.closed()
	if e == nil {
		return Outcome{}, nil, false
	}
	out, err = s.join(a)
	if errors.Is(err, errVanished) {
		return Outcome{}, e, true
	}
	return out, err, true
}

// newPayment is the payment req creates at the PSP named psp.
func newPayment(req CreateRequest, status Status, psp string) Payment {
	return Payment{
		ID:              "pay_" + ulid.Make().String(),
		MerchantID:      req.MerchantID,
		IdempotencyKey:  req.IdempotencyKey,
		MerchantOrderID: MerchantOrderID(req.MerchantID, req.IdempotencyKey),
		Status:          status,
		Amount:          req.Amount,
		PaymentMethod:   req.PaymentMethod,
		Description:     req.Description,
		Metadata:        req.Metadata,
		PSP:             psp,
	}
}

func (s *Service) claim(a attempt, req CreateRequest) (Outcome, error) {
	if out, err, closed := s.whenClosed(a); closed {
		return out, err
	}
	name, adapter := s.psps.Default()
	p := newPayment(req, Processing, name)
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
		return paymentSubject{s: s, p: p}.charge(a, h, start.Add(s.cfg.Lease))
	case errors.Is(err, idemkeys.ErrExists):
		return s.join(a)
	case errors.Is(err, errs.ErrWriteUnknown):
		// Find out whether our claim committed before the connection broke.
		got, gp, gerr := s.store.LoadKey(a.work, a.ref)
		switch {
		case errors.Is(gerr, idemkeys.ErrNotFound):
			return Outcome{}, errVanished
		case gerr != nil:
			return Outcome{}, errs.Internal(errors.Join(err, gerr))
		case got.PaymentID == p.ID && got.State == idemkeys.InProgress && got.Token == h.token:
			s.obs.KeyOutcome(OutcomeFresh)
			s.begin(a)
			return paymentSubject{s: s, p: gp}.charge(a, h, start.Add(s.cfg.Lease))
		}
		return s.join(a)
	}
	return s.claimRefused(err)
}

// claimRefused answers a claim the store refused: its *errs.Error as it is
// (a purged key's payment named), anything else as internal.
func (s *Service) claimRefused(err error) (Outcome, error) {
	var e *errs.Error
	if errors.As(err, &e) {
		if e.Code == errs.CodeKeyReused {
			s.obs.KeyOutcome(OutcomeKeyReused)
		}
		return Outcome{}, e
	}
	return Outcome{}, errs.Internal(err)
}

// unreachable gives back, unsent, a key claimed on a replica that cannot
// reach its subject's PSP: a replica that can resumes it.
func (s *Service) unreachable(a attempt, h holding, id, what string) (Outcome, error) {
	s.obs.UnconfiguredPSP()
	return s.release(a, h, id, true, &errs.Error{Code: errs.CodeUnavailable, RetryAfter: 5 * time.Second,
		Message: "this " + what + " cannot be sent from here right now; retry with the same Idempotency-Key"})
}

// paymentSubject is a payment under its key's lease: its charge.
type paymentSubject struct {
	s *Service
	p Payment
	// twoStep: the key is a confirm's, whose customer is at a front end that
	// can complete a next action (3-D Secure): a charge that needs one
	// answers requires_action instead of being declined.
	twoStep bool
}

func (ps paymentSubject) id() string      { return ps.p.ID }
func (ps paymentSubject) pspName() string { return ps.p.PSP }

// resume continues a payment whose earlier worker lost or gave up its lease.
// It asks the PSP first: a charge may exist that nobody recorded.
func (ps paymentSubject) resume(a attempt, rec idemkeys.Record, h holding) (Outcome, error) {
	s, p := ps.s, ps.p
	lctx, cancel := context.WithTimeout(a.work, s.cfg.PSPTimeout)
	c, err := h.adapter.Lookup(lctx, p.MerchantOrderID)
	cancel()
	switch {
	case err == nil:
		return ps.settle(a, h, c)
	case errors.Is(err, psp.ErrNotFound):
		if !MayChargeAgain(rec, p.CreatedAt, h.adapter.Capabilities(), s.cfg.PSPTimeout, s.cfg.Now()) {
			return s.release(a, h, p.ID, false, pspError(&psp.Error{Class: psp.Unknown, Op: "lookup", Err: err}))
		}
		deadline, out, err, ok := s.arm(a, h, p.ID)
		if !ok {
			return out, err
		}
		return ps.charge(a, h, deadline)
	}
	return s.release(a, h, p.ID, false, pspError(err))
}

// arm records, before a resumed worker sends again, that it may send within
// one PSP timeout from now, and says until when (on this process's clock).
// Not ok: the caller lost the lease or could not record it, and out, err
// are its answer; nothing may be sent.
func (s *Service) arm(a attempt, h holding, id string) (deadline time.Time, out Outcome, err error, ok bool) {
	armed := s.cfg.Now()
	err = s.store.ArmCharge(s.writeCtx(a), a.ref, h.token, s.cfg.PSPTimeout, ArmGuardFor(h.adapter.Capabilities(), s.cfg.PSPTimeout))
	switch {
	case errors.Is(err, idemkeys.ErrFenced):
		s.obs.FencingRefused()
		out, err = s.join(a)
		return time.Time{}, out, err, false
	case errors.Is(err, ErrArmRefused):
		// Too late to lean on the PSP's dedupe, too early to know: wait for
		// the lookups and the creation window to decide.
		out, err = s.release(a, h, id, false, pspError(&psp.Error{Class: psp.Unknown, Op: "arm", Err: err}))
		return time.Time{}, out, err, false
	case err != nil:
		// Nothing was sent, but the arm may not have been counted either:
		// counting this as an unsent attempt could pair with an earlier send
		// whose fate is unknown and prove "nothing charged" falsely. Not
		// counted: at worst the reconciler asks the PSP.
		out, err = s.release(a, h, id, false, errs.Internal(err))
		return time.Time{}, out, err, false
	}
	return armed.Add(s.cfg.PSPTimeout), Outcome{}, nil, true
}

// MayChargeAgain decides whether a charge (or a refund) the PSP says it
// does not have may be sent again with the same order id, at the local instant now. While the
// PSP still deduplicates that order id, a repeat cannot charge twice; past
// that, it is safe only when the PSP's "not found" is authoritative and no
// earlier send can still materialise: the database's clock (as the record
// was read, so never ahead of the truth) is past may_charge_until plus the
// creation window. The dedupe window is judged with the database's clock
// bounded from above, plus the time the new send may take to leave and to
// land (PSP timeout and creation window); ArmCharge judges it again, on the
// database's clock, as the send is armed.
func MayChargeAgain(rec idemkeys.Record, created time.Time, caps psp.Capabilities, pspTimeout time.Duration, now time.Time) bool {
	if caps.DedupesOrderID {
		if caps.DedupeWindow == 0 {
			return true
		}
		// The first send followed the subject's creation; its dedupe lasts DedupeWindow from then.
		if rec.DBNowAtMost(now).Add(pspTimeout + caps.CreationWindow).Before(created.Add(caps.DedupeWindow)) {
			return true
		}
	}
	if !caps.AuthoritativeLookup || rec.MayChargeUntil.IsZero() {
		return false
	}
	return rec.DBNow.After(rec.MayChargeUntil.Add(caps.CreationWindow))
}

// sendTime says how long a worker may let its PSP call run, never past
// deadline (a local instant no later than the key's may_charge_until: the
// reconciler counts on nothing leaving after it when it decides nothing was
// sent), or why it must give the key back unsent: a worker delayed too close
// to it (a slow commit, a pause), or a replica shutting down.
func (s *Service) sendTime(deadline time.Time) (time.Duration, *errs.Error) {
	left := deadline.Sub(s.cfg.Now())
	switch {
	case s.draining.Load():
		return 0, &errs.Error{Code: errs.CodePSPUnavailable, RetryAfter: time.Second,
			Message: "the gateway is restarting; retry with the same Idempotency-Key",
			Err:     errors.New("draining: not sent")}
	case left < s.cfg.PSPTimeout/2:
		return 0, &errs.Error{Code: errs.CodePSPUnavailable, RetryAfter: time.Second,
			Message: "the request was not sent to the provider in time; retry with the same Idempotency-Key",
			Err:     fmt.Errorf("only %s of the lease left to send", left)}
	}
	return min(left, s.cfg.PSPTimeout), nil
}

// charge sends the charge with the key's order id, outside any transaction,
// within the time sendTime allows.
func (ps paymentSubject) charge(a attempt, h holding, deadline time.Time) (Outcome, error) {
	s, p := ps.s, ps.p
	timeout, refusal := s.sendTime(deadline)
	if refusal != nil {
		return s.release(a, h, p.ID, true, refusal)
	}
	cctx, cancel := context.WithTimeout(a.work, timeout)
	c, err := h.adapter.Charge(cctx, psp.ChargeRequest{
		MerchantOrderID: p.MerchantOrderID,
		Amount:          p.Amount.Minor,
		Currency:        p.Amount.Currency,
		PaymentMethod:   p.PaymentMethod,
		Description:     p.Description,
		AllowNextAction: ps.twoStep,
	})
	cancel()
	if err == nil {
		return ps.settle(a, h, c)
	}
	class, _ := psp.ClassOf(err)
	switch {
	case class == psp.Rejected:
		// A request the PSP can never accept: this send charged nothing,
		// and sending it again cannot help. A final answer, stored, when
		// no other send of this order id was ever authorised.
		if !s.soleSend(a, h) {
			return s.refusedNotAlone(a, h, p.ID, err)
		}
		p.Status, p.DeclineCode, p.PSPCode = Failed, DeclineRejected, rejectionCode(err)
		s.log.WarnContext(a.client, "PSP refused the request as invalid", s.hash.Attr(a.ref), "payment_id", p.ID, "err", err)
		return ps.write(a, h, p)
	case errors.Is(err, psp.ErrOrderConflict):
		// The PSP holds another charge under this payment's order id: the
		// gateway's record and the PSP's disagree, and only a person can say why.
		p.Status, p.ReviewReason = RequiresReview, "the PSP refused the charge: its order id is already used with another amount or currency"
		s.log.WarnContext(a.client, "order id taken at the PSP", s.hash.Attr(a.ref), "payment_id", p.ID, "err", err)
		return ps.write(a, h, p)
	case class == psp.NotProcessed:
		s.log.WarnContext(a.client, "PSP did not process the charge", s.hash.Attr(a.ref), "payment_id", p.ID, "err", err)
		return s.release(a, h, p.ID, true, pspError(err))
	}
	s.log.WarnContext(a.client, "PSP charge outcome unknown", s.hash.Attr(a.ref), "payment_id", p.ID, "err", err)
	return s.release(a, h, p.ID, false, pspError(err))
}

// settle records the PSP's answer with a write fenced on the lease token.
func (ps paymentSubject) settle(a attempt, h holding, c psp.Charge) (Outcome, error) {
	s, p := ps.s, ps.p
	settled, err := ApplyCharge(p, c)
	if errors.Is(err, ErrChargePending) && ps.twoStep {
		// The customer is at a front end: the answer says what it must do
		// (never logged: it may hold a client secret), and the payment
		// waits for the PSP's notification or the reconciler's look.
		waiting := AwaitCustomer(p, c)
		action := "none"
		if waiting.NextAction != nil {
			action = waiting.NextAction.Type
		}
		s.log.InfoContext(a.client, "payment waits for its customer", s.hash.Attr(a.ref), "payment_id", p.ID, "next_action", action)
		return ps.write(a, h, waiting)
	}
	if errors.Is(err, ErrChargePending) {
		// Accepted, not settled: the key stays unfinished and free for the
		// client's poll or retry, and the reconciler looks again later.
		s.release(a, h, p.ID, false, nil)
		return Outcome{Response: Render(p), PaymentID: p.ID}, nil
	}
	if err != nil {
		return s.release(a, h, p.ID, false, pspError(&psp.Error{Class: psp.Unknown, Op: "charge", Err: err}))
	}
	if settled.Status == RequiresReview {
		s.log.WarnContext(a.client, "PSP answer does not match the payment", s.hash.Attr(a.ref), "payment_id", p.ID, "reason", settled.ReviewReason)
	}
	return ps.write(a, h, settled)
}

func (ps paymentSubject) write(a attempt, h holding, p Payment) (Outcome, error) {
	resp := Render(p)
	return ps.s.write(a, h, p.ID, string(p.Status), resp, func(ctx context.Context) error {
		return ps.s.store.Settle(ctx, a.ref, h.token, p, resp)
	}, func() {
		if p.Status.Final() || p.Status == RequiresReview {
			ps.s.obs.PaymentRecorded(p.Status, p.DeclineCode)
		}
	})
}

// Payment returns one of the merchant's payments; errs.CodeNotFound otherwise.
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
