package payments

import (
	"context"
	"errors"
	"time"

	"gateway/idemkeys"
)

// Store persists payments, merchants and idempotency records. Each method
// runs its own short transaction and holds no connection once it returns, so
// no transaction ever spans a call to the PSP.
type Store interface {
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

	// ClaimStale takes over up to limit unfinished keys whose lease expired, for
	// the reconciler (which never charges), with leases ending at until. Rows
	// locked by a concurrent claimer are skipped, never waited for.
	ClaimStale(ctx context.Context, now, until time.Time, limit int) ([]Pending, error)
	// Reschedule gives back a lease without settling: the lease ends now (a
	// client retry may resume), the reconciler looks again from `after`;
	// attempts is the new count of failed passes. idemkeys.ErrFenced when the
	// caller no longer holds it.
	Reschedule(ctx context.Context, ref idemkeys.Ref, held int64, after time.Time, attempts int, now time.Time) error
	// OldestUnfinished returns when the oldest unfinished key was created; zero when none is.
	OldestUnfinished(ctx context.Context) (time.Time, error)
	// PurgeKeys deletes up to limit completed keys finished before `before`.
	PurgeKeys(ctx context.Context, before time.Time, limit int) (int64, error)

	// ListPayments lists up to limit payments in a status, oldest first, across merchants.
	ListPayments(ctx context.Context, status Status, limit int) ([]Payment, error)
	// CountPayments counts payments in a status across merchants.
	CountPayments(ctx context.Context, status Status) (int, error)
	// Resolve applies decide to the payment with id under a row lock, stores
	// the result, rewrites its key's stored response and records res in the
	// audit table, all in one transaction. ErrNotFound for an unknown id.
	Resolve(ctx context.Context, id string, decide func(Payment) (Payment, error), res Resolution, now time.Time) (Payment, error)

	// CreateMerchant stores m with its first API key (only the hash).
	CreateMerchant(ctx context.Context, m Merchant, key APIKey) error
	// ActiveKeysByPrefix lists the active keys sharing a visible prefix (almost
	// always zero or one), with their merchants; the caller compares hashes.
	ActiveKeysByPrefix(ctx context.Context, prefix string) ([]StoredKey, []Merchant, error)
	// AddAPIKey stores another key for an existing merchant; ErrNotFound for an unknown merchant.
	AddAPIKey(ctx context.Context, merchantID string, key APIKey, now time.Time) error
	// RevokeAPIKey revokes the merchant's active keys with a prefix and reports how many.
	RevokeAPIKey(ctx context.Context, merchantID, prefix string, now time.Time) (int, error)
	// APIKeys lists a merchant's keys, revoked ones included.
	APIKeys(ctx context.Context, merchantID string) ([]StoredKey, error)
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
