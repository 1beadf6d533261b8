package api_test

import (
	"fmt"
	"net/http"
	"slices"
	"testing"

	"gateway/payments"
)

// eventView is an event as a client decodes it.
type eventView struct {
	ID         string         `json:"id"`
	Type       string         `json:"type"`
	ObjectType string         `json:"object_type"`
	ObjectID   string         `json:"object_id"`
	Seq        int64          `json:"seq"`
	CreatedAt  string         `json:"created_at"`
	Data       map[string]any `json:"data"`
}

// pageAll walks GET /events (with query, limit per page) to its end.
func (e *env) pageAll(apiKey, query string, limit int) []eventView {
	e.t.Helper()
	var all []eventView
	after := ""
	for pages := 0; ; pages++ {
		path := fmt.Sprintf("/events?limit=%d%s", limit, query)
		if after != "" {
			path += "&starting_after=" + after
		}
		res := e.getAs(apiKey, path)
		wantStatus(e.t, res, http.StatusOK)
		page := decodeJSON[listOf[eventView]](e.t, res.body)
		if len(page.Data) > limit || pages > 1000 {
			e.t.Fatalf("page of %d events, limit %d", len(page.Data), limit)
		}
		all = append(all, page.Data...)
		if !page.HasMore {
			return all
		}
		if len(page.Data) == 0 {
			e.t.Fatal("an empty page says it has more")
		}
		after = page.Data[len(page.Data)-1].ID
	}
}

