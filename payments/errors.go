package payments

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Code classifies every error the gateway reports. The api package maps each
// code to exactly one HTTP status and problem type.
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
	// CodeNoticeRejected: a PSP notification (webhook) could not be
	// verified or read; nothing changed.
	CodeNoticeRejected Code = "notice_rejected"
	// CodeUnavailable: the gateway cannot serve now (database down, shutting down).
	CodeUnavailable Code = "service_unavailable"
	// CodeInternal: a bug or an unexpected failure; details are logged, not shown.
	CodeInternal Code = "internal"
)

// Error is the one error type that crosses layers. Message is safe to show
// to the client.
type Error struct {
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
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf builds an *Error with a client-safe message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of err, CodeInternal for anything that is not an *Error.
func ErrorCode(err error) Code {
	var e *Error
	if errors.As(err, &e) && e != nil {
		return e.Code
	}
	return CodeInternal
}

// internal wraps an unexpected failure. An unreachable database is no bug:
// it is reported as CodeUnavailable so the client retries later.
func internal(err error) *Error {
	var u interface{ Unavailable() bool }
	if (errors.As(err, &u) && u.Unavailable()) || errors.Is(err, context.DeadlineExceeded) {
		return &Error{Code: CodeUnavailable, Message: "the service is temporarily unavailable; retry with the same Idempotency-Key", RetryAfter: time.Second, Err: err}
	}
	return &Error{Code: CodeInternal, Message: "internal error", Err: err}
}
