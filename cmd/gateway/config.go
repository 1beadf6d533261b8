package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"gateway/db"
	"gateway/idemkeys"
	"gateway/payments"
	"gateway/reconcile"
)

// Config is every setting of the gateway, read from GATEWAY_* variables.
type Config struct {
	Addr            string
	DatabaseDSN     string
	PSP             string
	PSPURL          string
	PSPCreation     time.Duration
	TossSecretKey   string
	StripeSecretKey string
	FakePSPLatency  time.Duration
	DBMaxOpenConns  int
	DBMaxIdleConns  int
	Lease           time.Duration
	PSPTimeout      time.Duration
	InFlightWait    time.Duration
	MaxBodyBytes    int64
	ShutdownTimeout time.Duration
	AutoMigrate     bool
	LogFormat       string
	LogLevel        string
	DevDataDir      string

	AdminAddr     string
	AuthCacheTTL  time.Duration
	RatePerSecond float64
	RateBurst     int

	// MaxClockSkew is how far this replica's clock may stray from the database's.
	MaxClockSkew time.Duration
	// LogHashSecret keys the hashes that name idempotency keys and merchants in logs.
	LogHashSecret string
	logHash       *idemkeys.Hasher

	ReconcileSchedule    string
	ReconcileMaxAttempts int
	ReconcileBatch       int
	ReconcileConcurrency int
	ReconcileBackoff     time.Duration
	ReconcileBackoffMax  time.Duration
	Retention            time.Duration
	PurgeBatch           int

	// Two-step checkout and the PSPs' notifications.
	ConfirmExpiry        time.Duration
	TossClientKey        string
	StripePublishableKey string
	StripeWebhookSecret  string
}

// setting describes one variable: its name, default and meaning, and how it
// is stored into a Config. The list drives parsing and --help alike.
type setting struct {
	name, def, help string
	set             func(c *Config, v string) error
}

