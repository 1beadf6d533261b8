package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gateway/mysql"
	"gateway/webhooks"
)

// webhookConfig is what every process that touches webhook endpoints
// reads: the key that seals their secrets, the networks the SSRF guard lets
// through, the rotation's grace period.
type webhookConfig struct {
	Key           string        `name:"webhook-key" env:"GATEWAY_WEBHOOK_KEY" hidden:"" secret:"" help:"32 bytes (64 hex digits or base64, e.g. from openssl rand -base64 32) that encrypt the webhook endpoints' signing secrets at rest (AES-256-GCM); the same on every replica. Unset: webhooks are off (/webhook_endpoints answers 404, nothing is dispatched); gateway dev makes one"`
	AllowNetworks string        `name:"webhook-allow-networks" env:"GATEWAY_WEBHOOK_ALLOW_NETWORKS" placeholder:"CIDR,…" group:"webhooks" help:"networks endpoint URLs may reach besides public addresses, e.g. 127.0.0.0/8,::1/128 for development (unset: none: loopback, private, link-local, multicast and reserved addresses are refused, at registration and at every connection)"`
	RotationGrace time.Duration `name:"webhook-rotation-grace" env:"GATEWAY_WEBHOOK_ROTATION_GRACE" default:"24h" group:"webhooks" help:"how long a rotated-out signing secret still signs (beside the new one), unless the rotation asks otherwise"`

	allow []netip.Prefix
}

func (c *webhookConfig) check() []error {
	var errs []error
	if c.Key != "" {
		if _, err := webhooks.ParseKey(c.Key); err != nil {
			errs = append(errs, fmt.Errorf("GATEWAY_WEBHOOK_KEY %v", err))
		}
	}
	nets, err := webhooks.ParseNetworks(c.AllowNetworks)
	if err != nil {
		errs = append(errs, problem("GATEWAY_WEBHOOK_ALLOW_NETWORKS", "must be comma-separated CIDR prefixes or addresses: %v", err))
	}
	c.allow = nets
	if c.RotationGrace < 0 || c.RotationGrace > webhooks.MaxRotationGrace {
		errs = append(errs, problem("GATEWAY_WEBHOOK_ROTATION_GRACE", "must be between 0s and %s", durationDefault(webhooks.MaxRotationGrace)))
	}
	return errs
}

// requireKey is for the commands that seal or open secrets.
func (c *webhookConfig) requireKey() []error {
	if c.Key == "" {
		return []error{errors.New("GATEWAY_WEBHOOK_KEY is not set: it encrypts the endpoints' signing secrets (32 bytes, e.g. GATEWAY_WEBHOOK_KEY=$(openssl rand -base64 32); the same on every replica)")}
	}
	return nil
}

// parts builds the cipher and the guard; nil, nil when no key is set.
func (c *webhookConfig) parts() (*webhooks.Cipher, *webhooks.Guard, error) {
	if c.Key == "" {
		return nil, nil, nil
	}
	key, err := webhooks.ParseKey(c.Key)
	if err != nil {
		return nil, nil, err
	}
	ci, err := webhooks.NewCipher(key)
	if err != nil {
		return nil, nil, err
	}
	allow, err := webhooks.ParseNetworks(c.AllowNetworks)
	if err != nil {
		return nil, nil, err
	}
	return ci, webhooks.NewGuard(allow, nil), nil
}

