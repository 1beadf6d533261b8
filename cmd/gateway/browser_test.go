package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"gateway/errs"
	"gateway/merchants"
	"gateway/mysql"
	"gateway/mysql/mysqltest"
)

// Ops manage a merchant's publishable keys and browser origins from the
// command line; what they do is what the gateway's browser authentication
// then reads.
func TestMerchantsBrowserAccess(t *testing.T) {
	dbx := mysqltest.MustOpen(t)
	getenv := env("GATEWAY_DATABASE_DSN", mysqltest.DSNOf(t, dbx))
	ctx := context.Background()
	out, _, err := runCmd(t, getenv, "merchants", "create", "--name", "Shop")
	if err != nil {
		t.Fatal(err)
	}
	var created struct {
		MerchantID string `json:"merchant_id"`
	}
	if err := json.Unmarshal([]byte(out), &created); err != nil {
		t.Fatal(err)
	}
	m := created.MerchantID
	auth := merchants.NewBrowserAuth(mysql.NewStore(dbx), merchants.AuthConfig{})

	// A publishable key: minted, usable, listed, revoked.
	out, _, err = runCmd(t, getenv, "merchants", "publishable-keys", "create", "--merchant", m)
	if err != nil {
		t.Fatal(err)
	}
	var key struct {
		MerchantID     string `json:"merchant_id"`
		PublishableKey string `json:"publishable_key"`
		Prefix         string `json:"prefix"`
	}
	if err := json.Unmarshal([]byte(out), &key); err != nil || !strings.HasPrefix(key.PublishableKey, "pk_") || key.MerchantID != m {
		t.Fatalf("publishable-keys create: %s (%v)", out, err)
	}
	if got, _, err := auth.AuthenticatePublishable(ctx, key.PublishableKey); err != nil || got.ID != m {
		t.Fatalf("the new key does not authenticate: %+v %v", got, err)
	}
	hash := merchants.HashAPIKey(key.PublishableKey)
	if n := mysqltest.Count(t, dbx, `SELECT COUNT(*) FROM publishable_keys WHERE prefix = ? AND key_hash = ?`, key.Prefix, hash[:]); n != 1 {
		t.Fatalf("%d stored keys with the prefix and the key's hash, want 1 (stored hashed)", n)
	}
	out, _, err = runCmd(t, getenv, "merchants", "publishable-keys", "list", "--merchant", m)
	if err != nil || !strings.Contains(out, key.Prefix) || strings.Contains(out, key.PublishableKey) || !strings.Contains(out, "1 key(s), 1 active") {
		t.Fatalf("publishable-keys list: %s (%v)", out, err)
	}
	if _, _, err := runCmd(t, getenv, "merchants", "publishable-keys", "revoke", "--merchant", m, "--prefix", key.Prefix); err != nil {
		t.Fatal(err)
	}
	if _, _, err := auth.AuthenticatePublishable(ctx, key.PublishableKey); errs.CodeOf(err) != errs.CodeUnauthorized {
		t.Fatalf("a revoked key authenticates: %v", err)
	}
	if _, _, err := runCmd(t, getenv, "merchants", "publishable-keys", "revoke", "--merchant", m, "--prefix", key.Prefix); exitCode(err) != exitError {
		t.Fatalf("revoking twice: %v, want exit %d", err, exitError)
	}
	// API keys and publishable keys are kept apart.
	if out, _, err := runCmd(t, getenv, "merchants", "keys", "list", "--merchant", m); err != nil || strings.Contains(out, "pk_") {
		t.Fatalf("keys list shows a publishable key: %s (%v)", out, err)
	}

	// Origins: added (normalized, once), listed, judged, removed.
	out, _, err = runCmd(t, getenv, "merchants", "origins", "add", "--merchant", m, "--origin", "HTTPS://Shop.Example:443/")
	if err != nil || !strings.Contains(out, "allows https://shop.example") {
		t.Fatalf("origins add: %s (%v)", out, err)
	}
	if out, _, err = runCmd(t, getenv, "merchants", "origins", "add", "--merchant", m, "--origin", "https://shop.example"); err != nil || !strings.Contains(out, "already allows") {
		t.Fatalf("origins add again: %s (%v)", out, err)
	}
	if _, _, err := runCmd(t, getenv, "merchants", "origins", "add", "--merchant", m, "--origin", "http://localhost:3000"); err != nil {
		t.Fatal(err)
	}
	out, _, err = runCmd(t, getenv, "merchants", "origins", "list", "--json", "--merchant", m)
	var list struct {
		Origins []string `json:"origins"`
		Count   int      `json:"count"`
	}
	if err != nil || json.Unmarshal([]byte(out), &list) != nil || list.Count != 2 || list.Origins[0] != "http://localhost:3000" || list.Origins[1] != "https://shop.example" {
		t.Fatalf("origins list: %s (%v)", out, err)
	}
	if ok, err := auth.OriginAllowed(ctx, "https://shop.example"); err != nil || !ok {
		t.Fatalf("OriginAllowed after add: %v %v", ok, err)
	}
	if _, _, err := runCmd(t, getenv, "merchants", "origins", "remove", "--merchant", m, "--origin", "https://shop.example"); err != nil {
		t.Fatal(err)
	}
	if ok, err := auth.OriginAllowed(ctx, "https://shop.example"); err != nil || ok {
		t.Fatalf("OriginAllowed after remove: %v %v", ok, err)
	}
	if _, _, err := runCmd(t, getenv, "merchants", "origins", "remove", "--merchant", m, "--origin", "https://shop.example"); exitCode(err) != exitError {
		t.Fatalf("removing twice: %v, want exit %d", err, exitError)
	}

	// Mistakes: not an origin (usage), an unknown merchant (error).
	for _, bad := range []string{"https://shop.example/checkout", "*.shop.example", "null"} {
		if _, _, err := runCmd(t, getenv, "merchants", "origins", "add", "--merchant", m, "--origin", bad); exitCode(err) != exitUsage {
			t.Errorf("origins add %q: %v, want exit %d", bad, err, exitUsage)
		}
	}
	const missing = "mer_01M8SVR4W86J66YMKHTJN3EH0A"
	for _, args := range [][]string{
		{"origins", "add", "--merchant", missing, "--origin", "https://shop.example"},
		{"publishable-keys", "create", "--merchant", missing},
	} {
		if _, _, err := runCmd(t, getenv, append([]string{"merchants"}, args...)...); exitCode(err) != exitError || !strings.Contains(err.Error(), "no merchant "+missing) {
			t.Errorf("%v: %v, want exit %d naming the merchant", args, err, exitError)
		}
	}
}
