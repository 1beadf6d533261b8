package payments

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"gateway/errs"
	"gateway/idemkeys"
	"gateway/psp"
	"gateway/versions"
)

// The one flow every idempotent command runs (design §2): claim the key and
// the command's subject in one short transaction; send the subject's money
// movement to its PSP outside any transaction; record the PSP's answer with
// a write fenced on the lease's token; replay a completed key's answer; wait
// for a key in flight; take over an expired lease and resume, asking the PSP
// first; give a lease back when the PSP gave no result. The flow drives;
// each kind of subject (a payment's charge, a refund) answers only what is
// its own: how to send it, how to ask about it, what its answers mean and
// how its state is written.

// Kind names what a subject is: the kind of money movement it stands for.
type Kind string

const (
	// KindPayment is a payment: its charge of the customer.
	KindPayment Kind = "payment"
	// KindRefund is a refund of (part of) a payment's charge.
	KindRefund Kind = "refund"
	// KindCapture is a capture of (part of) an authorization (operation.go).
	KindCapture Kind = "capture"
	// KindVoid is the release of an authorization, or the cancellation of a
	// charge waiting for its customer (operation.go).
	KindVoid Kind = "void"
	// KindCancellation is a cancellation by key (cancelbykey.go): settled
	// at its claim, it moves no money itself.
	KindCancellation Kind = "cancellation"
)

// sends names what a subject of the kind asks its PSP for, in logs.
func (k Kind) sends() string {
	if k == KindPayment {
		return "charge"
	}
	return string(k)
}

// endpoints are the idempotent endpoints, each scoping its own keys, with
// the kind of subject its keys claim: the one place an endpoint says what
// its keys hold. A confirm's key holds the payment it charges, from a
// front end that can complete a next action (3-D Secure).
var endpoints = map[string]struct {
	kind    Kind
	twoStep bool
}{
	EndpointCreatePayment:  {kind: KindPayment},
	EndpointConfirmPayment: {kind: KindPayment, twoStep: true},
	EndpointCreateRefund:   {kind: KindRefund},
	EndpointCapturePayment: {kind: KindCapture},
	EndpointCancelPayment:  {kind: KindVoid},
	EndpointCancelByKey:    {kind: KindCancellation},
}

// KindOf is the kind of subject the keys of an idempotent endpoint hold;
// false for an endpoint that has none.
func KindOf(endpoint string) (Kind, bool) {
	e, ok := endpoints[endpoint]
	return e.kind, ok
}

// AtFrontEnd reports whether the keys of an endpoint send their charge from
// a front end that can complete a next action (a confirm's): a charge that
// waits for its customer is recorded as such, not declined.
func AtFrontEnd(endpoint string) bool { return endpoints[endpoint].twoStep }

// subject is one money movement under its key's lease, as the flow sees it.
// Its methods never call back into the flow: they say what is the subject's
// own, and the flow decides what happens next.
type subject interface {
	kind() Kind
	id() string
	// pspName is the PSP it was sent to; it is asked about nowhere else.
	pspName() string
	// created is when it was claimed, on the database's clock: the PSP's
	// memory of its order id counts from there.
	created() time.Time
	// send asks the PSP to move its money, with its order id.
	send(ctx context.Context, adapter psp.Adapter) (answer, error)
	// lookup asks the PSP what it holds under its order id:
	// psp.ErrNotFound when it holds nothing.
	lookup(ctx context.Context, adapter psp.Adapter) (answer, error)
	// rejected is its final state when the PSP refused the request as one
	// it can never accept; code is the PSP's own.
	rejected(code string) subject
	// orderTaken is its state when the PSP holds something else under its
	// order id: requires_review.
	orderTaken() subject
	// status is its status, for logs.
	status() string
	// settle writes this state and its answer, fenced on token; the answer
	// is returned for the client.
	settle(ctx context.Context, store FlowStore, ref idemkeys.Ref, token idemkeys.Token) (idemkeys.Response, error)
	// recorded counts it once its write landed.
	recorded(obs Observer)
}

// answer is what the PSP said of a subject, read by the subject's own rules.
type answer struct {
	// next is the subject's state to record.
	next subject
	// later: the PSP accepted and finishes later, with nobody at a front
	// end to wait with: the key stays unfinished for the client's poll and
	// the reconciler, and the client is answered with next's rendering,
	// unstored.
	later *idemkeys.Response
	// unrecorded is a refusal the PSP keeps no record of (a declined
	// refund): final only when this send was the only one ever authorised.
	unrecorded error
	// note is what the flow logs of it ("" for nothing), with attrs; warn
	// says the answer does not match the subject.
	note  string
	attrs []any
	warn  bool
}