// dispatchConfig tunes the webhook dispatcher.
type dispatchConfig struct {
	Dispatch     bool          `name:"webhook-dispatch" env:"GATEWAY_WEBHOOK_DISPATCH" default:"true" negatable:"" group:"webhooks" help:"run the webhook dispatcher in this process (true|false); it is safe on every replica"`
	Timeout      time.Duration `name:"webhook-timeout" env:"GATEWAY_WEBHOOK_TIMEOUT" default:"10s" group:"webhooks" help:"how long an endpoint has to answer a delivery with 2xx; longer is a failed attempt"`
	Concurrency  int           `name:"webhook-concurrency" env:"GATEWAY_WEBHOOK_CONCURRENCY" default:"4" group:"webhooks" help:"deliveries to one endpoint in flight at once on this replica"`
	Interval     time.Duration `name:"webhook-interval" env:"GATEWAY_WEBHOOK_INTERVAL" default:"1s" group:"webhooks" help:"how often the dispatcher looks for new events and due retries"`
	BackoffBase  time.Duration `name:"webhook-backoff" env:"GATEWAY_WEBHOOK_BACKOFF" default:"30s" group:"webhooks" help:"wait after a first failed attempt; doubles per attempt, drawn between its half and its whole"`
	BackoffMax   time.Duration `name:"webhook-backoff-max" env:"GATEWAY_WEBHOOK_BACKOFF_MAX" default:"6h" group:"webhooks" help:"longest wait between two attempts"`
	MaxAge       time.Duration `name:"webhook-max-age" env:"GATEWAY_WEBHOOK_MAX_AGE" default:"72h" group:"webhooks" help:"how long a delivery is retried before it is marked failed"`
	DisableAfter time.Duration `name:"webhook-disable-after" env:"GATEWAY_WEBHOOK_DISABLE_AFTER" default:"72h" group:"webhooks" help:"an endpoint failing continuously that long is disabled"`
}

func (c *dispatchConfig) check() []error {
	var errs []error
	errs = positiveDuration(errs, "GATEWAY_WEBHOOK_TIMEOUT", c.Timeout)
	errs = positive(errs, "GATEWAY_WEBHOOK_CONCURRENCY", c.Concurrency)
	errs = positiveDuration(errs, "GATEWAY_WEBHOOK_INTERVAL", c.Interval)
	errs = positiveDuration(errs, "GATEWAY_WEBHOOK_BACKOFF", c.BackoffBase)
	errs = positiveDuration(errs, "GATEWAY_WEBHOOK_BACKOFF_MAX", c.BackoffMax)
	errs = positiveDuration(errs, "GATEWAY_WEBHOOK_MAX_AGE", c.MaxAge)
	errs = positiveDuration(errs, "GATEWAY_WEBHOOK_DISABLE_AFTER", c.DisableAfter)
	if c.BackoffMax < c.BackoffBase {
		errs = append(errs, fmt.Errorf("GATEWAY_WEBHOOK_BACKOFF_MAX (%s) must not be below GATEWAY_WEBHOOK_BACKOFF (%s)", c.BackoffMax, c.BackoffBase))
	}
	return errs
}

// newDispatcher builds a dispatcher over st.
func newDispatcher(st *mysql.Store, ci *webhooks.Cipher, g *webhooks.Guard, dc dispatchConfig, gate func() error, log *slog.Logger, obs webhooks.Observer) *webhooks.Dispatcher {
	return webhooks.NewDispatcher(st, ci, g, webhooks.Config{
		Timeout: dc.Timeout, Concurrency: dc.Concurrency, Interval: dc.Interval,
		BackoffBase: dc.BackoffBase, BackoffMax: dc.BackoffMax, MaxAge: dc.MaxAge, DisableAfter: dc.DisableAfter,
		Gate: gate, Logger: log, Observer: obs,
	})
}

// startWebhooks wires webhooks into a serving process: the endpoints'
// management for the API and, unless turned off, the dispatcher, whose
// stop waits for the attempts in flight. Without a key, nothing.
func startWebhooks(cfg *serverConfig, st *mysql.Store, gate func() error, log *slog.Logger, obs webhooks.Observer) (*webhooks.Endpoints, func(), error) {
	ci, g, err := cfg.Webhooks.parts()
	if err != nil || ci == nil {
		if err == nil {
			log.Info("webhooks disabled: GATEWAY_WEBHOOK_KEY is not set")
		}
		return nil, func() {}, err
	}
	eps := webhooks.NewEndpoints(st, ci, g, cfg.Webhooks.RotationGrace)
	if !cfg.Dispatch.Dispatch {
		log.Info("webhook dispatcher off in this process")
		return eps, func() {}, nil
	}
	d := newDispatcher(st, ci, g, cfg.Dispatch, gate, log, obs)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.Run(ctx); close(done) }()
	log.Info("webhook dispatcher started", "concurrency_per_endpoint", cfg.Dispatch.Concurrency, "timeout", cfg.Dispatch.Timeout.String())
	return eps, func() { cancel(); <-done }, nil
}

