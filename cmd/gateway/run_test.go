package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"gateway/db"
	"gateway/db/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }

// env builds a getenv from pairs.
func env(pairs ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(pairs); i += 2 {
		m[pairs[i]] = pairs[i+1]
	}
	return func(k string) string { return m[k] }
}

func runCmd(t *testing.T, getenv func(string) string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errb bytes.Buffer
	err = run(context.Background(), args, getenv, &out, &errb)
	return out.String(), errb.String(), err
}

func TestHelpListsEverySetting(t *testing.T) {
	out, _, err := runCmd(t, env(), "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range settings() {
		if !strings.Contains(out, s.name) {
			t.Errorf("help lacks %s", s.name)
		}
	}
	for _, sub := range [][]string{{"serve", "--help"}, {"migrate", "--help"}, {"merchants", "create", "--help"}, {"dev", "--help"}} {
		_, stderr, err := runCmd(t, env(), sub...)
		if err != nil || !strings.Contains(stderr, "GATEWAY_DATABASE_DSN") {
			t.Errorf("%v: err=%v, help=%q", sub, err, stderr)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	for name, args := range map[string][]string{
		"no command":       {},
		"unknown command":  {"launch"},
		"migrate sideways": {"migrate", "sideways"},
		"merchants bare":   {"merchants"},
		"no name":          {"merchants", "create"},
		"unknown flag":     {"serve", "--port", "1"},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := runCmd(t, env("GATEWAY_DATABASE_DSN", "root@tcp(127.0.0.1:1)/x"), args...)
			if exitCode(err) != 2 {
				t.Fatalf("err %v, want a usage error", err)
			}
		})
	}
}

func TestConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     []string
		mention []string
	}{
		{"lease shorter than psp timeout", []string{"GATEWAY_LEASE", "5s", "GATEWAY_PSP_TIMEOUT", "10s"}, []string{"GATEWAY_LEASE", "GATEWAY_PSP_TIMEOUT"}},
		{"bad duration", []string{"GATEWAY_INFLIGHT_WAIT", "soon"}, []string{"GATEWAY_INFLIGHT_WAIT"}},
		{"bad addr", []string{"GATEWAY_ADDR", "8080"}, []string{"GATEWAY_ADDR"}},
		{"unknown psp", []string{"GATEWAY_PSP", "paypal"}, []string{"GATEWAY_PSP", "paypal"}},
		{"toss without its key", []string{"GATEWAY_PSP", "toss"}, []string{"GATEWAY_TOSS_SECRET_KEY"}},
		{"stripe without its key", []string{"GATEWAY_PSP", "stripe"}, []string{"GATEWAY_STRIPE_SECRET_KEY"}},
		{"psp url not a url", []string{"GATEWAY_PSP", "fakehttp", "GATEWAY_PSP_URL", "localhost:9090"}, []string{"GATEWAY_PSP_URL"}},
		{"bad dsn", []string{"GATEWAY_DATABASE_DSN", "mysql://x"}, []string{"GATEWAY_DATABASE_DSN"}},
		{"several at once", []string{"GATEWAY_DB_MAX_OPEN_CONNS", "0", "GATEWAY_LOG_FORMAT", "xml"}, []string{"GATEWAY_DB_MAX_OPEN_CONNS", "GATEWAY_LOG_FORMAT"}},
		{"a secret key as the publishable key", []string{"GATEWAY_STRIPE_PUBLISHABLE_KEY", "sk_live_x"}, []string{"GATEWAY_STRIPE_PUBLISHABLE_KEY"}},
		{"a webhook secret without stripe", []string{"GATEWAY_STRIPE_WEBHOOK_SECRET", "whsec_x"}, []string{"GATEWAY_STRIPE_WEBHOOK_SECRET", "GATEWAY_STRIPE_SECRET_KEY"}},
		{"confirm expiry not a duration", []string{"GATEWAY_CONFIRM_EXPIRY", "an hour"}, []string{"GATEWAY_CONFIRM_EXPIRY"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := runCmd(t, env(tc.env...), "serve")
			if err == nil {
				t.Fatal("invalid configuration accepted")
			}
			for _, m := range tc.mention {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("error %q does not mention %s", err, m)
				}
			}
		})
	}
	if _, _, err := runCmd(t, env(), "serve"); err == nil || !strings.Contains(err.Error(), "GATEWAY_DATABASE_DSN is not set") {
		t.Fatalf("serve without a DSN: %v", err)
	}
}

func TestEveryPSPBuilds(t *testing.T) {
	for _, getenv := range []func(string) string{
		env("GATEWAY_PSP", "fake"),
		env("GATEWAY_PSP", "fakehttp"),
		env("GATEWAY_PSP", "toss", "GATEWAY_TOSS_SECRET_KEY", "test_sk_x"),
		env("GATEWAY_PSP", "stripe", "GATEWAY_STRIPE_SECRET_KEY", "sk_test_x"),
	} {
		cfg, err := loadConfig(getenv)
		if err != nil {
			t.Fatal(err)
		}
		a, err := newPSP(cfg)
		if err != nil || a.Capabilities().Name == "" {
			t.Fatalf("%s: %v", cfg.PSP, err)
		}
	}
}

func TestMaskDSN(t *testing.T) {
	got := maskDSN("gw:s3cret@tcp(db:3306)/gateway")
	if strings.Contains(got, "s3cret") || !strings.Contains(got, "db:3306") {
		t.Fatalf("maskDSN = %q", got)
	}
}

