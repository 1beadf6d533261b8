package api_test

import (
	"context"
	"crypto/sha256"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"gateway/api"
	"gateway/merchants"
	"gateway/payments"
	"gateway/psp/fake"
)

// Browser checkout through the API: the merchant's server creates the
// payment with its secret key; the customer's browser reads and confirms
// that one payment with a publishable key and the payment's client secret,
// from an origin the merchant allows, and can do nothing else.

const shopOrigin = "https://shop.example"

// browserSide is what a merchant hands its checkout page.
type browserSide struct {
	pk string
}

// newBrowserSide mints a publishable key for m and allows origins.
func (e *env) newBrowserSide(m merchants.Merchant, origins ...string) browserSide {
	e.t.Helper()
	access := merchants.NewBrowserAccess(e.store, e.clock.Now)
	key, err := access.CreatePublishableKey(context.Background(), m.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, o := range origins {
		if _, _, err := access.AllowOrigin(context.Background(), m.ID, o); err != nil {
			e.t.Fatal(err)
		}
	}
	return browserSide{pk: key.Plaintext}
}

// browse sends a request as a browser would: the publishable key, the
// client secret (when not empty) and the Origin (when not empty).
func (e *env) browse(method, path, pk, secret, origin string, hdr map[string]string, body string) response {
	e.t.Helper()
	h := map[string]string{}
	for k, v := range hdr {
		h[k] = v
	}
	if secret != "" {
		h[api.HeaderClientSecret] = secret
	}
	if origin != "" {
		h["Origin"] = origin
	}
	res, err := e.do(context.Background(), method, path, pk, h, body)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	return res
}

var clientSecretPattern = regexp.MustCompile(`^pay_[0-9A-Z]{26}_secret_[a-z2-7]{32}$`)

func TestBrowserConfirmsWithPublishableKey(t *testing.T) {
	e := newEnv(t)
	b := e.newBrowserSide(e.merch, shopOrigin)

	// The merchant's server creates the payment; only that answer, and its
	// replays, carry the client secret.
	created := e.createLater("order-1", laterBody)
	if !clientSecretPattern.MatchString(created.ClientSecret) || !strings.HasPrefix(created.ClientSecret, created.ID+"_secret_") {
		t.Fatalf("client_secret %q", created.ClientSecret)
	}
	if again := decodeView(t, e.post("order-1", laterBody).body); again.ClientSecret != created.ClientSecret {
		t.Fatalf("the creation's replay carries client_secret %q, want %q", again.ClientSecret, created.ClientSecret)
	}
	if v := decodeView(t, e.get("/payments/"+created.ID).body); v.ClientSecret != "" {
		t.Fatalf("GET with the secret key shows the client secret: %+v", v)
	}
	// Stored as a hash on the payment; in plain only in the creation's stored answer.
	hash := sha256.Sum256([]byte(created.ClientSecret))
	if n := e.count(`SELECT COUNT(*) FROM payments WHERE id = ? AND client_secret_hash = ?`, created.ID, hash[:]); n != 1 {
		t.Fatalf("the payment's client_secret_hash is not the secret's SHA-256 (%d rows)", n)
	}

	// The browser reads it, then confirms it.
	res := e.browse(http.MethodGet, "/payments/"+created.ID, b.pk, created.ClientSecret, shopOrigin, nil, "")
	wantStatus(t, res, http.StatusOK)
	wantCORS(t, res, shopOrigin)
	if v := decodeView(t, res.body); v.Status != payments.RequiresConfirmation || v.ClientSecret != "" {
		t.Fatalf("read with the publishable key: %s", res.body)
	}
	res = e.browse(http.MethodPost, "/payments/"+created.ID+"/confirm", b.pk, created.ClientSecret, shopOrigin,
		map[string]string{"Idempotency-Key": "attempt-1"}, `{"payment_method": "pm_card_ok"}`)
	wantStatus(t, res, http.StatusCreated)
	wantCORS(t, res, shopOrigin)
	if got := res.header.Get("Access-Control-Expose-Headers"); !strings.Contains(got, "Retry-After") || !strings.Contains(got, "Idempotent-Replayed") {
		t.Fatalf("Access-Control-Expose-Headers %q", got)
	}
	// The same attempt again (a lost answer): the replay, readable by the page.
	res = e.browse(http.MethodPost, "/payments/"+created.ID+"/confirm", b.pk, created.ClientSecret, shopOrigin,
		map[string]string{"Idempotency-Key": "attempt-1"}, `{"payment_method": "pm_card_ok"}`)
	wantStatus(t, res, http.StatusCreated)
	if res.header.Get("Idempotent-Replayed") != "true" {
		t.Fatal("the retried attempt was not a replay")
	}
	if e.psp.ChargeCount() != 1 {
		t.Fatalf("%d charges, want 1", e.psp.ChargeCount())
	}
	// A client without Origin (not a browser: a server, a test) may use a
	// publishable key too: CORS protects browsers only.
	wantStatus(t, e.browse(http.MethodGet, "/payments/"+created.ID, b.pk, created.ClientSecret, "", nil, ""), http.StatusOK)
}

func wantCORS(t *testing.T, res response, origin string) {
	t.Helper()
	if got := res.header.Get("Access-Control-Allow-Origin"); got != origin {
		t.Fatalf("Access-Control-Allow-Origin %q, want %q", got, origin)
	}
	if !strings.Contains(strings.Join(res.header.Values("Vary"), ","), "Origin") {
		t.Fatalf("Vary %q lacks Origin", res.header.Values("Vary"))
	}
}

// A publishable key reads and confirms the one payment whose client secret
// it presents, and nothing else: no creation, no listing, no refund, no
// other payment, not even with another payment's secret.
func TestPublishableKeyCanDoNothingElse(t *testing.T) {
	e := newEnv(t)
	b := e.newBrowserSide(e.merch, shopOrigin)
	mine := e.createLater("order-mine", laterBody)
	other := e.createLater("order-other", strings.Replace(laterBody, "B-1", "B-2", 1))
	oneStep := decodeView(t, e.post("order-paid", okBody).body)
	before := e.counts()

	for _, tc := range []struct {
		name, method, path string
		secret             string
		hdr                map[string]string
		body               string
		status             int
		slug               string
	}{
		{"create", http.MethodPost, "/payments", mine.ClientSecret, map[string]string{"Idempotency-Key": "x"}, okBody, http.StatusForbidden, "forbidden"},
		{"list", http.MethodGet, "/payments", mine.ClientSecret, nil, "", http.StatusForbidden, "forbidden"},
		{"find by key", http.MethodGet, "/payments?idempotency_key=order-other", mine.ClientSecret, nil, "", http.StatusForbidden, "forbidden"},
		{"refund", http.MethodPost, "/payments/" + oneStep.ID + "/refunds", mine.ClientSecret, map[string]string{"Idempotency-Key": "r"}, `{}`, http.StatusForbidden, "forbidden"},
		{"list refunds", http.MethodGet, "/refunds", mine.ClientSecret, nil, "", http.StatusForbidden, "forbidden"},
		{"a payment's refunds", http.MethodGet, "/payments/" + mine.ID + "/refunds", mine.ClientSecret, nil, "", http.StatusForbidden, "forbidden"},
		{"read another payment with its own secret's id", http.MethodGet, "/payments/" + other.ID, mine.ClientSecret, nil, "", http.StatusNotFound, "not-found"},
		{"confirm another payment", http.MethodPost, "/payments/" + other.ID + "/confirm", mine.ClientSecret, map[string]string{"Idempotency-Key": "c1"}, `{"payment_method": "pm_card_ok"}`, http.StatusNotFound, "not-found"},
		{"read a one-step payment", http.MethodGet, "/payments/" + oneStep.ID, mine.ClientSecret, nil, "", http.StatusNotFound, "not-found"},
		{"a wrong secret", http.MethodGet, "/payments/" + mine.ID, otherLast(mine.ClientSecret), nil, "", http.StatusNotFound, "not-found"},
		{"no secret", http.MethodGet, "/payments/" + mine.ID, "", nil, "", http.StatusUnauthorized, "unauthorized"},
		{"an unknown payment", http.MethodGet, "/payments/pay_01KB4ZQ4C9V8X2M3N5P7R9T1W3", mine.ClientSecret, nil, "", http.StatusNotFound, "not-found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := e.browse(tc.method, tc.path, b.pk, tc.secret, shopOrigin, tc.hdr, tc.body)
			wantProblem(t, res, tc.status, tc.slug)
		})
	}
	// The same secret with another merchant's publishable key.
	m2, _ := e.newMerchant("Other shop")
	b2 := e.newBrowserSide(m2, shopOrigin)
	wantProblem(t, e.browse(http.MethodGet, "/payments/"+mine.ID, b2.pk, mine.ClientSecret, shopOrigin, nil, ""), http.StatusNotFound, "not-found")
	// A revoked publishable key, and a made-up one.
	if err := merchants.NewBrowserAccess(e.store, e.clock.Now).RevokePublishableKey(context.Background(), m2.ID, merchants.PublishablePrefix(b2.pk)); err != nil {
		t.Fatal(err)
	}
	wantProblem(t, e.browse(http.MethodGet, "/payments/"+mine.ID, b2.pk, mine.ClientSecret, shopOrigin, nil, ""), http.StatusUnauthorized, "unauthorized")
	wantProblem(t, e.browse(http.MethodGet, "/payments/"+mine.ID, "pk_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", mine.ClientSecret, shopOrigin, nil, ""), http.StatusUnauthorized, "unauthorized")

	e.wantCounts(before)
	if n := e.count(`SELECT COUNT(*) FROM payments WHERE status = 'requires_confirmation'`); n != 2 {
		t.Fatalf("%d payments awaiting confirmation, want 2: a refused confirm changed one", n)
	}
}

