package webhooks_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/oklog/ulid/v2"

	"gateway/merchants"
	"gateway/mysql"
	"gateway/mysql/mysqltest"
	"gateway/payments"
	"gateway/webhooks"
	"gateway/webhooks/receiver"
)

// env is a merchant on a fresh database, with the endpoint management
// and what a dispatcher needs.
type env struct {
	t        *testing.T
	ctx      context.Context
	dbx      *sqlx.DB
	st       *mysql.Store
	cipher   *webhooks.Cipher
	guard    *webhooks.Guard
	eps      *webhooks.Endpoints
	merchant string
}

func newEnv(t *testing.T, allow ...netip.Prefix) *env {
	t.Helper()
	if allow == nil {
		allow = webhooks.Loopback
	}
	return newEnvGuard(t, webhooks.NewGuard(allow, nil))
}

func newEnvGuard(t *testing.T, g *webhooks.Guard) *env {
	t.Helper()
	dbx := mysqltest.MustOpen(t)
	st := mysql.NewStore(dbx)
	key, err := webhooks.ParseKey("000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f")
	if err != nil {
		t.Fatal(err)
	}
	c, err := webhooks.NewCipher(key)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ctx: context.Background(), dbx: dbx, st: st, cipher: c, guard: g,
		eps: webhooks.NewEndpoints(st, c, g, time.Hour)}
	e.merchant = e.newMerchant()
	return e
}

func (e *env) newMerchant() string {
	e.t.Helper()
	k, err := merchants.NewAPIKey()
	if err != nil {
		e.t.Fatal(err)
	}
	m := merchants.Merchant{ID: "mer_" + ulid.Make().String(), Name: "shop", CreatedAt: time.Now().UTC()}
	if err := e.st.CreateMerchant(e.ctx, m, k); err != nil {
		e.t.Fatal(err)
	}
	return m.ID
}

// endpoint registers url for types (all when none) and returns it with its secret.
func (e *env) endpoint(url string, types ...string) (webhooks.Endpoint, string) {
	e.t.Helper()
	if len(types) == 0 {
		types = []string{webhooks.AllEvents}
	}
	ep, secret, err := e.eps.Create(e.ctx, webhooks.EndpointRequest{MerchantID: e.merchant, URL: url, EventTypes: types})
	if err != nil {
		e.t.Fatalf("create endpoint %s: %v", url, err)
	}
	return ep, secret
}

// events writes n events of the merchant (one payment each, seq 1) and returns their ids in order.
func (e *env) events(n int, typ payments.EventType) []string {
	e.t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = payments.NewEventID()
		err := mysql.Transact(e.ctx, e.dbx, func(tx *sqlx.Tx) error {
			_, err := mysql.InsertEvent(e.ctx, tx, payments.Event{ID: ids[i], MerchantID: e.merchant, Type: typ,
				ObjectType: payments.ObjectPayment, ObjectID: "pay_" + ulid.Make().String(), Seq: 1,
				Data: []byte(fmt.Sprintf(`{"id":"pay_%d","status":"succeeded"}`, i))})
			return err
		})
		if err != nil {
			e.t.Fatal(err)
		}
	}
	return ids
}

func (e *env) dispatcher(cfg webhooks.Config) *webhooks.Dispatcher {
	if cfg.Jitter == nil {
		cfg.Jitter = func() float64 { return 0 }
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	return webhooks.NewDispatcher(e.st, e.cipher, e.guard, cfg)
}

func (e *env) count(query string, args ...any) int {
	e.t.Helper()
	return mysqltest.Count(e.t, e.dbx, query, args...)
}

// post is one delivery a receiver got.
type post struct {
	eventID string
	sigErr  error
	body    []byte
	header  string
	version string // its Gateway-Version
}

// sink is a merchant's receiver: it verifies every delivery with its
// secrets and keeps them in arrival order; answer decides each status.
type sink struct {
	mu      sync.Mutex
	secrets []string
	posts   []post
	answer  func(r *http.Request) int
	got     chan post
	srv     *httptest.Server
}

func newSink(t *testing.T, secrets ...string) *sink {
	s := &sink{secrets: secrets, got: make(chan post, 1000), answer: func(*http.Request) int { return http.StatusOK }}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *sink) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	p := post{eventID: r.Header.Get(webhooks.EventIDHeader), body: body, header: r.Header.Get(webhooks.SignatureHeader),
		version: r.Header.Get("Gateway-Version")}
	p.sigErr = receiver.Verify(p.header, body, s.secrets, 0, time.Now())
	s.posts = append(s.posts, p)
	answer := s.answer
	s.mu.Unlock()
	s.got <- p
	w.WriteHeader(answer(r))
}

func (s *sink) setSecrets(secrets ...string) {
	s.mu.Lock()
	s.secrets = secrets
	s.mu.Unlock()
}

func (s *sink) setAnswer(f func(*http.Request) int) {
	s.mu.Lock()
	s.answer = f
	s.mu.Unlock()
}

func (s *sink) all() []post {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]post(nil), s.posts...)
}

// distinct is the set of event ids received, as a receiver that drops duplicates keeps them.
func (s *sink) distinct() map[string]int {
	out := map[string]int{}
	for _, p := range s.all() {
		out[p.eventID]++
	}
	return out
}

// listenOn starts a server for h on a given loopback address (127.0.0.2:0, say).
func listenOn(t *testing.T, addr string, h http.Handler) *httptest.Server {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s: %v", addr, err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// within fails the test unless ch yields n values within d: a bound on
// how long something takes, not a synchronisation by sleeping.
func within[T any](t *testing.T, ch <-chan T, n int, d time.Duration, what string) []T {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	var out []T
	for len(out) < n {
		select {
		case v := <-ch:
			out = append(out, v)
		case <-timer.C:
			t.Fatalf("%s: %d of %d within %s", what, len(out), n, d)
		}
	}
	return out
}
