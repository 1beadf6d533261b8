package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"gateway/merchants"
	"gateway/psp/fake"
	"gateway/versions"
)

// Dated API versions through the API: the request's version, else the
// merchant's; a replay in the version of the request that made the key,
// byte for byte; the documents of every version.
func TestVersionsAPI(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	call := func(method, path, key, version, body string) response {
		t.Helper()
		hdr := map[string]string{}
		if key != "" {
			hdr["Idempotency-Key"] = key
		}
		if version != "" {
			hdr[versions.Header] = version
		}
		res, err := e.do(ctx, method, path, e.apiKey, hdr, body)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	wantVersion := func(res response, v versions.Version) {
		t.Helper()
		if got := res.header.Get(versions.Header); got != string(v) {
			t.Fatalf("%s %q, want %s (body %s)", versions.Header, got, v, res.body)
		}
	}
	pay := call(http.MethodPost, "/payments", "p", "", okBody)
	wantStatus(t, pay, http.StatusCreated)
	wantVersion(pay, versions.Latest) // a merchant created now is pinned to the latest
	var p struct{ ID string }
	if err := json.Unmarshal(pay.body, &p); err != nil {
		t.Fatal(err)
	}

	// A refund asked in the first version answers in it, and so does every retry.
	first := call(http.MethodPost, "/payments/"+p.ID+"/refunds", "r", "2026-12-01", `{"amount": 300}`)
	wantStatus(t, first, http.StatusCreated)
	wantVersion(first, versions.V20261201)
	if !bytes.Contains(first.body, []byte(`"failure_code":null`)) || bytes.Contains(first.body, []byte(`decline_code`)) {
		t.Fatalf("a refund in 2026-12-01: %s", first.body)
	}
	for _, v := range []string{"2026-12-02", "2026-12-01", ""} {
		again := call(http.MethodPost, "/payments/"+p.ID+"/refunds", "r", v, `{"amount": 300}`)
		wantStatus(t, again, http.StatusCreated)
		wantVersion(again, versions.V20261201)
		if !bytes.Equal(again.body, first.body) || again.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("the retry naming %q: %s\nwant the first answer's bytes %s", v, again.body, first.body)
		}
	}
	var r struct{ ID string }
	if err := json.Unmarshal(first.body, &r); err != nil {
		t.Fatal(err)
	}
	// Reads render in the version asked, or the merchant's.
	latest := call(http.MethodGet, "/refunds/"+r.ID, "", "", "")
	wantVersion(latest, versions.Latest)
	if !bytes.Contains(latest.body, []byte(`"decline_code":null`)) {
		t.Fatalf("the refund in the latest version: %s", latest.body)
	}
	for _, path := range []string{"/refunds/" + r.ID, "/refunds", "/payments/" + p.ID + "/refunds", "/events?type=refund.succeeded"} {
		old := call(http.MethodGet, path, "", "2026-12-01", "")
		wantStatus(t, old, http.StatusOK)
		wantVersion(old, versions.V20261201)
		if !bytes.Contains(old.body, []byte(`"failure_code":null`)) || bytes.Contains(old.body, []byte(`decline_code`)) {
			t.Fatalf("GET %s in 2026-12-01: %s", path, old.body)
		}
	}
	var evs struct{ Data []struct{ ID string } }
	if err := json.Unmarshal(call(http.MethodGet, "/events?type=refund.succeeded", "", "", "").body, &evs); err != nil || len(evs.Data) == 0 {
		t.Fatalf("refund events: %v", err)
	}
	if ev := call(http.MethodGet, "/events/"+evs.Data[0].ID, "", "2026-12-01", ""); !bytes.Contains(ev.body, []byte(`"failure_code":null`)) {
		t.Fatalf("the refund's event in 2026-12-01: %s", ev.body)
	}
	// The payment itself is the same in both.
	if a, b := call(http.MethodGet, "/payments/"+p.ID, "", "2026-12-01", ""), call(http.MethodGet, "/payments/"+p.ID, "", "", ""); !bytes.Equal(a.body, b.body) {
		t.Fatalf("a payment differs between the versions:\n%s\n%s", a.body, b.body)
	}

	// A version the gateway does not render, or two: refused, nothing stored.
	for _, v := range []string{"2026-12-03", "latest"} {
		res := call(http.MethodPost, "/payments", "bad-version", v, okBody)
		wantProblem(t, res, http.StatusBadRequest, "invalid-request")
		wantVersion(res, versions.Latest)
		if !strings.Contains(string(res.body), versions.Header) {
			t.Fatalf("the refusal does not name %s: %s", versions.Header, res.body)
		}
	}
	if n := e.count(`SELECT COUNT(*) FROM idempotency_keys WHERE idem_key = 'bad-version'`); n != 0 {
		t.Fatalf("%d keys stored for a refused version", n)
	}

	// Pinned to the first version, the merchant's requests that name none are answered in it.
	if _, err := merchants.NewAdmin(e.store, nil).SetAPIVersion(ctx, e.merch.ID, "2026-12-01"); err != nil {
		t.Fatal(err)
	}
	pinned := call(http.MethodGet, "/refunds/"+r.ID, "", "", "")
	wantVersion(pinned, versions.V20261201)
	if !bytes.Contains(pinned.body, []byte(`"failure_code":null`)) {
		t.Fatalf("a merchant pinned to 2026-12-01: %s", pinned.body)
	}
	if _, err := merchants.NewAdmin(e.store, nil).SetAPIVersion(ctx, e.merch.ID, "2027-01-01"); err == nil {
		t.Fatal("a merchant was pinned to a version the gateway does not render")
	}

	// A key stored before versions (no versions on its row, its answer in
	// the first version's shape) replays as it was stored, in the first.
	second := call(http.MethodPost, "/payments/"+p.ID+"/refunds", "legacy", "2026-12-02", `{"amount": 100}`)
	wantStatus(t, second, http.StatusCreated)
	if _, err := e.db.Exec(`UPDATE idempotency_keys SET api_version = NULL, response_version = NULL,
    response_body = REPLACE(response_body, '"decline_code"', '"failure_code"') WHERE idem_key = 'legacy'`); err != nil {
		t.Fatal(err)
	}
	legacy := call(http.MethodPost, "/payments/"+p.ID+"/refunds", "legacy", "2026-12-02", `{"amount": 100}`)
	wantVersion(legacy, versions.V20261201)
	if want := bytes.ReplaceAll(second.body, []byte(`"decline_code"`), []byte(`"failure_code"`)); !bytes.Equal(legacy.body, want) {
		t.Fatalf("a key stored before versions replays %s\nwant %s", legacy.body, want)
	}

	// The documents: every version's, by query or header.
	for _, c := range []struct {
		query, header string
		want          versions.Version
	}{{"", "", versions.Latest}, {"?version=2026-12-01", "", versions.V20261201}, {"", "2026-12-01", versions.V20261201}} {
		res := call(http.MethodGet, "/openapi.json"+c.query, "", c.header, "")
		wantStatus(t, res, http.StatusOK)
		wantVersion(res, c.want)
		var doc struct {
			Info       struct{ Version string }
			Components struct {
				Schemas map[string]struct{ Properties map[string]any }
			}
		}
		if err := json.Unmarshal(res.body, &doc); err != nil || doc.Info.Version != string(c.want) {
			t.Fatalf("GET /openapi.json%s (%s): version %q, %v", c.query, c.header, doc.Info.Version, err)
		}
		_, old := doc.Components.Schemas["Refund"].Properties["failure_code"]
		if old != (c.want == versions.V20261201) {
			t.Fatalf("the %s document's Refund: %v", c.want, doc.Components.Schemas["Refund"].Properties)
		}
	}
	wantProblem(t, call(http.MethodGet, "/openapi.json?version=1999-01-01", "", "", ""), http.StatusBadRequest, "invalid-request")
}

