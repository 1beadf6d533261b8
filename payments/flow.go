package payments

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"gateway/errs"
	"gateway/idemkeys"
	"gateway/psp"
)

// The flow every kind of idempotent command shares once its key is claimed
// or found claimed: waiting for and replaying another request's answer,
// taking over an expired lease, fenced writes that re-read when their fate
// is unknown, and giving a lease back. What differs per kind (a payment's
// charge, a refund) is its subject: how it is resumed and settled.

// subject is what a key created, as the flow resumes it once it holds the
// key's lease: a payment to charge, or a refund to send.
type subject interface {
	// id names it (pay_…, re_…).
	id() string
	// pspName is the PSP it was sent to; it is asked about nowhere else.
	pspName() string
	// resume continues it holding h: it asks the PSP first, then settles
	// or sends again with the same order id.
	resume(a attempt, rec idemkeys.Record, h holding) (Outcome, error)
}

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
	// raw is the digest of the request's bytes as received (zero when
	// unknown), kept with its answer for ReplayBody.
	raw [32]byte
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

// replay answers with a completed key's stored response, at the key's pace.
func (s *Service) replay(a attempt, paymentID string, resp idemkeys.Response) Outcome {
	s.pace.wait(a.client, a.ref)
	s.obs.KeyOutcome(OutcomeReplayed)
	// The request's access line says it was replayed; this one is for debugging.
	if s.log.Enabled(a.client, slog.LevelDebug) {
		s.log.DebugContext(a.client, "idempotent replay", s.hash.Attr(a.ref), "payment_id", paymentID, "status", resp.Status)
	}
	return Outcome{Response: resp, Replayed: true, PaymentID: paymentID}
}

// errVanished: the key's record disappeared between the INSERT that found it and
// the read (the other claim rolled back, or the record was purged); claim again.
var errVanished = errors.New("payments: key vanished; claim again")

// closed answers a request this replica may not claim or charge for now.
func (s *Service) closed() *errs.Error {
	if err := s.cfg.Gate(); err != nil {
		return &errs.Error{Code: errs.CodeUnavailable, Message: "this replica cannot take payments right now; retry with the same Idempotency-Key", RetryAfter: time.Second, Err: err}
	}
	return nil
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
			return Outcome{}, errs.Internal(err)
		}
		if rec.Fingerprint != a.fp {
			stop()
			waited()
			s.obs.KeyOutcome(OutcomeMismatch)
			s.log.InfoContext(a.client, "idempotency key mismatch", s.hash.Attr(a.ref), "payment_id", rec.PaymentID)
			return Outcome{}, &errs.Error{
				Code:    errs.CodeKeyMismatch,
				Message: "this Idempotency-Key was already used with a different request; use a new key for a new payment",
			}
		}
		if rec.State == idemkeys.Completed {
			stop()
			waited()
			// Cached no longer than the key replays: its age is the database's to tell.
			left := s.cfg.Retention - rec.DBNow.Sub(rec.CompletedAt)
			s.replays.put(a.ref, cachedReplay{fp: rec.Fingerprint, raw: a.raw, paymentID: rec.PaymentID, resp: rec.Response, expires: s.cfg.Now().Add(left)})
			return s.replay(a, rec.PaymentID, rec.Response), nil
		}
		if !rec.LeaseActive() {
			out, err, again := s.takeOver(a, rec)
			if !again {
				stop()
				waited()
				return out, err
			}
			// Another worker moved first: it holds the key now; wait for it,
			// still subscribed, so that its finishing wakes us.
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
			return Outcome{}, named(&errs.Error{
				Code:       errs.CodeInFlight,
				Message:    "a request with this Idempotency-Key is still being processed; retry later with the same key",
				RetryAfter: time.Second,
			}, rec.PaymentID)
		}
		if timer != nil {
			timer.Stop()
		}
		stop()
	}
}

