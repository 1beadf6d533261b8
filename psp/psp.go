// Package psp owns the contract between the gateway and a payment service
// provider: the adapter interface, the three outcome classes every call falls
// into, and the capabilities an adapter declares so that callers never branch
// on vendor names. One subpackage per provider implements it.
package psp

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Adapter is a payment service provider as the gateway sees it.
//
// Every method reports exactly one of three outcomes:
//   - a result: a nil error and a Charge whose Status is Succeeded or Declined;
//   - not processed: an *Error with Class NotProcessed; the PSP certainly did nothing,
//     so the same call may be repeated;
//   - unknown: an *Error with Class Unknown (timeout, reset after sending, 5xx); the
//     charge may or may not exist and only Lookup can tell.
//
// Adapters must be safe for concurrent use.
type Adapter interface {
	// Capabilities describes the adapter; it never fails and never blocks.
	Capabilities() Capabilities

	// Charge asks the PSP to charge req.Amount for req.MerchantOrderID. Calling it
	// twice with the same MerchantOrderID must not charge twice when the adapter
	// declares DedupesOrderID: the second call returns the first charge.
	Charge(ctx context.Context, req ChargeRequest) (Charge, error)

	// Lookup finds the charge made for merchantOrderID. It returns ErrNotFound
	// when the PSP says the order does not exist (authoritative only if the
	// adapter declares AuthoritativeLookup) and an *Error of Class Unknown
	// when the PSP could not answer.
	Lookup(ctx context.Context, merchantOrderID string) (Charge, error)
}

// Capabilities is what an adapter promises; the resume path and the reconciler
// read these instead of special-casing vendors.
type Capabilities struct {
	// Name identifies the adapter in logs and metrics.
	Name string
	// AuthoritativeLookup is true when ErrNotFound from Lookup means the PSP has
	// no charge for the order id and will not create one from an earlier call
	// that is still in its creation window.
	AuthoritativeLookup bool
	// CreationWindow bounds how long after a Charge call was sent a charge for it
	// may still appear at the PSP.
	CreationWindow time.Duration
	// DedupesOrderID is true when the PSP refuses to charge one merchant order id twice.
	DedupesOrderID bool
	// MaxOrderIDLen is the longest merchant order id the PSP accepts.
	MaxOrderIDLen int
}

// ChargeRequest is one charge. Amount is in minor units of Currency (ISO 4217).
type ChargeRequest struct {
	MerchantOrderID string
	Amount          int64
	Currency        string
	PaymentMethod   string
	Description     string
}

// ChargeStatus is the business result of a charge.
type ChargeStatus string

const (
	Succeeded ChargeStatus = "succeeded"
	Declined  ChargeStatus = "declined"
)

// Charge is the PSP's record of a charge.
type Charge struct {
	MerchantOrderID string
	// Reference is the PSP's own identifier for the charge.
	Reference   string
	Status      ChargeStatus
	DeclineCode string
	Amount      int64
	Currency    string
}

// Class says what a failed PSP call means for the money.
type Class int

const (
	// NotProcessed: the PSP certainly did nothing.
	NotProcessed Class = iota + 1
	// Unknown: the PSP may or may not have acted.
	Unknown
)

func (c Class) String() string {
	switch c {
	case NotProcessed:
		return "not_processed"
	case Unknown:
		return "unknown"
	}
	return fmt.Sprintf("Class(%d)", int(c))
}

// Error is a PSP call that produced no result.
type Error struct {
	Class Class
	Op    string // "charge", "lookup"
	Err   error
}

func (e *Error) Error() string {
	return fmt.Sprintf("psp %s: %s: %v", e.Op, e.Class, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// ErrNotFound is Lookup's answer when the PSP has no charge for the order id.
var ErrNotFound = errors.New("psp: order not found")

// ClassOf returns the class of err, and false when err is not an *Error.
func ClassOf(err error) (Class, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e.Class, true
	}
	return 0, false
}