// Outcome is the answer to an idempotent request.
type Outcome struct {
	Response idemkeys.Response
	// Replayed is true when the response was stored by an earlier request.
	Replayed bool
	// SubjectID names what the request's key created (pay_…, re_…).
	SubjectID string
}

// Polling bounds for a duplicate waiting on a key held by another replica
// (a key held in this process wakes its duplicates itself).
const (
	firstPoll = 10 * time.Millisecond
	maxPoll   = 500 * time.Millisecond
	// maxClaims bounds how often one request goes back to the INSERT after the
	// key vanished under it (a claim rolled back, or a record purged).
	maxClaims = 3
	// flowMargin is what a claimed subject's work may take beyond its lease
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
	// version is the API version the key answers in: the request's for a
	// key it claims, the key's own for one it takes over.
	version string
}

// remember keeps c, an answer to a's key, for replays: stamped with the
// version a's request was answered in and the version its body is in, as
// the key's row is.
func (s *Service) remember(a attempt, c idemkeys.Cached) {
	c.Response = a.stamped(c.Response)
	s.replays.Put(a.ref, c, s.cfg.Now())
}

// stamped is resp as a's key answers it: in the version of the request
// that made the key (a.version, the key's own after a takeover), its body
// in this gateway's latest unless it says otherwise.
func (a attempt) stamped(resp idemkeys.Response) idemkeys.Response {
	if resp.Version == "" {
		resp.Version = a.version
	}
	if resp.BodyVersion == "" {
		resp.BodyVersion = string(versions.Latest)
	}
	return resp
}

type workMark struct{ end func() }

// holding is the lease a worker holds on a key and the PSP it sends to.
type holding struct {
	token   idemkeys.Token
	adapter psp.Adapter
	// claimed is this process's clock just before the claim: the database
	// stamped the lease after it, so a send window measured locally from
	// it ends no later than the one recorded.
	claimed time.Time
}

// claim is one kind's claim of a fresh key: it writes the key's record and
// its subject in one transaction under token and returns the subject as
// stored, and answer when the claim completed the key at once (nothing is
// to be sent). On an error, sub is still the subject it tried to claim.
type claim func(ctx context.Context, token idemkeys.Token) (sub subject, answer *idemkeys.Response, err error)

// run answers one idempotent request on ref: a replay from this process's
// cache, or the claim of its key and what follows. claim is tried again
// when the key vanished under it (a record purged, a claim rolled back).
func (s *Service) run(ctx context.Context, ref idemkeys.Ref, fp, raw [32]byte, claim claim) (Outcome, error) {
	work, cancelWork := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Lease+s.cfg.PSPTimeout+flowMargin)
	defer cancelWork()
	waitCtx, cancel := context.WithTimeout(ctx, s.cfg.InFlightWait)
	defer cancel()
	a := attempt{ref: ref, fp: fp, raw: raw, client: ctx, work: work, waitCtx: waitCtx, working: &workMark{},
		version: string(versions.FromContext(ctx))}
	defer s.finish(a)
	if e, ok := s.replays.Get(a.ref, s.cfg.Now()); ok && e.Fingerprint == a.fp {
		if e.Raw != a.raw && a.raw != ([32]byte{}) {
			// These bytes are this command too: ReplayBody answers them next time.
			e.Raw = a.raw
			s.remember(a, e)
		}
		return s.replay(a, e.SubjectID, e.Response), nil
	}
	for range maxClaims {
		out, err := s.claim(a, claim)
		if !errors.Is(err, errVanished) {
			return out, err
		}
	}
	// Each claim found the key taken and the holder's row gone (claims
	// rolled back, or conflicts on a cluster): nothing of this request is
	// stored, and a retry later claims afresh.
	return Outcome{}, &errs.Error{Code: errs.CodeUnavailable, RetryAfter: time.Second,
		Message: "the request could not be claimed right now; retry with the same Idempotency-Key",
		Err:     fmt.Errorf("key %s vanished %d times in a row", s.hash.Key(a.ref), maxClaims)}
}

