package gateway

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strings"
	"time"
)

// Code is a problem's type without its "/problems/" prefix: the stable name
// of what the gateway refused, to branch on (CodeOf).
type Code string

// The problem types the gateway answers (docs/api.md says what each means
// and what is left stored).
const (
	// Refusals of the request itself: nothing was stored; fix it.
	CodeInvalidRequest        Code = "invalid-request"         // 400; Fields names the fields
	CodeInvalidIdempotencyKey Code = "invalid-idempotency-key" // 400
	CodeUnauthorized          Code = "unauthorized"            // 401
	CodeForbidden             Code = "forbidden"               // 403
	CodeOriginNotAllowed      Code = "origin-not-allowed"      // 403
	CodeNotFound              Code = "not-found"               // 404
	CodeMethodNotAllowed      Code = "method-not-allowed"      // 405
	CodeRequestTooLarge       Code = "request-too-large"       // 413
	// The key: in flight (retried with the same key), or taken.
	CodeRequestInFlight        Code = "request-in-flight"        // 409, retried
	CodeIdempotencyKeyReused   Code = "idempotency-key-reused"   // 409: its answer expired; PaymentID or RefundID names the object
	CodeIdempotencyKeyMismatch Code = "idempotency-key-mismatch" // 422: the key was used with another body
	CodeCanceledByKey          Code = "canceled-by-key"          // 409: the key was canceled; nothing was or will be charged
	CodeConflict               Code = "conflict"                 // 409
	// What the payment allows.
	CodePSPCannotAccept          Code = "psp-cannot-accept"          // 422
	CodePaymentNotRefundable     Code = "payment-not-refundable"     // 409
	CodeRefundExceedsRefundable  Code = "refund-exceeds-refundable"  // 422
	CodePaymentNotConfirmable    Code = "payment-not-confirmable"    // 409; PaymentID
	CodeConfirmMismatch          Code = "confirm-mismatch"           // 422
	CodePaymentNotCapturable     Code = "payment-not-capturable"     // 409; PaymentID
	CodeAuthorizationExpired     Code = "authorization-expired"      // 409; PaymentID
	CodeCaptureExceedsAuthorized Code = "capture-exceeds-authorized" // 422
	CodePaymentNotCancelable     Code = "payment-not-cancelable"     // 409; PaymentID
	CodeNoticeRejected           Code = "notice-rejected"            // 400 (the PSPs' notifications only)
	// Transient: retried with the same key.
	CodeRateLimited        Code = "rate-limited"        // 429
	CodeInternal           Code = "internal"            // 500
	CodePSPOutcomeUnknown  Code = "psp-outcome-unknown" // 502
	CodePSPUnavailable     Code = "psp-unavailable"     // 503
	CodeServiceUnavailable Code = "service-unavailable" // 503
)

// Error is a call that ended without an answer to keep: a problem the
// gateway answered (Status ≥ 400), or no answer at all (Status 0, Err
// says why), after the retries the call allowed.
type Error struct {
	// Op is the request, "POST /payments/pay_…/refunds" (never its query).
	Op string
	// Status is the HTTP status of the last answer; 0 when none came.
	Status int
	// Type is the problem's type, "/problems/idempotency-key-mismatch";
	// Code is its last segment. Both are empty when the answer was no
	// problem document (a proxy's, say).
	Type   string
	Code   Code
	Title  string
	Detail string
	// Fields lists the invalid fields of a 400 or 422.
	Fields []FieldError
	// RequestID is the answer's X-Request-Id, under which the gateway logged
	// it: quote it when asking about the call.
	RequestID string
	// PaymentID and RefundID name the object a problem is about, when it
	// names one.
	PaymentID string
	RefundID  string
	// RetryAfter is the answer's Retry-After (0 when none).
	RetryAfter time.Duration
	// Attempts is how many requests the call sent.
	Attempts int
	// IdempotencyKey is the key the call sent (made for it when the caller
	// gave none): retrying the operation later with it replays what the
	// gateway did rather than doing it again. It is never in Error().
	IdempotencyKey string
	// Err is the transport failure of an attempt that got no answer, or
	// the decoding failure of an answer that could not be read.
	Err error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("gateway: ")
	if e.Op != "" {
		b.WriteString(e.Op)
		b.WriteString(": ")
	}
	switch {
	case e.Status == 0:
		fmt.Fprintf(&b, "no answer after %d attempt(s): %v", e.Attempts, e.Err)
	case e.Err != nil:
		fmt.Fprintf(&b, "%d: %v", e.Status, e.Err)
	default:
		fmt.Fprintf(&b, "%d", e.Status)
		if e.Code != "" {
			fmt.Fprintf(&b, " %s", e.Code)
		}
		if msg := cmp.Or(e.Detail, e.Title); msg != "" {
			fmt.Fprintf(&b, ": %s", msg)
		}
	}
	if e.RequestID != "" {
		fmt.Fprintf(&b, " (request %s)", e.RequestID)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// CodeOf is err's problem code when err is (or wraps) an *Error with a
// problem, else "".
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// IsRetryable reports whether err is worth retrying later with the same
// Idempotency-Key: no answer came, or the gateway answered 409
// request-in-flight, 429 or 5xx. The client has already retried it as
// often as it was allowed.
func IsRetryable(err error) bool {
	var e *Error
	return errors.As(err, &e) && (e.Status == 0 || e.transient())
}

// transient: the gateway answered that nothing is decided yet.
func (e *Error) transient() bool {
	switch {
	case e.Status == http.StatusConflict:
		return e.Code == CodeRequestInFlight
	case e.Status == http.StatusTooManyRequests:
		return true
	default:
		return e.Status >= 500
	}
}

// retryable: whether the client sends the call again after this answer.
// An operation the gateway does not deduplicate is sent again only after
// an answer that says nothing was done.
func (e *Error) retryable(replayable bool) bool {
	if replayable {
		return e.transient()
	}
	return e.Status == http.StatusTooManyRequests
}

// problemError reads a refusal: an RFC 9457 problem when it is one, else
// the bare status (a proxy's or load balancer's answer).
func problemError(status int, h http.Header, body []byte, now time.Time) *Error {
	e := &Error{Status: status, RequestID: h.Get("X-Request-Id")}
	if d, ok := parseRetryAfter(h.Get("Retry-After"), now); ok {
		e.RetryAfter = d
	}
	var p Problem
	mt, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	if (mt == "application/problem+json" || mt == "application/json") && json.Unmarshal(body, &p) == nil && p.Type != "" {
		e.Type, e.Code = p.Type, problemCode(p.Type)
		e.Title, e.Detail, e.Fields = p.Title, p.Detail, p.Errors
		e.PaymentID, e.RefundID = p.PaymentID, p.RefundID
		if e.RequestID == "" {
			e.RequestID = p.RequestID
		}
		return e
	}
	e.Title = http.StatusText(status)
	return e
}

// problemCode is a problem type's last path segment.
func problemCode(typ string) Code {
	return Code(typ[strings.LastIndexByte(typ, '/')+1:])
}

// parseRetryAfter reads Retry-After: delay-seconds or an HTTP date (RFC
// 9110 §10.2.3). A date in the past is no wait; anything else is absent.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if digits(v) {
		if len(v) > 9 { // past a decade: never waited for (MaxRetryAfter)
			return 1 << 62, true
		}
		var n int64
		for i := 0; i < len(v); i++ {
			n = n*10 + int64(v[i]-'0')
		}
		return time.Duration(n) * time.Second, true
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(0, at.Sub(now)), true
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}
