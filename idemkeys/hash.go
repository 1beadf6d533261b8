package idemkeys

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"log/slog"
	"sync"
)

// Hasher names keys and merchants in logs and reports by a keyed hash
// (HMAC-SHA-256 under a secret from configuration), so that the lines about
// one key correlate across replicas while nobody without the secret can
// recover a key from them by trying likely ones.
//
// An operator asked about key K of merchant M on POST /payments computes its
// name with the same secret S:
//
//	printf 'M\0POST /payments\0K' | openssl dgst -sha256 -hmac "S" | cut -c 1-16
//
// (the last field of openssl's output; the first 16 hex digits).
type Hasher struct {
	secret []byte
	// macs keeps keyed HMACs for reuse: a reset one starts from the keyed
	// state, without hashing the secret again.
	macs sync.Pool
}

// NewHasher returns a Hasher keyed by secret. An empty secret gets a random
// one: names then correlate only within this process.
func NewHasher(secret []byte) *Hasher {
	if len(secret) == 0 {
		secret = make([]byte, 32)
		_, _ = rand.Read(secret)
	}
	h := &Hasher{secret: append([]byte(nil), secret...)}
	h.macs.New = func() any { return hmac.New(sha256.New, h.secret) }
	return h
}

func (h *Hasher) sum(parts ...string) []byte {
	m := h.macs.Get().(hash.Hash)
	defer h.macs.Put(m)
	m.Reset()
	for i, p := range parts {
		if i > 0 {
			m.Write([]byte{0})
		}
		m.Write([]byte(p))
	}
	return m.Sum(nil)
}

// Key names ref: 16 hex digits.
func (h *Hasher) Key(ref Ref) string {
	return hex.EncodeToString(h.sum(ref.MerchantID, ref.Endpoint, ref.Key)[:8])
}

// Merchant names a merchant: 12 hex digits.
func (h *Hasher) Merchant(merchantID string) string {
	return hex.EncodeToString(h.sum("merchant", merchantID)[:6])
}

// Attr is the log attributes naming ref: "key" and "merchant", hashed only
// when a line is actually written.
func (h *Hasher) Attr(ref Ref) slog.Attr {
	return slog.Any("", loggedRef{h: h, ref: ref})
}

// MerchantAttr is the log attribute naming a merchant.
func (h *Hasher) MerchantAttr(merchantID string) slog.Attr {
	return slog.Any("merchant", loggedMerchant{h: h, id: merchantID})
}

type loggedRef struct {
	h   *Hasher
	ref Ref
}

// LogValue inlines the key's and the merchant's names into the log line.
func (l loggedRef) LogValue() slog.Value {
	return slog.GroupValue(slog.String("key", l.h.Key(l.ref)), slog.String("merchant", l.h.Merchant(l.ref.MerchantID)))
}

type loggedMerchant struct {
	h  *Hasher
	id string
}

func (l loggedMerchant) LogValue() slog.Value { return slog.StringValue(l.h.Merchant(l.id)) }