// claim claims a's key with claim and goes on from the store's answer.
func (s *Service) claim(a attempt, claim claim) (Outcome, error) {
	if e := s.closed(); e != nil {
		// Nothing new starts here, but a stored answer is still an answer.
		out, err := s.join(a)
		if errors.Is(err, errVanished) {
			return Outcome{}, e
		}
		return out, err
	}
	h := holding{token: idemkeys.FirstToken(), claimed: s.cfg.Now()}
	sub, ans, err := claim(a.work, h.token)
	switch {
	case err == nil && ans != nil:
		s.obs.KeyOutcome(OutcomeFresh)
		s.remember(a, idemkeys.Cached{Fingerprint: a.fp, Raw: a.raw, SubjectID: sub.id(), Response: *ans, Expires: s.cfg.Now().Add(s.cfg.Retention)})
		s.log.InfoContext(a.client, string(sub.kind())+" created to confirm later", s.hash.Attr(a.ref), idAttr(sub), sub.id(), "psp", sub.pspName())
		return Outcome{Response: a.stamped(*ans), SubjectID: sub.id()}, nil
	case err == nil:
		return s.start(a, h, sub)
	case errors.Is(err, idemkeys.ErrExists):
		return s.join(a)
	case errors.Is(err, errs.ErrNotFound):
		return Outcome{}, &errs.Error{Code: errs.CodeNotFound, Message: "payment not found"}
	case errors.Is(err, errs.ErrWriteUnknown):
		// Find out whether our claim committed before the connection broke.
		readAt := s.cfg.Now()
		rec, gerr := s.store.Record(a.work, a.ref)
		rec.ReadAt = readAt
		switch {
		case errors.Is(gerr, idemkeys.ErrNotFound):
			return Outcome{}, errVanished
		case gerr != nil:
			return Outcome{}, errs.Internal(errors.Join(err, gerr))
		case rec.Token != h.token || rec.SubjectID != sub.id():
			return s.join(a) // another request's claim
		case rec.State == idemkeys.Completed:
			return Outcome{Response: rec.Response, SubjectID: rec.SubjectID}, nil // ours committed, completed at once
		}
		// Ours committed: carry on as the claimant, from what is stored.
		stored, lerr := s.load(a, rec)
		if errors.Is(lerr, errSettledMeanwhile) {
			return s.join(a)
		}
		if lerr != nil {
			return Outcome{}, errs.Internal(errors.Join(err, lerr))
		}
		return s.start(a, h, stored)
	}
	var e *errs.Error
	if errors.As(err, &e) {
		if e.Code == errs.CodeKeyReused {
			s.obs.KeyOutcome(OutcomeKeyReused)
		}
		return Outcome{}, e
	}
	return Outcome{}, errs.Internal(err)
}

// start sends a subject its request claimed, within its claim's lease.
func (s *Service) start(a attempt, h holding, sub subject) (Outcome, error) {
	adapter, ok := s.psps.For(sub.pspName())
	if !ok {
		// A replica that can reach the subject's PSP resumes it.
		s.obs.UnconfiguredPSP()
		return s.release(a, h, sub, true, &errs.Error{Code: errs.CodeUnavailable, RetryAfter: 5 * time.Second,
			Message: "this " + string(sub.kind()) + " cannot be sent from here right now; retry with the same Idempotency-Key"})
	}
	s.obs.KeyOutcome(OutcomeFresh)
	s.begin(a)
	h.adapter = adapter
	return s.send(a, h, sub, h.claimed.Add(s.cfg.Lease))
}

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

// replay answers with a completed key's stored response, at the key's pace.
func (s *Service) replay(a attempt, subjectID string, resp idemkeys.Response) Outcome {
	s.pace.Wait(a.client, a.ref)
	s.obs.KeyOutcome(OutcomeReplayed)
	// The request's access line says it was replayed; this one is for debugging.
	if s.log.Enabled(a.client, slog.LevelDebug) {
		s.log.DebugContext(a.client, "idempotent replay", s.hash.Attr(a.ref), "object_id", subjectID, "status", resp.Status)
	}
	return Outcome{Response: resp, Replayed: true, SubjectID: subjectID}
}

