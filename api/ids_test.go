package api_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
)

// An id that cannot be one (the docs' own placeholder pay_…, any text
// outside ASCII, a lower-case or truncated ULID, another kind's prefix) is
// a 404 on every route that takes an id in its path, before any query and
// so whatever the credentials; an unknown id of the right shape is the
// same 404. A listing's cursor or filter that cannot be an id is a 400
// naming the parameter. Never a 500: the database's ASCII columns used to
// answer such text with a collation error.
func TestIDsThatCannotExist(t *testing.T) {
	e := newEnv(t, withWebhooks(time.Hour))
	browser := e.newBrowserSide(e.merch, shopOrigin)
	pay := decodeView(t, e.post("p", okBody).body)
	refund := decodeJSON[refundView](t, e.mustDo(http.MethodPost, "/payments/"+pay.ID+"/refunds", "r", `{"amount": 100}`).body)
	ulidText := ulid.Make().String()
	cannot := func(prefix string) []string {
		return []string{prefix + "…", prefix + "é", "%C3%A9", prefix + strings.ToLower(ulidText), prefix + ulidText[:25],
			prefix + ulidText + "0", "x" + prefix + ulidText, prefix + ulidText[:10] + "%00" + ulidText[11:]}
	}
	for _, r := range []struct {
		method, path, prefix, body string
	}{
		{http.MethodGet, "/payments/{id}", "pay_", ""},
		{http.MethodPost, "/payments/{id}/confirm", "pay_", `{"payment_method": "pm_card_ok"}`},
		{http.MethodPost, "/payments/{id}/refunds", "pay_", `{"amount": 1}`},
		{http.MethodGet, "/payments/{id}/refunds", "pay_", ""},
		{http.MethodGet, "/refunds/{id}", "re_", ""},
		{http.MethodGet, "/events/{id}", "evt_", ""},
		{http.MethodGet, "/webhook_endpoints/{id}", "we_", ""},
		{http.MethodDelete, "/webhook_endpoints/{id}", "we_", ""},
		{http.MethodPost, "/webhook_endpoints/{id}/rotate", "we_", `{}`},
		{http.MethodOptions, "/payments/{id}", "pay_", ""},
		{http.MethodOptions, "/payments/{id}/confirm", "pay_", ""},
		{http.MethodOptions, "/payments/{id}/refunds", "pay_", ""},
		{http.MethodOptions, "/refunds/{id}", "re_", ""},
		{http.MethodOptions, "/events/{id}", "evt_", ""},
		{http.MethodOptions, "/webhook_endpoints/{id}", "we_", ""},
		{http.MethodOptions, "/webhook_endpoints/{id}/rotate", "we_", ""},
	} {
		ids := cannot(r.prefix)
		if r.method != http.MethodOptions { // OPTIONS of a well-formed id tells its methods
			ids = append(ids, r.prefix+ulid.Make().String()) // the last: well formed, unknown
		}
		for i, id := range ids {
			path := strings.Replace(r.path, "{id}", id, 1)
			t.Run(r.method+" "+path, func(t *testing.T) {
				hdr := map[string]string{"Idempotency-Key": "k-" + r.method + r.path}
				res, err := e.do(context.Background(), r.method, path, e.apiKey, hdr, r.body)
				if err != nil {
					t.Fatal(err)
				}
				wantProblem(t, res, http.StatusNotFound, "not-found")
				if i == len(cannot(r.prefix)) {
					return
				}
				// Refused before any credential is looked at: without one,
				// or with a publishable key, the same 404.
				for _, key := range []string{"", browser.pk} {
					res, err := e.do(context.Background(), r.method, path, key,
						map[string]string{"Idempotency-Key": "k", "Client-Secret": pay.ID + "_secret_x"}, r.body)
					if err != nil {
						t.Fatal(err)
					}
					wantProblem(t, res, http.StatusNotFound, "not-found")
				}
			})
		}
	}
	for _, c := range []struct{ listing, param, prefix string }{
		{"/payments", "starting_after", "pay_"},
		{"/payments", "ending_before", "pay_"},
		{"/refunds", "starting_after", "re_"},
		{"/refunds", "ending_before", "re_"},
		{"/payments/" + pay.ID + "/refunds", "starting_after", "re_"},
		{"/events", "starting_after", "evt_"},
		{"/events", "object_id", "pay_"},
		{"/events", "object_id", "re_"},
	} {
		for _, v := range cannot(c.prefix) {
			if strings.Contains(v, "%") {
				v, _ = url.PathUnescape(v)
			}
			path := c.listing + "?" + url.Values{c.param: {v}}.Encode()
			t.Run("GET "+path, func(t *testing.T) {
				wantFieldRefused(t, e.get(path), c.param)
			})
		}
	}
	// The ids the gateway made still page and filter.
	for _, path := range []string{"/payments?starting_after=" + pay.ID, "/refunds?ending_before=" + refund.ID,
		"/events?object_id=" + pay.ID, "/events?object_id=" + refund.ID, "/payments/" + pay.ID, "/refunds/" + refund.ID} {
		wantStatus(t, e.get(path), http.StatusOK)
	}
	if n := e.count(`SELECT COUNT(*) FROM refunds`); n != 1 {
		t.Fatalf("%d refunds, want 1", n)
	}
}

// mustDo sends a request with the env's API key and an Idempotency-Key.
func (e *env) mustDo(method, path, key, body string) response {
	e.t.Helper()
	res, err := e.do(context.Background(), method, path, e.apiKey, map[string]string{"Idempotency-Key": key}, body)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	return res
}
