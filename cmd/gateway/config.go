package main

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"gateway/idemkeys"
	"gateway/merchants"
	"gateway/mysql"
	"gateway/reconcile"
)

// The configuration is made of groups of flags, each flag also read from its
// GATEWAY_* variable (the flag wins). A command embeds the groups it needs,
// so its --help shows those and no others. Every group checks itself in
// check(); the command line's Validate runs the checks of every group the
// chosen command embeds and reports all problems at once.
//
// The names follow one rule: the variable GATEWAY_FOO_BAR is the flag
// --foo-bar. Defaults are written in the tags, and
// TestFlagDefaultsAreTheDomainsDefaults holds them to the Default*
// constants of the packages that own the settings (payments, reconcile,
// webhooks, api, merchants, mysql).

// checker is a group of settings that validates itself, alone and across its fields.
type checker interface {
	check() []error
}

// problem names a setting by its variable and its flag.
func problem(env, format string, args ...any) error {
	return fmt.Errorf("%s (%s) %s", env, flagOf(env), fmt.Sprintf(format, args...))
}

// flagOf is the flag of a variable: GATEWAY_FOO_BAR is --foo-bar.
func flagOf(env string) string {
	return "--" + strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(env, "GATEWAY_")), "_", "-")
}

// dsnConfig names the database.
type dsnConfig struct {
	DSN string `name:"database-dsn" env:"GATEWAY_DATABASE_DSN" placeholder:"DSN" group:"database" help:"MySQL/MariaDB DSN, e.g. user:pass@tcp(127.0.0.1:3306)/gateway (prefer the variable: arguments show in the process list)"`
}

func (c *dsnConfig) check() []error {
	if c.DSN == "" {
		return nil
	}
	if _, err := mysql.Config(c.DSN); err != nil {
		return []error{problem("GATEWAY_DATABASE_DSN", "is not a DSN such as user:pass@tcp(127.0.0.1:3306)/gateway: %v", err)}
	}
	return nil
}

// require is for the commands that cannot start a database of their own.
func (c *dsnConfig) require() []error {
	if c.DSN == "" {
		return []error{errors.New("GATEWAY_DATABASE_DSN is not set (nor --database-dsn); for example GATEWAY_DATABASE_DSN='root@tcp(127.0.0.1:3306)/gateway' (or use `gateway dev`, which starts a private MariaDB)")}
	}
	return nil
}

// poolConfig sizes the connection pool of a long-running process.
type poolConfig struct {
	MaxOpenConns int `name:"db-max-open-conns" env:"GATEWAY_DB_MAX_OPEN_CONNS" default:"32" group:"database" help:"most database connections the pool opens"`
	MaxIdleConns int `name:"db-max-idle-conns" env:"GATEWAY_DB_MAX_IDLE_CONNS" default:"32" group:"database" help:"idle database connections kept open"`
}

func (c *poolConfig) check() []error {
	var errs []error
	errs = positive(errs, "GATEWAY_DB_MAX_OPEN_CONNS", c.MaxOpenConns)
	errs = positive(errs, "GATEWAY_DB_MAX_IDLE_CONNS", c.MaxIdleConns)
	if c.MaxIdleConns > c.MaxOpenConns {
		errs = append(errs, fmt.Errorf("GATEWAY_DB_MAX_IDLE_CONNS (%d) must not exceed GATEWAY_DB_MAX_OPEN_CONNS (%d)", c.MaxIdleConns, c.MaxOpenConns))
	}
	return errs
}

// adminConfig is the separate listener for /metrics. The metrics are never
// served on the public address: they tell an outsider the traffic, the
// routes and the PSPs, and cost a scrape's work per request.
type adminConfig struct {
	AdminAddr string `name:"admin-addr" env:"GATEWAY_ADMIN_ADDR" placeholder:"HOST:PORT" group:"http" help:"serve /metrics (and /healthz, /readyz) on this address, kept off the public one: bind it to loopback or a private network (unset: no metrics are served)"`
}

func (c *adminConfig) check() []error {
	if c.AdminAddr == "" {
		return nil
	}
	return hostPort(nil, "GATEWAY_ADMIN_ADDR", c.AdminAddr)
}

