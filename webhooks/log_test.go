package webhooks_test

import (
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"gateway/errs"
	"gateway/listings"
	"gateway/mysql"
	"gateway/mysql/mysqltest"
	"gateway/payments"
	"gateway/versions"
	"gateway/webhooks"

	"github.com/jmoiron/sqlx"
)

func (e *env) log() *webhooks.Log { return webhooks.NewLog(e.st, e.st) }

// refusedURL is a loopback URL nothing listens on.
func refusedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr + "/hooks"
}

// Every attempt is in the log, with the endpoint's answer, its latency,
// its error and the next attempt; an endpoint that answered nothing has no
// status, and its error says why.
func TestDeliveryLogKeepsEveryAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newSink(t)
	ep, secret := e.endpoint(s.srv.URL)
	s.setSecrets(secret)
	down, _ := e.endpoint(refusedURL(t))
	answers := []int{http.StatusServiceUnavailable, http.StatusInternalServerError, http.StatusOK}
	var mu sync.Mutex
	s.setAnswer(func(*http.Request) int {
		mu.Lock()
		defer mu.Unlock()
		a := answers[0]
		answers = answers[1:]
		return a
	})
	ids := e.events(1, payments.EventPaymentSucceeded)
	d := e.dispatcher(webhooks.Config{Concurrency: 1, BackoffBase: time.Minute, BackoffMax: 10 * time.Minute})
	for range 3 {
		if err := d.RunOnce(e.ctx); err != nil {
			t.Fatal(err)
		}
		mysqltest.Advance(t, e.dbx, 10*time.Minute)
	}

	page, more, err := e.log().Deliveries(e.ctx, webhooks.DeliveryQuery{MerchantID: e.merchant, EndpointID: ep.ID})
	if err != nil || more || len(page) != 1 {
		t.Fatalf("deliveries of the endpoint: %d, more %v, %v", len(page), more, err)
	}
	got := page[0]
	if got.Status != webhooks.Delivered || got.EventID != ids[0] || got.EventType != string(payments.EventPaymentSucceeded) ||
		got.Attempts != 3 || len(got.Log) != 3 {
		t.Fatalf("delivery %+v with %d attempts logged, want delivered at the third", got.Delivery, len(got.Log))
	}
	for i, want := range []struct {
		status  int
		outcome webhooks.AttemptOutcome
	}{{503, webhooks.AttemptFailed}, {500, webhooks.AttemptFailed}, {200, webhooks.AttemptDelivered}} {
		a := got.Log[i]
		if a.Number != i+1 || a.HTTPStatus != want.status || a.Outcome != want.outcome || a.Latency < 0 || a.At.IsZero() {
			t.Fatalf("attempt %d: %+v, want %d %s", i+1, a, want.status, want.outcome)
		}
		if delivered := want.outcome == webhooks.AttemptDelivered; delivered != a.NextAttemptAt.IsZero() || delivered != (a.Error == "") {
			t.Fatalf("attempt %d: %+v: a failed attempt has its error and next attempt, a delivered one neither", i+1, a)
		}
		if i > 0 && !a.At.After(got.Log[i-1].At) {
			t.Fatalf("attempt %d began at %s, before attempt %d (%s)", i+1, a.At, i, got.Log[i-1].At)
		}
	}
	if !got.Log[0].NextAttemptAt.After(got.Log[0].At) {
		t.Fatalf("the first attempt's next attempt %s is not after it (%s)", got.Log[0].NextAttemptAt, got.Log[0].At)
	}

	// The endpoint nobody listens at: three attempts, no status, refused.
	page, _, err = e.log().Deliveries(e.ctx, webhooks.DeliveryQuery{MerchantID: e.merchant, EndpointID: down.ID})
	if err != nil || len(page) != 1 || len(page[0].Log) != 3 {
		t.Fatalf("deliveries of the refusing endpoint: %+v, %v", page, err)
	}
	for _, a := range page[0].Log {
		if a.HTTPStatus != 0 || a.Error == "" || a.Outcome != webhooks.AttemptFailed {
			t.Fatalf("an attempt refused: %+v", a)
		}
	}
	// The event's deliveries are both, newest first.
	page, _, err = e.log().Deliveries(e.ctx, webhooks.DeliveryQuery{MerchantID: e.merchant, EventID: ids[0]})
	if err != nil || len(page) != 2 {
		t.Fatalf("deliveries of the event: %d, %v", len(page), err)
	}
	if n := e.count(`SELECT COUNT(*) FROM webhook_delivery_attempts`); n != 6 {
		t.Fatalf("%d attempts logged, want 6", n)
	}
}

