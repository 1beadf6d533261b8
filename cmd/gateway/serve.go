package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"gateway/api"
	"gateway/errs"
	"gateway/listings"
	"gateway/merchants"
	"gateway/metrics"
	"gateway/mysql"
	"gateway/payments"
	"gateway/psp"
	"gateway/psp/fake"
	"gateway/webhooks"
)

// serveCmd is `gateway serve`.
type serveCmd struct {
	Server      serverConfig `embed:""`
	AutoMigrate bool         `name:"auto-migrate" env:"GATEWAY_AUTO_MIGRATE" group:"database" help:"apply pending migrations before serving (true|false); otherwise serve refuses a schema behind this release"`
}

func (c *serveCmd) check() []error { return c.Server.DB.require() }

func (c *serveCmd) Run(ctx context.Context, a *app) error {
	return serve(ctx, &c.Server, c.AutoMigrate, newLogger(c.Server.Log, a.stderr), nil)
}

// serve runs the API until ctx ends, then drains in-flight requests.
// listening, when not nil, receives the bound address once the listener is open;
// mounts, given the API and that address, return what is served instead
// (dev adds its checkout demo).
func serve(ctx context.Context, cfg *serverConfig, autoMigrate bool, log *slog.Logger, listening func(addr string),
	mounts ...func(api http.Handler, addr string) (http.Handler, error)) error {
	build := readBuildInfo()
	log.Info("gateway starting", "version", build.Version, "revision", build.Revision, "go", build.GoVersion)
	if autoMigrate {
		if err := mysql.MigrateUp(cfg.DB.DSN); err != nil {
			return err
		}
	}
	dbx, err := openDB(ctx, cfg.DB, cfg.Pool)
	if err != nil {
		return err
	}
	defer dbx.Close()
	if err := mysql.CheckSchema(ctx, dbx); err != nil {
		return schemaAdvice(err)
	}
	st := mysql.NewStore(dbx)
	if err := st.CausalReads(ctx); err != nil {
		return err
	}
	reg := newRegistry(dbx)
	m := metrics.New(reg)
	psps, err := newPSPs(cfg.PSP, func(a psp.Adapter) psp.Adapter { return metrics.InstrumentPSP(a, m) })
	if err != nil {
		return err
	}
	if h := psps.Health(); h != nil {
		m.WatchBreakers(psps.Names(), h)
	}
	// Leases are judged on the database's clock; a replica whose own clock
	// strays from it anyway is taken out of service until it agrees again.
	guard := mysql.NewClockGuard(dbx, cfg.MaxClockSkew, nil, m.ClockSkew, log)
	if err := guard.Check(ctx); err != nil {
		return err
	}
	guardCtx, stopGuard := context.WithCancel(context.Background())
	defer stopGuard()
	go guard.Run(guardCtx, clockCheckEvery)
	svc := newService(cfg, st, psps, log, m, guard.Err)
	apiOpts := api.Options{
		MaxBodyBytes:     cfg.HTTP.MaxBodyBytes,
		Hasher:           cfg.Log.hasher(),
		RatePerSecond:    cfg.HTTP.RateLimit,
		RateBurst:        cfg.HTTP.RateBurst,
		AuthFailureRate:  cfg.HTTP.AuthFailureRate,
		AuthFailureBurst: cfg.HTTP.AuthFailureBurst,
		FlowTimeout:      cfg.Flow.Lease + cfg.HTTP.InFlightWait + cfg.Flow.PSPTimeout,
		Observer:         m,
		Logger:           log,
		Listings:         listings.New(st),
	}
	if apiOpts.TrustedProxies, err = cfg.HTTP.trustedProxies(); err != nil {
		return err
	}
	if cfg.HTTP.Admin.AdminAddr == "" {
		log.Info("metrics not served: set GATEWAY_ADMIN_ADDR to serve /metrics on an address of their own")
	}
	if apiOpts.Notices, err = newNotices(cfg.PSP, st, cfg.Flow.PSPTimeout, &cfg.Log, log, m); err != nil {
		return err
	}
	auth := merchants.NewAuth(st, merchants.AuthConfig{CacheTTL: cfg.HTTP.AuthCacheTTL})
	apiOpts.Browser = merchants.NewBrowserAuth(st, merchants.AuthConfig{CacheTTL: cfg.HTTP.AuthCacheTTL})
	eps, stopDispatcher, err := startWebhooks(cfg, st, guard.Err, log, metrics.NewWebhooks(reg))
	if err != nil {
		return err
	}
	defer stopDispatcher()
	if eps != nil {
		apiOpts.Webhooks, apiOpts.Deliveries = eps, webhooks.NewLog(st, st)
	}
	ready := readiness{st: st, guard: guard}
	handler := api.NewHandler(svc, auth, ready, apiOpts)
	if cfg.HTTP.Admin.AdminAddr != "" {
		stopAdmin, err := serveAdmin(cfg.HTTP.Admin.AdminAddr, metrics.Handler(reg), handler, log)
		if err != nil {
			return err
		}
		defer stopAdmin()
	}

	ln, err := net.Listen("tcp", cfg.HTTP.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.HTTP.Addr, err)
	}
	if f := inProcessFake(psps); f != nil {
		// Its 3-D Secure page: the next actions of its charges point here.
		mounts = append(mounts, func(api http.Handler, _ string) (http.Handler, error) {
			mux := http.NewServeMux()
			mux.Handle("GET /3ds/", f.ThreeDSPage())
			mux.Handle("/", api)
			return mux, nil
		})
	}
	for _, mount := range mounts {
		if handler, err = mount(handler, ln.Addr().String()); err != nil {
			_ = ln.Close()
			return err
		}
	}
	srv := api.NewHTTPServer(handler, api.ServerOptions{
		// A request may wait for the PSP and for a duplicate in flight.
		WriteTimeout: cfg.Flow.Lease + cfg.HTTP.InFlightWait + cfg.Flow.PSPTimeout + 5*time.Second,
		IdleTimeout:  cfg.HTTP.IdleTimeout,
		Logger:       log,
	})
	maxConns := cfg.HTTP.MaxConns
	if maxConns == 0 {
		maxConns = api.DefaultMaxConns(cfg.Pool.MaxOpenConns)
	}
	log.Info("gateway listening", "addr", ln.Addr().String(), "max_conns", maxConns, "psp", cfg.PSP.adapter(),
		"database", maskDSN(cfg.DB.DSN), "version", build.Version)
	if listening != nil {
		listening(ln.Addr().String())
	}
	stopReconciler := startReconciler(cfg.Reconcile.Schedule,
		newReconciler(cfg.Flow, cfg.Reconcile, &cfg.Log, dbx, psps, guard.Err, log, m), log)
	defer stopReconciler()
	stopBooks := startBooks(cfg.Books, dbx, psps, m, log)
	defer stopBooks()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(api.Listen(ln, api.ListenOptions{MaxConns: maxConns})) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	// The reconciler first (its pass ends and gives back what it claimed),
	// then no charge that has not left yet leaves; what is in flight finishes.
	stopReconciler()
	stopBooks()
	stopDispatcher()
	svc.Drain()
	log.Info("shutting down: draining in-flight requests", "timeout", cfg.HTTP.ShutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), cfg.HTTP.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("gateway stopped")
	return nil
}

