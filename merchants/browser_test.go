package merchants_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"gateway/errs"
	"gateway/merchants"
	"gateway/payments"
)

func TestNormalizeOrigin(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"https://shop.example", "https://shop.example"},
		{"https://shop.example/", "https://shop.example"},
		{"HTTPS://Shop.Example", "https://shop.example"},
		{"https://shop.example:443", "https://shop.example"},
		{"http://shop.example:80", "http://shop.example"},
		{"http://localhost:3000", "http://localhost:3000"},
		{"https://shop.example:8443", "https://shop.example:8443"},
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080"},
		{"http://[::1]:8080", "http://[::1]:8080"},
	} {
		got, err := merchants.NormalizeOrigin(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("NormalizeOrigin(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "null", "shop.example", "ftp://shop.example", "https://", "https://*.shop.example",
		"https://shop.example/checkout", "https://shop.example?x=1", "https://shop.example#top", "https://user@shop.example",
		"https://shop example", "https://shöp.example", "https://shop.example/" + strings.Repeat("a", 300), "javascript:alert(1)"} {
		if got, err := merchants.NormalizeOrigin(in); err == nil || errs.CodeOf(err) != errs.CodeInvalid {
			t.Errorf("NormalizeOrigin(%q) = %q, %v; want a errs.CodeInvalid error", in, got, err)
		}
	}
	if !merchants.AllowsOrigin([]string{"https://shop.example"}, "https://SHOP.example:443") {
		t.Error("AllowsOrigin does not compare normalized origins")
	}
	if merchants.AllowsOrigin([]string{"https://shop.example"}, "http://shop.example") || merchants.AllowsOrigin(nil, "https://shop.example") {
		t.Error("AllowsOrigin allows an origin not on the list")
	}
}

func TestNewPublishableKey(t *testing.T) {
	k, err := merchants.NewPublishableKey()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(k.Plaintext, "pk_") || len(k.Plaintext) != 35 || k.Hash != merchants.HashAPIKey(k.Plaintext) {
		t.Fatalf("publishable key %+v", k)
	}
	if k.Prefix != merchants.PublishablePrefix(k.Plaintext) || !strings.HasPrefix(k.Plaintext, k.Prefix) || len(k.Prefix) != 11 {
		t.Fatalf("prefix %q of %q", k.Prefix, k.Plaintext)
	}
	// The kinds never pass for one another.
	if merchants.KeyPrefix(k.Plaintext) != "" || merchants.PublishablePrefix(mustAPIKey(t).Plaintext) != "" {
		t.Fatal("a publishable key has a secret key's prefix, or the other way round")
	}
}

// browserStore is an in-memory BrowserStore counting its reads.
type browserStore struct {
	mu      sync.Mutex
	keys    map[string][]merchants.StoredKey // by prefix
	origins map[string][]string              // by merchant
	reads   int
}

func (s *browserStore) ActivePublishableKeysByPrefix(_ context.Context, prefix string) ([]merchants.StoredKey, []merchants.Merchant, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	var ms []merchants.Merchant
	for _, k := range s.keys[prefix] {
		ms = append(ms, merchants.Merchant{ID: k.MerchantID})
	}
	return s.keys[prefix], ms, nil
}

func (s *browserStore) MerchantOrigins(_ context.Context, merchantID string) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	return s.origins[merchantID], nil
}

func (s *browserStore) AllowedOrigins(context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reads++
	var all []string
	for _, os := range s.origins {
		all = append(all, os...)
	}
	return all, nil
}

func (s *browserStore) readCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reads
}

func (s *browserStore) allow(merchantID, origin string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.origins[merchantID] = append(s.origins[merchantID], origin)
}

// A CORS preflight carries no key: the origins it is judged against are
// every merchant's, held in memory and read once per TTL, however many
// origins are asked about and however many at once.
func TestAllowedOriginsHeldInMemory(t *testing.T) {
	st := &browserStore{origins: map[string][]string{"mer_1": {"https://shop.example"}, "mer_2": {"http://localhost:3000"}}}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	auth := merchants.NewBrowserAuth(st, merchants.AuthConfig{CacheTTL: 10 * time.Second, Now: clock})
	ctx := context.Background()

	// Many callers at once, each asking about another origin: one read.
	const callers = 50
	var wg sync.WaitGroup
	start := make(chan struct{})
	allowed := make([]bool, callers)
	failed := make([]error, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			origin := fmt.Sprintf("https://shop-%d.example", i)
			if i == 0 {
				origin = "https://shop.example"
			}
			allowed[i], failed[i] = auth.OriginAllowed(ctx, origin)
		}()
	}
	close(start)
	wg.Wait()
	for i := range callers {
		if failed[i] != nil || allowed[i] != (i == 0) {
			t.Fatalf("caller %d: allowed %v, %v", i, allowed[i], failed[i])
		}
	}
	if n := st.readCount(); n != 1 {
		t.Fatalf("%d callers at once cost %d reads, want 1", callers, n)
	}
	for i := range 1000 {
		if ok, err := auth.OriginAllowed(ctx, fmt.Sprintf("https://guess-%d.example", i)); err != nil || ok {
			t.Fatalf("a guessed origin: %v, %v", ok, err)
		}
	}
	if ok, _ := auth.OriginAllowed(ctx, "HTTP://LOCALHOST:3000/"); !ok {
		t.Fatal("an allowed origin, written otherwise, is refused")
	}
	if n := st.readCount(); n != 1 {
		t.Fatalf("1,000 guessed origins within the TTL cost %d reads, want none beyond the first", n-1)
	}

	// A new origin is allowed within the TTL, not sooner (or at once after Forget).
	st.allow("mer_1", "https://new.example")
	if ok, _ := auth.OriginAllowed(ctx, "https://new.example"); ok {
		t.Fatal("a new origin is allowed before the TTL passed: the set is not held")
	}
	advance(10 * time.Second)
	if ok, _ := auth.OriginAllowed(ctx, "https://new.example"); !ok || st.readCount() != 2 {
		t.Fatalf("after the TTL: allowed %v after %d reads, want true after 2", ok, st.readCount())
	}
	st.allow("mer_2", "https://newer.example")
	auth.Forget()
	if ok, _ := auth.OriginAllowed(ctx, "https://newer.example"); !ok || st.readCount() != 3 {
		t.Fatalf("after Forget: allowed %v after %d reads, want true after 3", ok, st.readCount())
	}
}

