package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"gateway/api"
	"gateway/payments"
)

// The Idempotency-Key header as draft-ietf-httpapi-idempotency-key-header-07
// writes it, a Structured Field string, names the same key as the bare
// form: "k-1" replays k-1, on payments, refunds and confirms alike, and
// the string's \" and \\ escapes are read. Malformed quoting, and a
// request with two Idempotency-Key fields, are 400s that store nothing.
func TestIdempotencyKeyStructuredField(t *testing.T) {
	e := newEnv(t)
	post := func(path, key, body string) response {
		t.Helper()
		return e.mustDo(http.MethodPost, path, key, body)
	}
	quoted := post("/payments", `"k-1"`, okBody)
	wantStatus(t, quoted, http.StatusCreated)
	bare := post("/payments", `k-1`, okBody)
	if bare.status != http.StatusCreated || bare.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(bare.body, quoted.body) {
		t.Fatalf("the bare key after the quoted one: %d %s", bare.status, bare.body)
	}
	escaped := post("/payments", `"a\"b\\c"`, okBody)
	wantStatus(t, escaped, http.StatusCreated)
	if again := post("/payments", `a"b\c`, okBody); again.header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(again.body, escaped.body) {
		t.Fatalf(`a"b\c after "a\"b\\c": %d %s`, again.status, again.body)
	}
	if n := e.count(`SELECT COUNT(*) FROM idempotency_keys WHERE idem_key IN ('k-1', 'a"b\\c')`); n != 2 {
		t.Fatalf("%d keys stored as unquoted, want 2", n)
	}
	pay := decodeView(t, quoted.body)
	refund := post("/payments/"+pay.ID+"/refunds", `"r-1"`, `{"amount": 100}`)
	wantStatus(t, refund, http.StatusCreated)
	if again := post("/payments/"+pay.ID+"/refunds", "r-1", `{"amount": 100}`); again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the refund's bare key after its quoted one: %d %s", again.status, again.body)
	}
	later := e.createLater("later", laterBody)
	wantStatus(t, post("/payments/"+later.ID+"/confirm", `"c-1"`, `{"payment_method": "pm_card_ok"}`), http.StatusCreated)
	if again := post("/payments/"+later.ID+"/confirm", "c-1", `{"payment_method": "pm_card_ok"}`); again.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the confirm's bare key after its quoted one: %d %s", again.status, again.body)
	}
	before := e.counts()

	for _, key := range []string{`"abc`, `"a\b"`, `"a\`, `"abc";p=1`, `"abc"x`, `"a", "b"`, `""`, `"a b"`, `"é"`, `"` + strings.Repeat("k", 256) + `"`} {
		t.Run(key, func(t *testing.T) {
			wantProblem(t, post("/payments", key, okBody), http.StatusBadRequest, "invalid-idempotency-key")
			wantProblem(t, post("/payments/"+pay.ID+"/refunds", key, `{"amount": 1}`), http.StatusBadRequest, "invalid-idempotency-key")
		})
	}
	// Two fields, even naming one key (in either form), are refused.
	for _, fields := range [][]string{{"k-2", "k-2"}, {`"k-2"`, "k-2"}, {"k-2", "k-3"}} {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, e.srv.URL+"/payments", strings.NewReader(okBody))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+e.apiKey)
		req.Header.Set("Content-Type", "application/json")
		req.Header["Idempotency-Key"] = fields
		res, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		wantProblem(t, response{status: res.StatusCode, header: res.Header, body: body}, http.StatusBadRequest, "invalid-idempotency-key")
	}
	if after := e.counts(); after != before {
		t.Fatalf("refused keys changed state: %+v → %+v", before, after)
	}
}

// How long a key's answer is kept is published where clients read the
// key's rules: the OpenAPI document's Idempotency-Key parameter, in its
// description and as x-idempotency-key-retention (an ISO 8601 duration),
// which is the gateway's default.
func TestOpenAPIPublishesKeyRetention(t *testing.T) {
	var doc struct {
		Components struct {
			Parameters map[string]map[string]any `json:"parameters"`
		} `json:"components"`
	}
	if err := json.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	p := doc.Components.Parameters["Idempotency-Key"]
	if p == nil {
		t.Fatal("no Idempotency-Key parameter")
	}
	days := payments.DefaultRetention / (24 * time.Hour)
	if payments.DefaultRetention != days*24*time.Hour {
		t.Fatalf("the default retention %s is not whole days", payments.DefaultRetention)
	}
	want := fmt.Sprintf("P%dD", days)
	if got := p["x-idempotency-key-retention"]; got != want {
		t.Fatalf("x-idempotency-key-retention = %v, want %q (payments.DefaultRetention)", got, want)
	}
	desc, _ := p["description"].(string)
	if !strings.Contains(desc, fmt.Sprintf("%d days", days)) || !strings.Contains(desc, "GATEWAY_IDEMPOTENCY_RETENTION") {
		t.Fatalf("the description does not state the retention: %q", desc)
	}
}
