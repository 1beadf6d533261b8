// Package merchants owns the accounts that take payments through the
// gateway and their credentials: secret API keys (sk_…) for merchants'
// servers, publishable keys (pk_…) and allowed origins for their customers'
// browsers, stored hashed and verified in constant time, and the caches that
// spare the database a read per request. It knows nothing of payments.
package merchants

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/oklog/ulid/v2"

	"gateway/errs"
	"gateway/versions"
)

// Merchant is an account that takes payments through the gateway.
type Merchant struct {
	ID   string
	Name string
	// APIVersion is the version its requests are answered in unless they
	// name another (Gateway-Version): the latest when it was created,
	// changed by ops (gateway merchants version). Empty: the latest.
	APIVersion string
	CreatedAt  time.Time
}

// APIKeyPrefix starts every API key, so a leaked key is recognisable in a
// code scan and the visible prefix tells keys apart without the secret.
const APIKeyPrefix = "sk_"

// APIKey is a freshly minted key: the plaintext is shown once, only Hash is stored.
type APIKey struct {
	Plaintext string
	Hash      [32]byte
	// Prefix is the visible start of the key, safe to store and show.
	Prefix string
}

// NewAPIKey mints a key with 160 random bits.
func NewAPIKey() (APIKey, error) { return newKey(APIKeyPrefix) }

// newKey mints a key of a kind (its prefix) with 160 random bits.
func newKey(kind string) (APIKey, error) {
	secret, err := randomSecret()
	if err != nil {
		return APIKey{}, err
	}
	plain := kind + secret
	return APIKey{Plaintext: plain, Hash: HashAPIKey(plain), Prefix: visiblePrefix(plain, kind)}, nil
}

// randomSecret is 160 random bits as 32 lowercase base32 characters.
func randomSecret() (string, error) {
	var b [20]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:])), nil
}

// apiKeyVisible is how many characters after "sk_" are visible in the prefix.
const apiKeyVisible = 8

// KeyPrefix is the visible start of a key, by which it is found before its
// hash is compared; "" when plain cannot be a key.
func KeyPrefix(plain string) string { return visiblePrefix(plain, APIKeyPrefix) }

// visiblePrefix is the visible start of a key of a kind; "" when plain
// cannot be one.
func visiblePrefix(plain, kind string) string {
	if !strings.HasPrefix(plain, kind) || len(plain) < len(kind)+apiKeyVisible {
		return ""
	}
	return plain[:len(kind)+apiKeyVisible]
}

// keySecretLen is the length of a key's secret part: 160 bits in base32.
const keySecretLen = 32

// wellFormedKey reports whether plain has the shape of a key of a kind
// (its prefix, then 32 lowercase base32 characters): anything else cannot
// be a key, and is refused without a database read.
func wellFormedKey(plain, kind string) bool {
	if len(plain) != len(kind)+keySecretLen || !strings.HasPrefix(plain, kind) {
		return false
	}
	for i := len(kind); i < len(plain); i++ {
		if c := plain[i]; !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}

// StoredKey is an API key as stored: never the plaintext.
type StoredKey struct {
	MerchantID string
	Prefix     string
	Hash       [32]byte
	CreatedAt  time.Time
	RevokedAt  time.Time
}

// HashAPIKey is how a presented key is looked up. The key carries 160 random
// bits, so a plain SHA-256 is enough: there is nothing to brute-force.
func HashAPIKey(plain string) [32]byte {
	return sha256.Sum256([]byte(plain))
}

// NewMerchant validates name and mints the merchant's id and first API key;
// the plaintext key is to be shown once and never stored.
func NewMerchant(name string, now time.Time) (Merchant, APIKey, error) {
	if name == "" || utf8.RuneCountInString(name) > 255 || !printable(name) {
		return Merchant{}, APIKey{}, errs.Errorf(errs.CodeInvalid, "merchant name must be 1 to 255 printable characters")
	}
	key, err := NewAPIKey()
	if err != nil {
		return Merchant{}, APIKey{}, errs.Internal(err)
	}
	m := Merchant{ID: "mer_" + ulid.Make().String(), Name: name, APIVersion: string(versions.Latest), CreatedAt: now.UTC().Truncate(time.Microsecond)}
	return m, key, nil
}

// printable refuses invalid UTF-8 and control characters (C0, DEL, C1).
func printable(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, unicode.IsControl)
}
