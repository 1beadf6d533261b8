package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"gateway/api"
	"gateway/merchants"
	"gateway/metrics"
	"gateway/mysql"
	"gateway/notices"
	"gateway/payments"
	"gateway/psp"
	"gateway/psp/fake"
	"gateway/psp/fake/fakeclient"
	"gateway/psp/stripe"
	"gateway/psp/toss"
	"gateway/reconcile"
	"gateway/review"
	"gateway/routing"
)

// The parts every command is built from, each from its group of settings.

func newLogger(cfg logConfig, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.Level)) // checked with the configuration
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewJSONHandler(w, opts)
	if cfg.Format == "text" {
		h = slog.NewTextHandler(w, opts)
	}
	return slog.New(api.LogHandler(h))
}

// newRegistry is a registry with the Go runtime, process and build
// collectors, and the pool statistics of dbx.
func newRegistry(dbx *sqlx.DB) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	b := readBuildInfo()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		// go_build_info{path, version, checksum}: which build each replica runs.
		collectors.NewBuildInfoCollector(),
		// go_sql_*{db_name="gateway"}: connections open, in use, idle, waits.
		collectors.NewDBStatsCollector(dbx.DB, "gateway"),
	)
	metrics.RegisterBuildInfo(reg, b.Version, b.Revision, b.GoVersion)
	return reg
}

// serveAdmin serves the metrics on their own listener, kept off the public
// address, with the public handler's /healthz and /readyz beside them when
// there is one (a probe that reaches only this address sees the same answers).
func serveAdmin(addr string, metricsHandler, api http.Handler, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on GATEWAY_ADMIN_ADDR %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metricsHandler)
	if api != nil {
		mux.Handle("GET /healthz", api)
		mux.Handle("GET /readyz", api)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 30 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	log.Info("admin listening", "addr", ln.Addr().String())
	return func() { _ = srv.Close() }, nil
}

// openDB opens the pool of a long-running process.
func openDB(ctx context.Context, dsn dsnConfig, pool poolConfig) (*sqlx.DB, error) {
	return mysql.Open(ctx, dsn.DSN, mysql.PoolOptions{
		MaxOpen:     pool.MaxOpenConns,
		MaxIdle:     pool.MaxIdleConns,
		MaxLifetime: 30 * time.Minute,
	})
}

// newPSP builds the configured adapter. Secrets go to the adapter and
// nowhere else; the adapters' configs mask them when logged.
func newPSP(cfg pspConfig) (psp.Adapter, error) {
	switch cfg.adapter() {
	case "fake":
		m := fake.New()
		m.SetLatency(cfg.FakeLatency)
		return m, nil
	case "fakehttp":
		base := cfg.URL
		if base == "" {
			base = "http://127.0.0.1:9090"
		}
		return fakeclient.New(fakeclient.Config{BaseURL: base, CreationWindow: cfg.creationWindow()})
	case "toss":
		return toss.New(tossConfig(cfg))
	case "stripe":
		return stripe.New(stripe.Config{SecretKey: cfg.StripeSecretKey, BaseURL: cfg.URL, CreationWindow: cfg.creationWindow(),
			PublishableKey: cfg.Checkout.StripePublishableKey, WebhookSecret: cfg.Checkout.StripeWebhookSecret})
	}
	return nil, fmt.Errorf("unknown PSP %q", cfg.PSP)
}

func tossConfig(cfg pspConfig) toss.Config {
	return toss.Config{SecretKey: cfg.TossSecretKey, BaseURL: cfg.URL, CreationWindow: cfg.creationWindow(),
		ClientKey: cfg.Checkout.TossClientKey}
}

// noInstrument leaves an adapter as it is.
func noInstrument(a psp.Adapter) psp.Adapter { return a }

// newPSPs builds the configured adapters: GATEWAY_PSP's for new payments,
// and every other one whose credentials are configured, so that payments
// sent to it earlier can still be looked up and resumed. The in-process fake
// knows only this process's charges: it is named for this process, so that
// no other process ever takes its "not found" for an answer.
func newPSPs(cfg pspConfig, instrument func(psp.Adapter) psp.Adapter) (*payments.PSPs, error) {
	acc, errs := cfg.Accounts.load()
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if acc != nil {
		return newAccounts(cfg, acc, instrument)
	}
	byName := map[string]psp.Adapter{}
	add := func(kind string) (string, error) {
		c := cfg
		c.PSP = kind
		a, err := newPSP(c)
		if err != nil {
			return "", err
		}
		name := payments.PSPName(a.Capabilities())
		if kind == "fake" {
			name += ":" + processID()
		}
		byName[name] = instrument(a)
		return name, nil
	}
	def, err := add(cfg.adapter())
	if err != nil {
		return nil, err
	}
	if cfg.adapter() != "toss" && cfg.TossSecretKey != "" {
		if _, err := add("toss"); err != nil {
			return nil, err
		}
	}
	if cfg.adapter() != "stripe" && cfg.StripeSecretKey != "" {
		if _, err := add("stripe"); err != nil {
			return nil, err
		}
	}
	return payments.NewPSPs(def, byName)
}

