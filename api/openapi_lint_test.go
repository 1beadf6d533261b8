package api_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// redoclyVersion pins the linter, so that a new rule set upstream cannot fail
// a build that changed nothing.
const redoclyVersion = "2.77.0"

// The published document passes an OpenAPI linter nobody here wrote
// (Redocly's recommended rules) with no error. Warnings are allowed: the
// generic 404/405 answers live in components that no operation references.
func TestOpenAPILint(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the linter is installed from the npm registry")
	}
	bin := redocly(t)
	cmd := exec.Command(bin, "lint", "--format=json", "openapi.json")
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

// redocly installs the pinned @redocly/cli once into the user's cache
// directory with npm, or skips the test saying what is missing.
func redocly(t *testing.T) string {
	t.Helper()
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm is not installed, so the OpenAPI linter cannot be: apt-get install npm (Debian) to run this test")
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	dir := filepath.Join(cache, "gateway-test-tools", "redocly-cli-"+redoclyVersion)
	bin := filepath.Join(dir, "node_modules", ".bin", "redocly")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	// Install beside the final place and rename, so that concurrent runs
	// never see a half-installed linter.
	tmp, err := os.MkdirTemp(filepath.Dir(dir), "install-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	t.Logf("installing @redocly/cli@%s into %s", redoclyVersion, dir)
	install := exec.Command(npm, "install", "--prefix", tmp, "--no-audit", "--no-fund", "--loglevel=error",
		"@redocly/cli@"+redoclyVersion)
	if out, err := install.CombinedOutput(); err != nil {
		t.Skipf("npm could not install @redocly/cli@%s (offline?): %v\n%s", redoclyVersion, err, out)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(bin); serr != nil {
			t.Fatalf("install the linter: %v", err)
		}
	}
	return bin
}