// A key a retry takes over (its first request left it unsettled) still
// answers in the version of the request that made it, whatever the retry
// names, and every later replay with the same bytes.
func TestATakenOverKeyAnswersInItsOwnVersion(t *testing.T) {
	e := newEnv(t)
	post := func(version string) response {
		t.Helper()
		hdr := map[string]string{"Idempotency-Key": "taken"}
		if version != "" {
			hdr[versions.Header] = version
		}
		res, err := e.do(context.Background(), http.MethodPost, "/payments", e.apiKey, hdr, okBody)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	e.psp.FailNextCharges(fake.FaultUnknownAfterCharge, 1)
	first := post("2026-12-01")
	wantProblem(t, first, http.StatusBadGateway, "psp-outcome-unknown")
	e.advance(time.Minute) // past the first request's lease
	taken := post("2026-12-02")
	wantStatus(t, taken, http.StatusCreated)
	if got := taken.header.Get(versions.Header); got != "2026-12-01" {
		t.Fatalf("the retry that took the key over answered in %q, want the key's 2026-12-01", got)
	}
	for _, v := range []string{"", "2026-12-02"} {
		again := post(v)
		if again.header.Get(versions.Header) != "2026-12-01" || !bytes.Equal(again.body, taken.body) || again.header.Get("Idempotent-Replayed") != "true" {
			t.Fatalf("a replay naming %q: %s %s\nwant %s", v, again.header.Get(versions.Header), again.body, taken.body)
		}
	}
	if n := e.psp.ChargeCount(); n != 1 {
		t.Fatalf("%d charges for one key", n)
	}
}

// Metadata holding <, > and & is answered at its own size in every
// version: an older version's answer re-encodes nothing it did not change.
func TestOlderVersionsEscapeNothing(t *testing.T) {
	e := newEnv(t)
	res := e.post("esc", `{"amount": 1000, "currency": "KRW", "payment_method": "pm_card_ok", "metadata": {"note": "<b>&c"}}`)
	wantStatus(t, res, http.StatusCreated)
	var p struct{ ID string }
	if err := json.Unmarshal(res.body, &p); err != nil {
		t.Fatal(err)
	}
	get := func(v string) response {
		t.Helper()
		r, err := e.do(context.Background(), http.MethodGet, "/payments/"+p.ID, e.apiKey, map[string]string{versions.Header: v}, "")
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	old, latest := get("2026-12-01"), get("2026-12-02")
	if !bytes.Equal(old.body, latest.body) || !bytes.Contains(old.body, []byte(`"<b>&c"`)) {
		t.Fatalf("2026-12-01: %s\n2026-12-02: %s", old.body, latest.body)
	}
}
