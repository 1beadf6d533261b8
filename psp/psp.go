// Package psp owns the contract between the gateway and a payment service
// provider: the adapter interface, the three outcome classes every call falls
// into, and the capabilities an adapter declares so that callers never branch
// on vendor names. One subpackage per provider implements it.
package psp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"
)

// Adapter is a payment service provider as the gateway sees it.
//
// Every method reports exactly one of three outcomes:
//   - a result: a nil error and a Charge (or Refund) whose Status is a business
//     answer: Succeeded or Declined (a refund may also be Pending);
//   - not processed: an *Error with Class NotProcessed; the PSP certainly did nothing,
//     so the same call may be repeated;
//   - unknown: an *Error with Class Unknown (timeout, reset after sending, 5xx,
//     an answer that cannot be read); the PSP may or may not have acted and only
//     a lookup can tell.
//
// The lookups add a fourth answer, ErrNotFound itself (never wrapped in an
// *Error), when the PSP says it has no such charge or refund.
//
// An error that is neither an *Error nor ErrNotFound must be treated as Unknown:
// assuming "not charged" is the one mistake that charges twice.
//
// Adapters must be safe for concurrent use. The conformance suite in package
// psptest checks all of the above against an adapter and a backend it drives.
type Adapter interface {
	// Capabilities describes the adapter; it never fails and never blocks.
	Capabilities() Capabilities

	// Charge asks the PSP to charge req.Amount for req.MerchantOrderID. Calling it
	// twice with the same MerchantOrderID must not charge twice when the adapter
	// declares DedupesOrderID: the second call returns the first charge, declined
	// or not. A second call with the same order id but another amount or
	// currency fails NotProcessed wrapping ErrOrderConflict.
	Charge(ctx context.Context, req ChargeRequest) (Charge, error)

	// Lookup finds the charge made for merchantOrderID. It returns ErrNotFound
	// when the PSP says the order does not exist (authoritative only if the
	// adapter declares AuthoritativeLookup) and an *Error of Class Unknown
	// when the PSP could not answer.
	Lookup(ctx context.Context, merchantOrderID string) (Charge, error)

	// Refund returns req.Amount of the charge req.ChargeReference to the
	// customer. RefundOrderID is to a refund what MerchantOrderID is to a
	// charge: a second call with it returns the first refund and moves no more
	// money; with another amount it fails NotProcessed wrapping
	// ErrOrderConflict. A refund the PSP refuses (the charge is unknown, was
	// declined, or has less left to refund than asked) is a result with Status
	// RefundDeclined and a DeclineCode such as RefundDeclineAmountExceeded.
	Refund(ctx context.Context, req RefundRequest) (Refund, error)

	// LookupRefund finds the refund made for refundOrderID against the charge
	// chargeReference (Charge.Reference). It returns ErrNotFound when the PSP
	// has no such refund (a declined refund leaves none), and an *Error when
	// it could not answer.
	LookupRefund(ctx context.Context, chargeReference, refundOrderID string) (Refund, error)
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
	// DedupeWindow is how long after a charge the PSP keeps deduplicating its
	// order id (an idempotency key's lifetime, say); zero means for ever. Past
	// it, only a Lookup protects a resent charge.
	DedupeWindow time.Duration
	// MaxOrderIDLen is the longest merchant (or refund) order id the PSP
	// accepts. The gateway's order ids are 28 characters of [a-z0-9_].
	MaxOrderIDLen int
	// Account is an optional configured account label; the gateway records
	// Name and Account on every payment so lookups go to the payment's own PSP.
	Account string
}

// ChargeRequest is one charge. Amount is in minor units of Currency (ISO 4217).
type ChargeRequest struct {
	MerchantOrderID string
	Amount          int64
	Currency        string
	PaymentMethod   string
	Description     string
}

// Decline codes shared by every adapter, so that a merchant's code does not
// change when the PSP does. Adapters map their vendor's codes onto these where
// one fits and pass other codes through in lower case.
const (
	DeclineCardDeclined         = "card_declined"
	DeclineInsufficientFunds    = "insufficient_funds"
	DeclineInvalidPaymentMethod = "invalid_payment_method"
)

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

// RefundRequest is one refund of (part of) a charge. Amount is in minor units
// of Currency, which must be the charge's.
type RefundRequest struct {
	// RefundOrderID is the caller's id for this refund; the PSP deduplicates on it.
	RefundOrderID string
	// MerchantOrderID is the charge's order id.
	MerchantOrderID string
	// ChargeReference is the charge's Reference, as Charge or Lookup returned it.
	ChargeReference string
	Amount          int64
	Currency        string
	Reason          string
}

// RefundStatus is the business result of a refund.
type RefundStatus string

const (
	// RefundSucceeded: the money is on its way back to the customer.
	RefundSucceeded RefundStatus = "succeeded"
	// RefundPending: the PSP accepted the refund and will finish it later.
	RefundPending RefundStatus = "pending"
	// RefundDeclined: the PSP refused; no money moved. DeclineCode says why.
	RefundDeclined RefundStatus = "declined"
)

// Refund decline codes shared by every adapter.
const (
	// RefundDeclineChargeNotFound: the PSP knows no charge with that reference.
	RefundDeclineChargeNotFound = "charge_not_found"
	// RefundDeclineNotRefundable: the charge did not succeed, or cannot be refunded.
	RefundDeclineNotRefundable = "charge_not_refundable"
	// RefundDeclineAmountExceeded: more was asked than is left to refund.
	RefundDeclineAmountExceeded = "amount_exceeds_refundable"
)

// Refund is the PSP's record of a refund.
type Refund struct {
	RefundOrderID   string
	MerchantOrderID string
	// Reference is the PSP's own identifier for the refund; empty when declined.
	Reference   string
	Status      RefundStatus
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
	Op    string // "charge", "lookup", "refund", "lookup_refund"
	Err   error
}

func (e *Error) Error() string {
	return fmt.Sprintf("psp %s: %s: %v", e.Op, e.Class, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

var (
	// ErrNotFound is the lookups' answer when the PSP has no charge for the
	// order id (or no refund for the refund order id).
	ErrNotFound = errors.New("psp: order not found")
	// ErrOrderConflict is wrapped by the NotProcessed error of a Charge or
	// Refund whose order id was already used with another amount or currency.
	ErrOrderConflict = errors.New("psp: order id already used with a different amount or currency")
)

// ClassOf returns the class of err, and false when err is not an *Error.
func ClassOf(err error) (Class, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e.Class, true
	}
	return 0, false
}

// TransportError classifies a round trip to the PSP that produced no HTTP
// answer. A request that never left, because no connection could be opened
// (refused, unreachable, name not resolved), is NotProcessed. Anything later
// (a timeout, a reset, a cancelled context, a connection that closed before
// answering) is Unknown: the PSP may have received the request and acted on it.
func TransportError(op string, err error) *Error {
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return &Error{Class: NotProcessed, Op: op, Err: err}
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return &Error{Class: NotProcessed, Op: op, Err: err}
	}
	return &Error{Class: Unknown, Op: op, Err: err}
}
