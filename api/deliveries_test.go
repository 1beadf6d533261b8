package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"gateway/webhooks"
)

// The delivery log and redeliveries through the API, every exchange
// checked against the published document.
func TestDeliveryLogAndRedeliveryAPI(t *testing.T) {
	e := newEnv(t, withWebhooks(time.Hour))
	ctx := context.Background()
	call := func(method, path, key, body string) response {
		t.Helper()
		hdr := map[string]string{}
		if key != "" {
			hdr["Idempotency-Key"] = key
		}
		res, err := e.do(ctx, method, path, e.apiKey, hdr, body)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	var ep struct{ ID string }
	res := call(http.MethodPost, "/webhook_endpoints", "", `{"url": "http://127.0.0.1:9/hooks", "event_types": ["*"]}`)
	wantStatus(t, res, http.StatusCreated)
	if err := json.Unmarshal(res.body, &ep); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, e.post("p", okBody), http.StatusCreated)
	var events struct {
		Data []struct{ ID, Type string }
	}
	if err := json.Unmarshal(e.get("/events").body, &events); err != nil || len(events.Data) == 0 {
		t.Fatalf("events: %v", err)
	}
	event := events.Data[0].ID

	// One delivery per event, one failed attempt of the first logged.
	if _, _, err := e.store.FanOut(ctx, 100); err != nil {
		t.Fatal(err)
	}
	claimed, err := e.store.ClaimDeliveries(ctx, webhooks.EndpointRef{MerchantID: e.merch.ID, ID: ep.ID}, 1, time.Minute)
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %d, %v", len(claimed), err)
	}
	if out, err := e.store.RecordFailed(ctx, claimed[0].Delivery, webhooks.Failure{HTTPStatus: 502, Error: "answered 502",
		Latency: 42 * time.Millisecond, Wait: time.Minute, MaxAge: time.Hour, DisableAfter: time.Hour}); err != nil || !out.Recorded {
		t.Fatalf("record: %+v, %v", out, err)
	}

	type attempt struct {
		Attempt    int     `json:"attempt"`
		HTTPStatus *int    `json:"http_status"`
		LatencyMS  int64   `json:"latency_ms"`
		Error      *string `json:"error"`
		Outcome    string  `json:"outcome"`
		Next       *string `json:"next_attempt_at"`
	}
	type delivery struct {
		ID, Status, Object string
		EventID            string    `json:"event_id"`
		EndpointID         string    `json:"endpoint_id"`
		AttemptCount       int       `json:"attempt_count"`
		NextAttemptAt      *string   `json:"next_attempt_at"`
		Attempts           []attempt `json:"attempts"`
	}
	var page struct {
		Data    []delivery
		HasMore bool `json:"has_more"`
	}
	res = call(http.MethodGet, "/webhook_endpoints/"+ep.ID+"/deliveries?limit=100", "", "")
	wantStatus(t, res, http.StatusOK)
	if err := json.Unmarshal(res.body, &page); err != nil || len(page.Data) != len(events.Data) || page.HasMore {
		t.Fatalf("deliveries: %s (%v)", res.body, err)
	}
	var tried *delivery
	for i := range page.Data {
		if page.Data[i].ID == claimed[0].Delivery.ID {
			tried = &page.Data[i]
		}
	}
	if tried == nil || tried.AttemptCount != 1 || len(tried.Attempts) != 1 || tried.NextAttemptAt == nil {
		t.Fatalf("the attempted delivery: %+v", tried)
	}
	if a := tried.Attempts[0]; a.Attempt != 1 || a.HTTPStatus == nil || *a.HTTPStatus != 502 || a.LatencyMS != 42 ||
		a.Error == nil || *a.Error != "answered 502" || a.Outcome != "failed" || a.Next == nil {
		t.Fatalf("its attempt: %+v", a)
	}
	wantProblem(t, call(http.MethodGet, "/webhook_endpoints/"+ep.ID+"/deliveries?limit=0", "", ""), http.StatusBadRequest, "invalid-request")
	wantProblem(t, call(http.MethodGet, "/webhook_endpoints/"+ep.ID+"/deliveries?status=failed", "", ""), http.StatusBadRequest, "invalid-request")
	wantProblem(t, call(http.MethodGet, "/webhook_endpoints/we_nope/deliveries", "", ""), http.StatusNotFound, "not-found")
	wantStatus(t, call(http.MethodOptions, "/webhook_endpoints/"+ep.ID+"/deliveries", "", ""), http.StatusNoContent)

	// A redelivery: once per key.
	body := `{"endpoint_id": "` + ep.ID + `"}`
	wantProblem(t, call(http.MethodPost, "/events/"+event+"/redeliver", "", body), http.StatusBadRequest, "invalid-idempotency-key")
	wantProblem(t, call(http.MethodPost, "/events/"+event+"/redeliver", "r-1", `{}`), http.StatusBadRequest, "invalid-request")
	wantProblem(t, call(http.MethodPost, "/events/"+event+"/redeliver", "r-1", `{"endpoint_id": "we_nope"}`), http.StatusNotFound, "not-found")
	first := call(http.MethodPost, "/events/"+event+"/redeliver", "r-1", body)
	wantStatus(t, first, http.StatusCreated)
	var made delivery
	if err := json.Unmarshal(first.body, &made); err != nil || made.Object != "webhook_delivery" || made.Status != "pending" ||
		made.EventID != event || made.EndpointID != ep.ID || made.AttemptCount != 0 || len(made.Attempts) != 0 {
		t.Fatalf("the redelivery: %s", first.body)
	}
	if loc := first.header.Get("Location"); loc != "/webhook_deliveries/"+made.ID {
		t.Fatalf("Location %q", loc)
	}
	got := call(http.MethodGet, "/webhook_deliveries/"+made.ID, "", "")
	wantStatus(t, got, http.StatusOK)
	wantProblem(t, call(http.MethodGet, "/webhook_deliveries/wd_01KB0000000000000000000000", "", ""), http.StatusNotFound, "not-found")
	wantStatus(t, call(http.MethodOptions, "/webhook_deliveries/"+made.ID, "", ""), http.StatusNoContent)
	retry := call(http.MethodPost, "/events/"+event+"/redeliver", "r-1", body)
	wantStatus(t, retry, http.StatusOK)
	var again delivery
	if err := json.Unmarshal(retry.body, &again); err != nil || again.ID != made.ID || retry.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the retry: %s %v", retry.body, retry.header)
	}
	if len(events.Data) > 1 {
		wantProblem(t, call(http.MethodPost, "/events/"+events.Data[1].ID+"/redeliver", "r-1", body), http.StatusUnprocessableEntity, "idempotency-key-mismatch")
	}
	_, other := e.newMerchant("Other")
	res, err = e.do(ctx, http.MethodPost, "/events/"+event+"/redeliver", other, map[string]string{"Idempotency-Key": "r-9"}, body)
	if err != nil {
		t.Fatal(err)
	}
	wantProblem(t, res, http.StatusNotFound, "not-found")
	wantStatus(t, call(http.MethodOptions, "/events/"+event+"/redeliver", "", ""), http.StatusNoContent)

	res = call(http.MethodGet, "/events/"+event+"/deliveries", "", "")
	wantStatus(t, res, http.StatusOK)
	if err := json.Unmarshal(res.body, &page); err != nil || len(page.Data) != 2 || page.Data[0].ID != made.ID {
		t.Fatalf("the event's deliveries, newest first: %s", res.body)
	}
	wantStatus(t, call(http.MethodOptions, "/events/"+event+"/deliveries", "", ""), http.StatusNoContent)
	if n := e.count(`SELECT COUNT(*) FROM webhook_deliveries WHERE event_id = ?`, event); n != 2 {
		t.Fatalf("%d deliveries of the event, want 2", n)
	}
}
