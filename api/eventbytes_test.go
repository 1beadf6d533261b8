package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"gateway/payments"
	"gateway/webhooks"
)

// A webhook delivery's body is byte for byte what GET /events/{id} answers
// for its event, as the docs promise: no trailing newline on one side only,
// no escaping on one side only (a description with <, > and &).
func TestWebhookDeliveryIsTheEventAsGETAnswersIt(t *testing.T) {
	e := newEnv(t, withWebhooks(time.Hour))
	var (
		mu   sync.Mutex
		got  = map[string][]byte{}
		recv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			mu.Lock()
			got[r.Header.Get(webhooks.EventIDHeader)] = body
			mu.Unlock()
			w.WriteHeader(http.StatusNoContent)
		}))
	)
	t.Cleanup(recv.Close)
	wantStatus(t, e.mustDo(http.MethodPost, "/webhook_endpoints", "", `{"url": "`+recv.URL+`/hooks", "event_types": ["*"]}`), http.StatusCreated)
	pay := decodeView(t, e.post("p", strings.Replace(okBody, "Order A-1", "<b>Tom & Jerry</b>", 1)).body)
	wantStatus(t, e.mustDo(http.MethodPost, "/payments/"+pay.ID+"/refunds", "r", `{"amount": 100, "reason": "a <returned> item & more"}`), http.StatusCreated)

	key, _ := webhooks.ParseKey(strings.Repeat("ab", 32)) // withWebhooks's
	cipher, _ := webhooks.NewCipher(key)
	d := webhooks.NewDispatcher(e.store, cipher, webhooks.NewGuard([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, nil),
		webhooks.Config{Timeout: 5 * time.Second, Jitter: func() float64 { return 0 }})
	if err := d.RunOnce(t.Context()); err != nil {
		t.Fatal(err)
	}
	events := decodeJSON[listOf[json.RawMessage]](t, e.get("/events?limit=100").body).Data
	if len(events) != 4 || len(got) != len(events) {
		t.Fatalf("%d events listed, %d delivered; want 4 of each", len(events), len(got))
	}
	for _, listed := range events {
		id := decodeJSON[eventView](t, listed).ID
		res := e.get("/events/" + id)
		wantStatus(t, res, http.StatusOK)
		if !bytes.Equal(got[id], res.body) {
			t.Errorf("event %s:\ndelivered      %q\nGET /events/%s %q", id, got[id], id, res.body)
		}
		if !bytes.Equal(listed, res.body) {
			t.Errorf("event %s: listed as %q, read as %q", id, listed, res.body)
		}
	}
	if n := e.count(`SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'delivered'`); n != 4 {
		t.Fatalf("%d deliveries delivered, want 4", n)
	}
}

// Stripe's PaymentIntent client secret reaches the customer's browser from
// the confirm's answer and the payment's own reads, never from an event:
// the payment.requires_action event, GET /events and so every webhook
// delivery (rendered from the events table) carry the next action without it.
func TestPSPClientSecretStaysOutOfEvents(t *testing.T) {
	e := newStripeEnv(t, nil)
	v := e.createLater("k", usdLater)
	res := e.confirm(v.ID, "c", `{"payment_method": "pm_card_authenticationRequired"}`)
	wantStatus(t, res, http.StatusAccepted)
	answered := decodeView(t, res.body)
	if answered.Status != payments.RequiresAction || answered.NextAction == nil || answered.NextAction.ClientSecret == "" {
		t.Fatalf("confirm answered %s", res.body)
	}
	secret := answered.NextAction.ClientSecret
	if read := decodeView(t, e.get("/payments/"+v.ID).body); read.NextAction == nil || read.NextAction.ClientSecret != secret {
		t.Fatalf("the payment's read lost the next action's secret: %+v", read.NextAction)
	}
	var action eventView
	for _, ev := range e.pageAll(e.apiKey, "&object_id="+v.ID, 100) {
		if ev.Type == string(payments.EventPaymentRequiresAction) {
			action = ev
		}
	}
	if action.ID == "" {
		t.Fatal("no payment.requires_action event")
	}
	one := e.get("/events/" + action.ID)
	wantStatus(t, one, http.StatusOK)
	if bytes.Contains(one.body, []byte(secret)) || bytes.Contains(one.body, []byte("client_secret")) {
		t.Fatalf("the event carries a client secret: %s", one.body)
	}
	if na, _ := action.Data["next_action"].(map[string]any); na["type"] != "use_stripe_sdk" {
		t.Fatalf("the event lost the next action itself: %v", action.Data)
	}
	if n := e.count(`SELECT COUNT(*) FROM events WHERE data LIKE '%secret%'`); n != 0 {
		t.Fatalf("%d stored events hold a client secret", n)
	}
}
