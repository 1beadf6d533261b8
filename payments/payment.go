// Package payments is the domain root: payments, their statuses, money,
// merchants and API keys, the error codes every layer speaks, and the
// payment service that runs the idempotent charge flow. It imports no HTTP
// framework and no database driver; storage and PSPs are reached through the
// interfaces declared here and in package psp.
package payments

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
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
	CreatedAt       time.Time
	UpdatedAt       time.Time
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
