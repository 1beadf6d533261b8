package api_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gateway/api"
)

// Browser traffic has a budget of its own, per payment and per client
// address, apart from the merchant's bucket: a shopper's page looping on its
// payment is limited, and the merchant's server, which creates payments
// with the secret key, never waits for it.
func TestBrowserLoopLeavesTheMerchantServed(t *testing.T) {
	const merchantBurst = 40
	_, proxy, _ := net.ParseCIDR("127.0.0.1/32")
	e := newEnv(t, func(s *envSetup) {
		s.authTTL = 10 * time.Second
		s.api = func(o *api.Options) {
			// The clock stands still: no bucket refills while the test runs.
			o.Now = func() time.Time { return time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC) }
			o.RatePerSecond, o.RateBurst = 1, merchantBurst
			o.TrustedProxies = []*net.IPNet{proxy}
		}
	})
	b := e.newBrowserSide(e.merch, shopOrigin)
	read := func(id, secret, from string) (int, error) {
		res, err := e.do(context.Background(), http.MethodGet, "/payments/"+id, b.pk,
			map[string]string{api.HeaderClientSecret: secret, "Origin": shopOrigin, "X-Forwarded-For": from}, "")
		return res.status, err
	}

	t.Run("one payment", func(t *testing.T) {
		p := e.createLater("loop-1", laterBody)
		before := e.count(`SELECT COUNT(*) FROM payments`)
		// Four tabs of one shopper loop on the payment while the merchant's
		// server creates payments, all at once.
		const tabs, reads, creates = 4, 40, 20
		var (
			wg                sync.WaitGroup
			start             = make(chan struct{})
			readOK, readLimit atomic.Int64
			created, refused  atomic.Int64
			other             sync.Map
		)
		for range tabs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for range reads {
					status, err := read(p.ID, p.ClientSecret, "198.51.100.1")
					switch {
					case err != nil:
						other.Store(err.Error(), true)
					case status == http.StatusOK:
						readOK.Add(1)
					case status == http.StatusTooManyRequests:
						readLimit.Add(1)
					default:
						other.Store(fmt.Sprint("read ", status), true)
					}
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := range creates {
				res, err := e.do(context.Background(), http.MethodPost, "/payments", e.apiKey,
					map[string]string{"Idempotency-Key": fmt.Sprintf("server-%d", i)}, okBody)
				switch {
				case err != nil:
					other.Store(err.Error(), true)
				case res.status == http.StatusCreated:
					created.Add(1)
				case res.status == http.StatusTooManyRequests:
					refused.Add(1)
				default:
					other.Store(fmt.Sprint("create ", res.status), true)
				}
			}
		}()
		close(start)
		wg.Wait()
		other.Range(func(k, _ any) bool { t.Errorf("unexpected: %v", k); return true })
		if refused.Load() != 0 || created.Load() != creates {
			t.Fatalf("the merchant's server got %d × 201 and %d × 429 of %d while a shopper looped: its bucket was spent by the browser",
				created.Load(), refused.Load(), creates)
		}
		if n := e.count(`SELECT COUNT(*) FROM payments`) - before; n != creates {
			t.Fatalf("%d payments created, want %d", n, creates)
		}
		if readOK.Load() != api.DefaultBrowserPaymentBurst || readOK.Load()+readLimit.Load() != tabs*reads {
			t.Fatalf("the loop read %d times and was refused %d times; want %d reads (the payment's burst), the rest 429",
				readOK.Load(), readLimit.Load(), api.DefaultBrowserPaymentBurst)
		}
		// Another shopper's payment, from another address, has its own budget.
		q := e.createLater("loop-2", laterBody)
		if status, err := read(q.ID, q.ClientSecret, "198.51.100.2"); err != nil || status != http.StatusOK {
			t.Fatalf("another payment from another address: %d, %v", status, err)
		}
	})

	t.Run("one address, many payments", func(t *testing.T) {
		// Each payment is read within its own budget; together they spend
		// the address's.
		const pays = 6
		var ps []struct{ id, secret string }
		for i := range pays {
			p := e.createLater(fmt.Sprintf("addr-%d", i), laterBody)
			ps = append(ps, struct{ id, secret string }{p.ID, p.ClientSecret})
		}
		ok, limited := 0, 0
		for _, p := range ps {
			for range api.DefaultBrowserPaymentBurst {
				status, err := read(p.id, p.secret, "203.0.113.9")
				if err != nil {
					t.Fatal(err)
				}
				switch status {
				case http.StatusOK:
					ok++
				case http.StatusTooManyRequests:
					limited++
				default:
					t.Fatalf("read: %d", status)
				}
			}
		}
		if ok != api.DefaultBrowserAddressBurst || limited != pays*api.DefaultBrowserPaymentBurst-ok {
			t.Fatalf("%d reads served and %d refused from one address; want %d served (the address's burst)", ok, limited, api.DefaultBrowserAddressBurst)
		}
		wantStatus(t, e.post("after-addr", okBody), http.StatusCreated)
	})
}

