package stripe_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"

	"gateway/psp"
	"gateway/psp/stripe"
	"gateway/psp/stripe/stripetest"
)

const whsec = "whsec_test_gateway"

func withWebhooks(t *testing.T, h http.Handler) *stripe.Adapter {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	a, err := stripe.New(stripe.Config{SecretKey: key, BaseURL: ts.URL, WebhookSecret: whsec})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// signed is a webhook request's header and body as Stripe sends them.
func signed(body []byte, secret string, at time.Time) http.Header {
	p := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: at})
	return http.Header{"Stripe-Signature": {p.Header}, "Content-Type": {"application/json; charset=utf-8"}}
}

// A notification is read from Stripe as it stands now, whatever the
// event's own snapshot says: an event that arrives late (its snapshot still
// waiting for 3-D Secure) reads the settled PaymentIntent.
func TestReadNoticeFetchesTheIntent(t *testing.T) {
	fake := stripetest.New(key)
	a := withWebhooks(t, fake)
	const order = "ord_000000000000000000000a01"
	c, err := a.Charge(t.Context(), psp.ChargeRequest{MerchantOrderID: order, Amount: 1500, Currency: "USD",
		PaymentMethod: "pm_card_authenticationRequired", AllowNextAction: true})
	if err != nil || c.Status != psp.Pending || c.NextAction == nil || c.NextAction.ClientSecret == "" {
		t.Fatalf("charge = %+v, %v; want pending with a next action", c, err)
	}
	stale := fake.Event("payment_intent.requires_action", c.Reference)
	fake.Authenticate(order, true)
	fresh := fake.Event("payment_intent.succeeded", c.Reference)
	for name, body := range map[string][]byte{"in order": fresh, "late, with a stale snapshot": stale} {
		n, err := a.ReadNotice(t.Context(), signed(body, whsec, time.Now()), body)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(n.Charges) != 1 || len(n.Refunds) != 0 {
			t.Fatalf("%s: notice %+v, want one charge", name, n)
		}
		got := n.Charges[0]
		if got.MerchantOrderID != order || got.Status != psp.Succeeded || got.Amount != 1500 || got.Currency != "USD" || got.Reference != c.Reference {
			t.Fatalf("%s: charge %+v, want %s succeeded 1500 USD", name, got, order)
		}
	}
}