// CORS: a preflight is answered for origins some merchant allows, and the
// request that follows is judged against its own merchant's origins.
func TestCORS(t *testing.T) {
	e := newEnv(t)
	b := e.newBrowserSide(e.merch, shopOrigin, "http://localhost:3000")
	m2, _ := e.newMerchant("Other shop")
	e.newBrowserSide(m2, "https://other.example")
	p := e.createLater("order-1", laterBody)
	confirmPath := "/payments/" + p.ID + "/confirm"

	preflight := func(path, origin, method, headers string) response {
		t.Helper()
		h := map[string]string{}
		if origin != "" {
			h["Origin"] = origin
		}
		if method != "" {
			h["Access-Control-Request-Method"] = method
		}
		if headers != "" {
			h["Access-Control-Request-Headers"] = headers
		}
		res, err := e.do(context.Background(), http.MethodOptions, path, "", h, "")
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	const clientHeaders = "authorization,client-secret,content-type,idempotency-key"
	for _, tc := range []struct {
		name, path, origin, method, headers string
		status                              int
		slug                                string
	}{
		{"confirm", confirmPath, shopOrigin, "POST", clientHeaders, http.StatusNoContent, ""},
		{"read", "/payments/" + p.ID, "http://localhost:3000", "GET", "authorization,client-secret", http.StatusNoContent, ""},
		{"an origin another merchant allows", confirmPath, "https://other.example", "POST", clientHeaders, http.StatusNoContent, ""},
		{"an origin nobody allows", confirmPath, "https://evil.example", "POST", clientHeaders, http.StatusForbidden, "origin-not-allowed"},
		{"another port", confirmPath, "http://localhost:3001", "POST", clientHeaders, http.StatusForbidden, "origin-not-allowed"},
		{"the opaque origin", confirmPath, "null", "POST", clientHeaders, http.StatusForbidden, "origin-not-allowed"},
		{"no Origin", confirmPath, "", "POST", clientHeaders, http.StatusForbidden, "origin-not-allowed"},
		{"not a preflight", confirmPath, shopOrigin, "", "", http.StatusForbidden, "origin-not-allowed"},
		{"another method", confirmPath, shopOrigin, "DELETE", clientHeaders, http.StatusForbidden, "forbidden"},
		{"a header the client does not need", confirmPath, shopOrigin, "POST", clientHeaders + ",x-debug", http.StatusForbidden, "forbidden"},
	} {
		t.Run("preflight "+tc.name, func(t *testing.T) {
			res := preflight(tc.path, tc.origin, tc.method, tc.headers)
			if tc.status != http.StatusNoContent {
				wantProblem(t, res, tc.status, tc.slug)
				if got := res.header.Get("Access-Control-Allow-Origin"); got != "" {
					t.Fatalf("a refused preflight carries Access-Control-Allow-Origin %q", got)
				}
				return
			}
			wantStatus(t, res, http.StatusNoContent)
			h := res.header
			if h.Get("Access-Control-Allow-Origin") != tc.origin || h.Get("Access-Control-Allow-Methods") != tc.method ||
				!strings.Contains(h.Get("Access-Control-Allow-Headers"), "Idempotency-Key") ||
				!strings.Contains(h.Get("Access-Control-Allow-Headers"), "Client-Secret") || h.Get("Access-Control-Max-Age") == "" {
				t.Fatalf("preflight answer headers %v", h)
			}
		})
	}
	before := e.counts()
	body := `{"payment_method": "pm_card_ok"}`
	// Merchant two allows other.example, so the preflight passed; merchant
	// one does not: refused, readably for the page, and nothing charged.
	res := e.browse(http.MethodPost, confirmPath, b.pk, p.ClientSecret, "https://other.example", map[string]string{"Idempotency-Key": "a"}, body)
	wantProblem(t, res, http.StatusForbidden, "origin-not-allowed")
	wantCORS(t, res, "https://other.example")
	// An origin nobody allows: refused, unreadable.
	res = e.browse(http.MethodPost, confirmPath, b.pk, p.ClientSecret, "https://evil.example", map[string]string{"Idempotency-Key": "a"}, body)
	wantProblem(t, res, http.StatusForbidden, "origin-not-allowed")
	if res.header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatal("an answer to an origin nobody allows carries Access-Control-Allow-Origin")
	}
	// A secret key from a browser.
	res = e.browse(http.MethodPost, confirmPath, e.apiKey, "", shopOrigin, map[string]string{"Idempotency-Key": "a"}, body)
	wantProblem(t, res, http.StatusForbidden, "forbidden")
	e.wantCounts(before)

	// Refusals from an allowed origin are readable: a decline, a problem.
	res = e.browse(http.MethodPost, confirmPath, b.pk, p.ClientSecret, shopOrigin, map[string]string{"Idempotency-Key": "a"}, `{"payment_method": "pm_card_declined"}`)
	wantStatus(t, res, http.StatusPaymentRequired)
	wantCORS(t, res, shopOrigin)
	res = e.browse(http.MethodPost, confirmPath, b.pk, p.ClientSecret, shopOrigin, map[string]string{"Idempotency-Key": "b"}, body)
	wantProblem(t, res, http.StatusConflict, "payment-not-confirmable")
	wantCORS(t, res, shopOrigin)
}

