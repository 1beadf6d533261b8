package reconcile

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"gateway/idemkeys"
	"gateway/payments"
	"gateway/psp"
	"gateway/routing"
)

// Earlier attempts (design §16): each ended "not processed" and its
// payment went on at another account. Once its creation window has passed
// the attempt is looked up at its own account: absent is recorded; a
// charge there is a PSP that answered "not processed" and charged anyway.
// When another attempt of the payment charged too, the extra charge is
// given back at its account (refunded, or voided if only authorized, with
// an order id derived from the attempt's, so a repeat moves nothing more);
// either way the payment goes to requires_review with the evidence, and
// ExtraCharge counts it for the alert.

// AttemptChecks counts what a pass's checks of earlier attempts found.
type AttemptChecks struct {
	Absent   int `json:"absent"`
	Returned int `json:"extra_returned"`
	Charged  int `json:"charged"`
	Later    int `json:"later"`
}

// attemptActor is the audit rows' actor of the review an extra charge starts.
const attemptActor = "reconciler (attempt check)"

// ExtraReturnOrderID is the order id of the refund (or void) that gives
// back the extra charge of the attempt whose order id is orderID.
func ExtraReturnOrderID(orderID string) string {
	sum := sha256.Sum256([]byte("extra charge of " + orderID))
	return "ret_" + hex.EncodeToString(sum[:12])
}

// checkAttempts checks every earlier attempt due, batch by batch.
func (r *Reconciler) checkAttempts(ctx context.Context) (AttemptChecks, error) {
	var sum AttemptChecks
	for n := 0; n < maxPerPass; {
		due, err := r.store.ClaimAttemptChecks(ctx, r.cfg.Lease, r.cfg.BatchSize)
		if err != nil || len(due) == 0 {
			return sum, err
		}
		n += len(due)
		for _, c := range due {
			if err := r.checkAttempt(ctx, c, &sum); err != nil && !errors.Is(err, idemkeys.ErrFenced) {
				r.log.WarnContext(ctx, "attempt check", "payment_id", c.PaymentID, "attempt", c.Attempt.Number, "err", err)
			}
		}
	}
	return sum, nil
}

// checkAttempt looks one attempt up at its account and records what it found.
func (r *Reconciler) checkAttempt(ctx context.Context, c payments.AttemptCheck, sum *AttemptChecks) error {
	later := func(at time.Time) error {
		sum.Later++
		return r.store.RecordAttemptCheck(ctx, c, at)
	}
	again := func() error {
		c.Checks++
		return later(c.DBNow.Add(jitter(backoff(r.cfg.BackoffBase, r.cfg.BackoffMax, c.Checks))))
	}
	adapter, ok := r.psps.For(c.Attempt.PSP)
	if !ok {
		return later(c.DBNow.Add(r.cfg.BackoffMax))
	}
	caps := adapter.Capabilities()
	if due := c.Attempt.EndedAt.Add(caps.CreationWindow); c.DBNow.Before(due) {
		return later(due)
	}
	lctx, cancel := context.WithTimeout(ctx, r.cfg.PSPTimeout)
	ch, err := adapter.Lookup(lctx, c.Attempt.MerchantOrderID)
	cancel()
	switch {
	case errors.Is(err, psp.ErrNotFound) && caps.AuthoritativeLookup:
		c.Attempt.Outcome = routing.AttemptAbsent
		sum.Absent++
		return r.store.RecordAttemptCheck(ctx, c, time.Time{})
	case err != nil:
		return again()
	case ch.Status == psp.Declined || ch.Status == psp.Voided:
		// Held, but no money moved.
		c.Attempt.Outcome, c.Attempt.PSPReference = routing.AttemptAbsent, ch.Reference
		sum.Absent++
		return r.store.RecordAttemptCheck(ctx, c, time.Time{})
	case ch.Status == psp.Pending || c.Payment.Status == payments.Processing || c.Payment.Operation != nil:
		// The charge may still move, or the payment's own attempt or
		// operation is still in flight: look again later.
		return again()
	}
	elsewhere, known := chargedElsewhere(c.Payment)
	if !known {
		// The payment's own attempt is still unsettled (in review without
		// a charge it knows): which charge is the extra one is not known yet.
		return again()
	}
	c.Attempt.PSPReference = ch.Reference
	if !elsewhere {
		c.Attempt.Outcome = routing.AttemptCharged
		why := fmt.Sprintf("attempt %d at %s answered not processed, yet %s holds charge %s (%s, %d %s) under order id %s; no other attempt charged",
			c.Attempt.Number, c.Attempt.PSP, c.Attempt.PSP, ch.Reference, ch.Status, ch.Amount, ch.Currency, c.Attempt.MerchantOrderID)
		// The payment's own reference stays as it is: a later check must
		// not read the first account's charge as the payment's (it would
		// refund it as extra). The review and the finding are one write.
		c.Attempt.Outcome = routing.AttemptCharged
		if err := r.store.ReviewAttempt(ctx, c, time.Time{}, reviewOf(why), r.resolution(c.Payment, why)); err != nil {
			return err
		}
		r.cfg.Observer.ExtraCharge(c.Attempt.PSP, false)
		r.log.ErrorContext(ctx, "an attempt that answered not processed was charged: payment sent to requires_review", "payment_id", c.PaymentID, "attempt", c.Attempt.Number, "account", c.Attempt.PSP)
		sum.Charged++
		return nil
	}
	// Another attempt charged: this charge is extra. Give it back.
	first := c.Attempt.Outcome != routing.AttemptExtraCharge
	returned, detail, err := r.giveBack(ctx, adapter, c, ch)
	next := time.Time{}
	c.Attempt.Outcome = routing.AttemptExtraReturned
	if !returned {
		if err != nil {
			r.log.WarnContext(ctx, "giving back an extra charge", "payment_id", c.PaymentID, "attempt", c.Attempt.Number, "err", err)
		}
		c.Checks++
		c.Attempt.Outcome, next = routing.AttemptExtraCharge, c.DBNow.Add(jitter(backoff(r.cfg.BackoffBase, r.cfg.BackoffMax, c.Checks)))
		sum.Later++
	} else {
		sum.Returned++
	}
	why := fmt.Sprintf("attempt %d at %s answered not processed, yet %s charged it (%s, %d %s, order id %s) while attempt %d charged at %s: the extra charge is given back there (%s)",
		c.Attempt.Number, c.Attempt.PSP, c.Attempt.PSP, ch.Reference, ch.Amount, ch.Currency, c.Attempt.MerchantOrderID,
		c.Payment.AttemptNumber(), c.Payment.PSP, detail)
	if err := r.store.ReviewAttempt(ctx, c, next, reviewOf(why), r.resolution(c.Payment, why)); err != nil {
		return err
	}
	if first {
		r.cfg.Observer.ExtraCharge(c.Attempt.PSP, returned)
		r.log.ErrorContext(ctx, "an attempt that answered not processed was charged as well: the extra charge is given back, payment sent to requires_review",
			"payment_id", c.PaymentID, "attempt", c.Attempt.Number, "account", c.Attempt.PSP, "returned", returned)
	}
	return nil
}