// errVanished: the key's record disappeared between the INSERT that found it and
// the read (the other claim rolled back, or the record was purged); claim again.
var errVanished = errors.New("key vanished; claim again")

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
	kind, _ := KindOf(a.ref.Endpoint)
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
		// The record alone answers a replay; the subject is read only to resume.
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
		if rec.Fingerprint == CanceledByKey && rec.State == idemkeys.Completed {
			// Canceled by key before anything claimed it: every request
			// with the key answers the cancellation, whatever its body.
			stop()
			waited()
			s.obs.KeyOutcome(OutcomeReplayed)
			return Outcome{}, &errs.Error{Code: errs.CodeCanceledByKey,
				Message: "this Idempotency-Key was canceled by POST /payments/cancel_by_key before any payment was made under it: nothing was or will be charged; use a new key for a new payment"}
		}
		if rec.Fingerprint != a.fp {
			stop()
			waited()
			s.obs.KeyOutcome(OutcomeMismatch)
			s.log.InfoContext(a.client, "idempotency key mismatch", s.hash.Attr(a.ref), "object_id", rec.SubjectID)
			return Outcome{}, &errs.Error{
				Code:    errs.CodeKeyMismatch,
				Message: "this Idempotency-Key was already used with a different request; use a new key for a new " + string(kind),
			}
		}
		if rec.State == idemkeys.Completed {
			stop()
			waited()
			// Cached no longer than the key replays: its age is the database's to tell.
			left := s.cfg.Retention - rec.DBNow.Sub(rec.CompletedAt)
			s.remember(a, idemkeys.Cached{Fingerprint: rec.Fingerprint, Raw: a.raw, SubjectID: rec.SubjectID, Response: rec.Response, Expires: s.cfg.Now().Add(left)})
			return s.replay(a, rec.SubjectID, rec.Response), nil
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
			}, kind, rec.SubjectID)
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
	if errors.Is(err, errSettledMeanwhile) {
		return Outcome{}, nil, true
	}
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
			Message: "this request cannot be resumed here right now; retry with the same Idempotency-Key"}, sub.kind(), sub.id()), false
	}
	token, err := s.store.TakeOver(a.work, a.ref, rec.Token, s.cfg.Lease)
	if errors.Is(err, idemkeys.ErrFenced) {
		return Outcome{}, nil, true
	}
	if err != nil {
		return Outcome{}, errs.Internal(err), false
	}
	s.obs.LeaseTakenOver()
	if rec.Response.Version != "" {
		// The key answers in the version of the request that made it.
		a.version = rec.Response.Version
	}
	s.begin(a)
	s.log.InfoContext(a.client, "idempotency lease taken over", s.hash.Attr(a.ref), "object_id", sub.id(), "grant", token.Grant())
	out, err = s.resume(a, rec, holding{token: token, adapter: adapter}, sub)
	return out, err, false
}

// errSettledMeanwhile is load's answer for an operation key whose payment
// no longer holds its operation in flight: it was settled (and its key
// completed, in the same transaction) between the read of the key's record
// and the read of its payment. Looking at the key again finds its answer.
var errSettledMeanwhile = errors.New("settled since its key was read")

// load reads what a key holds, by the kind its endpoint claims.
func (s *Service) load(a attempt, rec idemkeys.Record) (subject, error) {
	e := endpoints[a.ref.Endpoint]
	switch e.kind {
	case KindRefund:
		r, err := s.store.Refund(a.work, a.ref.MerchantID, rec.SubjectID)
		if err != nil {
			return nil, err
		}
		p, err := s.store.Payment(a.work, a.ref.MerchantID, r.PaymentID)
		if err != nil {
			return nil, err
		}
		return refundSubject{r: r, p: p, now: s.cfg.Now, dbAt: rec.DBNow, localAt: rec.ReadAt}, nil
	case KindPayment:
		p, err := s.store.Payment(a.work, a.ref.MerchantID, rec.SubjectID)
		if err != nil {
			return nil, err
		}
		return paymentSubject{p: p, twoStep: e.twoStep}, nil
	case KindCapture, KindVoid:
		p, err := s.store.Payment(a.work, a.ref.MerchantID, rec.SubjectID)
		if err != nil {
			return nil, err
		}
		kind := OpCapture
		if e.kind == KindVoid {
			kind = OpVoid
		}
		if p.Operation == nil || p.Operation.Kind != kind || p.Operation.Key != a.ref.Key {
			return nil, fmt.Errorf("payment %s holds no %s of this key in flight: %w", p.ID, kind, errSettledMeanwhile)
		}
		return operationSubject{p: p, op: kind}, nil
	}
	return nil, fmt.Errorf("key of %q holds no subject the flow knows", a.ref.Endpoint)
}

