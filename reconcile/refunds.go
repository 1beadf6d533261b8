package reconcile

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gateway/idemkeys"
	"gateway/payments"
	"gateway/psp"
)

// refundSubject is an unfinished refund key's refund, as the reconciler
// settles it: asked about at its payment's PSP, by its refund order id.
func (r *Reconciler) refundSubject(key idemkeys.Record, pay payments.Payment, ref payments.Refund) subject {
	write := func(x payments.Refund) func(context.Context) error {
		// updated_at on the database's clock, as the claim read it.
		x.UpdatedAt = key.DBNow.UTC().Truncate(time.Microsecond)
		return func(ctx context.Context) error {
			return r.store.SettleRefund(ctx, key.Ref, key.Token, payments.RefundSettled(x))
		}
	}
	return subject{
		id:  ref.ID,
		psp: ref.PSP,
		lookup: func(ctx context.Context, a psp.Adapter) (func(context.Context) error, Outcome, string, bool, error) {
			x, err := a.LookupRefund(ctx, pay.PSPReference, ref.RefundOrderID)
			if err != nil {
				return nil, "", "", false, err
			}
			settled, err := payments.ApplyRefund(ref, x)
			if err != nil {
				return nil, "", "", false, err
			}
			// A refund the PSP holds pending is settled as such: its key
			// completes, and the refund queue follows it from there.
			return write(settled), refundOutcome(settled.Status), settled.ReviewReason, false, nil
		},
		fail: func(ctx context.Context) error {
			failed := ref
			failed.Status, failed.FailureCode = payments.RefundFailed, payments.RefundFailedNotProcessed
			return write(failed)(ctx)
		},
		review: func(why string) func(context.Context) error {
			reviewed := ref
			reviewed.Status, reviewed.ReviewReason = payments.RefundRequiresReview, why
			return write(reviewed)
		},
	}
}

func refundOutcome(s payments.RefundStatus) Outcome {
	switch s {
	case payments.RefundSucceeded:
		return Succeeded
	case payments.RefundFailed:
		return Failed
	case payments.RefundPending:
		return Deferred
	}
	return Review
}

func (r *Reconciler) claimRefundChecks(ctx context.Context, batch int, work chan<- job) error {
	claimed := 0
	for claimed < maxPerPass && ctx.Err() == nil {
		items, err := r.store.ClaimRefundChecks(ctx, r.cfg.Lease, batch)
		if err != nil || len(items) == 0 {
			return err
		}
		claimed += len(items)
		for i := range items {
			work <- job{refund: &items[i]}
		}
	}
	return ctx.Err()
}

