package main

import (
	"strings"
	"testing"

	"gateway/mysql/mysqltest"
)

// An id (or a key's prefix) on the command line that cannot be one, such
// as the docs' placeholder pay_…, is a usage error naming the flag or
// argument and the shape of an id, refused before the database is asked;
// it used to print the database's collation error.
func TestIDsThatCannotExistAtTheCommandLine(t *testing.T) {
	getenv := env("GATEWAY_DATABASE_DSN", mysqltest.DSNOf(t, mysqltest.MustOpen(t)), "GATEWAY_ACTOR", "ops",
		"GATEWAY_WEBHOOK_KEY", strings.Repeat("ab", 32))
	const mer = "mer_01M8SVR4W86J66YMKHTJN3EH0A"
	for _, c := range []struct {
		name, flag string
		args       []string
	}{
		{"payments show", "payment-id", []string{"payments", "show", "pay_…"}},
		{"payments resolve", "payment-id", []string{"payments", "resolve", "pay_é", "--as", "failed", "--reason", "x"}},
		{"payments list", "--merchant", []string{"payments", "list", "--merchant", "mer_…"}},
		{"refunds list by merchant", "--merchant", []string{"refunds", "list", "--merchant", "mer_…"}},
		{"refunds list by payment", "--payment", []string{"refunds", "list", "--payment", "pay_01m8svrzdh8jwstqvxxy9dnhzc"}},
		{"refunds resolve", "refund-id", []string{"refunds", "resolve", "re_…", "--as", "failed", "--reason", "x"}},
		{"keys list", "--merchant", []string{"merchants", "keys", "list", "--merchant", "mer_…"}},
		{"keys revoke", "--prefix", []string{"merchants", "keys", "revoke", "--merchant", mer, "--prefix", "sk_é"}},
		{"publishable keys revoke", "--prefix", []string{"merchants", "publishable-keys", "revoke", "--merchant", mer, "--prefix", "pk_é"}},
		{"origins list", "--merchant", []string{"merchants", "origins", "list", "--merchant", "mer_…"}},
		{"webhooks list", "--merchant", []string{"webhooks", "list", "--merchant", "mer_…"}},
		{"webhooks delete", "--endpoint", []string{"webhooks", "delete", "--endpoint", "we_…"}},
		{"webhooks create", "--merchant", []string{"webhooks", "create", "--merchant", "mer_…", "--url", "https://shop.example/hooks"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := runCmd(t, getenv, c.args...)
			if exitCode(err) != exitUsage {
				t.Fatalf("%v: exit %d (%v), want %d", c.args, exitCode(err), err, exitUsage)
			}
			msg := err.Error()
			if !strings.Contains(msg, c.flag+` "`) || strings.Contains(msg, "Error 1") || strings.Contains(msg, "collation") {
				t.Fatalf("%v: %q does not name %s plainly", c.args, msg, c.flag)
			}
		})
	}
	// Well-formed ids go on to the database: an unknown one is not found.
	if _, _, err := runCmd(t, getenv, "payments", "show", "pay_01M8SVRZDH8JWSTQVXXY9DNHZC"); exitCode(err) != exitError ||
		!strings.Contains(err.Error(), "no payment pay_01M8SVRZDH8JWSTQVXXY9DNHZC") {
		t.Fatalf("an unknown payment: %v", err)
	}
}