// resume continues a subject whose earlier worker lost or gave up its
// lease. It asks the PSP first: a charge or a refund may exist that nobody
// recorded; it sends again, with the same order id, only when the PSP's
// answer proves that cannot move the money twice (MaySendAgain).
func (s *Service) resume(a attempt, rec idemkeys.Record, h holding, sub subject) (Outcome, error) {
	lctx, cancel := context.WithTimeout(a.work, s.cfg.PSPTimeout)
	ans, err := sub.lookup(lctx, h.adapter)
	cancel()
	switch {
	case err == nil:
		return s.settle(a, h, sub, ans)
	case errors.Is(err, psp.ErrNotFound):
		if !MaySendAgain(rec, sub.created(), h.adapter.Capabilities(), s.cfg.PSPTimeout, s.cfg.Now()) {
			return s.release(a, h, sub, false, pspError(&psp.Error{Class: psp.Unknown, Op: "lookup", Err: err}))
		}
		deadline, out, err, ok := s.arm(a, h, sub)
		if !ok {
			return out, err
		}
		return s.send(a, h, sub, deadline)
	}
	return s.release(a, h, sub, false, pspError(err))
}

// arm records, before a resumed worker sends again, that it may send within
// one PSP timeout from now, and says until when (on this process's clock).
// Not ok: the caller lost the lease or could not record it, and out, err
// are its answer; nothing may be sent.
func (s *Service) arm(a attempt, h holding, sub subject) (deadline time.Time, out Outcome, err error, ok bool) {
	armed := s.cfg.Now()
	err = s.store.ArmSend(s.writeCtx(a), a.ref, h.token, s.cfg.PSPTimeout, ArmGuardFor(h.adapter.Capabilities(), s.cfg.PSPTimeout))
	switch {
	case errors.Is(err, idemkeys.ErrFenced):
		s.obs.FencingRefused()
		out, err = s.join(a)
		return time.Time{}, out, err, false
	case errors.Is(err, ErrArmRefused):
		// Too late to lean on the PSP's dedupe, too early to know: wait for
		// the lookups and the creation window to decide.
		out, err = s.release(a, h, sub, false, pspError(&psp.Error{Class: psp.Unknown, Op: "arm", Err: err}))
		return time.Time{}, out, err, false
	case err != nil:
		// Nothing was sent, but the arm may not have been counted either:
		// counting this as an unsent attempt could pair with an earlier send
		// whose fate is unknown and prove "nothing sent" falsely. Not
		// counted: at worst the reconciler asks the PSP.
		out, err = s.release(a, h, sub, false, errs.Internal(err))
		return time.Time{}, out, err, false
	}
	return armed.Add(s.cfg.PSPTimeout), Outcome{}, nil, true
}

// MaySendAgain decides whether a charge (or a refund) the PSP says it does
// not have may be sent again with the same order id, at the local instant
// now. While the PSP still deduplicates that order id, a repeat cannot move
// the money twice; past that, it is safe only when the PSP's "not found" is
// authoritative and no earlier send can still materialise: the database's
// clock (as the record was read, so never ahead of the truth) is past
// may_send_until plus the creation window. The dedupe window is judged with
// the database's clock bounded from above, plus the time the new send may
// take to leave and to land (PSP timeout and creation window); ArmSend
// judges it again, on the database's clock, as the send is armed.
func MaySendAgain(rec idemkeys.Record, created time.Time, caps psp.Capabilities, pspTimeout time.Duration, now time.Time) bool {
	if caps.DedupesOrderID {
		if caps.DedupeWindow == 0 {
			return true
		}
		// The first send followed the subject's creation; its dedupe lasts DedupeWindow from then.
		if rec.DBNowAtMost(now).Add(pspTimeout + caps.CreationWindow).Before(created.Add(caps.DedupeWindow)) {
			return true
		}
	}
	if !caps.AuthoritativeLookup || rec.MaySendUntil.IsZero() {
		return false
	}
	return rec.DBNow.After(rec.MaySendUntil.Add(caps.CreationWindow))
}

// sendTime says how long a worker may let its PSP call run, never past
// deadline (a local instant no later than the key's may_send_until: the
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

