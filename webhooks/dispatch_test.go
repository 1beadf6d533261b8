package webhooks_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gateway/mysql"
	"gateway/mysql/mysqltest"
	"gateway/payments"
	"gateway/webhooks"
	"gateway/webhooks/receiver"
)

// Every event reaches every subscribed, enabled endpoint once, signed,
// with the body GET /events/{id} answers; others get nothing.
func TestFanOutAndDeliver(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	all, subscribed, other := newSink(t), newSink(t), newSink(t)
	_, s1 := e.endpoint(all.srv.URL)
	_, s2 := e.endpoint(subscribed.srv.URL, "payment.succeeded")
	_, s3 := e.endpoint(other.srv.URL, "refund.succeeded")
	all.setSecrets(s1)
	subscribed.setSecrets(s2)
	other.setSecrets(s3)
	off, _ := e.endpoint(other.srv.URL)
	if _, err := e.eps.SetEnabled(e.ctx, e.merchant, off.ID, false, "test"); err != nil {
		t.Fatal(err)
	}
	ids := append(e.events(3, payments.EventPaymentSucceeded), e.events(2, payments.EventPaymentDeclined)...)

	if err := e.dispatcher(webhooks.Config{}).RunOnce(e.ctx); err != nil {
		t.Fatal(err)
	}
	if got := all.distinct(); len(got) != 5 || len(all.all()) != 5 {
		t.Fatalf("the endpoint of every type got %v", got)
	}
	if got := subscribed.distinct(); len(got) != 3 {
		t.Fatalf("the endpoint of payment.succeeded got %v", got)
	}
	if n := len(other.all()); n != 0 {
		t.Fatalf("the endpoint of refund.succeeded and the disabled one got %d deliveries", n)
	}
	for _, p := range append(all.all(), subscribed.all()...) {
		if p.sigErr != nil {
			t.Fatalf("delivery of %s: signature: %v", p.eventID, p.sigErr)
		}
		if !slices.Contains(ids, p.eventID) {
			t.Fatalf("unknown event %s", p.eventID)
		}
	}
	if n := e.count(`SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'delivered' AND attempts = 1 AND first_delivered_at IS NOT NULL`); n != 8 {
		t.Fatalf("%d deliveries delivered at the first attempt, want 8", n)
	}
	if n := e.count(`SELECT COUNT(*) FROM events WHERE fanned_out = 0`); n != 0 {
		t.Fatalf("%d events not fanned out", n)
	}
}

