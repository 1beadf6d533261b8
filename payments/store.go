package payments

import (
	"context"
	"errors"
	"time"

	"gateway/idemkeys"
)

// FlowStore is what the payment flow reads and writes. Each method runs its
// own short transaction and holds no connection once it returns, so no
// transaction ever spans a call to the PSP.
type FlowStore interface {
	// Claim inserts the idempotency record and the payment together, or neither.
	// Errors: idemkeys.ErrExists when the key is already claimed (read it to
	// learn what to do); *Error CodeKeyReused when the key's record was purged
	// but its payment exists; ErrWriteUnknown when the commit's fate is unknown
	// (re-read the key, never re-insert blindly).
	Claim(ctx context.Context, rec idemkeys.Record, p Payment) error

	// Record reads a key's record alone (one primary-key read); idemkeys.ErrNotFound when absent.
	Record(ctx context.Context, ref idemkeys.Ref) (idemkeys.Record, error)
	// LoadKey reads a key's record and its payment; idemkeys.ErrNotFound when absent.
	LoadKey(ctx context.Context, ref idemkeys.Ref) (idemkeys.Record, Payment, error)

	// TakeOver moves an expired lease from version seen to seen+1 (the new
	// fencing token, returned) with a lease ending at until. idemkeys.ErrFenced
	// when the lease is alive, the key completed, or another worker won.
	TakeOver(ctx context.Context, ref idemkeys.Ref, seen int64, now, until time.Time) (int64, error)

	// ArmCharge records that a charge may be sent until `until` and stretches
	// the lease over it, while the caller holds lease version held; call it
	// before any charge but the claim's own (whose lease already says so).
	// idemkeys.ErrFenced when the caller no longer holds the lease.
	ArmCharge(ctx context.Context, ref idemkeys.Ref, held int64, until, now time.Time) error

	// Settle records p's final state and stores resp for replay, only while the
	// caller holds lease version held. idemkeys.ErrFenced: nothing was written.
	// ErrWriteUnknown: the commit's fate is unknown; re-read.
	Settle(ctx context.Context, ref idemkeys.Ref, held int64, p Payment, resp idemkeys.Response, now time.Time) error

	// Release ends the caller's lease now without storing a response, so a retry
	// can resume at once. idemkeys.ErrFenced when the caller no longer holds it.
	Release(ctx context.Context, ref idemkeys.Ref, held int64, now time.Time) error

	// Payment reads one of the merchant's payments; ErrNotFound otherwise.
	Payment(ctx context.Context, merchantID, id string) (Payment, error)
	// PaymentByKey finds the payment a key created; ErrNotFound otherwise.
	PaymentByKey(ctx context.Context, merchantID, key string) (Payment, error)
}

var (
	// ErrNotFound: no such row (for this merchant).
	ErrNotFound = errors.New("payments: not found")
	// ErrWriteUnknown: the connection broke while committing; the write may or may not have happened.
	ErrWriteUnknown = errors.New("payments: outcome of the write is unknown")
)

// Pending is an unfinished key with its payment, as the reconciler claims it.
type Pending struct {
	Key     idemkeys.Record
	Payment Payment
}
