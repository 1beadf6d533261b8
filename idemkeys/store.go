package idemkeys

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"gateway/db"
)

// The functions below take a sqlx.ExtContext so that a caller can run them
// inside its own transaction (the claim shares one with the payment insert)
// or on the pool.

type row struct {
	MerchantID     string        `db:"merchant_id"`
	Endpoint       string        `db:"endpoint"`
	Key            string        `db:"idem_key"`
	Fingerprint    []byte        `db:"fingerprint"`
	State          string        `db:"state"`
	PaymentID      string        `db:"payment_id"`
	LeaseVersion   int64         `db:"lease_version"`
	LockedUntil    sql.NullTime  `db:"locked_until"`
	MayChargeUntil sql.NullTime  `db:"may_charge_until"`
	ReconcileAfter sql.NullTime  `db:"reconcile_after"`
	Attempts       int           `db:"reconcile_attempts"`
	ResponseStatus sql.NullInt32 `db:"response_status"`
	ResponseBody   []byte        `db:"response_body"`
	CreatedAt      time.Time     `db:"created_at"`
	UpdatedAt      time.Time     `db:"updated_at"`
	CompletedAt    sql.NullTime  `db:"completed_at"`
}

func (r row) toRecord() Record {
	rec := Record{
		Ref:               Ref{MerchantID: r.MerchantID, Endpoint: r.Endpoint, Key: r.Key},
		State:             State(r.State),
		PaymentID:         r.PaymentID,
		LeaseVersion:      r.LeaseVersion,
		LockedUntil:       r.LockedUntil.Time,
		MayChargeUntil:    r.MayChargeUntil.Time,
		ReconcileAfter:    r.ReconcileAfter.Time,
		ReconcileAttempts: r.Attempts,
		Response:          Response{Status: int(r.ResponseStatus.Int32), Body: r.ResponseBody},
		CreatedAt:         r.CreatedAt,
		UpdatedAt:         r.UpdatedAt,
		CompletedAt:       r.CompletedAt.Time,
	}
	copy(rec.Fingerprint[:], r.Fingerprint)
	return rec
}