// The payment's client secret is a credential: it appears in no log line, whatever
// the request, including the refused ones.
func TestBrowserClientSecretNeverLogged(t *testing.T) {
	var logs syncBuffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	e := newEnv(t, func(s *envSetup) {
		s.cfg.Logger = log
		s.api = func(o *api.Options) { o.Logger = log }
	})
	b := e.newBrowserSide(e.merch, shopOrigin)
	p := e.createLater("order-1", laterBody)
	e.browse(http.MethodGet, "/payments/"+p.ID, b.pk, p.ClientSecret, shopOrigin, nil, "")
	e.browse(http.MethodPost, "/payments/"+p.ID+"/confirm", b.pk, p.ClientSecret, "https://evil.example", map[string]string{"Idempotency-Key": "a"}, `{"payment_method": "pm_card_ok"}`)
	e.browse(http.MethodPost, "/payments/"+p.ID+"/confirm", b.pk, p.ClientSecret+"x", shopOrigin, map[string]string{"Idempotency-Key": "a"}, `{"payment_method": "pm_card_ok"}`)
	e.psp.FailNextCharges(fake.FaultUnknownAfterCharge, 1)
	e.browse(http.MethodPost, "/payments/"+p.ID+"/confirm", b.pk, p.ClientSecret, shopOrigin, map[string]string{"Idempotency-Key": "a"}, `{"payment_method": "pm_card_ok"}`)
	e.browse(http.MethodPost, "/payments/"+p.ID+"/confirm", b.pk, p.ClientSecret, shopOrigin, map[string]string{"Idempotency-Key": "a"}, `{"payment_method": "pm_card_ok"}`)
	text := logs.text()
	if !strings.Contains(text, p.ID) {
		t.Fatalf("the payment was not logged: the check proves nothing:\n%s", text)
	}
	secret := p.ClientSecret[strings.Index(p.ClientSecret, "_secret_"):]
	if strings.Contains(text, secret) {
		t.Fatalf("the client secret is in the logs:\n%s", text)
	}
	t.Logf("%d bytes of logs checked", len(text))
}

