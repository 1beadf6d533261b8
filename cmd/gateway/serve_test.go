package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"gateway/mysql"
	"gateway/mysql/mysqltest"
)

// served is a running `gateway serve`.
type served struct {
	addr string
	done chan error
	stop context.CancelFunc

	mu   sync.Mutex
	logs []map[string]any
}

// startServe runs `gateway serve` until the test ends and waits for its listener.
func startServe(t *testing.T, getenv func(string) string) *served {
	t.Helper()
	logR, logW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	s := &served{done: make(chan error, 1), stop: cancel}
	go func() {
		s.done <- run(ctx, []string{"serve"}, getenv, io.Discard, logW)
		logW.Close()
	}()
	listening := make(chan string, 1)
	go func() {
		lines := bufio.NewScanner(logR)
		for lines.Scan() {
			var entry map[string]any
			if json.Unmarshal(lines.Bytes(), &entry) != nil {
				continue
			}
			s.mu.Lock()
			s.logs = append(s.logs, entry)
			s.mu.Unlock()
			if entry["msg"] == "gateway listening" {
				listening <- entry["addr"].(string)
			}
		}
		close(listening)
	}()
	addr, ok := <-listening
	if !ok {
		t.Fatalf("serve never listened: %v", <-s.done)
	}
	s.addr = addr
	t.Cleanup(func() {
		cancel()
		<-s.done
	})
	return s
}

func (s *served) log(msg string) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.logs {
		if l["msg"] == msg {
			return l
		}
	}
	return nil
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// serve refuses a schema behind this release, names the command that fixes
// it, and starts once it is run (or with GATEWAY_AUTO_MIGRATE).
func TestServeRefusesAnOldSchema(t *testing.T) {
	dbx := mysqltest.MustOpen(t)
	dsn := mysqltest.DSNOf(t, dbx)
	getenv := env("GATEWAY_DATABASE_DSN", dsn, "GATEWAY_ADDR", "127.0.0.1:0")
	if _, _, err := runCmd(t, getenv, "migrate", "down", "--yes"); err != nil {
		t.Fatal(err)
	}
	err := serveBriefly(getenv)
	if exitCode(err) != exitError || !strings.Contains(err.Error(), "needs "+itoa(mysql.LatestVersion())) || !strings.Contains(err.Error(), "gateway migrate up") {
		t.Fatalf("serve on an old schema: %v", err)
	}
	if _, err := dbx.Exec(`UPDATE schema_migrations SET dirty = 1`); err != nil {
		t.Fatal(err)
	}
	err = serveBriefly(getenv)
	if exitCode(err) != exitError || !strings.Contains(err.Error(), "dirty") || !strings.Contains(err.Error(), "gateway migrate force") {
		t.Fatalf("serve on a dirty schema: %v", err)
	}
	if _, _, err := runCmd(t, getenv, "migrate", "force", itoa(mysql.LatestVersion()-1)); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, env("GATEWAY_DATABASE_DSN", dsn, "GATEWAY_ADDR", "127.0.0.1:0", "GATEWAY_AUTO_MIGRATE", "true"))
	if status, _ := get(t, "http://"+s.addr+"/readyz"); status != http.StatusOK {
		t.Fatalf("readyz after auto-migrate: %d", status)
	}
}

// serveBriefly runs serve, which should refuse at once; a serve that starts
// instead is stopped after a while and returns nil.
func serveBriefly(getenv func(string) string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return run(ctx, []string{"serve"}, getenv, io.Discard, io.Discard)
}

func itoa(v uint) string { return strconv.FormatUint(uint64(v), 10) }

// /readyz answers 503 while the schema is behind this release, and the
// healthcheck command exits by it.
func TestReadyzAndHealthcheckFollowTheSchema(t *testing.T) {
	dsn := mysqltest.MustDSN(t)
	getenv := env("GATEWAY_DATABASE_DSN", dsn, "GATEWAY_ADDR", "127.0.0.1:0")
	s := startServe(t, getenv)
	health := func() error {
		_, _, err := runCmd(t, env("GATEWAY_ADDR", s.addr), "healthcheck")
		return err
	}
	if status, body := get(t, "http://"+s.addr+"/readyz"); status != http.StatusOK {
		t.Fatalf("readyz: %d %s", status, body)
	}
	if err := health(); err != nil {
		t.Fatalf("healthcheck on a ready gateway: %v", err)
	}
	if _, _, err := runCmd(t, getenv, "migrate", "down", "--yes"); err != nil {
		t.Fatal(err)
	}
	status, body := get(t, "http://"+s.addr+"/readyz")
	if status != http.StatusServiceUnavailable || !strings.Contains(body, "schema") || !strings.Contains(body, "/problems/service-unavailable") {
		t.Fatalf("readyz on an old schema: %d %s", status, body)
	}
	if err := health(); exitCode(err) != exitError || !strings.Contains(err.Error(), "503") {
		t.Fatalf("healthcheck on an old schema: %v", err)
	}
	if _, _, err := runCmd(t, getenv, "migrate", "up"); err != nil {
		t.Fatal(err)
	}
	if status, _ := get(t, "http://"+s.addr+"/readyz"); status != http.StatusOK {
		t.Fatalf("readyz after migrate up: %d", status)
	}

	// The build is in the logs.
	if l := s.log("gateway starting"); l == nil || l["version"] == nil || l["go"] == nil {
		t.Errorf("no version logged at start: %v", l)
	}

	// Nothing listens: the healthcheck fails; a wildcard address is probed on loopback.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	if _, _, err := runCmd(t, env("GATEWAY_ADDR", closed), "healthcheck", "--timeout", "2s"); exitCode(err) != exitError {
		t.Fatalf("healthcheck with nothing listening: %v", err)
	}
	_, port, _ := net.SplitHostPort(s.addr)
	if out, _, err := runCmd(t, env(), "healthcheck", "--addr", "0.0.0.0:"+port); err != nil || out != "ready\n" {
		t.Fatalf("healthcheck on 0.0.0.0: %v %q", err, out)
	}
}

