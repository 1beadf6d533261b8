// Package errs is the one error type every layer of the gateway speaks: a
// Code that says what state a failure left and how a client may go on, a
// message safe to show, the fields at fault, how long to wait, the object an
// answer names, and the operation that failed. The api package maps each
// Code to exactly one HTTP status and problem type; nothing else decides
// how an error looks to a client.
//
// Operations name themselves the same way everywhere: a method opens with
//
//	defer errs.Wrap(&err, "Store.Claim(%s)", id)
//
// and its error reads "Store.Claim(pay_…): <cause>", whatever layer adds
// the next prefix.
package errs

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Code classifies every error the gateway reports. Each says what state the
// failure left behind.
type Code string

const (
	// CodeInvalid: the request body is malformed or fails validation. Nothing stored.
	CodeInvalid Code = "invalid_request"
	// CodeInvalidKey: the Idempotency-Key is missing or malformed. Nothing stored.
	CodeInvalidKey Code = "invalid_idempotency_key"
	// CodeUnauthorized: no valid API key.
	CodeUnauthorized Code = "unauthorized"
	// CodeNotFound: no such resource for this merchant.
	CodeNotFound Code = "not_found"
	// CodeInFlight: the same key is being processed right now; retry later with the same key.
	CodeInFlight Code = "request_in_flight"
	// CodeKeyMismatch: the key was used before with a different request.
	CodeKeyMismatch Code = "idempotency_key_mismatch"
	// CodeKeyReused: the key's stored response expired but its payment exists;
	// the client must look the payment up, never re-run it.
	CodeKeyReused Code = "idempotency_key_reused"
	// CodePSPUnavailable: the PSP certainly did not act; retry with the same key.
	CodePSPUnavailable Code = "psp_unavailable"
	// CodePSPUnknown: the PSP may or may not have acted; retry with the same key.
	CodePSPUnknown Code = "psp_outcome_unknown"
	// CodePSPCannotAccept: the request is valid but the configured PSP can
	// never accept it (currency, amount); nothing stored, nothing sent.
	CodePSPCannotAccept Code = "psp_cannot_accept"
	// CodeNotRefundable: the payment cannot be refunded now (not succeeded,
	// or nothing left to refund); nothing stored, the key stays free.
	CodeNotRefundable Code = "payment_not_refundable"
	// CodeRefundExceeds: the refund asks more than is left to refund;
	// nothing stored, the key stays free.
	CodeRefundExceeds Code = "refund_exceeds_refundable"
	// CodeConflict: the request contradicts the current state (or the PSP's
	// evidence); nothing was changed.
	CodeConflict Code = "conflict"
	// CodeNotConfirmable: the payment is not awaiting confirmation (a
	// one-step payment, one confirmed by another key, or one expired);
	// nothing stored, the key stays free.
	CodeNotConfirmable Code = "payment_not_confirmable"
	// CodeConfirmMismatch: the confirm's amount or order id is not the
	// payment's; nothing stored or sent, the key stays free.
	CodeConfirmMismatch Code = "confirm_mismatch"
	// CodeNotCapturable: the payment is not an authorization that can be
	// captured (automatic, captured already, voided); nothing stored.
	CodeNotCapturable Code = "payment_not_capturable"
	// CodeAuthorizationExpired: the authorization lapsed before the
	// capture; nothing stored.
	CodeAuthorizationExpired Code = "authorization_expired"
	// CodeCaptureExceeds: the capture asks more than is authorized; nothing
	// stored, the key stays free.
	CodeCaptureExceeds Code = "capture_exceeds_authorized"
	// CodeNotCancelable: the payment cannot be canceled (it took money:
	// refund it; or it failed); nothing stored.
	CodeNotCancelable Code = "payment_not_cancelable"
	// CodeCanceledByKey: the key was canceled (POST /payments/cancel_by_key)
	// before anything was claimed under it; nothing was or will be charged.
	CodeCanceledByKey Code = "canceled_by_key"
	// CodeNoticeRejected: a PSP notification (webhook) could not be
	// verified or read; nothing changed.
	CodeNoticeRejected Code = "notice_rejected"
	// CodeUnavailable: the gateway cannot serve now (database down, shutting down).
	CodeUnavailable Code = "service_unavailable"
	// CodeInternal: a bug or an unexpected failure; details are logged, not shown.
	CodeInternal Code = "internal"
)

// Error is the one error type that crosses layers. Message is safe to show
// to the client; Op and Err are for logs only.
type Error struct {
	// Op is the operation that failed ("Service.Create", "Store.Claim(pay_…)"),
	// when one named itself; Wrap fills it in.
	Op      string
	Code    Code
	Message string
	// Fields lists per-field validation failures (CodeInvalid).
	Fields []FieldError
	// PaymentID names the existing payment (CodeKeyReused, refusals of a refund).
	PaymentID string
	// RefundID names the existing refund (CodeKeyReused on a refund's key).
	RefundID string
	// RetryAfter is how long the client should wait before retrying, when it may.
	RetryAfter time.Duration
	// Err is the cause, for logs only.
	Err error
}

// FieldError is one invalid field.
type FieldError struct {
	Field  string `json:"field"`
	Reason string `json:"reason"`
}

func (e *Error) Error() string {
	msg := string(e.Code) + ": " + e.Message
	if e.Op != "" {
		msg = e.Op + ": " + msg
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf builds an *Error with a client-safe message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Invalid is a CodeInvalid *Error listing fields, or nil when there are none.
func Invalid(message string, fields []FieldError) error {
	if len(fields) == 0 {
		return nil
	}
	return &Error{Code: CodeInvalid, Message: message, Fields: fields}
}

// CodeOf returns the code of err, CodeInternal for anything that is not an *Error.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) && e != nil {
		return e.Code
	}
	return CodeInternal
}

// Internal wraps an unexpected failure. An unreachable database (an error
// that says Unavailable) or a deadline is no bug: it is reported as
// CodeUnavailable so that the client retries later.
func Internal(err error) *Error {
	if Unavailable(err) {
		return &Error{Code: CodeUnavailable, Message: "the service is temporarily unavailable; retry with the same Idempotency-Key", RetryAfter: time.Second, Err: err}
	}
	return &Error{Code: CodeInternal, Message: "internal error", Err: err}
}

// Unavailable reports whether err says that a dependency could not be
// reached (an error in its chain answers Unavailable() true) or that time
// ran out: a retry later may succeed.
func Unavailable(err error) bool {
	var u interface{ Unavailable() bool }
	return (errors.As(err, &u) && u.Unavailable()) || errors.Is(err, context.DeadlineExceeded)
}

// Wrap prefixes the error *errp, when there is one, with the operation
// format names: "op: cause". An *Error that names no operation yet takes
// it as its Op instead, so that it stays an *Error at the top.
//
//	func (s *Store) Claim(ctx context.Context, c Claim) (err error) {
//		defer errs.Wrap(&err, "Store.Claim")
//		…
//	}
func Wrap(errp *error, format string, args ...any) {
	if *errp == nil {
		return
	}
	op := format
	if len(args) > 0 {
		op = fmt.Sprintf(format, args...)
	}
	if e, ok := (*errp).(*Error); ok && e.Op == "" {
		c := *e
		c.Op = op
		*errp = &c
		return
	}
	*errp = fmt.Errorf("%s: %w", op, *errp)
}

var (
	// ErrNotFound: no such row (for this merchant).
	ErrNotFound = errors.New("not found")
	// ErrWriteUnknown: the connection broke while committing; the write may
	// or may not have happened (re-read before believing either way).
	ErrWriteUnknown = errors.New("outcome of the write is unknown")
)
