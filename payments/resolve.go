package payments

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gateway/idemkeys"
)

// Resolution is an operator's decision on a payment nobody could settle.
type Resolution struct {
	PaymentID    string
	To           Status
	PSPReference string
	Reason       string
	Actor        string
	// From is filled in by Resolve with the status the payment had.
	From Status
}

// Validate checks the decision before anything is read.
func (r Resolution) Validate() error {
	var fields []FieldError
	if r.PaymentID == "" {
		fields = append(fields, FieldError{Field: "payment_id", Reason: "is required"})
	}
	if r.To != Succeeded && r.To != Failed {
		fields = append(fields, FieldError{Field: "as", Reason: "must be succeeded or failed"})
	}
	if r.Reason == "" || len(r.Reason) > 1000 || !printable(r.Reason) {
		fields = append(fields, FieldError{Field: "reason", Reason: "must be 1 to 1000 printable characters"})
	}
	if r.Actor == "" || len(r.Actor) > 255 || !printable(r.Actor) {
		fields = append(fields, FieldError{Field: "actor", Reason: "must be 1 to 255 printable characters"})
	}
	if len(r.PSPReference) > 255 || !printable(r.PSPReference) {
		fields = append(fields, FieldError{Field: "psp_reference", Reason: "must be at most 255 printable characters"})
	}
	if len(fields) > 0 {
		return &Error{Code: CodeInvalid, Message: "invalid resolution", Fields: fields}
	}
	return nil
}

// Resolve records an operator's decision on a payment in requires_review.
// The payment's key, if still retained, replays the resolved payment from
// then on; the decision is kept in the audit table.
func (s *Service) Resolve(ctx context.Context, r Resolution) (Payment, error) {
	if err := r.Validate(); err != nil {
		return Payment{}, err
	}
	now := s.cfg.Now().UTC().Truncate(time.Microsecond)
	p, err := s.store.Resolve(ctx, r.PaymentID, func(p Payment) (Payment, error) {
		r.From = p.Status
		if p.Status != RequiresReview {
			return p, Errorf(CodeInvalid, "payment %s is %s; only payments in requires_review can be resolved", p.ID, p.Status)
		}
		p.Status = r.To
		if r.PSPReference != "" {
			p.PSPReference = r.PSPReference
		}
		if r.To == Failed {
			p.DeclineCode = DeclineNotProcessed
		}
		p.UpdatedAt = now
		return p, nil
	}, r, now)
	if errors.Is(err, ErrNotFound) {
		return Payment{}, Errorf(CodeNotFound, "no payment %s", r.PaymentID)
	}
	var e *Error
	if errors.As(err, &e) {
		return Payment{}, e
	}
	if err != nil {
		return Payment{}, internal(fmt.Errorf("resolve %s: %w", r.PaymentID, err))
	}
	s.log.InfoContext(ctx, "payment resolved by hand", "payment_id", p.ID, "key", idemkeys.Hash(idemkeys.Ref{
		MerchantID: p.MerchantID, Endpoint: EndpointCreatePayment, Key: p.IdempotencyKey,
	}), "merchant", idemkeys.HashMerchant(p.MerchantID), "from", string(r.From), "to", string(p.Status),
		"actor", r.Actor, "reason", r.Reason)
	return p, nil
}

// ListPayments lists payments in a status across merchants, for ops.
func (s *Service) ListPayments(ctx context.Context, status Status, limit int) ([]Payment, error) {
	ps, err := s.store.ListPayments(ctx, status, limit)
	if err != nil {
		return nil, internal(err)
	}
	return ps, nil
}

// DeclineNotProcessed is the decline code of a payment that failed because
// the PSP never processed it.
const DeclineNotProcessed = "not_processed"
