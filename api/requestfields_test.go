package api_test

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"gateway/errs"
)

// problemFields are the fields a 400 names.
func problemFields(t *testing.T, res response) []string {
	t.Helper()
	p := decodeJSON[struct {
		Errors []errs.FieldError `json:"errors"`
	}](t, res.body)
	var out []string
	for _, f := range p.Errors {
		out = append(out, f.Field)
	}
	return out
}

func wantFieldRefused(t *testing.T, res response, field string) {
	t.Helper()
	wantProblem(t, res, http.StatusBadRequest, "invalid-request")
	if fields := problemFields(t, res); !slices.Contains(fields, field) {
		t.Fatalf("the 400 names %v, not %s: %s", fields, field, res.body)
	}
}

// No field of a request body is ever null: {"amount": null} is refused
// with a 400 naming the field, nothing stored and the key left free, where
// it used to refund the whole remainder. A field with no value is left out.
func TestNullFieldsAreRefused(t *testing.T) {
	e := newEnv(t, withWebhooks(time.Hour))
	send := func(method, path, key, body string) response {
		t.Helper()
		hdr := map[string]string{}
		if key != "" {
			hdr["Idempotency-Key"] = key
		}
		res, err := e.do(context.Background(), method, path, e.apiKey, hdr, body)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	pay := decodeView(t, e.post("p", okBody).body)
	refunds := "/payments/" + pay.ID + "/refunds"

	wantFieldRefused(t, send(http.MethodPost, refunds, "r", `{"amount": null}`), "amount")
	wantFieldRefused(t, send(http.MethodPost, refunds, "r", `{"amount": 300, "reason": null}`), "reason")
	wantFieldRefused(t, send(http.MethodPost, refunds, "r", `{"metadata" : null }`), "metadata")
	if n := e.count(`SELECT COUNT(*) FROM refunds`); n != 0 {
		t.Fatalf("%d refunds stored from refused bodies", n)
	}
	if n := e.count(`SELECT amount_reserved FROM payments WHERE id = ?`, pay.ID); n != 0 {
		t.Fatalf("%d reserved by refused bodies", n)
	}
	// The key stayed free, and an amount left out is the remainder.
	part := send(http.MethodPost, refunds, "r", `{"amount": 300}`)
	wantStatus(t, part, http.StatusCreated)
	if r := decodeJSON[refundView](t, part.body); r.Amount != 300 {
		t.Fatalf("refund of %d, want 300", r.Amount)
	}
	rest := send(http.MethodPost, refunds, "rest", `{}`)
	wantStatus(t, rest, http.StatusCreated)
	if r := decodeJSON[refundView](t, rest.body); r.Amount != 700 {
		t.Fatalf("refund of the remainder: %d, want 700", r.Amount)
	}

	for _, c := range []struct{ name, method, path, body, field string }{
		{"payment amount", http.MethodPost, "/payments", `{"amount": null, "currency": "KRW", "payment_method": "pm_card_ok"}`, "amount"},
		{"payment description", http.MethodPost, "/payments", `{"amount": 1000, "currency": "KRW", "payment_method": "pm_card_ok", "description": null}`, "description"},
		{"payment confirm", http.MethodPost, "/payments", `{"amount": 1000, "currency": "KRW", "payment_method": "pm_card_ok", "confirm":null}`, "confirm"},
		{"confirm amount", http.MethodPost, "/payments/" + pay.ID + "/confirm", `{"amount": null}`, "amount"},
		{"endpoint description", http.MethodPost, "/webhook_endpoints", `{"url": "http://127.0.0.1:9/", "event_types": ["*"], "description": null}`, "description"},
		{"endpoint event types", http.MethodPost, "/webhook_endpoints", `{"url": "http://127.0.0.1:9/", "event_types": null}`, "event_types"},
	} {
		t.Run(c.name, func(t *testing.T) {
			wantFieldRefused(t, send(c.method, c.path, "null-"+c.name, c.body), c.field)
		})
	}
	if n := e.count(`SELECT COUNT(*) FROM payments`); n != 1 {
		t.Fatalf("%d payments, want 1", n)
	}
	if n := e.count(`SELECT COUNT(*) FROM webhook_endpoints`); n != 0 {
		t.Fatalf("%d endpoints from refused bodies", n)
	}
	// Nor is a value inside one null: metadata's values are strings (null
	// used to be stored as ""), event types are types.
	wantFieldRefused(t, send(http.MethodPost, "/payments", "nested", `{"amount": 1000, "currency": "KRW", "payment_method": "pm_card_ok", "metadata": {"a": null}}`), "metadata.a")
	wantFieldRefused(t, send(http.MethodPost, "/webhook_endpoints", "", `{"url": "http://127.0.0.1:9/", "event_types": ["*", null]}`), "event_types")
}

// A rotation's grace period is bounded before it becomes a duration:
// 18446744073709552 seconds used to overflow into a grace of 384 ns, which
// retired the old secret at once. Refused, the endpoint keeps its secret.
func TestRotationGraceDoesNotOverflow(t *testing.T) {
	e := newEnv(t, withWebhooks(time.Hour))
	call := func(path, body string) response {
		t.Helper()
		res, err := e.do(context.Background(), http.MethodPost, path, e.apiKey, nil, body)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	created := call("/webhook_endpoints", `{"url": "http://127.0.0.1:9/hooks", "event_types": ["*"]}`)
	wantStatus(t, created, http.StatusCreated)
	ep := decodeJSON[struct{ ID string }](t, created.body)
	rotate := "/webhook_endpoints/" + ep.ID + "/rotate"
	for _, secs := range []string{"18446744073709552", "9223372036854775807", "9223372036", "604801", "-1"} {
		t.Run(secs, func(t *testing.T) {
			wantFieldRefused(t, call(rotate, `{"grace_period_seconds": `+secs+`}`), "grace_period_seconds")
		})
	}
	if n := e.count(`SELECT COUNT(*) FROM webhook_endpoints WHERE prev_secret_enc IS NOT NULL`); n != 0 {
		t.Fatal("a refused rotation replaced the secret")
	}
	res := call(rotate, `{"grace_period_seconds": 604800}`)
	wantStatus(t, res, http.StatusOK)
	if n := e.count(`SELECT COUNT(*) FROM webhook_endpoints WHERE prev_secret_until > NOW(6) + INTERVAL 6 DAY`); n != 1 {
		t.Fatal("the most grace allowed is not kept for a week")
	}
}