// devWebhookKey is the key gateway dev uses when none is set: kept beside
// the private database's data directory, so that the endpoints registered
// in one run still sign in the next.
func devWebhookKey(dataDir string) (string, error) {
	path := filepath.Join(filepath.Dir(dataDir), "webhook-key")
	if b, err := os.ReadFile(path); err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	key, err := webhooks.NewKey()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	return key, os.WriteFile(path, []byte(key+"\n"), 0o600)
}

// webhooksCmd is `gateway webhooks`: ops' hands on merchants' endpoints and
// a dispatcher of its own.
type webhooksCmd struct {
	DB       dsnConfig     `embed:""`
	Webhooks webhookConfig `embed:""`

	Create   webhooksCreateCmd   `cmd:"" help:"Register an endpoint for a merchant; prints its signing secret once."`
	List     webhooksListCmd     `cmd:"" help:"List a merchant's endpoints."`
	Delete   webhooksDeleteCmd   `cmd:"" help:"Delete an endpoint; its pending deliveries fail."`
	Rotate   webhooksRotateCmd   `cmd:"" help:"Give an endpoint a new signing secret (printed once); the old one signs beside it for a grace period."`
	Enable   webhooksEnableCmd   `cmd:"" help:"Enable an endpoint (resend what it missed with resend)."`
	Disable  webhooksDisableCmd  `cmd:"" help:"Disable an endpoint; its pending deliveries fail."`
	Resend   webhooksResendCmd   `cmd:"" help:"Deliver again to an endpoint every event of its merchant since a time."`
	Dispatch webhooksDispatchCmd `cmd:"" help:"Run the dispatcher: a daemon, or one pass that delivers everything due (--once)."`
}

func (c *webhooksCmd) check() []error { return c.DB.require() }

// withEndpoints runs fn with the endpoints' management on the database.
func (c *webhooksCmd) withEndpoints(ctx context.Context, fn func(*webhooks.Endpoints) error) error {
	return withStore(ctx, c.DB, func(st *mysql.Store) error {
		ci, g, err := c.Webhooks.parts()
		if err != nil {
			return err
		}
		return fn(webhooks.NewEndpoints(st, ci, g, c.Webhooks.RotationGrace))
	})
}

// endpointJSON is an endpoint as ops see it.
type endpointJSON struct {
	ID             string   `json:"id"`
	MerchantID     string   `json:"merchant_id"`
	URL            string   `json:"url"`
	EventTypes     []string `json:"event_types"`
	Status         string   `json:"status"`
	Description    string   `json:"description"`
	DisabledReason string   `json:"disabled_reason,omitempty"`
	FailingSince   *string  `json:"failing_since"`
	Secret         string   `json:"secret,omitempty"`
	CreatedAt      *string  `json:"created_at"`
}

func toEndpointJSON(e webhooks.Endpoint, secret string) endpointJSON {
	return endpointJSON{ID: e.ID, MerchantID: e.MerchantID, URL: e.URL, EventTypes: e.EventTypes, Status: string(e.Status),
		Description: e.Description, DisabledReason: e.DisabledReason, FailingSince: jsonTime(e.FailingSince),
		Secret: secret, CreatedAt: jsonTime(e.CreatedAt)}
}

type webhooksCreateCmd struct {
	Merchant    string `name:"merchant" required:"" placeholder:"ID" id:"mer_" help:"the merchant (mer_…)"`
	URL         string `name:"url" required:"" placeholder:"URL" help:"where to POST events (http or https, a public address unless GATEWAY_WEBHOOK_ALLOW_NETWORKS allows it)"`
	Events      string `name:"events" default:"*" placeholder:"TYPE,…" help:"event types, comma-separated (payment.succeeded,refund.failed,…), or * for all"`
	Description string `name:"description" placeholder:"TEXT" help:"a note for people"`
	JSON        bool   `name:"json" help:"print one JSON document instead of sentences"`
}