// newAccounts builds the named accounts with their routes and breakers
// (design §16). Payments sent before the accounts existed name the adapter
// GATEWAY_PSP chose: the PSPs whose credentials are still set stay
// reachable under those names, for their lookups, refunds and captures.
func newAccounts(cfg pspConfig, acc *accounts, instrument func(psp.Adapter) psp.Adapter) (*payments.PSPs, error) {
	byName := map[string]psp.Adapter{}
	for _, a := range acc.list {
		ad, err := newPSP(a.cfg)
		if err != nil {
			return nil, fmt.Errorf("PSP account %s: %w", a.name, err)
		}
		byName[a.name] = instrument(ad)
	}
	for _, legacy := range []struct{ kind, key string }{{"toss", cfg.TossSecretKey}, {"stripe", cfg.StripeSecretKey}} {
		if _, taken := byName[legacy.kind]; legacy.key == "" || taken {
			continue
		}
		c := cfg
		c.PSP = legacy.kind
		ad, err := newPSP(c)
		if err != nil {
			return nil, err
		}
		byName[payments.PSPName(ad.Capabilities())] = instrument(ad)
	}
	p, err := payments.NewPSPs(acc.routes.Default[0].Account, byName)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(acc.list))
	for _, a := range acc.list {
		names = append(names, a.name)
	}
	return p, p.WithRoutes(acc.routes, routing.NewHealth(names, acc.breaker, nil))
}

// processID names this process among others, for the in-process fake PSP.
func processID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func newService(cfg *serverConfig, st *mysql.Store, psps *payments.PSPs, log *slog.Logger, obs payments.Observer, gate func() error) *payments.Service {
	return payments.NewService(st, psps, payments.Config{
		Gate:             gate,
		Lease:            cfg.Flow.Lease,
		PSPTimeout:       cfg.Flow.PSPTimeout,
		InFlightWait:     cfg.HTTP.InFlightWait,
		Logger:           log,
		Observer:         obs,
		Hasher:           cfg.Log.hasher(),
		ReplayCacheBytes: cfg.ReplayCacheBytes,
		ReplayCacheTTL:   cfg.ReplayCacheTTL,
		Retention:        cfg.Flow.Retention,
		ConfirmExpiry:    cfg.PSP.Checkout.ConfirmExpiry,
	})
}

// newNotices takes the notifications of the configured PSPs that send
// them: Stripe's when its webhook signing secret is set, Toss's whenever
// Toss is configured (its notifications are checked by asking Toss), and
// each named account's of those two adapters on its own route, matched to
// that account alone. nil when none is.
func newNotices(cfg pspConfig, st *mysql.Store, timeout time.Duration, lc *logConfig, log *slog.Logger, obs notices.Observer) (api.NoticeReceiver, error) {
	sources := map[string]notices.Source{}
	for _, kind := range []string{"stripe", "toss"} {
		c := cfg
		c.PSP = kind
		src, ok, err := noticeSource(c, st)
		if err != nil {
			return nil, err
		}
		if ok {
			sources[kind] = notices.Source{PSP: payments.PSPName(src.caps), Reader: src.reader}
		}
	}
	acc, errs := cfg.Accounts.load()
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if acc != nil {
		for _, a := range acc.list {
			src, ok, err := noticeSource(a.cfg, st)
			if err != nil {
				return nil, fmt.Errorf("PSP account %s: %w", a.name, err)
			}
			if ok {
				sources[api.AccountNoticeSource(a.name)] = notices.Source{PSP: a.name, Reader: src.reader}
			}
		}
	}
	if len(sources) == 0 {
		return nil, nil
	}
	return notices.New(st, sources, notices.Config{PSPTimeout: timeout, Logger: log, Hasher: lc.hasher(), Observer: obs}), nil
}

type noticeReader struct {
	reader psp.NoticeReader
	caps   psp.Capabilities
}

