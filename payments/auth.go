package payments

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"sync"
	"time"
)

// authCacheMax bounds the cache of recently verified keys; when full it is
// emptied, which costs one database read per active key.
const authCacheMax = 10_000

// authCache remembers verified keys for a short time, so that a busy
// merchant's requests do not each pay a database read. A revoked key keeps
// working on a replica for at most the TTL.
type authCache struct {
	ttl     time.Duration
	mu      sync.Mutex
	entries map[[32]byte]authEntry
}

type authEntry struct {
	merchant Merchant
	expires  time.Time
}

// Authenticate finds the merchant owning an active API key. The key is found
// by its visible prefix and its hash compared in constant time, so response
// times say nothing about how close a guess was.
func (s *Service) Authenticate(ctx context.Context, apiKey string) (Merchant, error) {
	unauthorized := &Error{Code: CodeUnauthorized, Message: "missing or invalid API key"}
	prefix := KeyPrefix(apiKey)
	if prefix == "" || len(apiKey) > 128 {
		return Merchant{}, unauthorized
	}
	hash := HashAPIKey(apiKey)
	now := s.cfg.Now()
	if m, ok := s.auth.get(hash, now); ok {
		return m, nil
	}
	keys, merchants, err := s.store.ActiveKeysByPrefix(ctx, prefix)
	if err != nil {
		return Merchant{}, internal(err)
	}
	found := -1
	for i, k := range keys {
		if subtle.ConstantTimeCompare(k.Hash[:], hash[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Merchant{}, unauthorized
	}
	s.auth.put(hash, merchants[found], now)
	return merchants[found], nil
}

func (c *authCache) get(hash [32]byte, now time.Time) (Merchant, bool) {
	if c.ttl <= 0 {
		return Merchant{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[hash]
	if !ok || now.After(e.expires) {
		return Merchant{}, false
	}
	return e.merchant, true
}

func (c *authCache) put(hash [32]byte, m Merchant, now time.Time) {
	if c.ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= authCacheMax {
		clear(c.entries)
	}
	c.entries[hash] = authEntry{merchant: m, expires: now.Add(c.ttl)}
}

// forget drops every cached key, so that a revocation in this process applies at once.
func (c *authCache) forget() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.entries)
}

// CreateAPIKey mints another key for a merchant, for rotation: several keys
// may be active at once. The plaintext in the result is shown once.
func (s *Service) CreateAPIKey(ctx context.Context, merchantID string) (APIKey, error) {
	key, err := NewAPIKey()
	if err != nil {
		return APIKey{}, internal(err)
	}
	err = s.store.AddAPIKey(ctx, merchantID, key, s.cfg.Now().UTC().Truncate(time.Microsecond))
	if errors.Is(err, ErrNotFound) {
		return APIKey{}, Errorf(CodeNotFound, "no merchant %s", merchantID)
	}
	if err != nil {
		return APIKey{}, internal(err)
	}
	return key, nil
}

// RevokeAPIKey revokes the merchant's active key with the given visible prefix.
func (s *Service) RevokeAPIKey(ctx context.Context, merchantID, prefix string) error {
	n, err := s.store.RevokeAPIKey(ctx, merchantID, prefix, s.cfg.Now().UTC().Truncate(time.Microsecond))
	if err != nil {
		return internal(err)
	}
	if n == 0 {
		return Errorf(CodeNotFound, "merchant %s has no active key with prefix %s", merchantID, prefix)
	}
	s.auth.forget()
	return nil
}

// APIKeys lists a merchant's keys (prefixes and dates, never secrets).
func (s *Service) APIKeys(ctx context.Context, merchantID string) ([]StoredKey, error) {
	keys, err := s.store.APIKeys(ctx, merchantID)
	if err != nil {
		return nil, internal(fmt.Errorf("list keys: %w", err))
	}
	return keys, nil
}
