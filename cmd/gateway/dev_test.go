package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"gateway/mysql/mysqltest"
)

// syncBuffer is a buffer that dev writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The curl that dev prints, and the README repeats, replays when it is run
// twice: its key is set once, in a variable.
func TestDevQuickStartReplays(t *testing.T) {
	printed := startDev(t)
	snippet := regexp.MustCompile(`(?s)  KEY=\$\(cat /proc/sys/kernel/random/uuid\)\n  curl -i -X POST (\S+) \\\n    -H 'Authorization: Bearer (\S+)' \\\n    -H "Idempotency-Key: \$KEY" \\\n    -H 'Content-Type: application/json' \\\n    -d '([^']+)'`).FindStringSubmatch(printed)
	if snippet == nil {
		t.Fatalf("dev does not print the quick start's curl with a fixed key:\n%s", printed)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{`KEY=$(cat /proc/sys/kernel/random/uuid)`, `-H "Idempotency-Key: $KEY"`, `-d '` + snippet[3] + `'`} {
		if !strings.Contains(string(readme), line) {
			t.Errorf("the README's quick start lacks %s", line)
		}
	}

	key := "quick-start-key" // what $KEY holds for both runs
	send := func() (*http.Response, string) {
		req, _ := http.NewRequest(http.MethodPost, snippet[1], strings.NewReader(snippet[3]))
		req.Header.Set("Authorization", "Bearer "+snippet[2])
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res, string(b)
	}
	first, body := send()
	second, again := send()
	if first.StatusCode != http.StatusCreated || first.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first run: %d %s", first.StatusCode, body)
	}
	if second.StatusCode != http.StatusCreated || second.Header.Get("Idempotent-Replayed") != "true" || again != body {
		t.Fatalf("second run is no replay: %d %q\n%s\n%s", second.StatusCode, second.Header.Get("Idempotent-Replayed"), body, again)
	}
}

// startDev runs `gateway dev` on a test database until the test ends and
// returns what it printed once ready.
func startDev(t *testing.T) string {
	t.Helper()
	dsn := mysqltest.MustDSN(t) // dev starts its own MariaDB only when no DSN is set
	var out syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"dev"}, env("GATEWAY_DATABASE_DSN", dsn, "GATEWAY_ADDR", "127.0.0.1:0"), &out, io.Discard)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("dev: %v", err)
		}
	})
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(out.String(), "Press Ctrl-C") {
		if time.Now().After(deadline) {
			t.Fatalf("dev never said it was ready:\n%s", out.String())
		}
		time.Sleep(10 * time.Millisecond) // polling dev's output, bounded by the deadline
	}
	return out.String()
}