// text is what was written so far.
func (b *syncBuffer) text() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// otherLast is secret with its last character changed.
func otherLast(secret string) string {
	last := "a"
	if strings.HasSuffix(secret, last) {
		last = "b"
	}
	return secret[:len(secret)-1] + last
}

// A secret API key sent by a browser (with an Origin header) is refused on
// every route, so that a key leaked into a page is noticed at once; the
// same request from a server (no Origin) is served.
func TestSecretKeyFromABrowserIsRefused(t *testing.T) {
	e := newEnv(t)
	e.newBrowserSide(e.merch, shopOrigin)
	paid := decodeView(t, e.post("paid", okBody).body)
	before := e.counts()
	for _, tc := range []struct{ method, path, body string }{
		{http.MethodPost, "/payments", okBody},
		{http.MethodGet, "/payments", ""},
		{http.MethodGet, "/payments?idempotency_key=paid", ""},
		{http.MethodGet, "/payments/" + paid.ID, ""},
		{http.MethodPost, "/payments/" + paid.ID + "/refunds", `{}`},
		{http.MethodGet, "/refunds", ""},
		{http.MethodGet, "/events", ""},
		{http.MethodOptions, "/payments", ""},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			for _, origin := range []string{shopOrigin, "https://evil.example"} {
				res, err := e.do(context.Background(), tc.method, tc.path, e.apiKey,
					map[string]string{"Origin": origin, "Idempotency-Key": "from-a-browser"}, tc.body)
				if err != nil {
					t.Fatal(err)
				}
				wantProblem(t, res, http.StatusForbidden, "forbidden")
			}
		})
	}
	e.wantCounts(before)
	wantStatus(t, e.post("from-the-server", okBody), http.StatusCreated)
}
