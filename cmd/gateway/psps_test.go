package main

import (
	"strings"
	"testing"

	"gateway/psp"
)

// The in-process fake knows only its own process's charges: each process
// names its fake apart, so a payment made by one is never settled from
// another's "not found". Every PSP with credentials is kept for lookups.
func TestNewPSPsNamesTheFakePerProcessAndKeepsOtherPSPs(t *testing.T) {
	same := func(a psp.Adapter) psp.Adapter { return a }
	cfg := pspConfig{PSP: "fake"}
	one, err := newPSPs(cfg, same)
	if err != nil {
		t.Fatal(err)
	}
	two, err := newPSPs(cfg, same)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := one.Default()
	b, _ := two.Default()
	if !strings.HasPrefix(a, "fake:") || a == b {
		t.Fatalf("fake PSPs named %q and %q", a, b)
	}
	if _, ok := one.For(b); ok {
		t.Fatal("one process's fake answers for another's payments")
	}

	s, err := parseServe(t, env("GATEWAY_DATABASE_DSN", someDSN, "GATEWAY_PSP", "stripe", "GATEWAY_STRIPE_SECRET_KEY", "sk_test_x", "GATEWAY_TOSS_SECRET_KEY", "test_sk_y"))
	if err != nil {
		t.Fatal(err)
	}
	both, err := newPSPs(s.Server.PSP, same)
	if err != nil {
		t.Fatal(err)
	}
	if def, _ := both.Default(); def != "stripe" {
		t.Fatalf("default %q", def)
	}
	if _, ok := both.For("toss"); !ok {
		t.Fatalf("toss payments cannot be looked up: %v", both.Names())
	}
}
