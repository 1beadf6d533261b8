package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gateway "gateway/clients/go"
	"gateway/mysql/mysqltest"
	"gateway/psp/fake"
	"gateway/tests/gatewaytest"
)

// The client against a real gateway: the API over a fresh MariaDB
// database and the in-process fake PSP, behind a proxy that drops
// connections, answers 429 and 5xx itself and holds answers. Every
// subtest is a merchant of its own on that one gateway, so its counts are
// its own; what it asserts is what the fake PSP's ledger and the database
// hold, not only what the client was answered.
func TestAgainstGateway(t *testing.T) {
	g := gatewaytest.Start(t, gatewaytest.Options{})
	t.Run("each intent charges once whatever the faults", func(t *testing.T) { testChargesOnce(t, g) })
	t.Run("an answer slower than the client's timeout", func(t *testing.T) { testSlowAnswer(t, g) })
	t.Run("concurrent intents under faults", func(t *testing.T) { testConcurrentIntents(t, g) })
	t.Run("a refusal is never retried", func(t *testing.T) { testRefusals(t, g) })
	t.Run("a decline is an answer, replayed for its key", func(t *testing.T) { testDecline(t, g) })
	t.Run("409 request-in-flight is retried with the same key", func(t *testing.T) { testInFlight(t, g) })
	t.Run("listings walk every page", func(t *testing.T) { testListings(t, g) })
	t.Run("two-step, capture, cancel and cancel by key", func(t *testing.T) { testFlows(t, g) })
	t.Run("answers in the client's version, whatever the merchant's", func(t *testing.T) { testVersion(t, g) })
	t.Run("webhook endpoints", func(t *testing.T) { testEndpoints(t, g) })
	t.Run("webhook deliveries are applied once", func(t *testing.T) { testDeliveries(t, g) })
}

// shop is one merchant of the gateway and its client.
type shop struct {
	g      *gatewaytest.Gateway
	id     string
	key    string // its secret API key
	client *gateway.Client
	waits  *waits
}

// timeout bounds an attempt: long enough never to cut a normal answer.
const timeout = 10 * time.Second

func newShop(t *testing.T, g *gatewaytest.Gateway, opts ...gateway.Option) *shop {
	t.Helper()
	id, key := g.NewMerchant(t, "shop")
	w := &waits{}
	base := []gateway.Option{gateway.WithBaseURL(g.URL), gateway.WithSleep(w.sleep), gateway.WithMaxRetries(6),
		gateway.WithHTTPClient(&http.Client{Timeout: timeout})}
	c, err := gateway.New(key, append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return &shop{g: g, id: id, key: key, client: c, waits: w}
}

// waits records the client's waits before its retries, without waiting;
// then runs each time it is asked to wait.
type waits struct {
	mu   sync.Mutex
	d    []time.Duration
	then func()
}

func (w *waits) sleep(ctx context.Context, d time.Duration) error {
	w.mu.Lock()
	w.d = append(w.d, d)
	then := w.then
	w.mu.Unlock()
	if then != nil {
		then()
	}
	return ctx.Err()
}

func (w *waits) take() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	d := w.d
	w.d = nil
	return d
}

func (s *shop) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	return mysqltest.Count(t, s.g.DB, query, args...)
}

// charge creates a payment of 1000 KRW with pm_card_ok.
func (s *shop) charge(ctx context.Context, opts ...gateway.CallOption) (*gateway.Payment, error) {
	return s.client.Payments.Create(ctx, &gateway.CreatePaymentRequest{Amount: 1000, Currency: "KRW", PaymentMethod: fake.MethodOK,
		Metadata: map[string]string{"order": "A-1"}}, opts...)
}

// lastKey is the Idempotency-Key of the proxy's last POST /payments.
func lastKey(t *testing.T, g *gatewaytest.Gateway) string {
	t.Helper()
	seen := g.Proxy.Seen("/payments")
	for i := len(seen) - 1; i >= 0; i-- {
		if seen[i].Method == http.MethodPost && seen[i].Key != "" {
			return seen[i].Key
		}
	}
	t.Fatal("the proxy saw no POST with a key")
	return ""
}