// takeOver takes an expired lease and resumes what the key created. again
// reports that another worker took it first and the caller should wait and
// look again.
func (s *Service) takeOver(a attempt, rec idemkeys.Record) (out Outcome, err error, again bool) {
	if e := s.closed(); e != nil {
		return Outcome{}, e, false
	}
	sub, err := s.load(a, rec)
	if err != nil {
		return Outcome{}, errs.Internal(err), false
	}
	adapter, ok := s.psps.For(sub.pspName())
	if !ok {
		// Asking another PSP would turn "not theirs" into "never charged".
		s.obs.UnconfiguredPSP()
		s.log.WarnContext(a.client, "the PSP it was sent to is not configured on this replica", s.hash.Attr(a.ref),
			"object_id", sub.id(), "psp", sub.pspName())
		return Outcome{}, named(&errs.Error{Code: errs.CodeUnavailable, RetryAfter: 5 * time.Second,
			Message: "this request cannot be resumed here right now; retry with the same Idempotency-Key"}, sub.id()), false
	}
	token, err := s.store.TakeOver(a.work, a.ref, rec.Token, s.cfg.Lease)
	if errors.Is(err, idemkeys.ErrFenced) {
		return Outcome{}, nil, true
	}
	if err != nil {
		return Outcome{}, errs.Internal(err), false
	}
	s.obs.LeaseTakenOver()
	s.begin(a)
	s.log.InfoContext(a.client, "idempotency lease taken over", s.hash.Attr(a.ref), "object_id", sub.id(), "grant", token.Grant())
	out, err = sub.resume(a, rec, holding{token: token, adapter: adapter})
	return out, err, false
}

// load reads what a key created, by the kind of its endpoint.
func (s *Service) load(a attempt, rec idemkeys.Record) (subject, error) {
	switch a.ref.Endpoint {
	case EndpointCreateRefund:
		r, err := s.store.Refund(a.work, a.ref.MerchantID, rec.PaymentID)
		if err != nil {
			return nil, err
		}
		p, err := s.store.Payment(a.work, a.ref.MerchantID, r.PaymentID)
		if err != nil {
			return nil, err
		}
		return refundSubject{s: s, r: r, p: p}, nil
	}
	// A payment's own key, or a confirm's: its payment_id is the payment.
	p, err := s.store.Payment(a.work, a.ref.MerchantID, rec.PaymentID)
	if err != nil {
		return nil, err
	}
	return paymentSubject{s: s, p: p, twoStep: a.ref.Endpoint == EndpointConfirmPayment}, nil
}

// write stores a subject's final state (or its review) and the answer for
// replay with settle, fenced on h's token, under a deadline of its own: the
// PSP's answer must reach the database whatever the request's remaining time.
// recorded runs once the write is known to have landed.
func (s *Service) write(a attempt, h holding, id string, status string, resp idemkeys.Response, settle func(context.Context) error, recorded func()) (Outcome, error) {
	err := settle(s.writeCtx(a))
	if errors.Is(err, errs.ErrWriteUnknown) {
		// The write's fate is unknown: read what is there and go on from it.
		rec, gerr := s.store.Record(s.writeCtx(a), a.ref)
		switch {
		case gerr != nil:
			s.log.WarnContext(a.client, "settle outcome unknown and the key cannot be read", s.hash.Attr(a.ref), "object_id", id, "err", errors.Join(err, gerr))
			return s.release(a, h, id, false, &errs.Error{Code: errs.CodeUnavailable, RetryAfter: time.Second, Err: errors.Join(err, gerr),
				Message: "the outcome could not be recorded yet; retry with the same Idempotency-Key"})
		case rec.State == idemkeys.Completed && rec.Token == h.token:
			err = nil // our write landed
		case rec.State == idemkeys.InProgress && rec.Token == h.token:
			err = settle(s.writeCtx(a))
		default:
			err = idemkeys.ErrFenced
		}
	}
	switch {
	case err == nil:
		s.replays.put(a.ref, cachedReplay{fp: a.fp, raw: a.raw, paymentID: id, resp: resp, expires: s.cfg.Now().Add(s.cfg.Retention)})
		s.finish(a)
		recorded()
		s.log.InfoContext(a.client, settledEvent(id), s.hash.Attr(a.ref), "object_id", id, "status", status, "grant", h.token.Grant())
		return Outcome{Response: resp, PaymentID: id}, nil
	case errors.Is(err, idemkeys.ErrFenced):
		// Another worker holds a newer lease: its answer, not ours, is the truth.
		s.obs.FencingRefused()
		s.log.WarnContext(a.client, "stale worker refused by fencing token", s.hash.Attr(a.ref),
			"object_id", id, "grant", h.token.Grant())
		return s.join(a)
	case errors.Is(err, errs.ErrWriteUnknown):
		return s.release(a, h, id, false, &errs.Error{Code: errs.CodeUnavailable, RetryAfter: time.Second, Err: err,
			Message: "the outcome could not be recorded yet; retry with the same Idempotency-Key"})
	}
	return Outcome{}, errs.Internal(err)
}