// send sends sub's money movement with its order id, outside any
// transaction, within the time sendTime allows, and goes on from the PSP's
// answer by its outcome class (design §2).
func (s *Service) send(a attempt, h holding, sub subject, deadline time.Time) (Outcome, error) {
	timeout, refusal := s.sendTime(deadline)
	if refusal != nil {
		return s.release(a, h, sub, true, refusal)
	}
	ctx, cancel := context.WithTimeout(a.work, timeout)
	sent := time.Now()
	ans, err := sub.send(ctx, h.adapter)
	cancel()
	if sub.kind() == KindPayment {
		s.psps.Observe(sub.pspName(), err, time.Since(sent))
	}
	if err == nil {
		if ans.unrecorded != nil && !s.soleSend(a, h) {
			return s.refusedNotAlone(a, h, sub, ans.unrecorded)
		}
		return s.settle(a, h, sub, ans)
	}
	what := sub.kind().sends()
	class, _ := psp.ClassOf(err)
	switch {
	case class == psp.Rejected:
		// A request the PSP can never accept: this send moved nothing, and
		// sending it again cannot help. A final answer, stored, when no
		// other send of this order id was ever authorised.
		if !s.soleSend(a, h) {
			return s.refusedNotAlone(a, h, sub, err)
		}
		s.log.WarnContext(a.client, "PSP refused the "+what+" request as invalid", s.hash.Attr(a.ref), idAttr(sub), sub.id(), "err", err)
		return s.write(a, h, sub.rejected(rejectionCode(err)))
	case errors.Is(err, psp.ErrOrderConflict):
		// The PSP holds something else under this subject's order id: the
		// gateway's record and the PSP's disagree, and only a person can say why.
		s.log.WarnContext(a.client, "order id taken at the PSP", s.hash.Attr(a.ref), idAttr(sub), sub.id(), "err", err)
		return s.write(a, h, sub.orderTaken())
	case class == psp.NotProcessed:
		if out, err, ok := s.failover(a, h, sub, err); ok {
			return out, err
		}
		s.log.WarnContext(a.client, "PSP did not process the "+what, s.hash.Attr(a.ref), idAttr(sub), sub.id(), "err", err)
		return s.release(a, h, sub, true, pspError(err))
	}
	s.log.WarnContext(a.client, "PSP "+what+" outcome unknown", s.hash.Attr(a.ref), idAttr(sub), sub.id(), "err", err)
	return s.release(a, h, sub, false, pspError(err))
}

// settle records the PSP's answer about sub, read by sub's rules, with a
// write fenced on the lease's token.
func (s *Service) settle(a attempt, h holding, sub subject, ans answer) (Outcome, error) {
	if ans.note != "" {
		level := slog.LevelInfo
		if ans.warn {
			level = slog.LevelWarn
		}
		s.log.Log(a.client, level, ans.note, append([]any{s.hash.Attr(a.ref), idAttr(sub), sub.id()}, ans.attrs...)...)
	}
	if ans.later != nil {
		s.release(a, h, sub, false, nil)
		return Outcome{Response: a.stamped(*ans.later), SubjectID: sub.id()}, nil
	}
	return s.write(a, h, ans.next)
}

