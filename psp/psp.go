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
// Every method reports exactly one of these outcomes:
//   - a result: a nil error and a Charge (or Refund) whose Status is a business
//     answer: Succeeded, Declined, or Pending (accepted, waiting for the customer
//     or the PSP; look again later), and for a manual-capture charge Authorized
//     or Voided (see Capturer);
//   - rejected: an *Error with Class Rejected; the PSP (or the adapter, before
//     sending) refused the request as permanently invalid: it certainly did
//     nothing and the same request can never succeed;
//   - not processed: an *Error with Class NotProcessed; the PSP certainly did nothing,
//     so the same call may be repeated;
//   - unknown: an *Error with Class Unknown (timeout, reset after sending, 5xx,
//     an answer that cannot be read or that does not match the request); the PSP
//     may or may not have acted and only a lookup can tell.
//
// A definitive refusal of the customer's means of payment is a result
// (Declined, with the PSP's raw code in Code), never an error, whether or not
// the adapter knows the code. Only transport failures, 5xx, rate limits and
// codes the PSP documents as temporary are NotProcessed or Unknown.
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
	// currency fails wrapping ErrOrderConflict: NotProcessed when the PSP
	// refuses it as such, Unknown (wrapping ErrMismatch too) when the PSP
	// answers with the earlier charge. A request that
	// Capabilities().Check refuses fails Rejected (wrapping the *CheckError)
	// without being sent. An answer whose order id, amount or currency is not
	// the request's fails Unknown wrapping ErrMismatch.
	Charge(ctx context.Context, req ChargeRequest) (Charge, error)

	// Lookup finds the charge made for merchantOrderID. It returns ErrNotFound
	// when the PSP says the order does not exist (authoritative only if the
	// adapter declares AuthoritativeLookup), an *Error of Class Unknown when
	// the PSP could not answer or answered for another order id (wrapping
	// ErrMismatch), and Rejected for an empty order id. The caller checks the
	// amount and currency against its own record (MatchCharge).
	Lookup(ctx context.Context, merchantOrderID string) (Charge, error)

	// Refund returns req.Amount of the charge req.ChargeReference to the
	// customer. RefundOrderID is to a refund what MerchantOrderID is to a
	// charge: a second call with it returns the first refund and moves no more
	// money; with another amount it fails wrapping ErrOrderConflict, as
	// Charge does. A refund the PSP refuses (the charge is unknown, was
	// declined, or has less left to refund than asked) is a result with Status
	// RefundDeclined and a DeclineCode such as RefundDeclineAmountExceeded.
	// A request in a currency the adapter does not take fails Rejected
	// without being sent; an answer for another refund, order, amount or
	// currency fails Unknown wrapping ErrMismatch.
	Refund(ctx context.Context, req RefundRequest) (Refund, error)

	// LookupRefund finds the refund made for refundOrderID against the charge
	// chargeReference (Charge.Reference). It returns ErrNotFound when the PSP
	// has no such refund (a declined refund leaves none), an *Error when it
	// could not answer, and Rejected, without asking, when chargeReference or
	// refundOrderID is empty: such a lookup proves nothing.
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
	// Account is the configured label of the PSP account the adapter uses
	// (empty unless configured). Name and Account together say where a
	// payment was sent, so that its lookups go to the same place.
	Account string
	// Currencies are the currencies the PSP takes, with its units and limits.
	// Check refuses any other.
	Currencies []Currency
	// Checkout says what a front end needs to start the PSP's own client
	// before the gateway confirms a payment (two-step checkout).
	Checkout Checkout
	// ManualCapture is true when the adapter is a Capturer: a charge may be
	// authorized now (ChargeRequest.CaptureMethod CaptureManual) and
	// captured, in full or in part, or voided later. An adapter that cannot
	// leaves it false, and the gateway refuses manual capture for its PSP.
	ManualCapture bool
	// AuthorizationValidity is how long after it was authorized an
	// authorization stays capturable at the PSP, for answers that do not
	// say (Charge.CaptureBefore zero). Zero when ManualCapture is false.
	AuthorizationValidity time.Duration
}

// CaptureMethod says when a charge's money is taken.
type CaptureMethod string

const (
	// CaptureAutomatic takes the money at once (a Succeeded charge).
	CaptureAutomatic CaptureMethod = "automatic"
	// CaptureManual only authorizes it (an Authorized charge): a Capture
	// takes it later, a Void releases it.
	CaptureManual CaptureMethod = "manual"
)

