package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"gateway/psp/fake/fakeserver"
)

// start runs the command and returns its URL and a function that stops it
// and returns run's error.
func start(t *testing.T, args []string, env map[string]string) (string, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, w := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, args, func(k string) string { return env[k] }, w, io.Discard)
		w.Close()
	}()
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		cancel()
		t.Fatalf("no output; run returned %v", <-done)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	url, ok := strings.CutPrefix(sc.Text(), "fakepsp listening on ")
	if !ok {
		t.Fatalf("unexpected first line %q", sc.Text())
	}
	var once bool
	stop := func() error {
		if !once {
			once = true
			cancel()
			return <-done
		}
		return nil
	}
	t.Cleanup(func() { _ = stop() })
	return url, stop
}

func TestRunServesWithFaultFlags(t *testing.T) {
	url, stop := start(t, []string{"-addr", "127.0.0.1:0", "-error-after-charge", "1", "-seed", "7"}, nil)
	res, err := http.Post(url+"/v1/charges", "application/json",
		strings.NewReader(`{"merchant_order_id":"ord_1","amount":100,"currency":"KRW","payment_method":"pm_card_ok"}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusInternalServerError {
		t.Fatalf("charge = %d, want 500 from -error-after-charge 1", res.StatusCode)
	}
	res, err = http.Get(url + "/admin/ledger")
	if err != nil {
		t.Fatal(err)
	}
	var l fakeserver.Ledger
	err = json.NewDecoder(res.Body).Decode(&l)
	res.Body.Close()
	if err != nil || len(l.Charges) != 1 {
		t.Fatalf("ledger %+v, %v; want the charge recorded before the error", l, err)
	}
	if err := stop(); err != nil {
		t.Fatalf("graceful stop: %v", err)
	}
	if _, err := http.Get(url + "/healthz"); err == nil {
		t.Fatal("server still answers after stop")
	}
}

func TestRunAddrFromEnv(t *testing.T) {
	url, stop := start(t, nil, map[string]string{"FAKEPSP_ADDR": "127.0.0.1:0"})
	if !strings.HasPrefix(url, "http://127.0.0.1:") || strings.HasSuffix(url, ":9090") {
		t.Fatalf("url %q, want an ephemeral port on 127.0.0.1", url)
	}
	res, err := http.Get(url + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

func TestRunRefusesBadFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"rate above one", []string{"-addr", "127.0.0.1:0", "-error-before-charge", "2"}, "error_before_charge"},
		{"rates above one together", []string{"-addr", "127.0.0.1:0", "-error-after-charge", "0.6", "-drop-connection-after-charge", "0.6"}, "add up"},
		{"latency range", []string{"-addr", "127.0.0.1:0", "-latency-min-ms", "5", "-latency-max-ms", "1"}, "latency_ms"},
		{"unknown flag", []string{"-rate", "1"}, "flag provided but not defined"},
		{"stray argument", []string{"serve"}, "unexpected arguments"},
		{"bad address", []string{"-addr", "nowhere"}, "nowhere"},
		{"log format", []string{"-log-format", "xml"}, "log-format"},
		{"authorization validity", []string{"-addr", "127.0.0.1:0", "-authorization-validity", "10ms"}, "authorization validity"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(context.Background(), tt.args, func(string) string { return "" }, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("run = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestRunAuthorizationValidity(t *testing.T) {
	url, _ := start(t, []string{"-addr", "127.0.0.1:0", "-authorization-validity", "1h"}, nil)
	before := time.Now()
	res, err := http.Post(url+"/v1/charges", "application/json",
		strings.NewReader(`{"merchant_order_id":"ord_1","amount":100,"currency":"KRW","payment_method":"pm_card_ok","capture_method":"manual"}`))
	if err != nil {
		t.Fatal(err)
	}
	var c fakeserver.Charge
	err = json.NewDecoder(res.Body).Decode(&c)
	res.Body.Close()
	if err != nil || c.Status != "authorized" || c.CaptureBefore == nil ||
		c.CaptureBefore.Before(before.Add(time.Hour-time.Second)) || c.CaptureBefore.After(time.Now().Add(time.Hour)) {
		t.Fatalf("charge %+v, %v; want authorized for an hour", c, err)
	}
}