// httpConfig is the public listener and what it allows each merchant.
type httpConfig struct {
	Addr             string        `name:"addr" env:"GATEWAY_ADDR" default:"127.0.0.1:8080" placeholder:"HOST:PORT" group:"http" help:"HTTP listen address"`
	Admin            adminConfig   `embed:""`
	AuthCacheTTL     time.Duration `name:"auth-cache-ttl" env:"GATEWAY_AUTH_CACHE_TTL" default:"2s" group:"http" help:"how long a replica trusts a verified API key without reading the database: a revoked key stops working on every replica within this time (at most 5s); 0s reads every time"`
	RateLimit        float64       `name:"rate-limit" env:"GATEWAY_RATE_LIMIT" default:"100" group:"http" help:"requests per second each merchant may send to one replica; 0 turns the limit off"`
	RateBurst        int           `name:"rate-burst" env:"GATEWAY_RATE_BURST" default:"200" group:"http" help:"requests a merchant may send at once above the rate"`
	AuthFailureRate  float64       `name:"auth-failure-rate" env:"GATEWAY_AUTH_FAILURE_RATE" default:"1" group:"http" help:"failed authentications per second one client address may make in the long run before it is answered 429; 0 turns the limit off"`
	AuthFailureBurst int           `name:"auth-failure-burst" env:"GATEWAY_AUTH_FAILURE_BURST" default:"20" group:"http" help:"failed authentications one client address may make at once"`
	TrustedProxies   []string      `name:"trusted-proxies" env:"GATEWAY_TRUSTED_PROXIES" sep:"," placeholder:"CIDR,…" group:"http" help:"addresses (CIDR) of the load balancers in front, whose X-Forwarded-For names the client (unset: the peer is the client)"`
	InFlightWait     time.Duration `name:"inflight-wait" env:"GATEWAY_INFLIGHT_WAIT" default:"2s" group:"http" help:"how long a duplicate request waits for the first one before answering 409"`
	MaxBodyBytes     int64         `name:"max-body-bytes" env:"GATEWAY_MAX_BODY_BYTES" default:"65536" group:"http" help:"largest accepted request body"`
	MaxConns         int           `name:"max-conns" env:"GATEWAY_MAX_CONNS" default:"0" group:"http" help:"most client connections open at once; at the cap an idle one is closed, or the next waits (0: derived from the open-files limit, leaving room for the database pool)"`
	IdleTimeout      time.Duration `name:"idle-timeout" env:"GATEWAY_IDLE_TIMEOUT" default:"30s" group:"http" help:"how long an idle keep-alive connection is kept open (behind a load balancer: above the balancer's own idle timeout)"`
	ShutdownTimeout  time.Duration `name:"shutdown-timeout" env:"GATEWAY_SHUTDOWN_TIMEOUT" default:"30s" group:"http" help:"how long in-flight requests may finish after SIGINT/SIGTERM; at least twice GATEWAY_PSP_TIMEOUT plus 5s"`
}

func (c *httpConfig) check() []error {
	errs := hostPort(nil, "GATEWAY_ADDR", c.Addr)
	if c.AuthCacheTTL < 0 || c.AuthCacheTTL > merchants.MaxAuthCacheTTL {
		errs = append(errs, problem("GATEWAY_AUTH_CACHE_TTL", "must be a duration from 0s to %s (a revoked key works that long on every replica)", merchants.MaxAuthCacheTTL))
	}
	if c.RateLimit < 0 {
		errs = append(errs, problem("GATEWAY_RATE_LIMIT", "must be a number ≥ 0"))
	}
	errs = positive(errs, "GATEWAY_RATE_BURST", c.RateBurst)
	if c.AuthFailureRate < 0 {
		errs = append(errs, problem("GATEWAY_AUTH_FAILURE_RATE", "must be a number ≥ 0"))
	}
	errs = positive(errs, "GATEWAY_AUTH_FAILURE_BURST", c.AuthFailureBurst)
	if _, err := c.trustedProxies(); err != nil {
		errs = append(errs, problem("GATEWAY_TRUSTED_PROXIES", "must list addresses or CIDR ranges such as 10.0.0.0/8: %v", err))
	}
	errs = positiveDuration(errs, "GATEWAY_INFLIGHT_WAIT", c.InFlightWait)
	if c.MaxBodyBytes < 1024 {
		errs = append(errs, problem("GATEWAY_MAX_BODY_BYTES", "must be an integer ≥ 1024"))
	}
	errs = positiveDuration(errs, "GATEWAY_IDLE_TIMEOUT", c.IdleTimeout)
	if c.MaxConns < 0 {
		errs = append(errs, problem("GATEWAY_MAX_CONNS", "must be an integer ≥ 0 (0: derived from the open-files limit)"))
	}
	return positiveDuration(errs, "GATEWAY_SHUTDOWN_TIMEOUT", c.ShutdownTimeout)
}

