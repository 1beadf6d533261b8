// Package idemkeys owns idempotency records: validating client keys,
// fingerprinting requests, claiming a key with an INSERT that the primary key
// arbitrates, the lease and its fencing token (lease_version), storing the
// response for replay, and waking duplicates that wait for a key to finish.
package idemkeys

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"time"
)

// MaxKeyLen is the longest key a client may send.
const MaxKeyLen = 255

// State is where a key is in its life.
type State string

const (
	// InProgress: claimed, the outcome is not settled; the lease says who may work on it.
	InProgress State = "IN_PROGRESS"
	// Completed: the response is stored and every later request replays it.
	Completed State = "COMPLETED"
)

// Ref names one key: keys are scoped by merchant and endpoint, so two
// merchants, or one merchant on two endpoints, never share a key space.
type Ref struct {
	MerchantID string
	Endpoint   string
	Key        string
}

// Record is one idempotency row.
type Record struct {
	Ref
	Fingerprint  [32]byte
	State        State
	PaymentID    string
	LeaseVersion int64
	// LockedUntil is when the current holder's lease ends; zero once completed.
	LockedUntil time.Time
	// MayChargeUntil is the end of the last lease held by a worker allowed to
	// send a charge. No charge for the key was sent after it.
	MayChargeUntil time.Time
	// ReconcileAfter is when the reconciler should next look at the key.
	ReconcileAfter time.Time
	// ReconcileAttempts counts the reconciler's passes that could not learn the outcome.
	ReconcileAttempts int
	Response          Response
	CreatedAt         time.Time
	UpdatedAt         time.Time
	CompletedAt       time.Time
}

// Response is what a completed key replays, byte for byte.
type Response struct {
	Status int
	Body   []byte
}

// LeaseActive reports whether someone holds the lease at now.
func (r Record) LeaseActive(now time.Time) bool {
	return r.State == InProgress && now.Before(r.LockedUntil)
}

// Errors of the store.
var (
	// ErrExists: the key is already claimed; read it to learn what to do.
	ErrExists = errors.New("idemkeys: key already claimed")
	// ErrNotFound: no record for the key.
	ErrNotFound = errors.New("idemkeys: key not found")
	// ErrFenced: the writer's lease_version is no longer current (another
	// worker took the lease over) or the key is no longer in progress; the write
	// was refused and nothing changed.
	ErrFenced = errors.New("idemkeys: lease lost, write refused")
)

// ErrInvalidKey describes why a client key is refused.
type ErrInvalidKey struct{ Reason string }

func (e *ErrInvalidKey) Error() string { return "invalid Idempotency-Key: " + e.Reason }

// ValidateKey accepts 1–255 visible ASCII characters (0x21–0x7E). Keys are
// compared byte for byte: "abc" and "ABC" are different keys.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return &ErrInvalidKey{Reason: "it is empty; send 1 to 255 visible ASCII characters, for example a UUID"}
	case len(key) > MaxKeyLen:
		return &ErrInvalidKey{Reason: fmt.Sprintf("it is %d bytes long; the limit is %d", len(key), MaxKeyLen)}
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x21 || c > 0x7e {
			return &ErrInvalidKey{Reason: fmt.Sprintf("byte %d is not a visible ASCII character", i+1)}
		}
	}
	return nil
}

// Fingerprint hashes a normalized command given as its fields in a fixed
// order. Each field is length-prefixed, so no two different field lists hash
// alike by shifting a boundary ("ab","c" vs "a","bc").
func Fingerprint(fields ...string) [32]byte {
	h := sha256.New()
	var n [8]byte
	for _, f := range fields {
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

// Hash is a short, stable, non-reversible name for a key, safe to log.
func Hash(ref Ref) string {
	sum := sha256.Sum256([]byte(ref.MerchantID + "\x00" + ref.Endpoint + "\x00" + ref.Key))
	return fmt.Sprintf("%x", sum[:8])
}

// HashMerchant is a short, stable name for a merchant in logs, so that log
// lines can be correlated without naming the merchant.
func HashMerchant(merchantID string) string {
	sum := sha256.Sum256([]byte("merchant\x00" + merchantID))
	return fmt.Sprintf("%x", sum[:6])
}
