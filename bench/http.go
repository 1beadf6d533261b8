package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// httpClient is a keep-alive client with room for every bench client's
// connection, so that no request pays for a new TCP connection once warm.
func httpClient() *http.Client {
	return &http.Client{
		Timeout: 60 * time.Second,
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConns:        0, // no overall limit
			MaxIdleConnsPerHost: 2048,
			IdleConnTimeout:     90 * time.Second,
			DisableCompression:  true,
		},
	}
}

// answer is the part of a response the scenarios check.
type answer struct {
	status   int
	replayed bool
	body     []byte
}

// paymentBody is the request body for key: a realistic payment whose
// metadata names the key, so that every key has its own body.
func paymentBody(key string) []byte {
	return []byte(`{"amount":12500,"currency":"USD","payment_method":"pm_card_ok","description":"Order ` + key +
		`","metadata":{"order":` + strconv.Quote(key) + `,"channel":"web"}}`)
}

// createPayment posts one payment with key and body for the bench merchant.
func (g *gateway) createPayment(ctx context.Context, hc *http.Client, key string, body []byte) (answer, error) {
	return g.post(ctx, hc, g.apiKey, key, body)
}

// post sends POST /payments with the merchant's apiKey.
func (g *gateway) post(ctx context.Context, hc *http.Client, apiKey, key string, body []byte) (answer, error) {
	return g.postTo(ctx, hc, "/payments", apiKey, key, body)
}

// createPaymentIn is createPayment naming an API version (Gateway-Version).
func (g *gateway) createPaymentIn(ctx context.Context, hc *http.Client, version, key string, body []byte) (answer, error) {
	return g.postTo(ctx, hc, "/payments", g.apiKey, key, body, "Gateway-Version", version)
}

// postTo sends a POST of body to path with apiKey and Idempotency-Key key,
// and the headers of hdr (name, value, …).
func (g *gateway) postTo(ctx context.Context, hc *http.Client, path, apiKey, key string, body []byte, hdr ...string) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.url+path, bytes.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := hc.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	return answer{status: resp.StatusCode, replayed: resp.Header.Get("Idempotent-Replayed") == "true", body: b}, nil
}

// healthz asks GET /healthz: the HTTP stack and middleware, no database.
func (g *gateway) healthz(ctx context.Context, hc *http.Client) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.url+"/healthz", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthz: status %d", resp.StatusCode)
	}
	return nil
}

// wantFresh checks the answer to a payment made for the first time.
func wantFresh(a answer) error {
	if a.status != http.StatusCreated || a.replayed {
		return fmt.Errorf("fresh payment: status %d (replayed %v): %.200s", a.status, a.replayed, a.body)
	}
	return nil
}

// wantReplay checks the answer to a key completed earlier.
func wantReplay(a answer) error {
	if a.status != http.StatusCreated || !a.replayed {
		return fmt.Errorf("replay: status %d (replayed %v): %.200s", a.status, a.replayed, a.body)
	}
	return nil
}
