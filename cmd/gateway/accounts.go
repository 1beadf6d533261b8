package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"gateway/routing"
)

// accountsConfig names several PSP accounts and the merchants' routes among
// them (design §16): a JSON document in a file (GATEWAY_PSP_ACCOUNTS) or in
// the variable itself (GATEWAY_PSP_ACCOUNTS_JSON). Secrets are written
// "env:NAME", read from that variable, so the document holds none.
type accountsConfig struct {
	// getenv reads the variables the document names, set by its check.
	getenv func(string) string
	File   string `name:"psp-accounts" env:"GATEWAY_PSP_ACCOUNTS" placeholder:"FILE" group:"psp" help:"JSON file of named PSP accounts, the merchants' routes among them and the breakers' settings (docs/configuration.md); unset: GATEWAY_PSP is the one account"`
	JSON   string `name:"psp-accounts-json" env:"GATEWAY_PSP_ACCOUNTS_JSON" placeholder:"JSON" group:"psp" help:"the same document as GATEWAY_PSP_ACCOUNTS, in the variable itself"`
}

// accountsDoc is the document.
type accountsDoc struct {
	Accounts map[string]accountSpec `json:"accounts"`
	Routes   routing.Table          `json:"routes"`
	Breaker  breakerSpec            `json:"breaker"`
}

// accountSpec is one account: its adapter and what the adapter needs.
type accountSpec struct {
	Adapter        string `json:"adapter"`
	URL            string `json:"url,omitempty"`
	SecretKey      string `json:"secret_key,omitempty"`
	CreationWindow string `json:"creation_window,omitempty"`
	// Two-step checkout and notifications, per account.
	PublishableKey string `json:"publishable_key,omitempty"`
	ClientKey      string `json:"client_key,omitempty"`
	WebhookSecret  string `json:"webhook_secret,omitempty"`
}

type breakerSpec struct {
	Window         string `json:"window,omitempty"`
	MinCalls       int    `json:"min_calls,omitempty"`
	FailurePercent int    `json:"failure_percent,omitempty"`
	Cooldown       string `json:"cooldown,omitempty"`
	Slow           string `json:"slow,omitempty"`
}

// account is one account as configured, its secrets read.
type account struct {
	name string
	cfg  pspConfig
}

// accounts is the checked document: accounts by name, in name order.
type accounts struct {
	list    []account
	routes  routing.Table
	breaker routing.BreakerConfig
}

// accountName is what an account may be called: it is recorded on every
// payment sent to it, and is part of its notification route.
var accountName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

func (c *accountsConfig) set() (variable string, ok bool) {
	switch {
	case c.File != "":
		return "GATEWAY_PSP_ACCOUNTS", true
	case c.JSON != "":
		return "GATEWAY_PSP_ACCOUNTS_JSON", true
	}
	return "", false
}

func (c *accountsConfig) checkEnv(getenv func(string) string) []error {
	c.getenv = getenv
	if c.File != "" && c.JSON != "" {
		return []error{errors.New("set one of GATEWAY_PSP_ACCOUNTS and GATEWAY_PSP_ACCOUNTS_JSON, not both")}
	}
	_, errs := c.load()
	return errs
}

