package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"gateway/api"
	"gateway/idemkeys"
	"gateway/listings"
	"gateway/merchants"
	"gateway/metrics"
	"gateway/mysql"
	"gateway/mysql/localdb"
	"gateway/payments"
	"gateway/psp"
	"gateway/psp/fake"
)

// The gateway's settings are those `gateway serve` has by default
// (cmd/gateway/config.go); rate limiting is off so that the bench measures
// the payment path, not the token bucket.

// poolOptions is GATEWAY_DB_MAX_OPEN_CONNS, GATEWAY_DB_MAX_IDLE_CONNS and
// serve's connection lifetime: every pool of the bench, floor included, has them.
func poolOptions() mysql.PoolOptions {
	return mysql.PoolOptions{MaxOpen: 32, MaxIdle: 32, MaxLifetime: 30 * time.Minute}
}

// serviceConfig is the flow's settings at their defaults, as serve has them.
func serviceConfig() payments.Config {
	return payments.Config{
		Lease:            payments.DefaultLease,
		PSPTimeout:       payments.DefaultPSPTimeout,
		InFlightWait:     payments.DefaultInFlightWait,
		ReplayCacheBytes: payments.DefaultReplayCacheBytes,
		Retention:        payments.DefaultRetention,
	}
}

const maxBodyBytes = 65536

// bench is everything one run holds.
type bench struct {
	opts  options
	prog  *progress
	dbEnv *database
	gw    *gateway
	floor *sqlx.DB // the raw-SQL loops' own pool, opened like the gateway's
	// floorResp is the response body the floor stores, of the gateway's size.
	floorResp idemkeys.Response
	// floorRefundResp is a refund's, of the gateway's size.
	floorRefundResp idemkeys.Response
	// floorAuthResp and floorCaptureResp are a manual payment's
	// authorization's and capture's.
	floorAuthResp, floorCaptureResp idemkeys.Response
	// floorFP stands in for a request's fingerprint: 32 bytes, like every one.
	floorFP [32]byte
	nonce   string // keeps keys of this run apart from any other run's
	label   bool   // tag server goroutines with pprof labels (only when profiling)
	hc      *http.Client
	rss     rssMeter
}

// database is the throwaway database of a run and how to get rid of it.
type database struct {
	dsn     string // with the database selected
	base    string // the server, no database selected
	name    string
	private bool
	dataDir string // the private server's
	pid     int    // the server's process on this machine; 0 when unknown
	info    dbInfo
	cleanup func() error
}

type dbInfo struct {
	Server           string `json:"server"`
	Version          string `json:"version"`
	FlushLogAtCommit int    `json:"innodb_flush_log_at_trx_commit"`
	BufferPoolBytes  int64  `json:"innodb_buffer_pool_size"`
	LogBin           int    `json:"log_bin"`
}

func setup(ctx context.Context, opts options, getenv func(string) string, prog *progress) (*bench, error) {
	var nb [4]byte
	_, _ = rand.Read(nb[:])
	b := &bench{opts: opts, prog: prog, nonce: hex.EncodeToString(nb[:]),
		label: opts.cpuProfile != "" || opts.pprofAddr != ""}
	pool, err := privateBufferPool(opts.large, getenv, totalMemory())
	if err != nil {
		return nil, err
	}
	dbe, err := openDatabase(ctx, getenv, prog, pool)
	if err != nil {
		return nil, err
	}
	b.dbEnv = dbe
	fail := func(err error) (*bench, error) { return nil, errors.Join(err, b.close()) }
	b.gw, err = startGateway(ctx, dbe.dsn, opts.gatewayLog, b.label)
	if err != nil {
		return fail(err)
	}
	b.floor, err = mysql.Open(ctx, dbe.dsn, poolOptions())
	if err != nil {
		return fail(err)
	}
	b.renderFloorResponses(b.gw.merchant.ID)
	if _, err := b.floor.ExecContext(ctx, floorMinimalTable); err != nil {
		return fail(err)
	}
	b.floorFP = sha256.Sum256([]byte("floor"))
	return b, nil
}

// renderFloorResponses renders the answers the floor stores, once.
func (b *bench) renderFloorResponses(merchantID string) {
	b.floorResp = floorResponse(merchantID)
	b.floorRefundResp = floorRefundResponse(merchantID)
	b.floorAuthResp = floorManualResponse(merchantID, false)
	b.floorCaptureResp = floorManualResponse(merchantID, true)
}

