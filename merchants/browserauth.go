package merchants

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"gateway/errs"
)

// Browser checkout. A secret API key never reaches a browser: the
// merchant's server creates the payment ("confirm": false) with its secret
// key, and the answer carries the payment's client secret. The customer's
// browser then presents a publishable key (pk_…), which names the merchant
// and can do nothing by itself, together with that client secret, to read
// and to confirm that one payment — and nothing else: no creation, no
// listing, no refund, no other payment. Browsers may do so only from the
// origins the merchant allows (CORS).

// PublishableKeyPrefix starts every publishable key.
const PublishableKeyPrefix = "pk_"

// NewPublishableKey mints a publishable key with 160 random bits. It is
// public by design (every visitor of the checkout page sees it), but it is
// stored as API keys are, hashed, so that a list of them is no list of keys.
func NewPublishableKey() (APIKey, error) { return newKey(PublishableKeyPrefix) }

// PublishablePrefix is the visible start of a publishable key; "" when plain
// cannot be one.
func PublishablePrefix(plain string) string { return visiblePrefix(plain, PublishableKeyPrefix) }

// maxOriginLen is the longest origin a merchant may allow (its column).
const maxOriginLen = 255

// NormalizeOrigin returns a browser origin as browsers send it in the
// Origin header — scheme://host[:port], lower case, without the scheme's
// default port — or a errs.CodeInvalid *errs.Error. A trailing slash is forgiven; a
// path, query, fragment, user, wildcard or the opaque origin "null" is not.
func NormalizeOrigin(origin string) (string, error) {
	bad := func(reason string) (string, error) {
		return "", &errs.Error{Code: errs.CodeInvalid, Message: fmt.Sprintf("%q is not a browser origin: %s", origin, reason),
			Fields: []errs.FieldError{{Field: "origin", Reason: reason}}}
	}
	if origin == "" || len(origin) > maxOriginLen || !printableASCII(origin) {
		return bad(fmt.Sprintf("must be 1 to %d visible ASCII characters", maxOriginLen))
	}
	u, err := url.Parse(origin)
	if err != nil {
		return bad("must look like https://shop.example or http://localhost:3000")
	}
	scheme := strings.ToLower(u.Scheme)
	switch {
	case scheme != "https" && scheme != "http":
		return bad("the scheme must be https (or http)")
	case u.Opaque != "" || u.Host == "" || strings.Contains(u.Host, "*"):
		return bad("must name one host, like https://shop.example")
	case u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return bad("must be scheme://host[:port] only, without a user, path, query or fragment")
	}
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if host == "" {
		return bad("must name one host, like https://shop.example")
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port == "" || (scheme == "https" && port == "443") || (scheme == "http" && port == "80") {
		return scheme + "://" + host, nil
	}
	return scheme + "://" + host + ":" + port, nil
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// BrowserStore is what browser authentication reads.
type BrowserStore interface {
	// ActivePublishableKeysByPrefix lists the active publishable keys
	// sharing a visible prefix (almost always zero or one), with their
	// merchants; the caller compares hashes.
	ActivePublishableKeysByPrefix(ctx context.Context, prefix string) ([]StoredKey, []Merchant, error)
	// MerchantOrigins lists the origins a merchant allows, in order.
	MerchantOrigins(ctx context.Context, merchantID string) ([]string, error)
	// AllowedOrigins lists every origin some merchant allows, each once.
	AllowedOrigins(ctx context.Context) ([]string, error)
}

// BrowserAuth authenticates publishable keys and judges browser origins.
// What it verified it trusts for the configured TTL without a database
// read, as Auth does: a revoked key, or an origin taken off a merchant's
// list, keeps working on a replica for at most that long.
type BrowserAuth struct {
	store BrowserStore
	now   func() time.Time
	keys  *ttlCache[[32]byte, browserMerchant]
	// origins is every origin some merchant allows, for CORS preflights.
	origins *originSet
	// unknown remembers prefixes no active publishable key has.
	unknown *ttlCache[string, bool]
}

// browserMerchant is a publishable key's merchant with the origins it allows.
type browserMerchant struct {
	merchant Merchant
	origins  []string
}

// NewBrowserAuth returns a BrowserAuth over store, with cfg's cache TTL and clock.
func NewBrowserAuth(store BrowserStore, cfg AuthConfig) *BrowserAuth {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &BrowserAuth{store: store, now: cfg.Now,
		keys:    &ttlCache[[32]byte, browserMerchant]{ttl: cfg.CacheTTL},
		origins: &originSet{ttl: cfg.CacheTTL},
		unknown: &ttlCache[string, bool]{ttl: cfg.CacheTTL}}
}

// AuthenticatePublishable finds the merchant owning an active publishable
// key, and the origins that merchant allows. The key is found by its visible
// prefix and its hash compared in constant time. Errors: *errs.Error
// errs.CodeUnauthorized for a key that is not an active publishable key;
// errs.CodeUnavailable or errs.CodeInternal when it cannot tell.
func (a *BrowserAuth) AuthenticatePublishable(ctx context.Context, key string) (Merchant, []string, error) {
	unauthorized := &errs.Error{Code: errs.CodeUnauthorized, Message: "missing or invalid publishable key"}
	if !wellFormedKey(key, PublishableKeyPrefix) {
		return Merchant{}, nil, unauthorized
	}
	prefix := PublishablePrefix(key)
	hash := HashAPIKey(key)
	now := a.now()
	if bm, ok := a.keys.get(hash, now); ok {
		return bm.merchant, bm.origins, nil
	}
	if _, ok := a.unknown.get(prefix, now); ok {
		return Merchant{}, nil, unauthorized
	}
	keys, merchants, err := a.store.ActivePublishableKeysByPrefix(ctx, prefix)
	if err != nil {
		return Merchant{}, nil, errs.Internal(err)
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
		return Merchant{}, nil, unauthorized
	}
	origins, err := a.store.MerchantOrigins(ctx, merchants[found].ID)
	if err != nil {
		return Merchant{}, nil, errs.Internal(err)
	}
	a.keys.put(hash, browserMerchant{merchant: merchants[found], origins: origins}, now)
	return merchants[found], origins, nil
}

// OriginAllowed reports whether any merchant allows a browser origin, as a
// CORS preflight (which carries no key) needs to know. An origin that is not
// one is allowed by nobody. It is judged against every allowed origin, held
// in memory and read again once the TTL has passed: an origin nobody allows
// costs no database read, however many are tried, and an origin added or
// removed is seen within the TTL. Errors: errs.CodeInternal (or
// errs.CodeUnavailable) when the list cannot be read.
func (a *BrowserAuth) OriginAllowed(ctx context.Context, origin string) (bool, error) {
	norm, err := NormalizeOrigin(origin)
	if err != nil {
		return false, nil
	}
	set, err := a.origins.current(ctx, a.now, a.store.AllowedOrigins)
	if err != nil {
		return false, errs.Internal(err)
	}
	return set[norm], nil
}

// AllowsOrigin reports whether origin is among allowed (a merchant's list,
// as AuthenticatePublishable returns it).
func AllowsOrigin(allowed []string, origin string) bool {
	norm, err := NormalizeOrigin(origin)
	if err != nil {
		return false
	}
	for _, o := range allowed {
		if o == norm {
			return true
		}
	}
	return false
}

// Forget drops everything cached, so that a change applies at once in this process.
func (a *BrowserAuth) Forget() {
	a.keys.clear()
	a.origins.forget()
	a.unknown.clear()
}

// originSet is every origin some merchant allows, read whole: one read per
// TTL per replica, whatever the preflights ask. Callers that find it stale
// together share one read; a TTL of 0 reads on every call.
type originSet struct {
	ttl     time.Duration
	mu      sync.Mutex
	set     map[string]bool
	expires time.Time
	// loading is the read in flight, nil when none.
	loading *originLoad
	// gen counts Forget calls: a read begun before one is not kept.
	gen int
}

// originLoad is one read of the allowed origins, which every caller that
// waits for it takes.
type originLoad struct {
	done chan struct{}
	set  map[string]bool
	err  error
}

// current returns the allowed origins, reading them with load when the
// ones held are older than the TTL.
func (o *originSet) current(ctx context.Context, now func() time.Time, load func(context.Context) ([]string, error)) (map[string]bool, error) {
	o.mu.Lock()
	if o.set != nil && now().Before(o.expires) {
		set := o.set
		o.mu.Unlock()
		return set, nil
	}
	if l := o.loading; l != nil {
		o.mu.Unlock()
		select {
		case <-l.done:
			return l.set, l.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	l := &originLoad{done: make(chan struct{})}
	o.loading = l
	gen := o.gen
	o.mu.Unlock()

	// The read serves every caller waiting for it: the first one going away
	// does not cancel it, its deadline still bounds it.
	lctx := context.WithoutCancel(ctx)
	if deadline, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		lctx, cancel = context.WithDeadline(lctx, deadline)
		defer cancel()
	}
	list, err := load(lctx)
	if err == nil {
		l.set = make(map[string]bool, len(list))
		for _, origin := range list {
			l.set[origin] = true
		}
	}
	l.err = err
	o.mu.Lock()
	o.loading = nil
	if err == nil && gen == o.gen {
		o.set, o.expires = l.set, now().Add(o.ttl)
	}
	o.mu.Unlock()
	close(l.done)
	return l.set, l.err
}

// forget drops the origins held, so that the next call reads them.
func (o *originSet) forget() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.set, o.gen = nil, o.gen+1
}

// ttlCacheMax bounds a ttlCache; when full it is emptied, which costs one
// database read per entry in use.
const ttlCacheMax = 10_000

// ttlCache remembers values for a while; a TTL of 0 remembers nothing.
type ttlCache[K comparable, V any] struct {
	ttl     time.Duration
	mu      sync.Mutex
	entries map[K]ttlEntry[V]
}

type ttlEntry[V any] struct {
	v       V
	expires time.Time
}

func (c *ttlCache[K, V]) get(k K, now time.Time) (V, bool) {
	var zero V
	if c.ttl <= 0 {
		return zero, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[k]
	if !ok || !now.Before(e.expires) {
		return zero, false
	}
	return e.v, true
}

func (c *ttlCache[K, V]) put(k K, v V, now time.Time) {
	if c.ttl <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil || len(c.entries) >= ttlCacheMax {
		c.entries = map[K]ttlEntry[V]{}
	}
	c.entries[k] = ttlEntry[V]{v: v, expires: now.Add(c.ttl)}
}

func (c *ttlCache[K, V]) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries = nil
}
