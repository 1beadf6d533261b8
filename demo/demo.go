// Package demo owns the reference checkout page that `gateway dev` serves
// at /demo/checkout: a stub of the merchant's server, which creates each
// order's payment with the merchant's secret key ("confirm": false), and a
// page that confirms it in the customer's browser through the gateway's
// JavaScript client (clients/js) with the merchant's publishable key, the
// fake PSP's test payment methods standing in for a PSP's widget. It shows
// the four ends a checkout has: succeeded, declined, needs action, try
// again. Only dev serves it; it holds a secret key and creates payments
// for anyone who can reach it.
package demo

import (
	"bytes"
	"context"
	"crypto/rand"
	"embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	jsclient "gateway/clients/js"
)

//go:embed assets
var assets embed.FS

// Options configure the demo.
type Options struct {
	// APIBase is the gateway's URL, as the page and the stub reach it
	// (http://127.0.0.1:8080).
	APIBase string
	// SecretKey is the demo merchant's API key: the stub's, never the page's.
	SecretKey string
	// PublishableKey is the demo merchant's publishable key, for the page.
	PublishableKey string
	// Amount and Currency are the order's (15,000 KRW when zero).
	Amount   int64
	Currency string
	// Client sends the stub's requests; a client with a 30 s timeout when nil.
	Client *http.Client
	Logger *slog.Logger
}

// Handler serves the page under /demo/.
func Handler(opts Options) (http.Handler, error) {
	if opts.APIBase == "" || !strings.HasPrefix(opts.SecretKey, "sk_") || !strings.HasPrefix(opts.PublishableKey, "pk_") {
		return nil, fmt.Errorf("demo: needs the gateway's URL, a secret key and a publishable key")
	}
	if opts.Amount == 0 {
		opts.Amount, opts.Currency = 15000, "KRW"
	}
	if opts.Client == nil {
		opts.Client = &http.Client{Timeout: 30 * time.Second}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	page, err := template.ParseFS(assets, "assets/checkout.html")
	if err != nil {
		return nil, err
	}
	d := &demo{opts: opts, page: page}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /demo/checkout", d.servePage)
	mux.HandleFunc("POST /demo/orders", d.createOrder)
	mux.Handle("GET /demo/assets/", noStore(http.StripPrefix("/demo/", http.FileServerFS(assets))))
	mux.Handle("GET /demo/gateway.js", noStore(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, jsclient.Files, "gateway.js")
	})))
	return mux, nil
}

type demo struct {
	opts Options
	page *template.Template
}

// noStore keeps a browser from running yesterday's page during development.
func noStore(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		h.ServeHTTP(w, r)
	})
}

func (d *demo) servePage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	var b bytes.Buffer
	err := d.page.Execute(&b, struct{ APIBase, PublishableKey string }{d.opts.APIBase, d.opts.PublishableKey})
	if err != nil {
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	_, _ = w.Write(b.Bytes())
}

// order is what the stub hands the page: the payment to confirm and its
// client secret (never the secret key).
type order struct {
	PaymentID    string `json:"payment_id"`
	ClientSecret string `json:"client_secret"`
	Amount       int64  `json:"amount"`
	Currency     string `json:"currency"`
	Description  string `json:"description"`
}

// createOrder is the merchant's server: it creates the order's payment at
// the gateway with its secret key and one Idempotency-Key per order.
func (d *demo) createOrder(w http.ResponseWriter, r *http.Request) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	orderID := "demo-order-" + hex.EncodeToString(b[:])
	body, _ := json.Marshal(map[string]any{"amount": d.opts.Amount, "currency": d.opts.Currency, "confirm": false,
		"description": "Demo shop order", "metadata": map[string]string{"order": orderID}})
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, d.opts.APIBase+"/payments", bytes.NewReader(body))
	if err != nil {
		d.refuse(w, err)
		return
	}
	req.Header.Set("Authorization", "Bearer "+d.opts.SecretKey)
	req.Header.Set("Idempotency-Key", orderID)
	req.Header.Set("Content-Type", "application/json")
	res, err := d.opts.Client.Do(req)
	if err != nil {
		d.refuse(w, err)
		return
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil || res.StatusCode != http.StatusAccepted {
		d.refuse(w, fmt.Errorf("the gateway answered %d: %s", res.StatusCode, raw))
		return
	}
	var p struct {
		ID           string `json:"id"`
		ClientSecret string `json:"client_secret"`
		Amount       int64  `json:"amount"`
		Currency     string `json:"currency"`
		Description  string `json:"description"`
	}
	if err := json.Unmarshal(raw, &p); err != nil || p.ClientSecret == "" {
		d.refuse(w, fmt.Errorf("the gateway's answer has no client secret: %v", err))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(order{PaymentID: p.ID, ClientSecret: p.ClientSecret, Amount: p.Amount, Currency: p.Currency, Description: p.Description})
}

func (d *demo) refuse(w http.ResponseWriter, err error) {
	d.opts.Logger.Warn("demo: creating an order's payment failed", "err", err)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadGateway)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": "the shop could not create the payment; try again"})
}
