package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"gateway/mysql"
	"gateway/mysql/localdb"
	"gateway/psp/fake/fakeserver"
)

// env is everything a run starts, and how to take it down again.
type env struct {
	opts options
	say  func(format string, args ...any)
	dir  string // temporary files: the binary, the logs (unless --log-dir), the private server's data

	serverCfg *gomysql.Config // the MariaDB server, no database selected
	dbName    string
	dsn       string   // direct, with the database selected
	db        *sqlx.DB // direct pool for the checks
	dropDB    func() error
	stopDB    func() error

	bin string

	psp      *fakeserver.Server
	pspSrv   *http.Server
	pspURL   string // direct, for the admin API
	pspProxy *faultProxy
	// The second PSP (--psps 2): the account fake_b; the first is fake_a.
	psp2      *fakeserver.Server
	psp2Srv   *http.Server
	psp2URL   string
	psp2Proxy *faultProxy

	dbProxies []*faultProxy // one per replica, so that one replica can be partitioned
	replicas  []*replica
	merchants []merchant
	logDir    string

	cc *clusterChaos // --cluster: the Galera cluster and its faults

	hooks *hooks // the merchants' webhook receiver (webhooks.go)
}

// merchant is one merchant created for the run.
type merchant struct {
	ID     string `json:"merchant_id"`
	APIKey string `json:"api_key"`
}

// setup starts the database, the fake PSP, the proxies and the replicas.
// On error, whatever was started is already taken down.
func setup(ctx context.Context, opts options, getenv func(string) string, say func(string, ...any)) (_ *env, err error) {
	e := &env{opts: opts, say: say}
	defer func() {
		if err != nil {
			e.teardown(false)
		}
	}()
	if e.dir, err = os.MkdirTemp("", "gateway-chaos-"); err != nil {
		return nil, err
	}
	e.logDir = opts.logDir
	if e.logDir == "" {
		e.logDir = filepath.Join(e.dir, "logs")
	}
	if err := os.MkdirAll(e.logDir, 0o755); err != nil {
		return nil, err
	}

	// The build and the database start take the longest; run them side by side.
	built := make(chan error, 1)
	go func() {
		if opts.gatewayBin != "" {
			e.bin = opts.gatewayBin
			built <- nil
			return
		}
		bin, berr := buildGateway(ctx, e.dir)
		e.bin = bin
		built <- berr
	}()
	dbErr := e.startDatabase(ctx, getenv)
	if berr := <-built; berr != nil || dbErr != nil {
		return nil, errors.Join(dbErr, berr)
	}
	say("gateway binary %s", e.bin)

	if e.psp, e.pspSrv, e.pspURL, err = e.startPSP(e.opts.seed); err != nil {
		return nil, err
	}
	if e.pspProxy, err = newFaultProxy("psp", strings.TrimPrefix(e.pspURL, "http://"), opts.seed^0xa5a5); err != nil {
		return nil, err
	}
	if opts.psps == 2 {
		if e.psp2, e.psp2Srv, e.psp2URL, err = e.startPSP(e.opts.seed ^ 0x5eed); err != nil {
			return nil, err
		}
		if e.psp2Proxy, err = newFaultProxy("psp2", strings.TrimPrefix(e.psp2URL, "http://"), opts.seed^0x5a5a); err != nil {
			return nil, err
		}
		say("second fake PSP on %s (proxy %s): accounts fake_a and fake_b, each merchant's route starting at one of them", e.psp2URL, e.psp2Proxy.addr)
	}
	for i := range opts.replicas {
		upstream := e.serverCfg.Addr
		if e.cc != nil {
			upstream = e.cc.c.Node(e.nodeOf(i)).Addr()
		}
		p, err := newFaultProxy(fmt.Sprintf("db%d", i), upstream, opts.seed+uint64(i)*7919)
		if err != nil {
			return nil, err
		}
		p.sniff = true
		e.dbProxies = append(e.dbProxies, p)
	}
	if e.cc != nil {
		var to []string
		for i, p := range e.dbProxies {
			to = append(to, fmt.Sprintf("replica %d → %s → node%d %s", i, p.addr, e.nodeOf(i), p.upstream))
		}
		say("fake PSP on %s (proxy %s); Galera cluster %s: %s", e.pspURL, e.pspProxy.addr, e.cc.c.Name(), strings.Join(to, ", "))
	} else {
		say("fake PSP on %s (proxy %s); MariaDB %s via proxies %s", e.pspURL, e.pspProxy.addr, e.serverCfg.Addr, proxyAddrs(e.dbProxies))
	}

	for i := range opts.merchants {
		m, err := e.createMerchant(ctx, fmt.Sprintf("chaos merchant %d", i+1))
		if err != nil {
			return nil, err
		}
		e.merchants = append(e.merchants, m)
	}
	if !opts.throughput {
		if e.hooks, err = e.startWebhooks(ctx); err != nil {
			return nil, err
		}
	}
	for i := range opts.replicas {
		r, err := e.newReplica(i)
		if err != nil {
			return nil, err
		}
		e.replicas = append(e.replicas, r)
	}
	readyCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, r := range e.replicas {
		if err := r.ensureUp(readyCtx); err != nil {
			return nil, err
		}
	}
	say("%d replicas ready: %s; %d merchants", len(e.replicas), replicaAddrs(e.replicas), len(e.merchants))
	return e, nil
}