// noticeSource is the notification reader of the adapter cfg names: a
// Stripe one's when its webhook secret is set, a Toss one's when its
// secret key is; ok false for none.
func noticeSource(cfg pspConfig, st *mysql.Store) (_ noticeReader, ok bool, err error) {
	var a psp.Adapter
	switch {
	case cfg.PSP == "stripe" && cfg.Checkout.StripeWebhookSecret != "":
		a, err = newPSP(cfg)
	case cfg.PSP == "toss" && cfg.TossSecretKey != "":
		// Toss does not sign its notifications: it is asked only about
		// the orders this gateway holds.
		tc := tossConfig(cfg)
		tc.KnownOrder = func(ctx context.Context, orderID string) (bool, error) {
			ps, err := st.PaymentsByOrder(ctx, orderID)
			return len(ps) > 0, err
		}
		a, err = toss.New(tc)
	default:
		return noticeReader{}, false, nil
	}
	if err != nil {
		return noticeReader{}, false, err
	}
	reader, ok := a.(psp.NoticeReader)
	if !ok {
		return noticeReader{}, false, fmt.Errorf("the %s adapter reads no notifications", cfg.PSP)
	}
	return noticeReader{reader: reader, caps: a.Capabilities()}, true, nil
}

// newReconciler builds the reconciler; gate, when set, stops it while this
// replica must not act (its clock strays from the database's).
func newReconciler(flow flowConfig, rc reconcileConfig, lc *logConfig, dbx *sqlx.DB, psps *payments.PSPs, gate func() error, log *slog.Logger, obs reconcile.Observer) *reconcile.Reconciler {
	st := mysql.NewStore(dbx)
	// The cancellations by key it carries out run their voids and refunds
	// on the flow, as a request would.
	canceler := payments.NewService(st, psps, payments.Config{Gate: gate, Lease: flow.Lease, PSPTimeout: flow.PSPTimeout,
		Retention: flow.Retention, Logger: log, Hasher: lc.hasher()})
	return reconcile.New(st, psps, reconcile.Config{
		Canceler:       canceler,
		Gate:           gate,
		Lease:          flow.Lease,
		PSPTimeout:     flow.PSPTimeout,
		BatchSize:      rc.Batch,
		Concurrency:    rc.Concurrency,
		MaxAttempts:    rc.MaxAttempts,
		BackoffBase:    rc.Backoff,
		BackoffMax:     rc.BackoffMax,
		Retention:      flow.Retention,
		PurgeBatch:     rc.PurgeBatch,
		PurgeRest:      rc.PurgeRest,
		EventRetention: flow.EventRetention,
		Logger:         log,
		Observer:       obs,
		Hasher:         lc.hasher(),
	})
}

// startReconciler schedules the reconciler inside a long-running process;
// the returned stop waits for a running pass. The schedule "off" starts nothing.
func startReconciler(schedule string, r *reconcile.Reconciler, log *slog.Logger) (stop func()) {
	sched, err := reconcile.ParseSchedule(schedule)
	if err != nil || sched == nil { // validated with the configuration
		log.Info("reconciler disabled", "schedule", schedule)
		return func() {}
	}
	s := reconcile.Schedule(sched, r, log)
	log.Info("reconciler scheduled", "schedule", schedule)
	return s.Stop
}

// withAdmin runs fn with ops administration of payments and refunds on the database,
// for one-shot commands; cfg says which PSPs a decision is checked with.
func withAdmin(ctx context.Context, dsn dsnConfig, cfg review.Config, fn func(*review.Admin) error) error {
	return withStore(ctx, dsn, func(st *mysql.Store) error { return fn(review.New(st, cfg)) })
}

// withMerchants runs fn with the administration of merchants on the database,
// closing the pool afterwards.
func withMerchants(ctx context.Context, dsn dsnConfig, fn func(*merchants.Admin) error) error {
	return withStore(ctx, dsn, func(st *mysql.Store) error { return fn(merchants.NewAdmin(st, nil)) })
}

// withStore runs fn with a store on the database, for one-shot commands,
// once the schema is known to be this release's.
func withStore(ctx context.Context, dsn dsnConfig, fn func(*mysql.Store) error) error {
	dbx, err := mysql.Open(ctx, dsn.DSN, mysql.PoolOptions{MaxOpen: 2, MaxIdle: 2})
	if err != nil {
		return err
	}
	defer dbx.Close()
	if err := mysql.CheckSchema(ctx, dbx); err != nil {
		return schemaAdvice(err)
	}
	return fn(mysql.NewStore(dbx))
}