// serve answers requests and, on shutdown, lets a request in flight finish.
func TestServeDrainsInFlightRequests(t *testing.T) {
	dsn := mysqltest.MustDSN(t)
	out, _, err := runCmd(t, env("GATEWAY_DATABASE_DSN", dsn), "merchants", "create", "--name", "Acme")
	if err != nil {
		t.Fatal(err)
	}
	var created map[string]string
	if err := json.Unmarshal([]byte(out), &created); err != nil {
		t.Fatal(err)
	}
	s := startServe(t, env("GATEWAY_DATABASE_DSN", dsn, "GATEWAY_ADDR", "127.0.0.1:0",
		"GATEWAY_FAKE_PSP_LATENCY", "300ms", "GATEWAY_SHUTDOWN_TIMEOUT", "30s"))

	type result struct {
		status int
		err    error
	}
	resc := make(chan result, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, "http://"+s.addr+"/payments",
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
	dbx, err := mysql.Open(context.Background(), dsn, mysql.PoolOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer dbx.Close()
	deadline := time.Now().Add(10 * time.Second)
	for mysqltest.Count(t, dbx, `SELECT COUNT(*) FROM idempotency_keys WHERE state = 'IN_PROGRESS'`) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the request never reached the PSP")
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, bounded by the deadline
	}
	s.stop()
	r := <-resc
	if err := <-s.done; err != nil {
		t.Fatalf("serve: %v", err)
	}
	s.done <- nil // for the cleanup
	switch {
	case r.err == nil && r.status == http.StatusCreated:
		// The charge had left: the drain let it finish.
		if n := mysqltest.Count(t, dbx, `SELECT COUNT(*) FROM payments WHERE status = 'succeeded'`); n != 1 {
			t.Fatalf("%d succeeded payments, want 1", n)
		}
	case r.err == nil && r.status == http.StatusServiceUnavailable:
		// Claimed but not yet sent when the shutdown began: given back unsent,
		// for the retry elsewhere.
		if n := mysqltest.Count(t, dbx, `SELECT COUNT(*) FROM idempotency_keys WHERE state = 'IN_PROGRESS' AND sends_not_sent = send_attempts`); n != 1 {
			t.Fatal("a 503 during shutdown left the key without its unsent mark")
		}
	default:
		t.Fatalf("in-flight request during shutdown: %+v", r)
	}
}

// /metrics is served on GATEWAY_ADMIN_ADDR only, never on the public
// address; /healthz and /readyz answer on both without credentials.
func TestMetricsOnlyOnTheAdminAddress(t *testing.T) {
	dsn := mysqltest.MustDSN(t)
	if _, _, err := runCmd(t, env("GATEWAY_DATABASE_DSN", dsn), "migrate", "up"); err != nil {
		t.Fatal(err)
	}
	plain := startServe(t, env("GATEWAY_DATABASE_DSN", dsn, "GATEWAY_ADDR", "127.0.0.1:0"))
	if status, body := get(t, "http://"+plain.addr+"/metrics"); status != http.StatusNotFound {
		t.Errorf("/metrics on the API address without an admin address: %d %.200s", status, body)
	}
	if plain.log("metrics not served: set GATEWAY_ADMIN_ADDR to serve /metrics on an address of their own") == nil {
		t.Error("serve does not say that no metrics are served")
	}

	s := startServe(t, env("GATEWAY_DATABASE_DSN", dsn, "GATEWAY_ADDR", "127.0.0.1:0", "GATEWAY_ADMIN_ADDR", "127.0.0.1:0"))
	l := s.log("admin listening")
	if l == nil {
		t.Fatal("no admin listener")
	}
	admin := l["addr"].(string)
	if status, _ := get(t, "http://"+s.addr+"/metrics"); status != http.StatusNotFound {
		t.Errorf("/metrics on the API address: %d", status)
	}
	status, body := get(t, "http://"+admin+"/metrics")
	for _, want := range []string{"go_build_info{", "gateway_build_info{", "go_sql_open_connections", "gateway_http_requests_total{"} {
		if status != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("/metrics on the admin address: %d, no %s", status, want)
		}
	}
	for _, addr := range []string{s.addr, admin} {
		for _, path := range []string{"/healthz", "/readyz"} {
			if status, body := get(t, "http://"+addr+path); status != http.StatusOK {
				t.Errorf("%s%s: %d %s", addr, path, status, body)
			}
		}
	}
	if status, _ := get(t, "http://"+admin+"/payments"); status != http.StatusNotFound {
		t.Errorf("the admin address serves the API: %d", status)
	}
}
