package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"

	"gateway/merchants"
	"gateway/mysql"
	"gateway/payments"
	"gateway/webhooks"
)

// The webhooks scenario: what the outbox and a registered endpoint cost
// fresh payments, and how close the dispatcher comes to the throughput its
// concurrency allows.
//
//	6a  fresh payments, 64 clients, the merchant with an endpoint and the
//	    dispatcher delivering to it, vs the same without an endpoint: >= 0.90
//	6b  the dispatcher alone, against receivers answering in 20 ms: its
//	    deliveries per second vs endpoints x concurrency / 20 ms: >= 0.80
const (
	hookEndpoints   = 4
	hookConcurrency = webhooks.DefaultConcurrency
	hookLatency     = 20 * time.Millisecond
)

// hookSink is a receiver answering every delivery 204 after delay.
type hookSink struct {
	url   string
	srv   *http.Server
	delay time.Duration
	n     atomic.Int64
}

func startHookSink(delay time.Duration) (*hookSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &hookSink{url: "http://" + ln.Addr().String(), delay: delay}
	s.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.delay > 0 {
			time.Sleep(s.delay) // the receiver's own work
		}
		s.n.Add(1)
		w.WriteHeader(http.StatusNoContent)
	})}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *hookSink) close() { _ = s.srv.Close() }

// hookParts are the cipher and guard of the bench's endpoints (loopback allowed).
func hookParts() (*webhooks.Cipher, *webhooks.Guard, error) {
	key, err := webhooks.NewKey()
	if err != nil {
		return nil, nil, err
	}
	raw, err := webhooks.ParseKey(key)
	if err != nil {
		return nil, nil, err
	}
	c, err := webhooks.NewCipher(raw)
	return c, webhooks.NewGuard(webhooks.Loopback, nil), err
}

// startDispatcher runs a dispatcher over st until the returned stop.
func startDispatcher(st *mysql.Store, c *webhooks.Cipher, g *webhooks.Guard, interval time.Duration) (stop func()) {
	d := webhooks.NewDispatcher(st, c, g, webhooks.Config{Concurrency: hookConcurrency, Interval: interval})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	return func() { cancel(); <-done }
}

// drainFanOut fans out every waiting event (earlier scenarios' payments),
// so that a timed phase does not pay for them.
func drainFanOut(ctx context.Context, st *mysql.Store) error {
	for {
		n, _, err := st.FanOut(ctx, 1000)
		if err != nil || n == 0 {
			return err
		}
	}
}

