package api_test

import (
	"bytes"
	"net/http"
	"testing"
)

// A publishable key reads a payment as Stripe lets one read a
// PaymentIntent: everything the page needs (the description it shows
// included) but the merchant's metadata, empty in its answers, the
// confirm's and that answer's replays included (which stay byte for byte
// the first). The merchant's server reads everything, and the confirm's
// key replays the full answer to it.
func TestBrowserReadsCarryNoMetadata(t *testing.T) {
	e := newEnv(t)
	b := e.newBrowserSide(e.merch, shopOrigin)
	created := e.createLater("order-1", `{"amount": 1000, "currency": "KRW", "confirm": false, "description": "Order B-1", "metadata": {"customer": "cus_42", "risk": "high"}}`)

	read := e.browse(http.MethodGet, "/payments/"+created.ID, b.pk, created.ClientSecret, shopOrigin, nil, "")
	wantStatus(t, read, http.StatusOK)
	if v := decodeView(t, read.body); len(v.Metadata) != 0 || v.Description != "Order B-1" || v.Amount != 1000 {
		t.Fatalf("a browser's read: %s", read.body)
	}
	if bytes.Contains(read.body, []byte("cus_42")) {
		t.Fatalf("a browser's read carries the metadata: %s", read.body)
	}

	confirm := func(apiKey, secret, origin string) response {
		t.Helper()
		return e.browse(http.MethodPost, "/payments/"+created.ID+"/confirm", apiKey, secret, origin,
			map[string]string{"Idempotency-Key": "attempt-1"}, `{"payment_method": "pm_card_ok"}`)
	}
	first := confirm(b.pk, created.ClientSecret, shopOrigin)
	wantStatus(t, first, http.StatusCreated)
	if v := decodeView(t, first.body); len(v.Metadata) != 0 || v.Description != "Order B-1" || bytes.Contains(first.body, []byte("cus_42")) {
		t.Fatalf("a browser's confirm answered %s", first.body)
	}
	again := confirm(b.pk, created.ClientSecret, shopOrigin)
	if again.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(again.body, first.body) {
		t.Fatalf("the browser's replay: %s, want %s", again.body, first.body)
	}

	// The merchant's server: everything, by the same key too.
	server := e.get("/payments/" + created.ID)
	wantStatus(t, server, http.StatusOK)
	replay := confirm(e.apiKey, "", "")
	wantStatus(t, replay, http.StatusCreated)
	for _, res := range []response{server, replay} {
		if v := decodeView(t, res.body); v.Metadata["customer"] != "cus_42" || v.Metadata["risk"] != "high" {
			t.Fatalf("the merchant's read lost its metadata: %s", res.body)
		}
	}
	if n := e.count(`SELECT COUNT(*) FROM payments WHERE id = ? AND metadata LIKE '%cus_42%'`, created.ID); n != 1 {
		t.Fatal("the metadata is no longer stored")
	}
}
