package demo_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// findChromium returns the path of a Chromium to drive, installing Debian's
// chromium and chromium-driver with apt-get (as root, or through sudo -n)
// when none is installed; it skips the test, saying why and what to install,
// where it cannot.
func findChromium(t *testing.T) string {
	t.Helper()
	if path := lookChromium(); path != "" {
		return path
	}
	var apt []string
	switch {
	case os.Geteuid() == 0:
		apt = []string{"apt-get"}
	case exec.Command("sudo", "-n", "true").Run() == nil:
		apt = []string{"sudo", "-n", "apt-get"}
	default:
		t.Skip("Chromium is not installed and this user cannot install it (not root, no sudo -n): " +
			"apt-get install chromium chromium-driver, then run the browser tests again")
	}
	if _, err := exec.LookPath("apt-get"); err != nil {
		t.Skip("Chromium is not installed and there is no apt-get to install it: install Chromium (Debian: chromium chromium-driver)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	install := func(args ...string) error {
		cmd := exec.CommandContext(ctx, apt[0], append(apt[1:], args...)...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Logf("%s %s: %v\n%s", strings.Join(apt, " "), strings.Join(args, " "), err, tail(out))
		}
		return err
	}
	t.Log("Chromium is not installed: installing Debian's chromium and chromium-driver with apt-get")
	if install("install", "-y", "-q", "chromium", "chromium-driver") != nil {
		if install("update", "-q") != nil || install("install", "-y", "-q", "chromium", "chromium-driver") != nil {
			t.Skip("Chromium is not installed and apt-get could not install it (see the log): apt-get install chromium chromium-driver")
		}
	}
	if path := lookChromium(); path != "" {
		return path
	}
	t.Skip("apt-get installed chromium, yet no chromium binary is on PATH")
	return ""
}

func lookChromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome-stable", "google-chrome"} {
		if path, err := exec.LookPath(name); err == nil {
			return path
		}
	}
	return ""
}

func tail(b []byte) string {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
