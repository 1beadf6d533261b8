package api_test

import (
	"bytes"
	"encoding/json"
	"gateway/api"
	"gateway/versions"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// redoclyVersion pins the linter, so that a new rule set upstream cannot fail
// a build that changed nothing. make deps (tests/deps.sh) installs it.
const redoclyVersion = "2.77.0"

// The published document of every version the gateway serves passes an
// OpenAPI linter nobody here wrote (Redocly's recommended rules) with no
// error. Warnings are allowed: the generic 404/405 answers live in
// components that no operation references.
func TestOpenAPILint(t *testing.T) {
	bin := redocly(t)
	for _, v := range versions.All {
		t.Run(string(v), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "openapi-"+string(v)+".json")
			if err := os.WriteFile(path, api.OpenAPIOf(v), 0o600); err != nil {
				t.Fatal(err)
			}
			lint(t, bin, path)
		})
	}
}

func lint(t *testing.T, bin, path string) {
	cmd := exec.Command(bin, "lint", "--format=json", path)
	cmd.Env = append(os.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true", "NO_COLOR=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var report struct {
		Totals struct {
			Errors, Warnings int
		} `json:"totals"`
		Problems []struct {
			RuleID   string `json:"ruleId"`
			Severity string `json:"severity"`
			Message  string `json:"message"`
			Location []struct {
				Pointer string `json:"pointer"`
			} `json:"location"`
		} `json:"problems"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &report); err != nil {
		t.Fatalf("redocly lint: %v (%v)\nstdout: %s\nstderr: %s", err, runErr, stdout.String(), stderr.String())
	}
	for _, p := range report.Problems {
		where := ""
		if len(p.Location) > 0 {
			where = p.Location[0].Pointer
		}
		if p.Severity == "error" {
			t.Errorf("%s %s: %s", p.RuleID, where, p.Message)
		} else {
			t.Logf("%s: %s %s: %s", p.Severity, p.RuleID, where, p.Message)
		}
	}
	if report.Totals.Errors != 0 || (runErr != nil && len(report.Problems) == 0) {
		t.Fatalf("redocly lint: %d error(s), exit %v", report.Totals.Errors, runErr)
	}
}

// redocly finds the pinned @redocly/cli where make deps installs it (the
// user's cache directory), or skips the test saying how to install it.
func redocly(t *testing.T) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	bin := filepath.Join(cache, "gateway-test-tools", "redocly-cli-"+redoclyVersion, "node_modules", ".bin", "redocly")
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("the OpenAPI linter @redocly/cli@%s is not installed: run make deps", redoclyVersion)
	}
	return bin
}
