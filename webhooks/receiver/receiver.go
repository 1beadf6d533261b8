// Package receiver is for merchants' servers: it verifies that a webhook
// delivery comes from the gateway and is fresh. A delivery carries
//
//	Gateway-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, t + "." + body)>[,v1=…]
//	Gateway-Event-Id: evt_…
//
// Verify accepts it when any v1 matches any of the secrets given (pass the
// old and the new one while rotating) and t is within tolerance of now.
// The package imports nothing of the gateway's: copy it into any Go
// service.
package receiver

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
	ErrMalformed = errors.New("receiver: malformed Gateway-Signature header")
	ErrNoMatch   = errors.New("receiver: no signature matches")
	ErrTooOld    = errors.New("receiver: signature timestamp outside the tolerance")
	ErrNoSecret  = errors.New("receiver: no secret given")
)

// Verify checks header (the Gateway-Signature value) against body, the raw
// bytes received (before any JSON decoding), for any of secrets. A
// timestamp further than tolerance from now, in either direction, is
// refused (tolerance ≤ 0 means DefaultTolerance).
func Verify(header string, body []byte, secrets []string, tolerance time.Duration, now time.Time) error {
	if len(secrets) == 0 {
		return ErrNoSecret
	}
	if tolerance <= 0 {
		tolerance = DefaultTolerance
	}
	var (
		ts   string
		hasT bool
		sigs [][]byte
	)
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return ErrMalformed
		}
		switch k {
		case "t":
			if hasT {
				return ErrMalformed
			}
			ts, hasT = v, true
		case "v1":
			b, err := hex.DecodeString(v)
			if err != nil || len(b) != sha256.Size {
				continue // an unreadable value matches nothing; another may
			}
			sigs = append(sigs, b)
		default:
			// Other schemes (v0, a later v2) are ignored.
		}
	}
	if !hasT {
		return ErrMalformed
	}
	unix, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return ErrMalformed
	}
	if len(sigs) == 0 {
		return ErrNoMatch
	}
	signed := time.Unix(unix, 0)
	if d := now.Sub(signed); d > tolerance || d < -tolerance {
		return ErrTooOld
	}
	for _, secret := range secrets {
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write([]byte(ts))
		mac.Write([]byte("."))
		mac.Write(body)
		want := mac.Sum(nil)
		for _, s := range sigs {
			if hmac.Equal(want, s) {
				return nil
			}
		}
	}
	return ErrNoMatch
}