func proxyAddrs(ps []*faultProxy) string {
	var s []string
	for _, p := range ps {
		s = append(s, p.addr)
	}
	return strings.Join(s, ", ")
}

func replicaAddrs(rs []*replica) string {
	var s []string
	for _, r := range rs {
		s = append(s, r.addr)
	}
	return strings.Join(s, ", ")
}

// startDatabase creates a fresh, migrated database: on the server named by
// GATEWAY_TEST_DSN (dropped afterwards), or on a private MariaDB in the
// temporary directory (stopped and removed afterwards).
func (e *env) startDatabase(ctx context.Context, getenv func(string) string) error {
	if e.opts.cluster {
		return e.startCluster(ctx)
	}
	serverDSN := getenv("GATEWAY_TEST_DSN")
	if serverDSN == "" {
		dir := filepath.Join(e.dir, "mariadb")
		e.say("starting a private MariaDB in %s", dir)
		srv, err := localdb.Start(ctx, localdb.Options{DataDir: dir})
		if err != nil {
			return fmt.Errorf("no GATEWAY_TEST_DSN set and a private MariaDB could not start: %w", err)
		}
		e.stopDB = srv.Stop
		serverDSN = srv.DSN("")
	}
	return e.createDatabase(ctx, serverDSN, true)
}

// createDatabase creates and migrates the run's database on serverDSN's
// server, and drops it on teardown when drop is set (a throwaway server
// goes as a whole).
func (e *env) createDatabase(ctx context.Context, serverDSN string, drop bool) error {
	cfg, err := gomysql.ParseDSN(serverDSN)
	if err != nil {
		return fmt.Errorf("GATEWAY_TEST_DSN: %w", err)
	}
	if cfg.Net != "tcp" {
		return fmt.Errorf("the database must be reached over TCP to put the fault proxy in front of it, not %q", cfg.Net)
	}
	cfg.DBName = ""
	e.serverCfg = cfg
	admin, err := mysql.Open(ctx, cfg.FormatDSN(), mysql.PoolOptions{MaxOpen: 2})
	if err != nil {
		return err
	}
	var nb [6]byte
	_, _ = rand.Read(nb[:])
	e.dbName = "gwchaos_" + hex.EncodeToString(nb[:])
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+e.dbName+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"); err != nil {
		admin.Close()
		return fmt.Errorf("create database: %w", err)
	}
	e.dropDB = func() error {
		if !drop {
			// The server goes as a whole; its connections may be long broken.
			_ = admin.Close()
			return nil
		}
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := admin.ExecContext(cctx, "DROP DATABASE IF EXISTS `"+e.dbName+"`")
		return errors.Join(err, admin.Close())
	}
	e.dsn = e.dsnVia(cfg.Addr)
	if err := mysql.MigrateUp(e.dsn); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if e.opts.cluster {
		// The checks read on one node what replicas wrote on others.
		e.db, err = openCausal(ctx, e.dsn)
		return err
	}
	e.db, err = mysql.Open(ctx, e.dsn, mysql.PoolOptions{MaxOpen: 8, MaxIdle: 8})
	return err
}

