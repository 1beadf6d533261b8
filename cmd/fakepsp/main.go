// Command fakepsp is the standalone fake payment service provider: the API of
// package psp/fake/fakeserver on a real listener, with fault injection set by flags at
// start and by PUT /admin/faults while it runs. The gateway reaches it with
// GATEWAY_PSP=fakehttp and GATEWAY_PSP_URL.
//
//	go run ./cmd/fakepsp -latency-max-ms 300 -error-after-charge 0.05 -drop-connection-after-charge 0.05
//
// Its payment methods answer every outcome a real PSP gives: pm_card_ok
// succeeds; pm_card_declined, pm_card_insufficient_funds and pm_card_lost are
// declined (the raw code kept); pm_card_3ds is pending with a redirect to its
// 3-D Secure page (GET /3ds/{reference}) when the charge allows a next
// action; pm_virtual_account is pending until POST
// /admin/charges/{merchant_order_id}/settle; pm_invalid_request, a currency
// it does not take and a non-positive amount are refused 400 (rejected). A
// charge with "capture_method":"manual" is authorized instead of succeeded,
// for -authorization-validity (7 days), and captured (POST /v1/captures) or
// voided (POST /v1/voids) later, under the same faults. GET /v1/transactions
// lists its ledger by period, and /admin/ledger/charges, /admin/ledger/refunds,
// /admin/charges/{merchant_order_id}/drop and /admin/ledger/fail plant what
// the gateway never asked for, lose a charge, or fail listings
// (docs/fake-psp.md).
//
// It listens on 127.0.0.1:9090 unless -addr or FAKEPSP_ADDR says otherwise,
// and shuts down gracefully on SIGINT or SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"gateway/psp/fake"
	"gateway/psp/fake/fakeserver"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
	case err != nil:
		fmt.Fprintln(os.Stderr, "fakepsp:", err)
		os.Exit(1)
	}
}

// defaultAddr is where the server listens unless told otherwise.
const defaultAddr = "127.0.0.1:9090"

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fakepsp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := defaultAddr
	if v := getenv("FAKEPSP_ADDR"); v != "" {
		addr = v
	}
	var f fakeserver.Faults
	fs.StringVar(&addr, "addr", addr, "listen address host:port (env FAKEPSP_ADDR)")
	fs.IntVar(&f.Latency.Min, "latency-min-ms", 0, "shortest simulated processing time of a POST, in ms")
	fs.IntVar(&f.Latency.Max, "latency-max-ms", 0, "longest simulated processing time of a POST, in ms")
	fs.Float64Var(&f.ErrorBeforeCharge, "error-before-charge", 0, "rate of 503 not_processed answers, nothing recorded")
	fs.Float64Var(&f.ErrorAfterCharge, "error-after-charge", 0, "rate of 500 answers after the charge was recorded")
	fs.Float64Var(&f.TimeoutAfterCharge, "timeout-after-charge", 0, "rate of answers held until the client gives up, after the charge was recorded")
	fs.Float64Var(&f.DropConnectionAfterCharge, "drop-connection-after-charge", 0, "rate of connections reset after the charge was recorded")
	seed := fs.Uint64("seed", 0, "seed of the fault draws (0: random)")
	holdMax := fs.Duration("hold-max", time.Minute, "longest time a timed-out answer is held for a client that never gives up")
	validity := fs.Duration("authorization-validity", fake.DefaultAuthorizationValidity, "how long an authorization stays capturable before it lapses (at least 1s)")
	shutdownTimeout := fs.Duration("shutdown-timeout", 10*time.Second, "how long in-flight requests may finish after SIGINT/SIGTERM")
	logFormat := fs.String("log-format", "text", "log format: text or json")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var handler slog.Handler
	switch *logFormat {
	case "text":
		handler = slog.NewTextHandler(stderr, nil)
	case "json":
		handler = slog.NewJSONHandler(stderr, nil)
	default:
		return fmt.Errorf("-log-format must be text or json, got %q", *logFormat)
	}
	log := slog.New(handler)

	psp, err := fakeserver.New(fakeserver.Options{Faults: f, Seed: *seed, HoldMax: *holdMax, Logger: log, AuthorizationValidity: *validity})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: psp, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("fakepsp listening", "url", "http://"+ln.Addr().String(), "faults", fmt.Sprintf("%+v", f))
	fmt.Fprintf(stdout, "fakepsp listening on http://%s\n", ln.Addr())

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("fakepsp shutting down")
	psp.Close() // held answers are dropped instead of waiting out -hold-max
	sctx, cancel := context.WithTimeout(context.Background(), *shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
