package payments

import (
	"errors"
	"time"

	"gateway/idemkeys"
)

// What one transaction of a payment's or a refund's life writes is decided
// here, in the domain, and only persisted by the store: the row's new
// state; the event a change of status writes in the same transaction (the
// outbox, design §12: a change of status is an event, a look that leaves
// the status as it was is not); the answer a key replays from then on; and
// how a refund's move changes its payment's amounts. The store never
// renders an object nor decides an amount.

// PaymentChange is a payment's move to a new state.
type PaymentChange struct {
	// Payment is the payment as it is to be stored.
	Payment Payment
	// Event is the outbox event of its change of status; nil when the
	// status stays.
	Event *Event
	// Key and Answer: the key whose answer reports the payment's outcome,
	// and the answer it completes with (a settle) or replays from now on (a
	// resolution); no Answer leaves the key's answer alone.
	Key    idemkeys.Ref
	Answer *idemkeys.Response
	// From, when set, is the status the change moves the payment from:
	// the store writes it only if the payment is still there (an
	// operation's settle, which something else may have overtaken).
	From Status
	// Reopen says the payment, recorded as having taken nothing, now holds
	// money (a PSP contradicted it, an operator corrected it): a
	// cancellation by key of it that ended is carried out again.
	Reopen bool
}

// paymentChange is the change from before to after: the event when the
// status moved, and the answer the outcome key gives from now on.
func paymentChange(before, after Payment) PaymentChange {
	c := PaymentChange{Payment: after, Key: OutcomeKey(after)}
	if after.Status != before.Status {
		e := PaymentEvent(after)
		c.Event = &e
	}
	resp := Render(after)
	c.Answer = &resp
	tookNothing := func(s Status) bool { return s == Declined || s == Failed || s == Canceled }
	c.Reopen = tookNothing(before.Status) && !tookNothing(after.Status)
	return c
}

// PaymentSettled is the change that settles a payment under its key's
// lease: out of processing, where every payment under a lease is, into p's
// state, its key completing with p's answer.
func PaymentSettled(p Payment) PaymentChange {
	return paymentChange(Payment{Status: Processing}, p)
}

// ChangePayment is the change a resolution makes: decide turns the payment
// locked at the database's time now into its new state, and the change
// carries its event and the answer its outcome key replays from then on.
// decide's errors stop the change; nothing is written.
func ChangePayment(decide func(Payment) (Payment, error)) func(before Payment, now time.Time) (PaymentChange, error) {
	return func(before Payment, now time.Time) (PaymentChange, error) {
		after, err := decide(before)
		if err != nil {
			return PaymentChange{}, err
		}
		after.UpdatedAt = now
		return paymentChange(before, after), nil
	}
}

// ErrExceedsPayment: a refund's change would reserve more of its payment
// than the payment's amount (other refunds hold the rest); nothing changed.
var ErrExceedsPayment = errors.New("the refund's payment cannot hold it: other refunds reserve the rest")

// RefundChange is a refund's move to a new state, with what it does to its
// payment's amounts.
type RefundChange struct {
	// Refund is the refund as it is to be stored.
	Refund Refund
	// Refunded and Reserved are added to its payment's amount_refunded and
	// amount_reserved (negative: taken back).
	Refunded, Reserved int64
	// Event is the outbox event of its change of status; nil when the
	// status stays.
	Event *Event
	// Key and Answer: the refund's key and the answer it completes with (a
	// settle) or replays from now on (a resolution); no Answer leaves it.
	Key    idemkeys.Ref
	Answer *idemkeys.Response
}

// refundChange is the change from before to after (before is the zero
// Refund for a refund being created). It is the one place that says how a
// refund moves its payment's amounts: a pending, succeeded or in-review
// refund holds its amount reserved on the payment, a failed one holds
// nothing; a succeeded one counts as refunded.
func refundChange(before, after Refund) RefundChange {
	c := RefundChange{
		Refund:   after,
		Refunded: refunded(after) - refunded(before),
		Reserved: reserved(after) - reserved(before),
		Key:      RefundKey(after),
	}
	if after.Status != before.Status {
		e := RefundEvent(after)
		c.Event = &e
	}
	return c
}

func refunded(r Refund) int64 {
	if r.Status == RefundSucceeded {
		return r.Amount.Minor
	}
	return 0
}

func reserved(r Refund) int64 {
	switch r.Status {
	case RefundPending, RefundSucceeded, RefundRequiresReview:
		return r.Amount.Minor
	}
	return 0
}

// RefundSettled is the change that settles a refund under its key's lease:
// out of pending, where every refund under a lease is, into r's state, its
// key completing with r's answer.
func RefundSettled(r Refund) RefundChange {
	pending := r
	pending.Status = RefundPending
	c := refundChange(pending, r)
	resp := RenderRefund(r)
	c.Answer = &resp
	return c
}

// ChangeRefund is the change a resolution makes: decide turns the refund
// locked at the database's time now into its new state; the change carries
// the payment's amounts, the event, and the answer its key replays from
// then on, as a payment's does: a refund the PSP finished later (202
// pending) or that left review replays what it is now. decide's errors stop
// the change.
func ChangeRefund(decide func(Refund) (Refund, error)) func(before Refund, now time.Time) (RefundChange, error) {
	return func(before Refund, now time.Time) (RefundChange, error) {
		after, err := decide(before)
		if err != nil {
			return RefundChange{}, err
		}
		after.UpdatedAt = now
		c := refundChange(before, after)
		resp := RenderRefund(after)
		c.Answer = &resp
		return c, nil
	}
}

// RefundRecorded is the change that records r, a refund the gateway did
// not make (the books found it at the PSP): it reserves r's amount on its
// payment, or refunds it for a succeeded r, with its event; no key answers.
func RefundRecorded(r Refund) RefundChange {
	c := refundChange(Refund{}, r)
	c.Key = idemkeys.Ref{}
	return c
}

// RefundKey names the idempotency key that created r.
func RefundKey(r Refund) idemkeys.Ref {
	return idemkeys.Ref{MerchantID: r.MerchantID, Endpoint: EndpointCreateRefund, Key: r.IdempotencyKey}
}
