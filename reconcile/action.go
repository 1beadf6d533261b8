package reconcile

import (
	"context"
	"errors"
	"fmt"

	"gateway/payments"
	"gateway/psp"
)

// recheckAction asks the PSP about a payment waiting for its customer (a
// 3-D Secure step, a deposit to a virtual account), as the review queue
// asks about one in review: a settled charge settles it, with a
// compare-and-set on its status and an audit row, and the confirm's key
// replays the settled payment from then on; a charge that does not match
// the payment sends it to review; anything else (still waiting, no answer)
// looks again later on a back-off. Nothing is guessed: a payment whose
// customer never comes back waits, looked at at the longest back-off, as
// the PSP's own charge does.
func (r *Reconciler) recheckAction(ctx context.Context, item payments.InReview) decision {
	pay := item.Payment
	ref := payments.OutcomeKey(pay)
	res := Result{PaymentID: pay.ID, MerchantID: pay.MerchantID, Key: r.hash.Key(ref), Attempts: pay.Review.Attempts,
		Age: item.DBNow.Sub(pay.CreatedAt)}
	adapter, ok := r.psps.For(pay.PSP)
	if !ok {
		res.Outcome, res.Detail = Unconfigured, fmt.Sprintf("PSP %q is not configured on this replica", pay.PSP)
		return r.reviewLater(ref, item, res, payments.Reschedule{After: jitter(r.cfg.ActionBackoffMax), Attempts: pay.Review.Attempts})
	}
	lctx, cancel := context.WithTimeout(ctx, r.cfg.PSPTimeout)
	charge, err := adapter.Lookup(lctx, pay.MerchantOrderID)
	cancel()
	why := ""
	switch {
	case err == nil:
		settled, err := payments.ApplyCharge(pay, charge)
		switch {
		case errors.Is(err, payments.ErrChargePending):
			why = "the PSP still waits for the customer"
		case err != nil:
			why = err.Error()
		default:
			res.Outcome = outcomeOf(settled.Status)
			detail := fmt.Sprintf("the PSP reported charge %s %s", charge.Reference, charge.Status)
			if settled.Status == payments.RequiresReview {
				detail = settled.ReviewReason
			}
			return r.resolve(ref, item, settled, res, detail)
		}
	case errors.Is(err, psp.ErrNotFound):
		// It held the charge when the payment started waiting: a lookup
		// that misses it now proves nothing either way.
		why = "the PSP's lookup does not find the charge it held"
	default:
		why = err.Error()
	}
	res.Outcome, res.Detail, res.Attempts = AwaitingCustomer, why, pay.Review.Attempts+1
	d := jitter(backoff(r.cfg.ActionBackoffBase, r.cfg.ActionBackoffMax, res.Attempts))
	return r.reviewLater(ref, item, res, payments.Reschedule{After: d, Attempts: res.Attempts})
}

// expire cancels the payments nobody confirmed before their expiry, then
// records the authorizations nobody captured before theirs, in batches,
// until none is left.
func (r *Reconciler) expire(ctx context.Context) ([]Result, error) {
	out, err := r.expireUnconfirmed(ctx)
	if err != nil {
		return out, err
	}
	for len(out) < 2*maxPerPass && ctx.Err() == nil {
		ps, err := r.store.ExpireAuthorizations(ctx, r.cfg.BatchSize, payments.AuthorizationExpired)
		if err != nil {
			return out, err
		}
		for _, p := range ps {
			res := Result{PaymentID: p.ID, MerchantID: p.MerchantID, Key: r.hash.Key(payments.OutcomeKey(p)),
				Outcome: Canceled, Detail: "authorization_expired: not captured before its capture_before"}
			out = append(out, r.logged(payments.OutcomeKey(p), 0, res))
		}
		if len(ps) < r.cfg.BatchSize {
			return out, nil
		}
	}
	return out, ctx.Err()
}

// expireUnconfirmed cancels the payments nobody confirmed before their
// expiry, in batches, until none is left.
func (r *Reconciler) expireUnconfirmed(ctx context.Context) ([]Result, error) {
	var out []Result
	for len(out) < maxPerPass && ctx.Err() == nil {
		ps, err := r.store.ExpireUnconfirmed(ctx, r.cfg.BatchSize, payments.Expired)
		if err != nil {
			return out, err
		}
		for _, p := range ps {
			res := Result{PaymentID: p.ID, MerchantID: p.MerchantID, Key: r.hash.Key(payments.OutcomeKey(p)),
				Outcome: Canceled, Age: p.ExpiresAt.Sub(p.CreatedAt), Detail: "not confirmed before " + p.ExpiresAt.UTC().Format("2006-01-02T15:04:05Z")}
			out = append(out, r.logged(payments.OutcomeKey(p), 0, res))
		}
		if len(ps) < r.cfg.BatchSize {
			return out, nil
		}
	}
	return out, ctx.Err()
}

// cancellations carries out the cancellations by key that are due, in
// batches, each on the flow (a void or a refund with its derived key), and
// gives those that must wait their next look on the lease's back-off.
func (r *Reconciler) cancellations(ctx context.Context) ([]Result, error) {
	if r.cfg.Canceler == nil {
		return nil, nil
	}
	var out []Result
	for len(out) < maxPerPass && ctx.Err() == nil {
		kcs, err := r.store.ClaimCancellations(ctx, r.cfg.Lease, r.cfg.BatchSize)
		if err != nil {
			return out, err
		}
		for _, kc := range kcs {
			res := Result{PaymentID: kc.PaymentID, MerchantID: kc.MerchantID, Key: r.hash.Key(kc.Target()), Outcome: Deferred,
				Detail: "cancellation by key: the payment's outcome is not known yet"}
			_, done, err := r.cfg.Canceler.FinishCancellation(ctx, kc)
			switch {
			case err != nil:
				res.Outcome, res.Detail = DatabaseError, err.Error()
			case done:
				res.Outcome, res.Detail = Canceled, "cancellation by key carried out"
			}
			out = append(out, r.logged(kc.Target(), 0, res))
		}
		if len(kcs) < r.cfg.BatchSize {
			return out, nil
		}
	}
	return out, ctx.Err()
}
