package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"text/tabwriter"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"gateway/api"
	"gateway/db"
	"gateway/metrics"
	"gateway/payments"
	"gateway/payments/store"
	"gateway/psp"
	"gateway/psp/fake"
	"gateway/psp/fake/fakeclient"
	"gateway/psp/stripe"
	"gateway/psp/toss"
)

// usageError is a mistake on the command line: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func exitCode(err error) int {
	var (
		u usageError
		x exitError
	)
	switch {
	case errors.As(err, &u):
		return 2
	case errors.As(err, &x):
		return x.code
	}
	return 1
}

const usage = `gateway: an idempotent payment gateway

Usage:
  gateway serve                          run the HTTP API
  gateway migrate up|down|version        manage the database schema
  gateway merchants create --name NAME   create a merchant; prints {"merchant_id","api_key"}
  gateway reconcile [--once [--json]]    settle unfinished payments (daemon, or one pass for ops)
  gateway payments list --status S       list payments, e.g. --status requires_review
  gateway payments resolve ID --as succeeded|failed --reason TEXT
                                         record an operator's decision (audited)
  gateway dev                            private MariaDB + migrations + demo merchant + serve
  gateway help                           this text

Every setting is a GATEWAY_* environment variable:
`

func printUsage(w io.Writer) {
	fmt.Fprint(w, usage)
	printSettings(w)
}

// run is the whole program; main only wires the process to it, and tests call it.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		printUsage(stderr)
		return usageError{"no command given"}
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "help", "-h", "--help":
		printUsage(stdout)
		return nil
	}
	cfg, err := loadConfig(getenv)
	if err != nil {
		return fmt.Errorf("configuration:\n%w", err)
	}
	switch cmd {
	case "serve":
		return runServe(ctx, cfg, rest, stdout, stderr)
	case "migrate":
		return runMigrate(cfg, rest, stdout, stderr)
	case "merchants":
		return runMerchants(ctx, cfg, rest, stdout, stderr)
	case "dev":
		return runDev(ctx, cfg, rest, stdout, stderr)
	case "reconcile":
		return runReconcile(ctx, cfg, rest, stdout, stderr)
	case "payments":
		return runPayments(ctx, cfg, rest, stdout, stderr)
	}
	printUsage(stderr)
	return usageError{fmt.Sprintf("unknown command %q", cmd)}
}

// newFlags returns a flag set whose --help prints the command's usage and the variables.
func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: %s\n", synopsis)
		fs.PrintDefaults()
		fmt.Fprintln(stderr, "\nEnvironment:")
		printSettings(stderr)
	}
	return fs
}

// parseFlags parses and turns --help into a clean exit.
func parseFlags(fs *flag.FlagSet, args []string) (help bool, err error) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return true, nil
		}
		return false, usageError{err.Error()}
	}
	return false, nil
}

func newLogger(cfg Config, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewJSONHandler(w, opts)
	if cfg.LogFormat == "text" {
		h = slog.NewTextHandler(w, opts)
	}
	return slog.New(api.LogHandler(h))
}

// newRegistry is a registry with the Go runtime and process collectors.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// serveAdmin serves the metrics on their own listener, kept off the public address.
func serveAdmin(addr string, metricsHandler http.Handler, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on GATEWAY_ADMIN_ADDR %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metricsHandler)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 30 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	log.Info("admin listening", "addr", ln.Addr().String())
	return func() { _ = srv.Close() }, nil
}

// clockCheckEvery is how often serve compares its clock with the database's.
const clockCheckEvery = time.Minute

// readiness is /readyz: the database answers and takes writes, and this
// replica's clock agrees with it.
type readiness struct {
	st    *store.Store
	guard *db.ClockGuard
}

func (r readiness) Ping(ctx context.Context) error {
	if err := r.st.Ping(ctx); err != nil {
		return err
	}
	if err := db.Writable(ctx, r.st.DB()); err != nil {
		return &payments.Error{Code: payments.CodeUnavailable, Message: "the database is read-only", Err: err}
	}
	if err := r.guard.Err(); err != nil {
		return &payments.Error{Code: payments.CodeUnavailable, Message: err.Error(), Err: err}
	}
	return nil
}