func (b *bench) close() error {
	var errs []error
	if b.gw != nil {
		errs = append(errs, b.gw.close())
	}
	if b.floor != nil {
		errs = append(errs, b.floor.Close())
	}
	if b.dbEnv != nil {
		errs = append(errs, b.dbEnv.cleanup())
	}
	return errors.Join(errs...)
}

// openDatabase creates and migrates a fresh database: on the server named by
// GATEWAY_BENCH_DSN or GATEWAY_TEST_DSN (dropped afterwards), or on a private
// MariaDB in a temporary directory (removed afterwards) whose buffer pool
// is bufferPool bytes (0: the private server's default, 128 MiB).
func openDatabase(ctx context.Context, getenv func(string) string, prog *progress, bufferPool int64) (*database, error) {
	d := &database{cleanup: func() error { return nil }}
	var serverDSN string
	var stopServer func() error
	switch {
	case getenv("GATEWAY_BENCH_DSN") != "":
		serverDSN = getenv("GATEWAY_BENCH_DSN")
	case getenv("GATEWAY_TEST_DSN") != "":
		serverDSN = getenv("GATEWAY_TEST_DSN")
	default:
		dir, err := os.MkdirTemp("", "gateway-bench-")
		if err != nil {
			return nil, err
		}
		shown := bufferPool
		if shown == 0 {
			shown = 128 << 20 // the private server's default
		}
		prog.line("starting a private MariaDB in %s, buffer pool %.0f MiB", dir, mib(shown))
		srv, err := localdb.Start(ctx, localdb.Options{DataDir: dir, BufferPool: bufferPool})
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("no GATEWAY_BENCH_DSN or GATEWAY_TEST_DSN set and a private MariaDB could not start: %w", err)
		}
		d.private, d.dataDir = true, dir
		serverDSN = srv.DSN("")
		stopServer = func() error { return errors.Join(srv.Stop(), os.RemoveAll(dir)) }
	}
	cfg, err := gomysql.ParseDSN(serverDSN)
	if err != nil {
		return nil, fmt.Errorf("server DSN: %w", err)
	}
	cfg.DBName = ""
	base := cfg.FormatDSN()
	d.base = base
	var nb [6]byte
	_, _ = rand.Read(nb[:])
	d.name = "gwbench_" + hex.EncodeToString(nb[:])
	admin, err := mysql.Open(ctx, base, mysql.PoolOptions{MaxOpen: 2})
	if err != nil {
		if stopServer != nil {
			err = errors.Join(err, stopServer())
		}
		return nil, err
	}
	d.cleanup = func() error {
		// The context of the run may be over; dropping must still happen.
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := admin.ExecContext(cctx, "DROP DATABASE IF EXISTS `"+d.name+"`")
		err = errors.Join(err, admin.Close())
		if stopServer != nil {
			err = errors.Join(err, stopServer())
		}
		return err
	}
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+d.name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"); err != nil {
		return nil, errors.Join(fmt.Errorf("create database: %w", err), d.cleanup())
	}
	cfg.DBName = d.name
	d.dsn = cfg.FormatDSN()
	if err := mysql.MigrateUp(d.dsn); err != nil {
		return nil, errors.Join(fmt.Errorf("migrate: %w", err), d.cleanup())
	}
	d.info.Server = cfg.Addr
	if d.private {
		d.info.Server = "private MariaDB on " + cfg.Addr
	}
	var logBin sqlNullInt
	if err := admin.QueryRowxContext(ctx, `SELECT @@version, @@innodb_flush_log_at_trx_commit, @@innodb_buffer_pool_size, @@log_bin`).
		Scan(&d.info.Version, &d.info.FlushLogAtCommit, &d.info.BufferPoolBytes, &logBin); err != nil {
		return nil, errors.Join(fmt.Errorf("read server settings: %w", err), d.cleanup())
	}
	d.info.LogBin = int(logBin)
	d.pid = findDBPID(d.dataDir, cfg.Addr)
	prog.line("database %s on %s (%s)", d.name, d.info.Server, d.info.Version)
	return d, nil
}

// sqlNullInt reads an integer system variable that may come back as text.
type sqlNullInt int64

func (n *sqlNullInt) Scan(v any) error {
	switch x := v.(type) {
	case nil:
		*n = 0
	case int64:
		*n = sqlNullInt(x)
	case []byte:
		var i int64
		if _, err := fmt.Sscan(string(x), &i); err != nil {
			return err
		}
		*n = sqlNullInt(i)
	default:
		return fmt.Errorf("unexpected %T", v)
	}
	return nil
}

