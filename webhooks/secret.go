package webhooks

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// SecretPrefix starts every signing secret.
const SecretPrefix = "whsec_"

// NewSecret is a fresh signing secret: whsec_ and 32 random bytes in
// base64url. The whole string, prefix included, is the HMAC key.
func NewSecret() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("webhooks: new secret: %w", err)
	}
	return SecretPrefix + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// KeySize is the length of the key that encrypts secrets at rest (AES-256).
const KeySize = 32

// ParseKey reads an encryption key written as 64 hex digits or as base64
// (standard or URL alphabet, padded or not) of 32 bytes.
func ParseKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if b, err := hex.DecodeString(s); err == nil && len(b) == KeySize {
		return b, nil
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil && len(b) == KeySize {
			return b, nil
		}
	}
	return nil, errors.New("must be 32 bytes written as 64 hex digits or base64 (e.g. the output of `openssl rand -base64 32`)")
}

// NewKey is a random encryption key, base64: what `gateway dev` uses when
// none is configured.
func NewKey() (string, error) {
	var b [KeySize]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(b[:]), nil
}

// Cipher encrypts signing secrets at rest with AES-256-GCM. Each ciphertext
// is bound to its endpoint's id (the additional data), so that a ciphertext
// copied onto another endpoint's row does not decrypt.
type Cipher struct{ aead cipher.AEAD }

// cipherVersion leads each ciphertext, so that a later scheme can be told apart.
const cipherVersion = 1

// NewCipher returns a Cipher under key (KeySize bytes).
func NewCipher(key []byte) (*Cipher, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("webhooks: the encryption key must be %d bytes, not %d", KeySize, len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Cipher{aead: aead}, nil
}

// Seal encrypts the secret of endpoint id.
func (c *Cipher) Seal(id, secret string) ([]byte, error) {
	nonce := make([]byte, c.aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	out := append([]byte{cipherVersion}, nonce...)
	return c.aead.Seal(out, nonce, []byte(secret), []byte(id)), nil
}

// ErrUndecryptable is a stored secret the configured key does not open
// (another key, or a row tampered with).
var ErrUndecryptable = errors.New("webhooks: the endpoint's secret does not decrypt with the configured key (GATEWAY_WEBHOOK_KEY changed?)")

// Open decrypts the secret of endpoint id.
func (c *Cipher) Open(id string, enc []byte) (string, error) {
	n := c.aead.NonceSize()
	if len(enc) < 1+n || enc[0] != cipherVersion {
		return "", ErrUndecryptable
	}
	plain, err := c.aead.Open(nil, enc[1:1+n], enc[1+n:], []byte(id))
	if err != nil {
		return "", ErrUndecryptable
	}
	return string(plain), nil
}