// Two fan-outs at once make each event's deliveries exactly once.
func TestFanOutOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newSink(t)
	e.endpoint(s.srv.URL)
	e.endpoint(s.srv.URL + "/second")
	e.events(60, payments.EventPaymentSucceeded)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for {
				n, _, err := e.st.FanOut(e.ctx, 7)
				if err != nil {
					t.Error(err)
					return
				}
				if n == 0 {
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	if n := e.count(`SELECT COUNT(*) FROM webhook_deliveries`); n != 120 {
		t.Fatalf("%d deliveries, want 120", n)
	}
	if n := e.count(`SELECT COUNT(*) FROM (SELECT endpoint_id, event_id FROM webhook_deliveries GROUP BY endpoint_id, event_id HAVING COUNT(*) > 1) d`); n != 0 {
		t.Fatalf("%d (endpoint, event) pairs delivered twice", n)
	}
}

// A dispatcher that dies after the receiver got the POST but before it
// recorded the delivery: once its lease ends, the event is delivered again
// with the same id and a valid signature, and a receiver that drops
// duplicates by id keeps it once.
func TestCrashAfterPostDeliversAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newSink(t)
	ep, secret := e.endpoint(s.srv.URL)
	s.setSecrets(secret)
	ids := e.events(1, payments.EventPaymentSucceeded)

	ctx, kill := context.WithCancel(e.ctx)
	s.setAnswer(func(*http.Request) int {
		kill() // the dispatcher dies with the POST received, its answer unread
		<-ctx.Done()
		return http.StatusOK
	})
	lease := time.Minute
	if err := e.dispatcher(webhooks.Config{Lease: lease}).RunOnce(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("the killed dispatcher: %v", err)
	}
	if n := e.count(`SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'pending' AND attempts = 0 AND lease_token = 1`); n != 1 {
		t.Fatal("the delivery is not left pending under the dead dispatcher's lease")
	}
	s.setAnswer(func(*http.Request) int { return http.StatusOK })

	// Within the lease nobody takes it; after, another dispatcher does.
	next := e.dispatcher(webhooks.Config{Lease: lease})
	if err := next.RunOnce(e.ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(s.all()); n != 1 {
		t.Fatalf("delivered again within the lease: %d posts", n)
	}
	mysqltest.Advance(t, e.dbx, lease+time.Second)
	if err := next.RunOnce(e.ctx); err != nil {
		t.Fatal(err)
	}
	posts := s.all()
	if len(posts) != 2 {
		t.Fatalf("%d posts, want 2", len(posts))
	}
	for _, p := range posts {
		if p.eventID != ids[0] || p.sigErr != nil {
			t.Fatalf("post of %s (want %s), signature %v", p.eventID, ids[0], p.sigErr)
		}
	}
	// The same event (its created_at moved with the test's clock only).
	var first, second map[string]any
	if json.Unmarshal(posts[0].body, &first) != nil || json.Unmarshal(posts[1].body, &second) != nil {
		t.Fatal("a body is not JSON")
	}
	delete(first, "created_at")
	delete(second, "created_at")
	if !reflect.DeepEqual(first, second) {
		t.Fatalf("the event changed between deliveries:\n%s\n%s", posts[0].body, posts[1].body)
	}
	if got := s.distinct(); len(got) != 1 {
		t.Fatalf("the deduplicating receiver keeps %v", got)
	}
	if n := e.count(`SELECT COUNT(*) FROM webhook_deliveries WHERE endpoint_id = ? AND status = 'delivered' AND lease_token = 2`, ep.ID); n != 1 {
		t.Fatal("the second claim's record is not the delivery's")
	}
}

// A receiver down for a while, then up: every event arrives, in the order
// the retries fell due, none lost.
func TestReceiverDownThenUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newSink(t)
	_, secret := e.endpoint(s.srv.URL)
	s.setSecrets(secret)
	var down atomic.Bool
	down.Store(true)
	s.setAnswer(func(*http.Request) int {
		if down.Load() {
			return http.StatusServiceUnavailable
		}
		return http.StatusOK
	})
	ids := e.events(8, payments.EventPaymentSucceeded)
	// Jitter that differs per attempt, so the retries' order is not the events'.
	var draws atomic.Int64
	jitter := func() float64 { return float64((draws.Add(1)*7)%10) / 10 }
	d := e.dispatcher(webhooks.Config{Concurrency: 1, BackoffBase: time.Minute, BackoffMax: 10 * time.Minute, Jitter: jitter})

	for round := 1; round <= 3; round++ {
		if err := d.RunOnce(e.ctx); err != nil {
			t.Fatal(err)
		}
		if n := e.count(`SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'pending' AND attempts = ? AND last_http_status = 503`, round); n != 8 {
			t.Fatalf("round %d: %d deliveries pending after %d failed attempts, want 8", round, n, round)
		}
		mysqltest.Advance(t, e.dbx, 10*time.Minute)
	}
	var due []string
	if err := e.dbx.SelectContext(e.ctx, &due, `SELECT event_id FROM webhook_deliveries ORDER BY next_attempt_at, id`); err != nil {
		t.Fatal(err)
	}
	before := len(s.all())
	down.Store(false)
	if err := d.RunOnce(e.ctx); err != nil {
		t.Fatal(err)
	}
	var arrived []string
	for _, p := range s.all()[before:] {
		if p.sigErr != nil {
			t.Fatalf("%s: %v", p.eventID, p.sigErr)
		}
		arrived = append(arrived, p.eventID)
	}
	if !slices.Equal(arrived, due) {
		t.Fatalf("arrivals %v\nnot in the retries' order %v", arrived, due)
	}
	if slices.Equal(due, ids) {
		t.Fatal("the retries fell due in the events' order: the test shows nothing about the order")
	}
	if n := e.count(`SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'delivered' AND attempts = 4`); n != 8 {
		t.Fatalf("%d of 8 delivered at the fourth attempt", n)
	}
}

