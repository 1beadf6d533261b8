package main

import (
	"strings"
	"testing"
)

// Every problem with a books command is named at once, before anything is
// read or written.
func TestBooksReconcileRefusesABadPeriod(t *testing.T) {
	_, _, err := runCmd(t, env("GATEWAY_DATABASE_DSN", someDSN, "GATEWAY_PSP", "fake", "GATEWAY_BOOKS_PAGE", "9000"),
		"books", "reconcile", "--account", "fake", "--from", "2026-11-31", "--to", "yesterday")
	if exitCode(err) != exitUsage {
		t.Fatalf("exit %d (%v), want usage", exitCode(err), err)
	}
	for _, want := range []string{"--from", "--to", "GATEWAY_BOOKS_PAGE", "in-process fake"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the problems do not name %s:\n%v", want, err)
		}
	}
	_, _, err = runCmd(t, env("GATEWAY_DATABASE_DSN", someDSN, "GATEWAY_PSP", "fakehttp", "GATEWAY_FAKEPSP_URL", "http://127.0.0.1:1"),
		"books", "reconcile", "--account", "fakehttp", "--from", "2026-11-30T00:00:00+09:00", "--to", "2026-11-29")
	if exitCode(err) != exitUsage || !strings.Contains(err.Error(), "after --from") {
		t.Fatalf("exit %d (%v), want a usage error for an empty period", exitCode(err), err)
	}
}

func TestParsePeriodEndReadsOffsetsAndDates(t *testing.T) {
	for in, want := range map[string]string{
		"2026-11-30":                    "2026-11-30T00:00:00Z",
		"2026-11-30T00:00:00+09:00":     "2026-11-29T15:00:00Z",
		"2026-11-30T23:59:59.999+09:00": "2026-11-30T14:59:59.999Z",
	} {
		got, err := parsePeriodEnd(in)
		if err != nil || got.Format("2006-01-02T15:04:05.999Z07:00") != want {
			t.Errorf("parsePeriodEnd(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
}
