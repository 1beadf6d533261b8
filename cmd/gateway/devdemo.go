package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"

	"gateway/demo"
	"gateway/merchants"
	"gateway/mysql"
)

// dev's reference checkout page (package demo) at /demo/checkout: the demo
// merchant gets a publishable key, and its pages the origins dev answers on.

// devCheckout is what dev hands the demo: the merchant and its keys.
type devCheckout struct {
	merchant       merchants.Merchant
	secretKey      string
	publishableKey string
}

// devMerchant is dev's demo merchant with its secret and publishable keys:
// the one kept in the file keptIn (when set) while its keys still open it,
// otherwise a new one, kept there for the next run.
func devMerchant(ctx context.Context, dsn dsnConfig, keptIn string) (devCheckout, error) {
	if keptIn != "" {
		if dc, ok := keptMerchant(ctx, dsn, keptIn); ok {
			return dc, nil
		}
	}
	var dc devCheckout
	err := withMerchants(ctx, dsn, func(adm *merchants.Admin) error {
		m, key, err := adm.CreateMerchant(ctx, "Demo merchant")
		dc.merchant, dc.secretKey = m, key.Plaintext
		return err
	})
	if err != nil {
		return devCheckout{}, err
	}
	err = withBrowserAccess(ctx, dsn, func(b *merchants.BrowserAccess) error {
		pk, err := b.CreatePublishableKey(ctx, dc.merchant.ID)
		dc.publishableKey = pk.Plaintext
		return err
	})
	if err != nil || keptIn == "" {
		return dc, err
	}
	b, err := json.Marshal(keptKeys{MerchantID: dc.merchant.ID, APIKey: dc.secretKey, PublishableKey: dc.publishableKey})
	if err != nil {
		return devCheckout{}, err
	}
	if err := os.WriteFile(keptIn, append(b, '\n'), 0o600); err != nil {
		return devCheckout{}, fmt.Errorf("keep the demo merchant: %w", err)
	}
	return dc, nil
}

// keptKeys is the file dev keeps its demo merchant's keys in.
type keptKeys struct {
	MerchantID     string `json:"merchant_id"`
	APIKey         string `json:"api_key"`
	PublishableKey string `json:"publishable_key"`
}

// keptMerchant reads the kept demo merchant; false when there is none, or
// when its keys no longer open it (a database reset, a key revoked).
func keptMerchant(ctx context.Context, dsn dsnConfig, path string) (devCheckout, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return devCheckout{}, false
	}
	var k keptKeys
	if json.Unmarshal(b, &k) != nil {
		return devCheckout{}, false
	}
	var dc devCheckout
	err = withStore(ctx, dsn, func(st *mysql.Store) error {
		m, err := merchants.NewAuth(st, merchants.AuthConfig{}).Authenticate(ctx, k.APIKey)
		if err != nil {
			return err
		}
		pm, _, err := merchants.NewBrowserAuth(st, merchants.AuthConfig{}).AuthenticatePublishable(ctx, k.PublishableKey)
		if err != nil {
			return err
		}
		if m.ID != k.MerchantID || pm.ID != k.MerchantID {
			return errors.New("the kept keys open another merchant")
		}
		dc = devCheckout{merchant: m, secretKey: k.APIKey, publishableKey: k.PublishableKey}
		return nil
	})
	return dc, err == nil
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