// gateway is the real stack, wired as `gateway serve` wires it, serving on
// a loopback listener.
type gateway struct {
	url   string
	dbx   *sqlx.DB
	store *mysql.Store
	fake  *fake.PSP
	// pspLatency is what every gateway phase sets on the fake after emptying
	// its ledger (which would otherwise grow into the phases' memory).
	pspLatency time.Duration
	charges    *chargeCounter
	merchant   merchants.Merchant // every scenario's traffic but the hammering
	apiKey     string
	// hammerer is the merchant whose client hammers one key: another
	// merchant's misbehaving integration, which must not starve the rest.
	hammerer    merchants.Merchant
	hammererKey string
	srv         *http.Server
	scenario    atomic.Pointer[string] // for pprof labels of server goroutines
	logw        io.Writer              // its log, which another gateway of the run may share
	keyLookups  *keyLookups            // the API key lookups its auth cache missed
	logFile     *os.File               // closed with it when its own
}

func startGateway(ctx context.Context, dsn, logPath string, label bool) (*gateway, error) {
	var logw io.Writer = io.Discard
	var logFile *os.File
	if logPath != "" {
		f, err := os.Create(logPath)
		if err != nil {
			return nil, err
		}
		logFile, logw = f, f
	}
	f := fake.New()
	charges := &chargeCounter{PSP: f}
	g, err := startGatewayWith(ctx, dsn, logw, label, func(instrument func(psp.Adapter) psp.Adapter) (*payments.PSPs, error) {
		return payments.OnePSP(instrument(charges)), nil
	})
	if err != nil {
		if logFile != nil {
			err = errors.Join(err, logFile.Close())
		}
		return nil, err
	}
	g.fake, g.charges, g.logFile = f, charges, logFile
	return g, nil
}

// accountsFunc builds a gateway's PSP accounts from its adapters, each
// wrapped by instrument as serve wraps them (metrics.InstrumentPSP).
type accountsFunc func(instrument func(psp.Adapter) psp.Adapter) (*payments.PSPs, error)

// startGatewayWith starts the stack as serve wires it, with the PSP
// accounts that accounts builds (their breakers watched on /metrics, as
// serve does), logging to logw; its merchants are its own.
func startGatewayWith(ctx context.Context, dsn string, logw io.Writer, label bool, accounts accountsFunc) (*gateway, error) {
	g := &gateway{logw: logw}
	// JSON at info level, as serve logs by default: the cost of formatting
	// every "payment settled" line and every request's access line is part of the path.
	log := slog.New(api.LogHandler(slog.NewJSONHandler(logw, &slog.HandlerOptions{Level: slog.LevelInfo})))
	dbx, err := mysql.Open(ctx, dsn, poolOptions())
	if err != nil {
		return nil, err
	}
	g.dbx = dbx
	g.store = mysql.NewStore(dbx)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := metrics.New(reg)
	psps, err := accounts(func(a psp.Adapter) psp.Adapter { return metrics.InstrumentPSP(a, m) })
	if err != nil {
		return nil, errors.Join(err, g.close())
	}
	if h := psps.Health(); h != nil {
		m.WatchBreakers(psps.Names(), h)
	}
	cfg := serviceConfig()
	cfg.Logger, cfg.Observer = log, m
	svc := payments.NewService(g.store, psps, cfg)
	g.keyLookups = &keyLookups{AuthStore: g.store}
	auth := merchants.NewAuth(g.keyLookups, merchants.AuthConfig{CacheTTL: merchants.DefaultAuthCacheTTL})
	handler := api.NewHandler(svc, auth, g.store, api.Options{
		Listings:     listings.New(g.store),
		MaxBodyBytes: maxBodyBytes,
		Observer:     m,
		Logger:       log,
	})
	for _, m := range []struct {
		name     string
		merchant *merchants.Merchant
		key      *string
	}{{"Bench merchant", &g.merchant, &g.apiKey}, {"Bench hammerer", &g.hammerer, &g.hammererKey}} {
		merchant, key, err := merchants.NewMerchant(m.name, time.Now())
		if err != nil {
			return nil, errors.Join(err, g.close())
		}
		if err := g.store.CreateMerchant(ctx, merchant, key); err != nil {
			return nil, errors.Join(err, g.close())
		}
		*m.merchant, *m.key = merchant, key.Plaintext
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, errors.Join(err, g.close())
	}
	g.url = "http://" + ln.Addr().String()
	// The server and listener the gateway runs in (framing watched, connections capped).
	g.srv = api.NewHTTPServer(handler, api.ServerOptions{
		WriteTimeout: cfg.PSPTimeout*2 + cfg.InFlightWait + 10*time.Second,
		Logger:       log,
	})
	if label {
		tracked := g.srv.ConnState
		g.srv.ConnState = func(c net.Conn, st http.ConnState) {
			tracked(c, st)
			g.labelConn(c, st)
		}
	}
	go func() { _ = g.srv.Serve(api.Listen(ln, api.ListenOptions{MaxConns: api.DefaultMaxConns(32)})) }()
	return g, nil
}

