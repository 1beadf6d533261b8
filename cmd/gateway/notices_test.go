package main

import (
	"testing"

	"gateway/mysql"
)

// Notifications are taken from Stripe only with its signing secret, from
// Toss whenever Toss is configured, and from nobody otherwise (the routes
// answer 404).
func TestNoticesFromConfig(t *testing.T) {
	st := mysql.NewStore(nil) // nothing is read or written while wiring
	for _, tc := range []struct {
		name string
		env  []string
		want bool
	}{
		{"fake only", []string{"GATEWAY_PSP", "fake"}, false},
		{"stripe without a signing secret", []string{"GATEWAY_PSP", "stripe", "GATEWAY_STRIPE_SECRET_KEY", "sk_test_x"}, false},
		{"stripe with its signing secret", []string{"GATEWAY_PSP", "stripe", "GATEWAY_STRIPE_SECRET_KEY", "sk_test_x", "GATEWAY_STRIPE_WEBHOOK_SECRET", "whsec_x"}, true},
		{"toss", []string{"GATEWAY_PSP", "fake", "GATEWAY_TOSS_SECRET_KEY", "test_sk_x"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := parseServe(t, env(append([]string{"GATEWAY_DATABASE_DSN", someDSN}, tc.env...)...))
			if err != nil {
				t.Fatal(err)
			}
			r, err := newNotices(s.Server.PSP, st, s.Server.Flow.PSPTimeout, &s.Server.Log, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := r != nil; got != tc.want {
				t.Fatalf("notifications taken: %v, want %v", got, tc.want)
			}
		})
	}
}
