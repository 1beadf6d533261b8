package api_test

import (
	"encoding/json"
	"net/http"
	"testing"
)

type refundView struct {
	ID        string `json:"id"`
	PaymentID string `json:"payment_id"`
	Amount    int64  `json:"amount"`
	Status    string `json:"status"`
}

type listOf[T any] struct {
	Object  string `json:"object"`
	Data    []T    `json:"data"`
	HasMore bool   `json:"has_more"`
}

func decodeJSON[T any](t *testing.T, body []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return v
}

// Refunds over HTTP: create, replay, refuse, read, list; another merchant
// can neither refund nor read nor list them. Every exchange is checked
// against the OpenAPI document.
func TestRefundsOverHTTP(t *testing.T) {
	e := newEnv(t)
	pay := decodeView(t, e.post("p", okBody).body) // 1000 KRW
	path := "/payments/" + pay.ID + "/refunds"
	refund := func(apiKey, key, body string) response {
		t.Helper()
		res, err := e.do(t.Context(), http.MethodPost, path, apiKey, map[string]string{"Idempotency-Key": key}, body)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	first := refund(e.apiKey, "r1", `{"amount": 300, "reason": "one item returned", "metadata": {"rma": "7"}}`)
	wantStatus(t, first, http.StatusCreated)
	r := decodeJSON[refundView](t, first.body)
	if r.PaymentID != pay.ID || r.Amount != 300 || r.Status != "succeeded" || first.header.Get("Location") != "/refunds/"+r.ID {
		t.Fatalf("refund %s, Location %q", first.body, first.header.Get("Location"))
	}
	again := refund(e.apiKey, "r1", `{"reason": "one item returned", "amount": 300, "metadata": {"rma": "7"}}`)
	if again.status != http.StatusCreated || string(again.body) != string(first.body) || again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %s", again.status, again.body)
	}
	wantProblem(t, refund(e.apiKey, "r1", `{"amount": 301}`), http.StatusUnprocessableEntity, "idempotency-key-mismatch")
	wantProblem(t, refund(e.apiKey, "r2", `{"amount": 701}`), http.StatusUnprocessableEntity, "refund-exceeds-refundable")
	wantProblem(t, refund(e.apiKey, "r2", `{"amount": 0}`), http.StatusBadRequest, "invalid-request")
	wantProblem(t, refund(e.apiKey, "r2", `{"amount": 1, "currency": "KRW"}`), http.StatusBadRequest, "invalid-request")
	rest := refund(e.apiKey, "r2", `{}`) // the whole remainder
	wantStatus(t, rest, http.StatusCreated)
	if got := decodeJSON[refundView](t, rest.body); got.Amount != 700 {
		t.Fatalf("the rest refunded %d", got.Amount)
	}
	wantProblem(t, refund(e.apiKey, "r3", `{}`), http.StatusConflict, "payment-not-refundable")
	if v := decodeView(t, e.get("/payments/"+pay.ID).body); !v.Refunded || v.AmountRefunded != 1000 {
		t.Fatalf("payment after full refund: %+v", v)
	}

	wantStatus(t, e.get("/refunds/"+r.ID), http.StatusOK)
	byPayment := decodeJSON[listOf[refundView]](t, e.get(path).body)
	all := decodeJSON[listOf[refundView]](t, e.get("/refunds?limit=1").body)
	if len(byPayment.Data) != 2 || len(all.Data) != 1 || !all.HasMore || all.Object != "list" {
		t.Fatalf("listings: %+v %+v", byPayment, all)
	}
	next := decodeJSON[listOf[refundView]](t, e.get("/refunds?limit=1&starting_after="+all.Data[0].ID).body)
	if len(next.Data) != 1 || next.HasMore || next.Data[0].ID == all.Data[0].ID {
		t.Fatalf("second page: %+v", next)
	}
	payments := decodeJSON[listOf[map[string]any]](t, e.get("/payments?status=succeeded").body)
	if len(payments.Data) != 1 {
		t.Fatalf("payments listing: %+v", payments)
	}
	wantProblem(t, e.get("/payments?limit=500"), http.StatusBadRequest, "invalid-request")
	wantProblem(t, e.get("/refunds?colour=blue"), http.StatusBadRequest, "invalid-request")

	// Another merchant sees none of it.
	_, other := e.newMerchant("Other")
	wantProblem(t, refund(other, "x", `{}`), http.StatusNotFound, "not-found")
	for _, p := range []string{"/refunds/" + r.ID, path} {
		res, err := e.do(t.Context(), http.MethodGet, p, other, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		wantProblem(t, res, http.StatusNotFound, "not-found")
	}
	for _, p := range []string{"/refunds", "/payments"} {
		res, err := e.do(t.Context(), http.MethodGet, p, other, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		if l := decodeJSON[listOf[map[string]any]](t, res.body); len(l.Data) != 0 {
			t.Fatalf("another merchant lists %d objects at %s", len(l.Data), p)
		}
	}
	if got := e.count(`SELECT COUNT(*) FROM refunds`); got != 2 {
		t.Fatalf("%d refunds stored", got)
	}
}
