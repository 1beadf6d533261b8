package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"gateway/db"
	"gateway/db/localdb"
	"gateway/psp/fake/fakeserver"
)

// runDev is what `make run` calls: everything a newcomer needs in one process.
func runDev(ctx context.Context, cfg Config, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("dev", "gateway dev", stderr)
	if help, err := parseFlags(fs, args); help || err != nil {
		return err
	}
	if cfg.DatabaseDSN == "" {
		dir, err := filepath.Abs(cfg.DevDataDir)
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
		cfg.DatabaseDSN = srv.DSN("gateway")
		fmt.Fprintf(stderr, "private MariaDB on %s, data in %s\n", srv.Addr(), dir)
	}
	if cfg.PSP == "fakehttp" && cfg.PSPURL == "" {
		// The standalone fake PSP, served over real HTTP from this process.
		url, stop, err := startFakePSP()
		if err != nil {
			return err
		}
		defer stop()
		cfg.PSPURL = url
		fmt.Fprintf(stderr, "fake PSP on %s (faults: PUT %s/admin/faults, ledger: GET %s/admin/ledger)\n", url, url, url)
	}
	if err := db.MigrateUp(cfg.DatabaseDSN); err != nil {
		return err
	}
	dbx, err := openDB(ctx, cfg)
	if err != nil {
		return err
	}
	m, key, err := createMerchant(ctx, dbx, "Demo merchant")
	dbx.Close()
	if err != nil {
		return err
	}
	cfg.AutoMigrate = false
	log := newLogger(cfg, stderr)
	return serve(ctx, cfg, log, func(addr string) {
		fmt.Fprintf(stdout, `
Gateway ready on http://%[1]s (PSP %[5]s, database %[4]s)
Demo merchant %[2]s, API key (shown once): %[3]s

Try a payment:
  curl -i -X POST http://%[1]s/payments \
    -H 'Authorization: Bearer %[3]s' \
    -H "Idempotency-Key: $(cat /proc/sys/kernel/random/uuid)" \
    -H 'Content-Type: application/json' \
    -d '{"amount": 1000, "currency": "KRW", "payment_method": "pm_card_ok", "description": "demo", "metadata": {"order": "A-1"}}'

Payment methods: pm_card_ok (succeeds), pm_card_declined, pm_card_insufficient_funds (decline).
Press Ctrl-C to stop.

`, addr, m.ID, key.Plaintext, maskDSN(cfg.DatabaseDSN), pspName(cfg))
	})
}

// createDatabase creates name on the server at serverDSN if it is missing.
func createDatabase(ctx context.Context, serverDSN, name string) error {
	dbx, err := db.Open(ctx, serverDSN, db.PoolOptions{MaxOpen: 1})
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

func pspName(cfg Config) string {
	if cfg.PSPURL != "" {
		return cfg.PSP + " at " + cfg.PSPURL
	}
	return cfg.PSP
}
