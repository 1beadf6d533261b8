package merchants_test

import (
	"crypto/sha256"
	"strings"
	"testing"
	"time"

	"gateway/errs"
	"gateway/merchants"
)

func TestNewAPIKey(t *testing.T) {
	const n = 200
	seen := make(map[string]bool, n)
	hashes := make(map[[32]byte]bool, n)
	for range n {
		k := mustAPIKey(t)
		if !strings.HasPrefix(k.Plaintext, merchants.APIKeyPrefix) || merchants.APIKeyPrefix != "sk_" {
			t.Fatalf("Plaintext %q does not start with sk_", k.Plaintext)
		}
		secret := strings.TrimPrefix(k.Plaintext, merchants.APIKeyPrefix)
		// 160 random bits in unpadded base32 are 32 characters.
		if len(secret) != 32 || strings.Trim(secret, "abcdefghijklmnopqrstuvwxyz234567") != "" {
			t.Errorf("secret %q is not 32 lowercase base32 characters", secret)
		}
		if k.Hash != merchants.HashAPIKey(k.Plaintext) {
			t.Errorf("Hash does not match HashAPIKey(Plaintext)")
		}
		if k.Hash != sha256.Sum256([]byte(k.Plaintext)) {
			t.Errorf("Hash is not the SHA-256 of the plaintext")
		}
		if !strings.HasPrefix(k.Plaintext, k.Prefix) {
			t.Errorf("Prefix %q is not the start of %q", k.Prefix, k.Plaintext)
		}
		if len(k.Prefix) <= len(merchants.APIKeyPrefix) || len(k.Prefix) >= len(k.Plaintext)/2 {
			t.Errorf("Prefix %q should tell keys apart without giving away most of the secret", k.Prefix)
		}
		if got := merchants.KeyPrefix(k.Plaintext); got != k.Prefix {
			t.Errorf("KeyPrefix(plaintext) = %q, want the minted Prefix %q", got, k.Prefix)
		}
		if len(k.Prefix) > 32 { // api_keys.prefix is VARCHAR(32)
			t.Errorf("Prefix %q is longer than its column", k.Prefix)
		}
		if seen[k.Plaintext] || hashes[k.Hash] {
			t.Fatalf("key %q minted twice", k.Prefix)
		}
		seen[k.Plaintext], hashes[k.Hash] = true, true
	}
}

func TestKeyPrefix(t *testing.T) {
	k := mustAPIKey(t)
	tests := []struct {
		name, in, want string
	}{
		{"minted key", k.Plaintext, k.Prefix},
		{"empty", "", ""},
		{"prefix only", "sk_", ""},
		{"other scheme", "pk_" + strings.TrimPrefix(k.Plaintext, "sk_"), ""},
		{"upper case scheme", "SK_" + strings.TrimPrefix(k.Plaintext, "sk_"), ""},
		{"bearer word", "Bearer " + k.Plaintext, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := merchants.KeyPrefix(tt.in); got != tt.want {
				t.Errorf("KeyPrefix(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestHashAPIKey(t *testing.T) {
	a := merchants.HashAPIKey("sk_abc")
	if a != merchants.HashAPIKey("sk_abc") {
		t.Errorf("HashAPIKey is not stable")
	}
	for _, other := range []string{"sk_abd", "SK_ABC", "sk_abc ", ""} {
		if merchants.HashAPIKey(other) == a {
			t.Errorf("HashAPIKey(%q) == HashAPIKey(%q)", other, "sk_abc")
		}
	}
}

func mustAPIKey(tb testing.TB) merchants.APIKey {
	tb.Helper()
	k, err := merchants.NewAPIKey()
	if err != nil {
		tb.Fatalf("NewAPIKey: %v", err)
	}
	return k
}

func TestNewMerchantAccepts(t *testing.T) {
	now := time.Date(2024, 5, 1, 21, 4, 5, 123456789, time.FixedZone("KST", 9*3600))
	tests := []struct {
		name, merchant string
	}{
		{"short", "A"},
		{"ordinary", "Acme Shop, Inc."},
		{"max length", strings.Repeat("n", 255)},
		{"multibyte", "서울 커피 ☕"},
	}
	ids := map[string]bool{}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, key, err := merchants.NewMerchant(tt.merchant, now)
			if err != nil {
				t.Fatalf("NewMerchant(%q) = %v", tt.merchant, err)
			}
			if m.Name != tt.merchant {
				t.Errorf("Name = %q, want %q", m.Name, tt.merchant)
			}
			if !strings.HasPrefix(m.ID, "mer_") || len(m.ID) > 40 { // merchants.id is VARCHAR(40)
				t.Errorf("ID = %q, want mer_… of at most 40 chars", m.ID)
			}
			if ids[m.ID] {
				t.Errorf("ID %q minted twice", m.ID)
			}
			ids[m.ID] = true
			// Stored as DATETIME(6) in UTC: the value must survive the round trip unchanged.
			want := time.Date(2024, 5, 1, 12, 4, 5, 123456000, time.UTC)
			if !m.CreatedAt.Equal(want) || m.CreatedAt.Location() != time.UTC {
				t.Errorf("CreatedAt = %v, want %v (UTC, microseconds)", m.CreatedAt, want)
			}
			if !strings.HasPrefix(key.Plaintext, merchants.APIKeyPrefix) || key.Hash != merchants.HashAPIKey(key.Plaintext) {
				t.Errorf("API key %q is not a fresh sk_ key with its hash", key.Prefix)
			}
		})
	}
}

func TestNewMerchantRefuses(t *testing.T) {
	tests := []struct {
		name, merchant string
	}{
		{"empty", ""},
		{"over max length", strings.Repeat("n", 256)},
		{"newline", "Acme\nShop"},
		{"NUL", "Acme\x00"},
		{"DEL", "Acme\x7f"},
		{"C1 control", "Acme\u0085"},
		{"invalid utf-8", "Acme \xff"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, key, err := merchants.NewMerchant(tt.merchant, time.Now())
			if got := errs.CodeOf(err); err == nil || got != errs.CodeInvalid {
				t.Fatalf("NewMerchant(%q) error = %v (code %q), want %q", tt.merchant, err, got, errs.CodeInvalid)
			}
			if m != (merchants.Merchant{}) || key.Plaintext != "" {
				t.Errorf("a refused merchant still got an id or key: %+v, %q", m, key.Prefix)
			}
		})
	}
}
