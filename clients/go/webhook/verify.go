// Package webhook receives the gateway's webhook deliveries on a
// merchant's server: it verifies their signature (Verify), decodes their
// event (ParseEvent), and hands each event to the merchant's code once,
// in the transaction of the merchant's own change, however often it is
// delivered (Handler, with an Inbox such as MySQLInbox).
//
// A delivery is a POST of the event, byte for byte what GET /events/{id}
// answers, with
//
//	Gateway-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, t + "." + body)>[,v1=…]
//	Gateway-Event-Id: evt_…
//
// one v1 per secret valid at the time (two during a rotation's grace).
// The rules are those of the gateway's webhooks/receiver package, which a
// test of the gateway checks this one against.
package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// Headers of a delivery.
const (
	SignatureHeader = "Gateway-Signature"
	EventIDHeader   = "Gateway-Event-Id"
)

// DefaultTolerance is how far a signature's timestamp may be from the
// receiver's clock: enough for retries in flight and modest clock skew,
// short enough that a captured delivery cannot be replayed much later.
const DefaultTolerance = 5 * time.Minute

// Why a delivery is refused.
var (
	ErrMalformed = errors.New("webhook: malformed Gateway-Signature header")
	ErrNoMatch   = errors.New("webhook: no signature matches")
	ErrTooOld    = errors.New("webhook: signature timestamp outside the tolerance")
	ErrNoSecret  = errors.New("webhook: no secret given")
)

// Verify checks header (the Gateway-Signature value) against payload, the
// raw bytes received (before any JSON decoding), for any of secrets (pass
// the old and the new one while rotating). A timestamp further than
// tolerance from now, in either direction, is refused (tolerance ≤ 0 means
// DefaultTolerance). It answers nil, ErrMalformed, ErrNoMatch (a tampered
// body, another secret), ErrTooOld or ErrNoSecret.
func Verify(payload []byte, header string, secrets []string, tolerance time.Duration) error {
	return VerifyAt(payload, header, secrets, tolerance, time.Now())
}

// VerifyAt is Verify on the clock reading now.
func VerifyAt(payload []byte, header string, secrets []string, tolerance time.Duration, now time.Time) error {
	if len(secrets) == 0 {
		return ErrNoSecret
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	sig, err := parseSignature(header)
	if err != nil {
		return err
	}
	if len(sig.v1) == 0 {
		return ErrNoMatch
	}
	if age := now.Sub(time.Unix(sig.unix, 0)); age > tolerance || age < -tolerance {
		return ErrTooOld
	}
	for _, secret := range secrets {
		want := mac(secret, sig.t, payload)
		for _, got := range sig.v1 {
			if hmac.Equal(want, got) {
				return nil
			}
		}
	}
	return ErrNoMatch
}

// signature is a Gateway-Signature header, read.
type signature struct {
	t    string // the timestamp as signed
	unix int64
	v1   [][]byte
}

// parseSignature reads "t=…,v1=…[,v1=…]": exactly one t, in decimal Unix
// seconds; every well-formed v1 (an unreadable one matches nothing, and
// another may); other schemes (v0, a later v2) ignored.
func parseSignature(header string) (signature, error) {
	var sig signature
	seenT := false
	for _, part := range strings.Split(header, ",") {
		name, value, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return signature{}, ErrMalformed
		}
		if name == "t" {
			if seenT {
				return signature{}, ErrMalformed
			}
			sig.t, seenT = value, true
		}
		if name != "v1" {
			continue
		}
		if b, err := hex.DecodeString(value); err == nil && len(b) == sha256.Size {
			sig.v1 = append(sig.v1, b)
		}
	}
	if !seenT {
		return signature{}, ErrMalformed
	}
	unix, err := strconv.ParseInt(sig.t, 10, 64)
	if err != nil {
		return signature{}, ErrMalformed
	}
	sig.unix = unix
	return sig, nil
}

// mac is HMAC-SHA256(secret, t + "." + payload).
func mac(secret, t string, payload []byte) []byte {
	h := hmac.New(sha256.New, []byte(secret))
	h.Write([]byte(t + "."))
	h.Write(payload)
	return h.Sum(nil)
}
