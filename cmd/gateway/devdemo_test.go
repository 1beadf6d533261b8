package main

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gateway/merchants"
	"gateway/mysql/mysqltest"
)

// dev serves the checkout demo (the browser drives it in package demo's
// tests): the page with the demo merchant's publishable key and never its
// secret key, the client module, the merchant-server stub, and CORS for the
// page's origins. serve does not.
func TestDevServesCheckoutDemo(t *testing.T) {
	printed := startDev(t)
	m := regexp.MustCompile(`publishable key (pk_[a-z2-7]{32})\):\n  (http://localhost:(\d+)/demo/checkout)\n`).FindStringSubmatch(printed)
	secret := regexp.MustCompile(`API key \([^)]*\): (sk_\S+)`).FindStringSubmatch(printed)
	if m == nil || secret == nil {
		t.Fatalf("dev does not print the checkout demo:\n%s", printed)
	}
	pk, pageURL, port := m[1], m[2], m[3]
	get := func(url string) (*http.Response, string) {
		res, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	res, html := get(pageURL)
	if res.StatusCode != http.StatusOK || !strings.Contains(html, pk) || !strings.Contains(html, `data-api-base="http://127.0.0.1:`+port+`"`) {
		t.Fatalf("GET %s: %d\n%s", pageURL, res.StatusCode, html)
	}
	if strings.Contains(html, secret[1]) || strings.Contains(html, "sk_") {
		t.Fatal("the page holds a secret key")
	}
	for _, asset := range []string{"/demo/gateway.js", "/demo/assets/checkout.js"} {
		res, js := get("http://localhost:" + port + asset)
		if res.StatusCode != http.StatusOK || !strings.Contains(res.Header.Get("Content-Type"), "javascript") || !strings.Contains(js, "GatewayClient") {
			t.Fatalf("GET %s: %d %q", asset, res.StatusCode, res.Header.Get("Content-Type"))
		}
	}
	// The merchant-server stub creates the order's payment and hands the
	// page its client secret.
	res, err := http.Post("http://localhost:"+port+"/demo/orders", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	var o struct {
		PaymentID    string `json:"payment_id"`
		ClientSecret string `json:"client_secret"`
	}
	if err := json.NewDecoder(res.Body).Decode(&o); err != nil || res.StatusCode != http.StatusOK || !strings.HasPrefix(o.ClientSecret, o.PaymentID+"_secret_") {
		t.Fatalf("POST /demo/orders: %d %+v %v", res.StatusCode, o, err)
	}
	res.Body.Close()
	// The page's origin may call the API: its preflight is answered.
	req, _ := http.NewRequest(http.MethodOptions, "http://127.0.0.1:"+port+"/payments/"+o.PaymentID+"/confirm", nil)
	req.Header.Set("Origin", "http://localhost:"+port)
	req.Header.Set("Access-Control-Request-Method", "POST")
	pre, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	pre.Body.Close()
	if pre.StatusCode != http.StatusNoContent || pre.Header.Get("Access-Control-Allow-Origin") != "http://localhost:"+port {
		t.Fatalf("preflight from the demo's origin: %d %v", pre.StatusCode, pre.Header)
	}

	// serve has no demo.
	s := startServe(t, env("GATEWAY_DATABASE_DSN", mysqltest.DSNOf(t, mysqltest.MustOpen(t)), "GATEWAY_ADDR", "127.0.0.1:0"))
	if res, _ := get("http://" + s.addr + "/demo/checkout"); res.StatusCode != http.StatusNotFound {
		t.Fatalf("serve answers /demo/checkout with %d", res.StatusCode)
	}
}

// dev keeps its demo merchant beside its private database: a second run
// finds the same merchant and keys; one whose keys no longer open it (the
// database was reset, a key revoked) gets a new merchant, kept in its place.
func TestDevKeepsItsDemoMerchant(t *testing.T) {
	ctx := t.Context()
	dsn := dsnConfig{DSN: mysqltest.MustDSN(t)}
	kept := filepath.Join(t.TempDir(), "demo-merchant.json")
	first, err := devMerchant(ctx, dsn, kept)
	if err != nil {
		t.Fatal(err)
	}
	again, err := devMerchant(ctx, dsn, kept)
	if err != nil || again != first {
		t.Fatalf("second run: %+v (%v), want the first run's %+v", again, err, first)
	}
	if info, err := os.Stat(kept); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("the kept keys' file: %v, %v; want mode 0600", info, err)
	}
	err = withMerchants(ctx, dsn, func(adm *merchants.Admin) error {
		return adm.RevokeAPIKey(ctx, first.merchant.ID, merchants.KeyPrefix(first.secretKey))
	})
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := devMerchant(ctx, dsn, kept)
	if err != nil || fresh.merchant.ID == first.merchant.ID || fresh.secretKey == first.secretKey {
		t.Fatalf("after a revocation: %+v (%v), want another merchant", fresh, err)
	}
	if kept, err := devMerchant(ctx, dsn, kept); err != nil || kept != fresh {
		t.Fatalf("the new merchant is not the one kept: %+v (%v)", kept, err)
	}
	// Without a data directory nothing is kept: a new merchant each run.
	a, errA := devMerchant(ctx, dsn, "")
	b, errB := devMerchant(ctx, dsn, "")
	if errA != nil || errB != nil || a.merchant.ID == b.merchant.ID {
		t.Fatalf("without a kept file: %v %v (%v, %v)", a.merchant.ID, b.merchant.ID, errA, errB)
	}
}
