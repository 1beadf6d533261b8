package reconcile

import (
	"context"
	"errors"

	"gateway/idemkeys"
	"gateway/payments"
	"gateway/psp"
)

// operationSubject is an unfinished capture or void of pay (design §15):
// looked up by reading the payment's charge at its PSP, whose state says
// whether the operation happened (payments.ApplyOperation); when it has
// not, the same proof as a charge's settles it failed (the operation
// dropped, the payment as it was), and review when nothing can be learned.
func (r *Reconciler) operationSubject(key idemkeys.Record, pay payments.Payment, kind payments.Kind) subject {
	op := payments.OpCapture
	if kind == payments.KindVoid {
		op = payments.OpVoid
	}
	write := func(after payments.Payment, refused bool) func(context.Context) error {
		return func(ctx context.Context) error {
			if pay.Operation == nil || pay.Operation.Key != key.Ref.Key {
				// Settled by other means: nothing of this key is in flight.
				return idemkeys.ErrFenced
			}
			return r.store.SettleOperation(ctx, key.Ref, key.Token, payments.OperationSettled(op, pay, after, refused))
		}
	}
	dropped := pay
	dropped.Operation = nil
	return subject{
		id:  pay.ID,
		psp: pay.PSP,
		lookup: func(ctx context.Context, a psp.Adapter) (func(context.Context) error, Outcome, string, bool, error) {
			c, err := a.Lookup(ctx, pay.MerchantOrderID)
			if err != nil {
				return nil, "", "", false, err
			}
			settled, err := payments.ApplyOperation(pay, c)
			switch {
			case errors.Is(err, payments.ErrOperationPending):
				// The operation is not at the PSP (yet): as a charge not found.
				return nil, "", "", false, psp.ErrNotFound
			case err != nil:
				return nil, "", "", false, err
			}
			return write(settled, false), outcomeOf(settled.Status), settled.ReviewReason, false, nil
		},
		fail: write(dropped, true),
		review: func(why string) func(context.Context) error {
			reviewed := dropped
			reviewed.Status, reviewed.ReviewReason = payments.RequiresReview, why
			return write(reviewed, false)
		},
	}
}
