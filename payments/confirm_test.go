package payments_test

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"gateway/errs"
	"gateway/idemkeys"
	"gateway/payments"
	"gateway/psp"
)

// A payment to confirm later is another command than a charge now, and a
// one-step payment's fingerprint is what it always was: keys claimed
// before two-step checkout existed keep replaying.
func TestFingerprintOfConfirmLater(t *testing.T) {
	now := validRequest()
	later := validRequest()
	later.ConfirmLater = true
	if now.Fingerprint() == later.Fingerprint() {
		t.Fatal("confirm: false fingerprints like a charge now")
	}
	// The one-step fingerprint's fields, as they always were.
	fields := []string{"v1", "1999", "USD", "pm_card_visa", "Order #1001", "channel", "web", "order_id", "1001"}
	if validRequest().Fingerprint() != idemkeys.Fingerprint(fields...) {
		t.Fatal("the one-step fingerprint changed: stored keys would no longer replay")
	}
	later.PaymentMethod = ""
	if err := later.Validate(); err != nil {
		t.Fatalf("confirm: false without a payment method: %v", err)
	}
	now.PaymentMethod = ""
	if err := now.Validate(); errs.CodeOf(err) != errs.CodeInvalid {
		t.Fatalf("a charge now without a payment method: %v", err)
	}
}

func TestConfirmFingerprint(t *testing.T) {
	amount := int64(1000)
	base := payments.ConfirmRequest{PaymentID: "pay_1", PaymentMethod: "pm_card_ok", Amount: &amount, OrderID: "ord_1"}
	other := int64(1001)
	for name, r := range map[string]payments.ConfirmRequest{
		"another payment":        {PaymentID: "pay_2", PaymentMethod: "pm_card_ok", Amount: &amount, OrderID: "ord_1"},
		"another payment method": {PaymentID: "pay_1", PaymentMethod: "pm_card_declined", Amount: &amount, OrderID: "ord_1"},
		"another amount":         {PaymentID: "pay_1", PaymentMethod: "pm_card_ok", Amount: &other, OrderID: "ord_1"},
		"no amount":              {PaymentID: "pay_1", PaymentMethod: "pm_card_ok", OrderID: "ord_1"},
		"another order id":       {PaymentID: "pay_1", PaymentMethod: "pm_card_ok", Amount: &amount, OrderID: "ord_2"},
	} {
		if r.Fingerprint() == base.Fingerprint() {
			t.Errorf("%s: same fingerprint", name)
		}
	}
	same := base
	same.MerchantID, same.IdempotencyKey = "mer_other", "other-key" // the key's scope, not the command
	if same.Fingerprint() != base.Fingerprint() {
		t.Error("the fingerprint depends on the key's scope")
	}
}

// The front end starts the PSP's client with the amount in the PSP's own
// units: Stripe writes ISK with two decimals that must be 00.
func TestCheckoutAmountInThePSPsUnits(t *testing.T) {
	caps := psp.Capabilities{Name: "stripe", Currencies: []psp.Currency{{Code: "ISK", ISOExponent: 0, Exponent: 2}, {Code: "USD", ISOExponent: 2, Exponent: 2}},
		Checkout: psp.Checkout{Client: psp.ClientStripeJS, PublishableKey: "pk_test_1", ResultField: psp.ResultPaymentMethod}}
	p := payments.Payment{MerchantOrderID: "ord_1", Amount: payments.Money{Minor: 1000, Currency: "ISK"}}
	c, err := payments.CheckoutFor(p, caps)
	if err != nil || c.Amount != 100000 || c.Currency != "ISK" || c.PSP != "stripe" || c.PublishableKey != "pk_test_1" || c.ConfirmWith != "payment_method" || c.OrderID != "ord_1" {
		t.Fatalf("CheckoutFor = %+v, %v; want 100000 (hundredths of a króna)", c, err)
	}
	p.Amount.Currency = "KRW"
	if _, err := payments.CheckoutFor(p, caps); err == nil {
		t.Fatal("a currency the PSP does not take has a checkout")
	}
}

// What a payment shows depends on where it is: how to start the PSP's
// client while it awaits its confirmation, what the front end must do
// while it waits for the customer, and nothing of either once settled.
func TestViewOfTwoStepStatuses(t *testing.T) {
	expires := time.Date(2026, 11, 30, 13, 0, 0, 0, time.UTC)
	p := payments.Payment{ID: "pay_1", Status: payments.RequiresConfirmation, ExpiresAt: expires,
		Checkout:   &payments.Checkout{PSP: "fake", Client: psp.ClientNone, OrderID: "ord_1", Amount: 1, Currency: "KRW", ConfirmWith: "payment_method"},
		NextAction: &payments.NextAction{Type: "redirect", URL: "/3ds/x"}}
	fieldsOf := func(p payments.Payment) map[string]json.RawMessage {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(payments.Render(p).Body, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, tc := range []struct {
		status                   payments.Status
		code                     int
		checkout, expiry, action bool
	}{
		{payments.RequiresConfirmation, http.StatusAccepted, true, true, false},
		{payments.RequiresAction, http.StatusAccepted, false, false, true},
		{payments.Canceled, http.StatusPaymentRequired, false, true, false},
		{payments.Succeeded, http.StatusCreated, false, false, false},
	} {
		p.Status = tc.status
		m := fieldsOf(p)
		_, checkout := m["checkout"]
		_, expiry := m["expires_at"]
		_, action := m["next_action"]
		if checkout != tc.checkout || expiry != tc.expiry || action != tc.action || payments.Render(p).Status != tc.code {
			t.Errorf("%s: checkout %v, expires_at %v, next_action %v, status %d", tc.status, checkout, expiry, action, payments.Render(p).Status)
		}
	}
	if !payments.Canceled.Final() || payments.RequiresAction.Final() || payments.RequiresConfirmation.Final() {
		t.Error("Final: canceled is, requires_action and requires_confirmation are not")
	}
}