// recheckRefund asks the PSP again about a refund it holds pending, or one
// in review. An authoritative answer settles it (with an audit row); a
// refund in review fails only with the payments' proof (two authoritative
// "not found" a creation window apart, the first a creation window after it
// entered review); anything less pushes the next look out on a back-off. A
// pending refund whose PSP stops answering goes to review after the attempts.
func (r *Reconciler) recheckRefund(ctx context.Context, item payments.RefundCheck) decision {
	ref, pay := item.Refund, item.Payment
	res := Result{PaymentID: pay.ID, RefundID: ref.ID, MerchantID: ref.MerchantID, InReview: ref.Status == payments.RefundRequiresReview,
		Attempts: ref.Review.Attempts, Age: item.DBNow.Sub(ref.CreatedAt)}
	key := idemkeys.Ref{MerchantID: ref.MerchantID, Endpoint: payments.EndpointCreateRefund, Key: ref.IdempotencyKey}
	if item.Unreadable != "" {
		// Set aside by the claim; an operator reads the row.
		res.PaymentID, res.Outcome, res.Detail = ref.PaymentID, Quarantined, item.Unreadable
		return func(context.Context) Result { return r.logged(key, 0, res) }
	}
	adapter, ok := r.psps.For(ref.PSP)
	if !ok {
		res.Outcome, res.Detail = Unconfigured, fmt.Sprintf("PSP %q is not configured on this replica", ref.PSP)
		return r.refundLater(key, item, res, payments.Reschedule{After: jitter(r.cfg.ReviewBackoffMax), Attempts: ref.Review.Attempts})
	}
	lctx, cancel := context.WithTimeout(ctx, r.cfg.PSPTimeout)
	x, err := adapter.LookupRefund(lctx, pay.PSPReference, ref.RefundOrderID)
	cancel()
	window := adapter.Capabilities().CreationWindow
	switch {
	case err == nil:
		settled, err := payments.ApplyRefund(ref, x)
		switch {
		case err != nil:
			return r.refundNotYet(key, item, res, err.Error())
		case settled.Status == ref.Status:
			// Still pending at the PSP (or the same contradiction as before).
			res.Outcome, res.Detail = StillInReview, "the PSP still holds it "+string(x.Status)
			if ref.Status == payments.RefundPending {
				res.Outcome = Deferred
				return r.refundLater(key, item, res, payments.Reschedule{
					After: jitter(backoff(payments.RefundFirstCheck, r.cfg.ReviewBackoffMax, ref.Review.Attempts+1)), Attempts: ref.Review.Attempts + 1})
			}
			return r.refundNotYet(key, item, res, settled.ReviewReason)
		}
		res.Outcome = refundOutcome(settled.Status)
		return r.resolveRefund(key, item, settled, res, fmt.Sprintf("the PSP reported refund %s %s", x.Reference, x.Status))
	case errors.Is(err, psp.ErrNotFound) && adapter.Capabilities().AuthoritativeLookup && ref.Status == payments.RefundRequiresReview:
		since, first := ref.Review.Since, ref.Review.NotFoundAt
		switch {
		case since.IsZero():
			return r.refundNotYet(key, item, res, "no record of when the refund entered review")
		case item.DBNow.Before(since.Add(window)):
			res.Outcome, res.Detail = StillInReview, "not at the PSP; too soon after review to count"
			return r.refundLater(key, item, res, payments.Reschedule{NotBefore: since.Add(window), Attempts: ref.Review.Attempts})
		case first.IsZero():
			res.Outcome, res.Detail = StillInReview, "first authoritative not-found; confirmed after the creation window"
			return r.refundLater(key, item, res, payments.Reschedule{After: window, Attempts: ref.Review.Attempts, NotFound: true})
		case item.DBNow.Before(first.Add(window)):
			res.Outcome, res.Detail = StillInReview, "second not-found not due yet"
			return r.refundLater(key, item, res, payments.Reschedule{NotBefore: first.Add(window), Attempts: ref.Review.Attempts})
		}
		failed := ref
		failed.Status, failed.FailureCode, failed.ReviewReason = payments.RefundFailed, payments.RefundFailedNotProcessed, ""
		res.Outcome = Failed
		return r.resolveRefund(key, item, failed, res, "the PSP has no such refund, twice a creation window apart")
	case errors.Is(err, psp.ErrNotFound):
		return r.refundNotYet(key, item, res, "not found at the PSP, which accepted it")
	}
	return r.refundNotYet(key, item, res, err.Error())
}

// refundNotYet counts a look that learned nothing. A pending refund whose
// attempts are spent goes to review (its amount stays reserved).
func (r *Reconciler) refundNotYet(key idemkeys.Ref, item payments.RefundCheck, res Result, why string) decision {
	ref := item.Refund
	res.Attempts, res.Detail = ref.Review.Attempts+1, why
	if ref.Status == payments.RefundPending && res.Attempts >= r.cfg.MaxAttempts {
		reviewed := ref
		reviewed.Status, reviewed.ReviewReason = payments.RefundRequiresReview, fmt.Sprintf("pending at the PSP and %d lookups learned nothing; the last: %s", res.Attempts, why)
		res.Outcome = Review
		return r.resolveRefund(key, item, reviewed, res, reviewed.ReviewReason)
	}
	res.Outcome = StillInReview
	if ref.Status == payments.RefundPending {
		res.Outcome = Retrying
	}
	d := jitter(backoff(r.cfg.ReviewBackoffBase, r.cfg.ReviewBackoffMax, res.Attempts))
	return r.refundLater(key, item, res, payments.Reschedule{After: d, Attempts: res.Attempts})
}

func (r *Reconciler) refundLater(key idemkeys.Ref, item payments.RefundCheck, res Result, rs payments.Reschedule) decision {
	return func(ctx context.Context) Result {
		err := r.store.RescheduleRefundCheck(ctx, item.Refund, rs)
		return r.logged(key, 0, r.outcome(res, err))
	}
}

// resolveRefund records the refund queue's decision under the refund's and
// its payment's row locks, only if nobody moved the refund since this look
// claimed it, with an audit row.
func (r *Reconciler) resolveRefund(key idemkeys.Ref, item payments.RefundCheck, settled payments.Refund, res Result, why string) decision {
	res.Detail = why
	return func(ctx context.Context) Result {
		_, err := r.store.ResolveRefund(ctx, settled.ID, payments.ChangeRefund(func(now payments.Refund) (payments.Refund, error) {
			if now.Status != item.Refund.Status || !now.Review.After.Equal(item.Refund.Review.After) {
				return now, idemkeys.ErrFenced
			}
			return settled, nil
		}), payments.Resolution{To: payments.Status(settled.Status), PSPReference: settled.PSPReference,
			Reason: "settled by the refund queue: " + why, Actor: reviewActor})
		return r.logged(key, 0, r.outcome(res, err))
	}
}
