package payments

import (
	"bytes"
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
	// Two-step checkout: ExpiresAt and Checkout while the payment awaits
	// its confirmation (ExpiresAt stays on a canceled one), NextAction
	// while it waits for the customer.
	ExpiresAt  *string     `json:"expires_at,omitempty"`
	Checkout   *Checkout   `json:"checkout,omitempty"`
	NextAction *NextAction `json:"next_action,omitempty"`
	// ClientSecret is in the answer that created a two-step payment, and
	// nowhere else: the merchant's server hands it to the customer's browser.
	ClientSecret string `json:"client_secret,omitempty"`
	// Manual capture (capture_method "manual" only): what can still be
	// captured (the whole authorization while it can be), what was, and
	// until when.
	CaptureMethod    CaptureMethod `json:"capture_method,omitempty"`
	AmountCapturable *int64        `json:"amount_capturable,omitempty"`
	AmountCaptured   *int64        `json:"amount_captured,omitempty"`
	CaptureBefore    *string       `json:"capture_before,omitempty"`
	// CancellationReason says why a canceled payment was canceled, when it
	// was by a void or an authorization's lapse.
	CancellationReason *string `json:"cancellation_reason,omitempty"`
	// Attempts are where the payment was sent: each attempt's account,
	// order id, outcome and PSP reference, the current one last (design §16).
	Attempts []AttemptView `json:"attempts"`
}

// ToView renders p for the public API.
func ToView(p Payment) View {
	md := p.Metadata
	if md == nil {
		md = map[string]string{}
	}
	v := View{
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
		ClientSecret:    p.ClientSecret,
		Attempts:        attemptViews(p),
	}
	if p.Manual() {
		capturable, captured := int64(0), p.Captured()
		if p.Status == RequiresCapture {
			capturable = p.Amount.Minor
		}
		v.CaptureMethod, v.AmountCapturable, v.AmountCaptured = CaptureManual, &capturable, &captured
		if !p.CaptureBefore.IsZero() {
			at := p.CaptureBefore.UTC().Format(time.RFC3339Nano)
			v.CaptureBefore = &at
		}
	}
	v.CancellationReason = nullable(p.CancellationReason)
	switch p.Status {
	case RequiresConfirmation:
		v.Checkout = p.Checkout
		fallthrough
	case Canceled:
		if !p.ExpiresAt.IsZero() {
			at := p.ExpiresAt.UTC().Format(time.RFC3339Nano)
			v.ExpiresAt = &at
		}
	case RequiresAction:
		v.NextAction = p.NextAction
	}
	return v
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
	body, err := encodeJSON(ToView(p))
	if err != nil {
		// A View holds only strings, integers and a string map: it always marshals.
		panic("payments: render: " + err.Error())
	}
	return idemkeys.Response{Status: StatusCode(p.Status), Body: body}
}

// encodeJSON is how answers are written: without json.Marshal's HTML
// escaping, which turns each of <, > and & into six bytes (an answer is
// never embedded in HTML; its Content-Type says JSON), so a stored answer
// stays the size of the text it holds.
func encodeJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// StatusCode is the HTTP status a payment's creation answers with.
func StatusCode(s Status) int {
	switch s {
	case Succeeded, RequiresCapture:
		return http.StatusCreated
	case Declined, Failed, Canceled:
		return http.StatusPaymentRequired
	}
	return http.StatusAccepted
}