// write stores a subject's final state (or its review) and the answer for
// replay, fenced on h's token, under a deadline of its own: the PSP's answer
// must reach the database whatever the request's remaining time.
func (s *Service) write(a attempt, h holding, sub subject) (Outcome, error) {
	resp, err := sub.settle(s.writeCtx(a), s.store, a.ref, h.token)
	if errors.Is(err, errs.ErrWriteUnknown) {
		// The write's fate is unknown: read what is there and go on from it.
		rec, gerr := s.store.Record(s.writeCtx(a), a.ref)
		switch {
		case gerr != nil:
			s.log.WarnContext(a.client, "settle outcome unknown and the key cannot be read", s.hash.Attr(a.ref), "object_id", sub.id(), "err", errors.Join(err, gerr))
			return s.release(a, h, sub, false, &errs.Error{Code: errs.CodeUnavailable, RetryAfter: time.Second, Err: errors.Join(err, gerr),
				Message: "the outcome could not be recorded yet; retry with the same Idempotency-Key"})
		case rec.State == idemkeys.Completed && rec.Token == h.token:
			err = nil // our write landed
		case rec.State == idemkeys.InProgress && rec.Token == h.token:
			resp, err = sub.settle(s.writeCtx(a), s.store, a.ref, h.token)
		default:
			err = idemkeys.ErrFenced
		}
	}
	switch {
	case err == nil:
		s.remember(a, idemkeys.Cached{Fingerprint: a.fp, Raw: a.raw, SubjectID: sub.id(), Response: resp, Expires: s.cfg.Now().Add(s.cfg.Retention)})
		s.finish(a)
		sub.recorded(s.obs)
		s.log.InfoContext(a.client, string(sub.kind())+" settled", s.hash.Attr(a.ref), "object_id", sub.id(), "status", sub.status(), "grant", h.token.Grant())
		return Outcome{Response: a.stamped(resp), SubjectID: sub.id()}, nil
	case errors.Is(err, idemkeys.ErrFenced):
		// Another worker holds a newer lease: its answer, not ours, is the truth.
		s.obs.FencingRefused()
		s.log.WarnContext(a.client, "stale worker refused by fencing token", s.hash.Attr(a.ref),
			"object_id", sub.id(), "grant", h.token.Grant())
		return s.join(a)
	case errors.Is(err, errs.ErrWriteUnknown):
		return s.release(a, h, sub, false, &errs.Error{Code: errs.CodeUnavailable, RetryAfter: time.Second, Err: err,
			Message: "the outcome could not be recorded yet; retry with the same Idempotency-Key"})
	}
	return Outcome{}, errs.Internal(err)
}

// release gives the lease back early after a PSP call that produced no
// result, so the client's retry resumes at once, and answers with cause.
// notSent says the caller's send certainly did nothing.
func (s *Service) release(a attempt, h holding, sub subject, notSent bool, cause *errs.Error) (Outcome, error) {
	if err := s.store.Release(s.writeCtx(a), a.ref, h.token, notSent); err != nil && !errors.Is(err, idemkeys.ErrFenced) {
		// The lease will expire by itself; the retry just waits longer.
		s.log.WarnContext(a.client, "release lease", s.hash.Attr(a.ref), "object_id", sub.id(), "err", err)
	}
	s.finish(a)
	if cause == nil {
		return Outcome{}, nil
	}
	return Outcome{}, named(cause, sub.kind(), sub.id())
}

// soleSend says whether the send just refused was the only one ever
// authorised under the caller's lease: only then does a refusal prove that
// nothing under this order id can land. An earlier send whose answer was
// lost may still be on its way, and the PSP judges each send apart (a
// permanent error about this request, a declined refund it keeps no record
// of). Read under the caller's lease, whose holder alone changes the counts.
//
// The read and the settle that follows are two statements, not one: this
// is safe only because every write of send_attempts and sends_not_sent
// (ArmSend, a release, a takeover's claim) is fenced on the lease's token,
// so no count can change between them while the caller still holds the
// lease, and the settle itself is fenced. A write of either count that is
// not fenced (an operator's tool, a reconciler step) would let a refusal be
// taken as final while another send lands: fence it, or make this check
// part of the settle's own statement.
func (s *Service) soleSend(a attempt, h holding) bool {
	rec, err := s.store.Record(s.writeCtx(a), a.ref)
	return err == nil && rec.State == idemkeys.InProgress && rec.Token == h.token &&
		rec.SendAttempts == rec.SendsNotSent+1
}

// refusedNotAlone gives back a key whose send the PSP refused while an
// earlier send may still land: this send counts as not sent, and the
// lookups and the creation window decide, as for any unknown outcome.
func (s *Service) refusedNotAlone(a attempt, h holding, sub subject, err error) (Outcome, error) {
	s.log.WarnContext(a.client, "PSP refused a repeat send; an earlier send may still land", s.hash.Attr(a.ref), "object_id", sub.id(), "err", err)
	return s.release(a, h, sub, true, pspError(&psp.Error{Class: psp.Unknown, Op: "repeat", Err: err}))
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

// idAttr is the log attribute naming a subject of sub's kind.
func idAttr(sub subject) string { return string(sub.kind()) + "_id" }

// named names in e the object a request's key created, by its kind, unless
// it names one already.
func named(e *errs.Error, kind Kind, id string) *errs.Error {
	switch {
	case e.PaymentID != "" || e.RefundID != "" || id == "":
	case kind == KindRefund:
		e.RefundID = id
	default:
		e.PaymentID = id
	}
	return e
}
