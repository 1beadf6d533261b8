// Package idemkeys owns the vocabulary of idempotency keys: validating client
// keys, fingerprinting requests, the record of a key's life (its state, its
// lease and fencing token, its stored answer), naming keys in logs without
// revealing them, and waking duplicates that wait for a key to finish. It
// holds no SQL: the storage package writes records.
package idemkeys

import (
	"crypto/rand"
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

// Token is a lease's fencing token (the lease_version column): every write
// after a PSP call is conditional on the writer's token still being the
// key's. Its high 32 bits count the grants of the lease; its low 32 bits are
// random, so that a grant lost with a database write (a failover that
// dropped acknowledged commits) is never handed out again to another worker.
// Tokens are compared for equality only.
type Token int64

// FirstToken is the token of a fresh claim.
func FirstToken() Token { return Token(1<<32 | int64(random32())) }

// Next is the token of the grant after t.
func (t Token) Next() Token { return t.NextWith(random32()) }

// NextWith is the token of the grant after t with the given random part, as
// the storage layer computes it in SQL for a batch of keys.
func (t Token) NextWith(r uint32) Token { return Token((int64(t)>>32+1)<<32 | int64(r)) }

// Grant is which grant of the lease t is (1 for the claim), for logs.
func (t Token) Grant() int64 { return int64(t) >> 32 }

func random32() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return binary.BigEndian.Uint32(b[:])
}

// Record is one idempotency key's row, with the database's clock as the
// row was read. Every time in it is on the database's clock (design §14):
// compare them with each other and with DBNow, never with a replica's clock.
type Record struct {
	Ref
	Fingerprint [32]byte
	State       State
	SubjectID   string
	Token       Token
	// LockedUntil is when the current holder's lease ends; zero once completed.
	LockedUntil time.Time
	// MaySendUntil is the end of the last window in which a worker was
	// allowed to send a charge: no charge for the key was sent after it.
	// Zero when unknown (rows older than the column): never proof of anything.
	MaySendUntil time.Time
	// SendAttempts counts the sends workers were allowed to make (one with
	// the claim, one per ArmCharge); ChargesNotSent counts those that
	// certainly did nothing (the PSP said not processed, or the worker gave
	// the lease back without sending). Equal counts prove nothing was charged.
	SendAttempts int
	SendsNotSent int
	// NotFoundAt is when the reconciler first learned, under its own lease,
	// that the PSP authoritatively has no charge; zero when it has not.
	NotFoundAt time.Time
	// ReconcileAfter is when the reconciler should next look at the key.
	ReconcileAfter time.Time
	// ReconcileAttempts counts the reconciler's passes that could not learn the outcome.
	ReconcileAttempts int
	Response          Response
	CreatedAt         time.Time
	UpdatedAt         time.Time
	CompletedAt       time.Time
	// DBNow is the database's clock when the row was read (or claimed).
	DBNow time.Time
	// ReadAt is the reader's own clock just before it sent the read (set by
	// the reader, not the store): DBNow happened after it.
	ReadAt time.Time
}

// Response is what a completed key replays, byte for byte.
type Response struct {
	Status int
	Body   []byte
	// Version is the API version the request that made the key was
	// answered in: a replay is answered in it too, whatever version the
	// retry names. Empty for an answer of this process not yet stored:
	// the request's own.
	Version string
	// BodyVersion is the version Body is rendered in: the latest of the
	// gateway that stored it. Empty for an answer rendered by this process.
	BodyVersion string
}

// LeaseActive reports whether someone held the lease when the row was read,
// by the database's clock.
func (r Record) LeaseActive() bool {
	return r.State == InProgress && r.DBNow.Before(r.LockedUntil)
}

// DBNowAtMost bounds the database's clock at the local instant t from above:
// the database read DBNow after ReadAt, and both clocks run at one rate.
func (r Record) DBNowAtMost(t time.Time) time.Time {
	return r.DBNow.Add(t.Sub(r.ReadAt))
}

// NothingSent reports whether every send a worker was allowed to make
// certainly did nothing, so that the key can fail without asking the PSP.
func (r Record) NothingSent() bool {
	return r.SendAttempts > 0 && r.SendsNotSent >= r.SendAttempts
}

// Errors of the store.
var (
	// ErrExists: the key is already claimed; read it to learn what to do.
	ErrExists = errors.New("idemkeys: key already claimed")
	// ErrNotFound: no record for the key.
	ErrNotFound = errors.New("idemkeys: key not found")
	// ErrFenced: the writer's token is no longer the key's (another worker
	// took the lease over) or the key is no longer in progress; the write was
	// refused and nothing changed.
	ErrFenced = errors.New("idemkeys: lease lost, write refused")
)

// InvalidKeyError describes why a client key is refused.
type InvalidKeyError struct{ Reason string }

func (e *InvalidKeyError) Error() string { return "invalid Idempotency-Key: " + e.Reason }

// ValidateKey accepts 1–255 visible ASCII characters (0x21–0x7E). Keys are
// compared byte for byte: "abc" and "ABC" are different keys.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return &InvalidKeyError{Reason: "it is empty; send 1 to 255 visible ASCII characters, for example a UUID"}
	case len(key) > MaxKeyLen:
		return &InvalidKeyError{Reason: fmt.Sprintf("it is %d bytes long; the limit is %d", len(key), MaxKeyLen)}
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x21 || c > 0x7e {
			return &InvalidKeyError{Reason: fmt.Sprintf("byte %d is not a visible ASCII character", i+1)}
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
