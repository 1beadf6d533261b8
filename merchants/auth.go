package merchants

import (
	"context"
	"crypto/subtle"
	"log/slog"
	"sync"
	"time"

	"gateway/errs"
)

// AuthStore is what authentication reads.
type AuthStore interface {
	// ActiveKeysByPrefix lists the active keys sharing a visible prefix (almost
	// always zero or one), with their merchants; the caller compares hashes.
	ActiveKeysByPrefix(ctx context.Context, prefix string) ([]StoredKey, []Merchant, error)
}

// AuthConfig tunes authentication.
type AuthConfig struct {
	// CacheTTL is how long a verified API key is trusted without a database
	// read; 0 reads every time.
	CacheTTL time.Duration
	// Now is the cache's clock; time.Now when nil.
	Now func() time.Time
	// Logger receives nothing secret; nil discards.
	Logger *slog.Logger
}

// Auth resolves API keys to merchants.
type Auth struct {
	store AuthStore
	now   func() time.Time
	cache *authCache
	// unknown remembers, as briefly as verified keys, prefixes that no
	// active key has, so that a client repeating a wrong key costs no
	// database read either. (A new key's prefix is random: it cannot have
	// been remembered as unknown.)
	unknown *ttlCache[string, bool]
}

// NewAuth returns an Auth reading keys from store.
func NewAuth(store AuthStore, cfg AuthConfig) *Auth {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Auth{store: store, now: cfg.Now, cache: &authCache{ttl: cfg.CacheTTL, entries: map[[32]byte]authEntry{}},
		unknown: &ttlCache[string, bool]{ttl: cfg.CacheTTL}}
}

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

// Cached returns the merchant of an API key verified within the cache's
// TTL, without reading anything: the common case, answered before a
// caller sets up a deadline for the database.
func (a *Auth) Cached(apiKey string) (Merchant, bool) {
	if a.cache.ttl <= 0 || !wellFormedKey(apiKey, APIKeyPrefix) {
		return Merchant{}, false
	}
	return a.cache.get(HashAPIKey(apiKey), a.now())
}

// Authenticate finds the merchant owning an active API key. The key is found
// by its visible prefix and its hash compared in constant time, so response
// times say nothing about how close a guess was.
func (a *Auth) Authenticate(ctx context.Context, apiKey string) (Merchant, error) {
	unauthorized := &errs.Error{Code: errs.CodeUnauthorized, Message: "missing or invalid API key"}
	if !wellFormedKey(apiKey, APIKeyPrefix) {
		return Merchant{}, unauthorized
	}
	prefix := KeyPrefix(apiKey)
	hash := HashAPIKey(apiKey)
	now := a.now()
	if m, ok := a.cache.get(hash, now); ok {
		return m, nil
	}
	if _, ok := a.unknown.get(prefix, now); ok {
		return Merchant{}, unauthorized
	}
	keys, merchants, err := a.store.ActiveKeysByPrefix(ctx, prefix)
	if err != nil {
		return Merchant{}, errs.Internal(err)
	}
	if len(keys) == 0 {
		a.unknown.put(prefix, true, now)
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
	a.cache.put(hash, merchants[found], now)
	return merchants[found], nil
}

func (c *authCache) get(hash [32]byte, now time.Time) (Merchant, bool) {
	if c.ttl <= 0 {
		return Merchant{}, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[hash]
	if !ok || !now.Before(e.expires) {
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

// Forget drops every cached key, so that a revocation applies at once in this process.
func (a *Auth) Forget() {
	a.cache.mu.Lock()
	defer a.cache.mu.Unlock()
	clear(a.cache.entries)
	a.unknown.clear()
}