func TestBrowserAuth(t *testing.T) {
	pk, err := merchants.NewPublishableKey()
	if err != nil {
		t.Fatal(err)
	}
	st := &browserStore{
		keys:    map[string][]merchants.StoredKey{pk.Prefix: {{MerchantID: "mer_1", Prefix: pk.Prefix, Hash: pk.Hash}}},
		origins: map[string][]string{"mer_1": {"https://shop.example"}},
	}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	auth := merchants.NewBrowserAuth(st, merchants.AuthConfig{CacheTTL: 10 * time.Second, Now: func() time.Time { return now }})
	ctx := context.Background()

	m, origins, err := auth.AuthenticatePublishable(ctx, pk.Plaintext)
	if err != nil || m.ID != "mer_1" || len(origins) != 1 {
		t.Fatalf("AuthenticatePublishable: %+v %v %v", m, origins, err)
	}
	for _, bad := range []string{"", pk.Plaintext + "x", pk.Prefix + strings.Repeat("a", 24), "sk_" + pk.Plaintext[3:], strings.Repeat("p", 200)} {
		if _, _, err := auth.AuthenticatePublishable(ctx, bad); errs.CodeOf(err) != errs.CodeUnauthorized {
			t.Errorf("AuthenticatePublishable(%q): %v, want unauthorized", bad, err)
		}
	}
	reads := st.readCount()
	if _, _, err := auth.AuthenticatePublishable(ctx, pk.Plaintext); err != nil || st.readCount() != reads {
		t.Fatalf("a verified key is read again within the TTL (%d reads, %v)", st.readCount()-reads, err)
	}
	for origin, want := range map[string]bool{"https://shop.example": true, "https://shop.example:443": true, "https://evil.example": false, "null": false} {
		if ok, err := auth.OriginAllowed(ctx, origin); err != nil || ok != want {
			t.Errorf("OriginAllowed(%q) = %v, %v; want %v", origin, ok, err, want)
		}
	}
	// A revocation, and a change of origins, apply after the TTL (or at once with Forget).
	st.mu.Lock()
	st.keys = nil
	st.origins = nil
	st.mu.Unlock()
	if _, _, err := auth.AuthenticatePublishable(ctx, pk.Plaintext); err != nil {
		t.Fatalf("within the TTL: %v", err)
	}
	now = now.Add(11 * time.Second)
	if _, _, err := auth.AuthenticatePublishable(ctx, pk.Plaintext); errs.CodeOf(err) != errs.CodeUnauthorized {
		t.Fatalf("after the TTL: %v, want unauthorized", err)
	}
	if ok, _ := auth.OriginAllowed(ctx, "https://shop.example"); ok {
		t.Fatal("an origin taken off every list is still allowed after the TTL")
	}
}

func TestClientSecretMatches(t *testing.T) {
	const secret = "pay_1_secret_abcdefghijklmnopqrstuvwxyz234567"
	p := payments.Payment{ID: "pay_1", ClientSecretHash: sha256.Sum256([]byte(secret))}
	if !payments.ClientSecretMatches(p, secret) {
		t.Fatal("the payment's own secret does not match")
	}
	for _, bad := range []string{"", secret + "a", secret[:len(secret)-1], strings.ToUpper(secret), strings.Repeat("a", 129)} {
		if payments.ClientSecretMatches(p, bad) {
			t.Errorf("%q matches", bad)
		}
	}
	if payments.ClientSecretMatches(payments.Payment{ID: "pay_2"}, secret) {
		t.Fatal("a payment without a client secret matches one")
	}
	// The shape, checked before the payment is read: its id, the marker,
	// 32 base32 characters.
	if !payments.ClientSecretNames("pay_1", secret) {
		t.Fatal("the payment's own secret does not name it")
	}
	for _, bad := range []string{"", secret + "a", secret[:len(secret)-1], strings.ToUpper(secret), "pay_12_secret_abcdefghijklmnopqrstuvwxyz234567",
		"pay_1_secret_abcdefghijklmnopqrstuvwxyz234560", "pay_1_sekret_abcdefghijklmnopqrstuvwxyz234567", "_secret_abcdefghijklmnopqrstuvwxyz234567"} {
		if payments.ClientSecretNames("pay_1", bad) {
			t.Errorf("%q names pay_1", bad)
		}
	}
	if payments.ClientSecretNames("", "_secret_abcdefghijklmnopqrstuvwxyz234567") {
		t.Error("a secret names a payment without an id")
	}
}