// trustedProxies parses GATEWAY_TRUSTED_PROXIES; a plain address is its own range.
func (c *httpConfig) trustedProxies() ([]*net.IPNet, error) {
	var out []*net.IPNet
	for _, v := range c.TrustedProxies {
		v = strings.TrimSpace(v)
		if v == "" {
			continue
		}
		if ip := net.ParseIP(v); ip != nil {
			bits := 8 * len(ip.To16())
			if ip.To4() != nil {
				ip, bits = ip.To4(), 32
			}
			out = append(out, &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, bits)})
			continue
		}
		_, n, err := net.ParseCIDR(v)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return out, nil
}

// flowConfig times the payment flow; the reconciler shares it.
type flowConfig struct {
	Lease      time.Duration `name:"lease" env:"GATEWAY_LEASE" default:"30s" group:"flow" help:"how long a worker owns an unfinished payment before a retry may take it over; must exceed GATEWAY_PSP_TIMEOUT"`
	PSPTimeout time.Duration `name:"psp-timeout" env:"GATEWAY_PSP_TIMEOUT" default:"10s" group:"flow" help:"deadline of each PSP call"`
	Retention  time.Duration `name:"idempotency-retention" env:"GATEWAY_IDEMPOTENCY_RETENTION" default:"168h" group:"flow" help:"how long a completed key replays its response before it is purged"`
	// EventRetention is how long GET /events lists an event before the purge deletes it.
	EventRetention time.Duration `name:"event-retention" env:"GATEWAY_EVENT_RETENTION" default:"720h" group:"flow" help:"how long an event is kept and listed by GET /events before it is purged"`
}

func (c *flowConfig) check() []error {
	var errs []error
	errs = positiveDuration(errs, "GATEWAY_LEASE", c.Lease)
	errs = positiveDuration(errs, "GATEWAY_PSP_TIMEOUT", c.PSPTimeout)
	errs = positiveDuration(errs, "GATEWAY_IDEMPOTENCY_RETENTION", c.Retention)
	errs = positiveDuration(errs, "GATEWAY_EVENT_RETENTION", c.EventRetention)
	if c.Lease <= c.PSPTimeout {
		errs = append(errs, fmt.Errorf("GATEWAY_LEASE (%s) must exceed GATEWAY_PSP_TIMEOUT (%s): a lease that ends mid-call lets a retry take the payment over while it is being charged", c.Lease, c.PSPTimeout))
	}
	return errs
}

// pspConfig chooses and reaches the payment provider.
type pspConfig struct {
	PSP             string         `name:"psp" env:"GATEWAY_PSP" default:"fake" placeholder:"NAME" group:"psp" help:"payment provider adapter: fake (in-process fake), fakehttp (the standalone fake, cmd/fakepsp), toss, stripe"`
	URL             string         `name:"psp-url" env:"GATEWAY_PSP_URL" placeholder:"URL" group:"psp" help:"PSP base URL (fakehttp: http://127.0.0.1:9090, or unset under dev to start one; toss and stripe: their public API)"`
	CreationWindow  *time.Duration `name:"psp-creation-window" env:"GATEWAY_PSP_CREATION_WINDOW" placeholder:"DURATION" group:"psp" help:"override how long after a charge was sent it may still appear at the PSP (unset: the adapter's own)"`
	FakeLatency     time.Duration  `name:"fake-psp-latency" env:"GATEWAY_FAKE_PSP_LATENCY" default:"0s" group:"psp" help:"fake PSP only: how long each simulated PSP call takes"`
	TossSecretKey   string         `name:"toss-secret-key" env:"GATEWAY_TOSS_SECRET_KEY" hidden:"" secret:"" help:"Toss Payments secret key (test_sk_… or live_sk_…), required with GATEWAY_PSP=toss"`
	StripeSecretKey string         `name:"stripe-secret-key" env:"GATEWAY_STRIPE_SECRET_KEY" hidden:"" secret:"" help:"Stripe secret or restricted key (sk_…, rk_…), required with GATEWAY_PSP=stripe"`
	Checkout        checkoutConfig `embed:""`
	Accounts        accountsConfig `embed:""`
}