// Only a request signed with the endpoint's secret, recently, is read; a
// refused one fetches nothing.
func TestReadNoticeVerifiesTheSignature(t *testing.T) {
	fake := stripetest.New(key)
	a := withWebhooks(t, fake)
	c, err := a.Charge(t.Context(), psp.ChargeRequest{MerchantOrderID: "ord_000000000000000000000a02", Amount: 1500, Currency: "USD",
		PaymentMethod: "pm_card_visa"})
	if err != nil {
		t.Fatal(err)
	}
	body := fake.Event("payment_intent.succeeded", c.Reference)
	before := len(fake.Requests())
	for name, tc := range map[string]struct {
		header http.Header
		body   []byte
	}{
		"another secret":       {signed(body, "whsec_someone_else", time.Now()), body},
		"no signature":         {http.Header{}, body},
		"malformed signature":  {http.Header{"Stripe-Signature": {"v1=zz"}}, body},
		"a replayed old event": {signed(body, whsec, time.Now().Add(-10*time.Minute)), body},
		"a tampered body":      {signed(body, whsec, time.Now()), []byte(strings.Replace(string(body), `"succeeded"`, `"canceled"`, 1))},
	} {
		if _, err := a.ReadNotice(t.Context(), tc.header, tc.body); !errors.Is(err, psp.ErrUnverified) {
			t.Errorf("%s: %v, want psp.ErrUnverified", name, err)
		}
	}
	unset, err := stripe.New(stripe.Config{SecretKey: key, BaseURL: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unset.ReadNotice(t.Context(), signed(body, whsec, time.Now()), body); !errors.Is(err, psp.ErrUnverified) {
		t.Errorf("no secret configured: %v, want psp.ErrUnverified", err)
	}
	if n := len(fake.Requests()); n != before {
		t.Fatalf("refused notifications made %d requests to Stripe", n-before)
	}
}

// Refund events read every refund of the PaymentIntent the gateway made,
// as Stripe lists them now.
func TestReadNoticeRefunds(t *testing.T) {
	fake := stripetest.New(key)
	a := withWebhooks(t, fake)
	const order = "ord_000000000000000000000a03"
	c, err := a.Charge(t.Context(), psp.ChargeRequest{MerchantOrderID: order, Amount: 5000, Currency: "USD", PaymentMethod: "pm_card_visa"})
	if err != nil {
		t.Fatal(err)
	}
	fake.SetRefundsPending(true)
	const refund = "rfd_000000000000000000000a03"
	r, err := a.Refund(t.Context(), psp.RefundRequest{RefundOrderID: refund, MerchantOrderID: order, ChargeReference: c.Reference, Amount: 2000, Currency: "USD"})
	if err != nil || r.Status != psp.RefundPending {
		t.Fatalf("refund = %+v, %v; want pending", r, err)
	}
	fake.FinishRefund(refund, "succeeded")
	body := fake.Event("refund.updated", r.Reference)
	n, err := a.ReadNotice(t.Context(), signed(body, whsec, time.Now()), body)
	if err != nil {
		t.Fatal(err)
	}
	if len(n.Charges) != 0 || len(n.Refunds) != 1 {
		t.Fatalf("notice %+v, want one refund", n)
	}
	if got := n.Refunds[0]; got.RefundOrderID != refund || got.MerchantOrderID != order || got.Status != psp.RefundSucceeded || got.Amount != 2000 {
		t.Fatalf("refund %+v, want %s succeeded 2000", got, refund)
	}
}

// What the gateway did not make, or cannot read, is skipped, not an error:
// the notification is acknowledged and nothing is settled from it.
func TestReadNoticeSkipsForeignObjects(t *testing.T) {
	fake := stripetest.New(key)
	a := withWebhooks(t, fake)
	// A PaymentIntent made by another system on the account: no order id.
	form := url.Values{"amount": {"700"}, "currency": {"usd"}, "payment_method": {"pm_card_visa"}, "confirm": {"true"},
		"automatic_payment_methods[enabled]": {"true"}, "automatic_payment_methods[allow_redirects]": {"never"}}
	req, _ := http.NewRequest(http.MethodPost, "/v1/payment_intents", strings.NewReader(form.Encode()))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	rec := httptest.NewRecorder()
	fake.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("create: %d %s", rec.Code, rec.Body)
	}
	foreign := fake.Event("payment_intent.succeeded", "pi_1")
	customer := []byte(`{"id":"evt_c","object":"event","type":"customer.created","data":{"object":{"id":"cus_1","object":"customer"}}}`)
	missing := []byte(`{"id":"evt_m","object":"event","type":"payment_intent.succeeded","data":{"object":{"id":"pi_404","object":"payment_intent"}}}`)
	for name, body := range map[string][]byte{"another system's intent": foreign, "not a payment": customer, "an intent Stripe does not have": missing} {
		n, err := a.ReadNotice(t.Context(), signed(body, whsec, time.Now()), body)
		if err != nil || len(n.Charges) != 0 || len(n.Refunds) != 0 || len(n.Skipped) == 0 {
			t.Errorf("%s: %+v, %v; want it skipped", name, n, err)
		}
	}
}

// Stripe that cannot be asked is a failure to retry (the notification is
// not acknowledged), never "nothing happened".
func TestReadNoticeStripeUnavailable(t *testing.T) {
	fake := stripetest.New(key)
	a := withWebhooks(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			stripetest.Error(w, http.StatusServiceUnavailable, "api_error", "", "", "The service is temporarily unavailable.")
			return
		}
		fake.ServeHTTP(w, r)
	}))
	c, err := a.Charge(t.Context(), psp.ChargeRequest{MerchantOrderID: "ord_000000000000000000000a04", Amount: 1500, Currency: "USD", PaymentMethod: "pm_card_visa"})
	if err != nil {
		t.Fatal(err)
	}
	body := fake.Event("payment_intent.succeeded", c.Reference)
	_, err = a.ReadNotice(t.Context(), signed(body, whsec, time.Now()), body)
	if class, ok := psp.ClassOf(err); !ok || class == psp.Rejected || errors.Is(err, psp.ErrUnverified) {
		t.Fatalf("ReadNotice with Stripe down = %v, want a NotProcessed or Unknown *psp.Error", err)
	}
}