// chargedElsewhere reports whether p's own attempt holds its money (or
// did), so that another attempt's charge is extra and is given back: a
// payment succeeded, authorized, in review with its charge known, or
// canceled (its merchant wants none of the money). known is false while
// that cannot be told yet (in review without a charge it knows).
func chargedElsewhere(p payments.Payment) (elsewhere, known bool) {
	switch p.Status {
	case payments.Succeeded, payments.RequiresCapture, payments.Canceled:
		return true, true
	case payments.RequiresReview:
		return p.PSPReference != "", p.PSPReference != ""
	case payments.Failed, payments.Declined:
		return false, true
	}
	return false, false
}

// giveBack refunds the extra charge ch at its account, or voids it when
// only authorized; returned says the money is back (or released).
func (r *Reconciler) giveBack(ctx context.Context, adapter psp.Adapter, c payments.AttemptCheck, ch psp.Charge) (returned bool, detail string, err error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.PSPTimeout)
	defer cancel()
	order := ExtraReturnOrderID(c.Attempt.MerchantOrderID)
	if ch.Status == psp.Authorized {
		capt, ok := adapter.(psp.Capturer)
		if !ok {
			return false, "its account cannot void", errors.New("an authorization at an account that cannot void")
		}
		v, err := capt.Void(ctx, psp.VoidRequest{OrderID: order, MerchantOrderID: c.Attempt.MerchantOrderID, ChargeReference: ch.Reference, Reason: "duplicate"})
		if err != nil {
			return false, "void " + order + " pending", err
		}
		return v.Status == psp.Voided, "void " + order, nil
	}
	amount := ch.Amount
	if ch.AmountCaptured > 0 {
		amount = ch.AmountCaptured
	}
	rf, err := adapter.Refund(ctx, psp.RefundRequest{RefundOrderID: order, MerchantOrderID: c.Attempt.MerchantOrderID,
		ChargeReference: ch.Reference, Amount: amount, Currency: ch.Currency, Reason: "duplicate"})
	if err != nil {
		return false, "refund " + order + " pending", err
	}
	return rf.Status == psp.RefundSucceeded, fmt.Sprintf("refund %s of %d %s: %s", order, amount, ch.Currency, rf.Status), nil
}

// reviewOf is the change that sends a payment to requires_review with why;
// idemkeys.ErrFenced (nothing to change) when it is there already.
func reviewOf(why string) func(payments.Payment, time.Time) (payments.PaymentChange, error) {
	why = truncate(why, 500)
	return payments.ChangePayment(func(now payments.Payment) (payments.Payment, error) {
		if now.Status == payments.RequiresReview {
			return now, idemkeys.ErrFenced
		}
		now.Status, now.ReviewReason = payments.RequiresReview, why
		return now, nil
	})
}

// resolution is the audit row of the review an attempt check starts.
func (r *Reconciler) resolution(p payments.Payment, why string) payments.Resolution {
	return payments.Resolution{PaymentID: p.ID, To: payments.RequiresReview, Reason: truncate(why, 500), Actor: attemptActor}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