// adapter is the adapter's name; earlier releases called the fakes mock and mockhttp.
func (c *pspConfig) adapter() string {
	if c.PSP == "mock" || c.PSP == "mockhttp" {
		return strings.Replace(c.PSP, "mock", "fake", 1)
	}
	return c.PSP
}

func (c *pspConfig) check() []error {
	var errs []error
	switch c.adapter() {
	case "fake", "fakehttp", "toss", "stripe":
	default:
		errs = append(errs, problem("GATEWAY_PSP", "names an unknown PSP %q; available: fake, fakehttp, toss, stripe", c.PSP))
	}
	if c.URL != "" {
		u, err := url.Parse(c.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, problem("GATEWAY_PSP_URL", "must be an http(s) URL such as http://127.0.0.1:9090"))
		}
	}
	if c.CreationWindow != nil && *c.CreationWindow <= 0 {
		errs = append(errs, problem("GATEWAY_PSP_CREATION_WINDOW", "must be a positive duration such as 2m"))
	}
	if c.FakeLatency < 0 {
		errs = append(errs, problem("GATEWAY_FAKE_PSP_LATENCY", "must be a duration ≥ 0 such as 0s or 100ms"))
	}
	switch {
	case c.adapter() == "toss" && c.TossSecretKey == "":
		errs = append(errs, errors.New("GATEWAY_PSP=toss needs GATEWAY_TOSS_SECRET_KEY"))
	case c.adapter() == "stripe" && c.StripeSecretKey == "":
		errs = append(errs, errors.New("GATEWAY_PSP=stripe needs GATEWAY_STRIPE_SECRET_KEY"))
	}
	if c.Checkout.StripeWebhookSecret != "" && c.StripeSecretKey == "" {
		errs = append(errs, errors.New("GATEWAY_STRIPE_WEBHOOK_SECRET needs GATEWAY_STRIPE_SECRET_KEY: the gateway asks Stripe about what a notification names"))
	}
	return errs
}

// checkoutConfig is the two-step checkout and the PSPs' notifications:
// how long a payment waits for its confirmation, the public keys front ends
// are handed to start a PSP's client, and the secret that verifies
// Stripe's notifications (Toss's are checked by asking Toss).
type checkoutConfig struct {
	ConfirmExpiry        time.Duration `name:"confirm-expiry" env:"GATEWAY_CONFIRM_EXPIRY" default:"1h" group:"checkout" help:"how long a payment created with \"confirm\": false waits for POST /payments/{id}/confirm before the reconciler cancels it"`
	TossClientKey        string        `name:"toss-client-key" env:"GATEWAY_TOSS_CLIENT_KEY" placeholder:"KEY" group:"checkout" help:"Toss client key (test_ck_…, live_ck_…: public) that two-step checkouts hand to front ends to open Toss's payment widget"`
	StripePublishableKey string        `name:"stripe-publishable-key" env:"GATEWAY_STRIPE_PUBLISHABLE_KEY" placeholder:"KEY" group:"checkout" help:"Stripe publishable key (pk_…: public) that two-step checkouts hand to front ends for Stripe.js"`
	StripeWebhookSecret  string        `name:"stripe-webhook-secret" env:"GATEWAY_STRIPE_WEBHOOK_SECRET" hidden:"" secret:"" help:"signing secret (whsec_…) of the Stripe webhook endpoint POST /psp/stripe/webhook; unset: Stripe's notifications are answered 404"`
}

func (c *checkoutConfig) check() []error {
	errs := positiveDuration(nil, "GATEWAY_CONFIRM_EXPIRY", c.ConfirmExpiry)
	if c.StripePublishableKey != "" && !strings.HasPrefix(c.StripePublishableKey, "pk_") {
		errs = append(errs, problem("GATEWAY_STRIPE_PUBLISHABLE_KEY", "must be a publishable key (pk_test_… or pk_live_…), never a secret key"))
	}
	return errs
}

// creationWindow is the override, 0 for the adapter's own.
func (c *pspConfig) creationWindow() time.Duration {
	if c.CreationWindow == nil {
		return 0
	}
	return *c.CreationWindow
}