func settings() []setting {
	return []setting{
		{"GATEWAY_ADDR", "127.0.0.1:8080", "HTTP listen address (host:port)", func(c *Config, v string) error {
			if _, _, err := net.SplitHostPort(v); err != nil {
				return fmt.Errorf("must be host:port: %v", err)
			}
			c.Addr = v
			return nil
		}},
		{"GATEWAY_ADMIN_ADDR", "", "serve /metrics on this separate address (host:port) instead of on GATEWAY_ADDR", func(c *Config, v string) error {
			if v != "" {
				if _, _, err := net.SplitHostPort(v); err != nil {
					return fmt.Errorf("must be host:port: %v", err)
				}
			}
			c.AdminAddr = v
			return nil
		}},
		{"GATEWAY_AUTH_CACHE_TTL", durationDefault(payments.DefaultAuthCacheTTL), "how long a replica trusts a verified API key without reading the database (a revoked key works that much longer); 0s reads every time", func(c *Config, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return errors.New("must be a duration ≥ 0 such as 0s or 10s")
			}
			c.AuthCacheTTL = d
			return nil
		}},
		{"GATEWAY_RATE_LIMIT", "100", "requests per second each merchant may send to one replica; 0 turns the limit off", func(c *Config, v string) error {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f < 0 {
				return errors.New("must be a number ≥ 0")
			}
			c.RatePerSecond = f
			return nil
		}},
		{"GATEWAY_RATE_BURST", "200", "requests a merchant may send at once above the rate", intSetting(func(c *Config, n int) { c.RateBurst = n })},
		{"GATEWAY_DATABASE_DSN", "", "MySQL/MariaDB DSN, e.g. user:pass@tcp(127.0.0.1:3306)/gateway (dev: unset starts a private MariaDB)", func(c *Config, v string) error {
			if v != "" {
				if _, err := db.Config(v); err != nil {
					return err
				}
			}
			c.DatabaseDSN = v
			return nil
		}},
		{"GATEWAY_PSP", "fake", "payment provider adapter: fake (in-process fake), fakehttp (the standalone fake, cmd/fakepsp), toss, stripe", func(c *Config, v string) error {
			switch v {
			case "fake", "fakehttp", "toss", "stripe":
				c.PSP = v
				return nil
			case "mock", "mockhttp": // the names of earlier releases
				c.PSP = strings.Replace(v, "mock", "fake", 1)
				return nil
			}
			return fmt.Errorf("unknown PSP %q; available: fake, fakehttp, toss, stripe", v)
		}},
		{"GATEWAY_PSP_URL", "", "PSP base URL (fakehttp: http://127.0.0.1:9090, or unset under dev to start one; toss and stripe: their public API)", func(c *Config, v string) error {
			if v != "" {
				u, err := url.Parse(v)
				if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					return errors.New("must be an http(s) URL such as http://127.0.0.1:9090")
				}
			}
			c.PSPURL = v
			return nil
		}},
		{"GATEWAY_PSP_CREATION_WINDOW", "", "override how long after a charge was sent it may still appear at the PSP (default: the adapter's own)", func(c *Config, v string) error {
			if v == "" {
				return nil
			}
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return errors.New("must be a positive duration such as 2m")
			}
			c.PSPCreation = d
			return nil
		}},
		{"GATEWAY_TOSS_SECRET_KEY", "", "secret: Toss Payments secret key (test_sk_… or live_sk_…), required with GATEWAY_PSP=toss", func(c *Config, v string) error {
			c.TossSecretKey = v
			return nil
		}},
		{"GATEWAY_STRIPE_SECRET_KEY", "", "secret: Stripe secret or restricted key (sk_…, rk_…), required with GATEWAY_PSP=stripe", func(c *Config, v string) error {
			c.StripeSecretKey = v
			return nil
		}},
		{"GATEWAY_FAKE_PSP_LATENCY", "0s", "fake PSP only: how long each simulated PSP call takes", func(c *Config, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return errors.New("must be a duration ≥ 0 such as 0s or 100ms")
			}
			c.FakePSPLatency = d
			return nil
		}},
		{"GATEWAY_DB_MAX_OPEN_CONNS", "32", "most database connections the pool opens", intSetting(func(c *Config, n int) { c.DBMaxOpenConns = n })},
		{"GATEWAY_DB_MAX_IDLE_CONNS", "32", "idle database connections kept open", intSetting(func(c *Config, n int) { c.DBMaxIdleConns = n })},
		{"GATEWAY_LEASE", durationDefault(payments.DefaultLease), "how long a worker owns an unfinished payment before a retry may take it over; must exceed GATEWAY_PSP_TIMEOUT", durationSetting(func(c *Config, d time.Duration) { c.Lease = d })},
		{"GATEWAY_PSP_TIMEOUT", durationDefault(payments.DefaultPSPTimeout), "deadline of each PSP call", durationSetting(func(c *Config, d time.Duration) { c.PSPTimeout = d })},
		{"GATEWAY_INFLIGHT_WAIT", durationDefault(payments.DefaultInFlightWait), "how long a duplicate request waits for the first one before answering 409", durationSetting(func(c *Config, d time.Duration) { c.InFlightWait = d })},
		{"GATEWAY_MAX_BODY_BYTES", "65536", "largest accepted request body", func(c *Config, v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 1024 {
				return errors.New("must be an integer ≥ 1024")
			}
			c.MaxBodyBytes = n
			return nil
		}},
		{"GATEWAY_SHUTDOWN_TIMEOUT", "30s", "how long in-flight requests may finish after SIGINT/SIGTERM", durationSetting(func(c *Config, d time.Duration) { c.ShutdownTimeout = d })},
		{"GATEWAY_AUTO_MIGRATE", "false", "apply pending migrations when serve starts (true|false)", func(c *Config, v string) error {
			b, err := strconv.ParseBool(v)
			if err != nil {
				return errors.New("must be true or false")
			}
			c.AutoMigrate = b
			return nil
		}},
		{"GATEWAY_LOG_FORMAT", "json", "log format: json or text", func(c *Config, v string) error {
			if v != "json" && v != "text" {
				return errors.New("must be json or text")
			}
			c.LogFormat = v
			return nil
		}},
		{"GATEWAY_LOG_LEVEL", "info", "log level: debug, info, warn or error", func(c *Config, v string) error {
			switch v {
			case "debug", "info", "warn", "error":
				c.LogLevel = v
				return nil
			}
			return errors.New("must be debug, info, warn or error")
		}},
		{"GATEWAY_RECONCILE_SCHEDULE", reconcile.DefaultSchedule, "when the reconciler runs inside serve: a cron spec, @every DURATION, or off", func(c *Config, v string) error {
			if _, err := reconcile.ParseSchedule(v); err != nil {
				return err
			}
			c.ReconcileSchedule = v
			return nil
		}},
		{"GATEWAY_RECONCILE_MAX_ATTEMPTS", strconv.Itoa(reconcile.DefaultMaxAttempts), "failed PSP lookups before a payment becomes requires_review", intSetting(func(c *Config, n int) { c.ReconcileMaxAttempts = n })},
		{"GATEWAY_RECONCILE_BATCH", strconv.Itoa(reconcile.DefaultBatchSize), "stale keys claimed per reconciler transaction", intSetting(func(c *Config, n int) { c.ReconcileBatch = n })},
		{"GATEWAY_RECONCILE_CONCURRENCY", strconv.Itoa(reconcile.DefaultConcurrency), "PSP lookups the reconciler runs at once", intSetting(func(c *Config, n int) { c.ReconcileConcurrency = n })},
		{"GATEWAY_RECONCILE_BACKOFF", durationDefault(reconcile.DefaultBackoffBase), "wait after a failed lookup; doubles per attempt", durationSetting(func(c *Config, d time.Duration) { c.ReconcileBackoff = d })},
		{"GATEWAY_RECONCILE_BACKOFF_MAX", durationDefault(reconcile.DefaultBackoffMax), "longest wait between lookups of one payment", durationSetting(func(c *Config, d time.Duration) { c.ReconcileBackoffMax = d })},
		{"GATEWAY_IDEMPOTENCY_RETENTION", durationDefault(payments.DefaultRetention), "how long a completed key replays its response before it is purged", durationSetting(func(c *Config, d time.Duration) { c.Retention = d })},
		{"GATEWAY_PURGE_BATCH", strconv.Itoa(reconcile.DefaultPurgeBatch), "keys deleted per purge statement", intSetting(func(c *Config, n int) { c.PurgeBatch = n })},
		{"GATEWAY_MAX_CLOCK_SKEW", durationDefault(db.DefaultMaxClockSkew), "how far this replica's clock may stray from the database's before it stops taking payments and reports not ready", durationSetting(func(c *Config, d time.Duration) { c.MaxClockSkew = d })},
		{"GATEWAY_LOG_HASH_SECRET", "", "secret: keys the hashes that name idempotency keys and merchants in logs, so lines correlate across replicas but cannot be reversed (unset: a random one per process; dev generates one)", func(c *Config, v string) error {
			c.LogHashSecret = v
			return nil
		}},
		// Two-step checkout and the PSPs' notifications.
		{"GATEWAY_CONFIRM_EXPIRY", durationDefault(payments.DefaultConfirmExpiry), "how long a payment created with \"confirm\": false waits for POST /payments/{id}/confirm before the reconciler cancels it", durationSetting(func(c *Config, d time.Duration) { c.ConfirmExpiry = d })},
		{"GATEWAY_TOSS_CLIENT_KEY", "", "Toss client key (test_ck_…, live_ck_…: public) that two-step checkouts hand to front ends to open Toss's payment widget", func(c *Config, v string) error {
			c.TossClientKey = v
			return nil
		}},
		{"GATEWAY_STRIPE_PUBLISHABLE_KEY", "", "Stripe publishable key (pk_…: public) that two-step checkouts hand to front ends for Stripe.js", func(c *Config, v string) error {
			if v != "" && !strings.HasPrefix(v, "pk_") {
				return errors.New("must be a publishable key (pk_test_… or pk_live_…), never a secret key")
			}
			c.StripePublishableKey = v
			return nil
		}},
		{"GATEWAY_STRIPE_WEBHOOK_SECRET", "", "secret: signing secret (whsec_…) of the Stripe webhook endpoint POST /psp/stripe/webhook; unset: Stripe's notifications are answered 404", func(c *Config, v string) error {
			c.StripeWebhookSecret = v
			return nil
		}},
		{"GATEWAY_DEV_DATA_DIR", ".data/mariadb", "dev only: data directory of the private MariaDB", func(c *Config, v string) error {
			if v == "" {
				return errors.New("must not be empty")
			}
			c.DevDataDir = v
			return nil
		}},
	}
}

