package api

import (
	"github.com/labstack/echo/v4"

	"gateway/errs"
	"gateway/payments"
	"gateway/versions"
)

// Captures and voids of a payment (design §15): idempotent commands with
// keys of their own endpoints, answered with the payment as they left it.

// captureBody is the POST /payments/{id}/capture body: no amount captures
// the whole authorization.
type captureBody struct {
	AmountToCapture *int64 `json:"amount_to_capture,omitzero"`
}

func (s *Server) handleCapturePayment(c echo.Context) error {
	key, err := s.idempotencyKey(c, "one per capture")
	if err != nil {
		return err
	}
	var body captureBody
	if err := s.decodeBody(c, &body); err != nil {
		return err
	}
	out, err := s.svc.Capture(c.Request().Context(), payments.CaptureRequest{
		MerchantID: merchantOf(c).ID, PaymentID: c.Param("id"), IdempotencyKey: key, AmountToCapture: body.AmountToCapture,
	})
	if err != nil {
		return err
	}
	return answer(c, out)
}

// cancelBody is the POST /payments/{id}/cancel body: no reason says
// requested_by_customer.
type cancelBody struct {
	CancellationReason *string `json:"cancellation_reason,omitzero"`
}

func (s *Server) handleCancelPayment(c echo.Context) error {
	key, err := s.idempotencyKey(c, "one per cancellation")
	if err != nil {
		return err
	}
	var body cancelBody
	if err := s.decodeBody(c, &body); err != nil {
		return err
	}
	req := payments.CancelRequest{MerchantID: merchantOf(c).ID, PaymentID: c.Param("id"), IdempotencyKey: key}
	if body.CancellationReason != nil {
		req.Reason = *body.CancellationReason
	}
	out, err := s.svc.Cancel(c.Request().Context(), req)
	if err != nil {
		return err
	}
	return answer(c, out)
}

// cancelByKeyBody is the POST /payments/cancel_by_key body: the key of the
// POST /payments to cancel, and why.
type cancelByKeyBody struct {
	IdempotencyKey     *string `json:"idempotency_key,omitzero"`
	CancellationReason *string `json:"cancellation_reason,omitzero"`
}

func (s *Server) handleCancelByKey(c echo.Context) error {
	key, err := s.idempotencyKey(c, "one per cancellation; the key to cancel goes in the body")
	if err != nil {
		return err
	}
	var body cancelByKeyBody
	if err := s.decodeBody(c, &body); err != nil {
		return err
	}
	if body.IdempotencyKey == nil {
		return &errs.Error{Code: errs.CodeInvalid, Message: "the request body is invalid",
			Fields: []errs.FieldError{{Field: "idempotency_key", Reason: "is required: the Idempotency-Key of the POST /payments to cancel"}}}
	}
	req := payments.CancelByKeyRequest{MerchantID: merchantOf(c).ID, IdempotencyKey: key, Key: *body.IdempotencyKey}
	if body.CancellationReason != nil {
		req.Reason = *body.CancellationReason
	}
	out, err := s.svc.CancelByKey(c.Request().Context(), req)
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderCacheControl, "no-store")
	if out.Replayed {
		c.Response().Header().Set("Idempotent-Replayed", "true")
	}
	answer, err := storedAnswer(c, versions.KindCancellation, out)
	if err != nil {
		return err
	}
	return c.Blob(out.Response.Status, echo.MIMEApplicationJSON, answer)
}
