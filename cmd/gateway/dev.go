package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"gateway/mysql"
	"gateway/mysql/localdb"
	"gateway/psp/fake/fakeserver"
	"gateway/webhooks"
)

// devCmd is `gateway dev`, what `make run` calls: everything a newcomer
// needs in one process.
type devCmd struct {
	Server  serverConfig `embed:""`
	DataDir string       `name:"dev-data-dir" env:"GATEWAY_DEV_DATA_DIR" default:".data/mariadb" placeholder:"DIR" help:"data directory of the private MariaDB, started when GATEWAY_DATABASE_DSN is unset"`
}

func (c *devCmd) check() []error {
	if c.DataDir == "" {
		return []error{problem("GATEWAY_DEV_DATA_DIR", "must not be empty")}
	}
	return nil
}

func (c *devCmd) Run(ctx context.Context, a *app) error {
	cfg := c.Server
	stderr := a.stderr
	if cfg.DB.DSN == "" {
		dir, err := filepath.Abs(c.DataDir)
		if err != nil {
			return err
		}
		srv, err := localdb.Start(ctx, localdb.Options{DataDir: dir, Log: stderr})
		if err != nil {
			return fmt.Errorf("start private MariaDB: %w", err)
		}
		defer func() {
			fmt.Fprintln(stderr, "stopping the private MariaDB")
			if err := srv.Stop(); err != nil {
				fmt.Fprintln(stderr, "stop MariaDB:", err)
			}
		}()
		if err := createDatabase(ctx, srv.DSN(""), "gateway"); err != nil {
			return err
		}
		cfg.DB.DSN = srv.DSN("gateway")
		fmt.Fprintf(stderr, "private MariaDB on %s, data in %s\n", srv.Addr(), dir)
		if cfg.Log.HashSecret == "" {
			// Kept beside the private database, so that its logs correlate
			// from one run to the next and gateway keys hash can name keys.
			path, secret, err := devHashSecret(dir)
			if err != nil {
				return fmt.Errorf("log hash secret: %w", err)
			}
			cfg.Log.HashSecret = secret
			fmt.Fprintf(stderr, "logs name keys by a hash keyed with the secret in %s (GATEWAY_LOG_HASH_SECRET=$(cat %s) gateway keys hash --merchant M KEY)\n", path, path)
		}
		if cfg.Webhooks.Key == "" {
			if cfg.Webhooks.Key, err = devWebhookKey(dir); err != nil {
				return fmt.Errorf("webhook key: %w", err)
			}
		}
	}
	if cfg.Webhooks.Key == "" {
		key, err := webhooks.NewKey()
		if err != nil {
			return err
		}
		cfg.Webhooks.Key = key
		fmt.Fprintln(stderr, "webhooks: a fresh GATEWAY_WEBHOOK_KEY for this run (endpoints registered now will not sign in another run; set one to keep them)")
	}
	if cfg.Webhooks.AllowNetworks == "" {
		// A developer's receiver runs on this machine.
		cfg.Webhooks.AllowNetworks = "127.0.0.0/8,::1/128"
	}
	if cfg.PSP.adapter() == "fakehttp" && cfg.PSP.URL == "" {
		// The standalone fake PSP, served over real HTTP from this process.
		url, stop, err := startFakePSP()
		if err != nil {
			return err
		}
		defer stop()
		cfg.PSP.URL = url
		fmt.Fprintf(stderr, "fake PSP on %s (faults: PUT %s/admin/faults, ledger: GET %s/admin/ledger)\n", url, url, url)
	}
	mg, err := mysql.NewMigrator(cfg.DB.DSN)
	if err != nil {
		return err
	}
	prog := a.progress(false)
	mg.Progress = func(s mysql.Step) { prog.linef("%s", stepLine(s)) }
	if err := errors.Join(mg.Up(), mg.Close()); err != nil {
		return err
	}
	keptIn := ""
	if c.Server.DB.DSN == "" {
		// The private database is kept from one run to the next: so is its
		// demo merchant, with its keys beside it.
		keptIn = filepath.Join(filepath.Dir(filepath.Clean(c.DataDir)), "demo-merchant.json")
	}
	checkout, err := devMerchant(ctx, cfg.DB, keptIn)
	if err != nil {
		return err
	}
	m, shown := checkout.merchant, "shown once"
	if keptIn != "" {
		shown = "kept in " + keptIn
	}
	log := newLogger(cfg.Log, stderr)
	return serve(ctx, &cfg, false, log, func(addr string) {
		fmt.Fprintf(a.stdout, `
Gateway ready on http://%[1]s (PSP %[5]s, database %[4]s)
Demo merchant %[2]s, API key (%[8]s): %[3]s

Try a payment (run it twice: the second answer is a replay, Idempotent-Replayed: true):
  KEY=$(cat /proc/sys/kernel/random/uuid)
  curl -i -X POST http://%[1]s/payments \
    -H 'Authorization: Bearer %[3]s' \
    -H "Idempotency-Key: $KEY" \
    -H 'Content-Type: application/json' \
    -d '{"amount": 1000, "currency": "KRW", "payment_method": "pm_card_ok", "description": "demo", "metadata": {"order": "A-1"}}'

Payment methods: pm_card_ok (succeeds), pm_card_declined, pm_card_insufficient_funds (decline).

Checkout demo (confirms in the browser with publishable key %[6]s):
  %[7]s

Press Ctrl-C to stop.

`, addr, m.ID, checkout.secretKey, maskDSN(cfg.DB.DSN), pspName(cfg.PSP), checkout.publishableKey, demoURL(addr), shown)
	}, checkout.mount(ctx, cfg.DB, log))
}

// createDatabase creates name on the server at serverDSN if it is missing.
func createDatabase(ctx context.Context, serverDSN, name string) error {
	dbx, err := mysql.Open(ctx, serverDSN, mysql.PoolOptions{MaxOpen: 1})
	if err != nil {
		return err
	}
	defer dbx.Close()
	return execCreate(ctx, dbx, name)
}

func execCreate(ctx context.Context, dbx *sqlx.DB, name string) error {
	if strings.ContainsAny(name, "`\x00") {
		return fmt.Errorf("invalid database name %q", name)
	}
	_, err := dbx.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
	return err
}

// startFakePSP serves the standalone fake PSP on a free loopback port.
func startFakePSP() (url string, stop func(), err error) {
	srv, err := fakeserver.New(fakeserver.Options{})
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = hs.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { srv.Close(); _ = hs.Close() }, nil
}

func pspName(cfg pspConfig) string {
	if cfg.URL != "" {
		return cfg.adapter() + " at " + cfg.URL
	}
	return cfg.adapter()
}
