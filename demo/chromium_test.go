package demo_test

import (
	"os/exec"
	"testing"
)

// findChromium returns the path of a Chromium to drive, or skips the test
// saying how to install one (make deps installs Debian's chromium and
// chromium-driver).
func findChromium(t *testing.T) string {
	t.Helper()
	if path := lookChromium(); path != "" {
		return path
	}
	t.Skip("Chromium is not installed: run make deps (or apt-get install chromium chromium-driver)")
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