func openDB(ctx context.Context, cfg Config) (*sqlx.DB, error) {
	return db.Open(ctx, cfg.DatabaseDSN, db.PoolOptions{
		MaxOpen:     cfg.DBMaxOpenConns,
		MaxIdle:     cfg.DBMaxIdleConns,
		MaxLifetime: 30 * time.Minute,
	})
}

// newPSP builds the configured adapter. Secrets go to the adapter and
// nowhere else; the adapters' configs mask them when logged.
func newPSP(cfg Config) (psp.Adapter, error) {
	switch cfg.PSP {
	case "fake":
		m := fake.New()
		m.SetLatency(cfg.FakePSPLatency)
		return m, nil
	case "fakehttp":
		base := cfg.PSPURL
		if base == "" {
			base = "http://127.0.0.1:9090"
		}
		return fakeclient.New(fakeclient.Config{BaseURL: base, CreationWindow: cfg.PSPCreation})
	case "toss":
		return toss.New(toss.Config{SecretKey: cfg.TossSecretKey, BaseURL: cfg.PSPURL, CreationWindow: cfg.PSPCreation,
			ClientKey: cfg.TossClientKey})
	case "stripe":
		return stripe.New(stripe.Config{SecretKey: cfg.StripeSecretKey, BaseURL: cfg.PSPURL, CreationWindow: cfg.PSPCreation,
			PublishableKey: cfg.StripePublishableKey, WebhookSecret: cfg.StripeWebhookSecret})
	}
	return nil, fmt.Errorf("unknown PSP %q", cfg.PSP)
}

// newPSPs builds the configured adapters: GATEWAY_PSP's for new payments,
// and every other one whose credentials are configured, so that payments
// sent to it earlier can still be looked up and resumed. The in-process fake
// knows only this process's charges: it is named for this process, so that
// no other process ever takes its "not found" for an answer.
func newPSPs(cfg Config, instrument func(psp.Adapter) psp.Adapter) (*payments.PSPs, error) {
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
	def, err := add(cfg.PSP)
	if err != nil {
		return nil, err
	}
	if cfg.PSP != "toss" && cfg.TossSecretKey != "" {
		if _, err := add("toss"); err != nil {
			return nil, err
		}
	}
	if cfg.PSP != "stripe" && cfg.StripeSecretKey != "" {
		if _, err := add("stripe"); err != nil {
			return nil, err
		}
	}
	return payments.NewPSPs(def, byName)
}

// processID names this process among others, for the in-process fake PSP.
func processID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func newService(cfg Config, st *store.Store, psps *payments.PSPs, log *slog.Logger, obs payments.Observer, gate func() error) *payments.Service {
	return payments.NewService(st, psps, payments.Config{
		Gate:            gate,
		Lease:           cfg.Lease,
		PSPTimeout:      cfg.PSPTimeout,
		InFlightWait:    cfg.InFlightWait,
		Logger:          log,
		Observer:        obs,
		Hasher:          cfg.hasher(),
		ReplayCacheSize: payments.DefaultReplayCacheSize,
		Retention:       cfg.Retention,
		ConfirmExpiry:   cfg.ConfirmExpiry,
	})
}

// newNotices takes the notifications of the configured PSPs that send
// them: Stripe's when its webhook signing secret is set, Toss's whenever
// Toss is configured (its notifications are checked by asking Toss). nil
// when none is.
func newNotices(cfg Config, st *store.Store, log *slog.Logger) (api.NoticeReceiver, error) {
	sources := map[string]payments.NoticeSource{}
	for _, kind := range []string{"stripe", "toss"} {
		if (kind == "stripe" && cfg.StripeWebhookSecret == "") || (kind == "toss" && cfg.TossSecretKey == "") {
			continue
		}
		c := cfg
		c.PSP = kind
		a, err := newPSP(c)
		if err != nil {
			return nil, err
		}
		reader, ok := a.(psp.NoticeReader)
		if !ok {
			return nil, fmt.Errorf("the %s adapter reads no notifications", kind)
		}
		sources[kind] = payments.NoticeSource{PSP: payments.PSPName(a.Capabilities()), Reader: reader}
	}
	if len(sources) == 0 {
		return nil, nil
	}
	return payments.NewNotices(st, sources, payments.NoticeConfig{PSPTimeout: cfg.PSPTimeout, Logger: log, Hasher: cfg.hasher()}), nil
}