// assertOneCharge: the payment exists once in the database, under one
// key, and the fake PSP holds exactly one charge for its order.
func (s *shop) assertOneCharge(t *testing.T, p *gateway.Payment, key string) {
	t.Helper()
	if n := s.count(t, `SELECT COUNT(*) FROM payments WHERE merchant_id = ? AND idem_key = ?`, s.id, key); n != 1 {
		t.Errorf("%d payments under the call's key, want 1", n)
	}
	if n := s.count(t, `SELECT COUNT(*) FROM idempotency_keys WHERE merchant_id = ? AND idem_key = ?`, s.id, key); n != 1 {
		t.Errorf("%d idempotency keys, want 1", n)
	}
	if n := s.g.PSP.ChargesFor(s.g.OrderID(t, p.ID)); n != 1 {
		t.Errorf("the PSP holds %d charges for payment %s, want exactly 1", n, p.ID)
	}
}

func testChargesOnce(t *testing.T, g *gatewaytest.Gateway) {
	s := newShop(t, g)
	queue := func(faults ...gatewaytest.Fault) func() { return func() { g.Proxy.Queue("/payments", faults...) } }
	for _, c := range []struct {
		name     string
		arrange  func()
		requests int           // the proxy sees, all with the call's one key and body
		wait     time.Duration // the first retry waits at least
	}{
		{"no fault", nil, 1, 0},
		{"the connection dropped before the gateway saw the request", queue(gatewaytest.Fault{Kind: "drop_before"}), 2, 0},
		{"the connection dropped after the gateway charged and answered", queue(gatewaytest.Fault{Kind: "drop_after"}), 2, 0},
		{"two answers lost in a row", queue(gatewaytest.Fault{Kind: "drop_after"}, gatewaytest.Fault{Kind: "drop_after"}), 3, 0},
		{"a 502 from the proxy", queue(gatewaytest.Fault{Kind: "status", Status: 502}), 2, 0},
		{"a 503 with Retry-After from the proxy", queue(gatewaytest.Fault{Kind: "status", Status: 503, RetryAfter: 1}), 2, time.Second},
		{"a 429 with Retry-After", queue(gatewaytest.Fault{Kind: "status", Status: 429, RetryAfter: 2}), 2, 2 * time.Second},
		{"the PSP charged and its answer was lost (502 psp-outcome-unknown)",
			func() { g.PSP.FailNextCharges(fake.FaultUnknownAfterCharge, 1) }, 2, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			s.waits.take()
			payments0, charged0 := s.count(t, `SELECT COUNT(*) FROM payments WHERE merchant_id = ?`, s.id), g.PSP.SucceededCount()
			if c.arrange != nil {
				c.arrange()
			}
			p, err := s.charge(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			// The intent, whatever its keys: one payment more, one charge more.
			if n := s.count(t, `SELECT COUNT(*) FROM payments WHERE merchant_id = ?`, s.id) - payments0; n != 1 {
				t.Errorf("%d payments stored for one intent", n)
			}
			if n := g.PSP.SucceededCount() - charged0; n != 1 {
				t.Errorf("the PSP charged %d times for one intent", n)
			}
			if p.Status != gateway.PaymentSucceeded || p.Amount != 1000 || p.Currency != "KRW" || p.Metadata["order"] != "A-1" {
				t.Fatalf("payment %+v", p)
			}
			key := lastKey(t, g)
			seen := g.Proxy.SeenKey(key)
			if len(seen) != c.requests {
				t.Fatalf("the proxy saw %d requests with the key, want %d: %+v", len(seen), c.requests, seen)
			}
			for _, r := range seen {
				if r.Body != seen[0].Body || r.Path != "/payments" {
					t.Fatalf("a retry sent %s %s, the first %s", r.Path, r.Body, seen[0].Body)
				}
			}
			// net/http itself sends a request again at once when a
			// kept-alive connection fails under it (it has a key): fewer
			// waits than retries, never more.
			if w := s.waits.take(); len(w) > c.requests-1 || c.wait > 0 && (len(w) == 0 || w[0] < c.wait) {
				t.Fatalf("waits %v, want at most %d, the first at least %v", w, c.requests-1, c.wait)
			}
			s.assertOneCharge(t, p, key)
		})
	}
}

