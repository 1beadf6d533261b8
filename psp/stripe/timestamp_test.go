package stripe_test

import (
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"gateway/psp"
	"gateway/psp/stripe"
	"gateway/psp/stripe/stripetest"
)

// A signed timestamp more than five minutes from the adapter's clock is
// refused either way: an old one is a replay, and one from the future
// would stay replayable until it came close (stripe-go looks only back).
// A refused notification asks Stripe nothing.
func TestReadNoticeRefusesTimestampsFarFromNow(t *testing.T) {
	fake := stripetest.New(key)
	ts := httptest.NewServer(fake)
	t.Cleanup(ts.Close)
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	a, err := stripe.New(stripe.Config{SecretKey: key, BaseURL: ts.URL, WebhookSecret: whsec, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	c, err := a.Charge(t.Context(), psp.ChargeRequest{MerchantOrderID: "ord_000000000000000000000a09", Amount: 1500, Currency: "USD",
		PaymentMethod: "pm_card_visa"})
	if err != nil {
		t.Fatal(err)
	}
	body := fake.Event("payment_intent.succeeded", c.Reference)
	for _, at := range []time.Duration{10 * time.Minute, 5*time.Minute + time.Second, 24 * time.Hour, 100 * 365 * 24 * time.Hour,
		-5*time.Minute - time.Second, -10 * time.Minute} {
		before := len(fake.Requests())
		if _, err := a.ReadNotice(t.Context(), signed(body, whsec, now.Add(at)), body); !errors.Is(err, psp.ErrUnverified) {
			t.Errorf("signed %s from now: %v, want psp.ErrUnverified", at, err)
		}
		if n := len(fake.Requests()); n != before {
			t.Errorf("signed %s from now: %d requests to Stripe", at, n-before)
		}
	}
	for _, at := range []time.Duration{0, 4 * time.Minute, 5 * time.Minute, -4 * time.Minute, -5 * time.Minute} {
		n, err := a.ReadNotice(t.Context(), signed(body, whsec, now.Add(at)), body)
		if err != nil || len(n.Charges) != 1 {
			t.Errorf("signed %s from now: %+v, %v; want the charge", at, n, err)
		}
	}
}