// reconcileConfig tunes the reconciler and the purge of expired keys.
type reconcileConfig struct {
	Schedule    string        `name:"reconcile-schedule" env:"GATEWAY_RECONCILE_SCHEDULE" default:"@every 30s" placeholder:"SPEC" group:"reconcile" help:"when the reconciler runs: a cron spec, @every DURATION, or off"`
	MaxAttempts int           `name:"reconcile-max-attempts" env:"GATEWAY_RECONCILE_MAX_ATTEMPTS" default:"10" group:"reconcile" help:"failed PSP lookups before a payment becomes requires_review"`
	Batch       int           `name:"reconcile-batch" env:"GATEWAY_RECONCILE_BATCH" default:"100" group:"reconcile" help:"stale keys claimed per reconciler transaction"`
	Concurrency int           `name:"reconcile-concurrency" env:"GATEWAY_RECONCILE_CONCURRENCY" default:"16" group:"reconcile" help:"PSP lookups the reconciler runs at once"`
	Backoff     time.Duration `name:"reconcile-backoff" env:"GATEWAY_RECONCILE_BACKOFF" default:"30s" group:"reconcile" help:"wait after a failed lookup; doubles per attempt"`
	BackoffMax  time.Duration `name:"reconcile-backoff-max" env:"GATEWAY_RECONCILE_BACKOFF_MAX" default:"30m" group:"reconcile" help:"longest wait between lookups of one payment"`
	PurgeBatch  int           `name:"purge-batch" env:"GATEWAY_PURGE_BATCH" default:"500" group:"reconcile" help:"expired keys deleted per purge statement"`
	PurgeRest   float64       `name:"purge-rest" env:"GATEWAY_PURGE_REST" default:"0.25" group:"reconcile" help:"rest after each purge batch, as a fraction of the time it took (1: the purge holds its connection at most half the time)"`
}

func (c *reconcileConfig) check() []error {
	var errs []error
	if _, err := reconcile.ParseSchedule(c.Schedule); err != nil {
		errs = append(errs, problem("GATEWAY_RECONCILE_SCHEDULE", "%v", err))
	}
	errs = positive(errs, "GATEWAY_RECONCILE_MAX_ATTEMPTS", c.MaxAttempts)
	errs = positive(errs, "GATEWAY_RECONCILE_BATCH", c.Batch)
	errs = positive(errs, "GATEWAY_RECONCILE_CONCURRENCY", c.Concurrency)
	errs = positiveDuration(errs, "GATEWAY_RECONCILE_BACKOFF", c.Backoff)
	errs = positiveDuration(errs, "GATEWAY_RECONCILE_BACKOFF_MAX", c.BackoffMax)
	errs = positive(errs, "GATEWAY_PURGE_BATCH", c.PurgeBatch)
	if !(c.PurgeRest > 0 && c.PurgeRest <= 100) {
		errs = append(errs, problem("GATEWAY_PURGE_REST", "must be a fraction above 0 and at most 100, such as 0.25 or 1"))
	}
	if c.BackoffMax < c.Backoff {
		errs = append(errs, fmt.Errorf("GATEWAY_RECONCILE_BACKOFF_MAX (%s) must not be below GATEWAY_RECONCILE_BACKOFF (%s)", c.BackoffMax, c.Backoff))
	}
	return errs
}

// logConfig shapes the logs of a long-running process.
type logConfig struct {
	Format     string `name:"log-format" env:"GATEWAY_LOG_FORMAT" default:"json" placeholder:"json|text" group:"log" help:"log format: json or text"`
	Level      string `name:"log-level" env:"GATEWAY_LOG_LEVEL" default:"info" placeholder:"LEVEL" group:"log" help:"log level: debug, info, warn or error"`
	HashSecret string `name:"log-hash-secret" env:"GATEWAY_LOG_HASH_SECRET" hidden:"" secret:"" help:"keys the hashes that name idempotency keys and merchants in logs, so lines correlate across replicas but cannot be reversed (unset: a random one per process)"`

	hash *idemkeys.Hasher
}

func (c *logConfig) check() []error {
	var errs []error
	if c.Format != "json" && c.Format != "text" {
		errs = append(errs, problem("GATEWAY_LOG_FORMAT", "must be json or text"))
	}
	switch c.Level {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, problem("GATEWAY_LOG_LEVEL", "must be debug, info, warn or error"))
	}
	return errs
}