// An attempt whose claim lost its lease records nothing, in the log either.
func TestAFencedAttemptIsNotLogged(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ep, _ := e.endpoint("http://127.0.0.1:9/hooks")
	e.events(1, payments.EventPaymentSucceeded)
	if _, _, err := e.st.FanOut(e.ctx, 10); err != nil {
		t.Fatal(err)
	}
	ref := webhooks.EndpointRef{MerchantID: e.merchant, ID: ep.ID}
	first, err := e.st.ClaimDeliveries(e.ctx, ref, 10, time.Minute)
	if err != nil || len(first) != 1 {
		t.Fatalf("claim: %d, %v", len(first), err)
	}
	mysqltest.Advance(t, e.dbx, 2*time.Minute)
	second, err := e.st.ClaimDeliveries(e.ctx, ref, 10, time.Minute)
	if err != nil || len(second) != 1 {
		t.Fatalf("claim after the lease: %d, %v", len(second), err)
	}
	out, err := e.st.RecordFailed(e.ctx, first[0].Delivery, webhooks.Failure{HTTPStatus: 500, Error: "answered 500", Latency: time.Millisecond,
		Wait: time.Minute, MaxAge: time.Hour, DisableAfter: time.Hour})
	if err != nil || out.Recorded {
		t.Fatalf("the first claim's record: %+v, %v; want it fenced out", out, err)
	}
	if n := e.count(`SELECT COUNT(*) FROM webhook_delivery_attempts`); n != 0 {
		t.Fatalf("%d attempts logged by a claim that lost its lease", n)
	}
	if ok, err := e.st.RecordDelivered(e.ctx, second[0].Delivery, 204, 3*time.Millisecond, false); err != nil || !ok {
		t.Fatalf("the second claim's record: %v, %v", ok, err)
	}
	if n := e.count(`SELECT COUNT(*) FROM webhook_delivery_attempts WHERE attempt = 1 AND http_status = 204 AND latency_us = 3000 AND outcome = 'delivered'`); n != 1 {
		t.Fatalf("%d attempts logged for the second claim, want its one", n)
	}
}

