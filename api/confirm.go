package api

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"gateway/payments"
)

// confirmBody is the POST /payments/{id}/confirm body: the PSP client's
// result, and what the front end was told, for checking. Pointers tell a
// missing field from a zero one.
type confirmBody struct {
	// PaymentMethod is a payment method id (Stripe, the fake PSP);
	// PaymentKey is Toss's paymentKey. One of them, or neither when the
	// payment was created with its payment method.
	PaymentMethod *string `json:"payment_method"`
	PaymentKey    *string `json:"payment_key"`
	Amount        *int64  `json:"amount"`
	OrderID       *string `json:"order_id"`
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
	if out.Response.Status == http.StatusCreated {
		c.Response().Header().Set(echo.HeaderLocation, "/payments/"+out.PaymentID)
	}
	if out.Replayed {
		c.Response().Header().Set("Idempotent-Replayed", "true")
	}
	return c.Blob(out.Response.Status, echo.MIMEApplicationJSON, out.Response.Body)
}

// parseConfirm turns the request into the command, or a 4xx naming what to
// fix. It reads no state.
func (s *Server) parseConfirm(c echo.Context) (payments.ConfirmRequest, error) {
	key, present := c.Request().Header["Idempotency-Key"]
	if !present || len(key) != 1 {
		if !present {
			s.obs.MissingKey()
		}
		return payments.ConfirmRequest{}, &payments.Error{Code: payments.CodeInvalidKey,
			Message: "send exactly one Idempotency-Key header, 1 to 255 visible ASCII characters (a new one for the confirm: not the creation's)"}
	}
	var body confirmBody
	if err := s.decodeObject(c, &body); err != nil {
		return payments.ConfirmRequest{}, err
	}
	req := payments.ConfirmRequest{MerchantID: merchantOf(c).ID, PaymentID: c.Param("id"), IdempotencyKey: key[0], Amount: body.Amount}
	switch {
	case body.PaymentMethod != nil && body.PaymentKey != nil:
		return req, &payments.Error{Code: payments.CodeInvalid, Message: "the request body is invalid",
			Fields: []payments.FieldError{{Field: "payment_key", Reason: "send payment_method or payment_key, not both"}}}
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
