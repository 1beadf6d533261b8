package payments

import "gateway/errs"

// Resolution is an operator's decision on a payment nobody could settle.
type Resolution struct {
	PaymentID    string
	To           Status
	PSPReference string
	Reason       string
	Actor        string
	// Force records the decision even when the PSP's own answer contradicts
	// it, and allows correcting an earlier resolution; Reason must say why.
	Force bool
	// From is filled in by Resolve with the status the payment had.
	From Status
}

// Validate checks the decision before anything is read.
func (r Resolution) Validate() error {
	var fields []errs.FieldError
	if r.PaymentID == "" {
		fields = append(fields, errs.FieldError{Field: "payment_id", Reason: "is required"})
	}
	if r.To != Succeeded && r.To != Failed {
		fields = append(fields, errs.FieldError{Field: "as", Reason: "must be succeeded or failed"})
	}
	if r.Reason == "" || len(r.Reason) > 1000 || !printable(r.Reason) {
		fields = append(fields, errs.FieldError{Field: "reason", Reason: "must be 1 to 1000 printable characters"})
	}
	if r.Actor == "" || len(r.Actor) > 255 || !printable(r.Actor) {
		fields = append(fields, errs.FieldError{Field: "actor", Reason: "must be 1 to 255 printable characters"})
	}
	if len(r.PSPReference) > 255 || !printable(r.PSPReference) {
		fields = append(fields, errs.FieldError{Field: "psp_reference", Reason: "must be at most 255 printable characters"})
	}
	if len(fields) > 0 {
		return &errs.Error{Code: errs.CodeInvalid, Message: "invalid resolution", Fields: fields}
	}
	return nil
}

// Decline codes of payments that failed without a business refusal.
const (
	// DeclineNotProcessed: the PSP never processed the payment.
	DeclineNotProcessed = "not_processed"
	// DeclineRejected: the PSP refused the request as one it can never
	// accept (payments.Payment.PSPCode says how it put it).
	DeclineRejected = "rejected_by_psp"
	// DeclineExpired: a payment awaiting confirmation was canceled because
	// nobody confirmed it in time.
	DeclineExpired = "confirmation_expired"
)
