package main

import (
	"context"
	"net/http"
	"os"
	"testing"
	"time"

	"gateway/payments"
)

// isCommit matches the MySQL protocol packet of a COMMIT statement
// (COM_QUERY "COMMIT", as go-sql-driver sends it for Tx.Commit).
func isCommit(chunk []byte) bool {
	return len(chunk) == 11 && string(chunk[4:]) == "\x03COMMIT"
}

// TestNoChargeAfterLeaseExpired pins, over real processes and a real
// network fault, that no worker sends a charge once its lease is gone.
//
// Replica 0 takes a fresh key: its claim transaction (key IN_PROGRESS with
// lease and may_send_until t+lease, payment processing) commits, but the
// COMMIT's answer is held up: the link between replica 0 and the database
// stalls right after the COMMIT went out (a partition, a packet TCP resends
// much later, or a paused process all look like this). Replica 1's
// reconciler does what the design says: after the lease it looks the order
// up (not found), waits out the creation window after may_send_until,
// looks again and settles the payment as failed, storing a 402. When the link
// heals, replica 0 learns that its claim committed. If it sent the charge
// now, the PSP would charge the customer for a payment the merchant is told
// failed (invariants 2 and 3). Before commit c7d5960 it did exactly that:
// the lease was computed before the claim and never looked at again before
// Charge. Now payments.Service.send (through Service.sendTime, payments/flow.go)
// refuses to send with less than half a PSP timeout of the lease left.
func TestNoChargeAfterLeaseExpired(t *testing.T) {
	if testing.Short() {
		t.Skip("starts MariaDB and two gateway replicas: make proofs runs it")
	}
	opts := options{
		seed: 1, replicas: 2, merchants: 1, clients: 1,
		lease: 2 * time.Second, pspTimeout: time.Second, creationWindow: time.Second, reconcileEvery: time.Second,
		// Only replica 1 reconciles and dispatches webhooks; replica 0's
		// reconciler and dispatcher would commit transactions of their own
		// through the link that is about to stall.
		replicaEnv: map[int]map[string]string{0: {"GATEWAY_RECONCILE_SCHEDULE": "off", "GATEWAY_WEBHOOK_DISPATCH": "false"}},
		// CHAOS_GATEWAY_BIN runs it against another build, e.g. one from before the fix.
		gatewayBin: os.Getenv("CHAOS_GATEWAY_BIN"),
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	e, err := setup(ctx, opts, os.Getenv, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { e.teardown(t.Failed()) }()

	m := e.merchants[0]
	const key = "repro-lease-expired-1"
	body := []byte(`{"amount": 1000, "currency": "KRW", "payment_method": "pm_card_ok"}`)
	order := payments.MerchantOrderID(m.ID, key)

	stalled := e.dbProxies[0].armStallAfter(isCommit)
	type result struct {
		a   answer
		err error
	}
	got := make(chan result, 1)
	go func() {
		a, err := doPost(ctx, http.DefaultClient, e.replicas[0].url(), m.APIKey, key, body, time.Minute)
		got <- result{a, err}
	}()
	select {
	case <-stalled:
	case <-time.After(15 * time.Second):
		t.Fatal("replica 0 never sent its claim's COMMIT")
	}
	t.Logf("replica 0's claim COMMIT went out; its database link is stalled from now on")

	// Replica 1's reconciler settles the payment: lease, then creation window.
	var status string
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := e.db.GetContext(ctx, &status, `SELECT status FROM payments WHERE merchant_id = ? AND idem_key = ?`, m.ID, key)
		if err == nil && status != string(payments.Processing) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica 1's reconciler did not settle the payment (status %q, err %v)", status, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("replica 1's reconciler settled the payment as %s while replica 0 was cut off", status)

	e.dbProxies[0].unstall()
	var r result
	select {
	case r = <-got:
	case <-time.After(30 * time.Second):
		t.Fatal("replica 0 never answered")
	}
	if r.err != nil {
		t.Fatalf("replica 0: %v", r.err)
	}
	t.Logf("replica 0 answered %d (replayed %v): %s", r.a.Status, r.a.Replayed, r.a.Body)

	c := &checker{e: e, http: http.DefaultClient}
	ledger, err := c.fetchLedger(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.db.GetContext(ctx, &status, `SELECT status FROM payments WHERE merchant_id = ? AND idem_key = ?`, m.ID, key); err != nil {
		t.Fatal(err)
	}
	if r.a.Status == http.StatusCreated {
		t.Errorf("replica 0 answered 201 for a payment settled as %s", status)
	}
	for _, ch := range ledger.Charges {
		if ch.MerchantOrderID == order && ch.Status != status {
			t.Fatalf("the PSP made charge %s (%s, %d %s) for order %s, but the payment is %s and the client was told %d %s:\n"+
				"replica 0 charged after its lease had expired and the reconciler had settled the payment",
				ch.Reference, ch.Status, ch.Amount, ch.Currency, order, status, r.a.Status, r.a.Body)
		}
	}
}