// labelConn tags a server connection's goroutine, as each of its requests
// starts, with role=server and the running scenario, so that a CPU profile
// can be focused on the gateway's side: reading, handling and answering.
func (g *gateway) labelConn(_ net.Conn, state http.ConnState) {
	if state != http.StateActive {
		return
	}
	sc := "none"
	if p := g.scenario.Load(); p != nil {
		sc = *p
	}
	// StateActive is reported on the connection's own goroutine.
	pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels("role", "server", "scenario", sc)))
}

func (g *gateway) close() error {
	var errs []error
	if g.srv != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		errs = append(errs, g.srv.Shutdown(ctx))
		cancel()
	}
	if g.dbx != nil {
		errs = append(errs, g.dbx.Close())
	}
	if g.logFile != nil {
		errs = append(errs, g.logFile.Close())
	}
	return errors.Join(errs...)
}

// keyLookups counts the API key lookups (one SELECT each) that the
// gateway's auth cache did not answer: every DefaultAuthCacheTTL, the
// requests in flight when its entry lapses each read the key.
type keyLookups struct {
	merchants.AuthStore
	n atomic.Int64
}

func (k *keyLookups) ActiveKeysByPrefix(ctx context.Context, prefix string) ([]merchants.StoredKey, []merchants.Merchant, error) {
	k.n.Add(1)
	return k.AuthStore.ActiveKeysByPrefix(ctx, prefix)
}

// chargeCounter counts the gateway's Charge calls for one watched order id.
// The fake deduplicates on order ids, so its ledger alone would hide a
// second Charge call for the same key; this counts what the gateway sent.
// It captures and voids as the fake does (a psp.Capturer).
type chargeCounter struct {
	*fake.PSP
	watch atomic.Pointer[string]
	calls atomic.Int64
}

var _ psp.Capturer = (*chargeCounter)(nil)

func (c *chargeCounter) Charge(ctx context.Context, req psp.ChargeRequest) (psp.Charge, error) {
	if w := c.watch.Load(); w != nil && *w == req.MerchantOrderID {
		c.calls.Add(1)
	}
	return c.PSP.Charge(ctx, req)
}

func (c *chargeCounter) watchOrder(orderID string) {
	c.calls.Store(0)
	c.watch.Store(&orderID)
}

// privateBufferPool is the buffer pool of the private MariaDB a run starts
// when no server is named: GATEWAY_BENCH_BUFFER_POOL (bytes, or with a
// K, M or G suffix) when set; with --large, a quarter of the machine's
// memory, at least 512 MiB and at most 4 GiB, as a deployment sizes its
// pool to its hot indexes; else 0 (the private server's 128 MiB).
func privateBufferPool(large bool, getenv func(string) string, memory int64) (int64, error) {
	if v := strings.TrimSpace(getenv("GATEWAY_BENCH_BUFFER_POOL")); v != "" {
		n, err := parseBytes(v)
		if err != nil || n < 5<<20 {
			return 0, fmt.Errorf("GATEWAY_BENCH_BUFFER_POOL=%q: want a size of at least 5M such as 512M or 4G", v)
		}
		return n, nil
	}
	if !large {
		return 0, nil
	}
	return min(max(memory/4, 512<<20), 4<<30), nil
}

// parseBytes reads 1073741824, 1024M, 1G (binary units; a trailing B or iB is allowed).
func parseBytes(v string) (int64, error) {
	s := strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(v), "B"), "I")
	mult := int64(1)
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'K':
			mult, s = 1<<10, s[:n-1]
		case 'M':
			mult, s = 1<<20, s[:n-1]
		case 'G':
			mult, s = 1<<30, s[:n-1]
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("not a size: %q", v)
	}
	return n * mult, nil
}

// totalMemory is the machine's memory in bytes (MemTotal of /proc/meminfo),
// 0 when unknown.
func totalMemory() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}
