package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"gateway/api"
	"gateway/mysql"
	"gateway/webhooks"
)

// withWebhooks serves /webhook_endpoints; loopback is allowed (the tests'
// receivers) and nothing else private.
func withWebhooks(grace time.Duration) envOption {
	return func(s *envSetup) {
		s.webhooks = func(st *mysql.Store) api.WebhookEndpoints {
			key, _ := webhooks.ParseKey(strings.Repeat("ab", 32))
			c, _ := webhooks.NewCipher(key)
			return webhooks.NewEndpoints(st, c, webhooks.NewGuard([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, nil), grace)
		}
	}
}

func TestWebhookEndpointsAPI(t *testing.T) {
	e := newEnv(t, withWebhooks(time.Hour))
	call := func(method, path, body string) response {
		t.Helper()
		res, err := e.do(context.Background(), method, path, e.apiKey, nil, body)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	var created struct {
		ID, Secret, Status, URL string
		EventTypes              []string `json:"event_types"`
	}
	res := call(http.MethodPost, "/webhook_endpoints", `{"url": "http://127.0.0.1:9/hooks", "event_types": ["payment.succeeded", "refund.failed", "payment.succeeded"], "description": "orders"}`)
	wantStatus(t, res, http.StatusCreated)
	if err := json.Unmarshal(res.body, &created); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(created.Secret, "whsec_") || created.Status != "enabled" || len(created.EventTypes) != 2 {
		t.Fatalf("created: %s", res.body)
	}
	if res.header.Get("Cache-Control") != "no-store" || res.header.Get("Location") != "/webhook_endpoints/"+created.ID {
		t.Fatalf("headers %v", res.header)
	}

	// Read back: never the secret.
	for _, r := range []response{call(http.MethodGet, "/webhook_endpoints/"+created.ID, ""), call(http.MethodGet, "/webhook_endpoints", "")} {
		wantStatus(t, r, http.StatusOK)
		if strings.Contains(string(r.body), created.Secret) || strings.Contains(string(r.body), `"secret"`) {
			t.Fatalf("the secret is shown again: %s", r.body)
		}
	}

	// Another merchant sees nothing of it.
	_, other := e.newMerchant("Other")
	r, err := e.do(context.Background(), http.MethodGet, "/webhook_endpoints/"+created.ID, other, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	wantProblem(t, r, http.StatusNotFound, "not-found")
	r, err = e.do(context.Background(), http.MethodDelete, "/webhook_endpoints/"+created.ID, other, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	wantProblem(t, r, http.StatusNotFound, "not-found")

	// Rotation: a new secret, the old one's expiry shown.
	res = call(http.MethodPost, "/webhook_endpoints/"+created.ID+"/rotate", `{"grace_period_seconds": 600}`)
	wantStatus(t, res, http.StatusOK)
	var rotated struct {
		Secret  string
		Expires string `json:"previous_secret_expires_at"`
	}
	if err := json.Unmarshal(res.body, &rotated); err != nil || rotated.Secret == created.Secret || rotated.Expires == "" {
		t.Fatalf("rotated: %s", res.body)
	}
	wantStatus(t, call(http.MethodPost, "/webhook_endpoints/"+created.ID+"/rotate", ""), http.StatusOK)
	wantProblem(t, call(http.MethodPost, "/webhook_endpoints/"+created.ID+"/rotate", `{"grace_period_seconds": -1}`), http.StatusBadRequest, "invalid-request")

	// Bad input: a clear 400, nothing stored.
	for _, body := range []string{
		`{"url": "http://10.0.0.1/hooks", "event_types": ["*"]}`,
		`{"url": "http://169.254.169.254/", "event_types": ["*"]}`,
		`{"url": "ftp://127.0.0.1/", "event_types": ["*"]}`,
		`{"url": "http://127.0.0.1/", "event_types": ["payment.exploded"]}`,
		`{"url": "http://127.0.0.1/", "event_types": []}`,
		`{"event_types": ["*"]}`,
		`{"url": "http://127.0.0.1/", "event_types": ["*"], "secret": "mine"}`,
	} {
		wantProblem(t, call(http.MethodPost, "/webhook_endpoints", body), http.StatusBadRequest, "invalid-request")
	}
	wantProblem(t, call(http.MethodGet, "/webhook_endpoints?limit=3", ""), http.StatusBadRequest, "invalid-request")
	if n := e.count(`SELECT COUNT(*) FROM webhook_endpoints`); n != 1 {
		t.Fatalf("%d endpoints stored, want 1", n)
	}

	// Delete: gone.
	res = call(http.MethodDelete, "/webhook_endpoints/"+created.ID, "")
	wantStatus(t, res, http.StatusOK)
	wantProblem(t, call(http.MethodGet, "/webhook_endpoints/"+created.ID, ""), http.StatusNotFound, "not-found")
	wantProblem(t, call(http.MethodDelete, "/webhook_endpoints/"+created.ID, ""), http.StatusNotFound, "not-found")

	// A merchant's endpoints are bounded.
	for i := range webhooks.MaxEndpointsPerMerchant {
		wantStatus(t, call(http.MethodPost, "/webhook_endpoints", `{"url": "http://127.0.0.1:9/`+strings.Repeat("x", i)+`", "event_types": ["*"]}`), http.StatusCreated)
	}
	wantProblem(t, call(http.MethodPost, "/webhook_endpoints", `{"url": "http://127.0.0.1:9/", "event_types": ["*"]}`), http.StatusConflict, "conflict")

	// Without an API key: 401.
	r, err = e.do(context.Background(), http.MethodGet, "/webhook_endpoints", "", nil, "")
	if err != nil {
		t.Fatal(err)
	}
	wantProblem(t, r, http.StatusUnauthorized, "unauthorized")
}
