package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"gateway/errs"
)

// problemKind is one row of the error table: the HTTP status and the stable
// RFC 9457 problem type a client can branch on.
type problemKind struct {
	status int
	slug   string
	title  string
}

// problems is the single map from error codes to HTTP. docs/api.md's status
// table lists the same rows.
var problems = map[errs.Code]problemKind{
	errs.CodeInvalid:              {http.StatusBadRequest, "invalid-request", "The request body is invalid"},
	errs.CodeInvalidKey:           {http.StatusBadRequest, "invalid-idempotency-key", "The Idempotency-Key header is missing or invalid"},
	errs.CodeUnauthorized:         {http.StatusUnauthorized, "unauthorized", "Missing or invalid API key"},
	errs.CodeNotFound:             {http.StatusNotFound, "not-found", "Not found"},
	errs.CodeInFlight:             {http.StatusConflict, "request-in-flight", "A request with this Idempotency-Key is in progress"},
	errs.CodeKeyMismatch:          {http.StatusUnprocessableEntity, "idempotency-key-mismatch", "The Idempotency-Key was used with a different request"},
	errs.CodeKeyReused:            {http.StatusConflict, "idempotency-key-reused", "The Idempotency-Key belongs to an existing payment"},
	errs.CodePSPUnavailable:       {http.StatusServiceUnavailable, "psp-unavailable", "The payment provider did not process the payment"},
	errs.CodePSPUnknown:           {http.StatusBadGateway, "psp-outcome-unknown", "The payment provider did not confirm the outcome"},
	errs.CodeUnavailable:          {http.StatusServiceUnavailable, "service-unavailable", "The service is unavailable"},
	errs.CodeNotRefundable:        {http.StatusConflict, "payment-not-refundable", "The payment cannot be refunded now"},
	errs.CodeRefundExceeds:        {http.StatusUnprocessableEntity, "refund-exceeds-refundable", "The refund exceeds what is left to refund"},
	errs.CodeConflict:             {http.StatusConflict, "conflict", "The request conflicts with the current state"},
	errs.CodePSPCannotAccept:      {http.StatusUnprocessableEntity, "psp-cannot-accept", "The payment provider cannot accept this payment"},
	errs.CodeNotConfirmable:       {http.StatusConflict, "payment-not-confirmable", "The payment is not awaiting confirmation"},
	errs.CodeConfirmMismatch:      {http.StatusUnprocessableEntity, "confirm-mismatch", "The confirm does not match the payment"},
	errs.CodeNoticeRejected:       {http.StatusBadRequest, "notice-rejected", "The notification could not be verified"},
	errs.CodeNotCapturable:        {http.StatusConflict, "payment-not-capturable", "The payment is not an authorization that can be captured"},
	errs.CodeAuthorizationExpired: {http.StatusConflict, "authorization-expired", "The authorization expired before it was captured"},
	errs.CodeCaptureExceeds:       {http.StatusUnprocessableEntity, "capture-exceeds-authorized", "The capture exceeds the authorized amount"},
	errs.CodeCanceledByKey:        {http.StatusConflict, "canceled-by-key", "This Idempotency-Key was canceled"},
	errs.CodeNotCancelable:        {http.StatusConflict, "payment-not-cancelable", "The payment cannot be canceled"},
	errs.CodeInternal:             {http.StatusInternalServerError, "internal", "Internal error"},
	codeRateLimited:               {http.StatusTooManyRequests, "rate-limited", "Too many requests"},
	codeForbidden:                 {http.StatusForbidden, "forbidden", "These credentials cannot do this"},
	codeOriginNotAllowed:          {http.StatusForbidden, "origin-not-allowed", "Browser requests from this origin are not allowed"},
}

// codeRateLimited is the HTTP layer's own code: a limit is no domain outcome.
const codeRateLimited errs.Code = "rate_limited"

// Problems of the HTTP layer itself, with no domain code.
var (
	problemBodyTooLarge  = problemKind{http.StatusRequestEntityTooLarge, "request-too-large", "The request body is too large"}
	problemRouteNotFound = problemKind{http.StatusNotFound, "not-found", "Not found"}
	problemMethod        = problemKind{http.StatusMethodNotAllowed, "method-not-allowed", "Method not allowed"}
)

// ProblemTypeBase prefixes every problem type; docs/api.md documents each.
const ProblemTypeBase = "/problems/"