func (w *webhooksCreateCmd) Run(ctx context.Context, a *app, c *webhooksCmd) error {
	if errs := c.Webhooks.requireKey(); len(errs) > 0 {
		return usageError{errs[0].Error()}
	}
	return c.withEndpoints(ctx, func(eps *webhooks.Endpoints) error {
		var types []string
		for _, t := range strings.Split(w.Events, ",") {
			if t = strings.TrimSpace(t); t != "" {
				types = append(types, t)
			}
		}
		e, secret, err := eps.Create(ctx, webhooks.EndpointRequest{MerchantID: w.Merchant, URL: w.URL, EventTypes: types, Description: w.Description})
		if err != nil {
			return adminError(err)
		}
		if w.JSON {
			return writeJSON(a.stdout, toEndpointJSON(e, secret))
		}
		fmt.Fprintf(a.stdout, "endpoint %s of merchant %s: %s (%s)\nsigning secret (shown once): %s\n", e.ID, e.MerchantID, e.URL, strings.Join(e.EventTypes, ","), secret)
		return nil
	})
}

type webhooksListCmd struct {
	Merchant string `name:"merchant" required:"" placeholder:"ID" id:"mer_" help:"the merchant (mer_…)"`
	JSON     bool   `name:"json" help:"print one JSON document instead of a table"`
}

func (w *webhooksListCmd) Run(ctx context.Context, a *app, c *webhooksCmd) error {
	return c.withEndpoints(ctx, func(eps *webhooks.Endpoints) error {
		es, err := eps.List(ctx, w.Merchant)
		if err != nil {
			return adminError(err)
		}
		if w.JSON {
			out := struct {
				Endpoints []endpointJSON `json:"endpoints"`
				Count     int            `json:"count"`
			}{Endpoints: []endpointJSON{}, Count: len(es)}
			for _, e := range es {
				out.Endpoints = append(out.Endpoints, toEndpointJSON(e, ""))
			}
			return writeJSON(a.stdout, out)
		}
		tw := newTable(a.stdout, "ENDPOINT", "STATUS", "URL", "EVENTS", "FAILING SINCE", "CREATED")
		for _, e := range es {
			row(tw, e.ID, e.Status, e.URL, strings.Join(e.EventTypes, ","), timestamp(e.FailingSince), timestamp(e.CreatedAt))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "%d endpoint(s)\n", len(es))
		return nil
	})
}

// endpointArg names the endpoint a command acts on.
type endpointArg struct {
	Endpoint string `name:"endpoint" required:"" placeholder:"ID" id:"we_" help:"the endpoint (we_…)"`
}

// find reads the endpoint by its id, for its merchant.
func (e endpointArg) find(ctx context.Context, eps *webhooks.Endpoints) (webhooks.Endpoint, error) {
	ep, err := eps.Find(ctx, e.Endpoint)
	return ep, adminError(err)
}

type webhooksDeleteCmd struct{ endpointArg }

func (w *webhooksDeleteCmd) Run(ctx context.Context, a *app, c *webhooksCmd) error {
	return c.withEndpoints(ctx, func(eps *webhooks.Endpoints) error {
		ep, err := w.find(ctx, eps)
		if err != nil {
			return err
		}
		if err := eps.Delete(ctx, ep.MerchantID, ep.ID); err != nil {
			return adminError(err)
		}
		fmt.Fprintf(a.stdout, "endpoint %s of merchant %s deleted\n", ep.ID, ep.MerchantID)
		return nil
	})
}

type webhooksRotateCmd struct {
	endpointArg
	Grace *time.Duration `name:"grace" placeholder:"DURATION" help:"how long the old secret still signs (default GATEWAY_WEBHOOK_ROTATION_GRACE)"`
	JSON  bool           `name:"json" help:"print one JSON document instead of sentences"`
}

func (w *webhooksRotateCmd) Run(ctx context.Context, a *app, c *webhooksCmd) error {
	if errs := c.Webhooks.requireKey(); len(errs) > 0 {
		return usageError{errs[0].Error()}
	}
	return c.withEndpoints(ctx, func(eps *webhooks.Endpoints) error {
		ep, err := w.find(ctx, eps)
		if err != nil {
			return err
		}
		ep, secret, err := eps.Rotate(ctx, ep.MerchantID, ep.ID, w.Grace)
		if err != nil {
			return adminError(err)
		}
		if w.JSON {
			return writeJSON(a.stdout, toEndpointJSON(ep, secret))
		}
		fmt.Fprintf(a.stdout, "endpoint %s: new signing secret (shown once): %s\nthe old one signs beside it until %s\n", ep.ID, secret, timestamp(ep.PrevSecretUntil))
		return nil
	})
}