// The proxy holds the gateway's answer past the client's timeout: the
// client gives up on the attempt and retries with the key, which replays.
func testSlowAnswer(t *testing.T, g *gatewaytest.Gateway) {
	s := newShop(t, g, gateway.WithHTTPClient(&http.Client{Timeout: 500 * time.Millisecond}))
	g.Proxy.Queue("/payments", gatewaytest.Fault{Kind: "slow", DelayMS: 60_000})
	p, err := s.charge(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	key := lastKey(t, g)
	seen := g.Proxy.WaitKey(key, 2, timeout)
	if len(seen) != 2 || !slices.ContainsFunc(seen, func(r gatewaytest.Seen) bool { return r.Fault == "slow_dropped" }) {
		t.Fatalf("the proxy saw %+v, want the held attempt and its retry", seen)
	}
	s.assertOneCharge(t, p, key)
}

// Many intents at once, through one client, while the proxy fails a
// request in two: each is charged exactly once.
func testConcurrentIntents(t *testing.T, g *gatewaytest.Gateway) {
	const intents = 12
	s := newShop(t, g, gateway.WithMaxRetries(12))
	faults := []gatewaytest.Fault{
		{Kind: "drop_after"}, {Kind: "drop_after"}, {Kind: "drop_after"}, {Kind: "drop_after"},
		{Kind: "status", Status: 503}, {Kind: "status", Status: 502}, {Kind: "status", Status: 500},
		{Kind: "drop_before"}, {Kind: "drop_before"},
		{Kind: "status", Status: 429, RetryAfter: 1}, {Kind: "status", Status: 429, RetryAfter: 1},
	}
	g.Proxy.Queue("/payments", faults...)
	before := len(g.Proxy.Seen(""))
	start := make(chan struct{})
	var wg sync.WaitGroup
	payments := make([]*gateway.Payment, intents)
	errs := make([]error, intents)
	for i := range intents {
		wg.Go(func() {
			<-start
			payments[i], errs[i] = s.charge(context.Background())
		})
	}
	close(start)
	wg.Wait()
	ids := map[string]bool{}
	for i, p := range payments {
		if errs[i] != nil {
			t.Fatalf("intent %d: %v", i, errs[i])
		}
		if p.Status != gateway.PaymentSucceeded || ids[p.ID] {
			t.Fatalf("intent %d: %s %s", i, p.ID, p.Status)
		}
		ids[p.ID] = true
		if n := g.PSP.ChargesFor(g.OrderID(t, p.ID)); n != 1 {
			t.Errorf("payment %s: %d charges at the PSP, want 1", p.ID, n)
		}
	}
	if n := s.count(t, `SELECT COUNT(*) FROM payments WHERE merchant_id = ?`, s.id); n != intents {
		t.Errorf("%d payments stored, want %d", n, intents)
	}
	// Every fault was a request that was sent again, with its key.
	seen := g.Proxy.Seen("")[before:]
	keys := map[string]int{}
	for _, r := range seen {
		keys[r.Key]++
	}
	if len(seen) != intents+len(faults) || len(keys) != intents {
		t.Errorf("the proxy saw %d requests with %d keys, want %d with %d", len(seen), len(keys), intents+len(faults), intents)
	}
}

var requestID = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// Refusals the gateway would repeat are returned at once, typed: the proxy
// sees one request for each.
func testRefusals(t *testing.T, g *gatewaytest.Gateway) {
	s := newShop(t, g)
	ctx := context.Background()
	// What the cases refuse: a payment made once, a key canceled before
	// anything was made under it, a two-step payment confirmed once.
	paid, err := s.charge(ctx, gateway.WithIdempotencyKey("refusals-paid"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.Payments.CancelByKey(ctx, &gateway.CancelByKeyRequest{IdempotencyKey: "refusals-canceled"}); err != nil {
		t.Fatal(err)
	}
	twoStep, err := s.client.Payments.Create(ctx, &gateway.CreatePaymentRequest{Amount: 5000, Currency: "KRW", Confirm: new(false)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.client.Payments.Confirm(ctx, twoStep.ID, &gateway.ConfirmPaymentRequest{PaymentMethod: fake.MethodOK}); err != nil {
		t.Fatal(err)
	}
	stranger, err := gateway.New("sk_notakeyofanymerchant0000000000", gateway.WithBaseURL(g.URL), gateway.WithSleep(s.waits.sleep))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		call   func() error
		status int
		code   gateway.Code
		field  string // a field the problem names
		names  string // the payment the problem names
	}{
		{"an invalid currency", func() error {
			_, err := s.client.Payments.Create(ctx, &gateway.CreatePaymentRequest{Amount: 1000, Currency: "XYZ", PaymentMethod: fake.MethodOK})
			return err
		}, 400, gateway.CodeInvalidRequest, "currency", ""},
		{"the key with another amount", func() error {
			_, err := s.client.Payments.Create(ctx, &gateway.CreatePaymentRequest{Amount: 2000, Currency: "KRW", PaymentMethod: fake.MethodOK},
				gateway.WithIdempotencyKey("refusals-paid"))
			return err
		}, 422, gateway.CodeIdempotencyKeyMismatch, "", ""},
		{"a key canceled by key", func() error { _, err := s.charge(ctx, gateway.WithIdempotencyKey("refusals-canceled")); return err },
			409, gateway.CodeCanceledByKey, "", ""},
		{"a second confirm with another key", func() error {
			_, err := s.client.Payments.Confirm(ctx, twoStep.ID, &gateway.ConfirmPaymentRequest{PaymentMethod: fake.MethodOK})
			return err
		}, 409, gateway.CodePaymentNotConfirmable, "", twoStep.ID},
		{"a refund of more than was paid", func() error {
			_, err := s.client.Refunds.Create(ctx, paid.ID, &gateway.CreateRefundRequest{Amount: 5000})
			return err
		}, 422, gateway.CodeRefundExceedsRefundable, "amount", paid.ID},
		{"an unknown payment", func() error { _, err := s.client.Payments.Get(ctx, "pay_01M8SVRZDH8JWSTQVXXY9DNHZC"); return err },
			404, gateway.CodeNotFound, "", ""},
		{"another merchant's payment", func() error {
			other := newShop(t, g)
			_, err := other.client.Payments.Get(ctx, paid.ID)
			return err
		}, 404, gateway.CodeNotFound, "", ""},
		{"an unknown API key", func() error { _, err := stranger.Payments.Get(ctx, paid.ID); return err }, 401, gateway.CodeUnauthorized, "", ""},
		{"an unknown listing status", func() error {
			for _, err := range s.client.Payments.List(ctx, &gateway.PaymentListParams{Status: "paid"}) {
				return err
			}
			return nil
		}, 400, gateway.CodeInvalidRequest, "status", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			s.waits.take()
			before := len(g.Proxy.Seen(""))
			err := c.call()
			var e *gateway.Error
			if !errors.As(err, &e) {
				t.Fatalf("%v, want an *Error", err)
			}
			if e.Status != c.status || e.Code != c.code || e.Type != "/problems/"+string(c.code) || e.Attempts != 1 {
				t.Fatalf("%d %s %q after %d attempts, want %d %s once", e.Status, e.Code, e.Type, e.Attempts, c.status, c.code)
			}
			if !requestID.MatchString(e.RequestID) || e.Title == "" {
				t.Errorf("request id %q, title %q", e.RequestID, e.Title)
			}
			if c.field != "" && !slices.ContainsFunc(e.Fields, func(f gateway.FieldError) bool { return f.Field == c.field }) {
				t.Errorf("fields %+v lack %s", e.Fields, c.field)
			}
			if e.PaymentID != c.names {
				t.Errorf("payment id %q, want %q", e.PaymentID, c.names)
			}
			if seen := g.Proxy.Seen("")[before:]; len(seen) != 1 {
				t.Errorf("the proxy saw %d requests, want 1", len(seen))
			}
			if w := s.waits.take(); len(w) != 0 {
				t.Errorf("the client waited %v", w)
			}
			if gateway.IsRetryable(err) || !strings.Contains(err.Error(), e.RequestID) {
				t.Errorf("IsRetryable, or Error() = %q without the request id", err)
			}
		})
	}
	if n := g.PSP.ChargesFor(g.OrderID(t, paid.ID)); n != 1 {
		t.Errorf("the refused requests changed the PSP's charges of the paid payment: %d", n)
	}
	if n := s.count(t, `SELECT COUNT(*) FROM payments WHERE merchant_id = ? AND idem_key = 'refusals-canceled'`, s.id); n != 0 {
		t.Errorf("the canceled key made %d payments", n)
	}
}

func testDecline(t *testing.T, g *gatewaytest.Gateway) {
	s := newShop(t, g)
	ctx := context.Background()
	decline := func() (*gateway.Payment, error) {
		return s.client.Payments.Create(ctx, &gateway.CreatePaymentRequest{Amount: 1000, Currency: "KRW", PaymentMethod: fake.MethodDeclined},
			gateway.WithIdempotencyKey("declined-1"))
	}
	p, err := decline()
	if err != nil {
		t.Fatal(err)
	}
	if p.Status != gateway.PaymentDeclined || p.DeclineCode != fake.DeclineCardDeclined {
		t.Fatalf("payment %s %s %q", p.ID, p.Status, p.DeclineCode)
	}
	again, err := decline()
	if err != nil || again.ID != p.ID || again.Status != gateway.PaymentDeclined {
		t.Fatalf("the key's replay: %+v, %v", again, err)
	}
	if seen := g.Proxy.SeenKey("declined-1"); len(seen) != 2 || seen[0].Status != 402 || seen[1].Status != 402 {
		t.Fatalf("the proxy saw %+v: want one 402 per call, none retried", seen)
	}
	s.assertOneCharge(t, p, "declined-1")
}

// A duplicate of a request held at the PSP is answered 409
// request-in-flight; the client waits (at least Retry-After) and retries
// with the same key, and gets the one payment.
func testInFlight(t *testing.T, g *gatewaytest.Gateway) {
	s := newShop(t, g)
	ctx := context.Background()
	g.Hold.Set()
	first := make(chan error, 1)
	var p1 *gateway.Payment
	go func() {
		var err error
		p1, err = s.charge(ctx, gateway.WithIdempotencyKey("in-flight-1"))
		first <- err
	}()
	select {
	case <-g.Hold.Arrived():
	case err := <-first:
		t.Fatalf("the first request ended while its charge was to be held: %v", err)
	}
	// The duplicate's client lets the held charge go when it is told to
	// wait: its retry then finds it done (or in flight a little longer).
	dupWaits := &waits{then: g.Hold.Release}
	dup, err := gateway.New(s.key, gateway.WithBaseURL(g.URL), gateway.WithSleep(dupWaits.sleep))
	if err != nil {
		t.Fatal(err)
	}
	p2, err := dup.Payments.Create(ctx, &gateway.CreatePaymentRequest{Amount: 1000, Currency: "KRW", PaymentMethod: fake.MethodOK,
		Metadata: map[string]string{"order": "A-1"}}, gateway.WithIdempotencyKey("in-flight-1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if p1.ID != p2.ID || p2.Status != gateway.PaymentSucceeded {
		t.Fatalf("the duplicate got %s %s, the first %s", p2.ID, p2.Status, p1.ID)
	}
	waits := dupWaits.take()
	if len(waits) == 0 || waits[0] < time.Second {
		t.Fatalf("the duplicate waited %v: want at least the 409's Retry-After (1 s)", waits)
	}
	inFlight := 0
	for _, r := range g.Proxy.SeenKey("in-flight-1") {
		if r.Status == http.StatusConflict {
			inFlight++
		}
	}
	if inFlight == 0 {
		t.Fatal("the proxy saw no 409")
	}
	s.assertOneCharge(t, p1, "in-flight-1")
}

func testListings(t *testing.T, g *gatewaytest.Gateway) {
	const n = 23
	s := newShop(t, g)
	ctx := context.Background()
	for i := range n {
		if _, err := s.charge(ctx, gateway.WithIdempotencyKey(fmt.Sprintf("list-%02d", i))); err != nil {
			t.Fatal(err)
		}
	}
	var want []string
	if err := g.DB.SelectContext(ctx, &want, `SELECT id FROM payments WHERE merchant_id = ? ORDER BY created_at DESC, id DESC`, s.id); err != nil {
		t.Fatal(err)
	}
	// A page fails once on the way: the walk retries it and goes on.
	before := len(g.Proxy.Seen(""))
	g.Proxy.Queue("/payments", gatewaytest.Fault{Kind: "status", Status: 503})
	var got []string
	for p, err := range s.client.Payments.List(ctx, &gateway.PaymentListParams{Limit: 5}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p.ID)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("walked %d payments %v\nwant %d %v", len(got), got, len(want), want)
	}
	if pages := len(g.Proxy.Seen("")[before:]); pages != 5+1 {
		t.Errorf("%d requests for 5 pages and a retry", pages)
	}
	// Toward newer ones from the oldest: the same payments the other way.
	got = got[:0]
	for p, err := range s.client.Payments.List(ctx, &gateway.PaymentListParams{Limit: 7, EndingBefore: want[n-1]}) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p.ID)
	}
	older := slices.Clone(want[:n-1])
	slices.Reverse(older)
	if !slices.Equal(got, older) {
		t.Fatalf("walked back %v, want %v", got, older)
	}

	// Every event of the merchant, oldest first: each payment's in seq order.
	var events []gateway.Event
	for e, err := range s.client.Events.List(ctx, &gateway.EventListParams{Limit: 10}) {
		if err != nil {
			t.Fatal(err)
		}
		events = append(events, e)
	}
	if stored := s.count(t, `SELECT COUNT(*) FROM events WHERE merchant_id = ?`, s.id); len(events) != stored || stored < 2*n {
		t.Fatalf("walked %d events, the database holds %d", len(events), stored)
	}
	last := map[string]int64{}
	for _, e := range events {
		if e.Seq <= last[e.ObjectID] {
			t.Fatalf("event %s of %s has seq %d after %d", e.ID, e.ObjectID, e.Seq, last[e.ObjectID])
		}
		last[e.ObjectID] = e.Seq
	}
	one, err := s.client.Events.Get(ctx, events[0].ID)
	if err != nil || one.ID != events[0].ID || one.Type != events[0].Type {
		t.Fatalf("Events.Get: %+v, %v", one, err)
	}
	paid, err := one.Payment()
	if err != nil || paid.ID != one.ObjectID {
		t.Fatalf("the event's payment: %+v, %v", paid, err)
	}
	var succeeded int
	for range s.client.Events.List(ctx, &gateway.EventListParams{Type: gateway.EventPaymentSucceeded, Limit: 100}) {
		succeeded++
	}
	if succeeded != n {
		t.Errorf("%d payment.succeeded events, want %d", succeeded, n)
	}

	// Refunds: the merchant's, and one payment's.
	for _, id := range want[:3] {
		if _, err := s.client.Refunds.Create(ctx, id, nil); err != nil {
			t.Fatal(err)
		}
	}
	var refunds []gateway.Refund
	for r, err := range s.client.Refunds.List(ctx, &gateway.RefundListParams{Limit: 2}) {
		if err != nil {
			t.Fatal(err)
		}
		refunds = append(refunds, r)
	}
	if len(refunds) != 3 || refunds[0].Status != gateway.RefundSucceeded || refunds[0].Amount != 1000 {
		t.Fatalf("refunds %+v", refunds)
	}
	var ofOne []gateway.Refund
	for r, err := range s.client.Refunds.ListForPayment(ctx, want[1], nil) {
		if err != nil {
			t.Fatal(err)
		}
		ofOne = append(ofOne, r)
	}
	if len(ofOne) != 1 || ofOne[0].PaymentID != want[1] {
		t.Fatalf("the payment's refunds %+v", ofOne)
	}
	if r, err := s.client.Refunds.Get(ctx, ofOne[0].ID); err != nil || r.RefundOrderID != ofOne[0].RefundOrderID {
		t.Fatalf("Refunds.Get: %+v, %v", r, err)
	}
}

func testFlows(t *testing.T, g *gatewaytest.Gateway) {
	s := newShop(t, g)
	ctx := context.Background()
	t.Run("two-step", func(t *testing.T) {
		p, err := s.client.Payments.Create(ctx, &gateway.CreatePaymentRequest{Amount: 15000, Currency: "krw", Confirm: new(false),
			Description: "Order 1001"}, gateway.WithIdempotencyKey("order-1001"))
		if err != nil {
			t.Fatal(err)
		}
		if p.Status != gateway.PaymentRequiresConfirmation || p.ClientSecret == "" || p.Checkout == nil || p.ExpiresAt.IsZero() ||
			p.Checkout.Amount != 15000 || p.Checkout.OrderID != p.MerchantOrderID || p.Currency != "KRW" {
			t.Fatalf("created %+v (checkout %+v)", p, p.Checkout)
		}
		done, err := s.client.Payments.Confirm(ctx, p.ID, &gateway.ConfirmPaymentRequest{PaymentMethod: fake.MethodOK, Amount: 15000})
		if err != nil || done.Status != gateway.PaymentSucceeded || done.PSPReference == "" {
			t.Fatalf("confirmed %+v, %v", done, err)
		}
		byKey, err := s.client.Payments.GetByKey(ctx, "order-1001")
		if err != nil || byKey.ID != p.ID || byKey.Status != gateway.PaymentSucceeded || byKey.ClientSecret != "" {
			t.Fatalf("by key %+v, %v", byKey, err)
		}
	})
	t.Run("manual capture of part", func(t *testing.T) {
		p, err := s.client.Payments.Create(ctx, &gateway.CreatePaymentRequest{Amount: 15000, Currency: "KRW", PaymentMethod: fake.MethodOK,
			CaptureMethod: gateway.CaptureManual})
		if err != nil {
			t.Fatal(err)
		}
		if p.Status != gateway.PaymentRequiresCapture || p.AmountCapturable != 15000 || p.CaptureBefore.IsZero() || p.CaptureMethod != gateway.CaptureManual {
			t.Fatalf("authorized %+v", p)
		}
		g.Proxy.Queue("/capture", gatewaytest.Fault{Kind: "drop_after"})
		c, err := s.client.Payments.Capture(ctx, p.ID, &gateway.CapturePaymentRequest{AmountToCapture: 12000})
		if err != nil || c.Status != gateway.PaymentSucceeded || c.AmountCaptured != 12000 || c.AmountCapturable != 0 {
			t.Fatalf("captured %+v, %v", c, err)
		}
		if n := g.PSP.CapturesOf(p.MerchantOrderID); n != 1 {
			t.Fatalf("%d captures at the PSP, want 1", n)
		}
	})
	t.Run("cancel an authorization", func(t *testing.T) {
		p, err := s.client.Payments.Create(ctx, &gateway.CreatePaymentRequest{Amount: 8000, Currency: "KRW", PaymentMethod: fake.MethodOK,
			CaptureMethod: gateway.CaptureManual})
		if err != nil {
			t.Fatal(err)
		}
		c, err := s.client.Payments.Cancel(ctx, p.ID, &gateway.CancelPaymentRequest{CancellationReason: gateway.ReasonRequestedByCustomer})
		if err != nil || c.Status != gateway.PaymentCanceled || c.CancellationReason != gateway.ReasonRequestedByCustomer {
			t.Fatalf("canceled %+v, %v", c, err)
		}
		_, err = s.client.Payments.Capture(ctx, p.ID, nil)
		if gateway.CodeOf(err) != gateway.CodePaymentNotCapturable {
			t.Fatalf("a capture after the cancellation: %v", err)
		}
	})
	t.Run("cancel by key", func(t *testing.T) {
		p, err := s.charge(ctx, gateway.WithIdempotencyKey("order-3002"))
		if err != nil {
			t.Fatal(err)
		}
		g.Proxy.Queue("/cancel_by_key", gatewaytest.Fault{Kind: "drop_after"})
		c, err := s.client.Payments.CancelByKey(ctx, &gateway.CancelByKeyRequest{IdempotencyKey: "order-3002"})
		if err != nil {
			t.Fatal(err)
		}
		if c.Status != gateway.CancellationRefunded || c.RefundID == "" || c.Payment == nil || c.Payment.ID != p.ID || !c.Payment.Refunded {
			t.Fatalf("cancellation %+v", c)
		}
		if n := len(g.PSP.Refunds()); n == 0 {
			t.Fatal("no refund at the PSP")
		}
		nothing, err := s.client.Payments.CancelByKey(ctx, &gateway.CancelByKeyRequest{IdempotencyKey: "order-3003",
			CancellationReason: gateway.ReasonAbandoned})
		if err != nil || nothing.Status != gateway.CancellationCanceled || nothing.Payment != nil {
			t.Fatalf("cancellation of an unused key %+v, %v", nothing, err)
		}
	})
}

// A merchant pinned to the first version still gets every answer in the
// version the client's types describe, and so does its webhook endpoint.
func testVersion(t *testing.T, g *gatewaytest.Gateway) {
	id, key := g.NewMerchant(t, "shop on the first version")
	g.PinVersion(t, id, "2026-12-01")
	client, err := gateway.New(key, gateway.WithBaseURL(g.URL))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p, err := client.Payments.Create(ctx, &gateway.CreatePaymentRequest{Amount: 1000, Currency: "KRW", PaymentMethod: fake.MethodOK})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Refunds.Create(ctx, p.ID, nil); err != nil {
		t.Fatal(err)
	}
	ep, err := client.WebhookEndpoints.Create(ctx, &gateway.CreateWebhookEndpointRequest{URL: "http://127.0.0.1:9/hooks", EventTypes: []string{"*"}})
	if err != nil {
		t.Fatal(err)
	}
	// Gone before the dispatcher of a later subtest runs: nothing listens there.
	defer func() {
		if _, err := client.WebhookEndpoints.Delete(ctx, ep.ID); err != nil {
			t.Error(err)
		}
	}()
	if ep.APIVersion != gateway.APIVersion {
		t.Errorf("the endpoint is pinned to %s, want the client's %s", ep.APIVersion, gateway.APIVersion)
	}
	for _, r := range g.Proxy.Seen("/payments/" + p.ID) {
		if r.Version != gateway.APIVersion {
			t.Errorf("%s %s answered in %q, want %s", r.Method, r.Path, r.Version, gateway.APIVersion)
		}
	}
	// Without the client, the merchant's own version answers.
	req, err := http.NewRequest(http.MethodGet, g.Upstream+"/payments/"+p.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if v := res.Header.Get("Gateway-Version"); v != "2026-12-01" {
		t.Errorf("a request naming no version answered in %q, want the merchant's 2026-12-01", v)
	}
}

func testEndpoints(t *testing.T, g *gatewaytest.Gateway) {
	s := newShop(t, g)
	ctx := context.Background()
	ep, err := s.client.WebhookEndpoints.Create(ctx, &gateway.CreateWebhookEndpointRequest{URL: "http://127.0.0.1:9/hooks",
		EventTypes: []string{"payment.succeeded", "refund.failed"}, Description: "orders"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ep.Secret, "whsec_") || ep.Status != gateway.WebhookEndpointEnabled || ep.Object != "webhook_endpoint" || len(ep.EventTypes) != 2 {
		t.Fatalf("created %+v", ep)
	}
	if seen := g.Proxy.Seen("/webhook_endpoints"); len(seen) == 0 || seen[len(seen)-1].Key == "" {
		t.Fatal("the creation carried no Idempotency-Key")
	}
	read, err := s.client.WebhookEndpoints.Get(ctx, ep.ID)
	if err != nil || read.Secret != "" || read.URL != ep.URL {
		t.Fatalf("read %+v, %v", read, err)
	}
	all, err := s.client.WebhookEndpoints.List(ctx)
	if err != nil || len(all) != 1 || all[0].ID != ep.ID {
		t.Fatalf("listed %+v, %v", all, err)
	}
	rotated, err := s.client.WebhookEndpoints.Rotate(ctx, ep.ID, &gateway.RotateWebhookSecretRequest{GracePeriodSeconds: new(int64(60))})
	if err != nil || rotated.Secret == ep.Secret || !strings.HasPrefix(rotated.Secret, "whsec_") || rotated.PreviousSecretExpiresAt.IsZero() {
		t.Fatalf("rotated %+v, %v", rotated, err)
	}
	// A rotation whose answer is lost is not sent again: a second would end
	// the first's grace, whose secret nobody saw.
	g.Proxy.Queue("/rotate", gatewaytest.Fault{Kind: "drop_after"})
	before := len(g.Proxy.Seen("/webhook_endpoints"))
	if _, err := s.client.WebhookEndpoints.Rotate(ctx, ep.ID, nil); err == nil || !gateway.IsRetryable(err) {
		t.Fatalf("a rotation whose answer was lost: %v", err)
	}
	if n := len(g.Proxy.Seen("/webhook_endpoints")) - before; n != 1 {
		t.Fatalf("the lost rotation was sent %d times", n)
	}
	gone, err := s.client.WebhookEndpoints.Delete(ctx, ep.ID)
	if err != nil || !gone.Deleted || gone.ID != ep.ID {
		t.Fatalf("deleted %+v, %v", gone, err)
	}
	if _, err := s.client.WebhookEndpoints.Get(ctx, ep.ID); gateway.CodeOf(err) != gateway.CodeNotFound {
		t.Fatalf("a deleted endpoint: %v", err)
	}
	_, err = s.client.WebhookEndpoints.Create(ctx, &gateway.CreateWebhookEndpointRequest{URL: "http://169.254.169.254/", EventTypes: []string{"*"}})
	if gateway.CodeOf(err) != gateway.CodeInvalidRequest {
		t.Fatalf("an endpoint at the metadata address: %v", err)
	}
}