// A redelivery is made once per key, whatever the retries and races; the
// key with another event or endpoint, a disabled endpoint, one that does
// not subscribe, another merchant's event: each refused, nothing made.
func TestRedeliverOncePerKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newSink(t)
	ep, secret := e.endpoint(s.srv.URL)
	s.setSecrets(secret)
	refundsOnly, _ := e.endpoint("http://127.0.0.1:9/refunds", string(payments.EventRefundSucceeded))
	ids := e.events(2, payments.EventPaymentSucceeded)
	d := e.dispatcher(webhooks.Config{})
	if err := d.RunOnce(e.ctx); err != nil {
		t.Fatal(err)
	}
	log := e.log()
	redeliver := func(event, endpoint, key string) (webhooks.DeliveryLog, bool, error) {
		return log.Redeliver(e.ctx, webhooks.Redelivery{MerchantID: e.merchant, EventID: event, EndpointID: endpoint, Key: key})
	}

	// Eight at once with one key: one delivery, every answer names it.
	var wg sync.WaitGroup
	got := make([]webhooks.DeliveryLog, 8)
	fails := make([]error, 8)
	for i := range got {
		wg.Go(func() { got[i], _, fails[i] = redeliver(ids[0], ep.ID, "again-1") })
	}
	wg.Wait()
	for i := range got {
		if fails[i] != nil || got[i].ID != got[0].ID || got[i].Status != webhooks.Pending || got[i].EventID != ids[0] {
			t.Fatalf("redelivery %d: %+v, %v", i, got[i].Delivery, fails[i])
		}
	}
	if n := e.count(`SELECT COUNT(*) FROM webhook_deliveries WHERE event_id = ? AND endpoint_id = ?`, ids[0], ep.ID); n != 2 {
		t.Fatalf("%d deliveries of the event to the endpoint, want the first and one redelivery", n)
	}
	again, replayed, err := redeliver(ids[0], ep.ID, "again-1")
	if err != nil || !replayed || again.ID != got[0].ID {
		t.Fatalf("a retry: %+v replayed %v, %v", again.Delivery, replayed, err)
	}
	for _, c := range []struct {
		what, event, endpoint, key string
		code                       errs.Code
	}{
		{"the key with another event", ids[1], ep.ID, "again-1", errs.CodeKeyMismatch},
		{"an endpoint that does not subscribe", ids[0], refundsOnly.ID, "again-2", errs.CodeInvalid},
		{"an unknown event", payments.NewEventID(), ep.ID, "again-3", errs.CodeNotFound},
		{"an unknown endpoint", ids[0], webhooks.EndpointIDPrefix + "01KB0000000000000000000000", "again-4", errs.CodeNotFound},
	} {
		_, _, err := redeliver(c.event, c.endpoint, c.key)
		if errs.CodeOf(err) != c.code {
			t.Errorf("%s: %v, want %s", c.what, err, c.code)
		}
	}
	other := e.newMerchant()
	if _, _, err := log.Redeliver(e.ctx, webhooks.Redelivery{MerchantID: other, EventID: ids[0], EndpointID: ep.ID, Key: "x"}); errs.CodeOf(err) != errs.CodeNotFound {
		t.Errorf("another merchant's event: %v", err)
	}
	if _, err := e.eps.SetEnabled(e.ctx, e.merchant, ep.ID, false, "maintenance"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := redeliver(ids[1], ep.ID, "again-5"); errs.CodeOf(err) != errs.CodeConflict {
		t.Errorf("a disabled endpoint: %v, want conflict", err)
	}
	if n := e.count(`SELECT COUNT(*) FROM webhook_deliveries WHERE redelivery_key IS NOT NULL`); n != 1 {
		t.Fatalf("%d redeliveries stored, want 1", n)
	}
	// The retry of the one made while it was enabled still answers it.
	if again, replayed, err := redeliver(ids[0], ep.ID, "again-1"); err != nil || !replayed || again.ID != got[0].ID {
		t.Fatalf("a retry after the endpoint was disabled: %+v %v %v", again.Delivery, replayed, err)
	}
	// And once the endpoint is deleted.
	if err := e.eps.Delete(e.ctx, e.merchant, ep.ID); err != nil {
		t.Fatal(err)
	}
	if again, replayed, err := redeliver(ids[0], ep.ID, "again-1"); err != nil || !replayed || again.ID != got[0].ID {
		t.Fatalf("a retry after the endpoint was deleted: %+v %v %v", again.Delivery, replayed, err)
	}
}

// The redelivery goes out: the same event, under its id, signed.
func TestARedeliveryIsDelivered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newSink(t)
	ep, secret := e.endpoint(s.srv.URL)
	s.setSecrets(secret)
	ids := e.events(1, payments.EventPaymentSucceeded)
	d := e.dispatcher(webhooks.Config{})
	if err := d.RunOnce(e.ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.log().Redeliver(e.ctx, webhooks.Redelivery{MerchantID: e.merchant, EventID: ids[0], EndpointID: ep.ID, Key: "k"}); err != nil {
		t.Fatal(err)
	}
	if err := d.RunOnce(e.ctx); err != nil {
		t.Fatal(err)
	}
	posts := s.all()
	if len(posts) != 2 || posts[1].eventID != ids[0] || posts[1].sigErr != nil || string(posts[1].body) != string(posts[0].body) {
		t.Fatalf("%d posts; the second %+v", len(posts), posts[len(posts)-1])
	}
}

