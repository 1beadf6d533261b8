package api

import (
	"github.com/labstack/echo/v4"

	"gateway/errs"
	"gateway/payments"
)

// confirmBody is the POST /payments/{id}/confirm body: the PSP client's
// result, and what the front end was told, for checking. Pointers tell a
// missing field from a zero one.
type confirmBody struct {
	// PaymentMethod is a payment method id (Stripe, the fake PSP);
	// PaymentKey is Toss's paymentKey. One of them, or neither when the
	// payment was created with its payment method.
	PaymentMethod *string `json:"payment_method,omitzero"`
	PaymentKey    *string `json:"payment_key,omitzero"`
	Amount        *int64  `json:"amount,omitzero"`
	OrderID       *string `json:"order_id,omitzero"`
}

func (s *Server) handleConfirmPayment(c echo.Context) error {
	req, err := s.parseConfirm(c)
	if err != nil {
		return err
	}
	out, err := s.svc.Confirm(c.Request().Context(), req)
	if err != nil {
		return err
	}
	if fromBrowser(c) {
		if out.Response.Body, err = browserAnswer(out.Response.Body); err != nil { // browserview.go
			return errs.Internal(err)
		}
	}
	// The answer may hold the PSP's client secret for the customer's browser.
	c.Response().Header().Set("Cache-Control", "no-store")
	return answer(c, out)
}

// parseConfirm turns the request into the command, or a 4xx naming what to
// fix. It reads no state.
func (s *Server) parseConfirm(c echo.Context) (payments.ConfirmRequest, error) {
	key, err := s.idempotencyKey(c, "a new one for the confirm, not the creation's")
	if err != nil {
		return payments.ConfirmRequest{}, err
	}
	var body confirmBody
	if err := s.decodeBody(c, &body); err != nil {
		return payments.ConfirmRequest{}, err
	}
	req := payments.ConfirmRequest{MerchantID: merchantOf(c).ID, PaymentID: c.Param("id"), IdempotencyKey: key, Amount: body.Amount}
	switch {
	case body.PaymentMethod != nil && body.PaymentKey != nil:
		return req, &errs.Error{Code: errs.CodeInvalid, Message: "the request body is invalid",
			Fields: []errs.FieldError{{Field: "payment_key", Reason: "send payment_method or payment_key, not both"}}}
	case body.PaymentMethod != nil:
		req.PaymentMethod = *body.PaymentMethod
	case body.PaymentKey != nil:
		req.PaymentMethod = *body.PaymentKey
	}
	if body.OrderID != nil {
		req.OrderID = *body.OrderID
	}
	return req, nil
}