// madeUpSecret is a client secret of the right shape for payment id, which
// is not its secret.
func madeUpSecret(id string) string {
	b := make([]byte, 32)
	for i := range b {
		b[i] = "abcdefghijklmnopqrstuvwxyz234567"[rand.IntN(32)]
	}
	return id + "_secret_" + string(b)
}

// comSelects is how many SELECTs the connection has run: read on the
// pool's one connection, as the gateway's statements are.
func (e *env) comSelects() int {
	e.t.Helper()
	var name string
	var n int
	if err := e.db.QueryRowx(`SHOW SESSION STATUS LIKE 'Com_select'`).Scan(&name, &n); err != nil {
		e.t.Fatal(err)
	}
	return n
}

func (e *env) connectionID() int {
	e.t.Helper()
	var id int
	if err := e.db.Get(&id, `SELECT CONNECTION_ID()`); err != nil {
		e.t.Fatal(err)
	}
	return id
}

// Anonymous browser requests that fail cost the database nothing: a
// preflight from an origin nobody allows is judged from memory, a client
// secret that is not the path's payment's is refused before the payment is
// read, and an address that keeps failing gets 429 before anything else.
func TestBadBrowserRequestsCostNoReads(t *testing.T) {
	const burst = 5
	_, proxy, _ := net.ParseCIDR("127.0.0.1/32")
	e := newEnv(t, func(s *envSetup) {
		s.authTTL = 10 * time.Second
		s.api = func(o *api.Options) {
			o.Now = func() time.Time { return time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC) }
			o.AuthFailureRate, o.AuthFailureBurst = 1e-6, burst
			o.TrustedProxies = []*net.IPNet{proxy}
		}
	})
	b := e.newBrowserSide(e.merch, shopOrigin)
	p := e.createLater("order-1", laterBody)
	other := e.createLater("order-2", laterBody)
	preflight := func(origin, from string) response {
		res, err := e.do(context.Background(), http.MethodOptions, "/payments/"+p.ID+"/confirm", "",
			map[string]string{"Origin": origin, "Access-Control-Request-Method": http.MethodPost, "X-Forwarded-For": from}, "")
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	read := func(id, secret, from string) response {
		return e.browse(http.MethodGet, "/payments/"+id, b.pk, secret, shopOrigin, map[string]string{"X-Forwarded-For": from}, "")
	}
	// What a good page does, once: its key, its merchant's origins and the
	// allowed origins are then known.
	wantStatus(t, preflight(shopOrigin, "192.0.2.1"), http.StatusNoContent)
	wantStatus(t, read(p.ID, p.ClientSecret, "192.0.2.1"), http.StatusOK)

	// Every statement now goes through one connection, whose own counters
	// say how many SELECTs the gateway ran.
	e.db.SetMaxOpenConns(1)
	conn := e.connectionID()
	before := e.comSelects()
	wantStatus(t, read(p.ID, p.ClientSecret, "192.0.2.1"), http.StatusOK)
	if n := e.comSelects() - before; n < 1 {
		t.Fatalf("a good read counted %d SELECTs: the count proves nothing", n)
	}

	const n = 600
	statuses := map[int]int{}
	before = e.comSelects()
	for i := range n {
		var res response
		switch i % 4 {
		case 0: // a preflight from an origin nobody allows, new each time
			res = preflight(fmt.Sprintf("https://shop-%d.example", i), "203.0.113.7")
		case 1: // a made-up secret of the right shape for the path's payment
			res = read(p.ID, madeUpSecret(p.ID), "203.0.113.7")
		case 2: // another payment's secret
			res = read(p.ID, other.ClientSecret, "203.0.113.7")
		case 3: // a payment that does not exist, and a secret naming it
			id := fmt.Sprintf("pay_01KB4ZQ4C9V8X2M3N5P7R9%04d", i)
			res = read(id, madeUpSecret(id), "203.0.113.7")
		}
		statuses[res.status]++
	}
	selects := e.comSelects() - before
	if id := e.connectionID(); id != conn {
		t.Fatalf("the pool changed connections (%d, then %d): the count proves nothing", conn, id)
	}
	if selects > burst {
		t.Fatalf("%d bad requests cost %d SELECTs, want at most %d (those the failure budget lets through); statuses %v", n, selects, burst, statuses)
	}
	if statuses[http.StatusTooManyRequests] != n-burst {
		t.Fatalf("statuses %v; want %d × 429 after the first %d failures", statuses, n-burst, burst)
	}
	// The good page, on another address, is served throughout.
	wantStatus(t, read(p.ID, p.ClientSecret, "192.0.2.1"), http.StatusOK)
	wantStatus(t, preflight(shopOrigin, "192.0.2.1"), http.StatusNoContent)
	t.Logf("%d bad requests: %d SELECTs, statuses %v", n, selects, statuses)
}