// Two dispatchers (two replicas, each its own pool) never attempt the same
// delivery at once: the receiver never sees an event twice in flight, nor
// twice at all when nothing failed.
func TestTwoDispatchersNeverOverlap(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const events = 60
	var (
		mu       sync.Mutex
		inFlight = map[string]bool{}
		overlaps atomic.Int64
	)
	s := newSink(t)
	_, secret := e.endpoint(s.srv.URL)
	s.setSecrets(secret)
	s.setAnswer(func(r *http.Request) int {
		id := r.Header.Get(webhooks.EventIDHeader)
		mu.Lock()
		if inFlight[id] {
			overlaps.Add(1)
		}
		inFlight[id] = true
		mu.Unlock()
		defer func() { mu.Lock(); delete(inFlight, id); mu.Unlock() }()
		return http.StatusOK
	})
	e.events(events, payments.EventPaymentSucceeded)
	dsn := mysqltest.DSNOf(t, e.dbx)
	var ds []*webhooks.Dispatcher
	for range 2 {
		pool, err := mysql.Open(e.ctx, dsn, mysql.PoolOptions{MaxOpen: 8, MaxIdle: 8})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { pool.Close() })
		ds = append(ds, webhooks.NewDispatcher(mysql.NewStore(pool), e.cipher, e.guard, webhooks.Config{Concurrency: 4}))
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, d := range ds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if err := d.RunOnce(e.ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if n := overlaps.Load(); n != 0 {
		t.Fatalf("%d attempts overlapped another of the same event", n)
	}
	if got, n := s.distinct(), len(s.all()); len(got) != events || n != events {
		t.Fatalf("%d posts of %d events, want %d of %d", n, len(got), events, events)
	}
	if n := e.count(`SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'delivered' AND attempts = 1 AND lease_token = 1`); n != events {
		t.Fatalf("%d deliveries delivered by one claim and one attempt, want %d", n, events)
	}
}

// An endpoint whose answers take long holds its own workers only: another
// endpoint's deliveries all arrive while the slow one is still answering.
func TestSlowEndpointDoesNotDelayAnother(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	release := make(chan struct{})
	slow, fast := newSink(t), newSink(t)
	var slowInFlight, slowMax atomic.Int64
	slow.setAnswer(func(r *http.Request) int {
		n := slowInFlight.Add(1)
		defer slowInFlight.Add(-1)
		for m := slowMax.Load(); n > m && !slowMax.CompareAndSwap(m, n); m = slowMax.Load() {
		}
		select { // stands for a 10 s answer: it comes when the test says
		case <-release:
		case <-r.Context().Done():
		}
		return http.StatusOK
	})
	e.endpoint(slow.srv.URL)
	e.endpoint(fast.srv.URL)
	const events, concurrency = 12, 2
	e.events(events, payments.EventPaymentSucceeded)

	ctx, cancel := context.WithCancel(e.ctx)
	done := make(chan struct{})
	d := e.dispatcher(webhooks.Config{Concurrency: concurrency, Timeout: time.Minute, Interval: 50 * time.Millisecond})
	go func() { d.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	// The bound: the fast endpoint's deliveries do not wait for the slow
	// one's answers (which never come before they are all in).
	within(t, fast.got, events, 20*time.Second, "the fast endpoint's deliveries while the slow one hangs")
	within(t, slow.got, concurrency, 20*time.Second, "the slow endpoint's first attempts")
	if n := slowMax.Load(); n > concurrency {
		t.Fatalf("%d attempts in flight to the slow endpoint, bound %d", n, concurrency)
	}
	close(release)
	within(t, slow.got, events-concurrency, 20*time.Second, "the slow endpoint's remaining deliveries")
	if n := slowMax.Load(); n > concurrency {
		t.Fatalf("%d attempts in flight to the slow endpoint, bound %d", n, concurrency)
	}
}

// An attempt that takes longer than the timeout fails and is retried.
func TestTimeoutIsAFailedAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newSink(t)
	s.setAnswer(func(r *http.Request) int {
		<-r.Context().Done() // never answers in time
		return http.StatusOK
	})
	e.endpoint(s.srv.URL)
	e.events(1, payments.EventPaymentSucceeded)
	if err := e.dispatcher(webhooks.Config{Timeout: 100 * time.Millisecond}).RunOnce(e.ctx); err != nil {
		t.Fatal(err)
	}
	var r struct {
		Status string `db:"status"`
		Err    string `db:"last_error"`
	}
	if err := e.dbx.GetContext(e.ctx, &r, `SELECT status, last_error FROM webhook_deliveries`); err != nil {
		t.Fatal(err)
	}
	if r.Status != "pending" || r.Err != "no answer within 100ms" {
		t.Fatalf("after a timeout: %+v", r)
	}
}

// Retries stop at the delivery's maximum age; an endpoint failing
// continuously for the configured time is disabled and its pending
// deliveries fail with it.
func TestGiveUpAndDisable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newSink(t)
	s.setAnswer(func(*http.Request) int { return http.StatusInternalServerError })
	ep, _ := e.endpoint(s.srv.URL)
	obs := &counter{}
	cfg := webhooks.Config{BackoffBase: time.Hour, BackoffMax: time.Hour, MaxAge: 3 * time.Hour, DisableAfter: 4 * time.Hour, Observer: obs}
	d := e.dispatcher(cfg)
	e.events(1, payments.EventPaymentSucceeded)
	for range 3 { // at 0h, 1h, 2h: retried; at 3h its age is up
		if err := d.RunOnce(e.ctx); err != nil {
			t.Fatal(err)
		}
		mysqltest.Advance(t, e.dbx, time.Hour)
	}
	if err := d.RunOnce(e.ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.count(`SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'failed' AND attempts = 4`); n != 1 {
		t.Fatal("the delivery was not failed after its maximum age")
	}
	if got, err := e.eps.Get(e.ctx, e.merchant, ep.ID); err != nil || got.Status != webhooks.Enabled {
		t.Fatalf("disabled too early: %+v, %v", got, err)
	}
	// Failing for 4 hours: a new event's failed attempt disables it.
	e.events(2, payments.EventPaymentSucceeded)
	mysqltest.Advance(t, e.dbx, time.Hour)
	if err := e.dispatcher(webhooks.Config{Concurrency: 1, BackoffBase: time.Hour, BackoffMax: time.Hour,
		MaxAge: 3 * time.Hour, DisableAfter: 4 * time.Hour, Observer: obs}).RunOnce(e.ctx); err != nil {
		t.Fatal(err)
	}
	got, err := e.eps.Get(e.ctx, e.merchant, ep.ID)
	if err != nil || got.Status != webhooks.Disabled || got.DisabledReason == "" {
		t.Fatalf("not disabled after failing 4h: %+v, %v", got, err)
	}
	if n := e.count(`SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'pending'`); n != 0 {
		t.Fatalf("%d deliveries still pending to a disabled endpoint", n)
	}
	if obs.disabled.Load() != 1 {
		t.Fatalf("endpoint disabled %d times in the metrics", obs.disabled.Load())
	}
	// Enabled again and resent: the events arrive.
	s.setAnswer(func(*http.Request) int { return http.StatusNoContent })
	if _, err := e.eps.SetEnabled(e.ctx, e.merchant, ep.ID, true, ""); err != nil {
		t.Fatal(err)
	}
	n, err := e.eps.Resend(e.ctx, e.merchant, ep.ID, time.Now().Add(-48*time.Hour))
	if err != nil || n != 3 {
		t.Fatalf("resend: %d, %v", n, err)
	}
	if err := d.RunOnce(e.ctx); err != nil {
		t.Fatal(err)
	}
	if n := e.count(`SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'delivered'`); n != 3 {
		t.Fatalf("%d resent deliveries delivered, want 3", n)
	}
}

type counter struct {
	disabled atomic.Int64
	lags     atomic.Int64
	outcomes sync.Map
}

func (c *counter) DeliveryAttempted(o webhooks.Outcome, _ time.Duration) {
	v, _ := c.outcomes.LoadOrStore(o, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}
func (c *counter) DeliveryLag(time.Duration)        { c.lags.Add(1) }
func (c *counter) EndpointDisabled()                { c.disabled.Add(1) }
func (c *counter) DeliveryBacklog(webhooks.Backlog) {}

// During a rotation's grace both secrets sign; after it, the new one alone.
func TestRotationSignsWithBoth(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newSink(t)
	ep, oldSecret := e.endpoint(s.srv.URL)
	grace := time.Hour
	_, newSecret, err := e.eps.Rotate(e.ctx, e.merchant, ep.ID, &grace)
	if err != nil || newSecret == oldSecret {
		t.Fatalf("rotate: %v", err)
	}
	e.events(1, payments.EventPaymentSucceeded)
	d := e.dispatcher(webhooks.Config{})
	if err := d.RunOnce(e.ctx); err != nil {
		t.Fatal(err)
	}
	p := s.all()[0]
	for _, secret := range []string{oldSecret, newSecret} {
		if err := receiver.Verify(p.header, p.body, []string{secret}, 0, time.Now()); err != nil {
			t.Fatalf("during the grace, a receiver with one secret: %v", err)
		}
	}
	mysqltest.Advance(t, e.dbx, grace+time.Second)
	e.events(1, payments.EventPaymentSucceeded)
	if err := d.RunOnce(e.ctx); err != nil {
		t.Fatal(err)
	}
	p = s.all()[1]
	if err := receiver.Verify(p.header, p.body, []string{oldSecret}, 0, time.Now()); !errors.Is(err, receiver.ErrNoMatch) {
		t.Fatalf("after the grace the old secret still verifies: %v", err)
	}
	if err := receiver.Verify(p.header, p.body, []string{newSecret}, 0, time.Now()); err != nil {
		t.Fatal(err)
	}
}

// The stored secret is sealed: neither the secret nor any part of it is in
// the row, and a row's ciphertext does not open for another endpoint.
func TestSecretsSealed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newSink(t)
	a, secret := e.endpoint(s.srv.URL)
	b, _ := e.endpoint(s.srv.URL + "/b")
	n := e.count(`SELECT COUNT(*) FROM webhook_endpoints WHERE LOCATE(?, secret_enc) > 0 OR LOCATE(?, secret_enc) > 0`, secret, secret[len(webhooks.SecretPrefix):])
	if n != 0 {
		t.Fatal("the secret is stored in plain")
	}
	if _, err := e.cipher.Open(b.ID, a.SecretEnc); !errors.Is(err, webhooks.ErrUndecryptable) {
		t.Fatalf("a ciphertext opened for another endpoint: %v", err)
	}
	if got, err := e.cipher.Open(a.ID, a.SecretEnc); err != nil || got != secret {
		t.Fatalf("open: %v", err)
	}
}

// A delivery whose event is gone (webhooks resend racing the purge) fails
// for good with the reason, and the endpoint's other deliveries, older and
// newer, are delivered: one bad delivery never stops its endpoint's queue.
// Before deliveries were claimed one by one, every claim of the endpoint
// failed on the missing event and nothing was delivered again.
func TestADeliveryWhoseEventIsGoneDoesNotStopItsEndpoint(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newSink(t)
	_, secret := e.endpoint(s.srv.URL)
	s.setSecrets(secret)
	ids := e.events(3, payments.EventPaymentSucceeded)
	d := e.dispatcher(webhooks.Config{})
	if _, _, err := e.st.FanOut(e.ctx, 100); err != nil {
		t.Fatal(err)
	}
	if _, err := e.dbx.ExecContext(e.ctx, `DELETE FROM events WHERE id = ?`, ids[0]); err != nil {
		t.Fatal(err)
	}
	// Bounded: before, RunOnce claimed and failed for ever.
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	if err := d.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	later := e.events(1, payments.EventPaymentSucceeded)
	if err := d.RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	got := s.distinct()
	for _, id := range append(ids[1:], later...) {
		if got[id] != 1 {
			t.Fatalf("event %s delivered %d times, want once (got %v)", id, got[id], got)
		}
	}
	if got[ids[0]] != 0 {
		t.Fatalf("the purged event was delivered")
	}
	if n := e.count(`SELECT COUNT(*) FROM webhook_deliveries WHERE event_id = ? AND status = 'failed' AND last_error LIKE '%purged%'`, ids[0]); n != 1 {
		t.Fatalf("%d failed deliveries of the purged event saying why, want 1", n)
	}
	if n := e.count(`SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'pending'`); n != 0 {
		t.Fatalf("%d deliveries still pending", n)
	}
}

// A claimed delivery that waited in its runner's queue until its lease has
// less than an attempt's time left (the database held the records up) is
// not attempted: another claim may take it once the lease ends, and two
// attempts of one delivery never run at once. Before, it was POSTed however
// late.
func TestAQueuedDeliveryPastItsLeaseIsNotAttempted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	s := newSink(t)
	_, secret := e.endpoint(s.srv.URL)
	s.setSecrets(secret)
	ids := e.events(2, payments.EventPaymentSucceeded)
	var (
		mu  sync.Mutex
		now = time.Now()
	)
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return now
	}
	const lease, timeout = 10 * time.Second, 2 * time.Second
	s.setAnswer(func(*http.Request) int {
		mu.Lock()
		now = now.Add(lease - timeout + time.Second) // the first attempt's wait and POST ate the second's lease
		mu.Unlock()
		return http.StatusOK
	})
	d := e.dispatcher(webhooks.Config{Lease: lease, Timeout: timeout, Concurrency: 1, Now: clock})
	if err := d.RunOnce(e.ctx); err != nil {
		t.Fatal(err)
	}
	if got := s.all(); len(got) != 1 || got[0].eventID != ids[0] {
		t.Fatalf("POSTs %d, want only the first delivery's", len(got))
	}
	if n := e.count(`SELECT COUNT(*) FROM webhook_deliveries WHERE event_id = ? AND status = 'pending' AND attempts = 0 AND next_attempt_at > NOW(6)`, ids[1]); n != 1 {
		t.Fatalf("the late delivery is not left pending, unattempted, for its lease to end")
	}
}

