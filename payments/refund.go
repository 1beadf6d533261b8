package payments

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/oklog/ulid/v2"

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
	left := p.Captured() - p.AmountReserved
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
	ID            string       `json:"id"`
	PaymentID     string       `json:"payment_id"`
	Amount        int64        `json:"amount"`
	Currency      string       `json:"currency"`
	Status        RefundStatus `json:"status"`
	RefundOrderID string       `json:"refund_order_id"`
	PSPReference  *string      `json:"psp_reference"`
	Reason        string       `json:"reason"`
	// FailureCode is named decline_code since version 2026-12-02
	// (failure_code before: package versions renders it so).
	FailureCode *string           `json:"decline_code"`
	Metadata    map[string]string `json:"metadata"`
	CreatedAt   string            `json:"created_at"`
	UpdatedAt   string            `json:"updated_at"`
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

// RefundClaim is what a fresh refund request writes: its key's record, its
// reservation on the payment and the refund.
type RefundClaim struct {
	Ref         idemkeys.Ref
	Fingerprint [32]byte
	Token       idemkeys.Token
	// Lease is how long the claimant owns the key and may send the refund.
	Lease time.Duration
	// RefundID names the refund the key holds; PaymentID is the payment it
	// gives (part of) back.
	RefundID, PaymentID string
}

// NewRefund is how a refund's claim decides, under its payment's row lock
// at the database's time now, what draft becomes: amount says how much of
// the payment it reserves (or why it may not); the refund takes the
// payment's currency and PSP, and the change its reservation and event.
func NewRefund(draft Refund, amount func(Payment) (int64, error)) func(Payment, time.Time) (RefundChange, error) {
	return func(p Payment, now time.Time) (RefundChange, error) {
		n, err := amount(p)
		if err != nil {
			return RefundChange{}, err
		}
		r := draft
		r.Amount = Money{Minor: n, Currency: p.Amount.Currency}
		r.PSP, r.CreatedAt, r.UpdatedAt = p.PSP, now, now
		return refundChange(Refund{}, r), nil
	}
}

// CreateRefund gives (part of) a succeeded payment back, at most once per
// (merchant, key): the same guarantees as Create, the same claim → PSP →
// fenced settle flow, the same answers. The claim reserves the refund's
// amount on the payment in the transaction that inserts its key, so that
// the pending, succeeded and in-review refunds of a payment never add up to
// more than it, whatever the concurrency; a refund that fails returns it.
//
// Errors are *errs.Error: CodeInvalidKey, CodeInvalid; CodeNotFound (no such
// payment for the merchant), CodeNotRefundable and CodeRefundExceeds
// (nothing stored, the key stays free: they depend on state that changes);
// CodeKeyMismatch, CodeInFlight, CodeKeyReused; CodePSPUnavailable and
// CodePSPUnknown (retry with the same key); CodeUnavailable, CodeInternal.
func (s *Service) CreateRefund(ctx context.Context, req RefundRequest) (Outcome, error) {
	if err := idemkeys.ValidateKey(req.IdempotencyKey); err != nil {
		return Outcome{}, &errs.Error{Code: errs.CodeInvalidKey, Message: err.Error()}
	}
	if err := req.Validate(); err != nil {
		return Outcome{}, err
	}
	ref := idemkeys.Ref{MerchantID: req.MerchantID, Endpoint: EndpointCreateRefund, Key: req.IdempotencyKey}
	fp := req.Fingerprint()
	return s.run(ctx, ref, fp, [32]byte{}, func(ctx context.Context, token idemkeys.Token) (subject, *idemkeys.Response, error) {
		draft := Refund{
			ID:             "re_" + ulid.Make().String(),
			MerchantID:     req.MerchantID,
			PaymentID:      req.PaymentID,
			IdempotencyKey: req.IdempotencyKey,
			RefundOrderID:  RefundOrderID(req.MerchantID, req.PaymentID, req.IdempotencyKey),
			Status:         RefundPending,
			Reason:         req.Reason,
			Metadata:       req.Metadata,
		}
		localAt := s.cfg.Now()
		r, p, err := s.store.ClaimRefund(ctx, RefundClaim{Ref: ref, Fingerprint: fp, Token: token, Lease: s.cfg.Lease, RefundID: draft.ID, PaymentID: req.PaymentID},
			NewRefund(draft, func(p Payment) (int64, error) { return RefundAmount(p, req.Amount) }))
		if err != nil {
			return refundSubject{r: draft, now: s.cfg.Now}, nil, err
		}
		return refundSubject{r: r, p: p, now: s.cfg.Now, dbAt: r.CreatedAt, localAt: localAt}, nil, nil
	})
}

