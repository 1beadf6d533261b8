package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"gateway/merchants"
	"gateway/mysql"
	"gateway/mysql/mysqltest"
	"gateway/payments"
	"gateway/webhooks"
	"gateway/webhooks/receiver"
)

// `gateway webhooks …`: ops register an endpoint, events reach it signed
// through `dispatch --once`, the secret rotates, the endpoint is disabled,
// enabled and resent, then deleted.
func TestWebhooksCommands(t *testing.T) {
	dbx := mysqltest.MustOpen(t)
	st := mysql.NewStore(dbx)
	ctx := context.Background()
	mer, key, err := merchants.NewMerchant("Acme", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.CreateMerchant(ctx, mer, key); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		secrets []string
		got     []error
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, receiver.Verify(r.Header.Get(webhooks.SignatureHeader), body, secrets, 0, time.Now()))
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	wkey, err := webhooks.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	getenv := env("GATEWAY_DATABASE_DSN", mysqltest.DSNOf(t, dbx), "GATEWAY_WEBHOOK_KEY", wkey,
		"GATEWAY_WEBHOOK_ALLOW_NETWORKS", "127.0.0.0/8")

	// Refused without the allow list: the receiver is on loopback.
	_, _, err = runCmd(t, env("GATEWAY_DATABASE_DSN", mysqltest.DSNOf(t, dbx), "GATEWAY_WEBHOOK_KEY", wkey),
		"webhooks", "create", "--merchant", mer.ID, "--url", srv.URL)
	if exitCode(err) != exitUsage || !strings.Contains(err.Error(), "must be a public address") {
		t.Fatalf("create to loopback by default: %v", err)
	}
	// Refused without the key.
	_, _, err = runCmd(t, env("GATEWAY_DATABASE_DSN", mysqltest.DSNOf(t, dbx)), "webhooks", "create", "--merchant", mer.ID, "--url", srv.URL)
	if exitCode(err) != exitUsage || !strings.Contains(err.Error(), "GATEWAY_WEBHOOK_KEY") {
		t.Fatalf("create without a key: %v", err)
	}

	out, _, err := runCmd(t, getenv, "webhooks", "create", "--merchant", mer.ID, "--url", srv.URL, "--events", "payment.succeeded", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var ep struct {
		ID, Secret string
	}
	decodeOne(t, out, &ep)
	mu.Lock()
	secrets = []string{ep.Secret}
	mu.Unlock()
	if out, _, err = runCmd(t, getenv, "webhooks", "list", "--merchant", mer.ID); err != nil || !strings.Contains(out, ep.ID) || strings.Contains(out, ep.Secret) {
		t.Fatalf("list: %v\n%s", err, out)
	}

	event := func() {
		err := mysql.Transact(ctx, dbx, func(tx *sqlx.Tx) error {
			_, err := mysql.InsertEvent(ctx, tx, payments.Event{MerchantID: mer.ID, Type: payments.EventPaymentSucceeded,
				ObjectType: payments.ObjectPayment, ObjectID: "pay_" + strings.Repeat("0", 26), Seq: int64(len(got) + 1), Data: []byte(`{}`)})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	delivered := func(want int) {
		t.Helper()
		if _, _, err := runCmd(t, getenv, "webhooks", "dispatch", "--once"); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		if len(got) != want {
			t.Fatalf("%d deliveries, want %d", len(got), want)
		}
		for _, e := range got {
			if e != nil {
				t.Fatalf("a delivery's signature: %v", e)
			}
		}
	}
	event()
	delivered(1)

	// Rotated: the receiver still on the old secret verifies during the grace.
	if out, _, err = runCmd(t, getenv, "webhooks", "rotate", "--endpoint", ep.ID, "--grace", "1h"); err != nil || !strings.Contains(out, "whsec_") {
		t.Fatalf("rotate: %v\n%s", err, out)
	}
	event()
	delivered(2)

	// Disabled: nothing; enabled and resent: everything since.
	if _, _, err = runCmd(t, getenv, "webhooks", "disable", "--endpoint", ep.ID); err != nil {
		t.Fatal(err)
	}
	event()
	delivered(2)
	if _, _, err = runCmd(t, getenv, "webhooks", "enable", "--endpoint", ep.ID); err != nil {
		t.Fatal(err)
	}
	if out, _, err = runCmd(t, getenv, "webhooks", "resend", "--endpoint", ep.ID, "--since", "1h"); err != nil || !strings.HasPrefix(out, "3 event(s)") {
		t.Fatalf("resend: %v\n%s", err, out)
	}
	delivered(5)
	if _, _, err = runCmd(t, getenv, "webhooks", "resend", "--endpoint", ep.ID, "--since", "yesterday"); exitCode(err) != exitUsage {
		t.Fatalf("resend --since yesterday: %v", err)
	}

	if _, _, err = runCmd(t, getenv, "webhooks", "delete", "--endpoint", ep.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err = runCmd(t, getenv, "webhooks", "delete", "--endpoint", ep.ID); err == nil || !strings.Contains(err.Error(), "no such webhook endpoint") {
		t.Fatalf("delete twice: %v", err)
	}
}

// gateway dev keeps its webhook key beside its data: the endpoints of one
// run still sign in the next, and the file is the owner's alone.
func TestDevWebhookKeyIsKept(t *testing.T) {
	dir := t.TempDir() + "/data/mariadb"
	first, err := devWebhookKey(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := webhooks.ParseKey(first); err != nil {
		t.Fatalf("the generated key does not parse: %v", err)
	}
	again, err := devWebhookKey(dir)
	if err != nil || again != first {
		t.Fatalf("second run: %q, %v; want the first run's key", again, err)
	}
	st, err := os.Stat(filepath.Join(filepath.Dir(dir), "webhook-key"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, %v", st, err)
	}
}