// Pages of an endpoint's deliveries, newest first, none twice, none lost.
func TestDeliveriesPageNewestFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ep, _ := e.endpoint("http://127.0.0.1:9/hooks")
	e.events(25, payments.EventPaymentSucceeded)
	if _, _, err := e.st.FanOut(e.ctx, 100); err != nil {
		t.Fatal(err)
	}
	var all []webhooks.DeliveryLog
	q := webhooks.DeliveryQuery{MerchantID: e.merchant, EndpointID: ep.ID, Limit: 10}
	for pages := 0; ; pages++ {
		page, more, err := e.log().Deliveries(e.ctx, q)
		if err != nil || pages > 3 {
			t.Fatalf("page %d: %v", pages, err)
		}
		all = append(all, page...)
		if !more {
			break
		}
		q.StartingAfter = page[len(page)-1].ID
	}
	seen := map[string]bool{}
	for i, d := range all {
		if seen[d.ID] {
			t.Fatalf("%s listed twice", d.ID)
		}
		seen[d.ID] = true
		if i > 0 && (d.CreatedAt.After(all[i-1].CreatedAt) || d.CreatedAt.Equal(all[i-1].CreatedAt) && d.ID > all[i-1].ID) {
			t.Fatalf("delivery %d is newer than the one before it", i)
		}
	}
	if len(all) != 25 {
		t.Fatalf("%d deliveries listed, want 25", len(all))
	}
	for _, c := range []struct {
		what string
		q    webhooks.DeliveryQuery
	}{
		{"a limit of 101", webhooks.DeliveryQuery{MerchantID: e.merchant, EndpointID: ep.ID, Limit: 101}},
		{"a cursor that is no delivery id", webhooks.DeliveryQuery{MerchantID: e.merchant, EndpointID: ep.ID, StartingAfter: "pay_x"}},
		{"a cursor of no delivery", webhooks.DeliveryQuery{MerchantID: e.merchant, EndpointID: ep.ID, StartingAfter: webhooks.DeliveryIDPrefix + "01KB0000000000000000000000"}},
	} {
		if _, _, err := e.log().Deliveries(e.ctx, c.q); errs.CodeOf(err) != errs.CodeInvalid {
			t.Errorf("%s: %v, want invalid", c.what, err)
		}
	}
	other := e.newMerchant()
	if _, _, err := e.log().Deliveries(e.ctx, webhooks.DeliveryQuery{MerchantID: other, EndpointID: ep.ID}); errs.CodeOf(err) != errs.CodeNotFound {
		t.Errorf("another merchant's endpoint: %v", err)
	}
	if _, _, err := e.log().Deliveries(e.ctx, webhooks.DeliveryQuery{MerchantID: e.merchant, EventID: payments.NewEventID()}); !errors.Is(err, webhooks.ErrNoSuchEvent) {
		t.Errorf("an unknown event: %v", err)
	}
}

// An endpoint pinned to an older API version gets its events rendered in
// it, with its Gateway-Version header; GET /events/{id} in that version
// answers the same bytes.
func TestDeliveriesAreRenderedInTheirEndpointsVersion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newSink(t)
	old, secret := e.endpoint(s.srv.URL + "/old")
	_, secret2 := e.endpoint(s.srv.URL + "/latest")
	s.setSecrets(secret, secret2)
	if _, err := e.dbx.Exec(`UPDATE webhook_endpoints SET api_version = '2026-12-01' WHERE id = ?`, old.ID); err != nil {
		t.Fatal(err)
	}
	id := payments.NewEventID()
	err := mysql.Transact(e.ctx, e.dbx, func(tx *sqlx.Tx) error {
		_, err := mysql.InsertEvent(e.ctx, tx, payments.Event{ID: id, MerchantID: e.merchant, Type: payments.EventRefundFailed,
			ObjectType: payments.ObjectRefund, ObjectID: "re_x", Seq: 1, Data: []byte(`{"id":"re_x","status":"failed","decline_code":"insufficient_funds"}`)})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.dispatcher(webhooks.Config{}).RunOnce(e.ctx); err != nil {
		t.Fatal(err)
	}
	got := map[string]post{}
	for _, p := range s.all() {
		if p.sigErr != nil {
			t.Fatal(p.sigErr)
		}
		got[p.version] = p
	}
	if p := got["2026-12-01"]; !strings.Contains(string(p.body), `"failure_code":"insufficient_funds"`) || strings.Contains(string(p.body), "decline_code") {
		t.Fatalf("the delivery to the endpoint pinned to 2026-12-01: %s", p.body)
	}
	if p := got["2026-12-02"]; !strings.Contains(string(p.body), `"decline_code":"insufficient_funds"`) {
		t.Fatalf("the delivery to the endpoint in the latest version: %s", p.body)
	}
	if len(got) != 2 {
		t.Fatalf("deliveries by version: %v", got)
	}
	ev, err := listings.New(e.st).Event(e.ctx, e.merchant, id)
	if err != nil {
		t.Fatal(err)
	}
	inOld, err := payments.EventIn(ev, versions.V20261201)
	if err != nil || string(payments.EventJSON(inOld)) != string(got["2026-12-01"].body) {
		t.Fatalf("GET /events/{id} in 2026-12-01 would answer %s, the delivery carried %s (%v)", payments.EventJSON(inOld), got["2026-12-01"].body, err)
	}
}