type webhooksEnableCmd struct{ endpointArg }

func (w *webhooksEnableCmd) Run(ctx context.Context, a *app, c *webhooksCmd) error {
	return setEnabled(ctx, a, c, w.endpointArg, true, "")
}

type webhooksDisableCmd struct {
	endpointArg
	Reason string `name:"reason" default:"disabled by ops" placeholder:"TEXT" help:"why (shown to the merchant as disabled_reason)"`
}

func (w *webhooksDisableCmd) Run(ctx context.Context, a *app, c *webhooksCmd) error {
	return setEnabled(ctx, a, c, w.endpointArg, false, w.Reason)
}

func setEnabled(ctx context.Context, a *app, c *webhooksCmd, arg endpointArg, enabled bool, reason string) error {
	return c.withEndpoints(ctx, func(eps *webhooks.Endpoints) error {
		ep, err := arg.find(ctx, eps)
		if err != nil {
			return err
		}
		changed, err := eps.SetEnabled(ctx, ep.MerchantID, ep.ID, enabled, reason)
		if err != nil {
			return adminError(err)
		}
		state := map[bool]string{true: "enabled", false: "disabled"}[enabled]
		if !changed {
			fmt.Fprintf(a.stdout, "endpoint %s was already %s\n", ep.ID, state)
			return nil
		}
		fmt.Fprintf(a.stdout, "endpoint %s of merchant %s %s\n", ep.ID, ep.MerchantID, state)
		return nil
	})
}

type webhooksResendCmd struct {
	endpointArg
	Since string `name:"since" required:"" placeholder:"TIME|DURATION" help:"from when: an RFC 3339 time (2026-11-30T12:00:00Z) or a duration back from now (24h)"`
}

// since reads --since against now.
func (w *webhooksResendCmd) since(now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(w.Since); err == nil && d > 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339, w.Since); err == nil {
		return t, nil
	}
	return time.Time{}, usageError{fmt.Sprintf("--since %q is neither an RFC 3339 time nor a positive duration such as 24h", w.Since)}
}

func (w *webhooksResendCmd) Run(ctx context.Context, a *app, c *webhooksCmd) error {
	since, err := w.since(time.Now())
	if err != nil {
		return err
	}
	return c.withEndpoints(ctx, func(eps *webhooks.Endpoints) error {
		ep, err := w.find(ctx, eps)
		if err != nil {
			return err
		}
		n, err := eps.Resend(ctx, ep.MerchantID, ep.ID, since)
		if err != nil {
			return adminError(err)
		}
		fmt.Fprintf(a.stdout, "%d event(s) since %s queued again for endpoint %s\n", n, timestamp(since), ep.ID)
		return nil
	})
}

type webhooksDispatchCmd struct {
	Once     bool           `name:"once" help:"deliver everything due now, then exit"`
	Dispatch dispatchConfig `embed:""`
	Log      logConfig      `embed:""`
}

func (w *webhooksDispatchCmd) Run(ctx context.Context, a *app, c *webhooksCmd) error {
	if errs := c.Webhooks.requireKey(); len(errs) > 0 {
		return usageError{errs[0].Error()}
	}
	log := newLogger(w.Log, a.stderr)
	return withStore(ctx, c.DB, func(st *mysql.Store) error {
		ci, g, err := c.Webhooks.parts()
		if err != nil {
			return err
		}
		d := newDispatcher(st, ci, g, w.Dispatch, nil, log, nil)
		if w.Once {
			if err := d.RunOnce(ctx); err != nil {
				return err
			}
			fmt.Fprintln(a.stdout, "every delivery due was attempted")
			return nil
		}
		log.Info("webhook dispatcher started", "concurrency_per_endpoint", w.Dispatch.Concurrency)
		d.Run(ctx)
		return nil
	})
}
