package payments

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"

	"gateway/errs"
	"gateway/idemkeys"
	"gateway/psp"
)

// RefundClaim is what a fresh refund request writes: its key's record, its
// reservation on the payment and the refund.
type RefundClaim struct {
	Ref         idemkeys.Ref
	Fingerprint [32]byte
	Token       idemkeys.Token
	// Lease is how long the claimant owns the key and may send the refund.
	Lease time.Duration
	// Refund is the refund to insert; its amount, currency, PSP and times
	// are filled in by the claim.
	Refund Refund
}

// CreateRefund gives (part of) a succeeded payment back, at most once per
// (merchant, key): the same guarantees as Create, the same claim → PSP →
// fenced settle flow, the same answers. The claim reserves the refund's
// amount on the payment in the transaction that inserts its key, so that
// the pending, succeeded and in-review refunds of a payment never add up to
// more than it, whatever the concurrency; a refund that fails returns it.
//
// Errors are *errs.Error: errs.CodeInvalidKey, errs.CodeInvalid; errs.CodeNotFound (no such
// payment for the merchant), errs.CodeNotRefundable and errs.CodeRefundExceeds
// (nothing stored, the key stays free: they depend on state that changes);
// errs.CodeKeyMismatch, errs.CodeInFlight, errs.CodeKeyReused; errs.CodePSPUnavailable and
// errs.CodePSPUnknown (retry with the same key); errs.CodeUnavailable, errs.CodeInternal.
func (s *Service) CreateRefund(ctx context.Context, req RefundRequest) (Outcome, error) {
	if err := idemkeys.ValidateKey(req.IdempotencyKey); err != nil {
		return Outcome{}, &errs.Error{Code: errs.CodeInvalidKey, Message: err.Error()}
	}
	if err := req.Validate(); err != nil {
		return Outcome{}, err
	}
	work, cancelWork := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Lease+s.cfg.PSPTimeout+flowMargin)
	defer cancelWork()
	waitCtx, cancel := context.WithTimeout(ctx, s.cfg.InFlightWait)
	defer cancel()
	a := attempt{
		ref:     idemkeys.Ref{MerchantID: req.MerchantID, Endpoint: EndpointCreateRefund, Key: req.IdempotencyKey},
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
		out, err := s.claimRefund(a, req)
		if !errors.Is(err, errVanished) {
			return out, err
		}
	}
	return Outcome{}, errs.Internal(fmt.Errorf("key %s vanished %d times in a row", s.hash.Key(a.ref), maxClaims))
}