// clockCheckEvery is how often serve compares its clock with the database's.
const clockCheckEvery = time.Minute

// readiness is /readyz: the database answers and takes writes (a cluster
// node in the primary component), holds a schema this release can use, and
// this replica's clock agrees with it.
type readiness struct {
	st    *mysql.Store
	guard *mysql.ClockGuard
}

func (r readiness) Ping(ctx context.Context) error {
	if err := r.st.Ping(ctx); err != nil {
		return err
	}
	if err := mysql.Writable(ctx, r.st.DB()); err != nil {
		return &errs.Error{Code: errs.CodeUnavailable, Message: "the database is read-only", Err: err}
	}
	if err := mysql.CheckSchema(ctx, r.st.DB()); err != nil {
		var se *mysql.SchemaError
		if errors.As(err, &se) {
			return &errs.Error{Code: errs.CodeUnavailable, Message: "the database schema is not the one this release needs", Err: err}
		}
		return err
	}
	if err := r.guard.Err(); err != nil {
		return &errs.Error{Code: errs.CodeUnavailable, Message: err.Error(), Err: err}
	}
	return nil
}

// schemaAdvice turns a schema this release cannot use into the commands that fix it.
func schemaAdvice(err error) error {
	var se *mysql.SchemaError
	switch {
	case !errors.As(err, &se):
		return err
	case se.Dirty:
		return fmt.Errorf("the database schema is dirty at version %d: that migration failed halfway. Repair it by hand, then record where it stands with `gateway migrate force %d` (it completed) or `gateway migrate force %d` (it did not), and run `gateway migrate up`",
			se.Version, se.Version, se.Version-1)
	default:
		return fmt.Errorf("the database schema is at version %d and this release needs %d: run `gateway migrate up` first (or set GATEWAY_AUTO_MIGRATE=true)",
			se.Version, se.Want)
	}
}

// healthcheckCmd is `gateway healthcheck`: the runtime image has no curl.
type healthcheckCmd struct {
	Addr    string        `name:"addr" env:"GATEWAY_ADDR" default:"127.0.0.1:8080" placeholder:"HOST:PORT" help:"the gateway's listen address; a wildcard host (0.0.0.0, ::) is probed on loopback"`
	Timeout time.Duration `name:"timeout" default:"3s" help:"how long to wait for the answer"`
}

func (c *healthcheckCmd) check() []error {
	failures := hostPort(nil, "GATEWAY_ADDR", c.Addr)
	if c.Timeout <= 0 {
		failures = append(failures, errors.New("--timeout must be positive"))
	}
	return failures
}

func (c *healthcheckCmd) Run(ctx context.Context, a *app) error {
	host, port, _ := net.SplitHostPort(c.Addr) // checked
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	url := "http://" + net.JoinHostPort(host, port) + "/readyz"
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("not ready: %w", err)
	}
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("not ready: GET %s answered %s", url, res.Status)
	}
	fmt.Fprintln(a.stdout, "ready")
	return nil
}

// inProcessFake is the in-process fake PSP among psps, or nil.
func inProcessFake(psps *payments.PSPs) *fake.PSP {
	for _, name := range psps.Names() {
		a, _ := psps.For(name)
		for {
			if f, ok := a.(*fake.PSP); ok {
				return f
			}
			w, ok := a.(interface{ Unwrap() psp.Adapter })
			if !ok {
				break
			}
			a = w.Unwrap()
		}
	}
	return nil
}
