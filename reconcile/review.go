package reconcile

import (
	"context"
	"errors"
	"fmt"

	"gateway/idemkeys"
	"gateway/payments"
	"gateway/psp"
	"gateway/routing"
)

// reviewActor is how the review queue signs the decisions it records.
const reviewActor = "reconciler"

// reexamine asks a payment in review's PSP again. An authoritative answer
// settles it (with an audit row, as a person's decision would be); anything
// less pushes its next look out on a long back-off. The proof a "failed"
// needs is the unfinished key's: two authoritative "not found" answers a
// creation window apart, the first at least a creation window after the
// payment entered review (no charge was being sent by then).
func (r *Reconciler) reexamine(ctx context.Context, item payments.InReview) decision {
	pay := item.Payment
	res := Result{PaymentID: pay.ID, MerchantID: pay.MerchantID, InReview: true,
		Attempts: pay.Review.Attempts, Age: item.DBNow.Sub(pay.CreatedAt)}
	ref := payments.OutcomeKey(pay)
	for _, a := range pay.Attempts {
		if a.Outcome == routing.AttemptCharged || a.Outcome == routing.AttemptExtraCharge {
			// An earlier attempt's account holds money the current
			// attempt's answer says nothing of (design §16): only a person
			// settles it.
			res.Outcome, res.Detail = StillInReview, fmt.Sprintf("attempt %d at %s holds a charge (%s): a person decides", a.Number, a.PSP, a.Outcome)
			return r.reviewLater(ref, item, res, payments.Reschedule{After: jitter(r.cfg.ReviewBackoffMax), Attempts: pay.Review.Attempts})
		}
	}
	adapter, ok := r.psps.For(pay.PSP)
	if !ok {
		res.Outcome, res.Detail = Unconfigured, fmt.Sprintf("PSP %q is not configured on this replica", pay.PSP)
		return r.reviewLater(ref, item, res, payments.Reschedule{After: jitter(r.cfg.ReviewBackoffMax), Attempts: pay.Review.Attempts})
	}
	lctx, cancel := context.WithTimeout(ctx, r.cfg.PSPTimeout)
	charge, err := adapter.Lookup(lctx, pay.MerchantOrderID)
	cancel()
	window := adapter.Capabilities().CreationWindow
	switch {
	case err == nil:
		settled, err := payments.ApplyCharge(pay, charge)
		switch {
		case err != nil:
			return r.stillInReview(ref, item, res, err.Error())
		case settled.Status == payments.RequiresReview:
			return r.stillInReview(ref, item, res, settled.ReviewReason)
		}
		res.Outcome = outcomeOf(settled.Status)
		return r.resolve(ref, item, settled, res, fmt.Sprintf("the PSP reported charge %s %s", charge.Reference, charge.Status))
	case errors.Is(err, psp.ErrNotFound) && adapter.Capabilities().AuthoritativeLookup:
		since, first := pay.Review.Since, pay.Review.NotFoundAt
		switch {
		case since.IsZero():
			return r.stillInReview(ref, item, res, "no record of when the payment entered review")
		case item.DBNow.Before(since.Add(window)):
			res.Outcome, res.Detail = StillInReview, "not at the PSP; too soon after review to count"
			return r.reviewLater(ref, item, res, payments.Reschedule{NotBefore: since.Add(window), Attempts: pay.Review.Attempts})
		case first.IsZero():
			res.Outcome, res.Detail = StillInReview, "first authoritative not-found; confirmed after the creation window"
			return r.reviewLater(ref, item, res, payments.Reschedule{After: window, Attempts: pay.Review.Attempts, NotFound: true})
		case item.DBNow.Before(first.Add(window)):
			res.Outcome, res.Detail = StillInReview, "second not-found not due yet"
			return r.reviewLater(ref, item, res, payments.Reschedule{NotBefore: first.Add(window), Attempts: pay.Review.Attempts})
		}
		pay.Status, pay.DeclineCode, pay.ReviewReason = payments.Failed, payments.DeclineNotProcessed, ""
		res.Outcome = Failed
		return r.resolve(ref, item, pay, res, "the PSP has no charge, twice a creation window apart")
	case errors.Is(err, psp.ErrNotFound):
		return r.stillInReview(ref, item, res, "not found, but the PSP's lookup is not authoritative")
	}
	return r.stillInReview(ref, item, res, err.Error())
}

func (r *Reconciler) stillInReview(ref idemkeys.Ref, item payments.InReview, res Result, why string) decision {
	res.Outcome, res.Detail, res.Attempts = StillInReview, why, item.Payment.Review.Attempts+1
	d := jitter(backoff(r.cfg.ReviewBackoffBase, r.cfg.ReviewBackoffMax, res.Attempts))
	return r.reviewLater(ref, item, res, payments.Reschedule{After: d, Attempts: res.Attempts})
}

func (r *Reconciler) reviewLater(ref idemkeys.Ref, item payments.InReview, res Result, rs payments.Reschedule) decision {
	return func(ctx context.Context) Result {
		err := r.store.RescheduleReview(ctx, item.Payment, rs)
		return r.logged(ref, 0, r.outcome(res, err))
	}
}

// resolve records the decision of a look at a payment in review (or waiting
// for its customer) the way a person's is recorded: under the payment's row
// lock, only if nobody (a person, another reconciler, the PSP's
// notification) moved the payment since this look claimed it, with an audit
// row; the key that answered with the payment's outcome replays the new one.
func (r *Reconciler) resolve(ref idemkeys.Ref, item payments.InReview, settled payments.Payment, res Result, why string) decision {
	from := item.Payment.Status
	reason := "settled from review: " + why
	if from == payments.RequiresAction {
		reason = "settled after waiting for the customer: " + why
	}
	res.Detail = why
	return func(ctx context.Context) Result {
		_, err := r.store.Resolve(ctx, settled.ID, payments.ChangePayment(func(now payments.Payment) (payments.Payment, error) {
			if now.Status != from || !now.Review.After.Equal(item.Payment.Review.After) || now.Operation != nil {
				return now, idemkeys.ErrFenced
			}
			return settled, nil
		}), payments.Resolution{PaymentID: settled.ID, To: settled.Status, PSPReference: settled.PSPReference,
			Reason: reason, Actor: reviewActor})
		return r.logged(ref, 0, r.outcome(res, err))
	}
}
