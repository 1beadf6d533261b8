package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"

	"gateway/merchants"
	"gateway/mysql/mysqltest"
	"gateway/payments"
	"gateway/reconcile"
)

func TestMain(m *testing.M) { mysqltest.Main(m) }

// env builds a getenv from pairs.
func env(pairs ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(pairs); i += 2 {
		m[pairs[i]] = pairs[i+1]
	}
	return func(k string) string { return m[k] }
}

// testApp is an app on buffers; terminal says whether its streams count as one.
func testApp(getenv func(string) string, stdin string, terminal bool) (*app, *bytes.Buffer, *bytes.Buffer) {
	var out, errb bytes.Buffer
	return &app{getenv: getenv, stdin: strings.NewReader(stdin), stdout: &out, stderr: &errb,
		terminal: func(any) bool { return terminal }}, &out, &errb
}

func runCmd(t *testing.T, getenv func(string) string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	err = run(context.Background(), args, getenv, &out, &errb)
	return out.String(), errb.String(), err
}

// decodeOne decodes stdout as exactly one JSON document.
func decodeOne(t *testing.T, out string, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(v); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, out)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		t.Fatalf("stdout holds more than one JSON document:\n%s", out)
	}
}

// keysOf lists a JSON object's field names, sorted.
func keysOf(t *testing.T, v any) []string {
	t.Helper()
	m, ok := v.(map[string]any)
	if !ok {
		t.Fatalf("%v is not a JSON object", v)
	}
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

func wantKeys(t *testing.T, what string, v any, want ...string) {
	t.Helper()
	slices.Sort(want)
	if got := keysOf(t, v); !slices.Equal(got, want) {
		t.Errorf("%s fields %q, want %q", what, got, want)
	}
}

// model is the command line's model, for tests that walk every command.
func model(t *testing.T) *kong.Application {
	t.Helper()
	a, _, _ := testApp(env(), "", false)
	k, err := a.parser(context.Background(), &commandLine{})
	if err != nil {
		t.Fatal(err)
	}
	return k.Model
}

// leaves lists every runnable command with the variables of its flags.
func leaves(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	var walk func(n *kong.Node)
	walk = func(n *kong.Node) {
		if len(n.Children) == 0 && n.Type == kong.CommandNode {
			var envs []string
			for _, group := range n.AllFlags(false) {
				for _, f := range group {
					envs = append(envs, f.Envs...)
				}
			}
			out[strings.TrimPrefix(n.FullPath(), "gateway ")] = envs
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(model(t).Node)
	return out
}

// Every command's help is on stdout and shows its own variables and no others.
func TestHelpPerCommand(t *testing.T) {
	all := map[string]bool{}
	cmds := leaves(t)
	for _, envs := range cmds {
		for _, e := range envs {
			all[e] = true
		}
	}
	for cmd, envs := range cmds {
		t.Run(cmd, func(t *testing.T) {
			out, stderr, err := runCmd(t, env(), append(strings.Fields(cmd), "--help")...)
			if err != nil || stderr != "" || !strings.HasPrefix(out, "Usage: gateway "+cmd) {
				t.Fatalf("help: err %v, stderr %q, stdout:\n%s", err, stderr, out)
			}
			for e := range all {
				// A flag shows "($GATEWAY_X", a secret its own line.
				if has := strings.Contains(out, "$"+e) || strings.Contains(out, "\n  "+e+"\n"); has != slices.Contains(envs, e) {
					t.Errorf("help shows %s: %v, want %v\n%s", e, has, !has, out)
				}
			}
			// `gateway help CMD` is the same text (one command of each depth
			// is enough: kong renders both).
			if cmd != "serve" && cmd != "merchants create" && cmd != "merchants keys list" {
				return
			}
			same, _, err := runCmd(t, env(), append([]string{"help"}, strings.Fields(cmd)...)...)
			if err != nil || same != out {
				t.Errorf("gateway help %s differs from --help (%v)", cmd, err)
			}
		})
	}
	if len(cmds["serve"]) < 25 || len(cmds["migrate up"]) != 1 || !slices.Contains(cmds["payments resolve"], "GATEWAY_ACTOR") {
		t.Errorf("commands and their variables: %v", cmds)
	}

	out, _, err := runCmd(t, env(), "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Exit status: 0 done; 1 error; 2 usage", "3 payments need a person", "payments show <payment-id>", "migrate force <version>", "healthcheck", "version"} {
		if !strings.Contains(out, want) {
			t.Errorf("top-level help lacks %q:\n%s", want, out)
		}
	}
	// No command: the help on stderr, and a usage error.
	out, stderr, err := runCmd(t, env())
	if exitCode(err) != exitUsage || out != "" || !strings.Contains(stderr, "Usage: gateway <command>") {
		t.Errorf("no command: exit %d, stdout %q, stderr %q", exitCode(err), out, stderr)
	}
}

// The variable GATEWAY_FOO_BAR is the flag --foo-bar, and docs/configuration.md's
// configuration table lists exactly the variables the commands read.
func TestEveryVariableIsAFlagAndDocumented(t *testing.T) {
	vars := map[string]bool{}
	var walk func(n *kong.Node)
	walk = func(n *kong.Node) {
		for _, f := range n.Flags {
			for _, e := range f.Envs {
				vars[e] = true
				if "--"+f.Name != flagOf(e) {
					t.Errorf("%s: flag --%s, want %s", n.FullPath(), f.Name, flagOf(e))
				}
			}
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(model(t).Node)
	readme, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(GATEWAY_[A-Z_]+)` \\|").FindAllStringSubmatch(string(readme), -1) {
		documented[m[1]] = true
	}
	delete(documented, "GATEWAY_TEST_DSN")
	for v := range vars {
		if !documented[v] {
			t.Errorf("%s is read but not in docs/configuration.md's table", v)
		}
	}
	for v := range documented {
		if !vars[v] {
			t.Errorf("docs/configuration.md documents %s, which no command reads", v)
		}
	}
	if len(vars) < 33 {
		t.Errorf("%d variables", len(vars))
	}
}

// parseServe parses `serve` with getenv and returns what serve would run with.
func parseServe(t *testing.T, getenv func(string) string, args ...string) (*serveCmd, error) {
	t.Helper()
	a, _, _ := testApp(getenv, "", false)
	_, root, err := a.parse(context.Background(), append([]string{"serve"}, args...))
	if err != nil {
		return nil, err
	}
	return &root.Serve, nil
}

const someDSN = "gw:pw@tcp(127.0.0.1:1)/gateway"

func TestDefaultsComeFromTheConstants(t *testing.T) {
	s, err := parseServe(t, env("GATEWAY_DATABASE_DSN", someDSN))
	if err != nil {
		t.Fatal(err)
	}
	c := s.Server
	for name, got := range map[string][2]any{
		"lease":          {c.Flow.Lease, payments.DefaultLease},
		"psp timeout":    {c.Flow.PSPTimeout, payments.DefaultPSPTimeout},
		"retention":      {c.Flow.Retention, payments.DefaultRetention},
		"inflight wait":  {c.HTTP.InFlightWait, payments.DefaultInFlightWait},
		"auth ttl":       {c.HTTP.AuthCacheTTL, merchants.DefaultAuthCacheTTL},
		"schedule":       {c.Reconcile.Schedule, reconcile.DefaultSchedule},
		"attempts":       {c.Reconcile.MaxAttempts, reconcile.DefaultMaxAttempts},
		"batch":          {c.Reconcile.Batch, reconcile.DefaultBatchSize},
		"concurrency":    {c.Reconcile.Concurrency, reconcile.DefaultConcurrency},
		"backoff":        {c.Reconcile.Backoff, reconcile.DefaultBackoffBase},
		"backoff max":    {c.Reconcile.BackoffMax, reconcile.DefaultBackoffMax},
		"purge batch":    {c.Reconcile.PurgeBatch, reconcile.DefaultPurgeBatch},
		"purge rest":     {c.Reconcile.PurgeRest, reconcile.DefaultPurgeRest},
		"addr":           {c.HTTP.Addr, "127.0.0.1:8080"},
		"psp":            {c.PSP.adapter(), "fake"},
		"auto migrate":   {s.AutoMigrate, false},
		"confirm expiry": {c.PSP.Checkout.ConfirmExpiry, payments.DefaultConfirmExpiry},
	} {
		if got[0] != got[1] {
			t.Errorf("%s: %v, want %v", name, got[0], got[1])
		}
	}
}

// A flag and its variable are one setting: the flag wins, the variable
// beats the default, and the process's own environment is never read.
func TestFlagsAndVariablesAreOneConfiguration(t *testing.T) {
	t.Setenv("GATEWAY_LEASE", "99s") // the process's environment: must not leak in
	s, err := parseServe(t, env("GATEWAY_DATABASE_DSN", someDSN, "GATEWAY_PSP_TIMEOUT", "20s", "GATEWAY_SHUTDOWN_TIMEOUT", "50s", "GATEWAY_PSP", "mock"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Server.Flow.PSPTimeout != 20*time.Second || s.Server.Flow.Lease != payments.DefaultLease || s.Server.PSP.adapter() != "fake" {
		t.Fatalf("from variables: %+v %q", s.Server.Flow, s.Server.PSP.adapter())
	}
	s, err = parseServe(t, env("GATEWAY_DATABASE_DSN", someDSN, "GATEWAY_LEASE", "40s"), "--lease", "50s", "--auto-migrate")
	if err != nil {
		t.Fatal(err)
	}
	if s.Server.Flow.Lease != 50*time.Second || !s.AutoMigrate {
		t.Fatalf("the flag does not win: lease %s, auto-migrate %v", s.Server.Flow.Lease, s.AutoMigrate)
	}
	// Cross-field checks see the merged values: a flag may break what the variables made valid.
	if _, err := parseServe(t, env("GATEWAY_DATABASE_DSN", someDSN, "GATEWAY_LEASE", "40s"), "--psp-timeout=45s"); err == nil ||
		!strings.Contains(err.Error(), "GATEWAY_LEASE (40s) must exceed GATEWAY_PSP_TIMEOUT (45s)") {
		t.Fatalf("cross-field check with a flag: %v", err)
	}
}

func TestConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     []string
		args    []string
		mention []string
	}{
		{"lease shorter than psp timeout", []string{"GATEWAY_LEASE", "5s", "GATEWAY_PSP_TIMEOUT", "10s"}, nil, []string{"GATEWAY_LEASE", "GATEWAY_PSP_TIMEOUT"}},
		{"bad duration", []string{"GATEWAY_INFLIGHT_WAIT", "soon"}, nil, []string{"GATEWAY_INFLIGHT_WAIT=soon", "--inflight-wait"}},
		{"bad duration flag", nil, []string{"--inflight-wait", "soon"}, []string{"--inflight-wait", "soon"}},
		{"bad integer", []string{"GATEWAY_RATE_BURST", "many"}, nil, []string{"GATEWAY_RATE_BURST"}},
		{"bad addr", []string{"GATEWAY_ADDR", "8080"}, nil, []string{"GATEWAY_ADDR (--addr) must be host:port"}},
		{"unknown psp", []string{"GATEWAY_PSP", "paypal"}, nil, []string{"GATEWAY_PSP", "paypal"}},
		{"toss without its key", []string{"GATEWAY_PSP", "toss"}, nil, []string{"GATEWAY_TOSS_SECRET_KEY"}},
		{"stripe without its key", []string{"GATEWAY_PSP", "stripe"}, nil, []string{"GATEWAY_STRIPE_SECRET_KEY"}},
		{"psp url not a url", []string{"GATEWAY_PSP", "fakehttp", "GATEWAY_PSP_URL", "localhost:9090"}, nil, []string{"GATEWAY_PSP_URL"}},
		{"creation window not positive", []string{"GATEWAY_PSP_CREATION_WINDOW", "0s"}, nil, []string{"GATEWAY_PSP_CREATION_WINDOW"}},
		{"bad dsn", []string{"GATEWAY_DATABASE_DSN", "mysql://x"}, nil, []string{"GATEWAY_DATABASE_DSN"}},
		{"bad schedule", []string{"GATEWAY_RECONCILE_SCHEDULE", "sometimes"}, nil, []string{"GATEWAY_RECONCILE_SCHEDULE"}},
		{"backoff max below backoff", []string{"GATEWAY_RECONCILE_BACKOFF", "1h"}, nil, []string{"GATEWAY_RECONCILE_BACKOFF_MAX"}},
		{"body limit too small", []string{"GATEWAY_MAX_BODY_BYTES", "10"}, nil, []string{"GATEWAY_MAX_BODY_BYTES"}},
		{"bad bool", []string{"GATEWAY_AUTO_MIGRATE", "perhaps"}, nil, []string{"GATEWAY_AUTO_MIGRATE=perhaps"}},
		{"several at once", []string{"GATEWAY_DB_MAX_OPEN_CONNS", "0", "GATEWAY_LOG_FORMAT", "xml", "GATEWAY_LEASE", "x"},
			nil, []string{"GATEWAY_DB_MAX_OPEN_CONNS", "GATEWAY_LOG_FORMAT", "GATEWAY_LEASE=x", "GATEWAY_DB_MAX_IDLE_CONNS (32) must not exceed"}},
		{"secret on the command line", []string{"GATEWAY_PSP", "stripe"}, []string{"--stripe-secret-key", "sk_test_x"}, []string{"pass secrets in GATEWAY_STRIPE_SECRET_KEY"}},
		{"a secret key as the publishable key", []string{"GATEWAY_STRIPE_PUBLISHABLE_KEY", "sk_live_x"}, nil, []string{"GATEWAY_STRIPE_PUBLISHABLE_KEY (--stripe-publishable-key)"}},
		{"a webhook secret without stripe", []string{"GATEWAY_STRIPE_WEBHOOK_SECRET", "whsec_x"}, nil, []string{"GATEWAY_STRIPE_WEBHOOK_SECRET", "GATEWAY_STRIPE_SECRET_KEY"}},
		{"confirm expiry not positive", []string{"GATEWAY_CONFIRM_EXPIRY", "0s"}, nil, []string{"GATEWAY_CONFIRM_EXPIRY"}},
		{"webhook secret on the command line", []string{"GATEWAY_STRIPE_SECRET_KEY", "sk_test_x"}, []string{"--stripe-webhook-secret", "whsec_x"}, []string{"GATEWAY_STRIPE_WEBHOOK_SECRET"}},
		{"events purged before their deliveries end", []string{"GATEWAY_EVENT_RETENTION", "48h"}, nil, []string{"GATEWAY_EVENT_RETENTION (48h0m0s) must exceed"}},
		{"webhook deliveries retried past the events' retention", []string{"GATEWAY_WEBHOOK_MAX_AGE", "960h"}, nil, []string{"GATEWAY_EVENT_RETENTION (720h0m0s) must exceed GATEWAY_WEBHOOK_MAX_AGE (960h0m0s)"}},
		{"webhook key of the wrong size", []string{"GATEWAY_WEBHOOK_KEY", "c2hvcnQ="}, nil, []string{"GATEWAY_WEBHOOK_KEY must be 32 bytes"}},
		{"webhook key on the command line", nil, []string{"--webhook-key", strings.Repeat("ab", 32)}, []string{"pass secrets in GATEWAY_WEBHOOK_KEY"}},
		{"webhook networks not networks", []string{"GATEWAY_WEBHOOK_ALLOW_NETWORKS", "localhost"}, nil, []string{"GATEWAY_WEBHOOK_ALLOW_NETWORKS (--webhook-allow-networks)"}},
		{"webhook backoff max below backoff", []string{"GATEWAY_WEBHOOK_BACKOFF", "1h", "GATEWAY_WEBHOOK_BACKOFF_MAX", "1m"}, nil, []string{"GATEWAY_WEBHOOK_BACKOFF_MAX (1m0s) must not be below"}},
		{"webhook concurrency zero", []string{"GATEWAY_WEBHOOK_CONCURRENCY", "0"}, nil, []string{"GATEWAY_WEBHOOK_CONCURRENCY"}},
		{"webhook grace too long", []string{"GATEWAY_WEBHOOK_ROTATION_GRACE", "720h"}, nil, []string{"GATEWAY_WEBHOOK_ROTATION_GRACE"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			getenv := env(append([]string{"GATEWAY_DATABASE_DSN", someDSN}, tc.env...)...)
			_, _, err := runCmd(t, getenv, append([]string{"serve"}, tc.args...)...)
			if exitCode(err) != exitUsage {
				t.Fatalf("exit %d (%v), want %d", exitCode(err), err, exitUsage)
			}
			for _, m := range tc.mention {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not mention %s", err, m)
				}
			}
		})
	}
	_, _, err := runCmd(t, env(), "serve")
	if exitCode(err) != exitUsage || !strings.Contains(err.Error(), "GATEWAY_DATABASE_DSN is not set (nor --database-dsn)") {
		t.Fatalf("serve without a DSN: %v", err)
	}
	// Secrets in variables are never echoed back, even when something else is wrong.
	_, _, err = runCmd(t, env("GATEWAY_PSP", "stripe", "GATEWAY_STRIPE_SECRET_KEY", "sk_live_hush", "GATEWAY_LEASE", "x"), "serve")
	if err == nil || strings.Contains(err.Error(), "hush") {
		t.Fatalf("error %v", err)
	}
	// Each command reads only its own variables: a broken serve setting does not stop migrate.
	if _, _, err := runCmd(t, env("GATEWAY_LEASE", "x"), "migrate", "version"); !strings.Contains(err.Error(), "GATEWAY_DATABASE_DSN is not set") || strings.Contains(err.Error(), "LEASE") {
		t.Fatalf("migrate reads serve's variables: %v", err)
	}
}

func TestUsageErrors(t *testing.T) {
	for name, args := range map[string][]string{
		"unknown command":         {"launch"},
		"migrate sideways":        {"migrate", "sideways"},
		"migrate bare":            {"migrate"},
		"merchants bare":          {"merchants"},
		"no name":                 {"merchants", "create"},
		"keys without merchant":   {"merchants", "keys", "list"},
		"revoke without prefix":   {"merchants", "keys", "revoke", "--merchant", "mer_1"},
		"unknown flag":            {"serve", "--port", "1"},
		"single dash":             {"serve", "-lease", "1s"},
		"force without version":   {"migrate", "force"},
		"force an unknown":        {"migrate", "force", "999"},
		"force not a number":      {"migrate", "force", "four"},
		"show without id":         {"payments", "show"},
		"resolve without id":      {"payments", "resolve", "--as", "failed", "--reason", "r", "--actor", "me"},
		"resolve bad as":          {"payments", "resolve", "pay_1", "--as", "declined", "--reason", "r", "--actor", "me"},
		"list bad status":         {"payments", "list", "--status", "lost"},
		"json without once":       {"reconcile", "--json"},
		"reconcile in-process":    {"reconcile", "--once"},
		"two ids":                 {"payments", "show", "pay_1", "pay_2"},
		"healthcheck bad timeout": {"healthcheck", "--timeout", "0s"},
	} {
		t.Run(name, func(t *testing.T) {
			out, _, err := runCmd(t, env("GATEWAY_DATABASE_DSN", someDSN), args...)
			if exitCode(err) != exitUsage || out != "" {
				t.Fatalf("exit %d (%v), stdout %q; want a usage error and nothing on stdout", exitCode(err), err, out)
			}
			if !strings.Contains(err.Error(), "--help") {
				t.Errorf("error %q does not point at the help", err)
			}
		})
	}
}

func TestExitCodes(t *testing.T) {
	if _, _, err := runCmd(t, env(), "version"); exitCode(err) != 0 {
		t.Errorf("version: %v", err)
	}
	// A runtime failure (nothing listens there) is 1, not a usage error.
	if _, _, err := runCmd(t, env("GATEWAY_DATABASE_DSN", someDSN), "merchants", "list"); exitCode(err) != exitError {
		t.Errorf("unreachable database: exit %d (%v)", exitCode(err), err)
	}
	if exitCode(exitStatus{code: exitNeedsReview}) != 3 || exitCode(usageError{}) != 2 || exitCode(errors.New("x")) != 1 || exitCode(nil) != 0 {
		t.Error("exit code mapping")
	}
}

func TestVersion(t *testing.T) {
	out, _, err := runCmd(t, env(), "version")
	if err != nil || !strings.HasPrefix(out, "gateway ") || !strings.Contains(out, "go1.") {
		t.Fatalf("version: %v %q", err, out)
	}
	out, _, err = runCmd(t, env(), "version", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var v any
	decodeOne(t, out, &v)
	wantKeys(t, "version", v, "version", "revision", "revision_time", "modified", "go_version", "platform")
}

func TestMaskDSN(t *testing.T) {
	got := maskDSN("gw:s3cret@tcp(db:3306)/gateway")
	if strings.Contains(got, "s3cret") || !strings.Contains(got, "db:3306") {
		t.Fatalf("maskDSN = %q", got)
	}
}

func TestEveryPSPBuilds(t *testing.T) {
	for _, getenv := range []func(string) string{
		env("GATEWAY_PSP", "fake"),
		env("GATEWAY_PSP", "fakehttp"),
		env("GATEWAY_PSP", "toss", "GATEWAY_TOSS_SECRET_KEY", "test_sk_x"),
		env("GATEWAY_PSP", "stripe", "GATEWAY_STRIPE_SECRET_KEY", "sk_test_x"),
	} {
		s, err := parseServe(t, func(k string) string {
			if k == "GATEWAY_DATABASE_DSN" {
				return someDSN
			}
			return getenv(k)
		})
		if err != nil {
			t.Fatal(err)
		}
		a, err := newPSP(s.Server.PSP)
		if err != nil || a.Capabilities().Name == "" {
			t.Fatalf("%s: %v", s.Server.PSP.PSP, err)
		}
	}
}

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"":                     {},
		"30m":                  now.Add(-30 * time.Minute),
		"7d":                   now.AddDate(0, 0, -7),
		"2026-11-29":           time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC),
		"2026-11-29T08:00:00Z": time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC),
	} {
		if got, err := parseSince(in, now); err != nil || !got.Equal(want) {
			t.Errorf("parseSince(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"yesterday", "-5m", "0d", "2026-13-01"} {
		if _, err := parseSince(bad, now); err == nil {
			t.Errorf("parseSince(%q) accepted", bad)
		}
	}
}