// The events of a payment and its refund carry each object's sequence
// numbers 1, 2, … in the order of its changes, with the object as the API
// renders it then; GET /events pages through many of them without a gap or
// a repeat; the filters narrow; another merchant sees none of them; bad
// queries are 400s that change nothing. Every exchange is checked against
// the OpenAPI document.
func TestEventsOverHTTP(t *testing.T) {
	e := newEnv(t)
	pay := decodeView(t, e.post("p", okBody).body)
	res, err := e.do(t.Context(), http.MethodPost, "/payments/"+pay.ID+"/refunds", e.apiKey,
		map[string]string{"Idempotency-Key": "r"}, `{"amount": 300}`)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, http.StatusCreated)
	refund := decodeJSON[refundView](t, res.body)
	declined := decodeView(t, e.post("d", `{"amount": 500, "currency": "KRW", "payment_method": "pm_card_declined"}`).body)
	for i := range 20 {
		wantStatus(t, e.post(fmt.Sprintf("bulk-%d", i), okBody), http.StatusCreated)
	}

	// One object's life, in order, each event its object as it was then.
	for _, c := range []struct {
		id     string
		types  []string
		status []string
	}{
		{pay.ID, []string{"payment.processing", "payment.succeeded"}, []string{"processing", "succeeded"}},
		{refund.ID, []string{"refund.pending", "refund.succeeded"}, []string{"pending", "succeeded"}},
		{declined.ID, []string{"payment.processing", "payment.declined"}, []string{"processing", "declined"}},
	} {
		evs := e.pageAll(e.apiKey, "&object_id="+c.id, 1)
		if len(evs) != len(c.types) {
			t.Fatalf("%s: %d events, want %d: %+v", c.id, len(evs), len(c.types), evs)
		}
		for i, ev := range evs {
			if ev.Seq != int64(i+1) || ev.Type != c.types[i] || ev.ObjectID != c.id || ev.Data["id"] != c.id || ev.Data["status"] != c.status[i] {
				t.Fatalf("%s event %d: %+v", c.id, i, ev)
			}
			if _, ok := ev.Data["client_secret"]; ok {
				t.Fatalf("an event carries a client secret: %+v", ev)
			}
			one := e.get("/events/" + ev.ID)
			wantStatus(t, one, http.StatusOK)
			if got := decodeJSON[eventView](t, one.body); got.ID != ev.ID || got.Seq != ev.Seq || got.CreatedAt != ev.CreatedAt {
				t.Fatalf("GET /events/%s: %s", ev.ID, one.body)
			}
		}
	}
	// As it was then: the payment's success shows nothing refunded yet,
	// though it was refunded since.
	if ev := e.pageAll(e.apiKey, "&object_id="+pay.ID+"&type=payment.succeeded", 10); len(ev) != 1 || ev[0].Data["amount_refunded"] != float64(0) {
		t.Fatalf("the payment's success: %+v", ev)
	}
	if v := decodeView(t, e.get("/payments/"+pay.ID).body); v.AmountRefunded != 300 {
		t.Fatalf("the payment now: %+v", v)
	}

	// Paging: every event exactly once, in the order written, at every page size.
	var want []string
	if err := e.db.Select(&want, `SELECT id FROM events WHERE merchant_id = ? ORDER BY pos`, e.merch.ID); err != nil {
		t.Fatal(err)
	}
	if len(want) != 2*22+2 {
		t.Fatalf("%d events stored, want %d", len(want), 2*22+2)
	}
	for _, limit := range []int{1, 3, 7, 100} {
		var got []string
		for _, ev := range e.pageAll(e.apiKey, "", limit) {
			got = append(got, ev.ID)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("limit %d: paged %d events %v, want %d %v", limit, len(got), got, len(want), want)
		}
	}
	succeeded := e.pageAll(e.apiKey, "&type=payment.succeeded", 4)
	if len(succeeded) != 21 {
		t.Fatalf("%d payment.succeeded events, want 21", len(succeeded))
	}
	for _, ev := range succeeded {
		if ev.Type != "payment.succeeded" || ev.ObjectType != "payment" {
			t.Fatalf("type filter let through %+v", ev)
		}
	}
	if got := e.pageAll(e.apiKey, "&type=refund.succeeded&object_id="+pay.ID, 10); len(got) != 0 {
		t.Fatalf("filters combined: %+v", got)
	}

	// Another merchant sees nothing of them, and cannot page from them.
	_, otherKey := e.newMerchant("Other merchant")
	if got := e.pageAll(otherKey, "", 10); len(got) != 0 {
		t.Fatalf("another merchant lists %d events", len(got))
	}
	wantProblem(t, e.getAs(otherKey, "/events/"+want[0]), http.StatusNotFound, "not-found")
	wantProblem(t, e.getAs(otherKey, "/events?starting_after="+want[0]), http.StatusBadRequest, "invalid-request")

	// Bad queries: 400, nothing changed.
	before := e.count(`SELECT COUNT(*) FROM events`)
	for _, q := range []string{
		"limit=0", "limit=101", "limit=-1", "limit=x", "limit=1&limit=2", "type=payment.bogus", "type=succeeded",
		"starting_after=evt_01ARZ3NDEKTSV4RRFFQ69G5FAV", "status=succeeded", "ending_before=" + want[3],
	} {
		wantProblem(t, e.get("/events?"+q), http.StatusBadRequest, "invalid-request")
	}
	wantProblem(t, e.get("/events/evt_01ARZ3NDEKTSV4RRFFQ69G5FAV"), http.StatusNotFound, "not-found")
	if after := e.count(`SELECT COUNT(*) FROM events`); after != before {
		t.Fatalf("bad queries changed the events: %d → %d", before, after)
	}
}

// The OpenAPI document's EventType enum is payments.EventTypes: one type
// per status of a payment and of a refund.
func TestEventTypesDocumented(t *testing.T) {
	c, err := published()
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, v := range c.doc.Components.Schemas["EventType"].Value.Enum {
		documented = append(documented, v.(string))
	}
	var types []string
	for _, ty := range payments.EventTypes {
		types = append(types, string(ty))
	}
	if !slices.Equal(documented, types) {
		t.Fatalf("api/openapi.json's EventType enum %v, payments.EventTypes %v", documented, types)
	}
	// One per status, and a capture's two beside payment.succeeded.
	if len(types) != len(payments.Statuses)+len(payments.RefundStatuses)+2 {
		t.Fatalf("EventTypes %v: not one per status (and a capture's two)", types)
	}
}
