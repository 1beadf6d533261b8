package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"gateway/errs"
	"gateway/merchants"
)

// Several keys may be active at once; a revoked key is refused at once.
func TestKeyRotationAndRevocation(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.clock.Advance(time.Second) // the keys list oldest first
	second, err := e.merchantAdmin().CreateAPIKey(ctx, e.merch.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(second.Plaintext, second.Prefix) || len(second.Prefix) != len("sk_")+8 {
		t.Fatalf("prefix %q of %q", second.Prefix, second.Plaintext)
	}
	wantStatus(t, e.postAs(e.apiKey, "old-key", okBody), http.StatusCreated)
	wantStatus(t, e.postAs(second.Plaintext, "new-key", okBody), http.StatusCreated)

	if err := e.merchantAdmin().RevokeAPIKey(ctx, e.merch.ID, merchants.KeyPrefix(e.apiKey)); err != nil {
		t.Fatal(err)
	}
	wantProblem(t, e.postAs(e.apiKey, "after-revoke", okBody), http.StatusUnauthorized, "unauthorized")
	wantStatus(t, e.postAs(second.Plaintext, "after-revoke", okBody), http.StatusCreated)
	if err := e.merchantAdmin().RevokeAPIKey(ctx, e.merch.ID, merchants.KeyPrefix(e.apiKey)); errs.CodeOf(err) != errs.CodeNotFound {
		t.Fatalf("second revoke: %v", err)
	}
	// Another merchant cannot revoke this merchant's key.
	other, _ := e.newMerchant("Other")
	if err := e.merchantAdmin().RevokeAPIKey(ctx, other.ID, second.Prefix); errs.CodeOf(err) != errs.CodeNotFound {
		t.Fatalf("cross-merchant revoke: %v", err)
	}
	// A key with the right prefix and a wrong secret is refused.
	forged := second.Prefix + strings.Repeat("a", len(second.Plaintext)-len(second.Prefix))
	wantProblem(t, e.postAs(forged, "forged", okBody), http.StatusUnauthorized, "unauthorized")
	keys, err := e.merchantAdmin().APIKeys(ctx, e.merch.ID)
	if err != nil || len(keys) != 2 || keys[0].RevokedAt.IsZero() || !keys[1].RevokedAt.IsZero() {
		t.Fatalf("keys %+v %v", keys, err)
	}
	if n := e.count(`SELECT COUNT(*) FROM payments WHERE idem_key IN ('after-revoke', 'forged')`); n != 1 {
		t.Fatalf("%d payments from refused keys", n-1)
	}
}