// ChargeRequest is one charge. Amount is in minor units of Currency (ISO
// 4217); each adapter converts it to its PSP's units (see Currency).
type ChargeRequest struct {
	MerchantOrderID string
	// MerchantID is the gateway's merchant the charge is for; an adapter
	// whose PSP keeps metadata sends it, so that its ledger can say whose a
	// charge the gateway lost is (Transaction.MerchantID).
	MerchantID    string
	Amount        int64
	Currency      string
	PaymentMethod string
	Description   string
	// AllowNextAction says the customer is at a front end that can complete a
	// NextAction (3-D Secure, a redirect): a charge that needs one answers
	// Pending with it. When false (one-step checkout) the adapter asks the PSP
	// to refuse such a charge instead, which is a decline.
	AllowNextAction bool
	// CaptureMethod is CaptureAutomatic when empty; CaptureManual only for
	// an adapter whose Capabilities declare ManualCapture.
	CaptureMethod CaptureMethod
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
	// Pending: accepted; waiting for the customer or the PSP (a virtual
	// account awaiting its deposit, a card needing 3-D Secure). Look again
	// later: a lookup, or the PSP's notification, will say Succeeded or
	// Declined. Never a final answer.
	Pending ChargeStatus = "pending"
	// Authorized: a manual-capture charge the PSP holds the amount of,
	// until a Capture takes it (Succeeded), a Void releases it or it lapses
	// at CaptureBefore (Voided).
	Authorized ChargeStatus = "authorized"
	// Voided: an authorization released before any of it was captured (a
	// Void, or its lapse at the PSP). Final: no money moved.
	Voided ChargeStatus = "voided"
)

// Charge is the PSP's record of a charge.
type Charge struct {
	MerchantOrderID string
	// Reference is the PSP's own identifier for the charge.
	Reference string
	Status    ChargeStatus
	// DeclineCode names a decline in the shared vocabulary where one fits
	// (DeclineCardDeclined, …) and is Code in lower case otherwise.
	DeclineCode string
	// Code is the PSP's own raw code for a decline, verbatim, kept for the record.
	Code     string
	Amount   int64
	Currency string
	// NextAction is what a front end must do to let a Pending charge go on;
	// nil when nothing is asked of it (a deposit is awaited).
	NextAction *NextAction
	// AmountCaptured is what a Succeeded charge took: Amount, or less after
	// a partial capture (the rest was released). Zero otherwise. An adapter
	// that does not declare ManualCapture may leave it zero on a Succeeded
	// charge, which then took Amount.
	AmountCaptured int64
	// CaptureBefore is when an Authorized charge stops being capturable, as
	// the PSP says, in UTC; zero when it does not say
	// (Capabilities.AuthorizationValidity applies) and on every other status.
	CaptureBefore time.Time
}

// Equal reports whether c and d are the same answer, NextAction compared by
// value.
func (c Charge) Equal(d Charge) bool {
	na, nb := c.NextAction, d.NextAction
	c.NextAction, d.NextAction = nil, nil
	if c != d || (na == nil) != (nb == nil) {
		return false
	}
	return na == nil || *na == *nb
}

// Capturer is an adapter that captures or voids an authorization later
// (Capabilities.ManualCapture), for charges made with CaptureManual. Both
// report the outcome classes as Charge does, and both answer with the charge
// as it stands after the call, which the caller reads: Succeeded with
// AmountCaptured (captured), Voided, or still Authorized (or Pending,
// Declined: a charge that was never authorized). A charge that can no longer
// be captured or voided (captured already, voided, lapsed) is not an error:
// the answer is that charge, and the caller sees that its command did not
// win. Lookup reads the same charge when a call's outcome is unknown.
//
// Both fail Rejected, without effect, for a request that can never succeed:
// an empty order id or charge reference, an amount or currency Check
// refuses, more than the authorized amount, a charge the PSP does not know.
// An order id already used with another amount or charge fails wrapping
// ErrOrderConflict, and an answer for another order, charge or currency
// fails Unknown wrapping ErrMismatch, as for Charge.
type Capturer interface {
	// Capture takes req.Amount (at most the authorized amount; a smaller
	// amount releases the rest) of the Authorized charge
	// req.ChargeReference. OrderID is to a capture what MerchantOrderID is
	// to a charge: the PSP deduplicates on it, so a second call with it
	// captures nothing more and answers as the first did.
	//
	// An authorization is captured once, as at Stripe: a later Capture with
	// another OrderID takes nothing and answers the captured charge, whose
	// AmountCaptured is the first capture's. The answer does not say which
	// OrderID took the money, so a caller sends one capture per
	// authorization (and retries of it).
	Capture(ctx context.Context, req CaptureRequest) (Charge, error)
	// Void releases the Authorized charge req.ChargeReference (or cancels
	// one still Pending, so that it is never authorized): the answer is
	// Voided. It is deduplicated on req.OrderID as Capture is.
	Void(ctx context.Context, req VoidRequest) (Charge, error)
}

// CaptureRequest is one capture of an authorization. Amount is in minor
// units of Currency, the authorization's.
type CaptureRequest struct {
	// OrderID is the capture's own order id, derived from (merchant,
	// payment, capture key): every retry sends the same one.
	OrderID         string
	MerchantOrderID string
	ChargeReference string
	Amount          int64
	Currency        string
}

// VoidRequest is the release of an authorization.
type VoidRequest struct {
	// OrderID is the void's own order id, as CaptureRequest.OrderID.
	OrderID         string
	MerchantOrderID string
	ChargeReference string
	// Reason is the gateway's cancellation reason (duplicate, fraudulent,
	// requested_by_customer, abandoned, authorization_expired), passed on
	// where the PSP keeps one.
	Reason string
}

