package main

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"gateway/metrics"
	"gateway/psp/fake/fakeserver"
	"gateway/routing"
)

func fakeServer(t *testing.T) string {
	t.Helper()
	s, err := fakeserver.New(fakeserver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return ts.URL
}

// Two accounts from one document: both configured with their routes,
// both answering, the default route's first account the default.
func TestPSPAccountsFromTheVariable(t *testing.T) {
	a, b := fakeServer(t), fakeServer(t)
	doc := `{"accounts": {"fake_a": {"adapter": "fakehttp", "url": "` + a + `"}, "fake_b": {"adapter": "fakehttp", "url": "` + b + `", "creation_window": "5s"}},
	  "routes": {"default": [{"account": "fake_a", "currencies": ["KRW"]}, {"account": "fake_b"}], "merchants": {"mer_x": [{"account": "fake_b"}]}},
	  "breaker": {"min_calls": 5, "cooldown": "2s"}}`
	out, _, err := runCmd(t, env("GATEWAY_PSP_ACCOUNTS_JSON", doc), "psps", "list", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Accounts []pspAccountJSON `json:"accounts"`
		Count    int              `json:"count"`
	}
	decodeOne(t, out, &got)
	if got.Count != 2 || got.Accounts[0].Name != "fake_a" || !got.Accounts[0].Default || got.Accounts[1].Name != "fake_b" {
		t.Fatalf("accounts %+v", got)
	}
	for _, acc := range got.Accounts {
		if acc.Health != "up" || acc.Adapter != "fakehttp" {
			t.Fatalf("account %+v", acc)
		}
	}
	if r := strings.Join(got.Accounts[1].Routes, ","); r != "default,mer_x" || got.Accounts[1].CreationWindowS != 5 {
		t.Fatalf("fake_b: routes %q, creation window %v", r, got.Accounts[1].CreationWindowS)
	}
}

// An account that refuses connections is listed as down, with its class.
func TestPSPsListShowsAnAccountDown(t *testing.T) {
	doc := `{"accounts": {"gone": {"adapter": "fakehttp", "url": "http://127.0.0.1:1"}}, "routes": {"default": [{"account": "gone"}]}}`
	out, _, err := runCmd(t, env("GATEWAY_PSP_ACCOUNTS_JSON", doc), "psps", "list")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "gone") || !strings.Contains(out, "down") {
		t.Fatalf("list:\n%s", out)
	}
}

// Every problem of the document is listed at once, each naming the
// variable and where it is; a secret written into it is never shown.
func TestPSPAccountsProblemsEachNameTheVariable(t *testing.T) {
	doc := `{"accounts": {
	    "Bad-Name": {"adapter": "fakehttp", "url": "http://127.0.0.1:9"},
	    "inproc": {"adapter": "fake"},
	    "nourl": {"adapter": "fakehttp"},
	    "stripe_x": {"adapter": "stripe", "secret_key": "sk_live_supersecret", "publishable_key": "sk_live_other"},
	    "toss_x": {"adapter": "toss", "secret_key": "env:TOSS_MISSING"},
	    "weird": {"adapter": "paypal", "creation_window": "-1s"}},
	  "routes": {"default": [{"account": "ghost"}], "merchants": {"mer_y": []}},
	  "breaker": {"failure_percent": 120, "window": "soon"}}`
	_, _, err := runCmd(t, env("GATEWAY_PSP_ACCOUNTS_JSON", doc, "GATEWAY_DATABASE_DSN", someDSN), "serve")
	if err == nil {
		t.Fatal("a bad accounts document was accepted")
	}
	msg := err.Error()
	for _, want := range []string{
		"accounts.Bad-Name: an account's name",
		"accounts.inproc.adapter: the in-process fake",
		"accounts.nourl.url: is required for fakehttp",
		`accounts.stripe_x.secret_key: must be written "env:NAME"`,
		"accounts.stripe_x.publishable_key: must be a publishable key",
		"accounts.toss_x.secret_key: names the variable TOSS_MISSING, which is not set",
		`accounts.weird.adapter: names "paypal"`,
		"accounts.weird.creation_window: must be a positive duration",
		`routes: default[0].account: names "ghost"`,
		"routes: merchants.mer_y: a route needs at least one account",
		"breaker.window: must be a positive duration",
		"breaker.failure_percent: must be 1 to 100",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("the problems do not say %q", want)
		}
	}
	for _, line := range strings.Split(msg, "\n") {
		if strings.Contains(line, "accounts.") && !strings.Contains(line, "GATEWAY_PSP_ACCOUNTS_JSON") {
			t.Errorf("a problem does not name its variable: %s", line)
		}
	}
	if strings.Contains(msg, "supersecret") {
		t.Errorf("a secret is shown:\n%s", msg)
	}
	// Not valid JSON at all, and a file that cannot be read: one problem each.
	if _, _, err := runCmd(t, env("GATEWAY_PSP_ACCOUNTS_JSON", `{"accounts": `, "GATEWAY_DATABASE_DSN", someDSN), "serve"); err == nil ||
		!strings.Contains(err.Error(), "GATEWAY_PSP_ACCOUNTS_JSON (--psp-accounts-json) is not a valid accounts document") {
		t.Errorf("broken JSON: %v", err)
	}
	if _, _, err := runCmd(t, env("GATEWAY_PSP_ACCOUNTS", "/nonexistent/accounts.json", "GATEWAY_DATABASE_DSN", someDSN), "serve"); err == nil ||
		!strings.Contains(err.Error(), "GATEWAY_PSP_ACCOUNTS (--psp-accounts) cannot be read") {
		t.Errorf("missing file: %v", err)
	}
}

