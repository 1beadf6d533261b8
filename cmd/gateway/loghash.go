package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"gateway/idemkeys"
	"gateway/payments"
)

// logKeysCmd is `gateway keys`: what the logs call an idempotency key.
type logKeysCmd struct {
	Hash keysHashCmd `cmd:"" help:"Print the names the logs give an idempotency key and its merchant, keyed by GATEWAY_LOG_HASH_SECRET: grep the logs for them."`
}

// keysHashCmd is `gateway keys hash`.
type keysHashCmd struct {
	Merchant   string `name:"merchant" required:"" placeholder:"mer_…" help:"the merchant whose key it is"`
	Endpoint   string `name:"endpoint" default:"POST /payments" placeholder:"\"METHOD PATH\"" help:"the endpoint the key was sent to: POST /payments, POST /payments/{id}/refunds or POST /payments/{id}/confirm, as the logs scope them"`
	Key        string `arg:"" name:"key" help:"the idempotency key, as the client sent it (without the quotes of a Structured Field string)"`
	HashSecret string `name:"log-hash-secret" env:"GATEWAY_LOG_HASH_SECRET" hidden:"" secret:"" help:"the replicas' log hash secret"`
}

func (c *keysHashCmd) check() []error {
	if c.HashSecret == "" {
		return []error{errors.New("GATEWAY_LOG_HASH_SECRET is not set: the logs' names are keyed by the replicas' secret, and mean nothing without it")}
	}
	return nil
}

func (c *keysHashCmd) Run(a *app) error {
	endpoint := c.Endpoint
	switch {
	case strings.HasSuffix(endpoint, "/refunds"):
		endpoint = payments.EndpointCreateRefund
	case strings.HasSuffix(endpoint, "/confirm"):
		endpoint = payments.EndpointConfirmPayment
	}
	h := idemkeys.NewHasher([]byte(c.HashSecret))
	ref := idemkeys.Ref{MerchantID: c.Merchant, Endpoint: endpoint, Key: c.Key}
	fmt.Fprintf(a.stdout, "key %s\nmerchant %s\n", h.Key(ref), h.Merchant(c.Merchant))
	return nil
}

// devHashSecret is the log hash secret `gateway dev` keeps beside its data
// directory, made on its first run, so that its logs correlate from one run
// to the next and `gateway keys hash` can name their keys.
func devHashSecret(dataDir string) (path, secret string, err error) {
	path = filepath.Join(filepath.Dir(filepath.Clean(dataDir)), "log-hash-secret")
	b, err := os.ReadFile(path)
	if err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return path, strings.TrimSpace(string(b)), nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", "", err
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", "", err
	}
	secret = hex.EncodeToString(raw[:])
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		return "", "", err
	}
	return path, secret, nil
}
