package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"gateway/demo"
	"gateway/merchants"
)

// dev's reference checkout page (package demo) at /demo/checkout: the demo
// merchant gets a publishable key, and its pages the origins dev answers on.

// devCheckout is what dev hands the demo: the merchant and its keys.
type devCheckout struct {
	merchant       merchants.Merchant
	secretKey      string
	publishableKey string
}

// newDevCheckout mints the demo merchant's publishable key.
func newDevCheckout(ctx context.Context, dsn dsnConfig, m merchants.Merchant, secretKey string) (devCheckout, error) {
	dc := devCheckout{merchant: m, secretKey: secretKey}
	err := withBrowserAccess(ctx, dsn, func(b *merchants.BrowserAccess) error {
		pk, err := b.CreatePublishableKey(ctx, m.ID)
		dc.publishableKey = pk.Plaintext
		return err
	})
	return dc, err
}

// devOrigins are the origins a browser on this machine reaches addr by.
func devOrigins(addr string) (api string, origins []string) {
	host, port, _ := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	api = "http://" + net.JoinHostPort(host, port)
	origins = []string{api}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		origins = append(origins, "http://"+net.JoinHostPort("localhost", port))
	}
	return api, origins
}

// mount allows the page's origins and serves the demo beside the API.
func (dc devCheckout) mount(ctx context.Context, dsn dsnConfig, log *slog.Logger) func(http.Handler, string) (http.Handler, error) {
	return func(apiHandler http.Handler, addr string) (http.Handler, error) {
		apiBase, origins := devOrigins(addr)
		err := withBrowserAccess(ctx, dsn, func(b *merchants.BrowserAccess) error {
			for _, o := range origins {
				if _, _, err := b.AllowOrigin(ctx, dc.merchant.ID, o); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("allow the checkout demo's origins: %w", err)
		}
		page, err := demo.Handler(demo.Options{APIBase: apiBase, SecretKey: dc.secretKey, PublishableKey: dc.publishableKey, Logger: log})
		if err != nil {
			return nil, err
		}
		mux := http.NewServeMux()
		mux.Handle("/demo/", page)
		mux.Handle("/", apiHandler)
		return mux, nil
	}
}

// demoURL is the page's address, on localhost so that the page's calls to
// the API (on the address dev listens on) cross origins as a merchant's do.
func demoURL(addr string) string {
	_, origins := devOrigins(addr)
	return origins[len(origins)-1] + "/demo/checkout"
}