func intSetting(store func(*Config, int)) func(*Config, string) error {
	return func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return errors.New("must be a positive integer")
		}
		store(c, n)
		return nil
	}
}

func durationSetting(store func(*Config, time.Duration)) func(*Config, string) error {
	return func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return errors.New("must be a positive duration such as 500ms, 10s or 1m")
		}
		store(c, d)
		return nil
	}
}

// loadConfig reads every variable, applies defaults and validates the whole,
// reporting all problems at once.
func loadConfig(getenv func(string) string) (Config, error) {
	var c Config
	var errs []error
	for _, s := range settings() {
		v := getenv(s.name)
		if v == "" {
			v = s.def
		}
		if err := s.set(&c, v); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", s.name, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return c, err
	}
	c.logHash = idemkeys.NewHasher([]byte(c.LogHashSecret))
	return c, c.Validate()
}

// Validate checks the settings against each other.
func (c Config) Validate() error {
	var errs []error
	if min := 2*c.PSPTimeout + 5*time.Second; c.ShutdownTimeout < min {
		errs = append(errs, fmt.Errorf("GATEWAY_SHUTDOWN_TIMEOUT (%s) must be at least twice GATEWAY_PSP_TIMEOUT plus 5s (%s): a payment being resumed may make two PSP calls (a lookup, then the charge) before it can answer", c.ShutdownTimeout, min))
	}
	if c.MaxClockSkew <= 0 {
		errs = append(errs, errors.New("GATEWAY_MAX_CLOCK_SKEW must be positive"))
	}
	if c.Lease <= c.PSPTimeout {
		errs = append(errs, fmt.Errorf("GATEWAY_LEASE (%s) must exceed GATEWAY_PSP_TIMEOUT (%s): a lease that ends mid-call lets a retry take the payment over while it is being charged", c.Lease, c.PSPTimeout))
	}
	switch {
	case c.PSP == "toss" && c.TossSecretKey == "":
		errs = append(errs, errors.New("GATEWAY_PSP=toss needs GATEWAY_TOSS_SECRET_KEY"))
	case c.PSP == "stripe" && c.StripeSecretKey == "":
		errs = append(errs, errors.New("GATEWAY_PSP=stripe needs GATEWAY_STRIPE_SECRET_KEY"))
	}
	if c.StripeWebhookSecret != "" && c.StripeSecretKey == "" {
		errs = append(errs, errors.New("GATEWAY_STRIPE_WEBHOOK_SECRET needs GATEWAY_STRIPE_SECRET_KEY: the gateway asks Stripe about what a notification names"))
	}
	if c.ReconcileBackoffMax < c.ReconcileBackoff {
		errs = append(errs, fmt.Errorf("GATEWAY_RECONCILE_BACKOFF_MAX (%s) must not be below GATEWAY_RECONCILE_BACKOFF (%s)", c.ReconcileBackoffMax, c.ReconcileBackoff))
	}
	if c.DBMaxIdleConns > c.DBMaxOpenConns {
		errs = append(errs, fmt.Errorf("GATEWAY_DB_MAX_IDLE_CONNS (%d) must not exceed GATEWAY_DB_MAX_OPEN_CONNS (%d)", c.DBMaxIdleConns, c.DBMaxOpenConns))
	}
	return errors.Join(errs...)
}