// refundSubject is a refund as a subject of the flow (flow.go), with its
// payment: sent with its refund order id to its payment's PSP, looked up by
// it, and read with ApplyRefund.
type refundSubject struct {
	r Refund
	p Payment
	// now is this process's clock; dbAt and localAt pair the database's
	// clock with it at one moment, to stamp the refund's updated_at on the
	// database's clock.
	now           func() time.Time
	dbAt, localAt time.Time
}

func (rs refundSubject) kind() Kind         { return KindRefund }
func (rs refundSubject) id() string         { return rs.r.ID }
func (rs refundSubject) pspName() string    { return rs.r.PSP }
func (rs refundSubject) created() time.Time { return rs.r.CreatedAt }
func (rs refundSubject) status() string     { return string(rs.r.Status) }

func (rs refundSubject) send(ctx context.Context, adapter psp.Adapter) (answer, error) {
	r := rs.r
	x, err := adapter.Refund(ctx, psp.RefundRequest{
		RefundOrderID:   r.RefundOrderID,
		MerchantOrderID: rs.p.MerchantOrderID,
		ChargeReference: rs.p.PSPReference,
		Amount:          r.Amount.Minor,
		Currency:        r.Amount.Currency,
		Reason:          r.Reason,
	})
	if err != nil {
		return answer{}, err
	}
	ans, err := rs.read(x)
	if err == nil && x.Status == psp.RefundDeclined {
		// The PSP keeps no record of a declined refund: an earlier send of
		// this refund order id may still be applied.
		ans.unrecorded = fmt.Errorf("refund declined (%s)", x.DeclineCode)
	}
	return ans, err
}

func (rs refundSubject) lookup(ctx context.Context, adapter psp.Adapter) (answer, error) {
	x, err := adapter.LookupRefund(ctx, rs.p.PSPReference, rs.r.RefundOrderID)
	if err != nil {
		return answer{}, err
	}
	return rs.read(x)
}

// read turns the PSP's record of the refund into its next state.
func (rs refundSubject) read(x psp.Refund) (answer, error) {
	settled, err := ApplyRefund(rs.r, x)
	switch {
	case err != nil:
		return answer{}, &psp.Error{Class: psp.Unknown, Op: "refund", Err: err}
	case settled.Status == RefundRequiresReview:
		return answer{next: rs.as(settled), note: "PSP answer does not match the refund", attrs: []any{"reason", settled.ReviewReason}, warn: true}, nil
	}
	return answer{next: rs.as(settled)}, nil
}

// as is the same refund in state r.
func (rs refundSubject) as(r Refund) subject {
	rs.r = r
	return rs
}

func (rs refundSubject) rejected(code string) subject {
	r := rs.r
	r.Status, r.FailureCode, r.PSPCode = RefundFailed, RefundFailedRejected, code
	return rs.as(r)
}

func (rs refundSubject) orderTaken() subject {
	r := rs.r
	r.Status, r.ReviewReason = RefundRequiresReview, "the PSP refused the refund: its refund order id is already used with another amount or currency"
	return rs.as(r)
}

// settle completes the key with the refund's answer and moves it (and its
// payment's amounts) out of pending, where every refund under a key's
// lease is; updated_at, rendered in the answer, on the database's clock.
func (rs refundSubject) settle(ctx context.Context, store FlowStore, ref idemkeys.Ref, token idemkeys.Token) (idemkeys.Response, error) {
	r := rs.r
	r.UpdatedAt = rs.dbAt.Add(rs.now().Sub(rs.localAt)).UTC().Truncate(time.Microsecond)
	if r.UpdatedAt.Before(r.CreatedAt) {
		r.UpdatedAt = r.CreatedAt
	}
	c := RefundSettled(r)
	return *c.Answer, store.SettleRefund(ctx, ref, token, c)
}

func (rs refundSubject) recorded(obs Observer) {
	if rs.r.Status != RefundPending {
		obs.RefundRecorded(rs.r.Status)
	}
}

// Refund returns one of the merchant's refunds; CodeNotFound otherwise.
func (s *Service) Refund(ctx context.Context, merchantID, id string) (Refund, error) {
	r, err := s.store.Refund(ctx, merchantID, id)
	return r, notFound(err, "refund not found")
}