// problem is an application/problem+json body.
type problem struct {
	Type      string            `json:"type"`
	Title     string            `json:"title"`
	Status    int               `json:"status"`
	Detail    string            `json:"detail,omitempty"`
	Instance  string            `json:"instance,omitempty"`
	RequestID string            `json:"request_id,omitempty"`
	Errors    []errs.FieldError `json:"errors,omitempty"`
	PaymentID string            `json:"payment_id,omitempty"`
	RefundID  string            `json:"refund_id,omitempty"`
}

// handleError is echo's error handler: every error a handler returns, and
// every error echo raises itself, leaves as a problem.
func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	var (
		pe *errs.Error
		he *echo.HTTPError
		mb *http.MaxBytesError
		bu *bodyUnreadable
	)
	switch {
	case errors.Is(err, context.Canceled) && c.Request().Context().Err() != nil:
		// The client went away (or its connection broke) before the answer:
		// nothing of ours failed, and nobody reads this answer.
		s.log.InfoContext(c.Request().Context(), "client went away", "err", err, "path", c.Path())
		c.Response().Header().Set(echo.HeaderConnection, "close")
		s.writeProblem(c, problems[errs.CodeInvalid], problem{Detail: "the client closed the request before its answer"})
	case errors.As(err, &bu):
		s.log.InfoContext(c.Request().Context(), "request body unreadable", "err", bu.err, "path", c.Path())
		c.Response().Header().Set(echo.HeaderConnection, "close")
		s.writeProblem(c, problems[errs.CodeInvalid], problem{
			Detail: "the request body could not be read: it ended early, came too slowly or was malformed; send it again whole"})
	case errors.As(err, &pe):
		kind, ok := problems[pe.Code]
		if !ok {
			kind = problems[errs.CodeInternal]
		}
		detail := pe.Message
		if pe.PaymentID != "" {
			noteOf(c).paymentID = pe.PaymentID
		}
		switch {
		case kind.status < 500:
		case pe.Code == errs.CodeInternal || !ok:
			s.log.ErrorContext(c.Request().Context(), "request failed", "code", string(pe.Code), "err", pe.Err,
				"route", s.routeLabel(c))
			detail = "" // the cause is logged, never shown
		}
		// Any other 5xx is an answer the flow chose (the PSP's outcome
		// unknown, a database that cannot take the write yet): the client
		// retries, the flow has logged what it knows, and the access line,
		// at WARN, says which payment and which problem.
		if pe.RetryAfter > 0 {
			c.Response().Header().Set("Retry-After", strconv.Itoa(int((pe.RetryAfter+time.Second-1)/time.Second)))
		}
		if pe.Code == errs.CodeUnauthorized {
			c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="gateway"`)
		}
		s.writeProblem(c, kind, problem{Detail: detail, Errors: pe.Fields, PaymentID: pe.PaymentID, RefundID: pe.RefundID})
	case errors.As(err, &mb):
		s.writeProblem(c, problemBodyTooLarge, problem{Detail: "the limit is " + strconv.FormatInt(mb.Limit, 10) + " bytes"})
	case errors.As(err, &he):
		switch he.Code {
		case http.StatusNotFound:
			s.writeProblem(c, problemRouteNotFound, problem{})
		case http.StatusMethodNotAllowed:
			s.writeProblem(c, problemMethod, problem{})
		default:
			// No route of ours raises any other echo error; should one appear, it is a bug.
			s.log.ErrorContext(c.Request().Context(), "unexpected echo error", "err", err, "route", s.routeLabel(c))
			s.writeProblem(c, problems[errs.CodeInternal], problem{})
		}
	default:
		s.log.ErrorContext(c.Request().Context(), "request failed", "err", err, "route", s.routeLabel(c))
		s.writeProblem(c, problems[errs.CodeInternal], problem{})
	}
}

func (s *Server) writeProblem(c echo.Context, kind problemKind, p problem) {
	noteOf(c).problem = kind.slug
	p.Type = ProblemTypeBase + kind.slug
	p.Title = kind.title
	p.Status = kind.status
	p.Instance = c.Request().URL.EscapedPath() // a URI reference: percent-encoded, as the request named it
	p.RequestID = requestID(c)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	err := enc.Encode(p)
	body := bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
	if err != nil {
		body = []byte(`{"type":"` + ProblemTypeBase + `internal","status":500}`)
	}
	if err := c.Blob(kind.status, "application/problem+json", body); err != nil {
		// The client went away: nothing the server could do better.
		s.log.InfoContext(c.Request().Context(), "write problem", "err", err)
	}
}
