package sdk_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gateway "gateway/clients/go"
	"gateway/clients/go/webhook"
	"gateway/mysql/mysqltest"
	"gateway/tests/gatewaytest"
	"gateway/webhooks"
)

// The gateway's own dispatcher delivers events, through a proxy, to a
// shop's endpoint: the client's webhook.Handler with the MySQL inbox in
// the shop's own database. However often an event arrives (its answer
// lost after the shop committed, the shop failing once, copies at the same
// moment), the shop's change is made once, and the inbox holds one row.
func testDeliveries(t *testing.T, g *gatewaytest.Gateway) {
	s := newShop(t, g)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	shopDB := mysqltest.MustOpen(t).DB // the shop's database, apart from the gateway's
	inbox := webhook.NewMySQLInbox(shopDB)
	if err := inbox.CreateTable(ctx); err != nil {
		t.Fatal(err)
	}
	if err := inbox.CreateTable(ctx); err != nil {
		t.Fatalf("CreateTable again: %v", err)
	}
	if _, err := shopDB.ExecContext(ctx, `CREATE TABLE shop_applied (n BIGINT AUTO_INCREMENT PRIMARY KEY,
  event_id VARCHAR(64) NOT NULL, object_id VARCHAR(64) NOT NULL)`); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	calls := map[string]int{}    // the shop's func ran, per event, committed or not
	failing := map[string]bool{} // the shop's change fails once, for these payments
	apply := func(ctx context.Context, tx *sql.Tx, ev gateway.Event) error {
		mu.Lock()
		calls[ev.ID]++
		fail := failing[ev.ObjectID]
		delete(failing, ev.ObjectID)
		mu.Unlock()
		if _, err := tx.ExecContext(ctx, `INSERT INTO shop_applied (event_id, object_id) VALUES (?, ?)`, ev.ID, ev.ObjectID); err != nil {
			return err
		}
		if fail {
			return errors.New("the shop's change failed") // after its insert, which the rollback must undo
		}
		return nil
	}
	var handler atomic.Pointer[http.Handler]
	shopServer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { (*handler.Load()).ServeHTTP(w, r) }))
	t.Cleanup(shopServer.Close)
	hooks := gatewaytest.NewProxy(t, shopServer.URL, shopServer.Client())
	ep, err := s.client.WebhookEndpoints.Create(ctx, &gateway.CreateWebhookEndpointRequest{URL: hooks.URL + "/hooks",
		EventTypes: []string{string(gateway.EventPaymentSucceeded)}})
	if err != nil {
		t.Fatal(err)
	}
	var h http.Handler = webhook.NewHandler([]string{ep.Secret}, inbox, apply)
	handler.Store(&h)
	// Retries due at once: the dispatcher's RunOnce makes them all. It
	// delivers every merchant's events, so no other subtest may leave an
	// endpoint behind (one nothing answers would be retried until ctx ends).
	if n := s.count(t, `SELECT COUNT(*) FROM webhook_endpoints WHERE merchant_id <> ?`, s.id); n != 0 {
		t.Fatalf("%d endpoints of other merchants are left", n)
	}
	dispatcher := g.Dispatcher(webhooks.Config{BackoffBase: time.Nanosecond, BackoffMax: time.Nanosecond, Jitter: func() float64 { return 0 }})
	succeeded := func(p *gateway.Payment) string {
		t.Helper()
		for ev, err := range s.client.Events.List(ctx, &gateway.EventListParams{ObjectID: p.ID, Type: gateway.EventPaymentSucceeded}) {
			if err != nil {
				t.Fatal(err)
			}
			return ev.ID
		}
		t.Fatalf("payment %s has no payment.succeeded event", p.ID)
		return ""
	}
	posts := func(eventID string) int {
		n := 0
		for _, r := range hooks.Seen("/hooks") {
			if strings.Contains(r.Body, eventID) {
				n++
			}
		}
		return n
	}

	// 1. The shop commits, its answer is lost: the gateway delivers again,
	// and the redelivery is acknowledged without running.
	lost, err := s.charge(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hooks.Queue("/hooks", gatewaytest.Fault{Kind: "drop_after"})
	if err := dispatcher.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	lostEvent := succeeded(lost)
	if n := posts(lostEvent); n != 2 {
		t.Fatalf("the event was posted %d times, want 2 (its answer lost once)", n)
	}

	// 2. The shop's change fails once: 500, rolled back, delivered again,
	// applied then.
	failed, err := s.charge(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	failing[failed.ID] = true
	mu.Unlock()
	if err := dispatcher.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	failedEvent := succeeded(failed)
	if n := posts(failedEvent); n != 2 {
		t.Fatalf("the event was posted %d times, want 2 (a 500, then a 200)", n)
	}
	statuses := ""
	for _, r := range hooks.Seen("/hooks") {
		if strings.Contains(r.Body, failedEvent) {
			statuses += http.StatusText(r.Status) + ";"
		}
	}
	if statuses != "Internal Server Error;OK;" {
		t.Fatalf("the shop answered %s", statuses)
	}

	// 3. Copies of one delivery at the same moment, as replicas racing
	// would send them: the event's bytes as GET /events/{id} answers them,
	// signed by the gateway's signer.
	raced, err := s.charge(ctx)
	if err != nil {
		t.Fatal(err)
	}
	racedEvent := succeeded(raced)
	body := eventBytes(t, g, s.key, racedEvent)
	const copies = 8
	start := make(chan struct{})
	var wg sync.WaitGroup
	answers := make([]int, copies)
	for i := range copies {
		wg.Go(func() {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, shopServer.URL+"/hooks", bytes.NewReader(body))
			if err != nil {
				t.Error(err)
				return
			}
			req.Header.Set(webhook.SignatureHeader, webhooks.SignatureValue([]string{ep.Secret}, time.Now(), body))
			req.Header.Set(webhook.EventIDHeader, racedEvent)
			<-start
			res, err := shopServer.Client().Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			res.Body.Close()
			answers[i] = res.StatusCode
		})
	}
	close(start)
	wg.Wait()
	for i, a := range answers {
		if a != http.StatusOK {
			t.Errorf("copy %d answered %d", i, a)
		}
	}

	mu.Lock()
	ran := map[string]int{lostEvent: calls[lostEvent], failedEvent: calls[failedEvent], racedEvent: calls[racedEvent]}
	mu.Unlock()
	if ran[lostEvent] != 1 || ran[failedEvent] != 2 || ran[racedEvent] != 1 {
		t.Errorf("the shop's func ran %v: want once for the redelivered and the raced event, twice for the one that failed once", ran)
	}
	// What the shop's database holds: one change and one inbox row per event.
	shop := func(q string, args ...any) int {
		t.Helper()
		var n int
		if err := shopDB.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, id := range []string{lostEvent, failedEvent, racedEvent} {
		if n := shop(`SELECT COUNT(*) FROM shop_applied WHERE event_id = ?`, id); n != 1 {
			t.Errorf("event %s changed the shop %d times, want 1", id, n)
		}
		if n := shop(`SELECT COUNT(*) FROM gateway_webhook_inbox WHERE event_id = ?`, id); n != 1 {
			t.Errorf("event %s has %d inbox rows, want 1", id, n)
		}
	}
	if n := shop(`SELECT COUNT(*) FROM shop_applied`); n != 3 {
		t.Errorf("%d changes in the shop, want 3", n)
	}
	if n := s.count(t, `SELECT COUNT(*) FROM webhook_deliveries WHERE endpoint_id = ? AND status = 'delivered'`, ep.ID); n != 2 {
		t.Errorf("%d deliveries delivered, want 2", n)
	}
}

// eventBytes is GET /events/{id} as the gateway answers it, byte for byte:
// what a delivery carries.
func eventBytes(t *testing.T, g *gatewaytest.Gateway, key, id string) []byte {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, g.Upstream+"/events/"+id, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("GET /events/%s: %d %s %v", id, res.StatusCode, b, err)
	}
	return b
}