func runServe(ctx context.Context, cfg Config, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("serve", "gateway serve", stderr)
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	if err := cfg.requireDSN(); err != nil {
		return err
	}
	return serve(ctx, cfg, newLogger(cfg, stderr), nil)
}

// serve runs the API until ctx ends, then drains in-flight requests. ready,
// when not nil, receives the bound address once the listener is open.
func serve(ctx context.Context, cfg Config, log *slog.Logger, ready func(addr string)) error {
	if cfg.AutoMigrate {
		if err := db.MigrateUp(cfg.DatabaseDSN); err != nil {
			return err
		}
	}
	dbx, err := openDB(ctx, cfg)
	if err != nil {
		return err
	}
	defer dbx.Close()
	st := store.New(dbx)
	if err := st.CausalReads(ctx); err != nil {
		return err
	}
	reg := newRegistry()
	m := metrics.New(reg)
	psps, err := newPSPs(cfg, func(a psp.Adapter) psp.Adapter { return metrics.InstrumentPSP(a, m) })
	if err != nil {
		return err
	}
	// Leases are judged on the database's clock; a replica whose own clock
	// strays from it anyway is taken out of service until it agrees again.
	guard := db.NewClockGuard(dbx, cfg.MaxClockSkew, nil, m.ClockSkew, log)
	if err := guard.Check(ctx); err != nil {
		return err
	}
	guardCtx, stopGuard := context.WithCancel(context.Background())
	defer stopGuard()
	go guard.Run(guardCtx, clockCheckEvery)
	svc := newService(cfg, st, psps, log, m, guard.Err)
	apiOpts := api.Options{
		MaxBodyBytes:  cfg.MaxBodyBytes,
		RatePerSecond: cfg.RatePerSecond,
		RateBurst:     cfg.RateBurst,
		FlowTimeout:   cfg.Lease + cfg.InFlightWait + cfg.PSPTimeout,
		Observer:      m,
		Logger:        log,
	}
	if cfg.AdminAddr == "" {
		apiOpts.Metrics = metrics.Handler(reg)
	} else {
		stopAdmin, err := serveAdmin(cfg.AdminAddr, metrics.Handler(reg), log)
		if err != nil {
			return err
		}
		defer stopAdmin()
	}
	if apiOpts.Notices, err = newNotices(cfg, st, log); err != nil {
		return err
	}
	auth := payments.NewAuth(st, payments.AuthConfig{CacheTTL: cfg.AuthCacheTTL})
	handler := api.NewHandler(svc, auth, readiness{st: st, guard: guard}, apiOpts)

	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		// A request may wait for the PSP and for a duplicate in flight.
		WriteTimeout:   cfg.Lease + cfg.InFlightWait + cfg.PSPTimeout + 5*time.Second,
		IdleTimeout:    90 * time.Second,
		MaxHeaderBytes: 32 << 10,
		ErrorLog:       slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	log.Info("gateway listening", "addr", ln.Addr().String(), "psp", cfg.PSP,
		"database", maskDSN(cfg.DatabaseDSN))
	if ready != nil {
		ready(ln.Addr().String())
	}
	stopReconciler := startReconciler(cfg, dbx, psps, guard.Err, log, m)
	defer stopReconciler()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	// The reconciler first (its pass ends and gives back what it claimed),
	// then no charge that has not left yet leaves; what is in flight finishes.
	stopReconciler()
	svc.Drain()
	log.Info("shutting down: draining in-flight requests", "timeout", cfg.ShutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("gateway stopped")
	return nil
}

func runMigrate(cfg Config, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("migrate", "gateway migrate up|down|version", stderr)
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return usageError{"migrate needs exactly one of: up, down, version"}
	}
	switch fs.Arg(0) {
	case "up", "down", "version":
	default:
		fs.Usage()
		return usageError{fmt.Sprintf("unknown migrate action %q; use up, down or version", fs.Arg(0))}
	}
	if err := cfg.requireDSN(); err != nil {
		return err
	}
	mg, err := db.NewMigrator(cfg.DatabaseDSN)
	if err != nil {
		return err
	}
	defer mg.Close()
	switch fs.Arg(0) {
	case "up":
		if err := mg.Up(); err != nil {
			return err
		}
	case "down":
		if err := mg.Down(); err != nil {
			return err
		}
	}
	v, dirty, err := mg.Version()
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "schema version %d", v)
	if dirty {
		fmt.Fprint(stdout, " (dirty: a migration failed halfway; fix it by hand, then force the version)")
	}
	fmt.Fprintln(stdout)
	return nil
}