// Deliveries that escaped the fail of a delete or a disabling (made by a
// fan-out that read the endpoint enabled beside it) are failed at their
// claim, with the reason: never POSTed to a disabled endpoint, never
// claimed again for ever for a deleted one, as they were before.
func TestDeliveriesOfAGoneEndpointFailAtTheirClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	off, deleted := newSink(t), newSink(t)
	offEp, _ := e.endpoint(off.srv.URL)
	delEp, _ := e.endpoint(deleted.srv.URL)
	e.events(2, payments.EventPaymentSucceeded)
	if _, _, err := e.st.FanOut(e.ctx, 100); err != nil {
		t.Fatal(err)
	}
	// What the fan-out's snapshot let through: the endpoints changed after
	// their deliveries were made, which the delete's and the disabling's
	// own fail of pending deliveries did not see.
	if _, err := e.dbx.ExecContext(e.ctx, `UPDATE webhook_endpoints SET status = 'disabled' WHERE id = ?`, offEp.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.dbx.ExecContext(e.ctx, `DELETE FROM webhook_endpoints WHERE id = ?`, delEp.ID); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	if err := e.dispatcher(webhooks.Config{}).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(off.all()) + len(deleted.all()); n != 0 {
		t.Fatalf("%d POSTs to a disabled or deleted endpoint", n)
	}
	for ep, reason := range map[string]string{offEp.ID: "endpoint disabled", delEp.ID: "endpoint deleted"} {
		if n := e.count(`SELECT COUNT(*) FROM webhook_deliveries WHERE endpoint_id = ? AND status = 'failed' AND last_error = ?`, ep, reason); n != 2 {
			t.Fatalf("%d deliveries of %s failed with %q, want 2", n, ep, reason)
		}
	}
}
