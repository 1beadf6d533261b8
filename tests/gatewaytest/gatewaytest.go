// Package gatewaytest starts a real gateway for the clients' tests (the
// browser client's node tests in clients/js, the Go client's in tests/sdk):
// the API over a fresh MariaDB database (mysqltest) with the in-process
// fake PSP, reached through a Proxy that fails as networks and load
// balancers do, and a control server through which tests in another
// language queue those faults and read what the proxy, the PSP and the
// database saw.
package gatewaytest

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"gateway/api"
	"gateway/listings"
	"gateway/merchants"
	"gateway/mysql"
	"gateway/mysql/mysqltest"
	"gateway/payments"
	"gateway/psp/fake"
	"gateway/webhooks"
)

// Gateway is the API behind a fault proxy, with a merchant and its keys.
type Gateway struct {
	DB    *sqlx.DB
	Store *mysql.Store
	PSP   *fake.PSP
	// Proxy stands in front of the API: URL is what clients call.
	Proxy *Proxy
	URL   string
	// Upstream is the API itself, unproxied.
	Upstream string
	// The merchant every client of the test uses unless it makes its own
	// (NewMerchant).
	MerchantID     string
	SecretKey      string
	PublishableKey string
	// Hold makes the PSP hold charges until released.
	Hold *ChargeHold
	// Cipher and Guard are the webhooks' (loopback endpoints allowed), for
	// a Dispatcher.
	Cipher *webhooks.Cipher
	Guard  *webhooks.Guard
}

// Options tune the gateway.
type Options struct {
	// InFlightWait is how long a duplicate of a request still in flight
	// waits before its 409 request-in-flight (300 ms when zero: short, so
	// that a duplicate of a held charge gets its 409 quickly).
	InFlightWait time.Duration
}

// webhookKey seals the test endpoints' secrets.
const webhookKey = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"

// Start starts a gateway for tb on a fresh database, stopped when tb ends.
func Start(tb testing.TB, opts Options) *Gateway {
	tb.Helper()
	if opts.InFlightWait <= 0 {
		opts.InFlightWait = 300 * time.Millisecond
	}
	dbx := mysqltest.MustOpen(tb)
	st := mysql.NewStore(dbx)
	p := fake.New()
	key, err := webhooks.ParseKey(webhookKey)
	if err != nil {
		tb.Fatal(err)
	}
	cipher, err := webhooks.NewCipher(key)
	if err != nil {
		tb.Fatal(err)
	}
	guard := webhooks.NewGuard(webhooks.Loopback, nil)
	svc := payments.NewService(st, payments.OnePSP(p), payments.Config{Lease: 30 * time.Second, PSPTimeout: 5 * time.Second,
		InFlightWait: opts.InFlightWait})
	handler := api.NewHandler(svc, merchants.NewAuth(st, merchants.AuthConfig{}), st, api.Options{
		Listings: listings.New(st),
		Browser:  merchants.NewBrowserAuth(st, merchants.AuthConfig{}),
		Webhooks: webhooks.NewEndpoints(st, cipher, guard, time.Hour),
	})
	upstream := httptest.NewServer(handler)
	tb.Cleanup(upstream.Close)

	g := &Gateway{DB: dbx, Store: st, PSP: p, Upstream: upstream.URL, Hold: &ChargeHold{}, Cipher: cipher, Guard: guard}
	g.MerchantID, g.SecretKey = g.NewMerchant(tb, "Client tests")
	pk, err := merchants.NewBrowserAccess(st, nil).CreatePublishableKey(context.Background(), g.MerchantID)
	if err != nil {
		tb.Fatal(err)
	}
	g.PublishableKey = pk.Plaintext
	p.SetChargeHook(g.Hold.wait)
	g.Proxy = NewProxy(tb, upstream.URL, upstream.Client())
	g.URL = g.Proxy.URL
	tb.Cleanup(g.Hold.Release) // no charge stays held past the test
	return g
}

// NewMerchant creates another merchant, whose payments, listings and
// events are apart from every other's, and returns its id and secret key.
func (g *Gateway) NewMerchant(tb testing.TB, name string) (id, secretKey string) {
	tb.Helper()
	m, key, err := merchants.NewAdmin(g.Store, nil).CreateMerchant(context.Background(), name)
	if err != nil {
		tb.Fatal(err)
	}
	return m.ID, key.Plaintext
}

// PinVersion pins a merchant to an API version, as ops do (gateway
// merchants version --set), before any of its requests.
func (g *Gateway) PinVersion(tb testing.TB, merchantID, version string) {
	tb.Helper()
	if _, err := merchants.NewAdmin(g.Store, nil).SetAPIVersion(context.Background(), merchantID, version); err != nil {
		tb.Fatal(err)
	}
}

// Dispatcher is a webhook dispatcher over the gateway's database: RunOnce
// delivers what is due.
func (g *Gateway) Dispatcher(cfg webhooks.Config) *webhooks.Dispatcher {
	return webhooks.NewDispatcher(g.Store, g.Cipher, g.Guard, cfg)
}

// OrderID is the PSP order id of a payment, to count its charges in the
// fake PSP's ledger (PSP.ChargesFor).
func (g *Gateway) OrderID(tb testing.TB, paymentID string) string {
	tb.Helper()
	var order string
	if err := g.DB.GetContext(context.Background(), &order, `SELECT merchant_order_id FROM payments WHERE id = ?`, paymentID); err != nil {
		tb.Fatalf("payment %s: %v", paymentID, err)
	}
	return order
}
