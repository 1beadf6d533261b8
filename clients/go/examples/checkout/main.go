// Command checkout is a shop's checkout backend on the gateway's Go client:
//
//   - POST /orders/{id}/checkout creates the order's payment, two-step
//     ("confirm": false), with the order's own Idempotency-Key, and hands
//     the checkout page what it confirms the payment with (the browser
//     client, clients/js, with the shop's publishable key);
//   - POST /webhooks/gateway receives the gateway's events and marks the
//     order paid once, in the shop's database, in the transaction that
//     records the event in the inbox (a redelivery changes nothing).
//
// It reads GATEWAY_URL, GATEWAY_SECRET_KEY, GATEWAY_WEBHOOK_SECRETS (the
// endpoint's whsec_…, comma-separated while rotating), SHOP_DATABASE_DSN
// and SHOP_ADDR (":8000" when unset). The shop's database is MySQL or
// MariaDB through database/sql: the program must be linked with a driver
// registered as "mysql" (import _ "github.com/go-sql-driver/mysql" in the
// shop's module; the client itself depends on none).
package main

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"time"

	gateway "gateway/clients/go"
	"gateway/clients/go/webhook"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Getenv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "checkout:", err)
		os.Exit(1)
	}
}

// ordersTable is the shop's own table, beside the inbox's.
const ordersTable = `CREATE TABLE IF NOT EXISTS orders (
  id VARCHAR(64) PRIMARY KEY,
  amount BIGINT NOT NULL,
  currency CHAR(3) NOT NULL,
  payment_id VARCHAR(64) NULL,
  paid_at DATETIME(6) NULL
)`

func run(ctx context.Context, getenv func(string) string, stderr io.Writer) error {
	log := slog.New(slog.NewTextHandler(stderr, nil))
	client, err := gateway.New(getenv("GATEWAY_SECRET_KEY"), gateway.WithBaseURL(getenv("GATEWAY_URL")))
	if err != nil {
		return err
	}
	db, err := sql.Open("mysql", getenv("SHOP_DATABASE_DSN"))
	if err != nil {
		return err
	}
	defer db.Close()
	inbox := webhook.NewMySQLInbox(db)
	if err := inbox.CreateTable(ctx); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, ordersTable); err != nil {
		return err
	}
	shop := &shop{db: db, gateway: client, log: log}

	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders/{id}/checkout", shop.checkout)
	secrets := strings.Split(getenv("GATEWAY_WEBHOOK_SECRETS"), ",")
	mux.Handle("POST /webhooks/gateway", webhook.NewHandler(secrets, inbox, shop.apply, webhook.WithLogger(log)))

	srv := &http.Server{Addr: cmp.Or(getenv("SHOP_ADDR"), ":8000"), Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	log.Info("checkout listening", "addr", srv.Addr)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

type shop struct {
	db      *sql.DB
	gateway *gateway.Client
	log     *slog.Logger
}

// checkout creates the order's payment. The key is the order's: a retry
// of this request, or of the whole checkout after a crash, gets the same
// payment, never a second one.
func (s *shop) checkout(w http.ResponseWriter, r *http.Request) {
	orderID := r.PathValue("id")
	var amount int64
	var currency string
	err := s.db.QueryRowContext(r.Context(), `SELECT amount, currency FROM orders WHERE id = ? AND paid_at IS NULL`, orderID).
		Scan(&amount, &currency)
	if errors.Is(err, sql.ErrNoRows) {
		http.Error(w, "no such unpaid order", http.StatusNotFound)
		return
	}
	if err != nil {
		s.fail(w, "read order", err)
		return
	}
	p, err := s.gateway.Payments.Create(r.Context(), &gateway.CreatePaymentRequest{
		Amount: amount, Currency: currency, Confirm: new(false),
		Description: "Order " + orderID, Metadata: map[string]string{"order": orderID},
	}, gateway.WithIdempotencyKey("order-"+orderID))
	if err != nil {
		s.fail(w, "create payment", err)
		return
	}
	if _, err := s.db.ExecContext(r.Context(), `UPDATE orders SET payment_id = ? WHERE id = ?`, p.ID, orderID); err != nil {
		s.fail(w, "keep payment id", err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"payment_id": p.ID, "client_secret": p.ClientSecret, "checkout": p.Checkout})
}

// apply marks an order paid when its payment succeeded; it runs once per
// event, in the inbox's transaction.
func (s *shop) apply(ctx context.Context, tx *sql.Tx, ev gateway.Event) error {
	if ev.Type != gateway.EventPaymentSucceeded && ev.Type != gateway.EventPaymentCaptured {
		return nil
	}
	p, err := ev.Payment()
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `UPDATE orders SET paid_at = UTC_TIMESTAMP(6) WHERE id = ? AND payment_id = ? AND paid_at IS NULL`,
		p.Metadata["order"], p.ID)
	return err
}

// fail logs what went wrong (the error names the request id the gateway
// logged it under, never a key) and answers 502.
func (s *shop) fail(w http.ResponseWriter, what string, err error) {
	s.log.Error("checkout failed", "step", what, "err", err)
	http.Error(w, "checkout is unavailable, try again", http.StatusBadGateway)
}