// A secret named by its variable is read from it.
func TestPSPAccountSecretsAreReadFromTheirVariables(t *testing.T) {
	doc := `{"accounts": {"toss_kr": {"adapter": "toss", "secret_key": "env:TOSS_KR_KEY", "url": "http://127.0.0.1:1"}}, "routes": {"default": [{"account": "toss_kr"}]}}`
	s, err := parseServe(t, env("GATEWAY_PSP_ACCOUNTS_JSON", doc, "TOSS_KR_KEY", "test_sk_abc", "GATEWAY_DATABASE_DSN", someDSN))
	if err != nil {
		t.Fatal(err)
	}
	acc, errs := s.Server.PSP.Accounts.load()
	if len(errs) > 0 || len(acc.list) != 1 || acc.list[0].cfg.TossSecretKey != "test_sk_abc" {
		t.Fatalf("accounts %+v %v", acc, errs)
	}
	psps, err := newPSPs(s.Server.PSP, noInstrument)
	if err != nil {
		t.Fatal(err)
	}
	if def, _ := psps.Default(); def != "toss_kr" {
		t.Fatalf("default account %q", def)
	}
}

// With GATEWAY_ADMIN_ADDR naming a serving replica, the list shows each
// account's breaker there, as its /metrics publishes it.
func TestPSPsListShowsTheBreakersOfAReplica(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	h := routing.NewHealth([]string{"fake_a", "fake_b"}, routing.BreakerConfig{Window: time.Minute, MinCalls: 1, FailurePercent: 50, Cooldown: time.Hour}, nil)
	h.Record("fake_b", true, time.Millisecond)
	m.WatchBreakers([]string{"fake_a", "fake_b"}, h)
	admin := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer admin.Close()

	a, b := fakeServer(t), fakeServer(t)
	doc := `{"accounts": {"fake_a": {"adapter": "fakehttp", "url": "` + a + `"}, "fake_b": {"adapter": "fakehttp", "url": "` + b + `"}},
	  "routes": {"default": [{"account": "fake_a"}, {"account": "fake_b"}]}}`
	out, _, err := runCmd(t, env("GATEWAY_PSP_ACCOUNTS_JSON", doc, "GATEWAY_ADMIN_ADDR", strings.TrimPrefix(admin.URL, "http://")), "psps", "list", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Accounts []pspAccountJSON `json:"accounts"`
	}
	decodeOne(t, out, &got)
	if len(got.Accounts) != 2 || got.Accounts[0].Breaker == nil || *got.Accounts[0].Breaker != "closed" ||
		got.Accounts[1].Breaker == nil || *got.Accounts[1].Breaker != "open" {
		t.Fatalf("accounts %+v", got.Accounts)
	}
	// Without it, no breaker is claimed.
	out, _, err = runCmd(t, env("GATEWAY_PSP_ACCOUNTS_JSON", doc), "psps", "list", "--json")
	if err != nil {
		t.Fatal(err)
	}
	decodeOne(t, out, &got)
	if got.Accounts[0].Breaker != nil {
		t.Fatalf("a breaker shown without a replica: %+v", got.Accounts[0])
	}
}
