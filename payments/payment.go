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
	"strings"
	"time"

	"gateway/idemkeys"
	"gateway/psp"
	"gateway/routing"
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
	// RequiresConfirmation: created without a charge (two-step checkout):
	// POST /payments/{id}/confirm runs it; canceled when nobody confirms it
	// before ExpiresAt.
	RequiresConfirmation Status = "requires_confirmation"
	// RequiresAction: the PSP accepted the charge and waits for the
	// customer: to pass 3-D Secure (NextAction says how) or to pay into a
	// virtual account. The PSP's notification or the reconciler's look at
	// the PSP settles it.
	RequiresAction Status = "requires_action"
	// RequiresCapture: authorized (manual capture): the PSP holds the
	// amount until a capture takes it, a void releases it, or the
	// authorization lapses at CaptureBefore.
	RequiresCapture Status = "requires_capture"
	// Canceled: nothing was or will be taken: never confirmed before it
	// expired, or an authorization voided or lapsed (CancellationReason).
	Canceled Status = "canceled"
)

// Statuses lists every status in the order of a payment's life.
var Statuses = []Status{RequiresConfirmation, Processing, RequiresAction, RequiresCapture, Succeeded, Declined, Failed, Canceled, RequiresReview}

// StatusNames lists Statuses for messages: "a, b or c".
func StatusNames() string {
	names := make([]string, len(Statuses))
	for i, s := range Statuses {
		names[i] = string(s)
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// PaymentStatuses lists every payment status, for validation.
var PaymentStatuses = func() []string {
	out := make([]string, len(Statuses))
	for i, s := range Statuses {
		out[i] = string(s)
	}
	return out
}()

// RefundStatuses lists every refund status, for validation.
var RefundStatuses = []string{string(RefundPending), string(RefundSucceeded), string(RefundFailed), string(RefundRequiresReview)}

// CaptureMethod says when a payment's money is taken: at once
// (CaptureAutomatic, the default) or by a capture after an authorization
// (CaptureManual).
type CaptureMethod string

const (
	CaptureAutomatic CaptureMethod = "automatic"
	CaptureManual    CaptureMethod = "manual"
)

// Cancellation reasons: the merchant's (POST /payments/{id}/cancel) and the
// gateway's own.
const (
	CancelDuplicate           = "duplicate"
	CancelFraudulent          = "fraudulent"
	CancelRequestedByCustomer = "requested_by_customer"
	CancelAbandoned           = "abandoned"
	// CancelAuthorizationExpired: the authorization lapsed before any
	// capture (the reconciler voided it, or the PSP let it go).
	CancelAuthorizationExpired = "authorization_expired"
)

// CancellationReasons are the reasons a merchant may give.
var CancellationReasons = []string{CancelDuplicate, CancelFraudulent, CancelRequestedByCustomer, CancelAbandoned}

// Final reports whether the status can no longer change without ops.
func (s Status) Final() bool {
	return s == Succeeded || s == Declined || s == Failed || s == Canceled
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
	// Review is the schedule of a payment the reconciler keeps looking at:
	// one in requires_review (the review queue) or in requires_action.
	Review Review
	// ExpiresAt is when a payment in requires_confirmation is canceled if
	// nobody confirmed it (the database's clock); zero for one-step payments.
	ExpiresAt time.Time
	// ConfirmKey is the Idempotency-Key of the confirm that charged a
	// two-step payment: its key, not the creation's, answers with the
	// payment's outcome. Empty until confirmed.
	ConfirmKey string
	// NextAction is what the customer's front end must do for a payment in
	// requires_action; nil when nothing is asked of it (a deposit awaited).
	NextAction *NextAction
	// Checkout is what a front end needs to start the PSP's client for a
	// payment in requires_confirmation. Rendered, never stored.
	Checkout *Checkout
	// CaptureMethod is how its money is taken; empty means automatic.
	CaptureMethod CaptureMethod
	// AmountCaptured is what a manual payment's capture took (at most
	// Amount; the rest was released). See Captured.
	AmountCaptured int64
	// CaptureBefore is when a payment in requires_capture stops being
	// capturable (the database's clock); zero otherwise.
	CaptureBefore time.Time
	// CancellationReason says why a canceled payment was canceled.
	CancellationReason string
	// Operation is the capture or void in flight on an authorization, nil
	// when none: one at a time (design §15).
	Operation *Operation
	// Attempt is the number of its current attempt (0 or 1: the first),
	// AttemptAt when that attempt started (zero: at CreatedAt), Attempts
	// the ones before it, oldest first (design §16). PSP and
	// MerchantOrderID are the current attempt's.
	Attempt   int
	AttemptAt time.Time
	Attempts  []routing.Attempt
	CreatedAt time.Time
	UpdatedAt time.Time
	// ClientSecret lets the customer's browser read and confirm this one
	// payment with a publishable key (two-step payments only). Set on the
	// payment being created, rendered in its creation's answer alone, never
	// stored or logged; ClientSecretHash is what is stored (zero for none).
	ClientSecret     string
	ClientSecretHash [32]byte
}

// Manual reports whether p is captured by a capture after its authorization.
func (p Payment) Manual() bool { return p.CaptureMethod == CaptureManual }

// Captured is what p took from its customer: what its refunds may give
// back. A manual payment's capture may take less than its amount.
func (p Payment) Captured() int64 {
	switch {
	case p.Status != Succeeded && p.Status != RequiresReview:
		return 0
	case p.Manual():
		return p.AmountCaptured
	}
	return p.Amount.Minor
}

// OutcomeKey names the idempotency key that answers with p's outcome and
// replays it: the confirm's once a two-step payment was confirmed, the
// creation's otherwise.
func OutcomeKey(p Payment) idemkeys.Ref {
	if p.ConfirmKey != "" {
		return idemkeys.Ref{MerchantID: p.MerchantID, Endpoint: EndpointConfirmPayment, Key: p.ConfirmKey}
	}
	return idemkeys.Ref{MerchantID: p.MerchantID, Endpoint: EndpointCreatePayment, Key: p.IdempotencyKey}
}

// NextAction is what a front end must do to let a payment in
// requires_action go on, as the API shows it. ClientSecret lets the PSP's
// client library act on the charge: it is shown to the merchant (whose
// front end needs it) and never logged.
type NextAction struct {
	// Type is "redirect" (send the customer to URL) or a kind the PSP's
	// client library knows ("use_stripe_sdk", …).
	Type         string `json:"type"`
	URL          string `json:"url,omitempty"`
	ClientSecret string `json:"client_secret,omitempty"`
}

// Checkout is what a front end needs to start the PSP's own client for a
// payment awaiting confirmation, as the API shows it: public values only.
type Checkout struct {
	// PSP is the adapter the payment will be confirmed with ("toss", "stripe", "fake").
	PSP string `json:"psp"`
	// Client names the PSP's client side (psp.ClientTossWidget, …).
	Client         string `json:"client"`
	PublishableKey string `json:"publishable_key,omitempty"`
	// OrderID is the order id to start the client with (the payment's merchant_order_id).
	OrderID string `json:"order_id"`
	// Amount is the payment's amount in the PSP's own units for Currency
	// (Stripe writes ISK in hundredths, say), for the client.
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
	// ConfirmWith is the confirm request's field for the client's result.
	ConfirmWith string `json:"confirm_with"`
}

// CheckoutFor is what p's front end starts the PSP described by caps with.
func CheckoutFor(p Payment, caps psp.Capabilities) (*Checkout, error) {
	cur, ok := caps.Currency(p.Amount.Currency)
	if !ok {
		return nil, fmt.Errorf("payments: %s does not take %s", caps.Name, p.Amount.Currency)
	}
	amount, err := cur.ToPSP(p.Amount.Minor)
	if err != nil {
		return nil, err
	}
	return &Checkout{PSP: caps.Name, Client: caps.Checkout.Client, PublishableKey: caps.Checkout.PublishableKey,
		OrderID: p.MerchantOrderID, Amount: amount, Currency: p.Amount.Currency, ConfirmWith: caps.Checkout.ResultField}, nil
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

// AwaitCustomer is p waiting for its customer with the PSP's pending
// charge c (ApplyCharge answered ErrChargePending): requires_action, with
// what the front end must do.
func AwaitCustomer(p Payment, c psp.Charge) Payment {
	p.Status, p.PSPReference, p.ReviewReason, p.NextAction = RequiresAction, c.Reference, "", nil
	if na := c.NextAction; na != nil {
		p.NextAction = &NextAction{Type: na.Type, URL: na.URL, ClientSecret: na.ClientSecret}
	}
	return p
}

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
	switch {
	case c.Status == psp.Succeeded:
		p.Status = Succeeded
		if p.Manual() {
			// Captured at the PSP (by this gateway's capture, or at its
			// dashboard): what it took, all of it when it does not say.
			p.AmountCaptured = c.AmountCaptured
			if p.AmountCaptured <= 0 || p.AmountCaptured > p.Amount.Minor {
				p.AmountCaptured = p.Amount.Minor
			}
			p.CaptureBefore = time.Time{}
		}
	case c.Status == psp.Declined:
		p.Status = Declined
	case c.Status == psp.Pending:
		return p, ErrChargePending
	case c.Status == psp.Authorized && p.Manual():
		p.Status = RequiresCapture
		switch {
		case !c.CaptureBefore.IsZero():
			p.CaptureBefore = c.CaptureBefore.UTC().Truncate(time.Microsecond)
		case p.CaptureBefore.IsZero():
			// The PSP did not say: the shortest validity cards know, from
			// the payment's creation, which is no later than the authorization.
			p.CaptureBefore = p.CreatedAt.Add(DefaultAuthorizationValidity).UTC().Truncate(time.Microsecond)
		}
	case c.Status == psp.Voided && p.Manual():
		p.Status, p.CaptureBefore = Canceled, time.Time{}
		if p.CancellationReason == "" {
			p.CancellationReason = CancelAuthorizationExpired
		}
	case c.Status == psp.Authorized, c.Status == psp.Voided:
		p.Status, p.ReviewReason = RequiresReview, fmt.Sprintf("the PSP holds the charge %s, a payment to be captured at once", c.Status)
		return p, nil
	default:
		return p, fmt.Errorf("%w: %q", ErrChargeUnreadable, c.Status)
	}
	p.PSPReference, p.DeclineCode, p.PSPCode, p.ReviewReason, p.NextAction = c.Reference, c.DeclineCode, c.Code, "", nil
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
