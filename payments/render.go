package payments

import (
	"encoding/json"
	"net/http"
	"time"

	"gateway/idemkeys"
)

// View is the payment object of the public API.
type View struct {
	ID              string            `json:"id"`
	Status          Status            `json:"status"`
	Amount          int64             `json:"amount"`
	Currency        string            `json:"currency"`
	PaymentMethod   string            `json:"payment_method"`
	MerchantOrderID string            `json:"merchant_order_id"`
	PSPReference    *string           `json:"psp_reference"`
	DeclineCode     *string           `json:"decline_code"`
	Description     string            `json:"description"`
	Metadata        map[string]string `json:"metadata"`
	// AmountRefunded is what succeeded refunds gave back; Refunded says it
	// is all of it.
	AmountRefunded int64  `json:"amount_refunded"`
	Refunded       bool   `json:"refunded"`
	CreatedAt      string `json:"created_at"`
}

// ToView renders p for the public API.
func ToView(p Payment) View {
	md := p.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return View{
		ID:              p.ID,
		Status:          p.Status,
		Amount:          p.Amount.Minor,
		Currency:        p.Amount.Currency,
		PaymentMethod:   p.PaymentMethod,
		MerchantOrderID: p.MerchantOrderID,
		PSPReference:    nullable(p.PSPReference),
		DeclineCode:     nullable(p.DeclineCode),
		Description:     p.Description,
		Metadata:        md,
		AmountRefunded:  p.AmountRefunded,
		Refunded:        p.AmountRefunded > 0 && p.AmountRefunded >= p.Amount.Minor,
		CreatedAt:       p.CreatedAt.UTC().Format(time.RFC3339Nano),
	}
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Render is the one function that turns a settled payment into the response
// stored for its idempotency key; the live path and every settlement path use
// it, so a replay never depends on who finished the payment.
func Render(p Payment) idemkeys.Response {
	body, err := json.Marshal(ToView(p))
	if err != nil {
		// A View holds only strings, integers and a string map: it always marshals.
		panic("payments: render: " + err.Error())
	}
	return idemkeys.Response{Status: StatusCode(p.Status), Body: body}
}

// StatusCode is the HTTP status a payment's creation answers with.
func StatusCode(s Status) int {
	switch s {
	case Succeeded:
		return http.StatusCreated
	case Declined, Failed:
		return http.StatusPaymentRequired
	}
	return http.StatusAccepted
}