// release gives the lease back early after a PSP call that produced no
// result, so the client's retry resumes at once, and answers with cause.
// notSent says the caller's send certainly did nothing.
func (s *Service) release(a attempt, h holding, id string, notSent bool, cause *errs.Error) (Outcome, error) {
	if err := s.store.Release(s.writeCtx(a), a.ref, h.token, notSent); err != nil && !errors.Is(err, idemkeys.ErrFenced) {
		// The lease will expire by itself; the retry just waits longer.
		s.log.WarnContext(a.client, "release lease", s.hash.Attr(a.ref), "object_id", id, "err", err)
	}
	s.finish(a)
	if cause == nil {
		return Outcome{}, nil
	}
	return Outcome{}, named(cause, id)
}

// soleSend says whether the send just refused was the only one ever
// authorised under the caller's lease: only then does a refusal prove that
// nothing under this order id can land. An earlier send whose answer was
// lost may still be on its way, and the PSP judges each send apart (a
// permanent error about this request, a declined refund it keeps no record
// of). Read under the caller's lease, whose holder alone changes the counts.
func (s *Service) soleSend(a attempt, h holding) bool {
	rec, err := s.store.Record(s.writeCtx(a), a.ref)
	return err == nil && rec.State == idemkeys.InProgress && rec.Token == h.token &&
		rec.ChargeAttempts == rec.ChargesNotSent+1
}

// refusedNotAlone gives back a key whose send the PSP refused while an
// earlier send may still land: this send counts as not sent, and the
// lookups and the creation window decide, as for any unknown outcome.
func (s *Service) refusedNotAlone(a attempt, h holding, id string, err error) (Outcome, error) {
	s.log.WarnContext(a.client, "PSP refused a repeat send; an earlier send may still land", s.hash.Attr(a.ref), "object_id", id, "err", err)
	return s.release(a, h, id, true, pspError(&psp.Error{Class: psp.Unknown, Op: "repeat", Err: err}))
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
func pspError(err error) *errs.Error {
	if class, ok := psp.ClassOf(err); ok && class == psp.NotProcessed {
		return &errs.Error{
			Code:       errs.CodePSPUnavailable,
			Message:    "the payment provider did not process the payment; retry with the same Idempotency-Key",
			RetryAfter: time.Second,
			Err:        err,
		}
	}
	return &errs.Error{
		Code:       errs.CodePSPUnknown,
		Message:    "the payment provider did not confirm the outcome; retry with the same Idempotency-Key to learn it",
		RetryAfter: 2 * time.Second,
		Err:        err,
	}
}

// settledEvent names the log event of a settlement by what was settled.
func settledEvent(id string) string {
	if strings.HasPrefix(id, "re_") {
		return "refund settled"
	}
	return "payment settled"
}

// named names in e the object its request created (a payment or a refund),
// unless it names one already.
func named(e *errs.Error, id string) *errs.Error {
	switch {
	case e.PaymentID != "" || e.RefundID != "":
	case strings.HasPrefix(id, "re_"):
		e.RefundID = id
	default:
		e.PaymentID = id
	}
	return e
}