// dsnVia is the run's database reached at addr (the server, or a proxy).
func (e *env) dsnVia(addr string) string {
	c := e.serverCfg.Clone()
	c.Addr = addr
	c.DBName = e.dbName
	return c.FormatDSN()
}

// buildGateway compiles cmd/gateway into dir.
func buildGateway(ctx context.Context, dir string) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out := filepath.Join(dir, "gateway")
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", out, "gateway/cmd/gateway")
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build gateway/cmd/gateway (run from inside the module): %w\n%s", err, buf.String())
	}
	return out, nil
}

// startPSP serves the fake PSP in-process on a loopback port.
func (e *env) startPSP(seed uint64) (*fakeserver.Server, *http.Server, string, error) {
	p, err := fakeserver.New(fakeserver.Options{Seed: seed, HoldMax: 30 * time.Second, AuthorizationValidity: e.opts.authValidity})
	if err != nil {
		return nil, nil, "", err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, "", err
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return p, srv, "http://" + ln.Addr().String(), nil
}

// pspAccounts is GATEWAY_PSP_ACCOUNTS_JSON with two PSPs: fake_a and
// fake_b, each through its proxy; merchant i's route starts at fake_a
// when i is even, at fake_b when it is odd, and fails over to the other.
func (e *env) pspAccounts() string {
	type entry struct {
		Account string `json:"account"`
	}
	ab, ba := []entry{{"fake_a"}, {"fake_b"}}, []entry{{"fake_b"}, {"fake_a"}}
	merchants := map[string][]entry{}
	for i, m := range e.merchants {
		merchants[m.ID] = ab
		if i%2 == 1 {
			merchants[m.ID] = ba
		}
	}
	window := e.opts.creationWindow.String()
	doc := map[string]any{
		"accounts": map[string]any{
			"fake_a": map[string]string{"adapter": "fakehttp", "url": "http://" + e.pspProxy.addr, "creation_window": window},
			"fake_b": map[string]string{"adapter": "fakehttp", "url": "http://" + e.psp2Proxy.addr, "creation_window": window},
		},
		"routes":  map[string]any{"default": ab, "merchants": merchants},
		"breaker": map[string]any{"window": "5s", "min_calls": 5, "failure_percent": 50, "cooldown": "2s"},
	}
	b, _ := json.Marshal(doc)
	return string(b)
}

// firstAccount is the account merchant i's route starts at.
func firstAccount(i int) string {
	if i%2 == 1 {
		return "fake_b"
	}
	return "fake_a"
}

// createMerchant runs `gateway merchants create`, as an operator would.
func (e *env) createMerchant(ctx context.Context, name string) (merchant, error) {
	cmd := exec.CommandContext(ctx, e.bin, "merchants", "create", "--name", name)
	cmd.Env = append(baseEnv(), "GATEWAY_DATABASE_DSN="+e.dsn)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return merchant{}, fmt.Errorf("gateway merchants create: %w\n%s", err, stderr.String())
	}
	var m merchant
	if err := json.Unmarshal(out, &m); err != nil || m.ID == "" || m.APIKey == "" {
		return merchant{}, fmt.Errorf("gateway merchants create printed %q: %v", out, err)
	}
	return m, nil
}

// baseEnv is this process's environment without any GATEWAY_* setting, so
// that nothing of the caller's configuration leaks into the replicas.
func baseEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GATEWAY_") {
			out = append(out, kv)
		}
	}
	return out
}

