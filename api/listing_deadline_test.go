package api_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"gateway/api"
	"gateway/listings"
	"gateway/merchants"
	"gateway/mysql"
	"gateway/mysql/mysqltest"
	"gateway/payments"
	"gateway/psp/fake"
)

// A listing that outlasts the request's deadline is a 503 to retry, and
// its statement stops on the server at that deadline, not when the
// server's own 30 s limit comes: eight clients giving up on slow listings
// and retrying must not leave sixteen statements scanning on.
func TestListingPastItsDeadline(t *testing.T) {
	var slow atomic.Bool
	dbx := mysqltest.MustOpenRewritten(t, mysqltest.SlowReads(&slow, "payments", "refunds", "events"))
	setup, err := mysql.Open(context.Background(), mysqltest.DSNOf(t, dbx), mysql.PoolOptions{MaxOpen: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { setup.Close() })
	st := mysql.NewStore(dbx)
	clk := &clock{now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	svc := payments.NewService(st, payments.OnePSP(fake.New()), payments.Config{
		Lease: 30 * time.Second, PSPTimeout: 5 * time.Second, InFlightWait: 10 * time.Second, Now: clk.Now})
	srv := httptest.NewServer(api.NewHandler(svc, merchants.NewAuth(st, merchants.AuthConfig{}), st,
		api.Options{Listings: listings.New(st), LookupTimeout: 300 * time.Millisecond}))
	t.Cleanup(srv.Close)
	// checked is unset: every exchange is checked against the OpenAPI document as the client saw it.
	e := &env{t: t, tb: t, db: setup, store: st, clock: clk, svc: svc, srv: srv}
	e.merch, e.apiKey = e.newMerchant("Slow merchant")

	pay := decodeView(t, e.post("p", okBody).body)
	res, err := e.do(t.Context(), http.MethodPost, "/payments/"+pay.ID+"/refunds", e.apiKey, map[string]string{"Idempotency-Key": "r"}, `{"amount": 300}`)
	if err != nil {
		t.Fatal(err)
	}
	wantStatus(t, res, http.StatusCreated)
	wantStatus(t, e.get("/events"), http.StatusOK) // the events are placed: the next listing only reads

	for _, c := range []struct{ name, path string }{
		{"payments by status", "/payments?status=succeeded"},
		{"payments after a cursor", "/payments?starting_after=" + pay.ID},
		{"refunds by status", "/refunds?status=succeeded"},
		{"refunds of a payment", "/payments/" + pay.ID + "/refunds"},
		{"events by type", "/events?type=payment.succeeded"},
	} {
		t.Run(c.name, func(t *testing.T) {
			slow.Store(true)
			defer slow.Store(false)
			res := e.get(c.path)
			wantProblem(t, res, http.StatusServiceUnavailable, "service-unavailable")
			if res.header.Get("Retry-After") == "" {
				t.Error("no Retry-After")
			}
			if left := mysqltest.Lingering(t, setup, mysqltest.SlowMarker, 3*time.Second); len(left) > 0 {
				t.Fatalf("still running on the server 3 s after the deadline: %q", left)
			}
		})
	}
}