// hasher is the one keyed hasher of this process: with no secret it is
// random, so it must be made once.
func (c *logConfig) hasher() *idemkeys.Hasher {
	if c.hash == nil {
		c.hash = idemkeys.NewHasher([]byte(c.HashSecret))
	}
	return c.hash
}

// serverConfig is everything a serving process reads: serve and dev.
type serverConfig struct {
	DB           dsnConfig       `embed:""`
	Pool         poolConfig      `embed:""`
	HTTP         httpConfig      `embed:""`
	Flow         flowConfig      `embed:""`
	MaxClockSkew time.Duration   `name:"max-clock-skew" env:"GATEWAY_MAX_CLOCK_SKEW" default:"1s" group:"flow" help:"how far this replica's clock may stray from the database's before it stops taking payments and reports not ready"`
	PSP          pspConfig       `embed:""`
	Reconcile    reconcileConfig `embed:""`
	Books        booksConfig     `embed:""`
	Webhooks     webhookConfig   `embed:""`
	Dispatch     dispatchConfig  `embed:""`
	Log          logConfig       `embed:""`
	// ReplayCacheBytes bounds the answers kept in memory for replays.
	ReplayCacheBytes int64 `name:"replay-cache-bytes" env:"GATEWAY_REPLAY_CACHE_BYTES" default:"33554432" group:"flow" help:"bytes of final answers this replica keeps in memory to replay without a database read (one merchant holds at most a quarter); 0 keeps none"`
	// ReplayCacheTTL bounds how long an answer rewritten on another replica is replayed as it was.
	ReplayCacheTTL time.Duration `name:"replay-cache-ttl" env:"GATEWAY_REPLAY_CACHE_TTL" default:"1m" group:"flow" help:"how long an answer is replayed from memory before the stored one is read again: every replica answers an operator's correction within this time"`
}

func (c *serverConfig) check() []error {
	errs := positiveDuration(nil, "GATEWAY_MAX_CLOCK_SKEW", c.MaxClockSkew)
	if c.ReplayCacheBytes < 0 {
		errs = append(errs, problem("GATEWAY_REPLAY_CACHE_BYTES", "must be an integer ≥ 0 (bytes)"))
	}
	errs = positiveDuration(errs, "GATEWAY_REPLAY_CACHE_TTL", c.ReplayCacheTTL)
	if least := 2*c.Flow.PSPTimeout + 5*time.Second; c.HTTP.ShutdownTimeout < least {
		errs = append(errs, fmt.Errorf("GATEWAY_SHUTDOWN_TIMEOUT (%s) must be at least twice GATEWAY_PSP_TIMEOUT plus 5s (%s): a payment being resumed may make two PSP calls (a lookup, then the charge) before it can answer", c.HTTP.ShutdownTimeout, least))
	}
	// The purge keeps an event while a delivery of it is pending, so this
	// is not what keeps deliveries whole: it keeps GET /events listing
	// every event a delivery may still bring.
	if r, age := c.Flow.EventRetention, c.Dispatch.MaxAge; r > 0 && age > 0 && r <= age {
		errs = append(errs, fmt.Errorf("GATEWAY_EVENT_RETENTION (%s) must exceed GATEWAY_WEBHOOK_MAX_AGE (%s): a consumer catching up with GET /events after a delivery's last attempt must still find its event", r, age))
	}
	return errs
}

func positive(errs []error, env string, n int) []error {
	if n < 1 {
		return append(errs, problem(env, "must be a positive integer"))
	}
	return errs
}

func positiveDuration(errs []error, env string, d time.Duration) []error {
	if d <= 0 {
		return append(errs, problem(env, "must be a positive duration such as 500ms, 10s or 1m"))
	}
	return errs
}

func hostPort(errs []error, env, v string) []error {
	if _, _, err := net.SplitHostPort(v); err != nil {
		return append(errs, problem(env, "must be host:port: %v", err))
	}
	return errs
}

// maskDSN hides the password of a DSN for logs.
func maskDSN(dsn string) string {
	cfg, err := mysql.Config(dsn)
	if err != nil {
		return "(invalid DSN)"
	}
	return cfg.User + "@" + cfg.Net + "(" + cfg.Addr + ")/" + cfg.DBName
}

// durationDefault writes a default duration the way an operator would ("168h", not "168h0m0s").
func durationDefault(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