func (b *bench) scenarioWebhooks(ctx context.Context, hc *http.Client, rep *report) error {
	c, g, err := hookParts()
	if err != nil {
		return err
	}
	st := b.gw.store
	eps := webhooks.NewEndpoints(st, c, g, 0)
	if err := drainFanOut(ctx, st); err != nil {
		return err
	}

	// 6a: fresh payments without, then with, an endpoint being delivered to.
	sink, err := startHookSink(0)
	if err != nil {
		return err
	}
	defer sink.close()
	var without, with []stats
	for r := range b.opts.rounds {
		w, _, err := b.gatewayPhase(ctx, b.roundTitle("6 webhooks · fresh, no endpoint", r), "webhooks-off",
			b.freshGroup(hc, "gateway", fmt.Sprintf("g6ar%d", r), freshClients))
		if err != nil {
			return err
		}
		if err := drainFanOut(ctx, st); err != nil {
			return err
		}
		ep, _, err := eps.Create(ctx, webhooks.EndpointRequest{MerchantID: b.gw.merchant.ID, URL: sink.url + "/hooks", EventTypes: []string{webhooks.AllEvents}})
		if err != nil {
			return fmt.Errorf("register the bench endpoint: %w", err)
		}
		stop := startDispatcher(st, c, g, webhooks.DefaultInterval)
		on, _, err := b.gatewayPhase(ctx, b.roundTitle("6 webhooks · fresh, endpoint + dispatcher", r), "webhooks-on",
			b.freshGroup(hc, "gateway", fmt.Sprintf("g6br%d", r), freshClients))
		stop()
		if derr := eps.Delete(ctx, ep.MerchantID, ep.ID); derr != nil {
			err = errors.Join(err, derr)
		}
		if err != nil {
			return err
		}
		without, with = append(without, w[0]), append(with, on[0])
	}
	wo := mergeStats(without)
	rep.add(row{Scenario: scWebhooks, Name: "fresh payments, 64 clients, an endpoint delivered to", Unit: "req/s",
		Gateway: mergeStats(with), Floor: &wo, FloorLabel: "no endpoint", Reference: wo.Throughput,
		Goal: 0.90, GoalText: ">= 0.90 x without an endpoint", Note: fmt.Sprintf("%d deliveries made during the phases", sink.n.Load())})
	if err := drainFanOut(ctx, st); err != nil {
		return err
	}

	// 6b: the dispatcher alone, against receivers answering in 20 ms.
	slow, err := startHookSink(hookLatency)
	if err != nil {
		return err
	}
	defer slow.close()
	m, key, err := merchants.NewMerchant("Bench webhooks", time.Now())
	if err != nil {
		return err
	}
	if err := st.CreateMerchant(ctx, m, key); err != nil {
		return err
	}
	for i := range hookEndpoints {
		if _, _, err := eps.Create(ctx, webhooks.EndpointRequest{MerchantID: m.ID, URL: fmt.Sprintf("%s/hooks/%d", slow.url, i), EventTypes: []string{webhooks.AllEvents}}); err != nil {
			return err
		}
	}
	bound := float64(hookEndpoints*hookConcurrency) / hookLatency.Seconds()
	events := max(100, int(bound*b.opts.duration.Seconds())/hookEndpoints)
	b.prog.line("6 webhooks · writing %d events for %d endpoints", events, hookEndpoints)
	if err := writeEvents(ctx, b.gw.dbx, m.ID, events); err != nil {
		return err
	}
	want := int64(events * hookEndpoints)
	b.prog.line("6 webhooks · dispatcher: %d deliveries, receivers answering in %s, concurrency %d per endpoint", want, hookLatency, hookConcurrency)
	start := time.Now()
	stop := startDispatcher(st, c, g, webhooks.DefaultInterval)
	tick := time.NewTicker(10 * time.Millisecond)
	for slow.n.Load() < want && ctx.Err() == nil {
		<-tick.C
	}
	// Every delivery answered; the last records follow within moments.
	var delivered int
	deadline := time.Now().Add(30 * time.Second)
	for ctx.Err() == nil {
		if err := b.gw.dbx.GetContext(ctx, &delivered, `SELECT COUNT(*) FROM webhook_deliveries WHERE merchant_id = ? AND status = 'delivered'`, m.ID); err != nil {
			tick.Stop()
			stop()
			return err
		}
		if int64(delivered) >= want || time.Now().After(deadline) {
			break
		}
		<-tick.C
	}
	tick.Stop()
	elapsed := time.Since(start)
	stop()
	if err := ctx.Err(); err != nil {
		return err
	}
	gw := stats{Clients: hookEndpoints * hookConcurrency, Requests: delivered, Seconds: elapsed.Seconds(),
		Throughput: float64(delivered) / elapsed.Seconds()}
	if delivered != int(want) {
		gw.Errors = int(want) - delivered
		gw.FirstError = fmt.Sprintf("%d of %d deliveries recorded delivered", delivered, want)
	}
	rep.add(row{Scenario: scWebhooks, Name: fmt.Sprintf("dispatcher: %d endpoints answering in 20 ms, concurrency %d", hookEndpoints, hookConcurrency),
		Unit: "deliveries/s", Gateway: gw, FloorLabel: "concurrency bound", Reference: bound, NoLatency: true,
		Goal: 0.80, GoalText: fmt.Sprintf(">= 0.80 x %d x %d / 20 ms", hookEndpoints, hookConcurrency),
		Note: fmt.Sprintf("bound %.0f deliveries/s; fan-out included; %d POSTs for %d deliveries", bound, slow.n.Load(), want)})
	return nil
}

// writeEvents writes n events of merchant m, 100 per transaction, as the
// outbox would (one object each).
func writeEvents(ctx context.Context, dbx *sqlx.DB, m string, n int) error {
	for done := 0; done < n; {
		batch := min(100, n-done)
		err := mysql.Transact(ctx, dbx, func(tx *sqlx.Tx) error {
			for i := range batch {
				_, err := mysql.InsertEvent(ctx, tx, payments.Event{MerchantID: m, Type: payments.EventPaymentSucceeded,
					ObjectType: payments.ObjectPayment, ObjectID: fmt.Sprintf("pay_bench%09d", done+i), Seq: 1,
					Data: []byte(`{"id":"pay_bench","status":"succeeded"}`)})
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		done += batch
	}
	return nil
}
