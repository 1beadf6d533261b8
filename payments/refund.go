package payments

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"gateway/errs"
	"gateway/idemkeys"
	"gateway/psp"
)

// EndpointCreateRefund scopes the idempotency keys of POST /payments/{id}/refunds:
// a key used on POST /payments is another key. One key is one refund, of
// one payment: the same key on another payment's refunds is a mismatch.
const EndpointCreateRefund = "POST /payments/{id}/refunds"

// RefundStatus is where a refund is in its life.
type RefundStatus string

const (
	// RefundPending: claimed and being sent, or accepted by the PSP, which
	// will finish it later. Its amount is reserved on the payment.
	RefundPending RefundStatus = "pending"
	// RefundSucceeded: the money is on its way back to the customer.
	RefundSucceeded RefundStatus = "succeeded"
	// RefundFailed: no money moved (the PSP refused it, or it was proven
	// never sent); its reservation was returned.
	RefundFailed RefundStatus = "failed"
	// RefundRequiresReview: nobody could find out what happened; its amount
	// stays reserved until it is settled.
	RefundRequiresReview RefundStatus = "requires_review"
)

// Refund is one refund of (part of) a succeeded payment.
type Refund struct {
	ID             string
	MerchantID     string
	PaymentID      string
	IdempotencyKey string
	// RefundOrderID is what the PSP deduplicates the refund on: a function
	// of (merchant, payment, key), so every retry sends the same one.
	RefundOrderID string
	Status        RefundStatus
	Amount        Money
	Reason        string
	Metadata      map[string]string
	PSPReference  string
	FailureCode   string
	// PSPCode is the PSP's own raw code for a refusal, verbatim.
	PSPCode string
	// PSP is the PSP the payment was sent to: its refunds go there too.
	PSP          string
	ReviewReason string
	Review       Review
	CreatedAt    time.Time
	UpdatedAt    time.Time
}

// RefundOrderID derives the order id the PSP sees for a refund.
func RefundOrderID(merchantID, paymentID, key string) string {
	sum := sha256.Sum256([]byte(merchantID + "\x00" + paymentID + "\x00" + key))
	return "rfd_" + hex.EncodeToString(sum[:12])
}

// Refund failure codes of refunds that failed without the PSP's refusal.
const (
	// RefundFailedNotProcessed: proven never sent.
	RefundFailedNotProcessed = "not_processed"
	// RefundFailedRejected: the PSP refused the request as invalid.
	RefundFailedRejected = "rejected_by_psp"
)

// MaxRefundReasonLen bounds a refund's reason.
const MaxRefundReasonLen = 500

// RefundRequest is the command behind POST /payments/{id}/refunds.
type RefundRequest struct {
	MerchantID     string
	PaymentID      string
	IdempotencyKey string
	// Amount is in the payment's minor units; nil refunds the whole
	// refundable remainder.
	Amount   *int64
	Reason   string
	Metadata map[string]string
}

// Validate reports every invalid field at once, as a errs.CodeInvalid *errs.Error.
func (r RefundRequest) Validate() error {
	var fields []errs.FieldError
	add := func(field, format string, args ...any) {
		fields = append(fields, errs.FieldError{Field: field, Reason: fmt.Sprintf(format, args...)})
	}
	if r.Amount != nil {
		switch {
		case *r.Amount <= 0:
			add("amount", "must be a positive integer in minor units, or left out to refund the whole refundable remainder")
		case *r.Amount > MaxAmountMinor:
			add("amount", "must not exceed %d", int64(MaxAmountMinor))
		}
	}
	if utf8.RuneCountInString(r.Reason) > MaxRefundReasonLen || !printable(r.Reason) {
		add("reason", "must be at most %d printable characters", MaxRefundReasonLen)
	}
	fields = append(fields, validateMetadata(r.Metadata)...)
	fields = append(fields, validateTextBytes(r.Metadata, r.Reason)...)
	if len(fields) > 0 {
		return &errs.Error{Code: errs.CodeInvalid, Message: "the request body is invalid", Fields: fields}
	}
	return nil
}

// Fingerprint identifies the command, the payment it refunds included.
func (r RefundRequest) Fingerprint() [32]byte {
	amount := "rest"
	if r.Amount != nil {
		amount = strconv.FormatInt(*r.Amount, 10)
	}
	fields := []string{"refund-v1", r.PaymentID, amount, r.Reason}
	for _, k := range sortedKeys(r.Metadata) {
		fields = append(fields, k, r.Metadata[k])
	}
	return idemkeys.Fingerprint(fields...)
}