// NextAction is what a front end needs to continue a Pending charge.
type NextAction struct {
	// Type is NextActionRedirect or a PSP's own kind ("use_stripe_sdk",
	// "toss_widget", …) that the PSP's client library understands.
	Type string
	// URL is where to send the customer (for a redirect).
	URL string
	// ClientSecret lets the PSP's client library act on the charge; secret
	// to everyone but the paying customer's browser: never logged.
	ClientSecret string
}

// NextActionRedirect: send the customer's browser to NextAction.URL.
const NextActionRedirect = "redirect"

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
	// RefundDeclined: the PSP refused; no money moved. DeclineCode says why,
	// Code in the PSP's words.
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
	// Code is the PSP's own raw code for a declined refund, verbatim.
	Code     string
	Amount   int64
	Currency string
}

// Class says what a failed PSP call means for the money.
type Class int

const (
	// NotProcessed: the PSP certainly did nothing.
	NotProcessed Class = iota + 1
	// Unknown: the PSP may or may not have acted.
	Unknown
	// Rejected: the PSP refused the request as permanently invalid (an amount
	// below its minimum, a currency it does not take, a malformed request):
	// it certainly did nothing, and sending the same request again can never
	// succeed. A final answer (the payment failed), never retried, never put
	// in review.
	Rejected
)

func (c Class) String() string {
	switch c {
	case NotProcessed:
		return "not_processed"
	case Unknown:
		return "unknown"
	case Rejected:
		return "rejected"
	}
	return fmt.Sprintf("Class(%d)", int(c))
}

// Error is a PSP call that produced no result.
type Error struct {
	Class Class
	Op    string // "charge", "lookup", "refund", "lookup_refund", "capture", "void"
	// Code is the PSP's own raw error code, verbatim, when it gave one.
	Code string
	Err  error
}

func (e *Error) Error() string {
	if e.Code != "" {
		return fmt.Sprintf("psp %s: %s (%s): %v", e.Op, e.Class, e.Code, e.Err)
	}
	return fmt.Sprintf("psp %s: %s: %v", e.Op, e.Class, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

var (
	// ErrNotFound is the lookups' answer when the PSP has no charge for the
	// order id (or no refund for the refund order id).
	ErrNotFound = errors.New("psp: order not found")
	// ErrOrderConflict is wrapped by the error of a Charge or Refund whose
	// order id was already used with another amount or currency: NotProcessed
	// when the PSP refused the request for it, Unknown when it answered with
	// the earlier charge or refund (see MatchCharge). Either way the PSP
	// holds something else under this order id: a person must look.
	ErrOrderConflict = errors.New("psp: order id already used with a different amount or currency")
	// ErrMismatch is wrapped by the Unknown error of a Charge or Refund whose
	// answer's order id, amount or currency differs from the request, and of
	// a Lookup answered for another order id: whatever the PSP did, it was
	// not what was asked, and only a person or a later lookup can tell.
	ErrMismatch = errors.New("psp: answer does not match the request")
)

// MatchCharge checks that c, the answer to req (or a lookup of its order
// id), is for req's order id, amount and currency. It returns nil, or an
// Unknown *Error for op wrapping ErrMismatch, and ErrOrderConflict as well
// when only the amount or currency differ: the PSP holds another charge for
// this very order id. The payment flow uses it on lookups, whose answer the
// adapter cannot check against an amount.
func MatchCharge(op string, req ChargeRequest, c Charge) error {
	if c.MerchantOrderID == req.MerchantOrderID && c.Amount == req.Amount && c.Currency == req.Currency {
		return nil
	}
	err := fmt.Errorf("%w: asked for order %q, %d %s; the PSP answered for order %q, %d %s",
		ErrMismatch, req.MerchantOrderID, req.Amount, req.Currency, c.MerchantOrderID, c.Amount, c.Currency)
	if c.MerchantOrderID == req.MerchantOrderID {
		err = fmt.Errorf("%w: %w", ErrOrderConflict, err)
	}
	return &Error{Class: Unknown, Op: op, Err: err}
}

// MatchRefund is MatchCharge for a refund: refund order id, charge order
// id, amount and currency.
func MatchRefund(op string, req RefundRequest, r Refund) error {
	if r.RefundOrderID == req.RefundOrderID && r.MerchantOrderID == req.MerchantOrderID &&
		r.Amount == req.Amount && r.Currency == req.Currency {
		return nil
	}
	err := fmt.Errorf("%w: asked for refund %q of order %q, %d %s; the PSP answered for refund %q of order %q, %d %s",
		ErrMismatch, req.RefundOrderID, req.MerchantOrderID, req.Amount, req.Currency, r.RefundOrderID, r.MerchantOrderID, r.Amount, r.Currency)
	if r.RefundOrderID == req.RefundOrderID && r.MerchantOrderID == req.MerchantOrderID {
		err = fmt.Errorf("%w: %w", ErrOrderConflict, err)
	}
	return &Error{Class: Unknown, Op: op, Err: err}
}

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
