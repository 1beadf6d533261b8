package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
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

// The README's quick start runs as written: dev's output kept in
// gateway.out as `make run | tee gateway.out` keeps it, then, in a shell of
// their own with unset variables refused, the commands of the second
// terminal: the payment is created, and the same curl again replays it.
func TestReadmeQuickStartRuns(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed (apt-get install curl): the README's quick start cannot be run")
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	start := strings.Index(string(readme), "\n## Quick start\n")
	end := strings.Index(string(readme[start+1:]), "\n## ")
	if start < 0 || end < 0 {
		t.Fatal("the README has no Quick start section")
	}
	blocks := regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(readme[start:start+1+end]), -1)
	var script string
	for _, b := range blocks {
		if !strings.HasPrefix(b[1], "make run") { // the first terminal's, emulated below
			script += b[1]
		}
	}
	curl := regexp.MustCompile(`(?s)\ncurl .*`).FindString(script)
	if !strings.Contains(script, "API_KEY=") || curl == "" {
		t.Fatalf("the quick start has no second-terminal commands that set API_KEY and send a curl:\n%s", script)
	}

	printed := startDev(t)
	addr := regexp.MustCompile(`Gateway ready on http://(\S+) `).FindStringSubmatch(printed)
	if addr == nil {
		t.Fatalf("dev did not say where it listens:\n%s", printed)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "gateway.out"), []byte(printed), 0o600); err != nil {
		t.Fatal(err)
	}
	// The README's address is dev's default; this dev listens on a free port.
	script = strings.ReplaceAll(script, "127.0.0.1:8080", addr[1])
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script+"\necho '=== again'"+curl)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the quick start's commands failed: %v\n%s", err, out)
	}
	first, again, ok := strings.Cut(string(out), "=== again")
	body := func(s string) string {
		_, b, _ := strings.Cut(strings.ReplaceAll(s, "\r\n", "\n"), "\n\n")
		return strings.TrimSpace(b)
	}
	switch {
	case !ok:
		t.Fatalf("the second curl did not run:\n%s", out)
	case !strings.Contains(first, "HTTP/1.1 201 Created") || strings.Contains(first, "Idempotent-Replayed"):
		t.Fatalf("the quick start's payment was not created:\n%s", first)
	case !strings.Contains(again, "HTTP/1.1 201 Created") || !strings.Contains(again, "Idempotent-Replayed: true"):
		t.Fatalf("the same curl again is no replay:\n%s", again)
	case body(first) != body(again) || body(first) == "":
		t.Fatalf("the replay's body differs:\n%s\n%s", first, again)
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

// With the in-process fake PSP, a 3-D Secure charge's next action is a
// page the gateway itself serves: its relative URL resolves, and passing
// it finishes the charge once.
func TestDevServesTheFakesThreeDSPage(t *testing.T) {
	printed := startDev(t)
	m := regexp.MustCompile(`Gateway ready on (http://\S+) .*\n.*API key \([^)]*\): (sk_\S+)`).FindStringSubmatch(printed)
	if m == nil {
		t.Fatalf("dev did not print its address and key:\n%s", printed)
	}
	base, key := m[1], m[2]
	post := func(path, idemKey, body string) map[string]any {
		req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Idempotency-Key", idemKey)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		var v map[string]any
		if err := json.NewDecoder(res.Body).Decode(&v); err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		return v
	}
	created := post("/payments", "3ds-create", `{"amount": 1000, "currency": "KRW", "confirm": false}`)
	confirmed := post("/payments/"+created["id"].(string)+"/confirm", "3ds-confirm", `{"payment_method": "pm_card_3ds"}`)
	action, _ := confirmed["next_action"].(map[string]any)
	url, _ := action["url"].(string)
	if confirmed["status"] != "requires_action" || !strings.HasPrefix(url, "/3ds/") {
		t.Fatalf("confirm with pm_card_3ds: %v", confirmed)
	}
	get := func() (int, string) {
		res, err := http.Get(base + url)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	if code, body := get(); code != http.StatusOK || !strings.Contains(body, "3-D Secure passed") {
		t.Fatalf("GET %s: %d %s", url, code, body)
	}
	if code, _ := get(); code != http.StatusConflict {
		t.Fatalf("GET %s again: %d, want 409 (the charge no longer waits)", url, code)
	}
}