// load reads and checks the document, listing every problem, each naming
// its variable and where in the document it is; secrets are never shown.
// Nothing configured: nil, nil.
func (c *accountsConfig) load() (*accounts, []error) {
	getenv := c.getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	variable, ok := c.set()
	if !ok {
		return nil, nil
	}
	raw := []byte(c.JSON)
	if c.File != "" {
		b, err := os.ReadFile(c.File)
		if err != nil {
			return nil, []error{problem(variable, "cannot be read: %v", err)}
		}
		raw = b
	}
	var doc accountsDoc
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, []error{problem(variable, "is not a valid accounts document: %v", err)}
	}
	var errs []error
	bad := func(where, format string, args ...any) {
		errs = append(errs, problem(variable, "%s: %s", where, fmt.Sprintf(format, args...)))
	}
	if len(doc.Accounts) == 0 {
		bad("accounts", "names no account")
	}
	out := &accounts{routes: doc.Routes}
	names := make([]string, 0, len(doc.Accounts))
	for n := range doc.Accounts {
		names = append(names, n)
	}
	sort.Strings(names)
	known := map[string]bool{}
	for _, n := range names {
		spec, at := doc.Accounts[n], "accounts."+n
		known[n] = true
		if !accountName.MatchString(n) {
			bad(at, "an account's name is 1 to 64 of a-z, 0-9 and _, starting with a letter")
		}
		cfg := pspConfig{PSP: spec.Adapter, URL: spec.URL}
		switch spec.Adapter {
		case "fakehttp", "toss", "stripe":
		case "fake":
			bad(at+".adapter", "the in-process fake knows only its own process's charges; run cmd/fakepsp and use fakehttp")
		default:
			bad(at+".adapter", "names %q; available: fakehttp, toss, stripe", spec.Adapter)
		}
		secret := func(field, value string) string {
			name, isEnv := strings.CutPrefix(value, "env:")
			switch {
			case value == "":
				return ""
			case !isEnv:
				bad(at+"."+field, `must be written "env:NAME", the variable that holds it, never the secret itself`)
				return ""
			case getenv(name) == "":
				bad(at+"."+field, "names the variable %s, which is not set", name)
			}
			return getenv(name)
		}
		key := secret("secret_key", spec.SecretKey)
		webhook := secret("webhook_secret", spec.WebhookSecret)
		switch spec.Adapter {
		case "toss":
			cfg.TossSecretKey, cfg.Checkout.TossClientKey = key, spec.ClientKey
		case "stripe":
			cfg.StripeSecretKey, cfg.Checkout.StripePublishableKey, cfg.Checkout.StripeWebhookSecret = key, spec.PublishableKey, webhook
		}
		if (spec.Adapter == "toss" || spec.Adapter == "stripe") && spec.SecretKey == "" {
			bad(at+".secret_key", "is required for %s", spec.Adapter)
		}
		if spec.Adapter == "fakehttp" && spec.URL == "" {
			bad(at+".url", "is required for fakehttp (where cmd/fakepsp listens)")
		}
		if spec.PublishableKey != "" && !strings.HasPrefix(spec.PublishableKey, "pk_") {
			bad(at+".publishable_key", "must be a publishable key (pk_…), never a secret key")
		}
		if spec.CreationWindow != "" {
			d, err := time.ParseDuration(spec.CreationWindow)
			if err != nil || d <= 0 {
				bad(at+".creation_window", "must be a positive duration such as 2m")
			} else {
				cfg.CreationWindow = &d
			}
		}
		for _, e := range cfg.check() {
			if !strings.Contains(e.Error(), "GATEWAY_PSP=") { // credentials are checked above, per account
				bad(at, "%s", strings.TrimPrefix(e.Error(), "GATEWAY_PSP_URL (--psp-url) "))
			}
		}
		out.list = append(out.list, account{name: n, cfg: cfg})
	}
	for _, e := range doc.Routes.Check(known) {
		bad("routes", "%s", strings.TrimPrefix(e.Error(), "routes."))
	}
	out.breaker = routing.DefaultBreaker
	b := doc.Breaker
	duration := func(field, v string, into *time.Duration) {
		if v == "" {
			return
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			bad("breaker."+field, "must be a positive duration such as 10s")
			return
		}
		*into = d
	}
	duration("window", b.Window, &out.breaker.Window)
	duration("cooldown", b.Cooldown, &out.breaker.Cooldown)
	duration("slow", b.Slow, &out.breaker.Slow)
	if b.MinCalls < 0 {
		bad("breaker.min_calls", "must be ≥ 1")
	} else if b.MinCalls > 0 {
		out.breaker.MinCalls = b.MinCalls
	}
	if b.FailurePercent < 0 || b.FailurePercent > 100 {
		bad("breaker.failure_percent", "must be 1 to 100")
	} else if b.FailurePercent > 0 {
		out.breaker.FailurePercent = b.FailurePercent
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return out, nil
}
