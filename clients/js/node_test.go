package jsclient_test

import (
	"encoding/json"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"gateway/mysql/mysqltest"
	"gateway/tests/gatewaytest"
)

func TestMain(m *testing.M) { mysqltest.Main(m) }

// The client's own tests (test/*.test.js) run with node's test runner
// against a real gateway (tests/gatewaytest): the API over a private
// database and the in-process fake PSP, reached through a proxy that can
// fail as networks and load balancers do (answer 429 or 503 itself, drop a
// connection before forwarding the request, or after the gateway answered
// it). Its control server lets the tests queue those faults, make the PSP
// fail or wait, and read what the proxy saw, the PSP's ledger and the
// database.
//
// The node tests read the addresses from GATEWAY_TEST_URL,
// GATEWAY_TEST_CONTROL, GATEWAY_TEST_SECRET_KEY and
// GATEWAY_TEST_PUBLISHABLE_KEY; run alone (npm test), they skip.
func TestNodeClient(t *testing.T) {
	node := lookNode(t)
	gw := gatewaytest.Start(t, gatewaytest.Options{})
	control := httptest.NewServer(gw.Control())
	t.Cleanup(control.Close)
	start := time.Now()
	cmd := exec.Command(node, "--test", "--test-reporter=spec", "test/")
	cmd.Env = append(os.Environ(),
		"GATEWAY_TEST_URL="+gw.URL,
		"GATEWAY_TEST_CONTROL="+control.URL,
		"GATEWAY_TEST_SECRET_KEY="+gw.SecretKey,
		"GATEWAY_TEST_PUBLISHABLE_KEY="+gw.PublishableKey,
	)
	out, err := cmd.CombinedOutput()
	t.Logf("node --test (%s):\n%s", time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("the client's node tests failed: %v", err)
	}
	if n := summary(out, "pass"); n == 0 {
		t.Fatal("node ran no passing test")
	}
	if n := summary(out, "skipped"); n != 0 {
		t.Fatalf("node skipped %d test(s) although a gateway was given", n)
	}
}

// summary reads a count of the spec reporter's summary ("ℹ pass 28"); -1
// when it is missing.
func summary(out []byte, what string) int {
	m := regexp.MustCompile(`(?m)^\S* ` + what + ` (\d+)$`).FindSubmatch(out)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// TestNpmPack: the package packs (npm pack, dry run, offline) with the
// module, its types and its README, and nothing else of this directory.
func TestNpmPack(t *testing.T) {
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm is not installed (Debian package npm): the package's packing is not checked")
	}
	cmd := exec.Command(npm, "pack", "--dry-run", "--json", "--ignore-scripts")
	cmd.Env = append(os.Environ(), "npm_config_cache="+t.TempDir(), "npm_config_update_notifier=false", "npm_config_offline=true")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("npm pack --dry-run: %v\n%s", err, out)
	}
	var packs []struct {
		Name  string `json:"name"`
		Files []struct {
			Path string `json:"path"`
		} `json:"files"`
	}
	if err := json.Unmarshal(out, &packs); err != nil || len(packs) != 1 {
		t.Fatalf("npm pack --json: %v\n%s", err, out)
	}
	var files []string
	for _, f := range packs[0].Files {
		files = append(files, f.Path)
	}
	want := []string{"README.md", "gateway.d.ts", "gateway.js", "package.json"}
	if strings.Join(files, " ") != strings.Join(want, " ") {
		t.Fatalf("npm pack ships %v, want %v", files, want)
	}
}

// lookNode finds node, or skips with what to install.
func lookNode(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed (Debian package nodejs, 18 or later): the browser client's tests cannot run")
	}
	out, err := exec.Command(node, "--version").Output()
	if err != nil {
		t.Skipf("node --version: %v", err)
	}
	major, _ := strconv.Atoi(strings.TrimPrefix(strings.SplitN(strings.TrimSpace(string(out)), ".", 2)[0], "v"))
	if major < 18 {
		t.Skipf("node %s is too old for the test runner and fetch: 18 or later is needed", strings.TrimSpace(string(out)))
	}
	return node
}