// RefundAmount decides how much a refund of p reserves: the amount asked,
// or the whole refundable remainder, refused when p cannot be refunded
// that much now. The refusals depend on state that can change, so they are
// never stored: the key stays free.
func RefundAmount(p Payment, asked *int64) (int64, error) {
	if p.Status != Succeeded {
		return 0, &errs.Error{Code: errs.CodeNotRefundable, PaymentID: p.ID,
			Message: fmt.Sprintf("payment %s is %s; only a succeeded payment can be refunded", p.ID, p.Status)}
	}
	left := p.Amount.Minor - p.AmountReserved
	switch {
	case left <= 0:
		return 0, &errs.Error{Code: errs.CodeNotRefundable, PaymentID: p.ID,
			Message: fmt.Sprintf("payment %s is already fully refunded (or its refunds in progress reserve all of it)", p.ID)}
	case asked == nil:
		return left, nil
	case *asked > left:
		return 0, &errs.Error{Code: errs.CodeRefundExceeds, PaymentID: p.ID, Fields: []errs.FieldError{{Field: "amount",
			Reason: fmt.Sprintf("at most %d %s of payment %s is left to refund", left, p.Amount.Currency, p.ID)}},
			Message: "the refund exceeds what is left to refund"}
	}
	return *asked, nil
}

// ErrRefundUnreadable: the PSP answered with a refund status the gateway does not know.
var ErrRefundUnreadable = errors.New("payments: the PSP's refund has an unknown status")

// ApplyRefund is the one rule turning the PSP's record of a refund into the
// refund's state. A refund that is not this one (another refund order id,
// amount or currency) is never believed: requires_review with the reason.
func ApplyRefund(r Refund, x psp.Refund) (Refund, error) {
	switch {
	case x.RefundOrderID != r.RefundOrderID:
		r.Status, r.ReviewReason = RefundRequiresReview, fmt.Sprintf("the PSP answered for refund order %q, not this refund's %q", x.RefundOrderID, r.RefundOrderID)
		return r, nil
	case x.Amount != r.Amount.Minor || x.Currency != r.Amount.Currency:
		r.Status, r.ReviewReason = RefundRequiresReview, fmt.Sprintf("the PSP holds a refund of %d %s under this refund's order id, the refund is %d %s", x.Amount, x.Currency, r.Amount.Minor, r.Amount.Currency)
		return r, nil
	}
	switch x.Status {
	case psp.RefundSucceeded:
		r.Status = RefundSucceeded
	case psp.RefundPending:
		r.Status = RefundPending
	case psp.RefundDeclined:
		r.Status, r.FailureCode = RefundFailed, x.DeclineCode
	default:
		return r, fmt.Errorf("%w: %q", ErrRefundUnreadable, x.Status)
	}
	r.PSPReference, r.PSPCode, r.ReviewReason = x.Reference, x.Code, ""
	return r, nil
}

// RefundView is the refund object of the public API.
type RefundView struct {
	ID            string            `json:"id"`
	PaymentID     string            `json:"payment_id"`
	Amount        int64             `json:"amount"`
	Currency      string            `json:"currency"`
	Status        RefundStatus      `json:"status"`
	RefundOrderID string            `json:"refund_order_id"`
	PSPReference  *string           `json:"psp_reference"`
	Reason        string            `json:"reason"`
	FailureCode   *string           `json:"failure_code"`
	Metadata      map[string]string `json:"metadata"`
	CreatedAt     string            `json:"created_at"`
	UpdatedAt     string            `json:"updated_at"`
}

// ToRefundView renders r for the public API.
func ToRefundView(r Refund) RefundView {
	md := r.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return RefundView{
		ID: r.ID, PaymentID: r.PaymentID, Amount: r.Amount.Minor, Currency: r.Amount.Currency,
		Status: r.Status, RefundOrderID: r.RefundOrderID, PSPReference: nullable(r.PSPReference),
		Reason: r.Reason, FailureCode: nullable(r.FailureCode), Metadata: md,
		CreatedAt: r.CreatedAt.UTC().Format(time.RFC3339Nano), UpdatedAt: r.UpdatedAt.UTC().Format(time.RFC3339Nano),
	}
}

// RenderRefund is the answer stored for a refund's key, by every path that
// settles one.
func RenderRefund(r Refund) idemkeys.Response {
	body, err := encodeJSON(ToRefundView(r))
	if err != nil {
		panic("payments: render refund: " + err.Error())
	}
	return idemkeys.Response{Status: RefundStatusCode(r.Status), Body: body}
}

// RefundStatusCode is the HTTP status a refund's creation answers with: 201
// succeeded, 202 pending at the PSP or in review, 402 refused (failed).
func RefundStatusCode(s RefundStatus) int {
	switch s {
	case RefundSucceeded:
		return http.StatusCreated
	case RefundFailed:
		return http.StatusPaymentRequired
	}
	return http.StatusAccepted
}