// requireDSN is for the subcommands that cannot start a database of their own.
func (c Config) requireDSN() error {
	if c.DatabaseDSN == "" {
		return errors.New("GATEWAY_DATABASE_DSN is not set; for example GATEWAY_DATABASE_DSN='root@tcp(127.0.0.1:3306)/gateway' (or use `gateway dev`, which starts a private MariaDB)")
	}
	return nil
}

// maskDSN hides the password of a DSN for logs.
func maskDSN(dsn string) string {
	cfg, err := db.Config(dsn)
	if err != nil {
		return "(invalid DSN)"
	}
	if cfg.Passwd != "" {
		cfg.Passwd = "xxxxx"
	}
	return cfg.User + "@" + cfg.Net + "(" + cfg.Addr + ")/" + cfg.DBName
}

// printSettings writes the variable table used by --help.
func printSettings(w io.Writer) {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "  VARIABLE\tDEFAULT\tMEANING")
	for _, s := range settings() {
		def := s.def
		if def == "" {
			def = "(unset)"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", s.name, def, strings.TrimSpace(s.help))
	}
	_ = tw.Flush()
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

// hasher is the one keyed hasher of this process.
func (c Config) hasher() *idemkeys.Hasher {
	if c.logHash == nil {
		return idemkeys.NewHasher([]byte(c.LogHashSecret))
	}
	return c.logHash
}