func (s *Service) claimRefund(a attempt, req RefundRequest) (Outcome, error) {
	if out, err, closed := s.whenClosed(a); closed {
		return out, err
	}
	r := Refund{
		ID:             "re_" + ulid.Make().String(),
		MerchantID:     req.MerchantID,
		PaymentID:      req.PaymentID,
		IdempotencyKey: req.IdempotencyKey,
		RefundOrderID:  RefundOrderID(req.MerchantID, req.PaymentID, req.IdempotencyKey),
		Status:         RefundPending,
		Reason:         req.Reason,
		Metadata:       req.Metadata,
	}
	h := holding{token: idemkeys.FirstToken()}
	start := s.cfg.Now()
	claimed, p, err := s.store.ClaimRefund(a.work, RefundClaim{Ref: a.ref, Fingerprint: a.fp, Token: h.token, Lease: s.cfg.Lease, Refund: r},
		func(p Payment) (int64, error) { return RefundAmount(p, req.Amount) })
	switch {
	case err == nil:
		adapter, ok := s.psps.For(p.PSP)
		if !ok {
			return s.unreachable(a, h, claimed.ID, "refund")
		}
		s.obs.KeyOutcome(OutcomeFresh)
		s.begin(a)
		h.adapter = adapter
		rs := refundSubject{s: s, r: claimed, p: p, dbAt: claimed.CreatedAt, localAt: start}
		return rs.send(a, h, start.Add(s.cfg.Lease))
	case errors.Is(err, idemkeys.ErrExists):
		return s.join(a)
	case errors.Is(err, errs.ErrNotFound):
		return Outcome{}, &errs.Error{Code: errs.CodeNotFound, Message: "payment not found"}
	case errors.Is(err, errs.ErrWriteUnknown):
		got, gerr := s.store.Record(a.work, a.ref)
		switch {
		case errors.Is(gerr, idemkeys.ErrNotFound):
			return Outcome{}, errVanished
		case gerr != nil:
			return Outcome{}, errs.Internal(errors.Join(err, gerr))
		}
		if got.PaymentID == r.ID && got.State == idemkeys.InProgress && got.Token == h.token {
			// Ours committed: carry on as the claimant, from what is stored.
			sub, lerr := s.load(a, got)
			if lerr != nil {
				return Outcome{}, errs.Internal(lerr)
			}
			rs := sub.(refundSubject)
			adapter, ok := s.psps.For(rs.pspName())
			if !ok {
				return s.unreachable(a, h, r.ID, "refund")
			}
			s.obs.KeyOutcome(OutcomeFresh)
			s.begin(a)
			h.adapter = adapter
			rs.dbAt, rs.localAt = got.DBNow, s.cfg.Now()
			return rs.send(a, h, start.Add(s.cfg.Lease))
		}
		return s.join(a)
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

// refundSubject is a refund under its key's lease, with its payment.
type refundSubject struct {
	s *Service
	r Refund
	p Payment
	// dbAt and localAt pair the database's clock with this process's at
	// one moment, to stamp the refund's updated_at on the database's clock.
	dbAt, localAt time.Time
}

func (rs refundSubject) id() string      { return rs.r.ID }
func (rs refundSubject) pspName() string { return rs.r.PSP }

// resume continues a refund whose earlier worker lost or gave up its lease:
// the PSP is asked first, and the refund is sent again, with the same refund
// order id, only when it says with authority that it has none.
func (rs refundSubject) resume(a attempt, rec idemkeys.Record, h holding) (Outcome, error) {
	s, r := rs.s, rs.r
	rs.dbAt, rs.localAt = rec.DBNow, rec.ReadAt
	lctx, cancel := context.WithTimeout(a.work, s.cfg.PSPTimeout)
	x, err := h.adapter.LookupRefund(lctx, rs.p.PSPReference, r.RefundOrderID)
	cancel()
	switch {
	case err == nil:
		return rs.settle(a, h, x)
	case errors.Is(err, psp.ErrNotFound):
		if !MayChargeAgain(rec, r.CreatedAt, h.adapter.Capabilities(), s.cfg.PSPTimeout, s.cfg.Now()) {
			return s.release(a, h, r.ID, false, pspError(&psp.Error{Class: psp.Unknown, Op: "lookup_refund", Err: err}))
		}
		deadline, out, err, ok := s.arm(a, h, r.ID)
		if !ok {
			return out, err
		}
		return rs.send(a, h, deadline)
	}
	return s.release(a, h, r.ID, false, pspError(err))
}

// send asks the PSP for the refund, outside any transaction, within the time
// sendTime allows.
func (rs refundSubject) send(a attempt, h holding, deadline time.Time) (Outcome, error) {
	s, r := rs.s, rs.r
	timeout, refusal := s.sendTime(deadline)
	if refusal != nil {
		return s.release(a, h, r.ID, true, refusal)
	}
	ctx, cancel := context.WithTimeout(a.work, timeout)
	x, err := h.adapter.Refund(ctx, psp.RefundRequest{
		RefundOrderID:   r.RefundOrderID,
		MerchantOrderID: rs.p.MerchantOrderID,
		ChargeReference: rs.p.PSPReference,
		Amount:          r.Amount.Minor,
		Currency:        r.Amount.Currency,
		Reason:          r.Reason,
	})
	cancel()
	if err == nil {
		if x.Status == psp.RefundDeclined && !s.soleSend(a, h) {
			// The PSP keeps no record of a declined refund: an earlier send
			// of this refund order id may still be applied.
			return s.refusedNotAlone(a, h, r.ID, fmt.Errorf("refund declined (%s)", x.DeclineCode))
		}
		return rs.settle(a, h, x)
	}
	class, _ := psp.ClassOf(err)
	switch {
	case class == psp.Rejected:
		if !s.soleSend(a, h) {
			return s.refusedNotAlone(a, h, r.ID, err)
		}
		r.Status, r.FailureCode, r.PSPCode = RefundFailed, RefundFailedRejected, rejectionCode(err)
		s.log.WarnContext(a.client, "PSP refused the refund request as invalid", s.hash.Attr(a.ref), "refund_id", r.ID, "err", err)
		return rs.write(a, h, r)
	case errors.Is(err, psp.ErrOrderConflict):
		r.Status, r.ReviewReason = RefundRequiresReview, "the PSP refused the refund: its refund order id is already used with another amount or currency"
		s.log.WarnContext(a.client, "refund order id taken at the PSP", s.hash.Attr(a.ref), "refund_id", r.ID, "err", err)
		return rs.write(a, h, r)
	case class == psp.NotProcessed:
		s.log.WarnContext(a.client, "PSP did not process the refund", s.hash.Attr(a.ref), "refund_id", r.ID, "err", err)
		return s.release(a, h, r.ID, true, pspError(err))
	}
	s.log.WarnContext(a.client, "PSP refund outcome unknown", s.hash.Attr(a.ref), "refund_id", r.ID, "err", err)
	return s.release(a, h, r.ID, false, pspError(err))
}

// settle records the PSP's answer with a write fenced on the lease token.
func (rs refundSubject) settle(a attempt, h holding, x psp.Refund) (Outcome, error) {
	settled, err := ApplyRefund(rs.r, x)
	if err != nil {
		return rs.s.release(a, h, rs.r.ID, false, pspError(&psp.Error{Class: psp.Unknown, Op: "refund", Err: err}))
	}
	if settled.Status == RefundRequiresReview {
		rs.s.log.WarnContext(a.client, "PSP answer does not match the refund", rs.s.hash.Attr(a.ref), "refund_id", rs.r.ID, "reason", settled.ReviewReason)
	}
	return rs.write(a, h, settled)
}

func (rs refundSubject) write(a attempt, h holding, r Refund) (Outcome, error) {
	// updated_at, rendered in the answer and stored with it, on the database's clock.
	r.UpdatedAt = rs.dbAt.Add(rs.s.cfg.Now().Sub(rs.localAt)).UTC().Truncate(time.Microsecond)
	if r.UpdatedAt.Before(r.CreatedAt) {
		r.UpdatedAt = r.CreatedAt
	}
	resp := RenderRefund(r)
	return rs.s.write(a, h, r.ID, string(r.Status), resp, func(ctx context.Context) error {
		return rs.s.store.SettleRefund(ctx, a.ref, h.token, r, resp)
	}, func() {
		if r.Status != RefundPending {
			rs.s.obs.RefundRecorded(r.Status)
		}
	})
}

// Refund returns one of the merchant's refunds; errs.CodeNotFound otherwise.
func (s *Service) Refund(ctx context.Context, merchantID, id string) (Refund, error) {
	r, err := s.store.Refund(ctx, merchantID, id)
	return r, notFound(err, "refund not found")
}
