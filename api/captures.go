package api

import (
	"github.com/labstack/echo/v4"

	"gateway/payments"
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
