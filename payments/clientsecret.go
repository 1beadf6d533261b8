package payments

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"strings"
)

// A payment created to be confirmed in the customer's browser (two-step
// checkout) carries a client secret: the merchant's server hands it to the
// browser, which presents it with the merchant's publishable key to read and
// confirm that one payment and nothing else.

// clientSecretMarker separates the payment id from the random part of a
// client secret: pay_…_secret_….
const clientSecretMarker = "_secret_"

// maxClientSecretLen bounds what is hashed of a presented client secret.
const maxClientSecretLen = 128

// newClientSecret mints a payment's client secret and its hash; only the
// hash is stored with the payment.
func newClientSecret(paymentID string) (string, [32]byte, error) {
	var b [20]byte // 160 random bits
	if _, err := rand.Read(b[:]); err != nil {
		return "", [32]byte{}, err
	}
	plain := paymentID + clientSecretMarker + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
	return plain, sha256.Sum256([]byte(plain)), nil
}

// clientSecretRandomLen is the length of a client secret's random part:
// 160 bits in base32.
const clientSecretRandomLen = 32

// ClientSecretNames reports whether presented has the shape of a client
// secret of payment paymentID: that id, the marker, then 32 lowercase base32
// characters. It reads nothing: a browser route checks it before it reads
// the payment, so that a secret of another payment, or of none, costs no
// read.
func ClientSecretNames(paymentID, presented string) bool {
	random, ok := strings.CutPrefix(presented, paymentID+clientSecretMarker)
	if !ok || paymentID == "" || len(random) != clientSecretRandomLen {
		return false
	}
	for i := 0; i < len(random); i++ {
		if c := random[i]; !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}

// ClientSecretMatches reports, in constant time, whether presented is p's
// client secret. A payment created to be charged at once has none and
// matches nothing.
func ClientSecretMatches(p Payment, presented string) bool {
	if p.ClientSecretHash == ([32]byte{}) || presented == "" || len(presented) > maxClientSecretLen {
		return false
	}
	h := sha256.Sum256([]byte(presented))
	return subtle.ConstantTimeCompare(h[:], p.ClientSecretHash[:]) == 1
}
