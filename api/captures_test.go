package api_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
)

const manualBody = `{"amount": 1000, "currency": "KRW", "payment_method": "pm_card_ok", "capture_method": "manual"}`

// command posts body to path with an Idempotency-Key, as the merchant (or apiKey).
func (e *env) command(path, apiKey, key, body string) response {
	e.t.Helper()
	res, err := e.do(e.t.Context(), http.MethodPost, path, apiKey, map[string]string{"Idempotency-Key": key}, body)
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

// Authorize, capture part, replay, refuse what the state refuses, cancel
// another authorization: every answer as the contract says.
func TestCaptureAndCancelOverHTTP(t *testing.T) {
	e := newEnv(t)
	auth := e.post("a", manualBody)
	wantStatus(t, auth, http.StatusCreated)
	p := decodeView(t, auth.body)
	if p.Status != "requires_capture" || !strings.Contains(string(auth.body), `"amount_capturable":1000`) {
		t.Fatalf("authorization %s", auth.body)
	}
	path := "/payments/" + p.ID
	wantProblem(t, e.command(path+"/capture", e.apiKey, "c", `{"amount_to_capture": 1001}`), http.StatusUnprocessableEntity, "capture-exceeds-authorized")
	wantProblem(t, e.command(path+"/capture", e.apiKey, "c", `{"amount_to_capture": null}`), http.StatusBadRequest, "invalid-request")
	captured := e.command(path+"/capture", e.apiKey, "c", `{"amount_to_capture": 400}`)
	wantStatus(t, captured, http.StatusCreated)
	if !strings.Contains(string(captured.body), `"amount_captured":400`) || !strings.Contains(string(captured.body), `"status":"succeeded"`) {
		t.Fatalf("capture %s", captured.body)
	}
	again := e.command(path+"/capture", e.apiKey, "c", `{"amount_to_capture": 400}`)
	if again.status != http.StatusCreated || !bytes.Equal(again.body, captured.body) || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay %d %s", again.status, again.body)
	}
	wantProblem(t, e.command(path+"/capture", e.apiKey, "c", `{}`), http.StatusUnprocessableEntity, "idempotency-key-mismatch")
	wantProblem(t, e.command(path+"/capture", e.apiKey, "c2", `{}`), http.StatusConflict, "payment-not-capturable")
	wantProblem(t, e.command(path+"/cancel", e.apiKey, "v", `{}`), http.StatusConflict, "payment-not-cancelable")

	other := decodeView(t, e.post("b", manualBody).body)
	_, otherKey := e.newMerchant("other shop")
	wantProblem(t, e.command("/payments/"+other.ID+"/cancel", otherKey, "v", `{}`), http.StatusNotFound, "not-found")
	wantProblem(t, e.command("/payments/"+other.ID+"/capture", otherKey, "c", `{}`), http.StatusNotFound, "not-found")
	wantProblem(t, e.command("/payments/"+other.ID+"/cancel", e.apiKey, "v", `{"cancellation_reason": "bored"}`), http.StatusBadRequest, "invalid-request")
	canceled := e.command("/payments/"+other.ID+"/cancel", e.apiKey, "v", `{"cancellation_reason": "duplicate"}`)
	wantStatus(t, canceled, http.StatusOK)
	if !strings.Contains(string(canceled.body), `"status":"canceled"`) || !strings.Contains(string(canceled.body), `"cancellation_reason":"duplicate"`) {
		t.Fatalf("cancel %s", canceled.body)
	}
	wantProblem(t, e.command("/payments/"+other.ID+"/capture", e.apiKey, "c3", `{}`), http.StatusConflict, "payment-not-capturable")
	if n := e.psp.CapturesOf(p.MerchantOrderID); n != 1 {
		t.Fatalf("%d captures at the PSP", n)
	}
}

// Cancel-by-key over HTTP: a key canceled before its request answers every
// request with it with the cancellation's problem; a paid payment's key is
// refunded in full.
func TestCancelByKeyOverHTTP(t *testing.T) {
	e := newEnv(t)
	canceled := e.command("/payments/cancel_by_key", e.apiKey, "c1", `{"idempotency_key": "late", "cancellation_reason": "abandoned"}`)
	wantStatus(t, canceled, http.StatusOK)
	if !strings.Contains(string(canceled.body), `"status":"canceled"`) || !strings.Contains(string(canceled.body), `"payment":null`) {
		t.Fatalf("cancellation %s", canceled.body)
	}
	wantProblem(t, e.post("late", okBody), http.StatusConflict, "canceled-by-key")
	wantProblem(t, e.command("/payments/cancel_by_key", e.apiKey, "c2", `{"idempotency_key": "late"}`), http.StatusConflict, "conflict")
	wantProblem(t, e.command("/payments/cancel_by_key", e.apiKey, "c3", `{}`), http.StatusBadRequest, "invalid-request")

	wantStatus(t, e.post("paid", okBody), http.StatusCreated)
	// Another merchant's cancellation of the same key is of its own key:
	// it cancels nothing of this merchant's.
	_, otherKey := e.newMerchant("other shop")
	theirs := e.command("/payments/cancel_by_key", otherKey, "c4", `{"idempotency_key": "paid"}`)
	wantStatus(t, theirs, http.StatusOK)
	if !strings.Contains(string(theirs.body), `"payment":null`) {
		t.Fatalf("another merchant's cancellation %s", theirs.body)
	}
	refunded := e.command("/payments/cancel_by_key", e.apiKey, "c4", `{"idempotency_key": "paid"}`)
	wantStatus(t, refunded, http.StatusOK)
	if !strings.Contains(string(refunded.body), `"status":"refunded"`) || !strings.Contains(string(refunded.body), `"amount_refunded":1000`) {
		t.Fatalf("cancellation %s", refunded.body)
	}
	if n := e.psp.ChargeCount(); n != 1 {
		t.Fatalf("%d charges", n)
	}
}