func (e *env) newReplica(i int) (*replica, error) {
	addr, err := lowPort()
	if err != nil {
		return nil, err
	}
	o := e.opts
	vars := map[string]string{
		"GATEWAY_ADDR":                   addr,
		"GATEWAY_DATABASE_DSN":           e.replicaDSN(i),
		"GATEWAY_PSP":                    "fakehttp",
		"GATEWAY_PSP_URL":                "http://" + e.pspProxy.addr,
		"GATEWAY_PSP_CREATION_WINDOW":    o.creationWindow.String(),
		"GATEWAY_LEASE":                  o.lease.String(),
		"GATEWAY_PSP_TIMEOUT":            o.pspTimeout.String(),
		"GATEWAY_INFLIGHT_WAIT":          "1s",
		"GATEWAY_RECONCILE_SCHEDULE":     "@every " + o.reconcileEvery.String(),
		"GATEWAY_RECONCILE_BACKOFF":      "1s",
		"GATEWAY_RECONCILE_BACKOFF_MAX":  "4s",
		"GATEWAY_RECONCILE_MAX_ATTEMPTS": "10",
		"GATEWAY_RATE_LIMIT":             "0",
		"GATEWAY_IDEMPOTENCY_RETENTION":  "720h",
		"GATEWAY_DB_MAX_OPEN_CONNS":      "16",
		"GATEWAY_DB_MAX_IDLE_CONNS":      "16",
		"GATEWAY_SHUTDOWN_TIMEOUT":       "8s",
		"GATEWAY_LOG_FORMAT":             "json",
		"GATEWAY_LOG_LEVEL":              "info",
	}
	if e.psp2 != nil {
		vars["GATEWAY_PSP_ACCOUNTS_JSON"] = e.pspAccounts()
	}
	for k, v := range e.webhookEnv() {
		vars[k] = v
	}
	for k, v := range o.gatewayEnv {
		vars[k] = v
	}
	for k, v := range o.replicaEnv[i] {
		vars[k] = v
	}
	envv := baseEnv()
	for k, v := range vars {
		envv = append(envv, k+"="+v)
	}
	return &replica{
		id:      i,
		addr:    addr,
		bin:     e.bin,
		env:     envv,
		logPath: filepath.Join(e.logDir, fmt.Sprintf("replica-%d.log", i)),
	}, nil
}

// replicaDSN is replica i's database, through its proxy.
func (e *env) replicaDSN(i int) string {
	c := e.serverCfg.Clone()
	c.Addr = e.dbProxies[i].addr
	c.DBName = e.dbName
	if e.opts.syncWait > 0 {
		if c.Params == nil {
			c.Params = map[string]string{}
		}
		c.Params["wsrep_sync_wait"] = strconv.Itoa(e.opts.syncWait)
	}
	return c.FormatDSN()
}

// teardown stops everything; keepLogs leaves the temporary directory (with
// the replicas' logs) in place for a post-mortem.
func (e *env) teardown(keepLogs bool) {
	var wg = make(chan struct{}, len(e.replicas))
	for _, r := range e.replicas {
		go func() { r.stop(10 * time.Second); wg <- struct{}{} }()
	}
	for range e.replicas {
		<-wg
	}
	if e.hooks != nil {
		e.hooks.stop()
	}
	for _, p := range e.dbProxies {
		p.close()
	}
	if e.pspProxy != nil {
		e.pspProxy.close()
	}
	if e.psp2Proxy != nil {
		e.psp2Proxy.close()
	}
	for _, p := range []struct {
		s   *fakeserver.Server
		srv *http.Server
	}{{e.psp, e.pspSrv}, {e.psp2, e.psp2Srv}} {
		if p.s != nil {
			p.s.Close()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = p.srv.Shutdown(sctx)
			cancel()
		}
	}
	if e.db != nil {
		e.db.Close()
	}
	if keepLogs && e.opts.keepDB && e.stopDB == nil {
		e.say("database %s kept for a look (--keep-db): drop it when done", e.dbName)
	} else if e.dropDB != nil {
		if err := e.dropDB(); err != nil {
			e.say("drop database %s: %v", e.dbName, err)
		}
	}
	if e.cc != nil && keepLogs {
		if err := e.cc.c.CopyLogs(e.logDir); err != nil {
			e.say("copy the nodes' error logs: %v", err)
		}
	}
	if e.stopDB != nil {
		if err := e.stopDB(); err != nil {
			e.say("stop MariaDB: %v", err)
		}
	}
	if e.dir == "" {
		return
	}
	if keepLogs && e.opts.logDir == "" {
		// Keep the logs, drop the rest (the binary, the server's data).
		_ = os.RemoveAll(filepath.Join(e.dir, "mariadb"))
		_ = os.Remove(filepath.Join(e.dir, "gateway"))
		e.say("replica logs kept in %s", e.logDir)
		return
	}
	_ = os.RemoveAll(e.dir)
}
