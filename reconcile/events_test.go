package reconcile_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"gateway/payments"
	"gateway/reconcile"
)

// eventPurges counts the purge's event batches.
type eventPurges struct {
	reconcile.Store
	batches atomic.Int32
}

func (c *eventPurges) PurgeEvents(ctx context.Context, retention time.Duration, after payments.EventPurgeCursor, limit int) (int64, payments.EventPurgeCursor, bool, error) {
	c.batches.Add(1)
	return c.Store.PurgeEvents(ctx, retention, after, limit)
}

// The purge deletes events past their retention (30 days by default, on
// the database's clock), in batches, and leaves the younger ones.
func TestPurgeExpiredEvents(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for i := range 5 {
		if _, err := e.svc.Create(ctx, e.request(fmt.Sprintf("old%02d", i))); err != nil {
			t.Fatal(err)
		}
	}
	e.advance(29 * 24 * time.Hour)
	for i := range 3 {
		if _, err := e.svc.Create(ctx, e.request(fmt.Sprintf("new%02d", i))); err != nil {
			t.Fatal(err)
		}
	}
	e.advance(2 * 24 * time.Hour) // the old events are 31 days old, the new ones 2
	if n := e.count(`SELECT COUNT(*) FROM events`); n != 16 {
		t.Fatalf("%d events before the purge, want 16", n)
	}
	cs := &eventPurges{Store: e.store}
	r := e.reconciler(nil, cs, func(c *reconcile.Config) { c.PurgeBatch = 4 })
	if _, err := r.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.count(`SELECT COUNT(*) FROM events`); n != 6 {
		t.Fatalf("%d events left, want the 6 of the new payments", n)
	}
	if n := e.count(`SELECT COUNT(*) FROM events WHERE created_at < NOW(6) - INTERVAL ? MICROSECOND`, payments.DefaultEventRetention.Microseconds()); n != 0 {
		t.Fatalf("%d events past retention left", n)
	}
	if b := cs.batches.Load(); b != 3 {
		t.Fatalf("purged in %d batches, want 3 (4, 4, 2)", b)
	}
	if n := e.count(`SELECT COUNT(*) FROM payments`); n != 8 {
		t.Fatalf("the purge touched payments: %d", n)
	}
}

// The purge keeps an event past its retention while a webhook delivery of
// it is still pending (webhooks resend, a lagging fan-out) and deletes the
// ended deliveries past the same retention. Before, the event went and its
// delivery failed every claim of its endpoint.
func TestPurgeKeepsEventsWithPendingDeliveries(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for i := range 3 {
		if _, err := e.svc.Create(ctx, e.request(fmt.Sprintf("old%02d", i))); err != nil {
			t.Fatal(err)
		}
	}
	var evs []string
	if err := e.db.SelectContext(ctx, &evs, `SELECT id FROM events ORDER BY pos`); err != nil {
		t.Fatal(err)
	}
	deliver := func(id, event, status string) {
		t.Helper()
		_, err := e.db.ExecContext(ctx, `INSERT INTO webhook_deliveries
(merchant_id, id, endpoint_id, event_id, status, next_attempt_at, created_at, updated_at)
VALUES (?, ?, 'we_1', ?, ?, NOW(6), NOW(6), NOW(6))`, e.merch.ID, id, event, status)
		if err != nil {
			t.Fatal(err)
		}
	}
	deliver("wd_pending", evs[0], "pending")
	deliver("wd_delivered", evs[1], "delivered")
	deliver("wd_failed", evs[2], "failed")
	e.advance(31 * 24 * time.Hour)
	// One event per batch: the first batch, the kept event's, deletes
	// nothing, and the walk goes on past it.
	if _, err := e.reconciler(nil, nil, func(c *reconcile.Config) { c.PurgeBatch = 1 }).Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.count(`SELECT COUNT(*) FROM events WHERE id = ?`, evs[0]); n != 1 {
		t.Fatalf("the event of a pending delivery was purged")
	}
	if n := e.count(`SELECT COUNT(*) FROM events`); n != 1 {
		t.Fatalf("%d events left, want only the one still to be delivered", n)
	}
	var left []string
	if err := e.db.SelectContext(ctx, &left, `SELECT id FROM webhook_deliveries`); err != nil {
		t.Fatal(err)
	}
	if len(left) != 1 || left[0] != "wd_pending" {
		t.Fatalf("deliveries left %v, want only the pending one", left)
	}
}
