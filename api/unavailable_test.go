package api_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"gateway/api"
	"gateway/merchants"
	"gateway/mysql"
	"gateway/payments"
	"gateway/psp/fake"
)

// An unreachable database is a 503 the client may retry, not a 500.
func TestDatabaseUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nobody listens here now
	cfg, err := mysql.Config("root@tcp(" + addr + ")/gateway?timeout=1s")
	if err != nil {
		t.Fatal(err)
	}
	dbx, err := sqlx.Open("mysql", cfg.FormatDSN())
	if err != nil {
		t.Fatal(err)
	}
	defer dbx.Close()
	st := mysql.NewStore(dbx)
	svc := payments.NewService(st, payments.OnePSP(fake.New()), payments.Config{Lease: time.Minute, PSPTimeout: time.Second, InFlightWait: time.Second})
	srv := httptest.NewServer(api.NewHandler(svc, merchants.NewAuth(st, merchants.AuthConfig{}), st, api.Options{}))
	defer srv.Close()
	e := &env{t: t, srv: srv}
	res, err := e.do(context.Background(), http.MethodPost, "/payments", "sk_"+strings.Repeat("a", 32), map[string]string{"Idempotency-Key": "k"}, okBody)
	if err != nil {
		t.Fatal(err)
	}
	wantProblem(t, res, http.StatusServiceUnavailable, "service-unavailable")
	if res.header.Get("Retry-After") == "" {
		t.Fatal("no Retry-After")
	}
	wantProblem(t, e.getAs("", "/readyz"), http.StatusServiceUnavailable, "service-unavailable")
	wantStatus(t, e.getAs("", "/healthz"), http.StatusOK)
}
