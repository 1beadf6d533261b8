package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gateway/idemkeys"
	"gateway/payments"
)

// `gateway keys hash` prints the names the replicas' logs give a key and its
// merchant under the same secret (and only under it); without the secret
// it refuses, since any other name would mislead.
func TestKeysHashNamesWhatTheLogsSay(t *testing.T) {
	const secret = "s3cret-shared-by-the-replicas"
	env := func(k string) string {
		if k == "GATEWAY_LOG_HASH_SECRET" {
			return secret
		}
		return ""
	}
	logged := idemkeys.NewHasher([]byte(secret))
	for _, tc := range []struct{ endpoint, scope string }{
		{"POST /payments", payments.EndpointCreatePayment},
		{"POST /payments/pay_01M8/refunds", payments.EndpointCreateRefund},
		{"POST /payments/{id}/confirm", payments.EndpointConfirmPayment},
	} {
		out, _, err := runCmd(t, env, "keys", "hash", "--merchant", "mer_1", "--endpoint", tc.endpoint, "k-basic-1")
		if err != nil {
			t.Fatal(err)
		}
		ref := idemkeys.Ref{MerchantID: "mer_1", Endpoint: tc.scope, Key: "k-basic-1"}
		want := "key " + logged.Key(ref) + "\nmerchant " + logged.Merchant("mer_1") + "\n"
		if out != want {
			t.Fatalf("%s: printed %q, the logs say %q", tc.endpoint, out, want)
		}
		if other := idemkeys.NewHasher([]byte("another secret")).Key(ref); strings.Contains(out, other) {
			t.Fatal("the name does not depend on the secret")
		}
	}
	if _, _, err := runCmd(t, func(string) string { return "" }, "keys", "hash", "--merchant", "mer_1", "k"); err == nil {
		t.Fatal("keys hash ran without the secret")
	}
}

// gateway dev keys its log hashes with a secret it makes once and keeps
// beside its data directory, private to its user.
func TestDevKeepsItsLogHashSecret(t *testing.T) {
	dir := filepath.Join(t.TempDir(), ".data", "mariadb")
	path, first, err := devHashSecret(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 64 {
		t.Fatalf("secret %q", first)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secret file %s: %v %v", path, fi.Mode(), err)
	}
	if _, again, err := devHashSecret(dir); err != nil || again != first {
		t.Fatalf("second run: %q, %v; want the first run's secret", again, err)
	}
}
