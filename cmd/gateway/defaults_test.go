package main

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"

	"gateway/api"
	"gateway/merchants"
	"gateway/mysql"
	"gateway/payments"
	"gateway/reconcile"
	"gateway/review"
	"gateway/webhooks"
)

// domainDefaults are the defaults each flag's tag writes out, as the
// packages that own the settings declare them, by flag name.
func domainDefaults() map[string]string {
	return map[string]string{
		"lease":                  durationDefault(payments.DefaultLease),
		"psp-timeout":            durationDefault(payments.DefaultPSPTimeout),
		"inflight-wait":          durationDefault(payments.DefaultInFlightWait),
		"idempotency-retention":  durationDefault(payments.DefaultRetention),
		"event-retention":        durationDefault(payments.DefaultEventRetention),
		"auth-cache-ttl":         durationDefault(merchants.DefaultAuthCacheTTL),
		"max-clock-skew":         durationDefault(mysql.DefaultMaxClockSkew),
		"reconcile-schedule":     reconcile.DefaultSchedule,
		"reconcile-max-attempts": fmt.Sprint(reconcile.DefaultMaxAttempts),
		"reconcile-batch":        fmt.Sprint(reconcile.DefaultBatchSize),
		"reconcile-concurrency":  fmt.Sprint(reconcile.DefaultConcurrency),
		"reconcile-backoff":      durationDefault(reconcile.DefaultBackoffBase),
		"reconcile-backoff-max":  durationDefault(reconcile.DefaultBackoffMax),
		"purge-batch":            fmt.Sprint(reconcile.DefaultPurgeBatch),
		"purge-rest":             fmt.Sprint(reconcile.DefaultPurgeRest),
		"confirm-expiry":         durationDefault(payments.DefaultConfirmExpiry),
		"replay-cache-bytes":     fmt.Sprint(payments.DefaultReplayCacheBytes),
		"replay-cache-ttl":       durationDefault(payments.DefaultReplayCacheTTL),
		"auth-failure-rate":      fmt.Sprint(api.DefaultAuthFailureRate),
		"auth-failure-burst":     fmt.Sprint(api.DefaultAuthFailureBurst),
		"idle-timeout":           durationDefault(api.DefaultIdleTimeout),
		"webhook-rotation-grace": durationDefault(webhooks.DefaultRotationGrace),
		"webhook-timeout":        durationDefault(webhooks.DefaultTimeout),
		"webhook-concurrency":    fmt.Sprint(webhooks.DefaultConcurrency),
		"webhook-interval":       durationDefault(webhooks.DefaultInterval),
		"webhook-backoff":        durationDefault(webhooks.DefaultBackoffBase),
		"webhook-backoff-max":    durationDefault(webhooks.DefaultBackoffMax),
		"webhook-max-age":        durationDefault(webhooks.DefaultMaxAge),
		"webhook-disable-after":  durationDefault(webhooks.DefaultDisableAfter),
	}
}

// The defaults written in the flags' tags are the packages' own, on every
// command that has the flag, and the listing limits' help names the
// largest page. (They are written out rather than interpolated: kong
// interpolates every variable into every flag, which cost each parse of
// the command line tens of milliseconds.)
func TestFlagDefaultsAreTheDomainsDefaults(t *testing.T) {
	want := domainDefaults()
	seen := map[string]bool{}
	var walk func(n *kong.Node)
	walk = func(n *kong.Node) {
		for _, f := range n.Flags {
			d, ok := want[f.Name]
			if !ok {
				continue
			}
			seen[f.Name] = true
			if f.Default != d {
				t.Errorf("%s --%s defaults to %q, its package to %q", n.FullPath(), f.Name, f.Default, d)
			}
			if f.Value.Target.Type() == reflect.TypeFor[time.Duration]() {
				if _, err := time.ParseDuration(f.Default); err != nil {
					t.Errorf("--%s: %v", f.Name, err)
				}
			}
		}
		if n.Name == "list" && (n.Parent.Name == "payments" || n.Parent.Name == "refunds") {
			for _, f := range n.Flags {
				if f.Name == "limit" && !strings.Contains(f.Help, fmt.Sprint(review.MaxListLimit)) {
					t.Errorf("%s --limit help %q does not name the largest page, %d", n.FullPath(), f.Help, review.MaxListLimit)
				}
			}
		}
		for _, c := range n.Children {
			walk(c)
		}
	}
	walk(model(t).Node)
	for name := range want {
		if !seen[name] {
			t.Errorf("no command has --%s", name)
		}
	}
}