// Insert claims rec.Ref. It returns ErrExists when the key is already
// claimed; the primary key, not a prior read, decides the race.
func Insert(ctx context.Context, q sqlx.ExecerContext, rec Record) error {
	const stmt = `
INSERT INTO idempotency_keys
    (merchant_id, endpoint, idem_key, fingerprint, state, payment_id, lease_version,
     locked_until, may_charge_until, reconcile_after, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	_, err := q.ExecContext(ctx, stmt,
		rec.MerchantID, rec.Endpoint, rec.Key, rec.Fingerprint[:], string(InProgress), rec.PaymentID,
		rec.LeaseVersion, rec.LockedUntil, rec.LockedUntil, rec.LockedUntil, rec.CreatedAt, rec.CreatedAt)
	if err := db.Classify(err); err != nil {
		if errors.Is(err, db.ErrDuplicate) {
			return ErrExists
		}
		return fmt.Errorf("idemkeys.Insert(%s): %w", Hash(rec.Ref), err)
	}
	return nil
}

const selectColumns = `merchant_id, endpoint, idem_key, fingerprint, state, payment_id, lease_version,
    locked_until, may_charge_until, reconcile_after, reconcile_attempts, response_status, response_body, created_at, updated_at, completed_at`

// Get reads the record for ref, or ErrNotFound.
func Get(ctx context.Context, q sqlx.QueryerContext, ref Ref) (Record, error) {
	const query = `SELECT ` + selectColumns + ` FROM idempotency_keys
WHERE merchant_id = ? AND endpoint = ? AND idem_key = ?`
	var r row
	err := sqlx.GetContext(ctx, q, &r, query, ref.MerchantID, ref.Endpoint, ref.Key)
	if errors.Is(err, sql.ErrNoRows) {
		return Record{}, ErrNotFound
	}
	if err != nil {
		return Record{}, fmt.Errorf("idemkeys.Get(%s): %w", Hash(ref), db.Classify(err))
	}
	return r.toRecord(), nil
}

// TakeOver takes an expired lease: a compare-and-set from the version the
// caller read to the next one. It returns the new version, or ErrFenced when
// the lease is still held, the key completed, or someone else took it first.
// It leaves may_charge_until alone (a taker that decides to charge calls
// ArmCharge first) and reconcile_after too, so that clients retrying faster
// than the lease never keep the reconciler away from a key.
func TakeOver(ctx context.Context, q sqlx.ExecerContext, ref Ref, seen int64, now, until time.Time) (int64, error) {
	const stmt = `
UPDATE idempotency_keys
SET lease_version = lease_version + 1, locked_until = ?, updated_at = ?
WHERE merchant_id = ? AND endpoint = ? AND idem_key = ?
  AND state = 'IN_PROGRESS' AND lease_version = ? AND locked_until <= ?`
	res, err := q.ExecContext(ctx, stmt, until, now, ref.MerchantID, ref.Endpoint, ref.Key, seen, now)
	if err := affectedOne(res, err); err != nil {
		return 0, fmt.Errorf("idemkeys.TakeOver(%s, v%d): %w", Hash(ref), seen, err)
	}
	return seen + 1, nil
}

// ArmCharge records, before a resumed worker sends a charge, that a charge
// may be sent until `until`, and stretches the lease to cover it; fenced on
// held. The reconciler judges "never charged" only after may_charge_until
// plus the PSP's creation window, so no charge may leave without this.
func ArmCharge(ctx context.Context, q sqlx.ExecerContext, ref Ref, held int64, until, now time.Time) error {
	const stmt = `
UPDATE idempotency_keys
SET may_charge_until = GREATEST(COALESCE(may_charge_until, ?), ?),
    locked_until = GREATEST(locked_until, ?), updated_at = ?
WHERE merchant_id = ? AND endpoint = ? AND idem_key = ?
  AND state = 'IN_PROGRESS' AND lease_version = ?`
	res, err := q.ExecContext(ctx, stmt, until, until, until, now, ref.MerchantID, ref.Endpoint, ref.Key, held)
	if err := affectedOne(res, err); err != nil {
		return fmt.Errorf("idemkeys.ArmCharge(%s, v%d): %w", Hash(ref), held, err)
	}
	return nil
}

// Complete stores the response and ends the lease, if and only if the caller
// still holds lease version `held`. ErrFenced otherwise.
func Complete(ctx context.Context, q sqlx.ExecerContext, ref Ref, held int64, resp Response, now time.Time) error {
	const stmt = `
UPDATE idempotency_keys
SET state = 'COMPLETED', response_status = ?, response_body = ?, locked_until = NULL,
    completed_at = ?, updated_at = ?
WHERE merchant_id = ? AND endpoint = ? AND idem_key = ?
  AND state = 'IN_PROGRESS' AND lease_version = ?`
	res, err := q.ExecContext(ctx, stmt, resp.Status, resp.Body, now, now,
		ref.MerchantID, ref.Endpoint, ref.Key, held)
	if err := affectedOne(res, err); err != nil {
		return fmt.Errorf("idemkeys.Complete(%s, v%d): %w", Hash(ref), held, err)
	}
	return nil
}

// Release ends the caller's lease early without storing anything, so that a
// retry with the same key can resume at once instead of waiting out the lease.
// A caller that no longer holds the lease gets ErrFenced and changes nothing.
func Release(ctx context.Context, q sqlx.ExecerContext, ref Ref, held int64, now time.Time) error {
	const stmt = `
UPDATE idempotency_keys
SET locked_until = ?, updated_at = ?
WHERE merchant_id = ? AND endpoint = ? AND idem_key = ?
  AND state = 'IN_PROGRESS' AND lease_version = ?`
	res, err := q.ExecContext(ctx, stmt, now, now, ref.MerchantID, ref.Endpoint, ref.Key, held)
	if err := affectedOne(res, err); err != nil {
		return fmt.Errorf("idemkeys.Release(%s, v%d): %w", Hash(ref), held, err)
	}
	return nil
}

// affectedOne turns a compare-and-set that matched no row into ErrFenced.
// db.Config sets CLIENT_FOUND_ROWS, so a matched row counts even when the
// write leaves its values as they were.
func affectedOne(res sql.Result, err error) error {
	if err != nil {
		return db.Classify(err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return db.Classify(err)
	}
	if n == 0 {
		return ErrFenced
	}
	return nil
}
