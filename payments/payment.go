// Package payments is the domain root: payments, their statuses, money,
// merchants and API keys, the error codes every layer speaks, and the
// payment service that runs the idempotent charge flow. It imports no HTTP
// framework and no database driver; storage and PSPs are reached through the
// interfaces declared here and in package psp.
package payments

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"gateway/psp"
)

// Status is where a payment is in its life.
type Status string

const (
	// Processing: claimed; the PSP outcome is not yet known.
	Processing Status = "processing"
	// Succeeded: the PSP charged the customer.
	Succeeded Status = "succeeded"
	// Declined: the PSP refused the charge; a business answer, stored and replayed.
	Declined Status = "declined"
	// Failed: the charge never happened and never will (settled by the reconciler).
	Failed Status = "failed"
	// RequiresReview: nobody could find out what happened; ops must decide.
	RequiresReview Status = "requires_review"
)

// Final reports whether the status can no longer change without ops.
func (s Status) Final() bool {
	return s == Succeeded || s == Declined || s == Failed
}

// Money is an amount in the minor units of an ISO 4217 currency (cents for
// USD, won for KRW). Never a float.
type Money struct {
	Minor    int64
	Currency string
}

// Payment is one payment intent.
type Payment struct {
	ID              string
	MerchantID      string
	IdempotencyKey  string
	MerchantOrderID string
	Status          Status
	Amount          Money
	PaymentMethod   string
	Description     string
	Metadata        map[string]string
	PSPReference    string
	DeclineCode     string
	// PSPCode is the PSP's own raw code for a decline or refusal, verbatim.
	PSPCode string
	// PSP names the adapter (and account) the payment was sent to; its
	// lookups go there and nowhere else. Empty for payments older than the
	// record: no PSP can be known to be theirs.
	PSP string
	// AmountRefunded is what succeeded refunds gave back; AmountReserved is
	// what its pending, succeeded and in-review refunds hold together, never
	// more than Amount.
	AmountRefunded int64
	AmountReserved int64
	// ReviewReason says why the payment needs a person (requires_review).
	ReviewReason string
	// Review is the review queue's schedule of a payment in requires_review.
	Review    Review
	CreatedAt time.Time
	UpdatedAt time.Time
}

// MerchantOrderID derives the order id the PSP sees from the merchant and the
// idempotency key. Being a pure function of the key, every retry, takeover and
// reconciliation of one intent sends the same order id, which the PSP
// deduplicates on; the merchant is mixed in so that two merchants using the
// same key never collide at the PSP.
func MerchantOrderID(merchantID, key string) string {
	sum := sha256.Sum256([]byte(merchantID + "\x00" + key))
	return "ord_" + hex.EncodeToString(sum[:12])
}

// Review is where a payment in requires_review is in the review queue,
// which keeps asking the PSP on a long back-off. Times are the database's.
type Review struct {
	// Since is when the payment entered review.
	Since time.Time
	// After is when the queue looks at it next (or, while a reconciler looks,
	// the end of that look's claim).
	After time.Time
	// Attempts counts the looks that learned nothing.
	Attempts int
	// NotFoundAt is the first authoritative "no such charge" in review.
	NotFoundAt time.Time
}

// ErrChargePending: the PSP accepted the charge and waits for the customer
// or for itself (a deposit, 3-D Secure); the payment is not settled yet.
var ErrChargePending = errors.New("payments: the PSP's charge is pending")

// ErrChargeUnreadable: the PSP answered with a charge status the gateway
// does not know; the answer proves nothing.
var ErrChargeUnreadable = errors.New("payments: the PSP's charge has an unknown status")

// ApplyCharge is the one rule turning the PSP's record of a payment's charge
// into the payment's state, for the live flow, the reconciler and the review
// queue alike. A charge that is not this payment's (another order id,
// amount or currency: a foreign charge under our order id, a restored
// database, a confused adapter) is never believed: the payment goes to
// requires_review with the reason. ErrChargeUnreadable for a status it does
// not know.
func ApplyCharge(p Payment, c psp.Charge) (Payment, error) {
	if reason := chargeMismatch(p, c); reason != "" {
		p.Status, p.ReviewReason = RequiresReview, reason
		return p, nil
	}
	switch c.Status {
	case psp.Succeeded:
		p.Status = Succeeded
	case psp.Declined:
		p.Status = Declined
	case psp.Pending:
		return p, ErrChargePending
	default:
		return p, fmt.Errorf("%w: %q", ErrChargeUnreadable, c.Status)
	}
	p.PSPReference, p.DeclineCode, p.PSPCode, p.ReviewReason = c.Reference, c.DeclineCode, c.Code, ""
	return p, nil
}

func chargeMismatch(p Payment, c psp.Charge) string {
	switch {
	case c.MerchantOrderID != p.MerchantOrderID:
		return fmt.Sprintf("the PSP answered for order %q, not this payment's %q", c.MerchantOrderID, p.MerchantOrderID)
	case c.Amount != p.Amount.Minor || c.Currency != p.Amount.Currency:
		return fmt.Sprintf("the PSP holds %d %s for this order, the payment is %d %s", c.Amount, c.Currency, p.Amount.Minor, p.Amount.Currency)
	}
	return ""
}