const merchantsUsage = `Usage: gateway merchants create --name NAME
       gateway merchants keys create --merchant MERCHANT_ID
       gateway merchants keys revoke --merchant MERCHANT_ID --prefix sk_XXXXXXXX
       gateway merchants keys list --merchant MERCHANT_ID`

func runMerchants(ctx context.Context, cfg Config, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "keys" {
		return runKeys(ctx, cfg, args[1:], stdout, stderr)
	}
	if len(args) == 0 || args[0] != "create" {
		fmt.Fprintln(stderr, merchantsUsage)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			return nil
		}
		return usageError{"merchants needs a subcommand: create or keys"}
	}
	fs := newFlags("merchants create", "gateway merchants create --name NAME", stderr)
	name := fs.String("name", "", "the merchant's display name (required)")
	if help, err := parseFlags(fs, args[1:]); help || err != nil {
		return err
	}
	if *name == "" || fs.NArg() > 0 {
		fs.Usage()
		return usageError{"merchants create needs --name NAME and nothing else"}
	}
	return withDB(ctx, cfg, func(dbx *sqlx.DB) error {
		m, key, err := createMerchant(ctx, dbx, *name)
		if err != nil {
			return err
		}
		return json.NewEncoder(stdout).Encode(map[string]string{"merchant_id": m.ID, "api_key": key.Plaintext})
	})
}

// runKeys manages API keys: several may be active at once, so a merchant
// rotates by creating a new key, deploying it, then revoking the old one.
func runKeys(ctx context.Context, cfg Config, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || (args[0] != "create" && args[0] != "revoke" && args[0] != "list") {
		fmt.Fprintln(stderr, merchantsUsage)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
			return nil
		}
		return usageError{"merchants keys needs a subcommand: create, revoke or list"}
	}
	action := args[0]
	fs := newFlags("merchants keys "+action, "gateway merchants keys "+action+" --merchant MERCHANT_ID", stderr)
	merchant := fs.String("merchant", "", "the merchant's id (required)")
	prefix := fs.String("prefix", "", "revoke: the key's visible prefix, e.g. sk_ab12cd34 (required)")
	if help, err := parseFlags(fs, args[1:]); help || err != nil {
		return err
	}
	if *merchant == "" || fs.NArg() > 0 || (action == "revoke") != (*prefix != "") {
		fs.Usage()
		return usageError{"merchants keys " + action + " needs --merchant" + map[bool]string{true: " and --prefix", false: ""}[action == "revoke"]}
	}
	return withAdmin(ctx, cfg, func(adm *payments.Admin) error {
		switch action {
		case "create":
			key, err := adm.CreateAPIKey(ctx, *merchant)
			if err != nil {
				return errors.New(describe(err))
			}
			return json.NewEncoder(stdout).Encode(map[string]string{"merchant_id": *merchant, "api_key": key.Plaintext, "prefix": key.Prefix})
		case "revoke":
			if err := adm.RevokeAPIKey(ctx, *merchant, *prefix); err != nil {
				return errors.New(describe(err))
			}
			fmt.Fprintf(stdout, "revoked %s of merchant %s (replicas stop accepting it within GATEWAY_AUTH_CACHE_TTL)\n", *prefix, *merchant)
			return nil
		}
		keys, err := adm.APIKeys(ctx, *merchant)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(stdout, 2, 8, 2, ' ', 0)
		fmt.Fprintln(tw, "PREFIX\tCREATED\tREVOKED")
		for _, k := range keys {
			revoked := "-"
			if !k.RevokedAt.IsZero() {
				revoked = k.RevokedAt.Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", k.Prefix, k.CreatedAt.Format(time.RFC3339), revoked)
		}
		return tw.Flush()
	})
}

func createMerchant(ctx context.Context, dbx *sqlx.DB, name string) (payments.Merchant, payments.APIKey, error) {
	return payments.NewAdmin(store.New(dbx), payments.AdminConfig{}).CreateMerchant(ctx, name)
}