func TestMigrateAndCreateMerchant(t *testing.T) {
	dsn := dbtest.MustDSN(t) // already migrated
	getenv := env("GATEWAY_DATABASE_DSN", dsn)
	version := func(action string) int {
		t.Helper()
		out, _, err := runCmd(t, getenv, "migrate", action)
		var v int
		if _, serr := fmt.Sscanf(out, "schema version %d\n", &v); err != nil || serr != nil {
			t.Fatalf("migrate %s: %q %v", action, out, err)
		}
		return v
	}
	latest := version("version")
	if latest < 4 {
		t.Fatalf("schema version %d", latest)
	}
	if v := version("down"); v != latest-1 {
		t.Fatalf("down: version %d, want %d", v, latest-1)
	}
	if v := version("up"); v != latest {
		t.Fatalf("up: version %d, want %d", v, latest)
	}

	out, _, err := runCmd(t, getenv, "merchants", "create", "--name", "Acme")
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(strings.NewReader(out))
	var created map[string]string
	if err := dec.Decode(&created); err != nil {
		t.Fatalf("stdout %q: %v", out, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		t.Fatalf("stdout holds more than one JSON object: %q", out)
	}
	if len(created) != 2 || !strings.HasPrefix(created["merchant_id"], "mer_") || !strings.HasPrefix(created["api_key"], "sk_") {
		t.Fatalf("unexpected output %v", created)
	}
	dbx, err := db.Open(context.Background(), dsn, db.PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer dbx.Close()
	sum := sha256.Sum256([]byte(created["api_key"]))
	if n := dbtest.Count(t, dbx, `SELECT COUNT(*) FROM api_keys WHERE key_hash = ? AND merchant_id = ?`, sum[:], created["merchant_id"]); n != 1 {
		t.Fatal("the API key's hash is not stored")
	}
	if n := dbtest.Count(t, dbx, `SELECT COUNT(*) FROM api_keys WHERE prefix = ? OR INSTR(key_hash, ?) > 0`, created["api_key"], created["api_key"]); n != 0 {
		t.Fatal("the plaintext API key is stored")
	}
}

// serve answers requests and, on shutdown, lets a request in flight finish.
func TestServeDrainsInFlightRequests(t *testing.T) {
	dsn := dbtest.MustDSN(t)
	out, _, err := runCmd(t, env("GATEWAY_DATABASE_DSN", dsn), "merchants", "create", "--name", "Acme")
	if err != nil {
		t.Fatal(err)
	}
	var created map[string]string
	if err := json.Unmarshal([]byte(out), &created); err != nil {
		t.Fatal(err)
	}
	getenv := env("GATEWAY_DATABASE_DSN", dsn, "GATEWAY_ADDR", "127.0.0.1:0",
		"GATEWAY_FAKE_PSP_LATENCY", "300ms", "GATEWAY_SHUTDOWN_TIMEOUT", "30s")
	logR, logW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"serve"}, getenv, io.Discard, logW)
		logW.Close()
	}()
	lines := bufio.NewScanner(logR)
	var addr string
	for addr == "" && lines.Scan() {
		var entry map[string]any
		if json.Unmarshal(lines.Bytes(), &entry) == nil && entry["msg"] == "gateway listening" {
			addr, _ = entry["addr"].(string)
		}
	}
	go func() { _, _ = io.Copy(io.Discard, logR) }()
	if addr == "" {
		t.Fatalf("serve never listened: %v", <-done)
	}

	type result struct {
		status int
		err    error
	}
	resc := make(chan result, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/payments",
			strings.NewReader(`{"amount": 500, "currency": "USD", "payment_method": "pm_card_ok"}`))
		req.Header.Set("Authorization", "Bearer "+created["api_key"])
		req.Header.Set("Idempotency-Key", "drain")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			resc <- result{err: err}
			return
		}
		res.Body.Close()
		resc <- result{status: res.StatusCode}
	}()

	// Shut down once the request is inside the PSP call (its key is claimed).
	dbx, err := db.Open(context.Background(), dsn, db.PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer dbx.Close()
	deadline := time.Now().Add(10 * time.Second)
	for dbtest.Count(t, dbx, `SELECT COUNT(*) FROM idempotency_keys WHERE state = 'IN_PROGRESS'`) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the request never reached the PSP")
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, bounded by the deadline
	}
	cancel()
	r := <-resc
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
	switch {
	case r.err == nil && r.status == http.StatusCreated:
		// The charge had left: the drain let it finish.
		if n := dbtest.Count(t, dbx, `SELECT COUNT(*) FROM payments WHERE status = 'succeeded'`); n != 1 {
			t.Fatalf("%d succeeded payments, want 1", n)
		}
	case r.err == nil && r.status == http.StatusServiceUnavailable:
		// Claimed but not yet sent when the shutdown began: given back unsent,
		// for the retry elsewhere.
		if n := dbtest.Count(t, dbx, `SELECT COUNT(*) FROM idempotency_keys WHERE state = 'IN_PROGRESS' AND charges_not_sent = charge_attempts`); n != 1 {
			t.Fatal("a 503 during shutdown left the key without its unsent mark")
		}
	default:
		t.Fatalf("in-flight request during shutdown: %+v", r)
	}
}
