package idemkeys

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"gateway/db"
)

// ClaimStale takes the leases of up to limit unfinished keys whose lease
// expired, for a worker that never charges (the reconciler). It must run in
// a short transaction: rows are chosen with FOR UPDATE SKIP LOCKED, so
// concurrent reconcilers split the work instead of queueing on each other,
// and each chosen row's version is bumped so that any older holder is fenced
// out. The returned records carry the new versions.
func ClaimStale(ctx context.Context, tx *sqlx.Tx, now, until time.Time, limit int) ([]Record, error) {
	const query = `SELECT ` + selectColumns + ` FROM idempotency_keys
WHERE state = 'IN_PROGRESS' AND (reconcile_after <= ? OR reconcile_after IS NULL) AND locked_until <= ?
ORDER BY reconcile_after
LIMIT ?
FOR UPDATE SKIP LOCKED`
	// reconcile_after IS NULL: rows written by a binary older than migration 3.
	var rows []row
	if err := tx.SelectContext(ctx, &rows, query, now, now, limit); err != nil {
		return nil, fmt.Errorf("idemkeys.ClaimStale: select: %w", db.Classify(err))
	}
	if len(rows) == 0 {
		return nil, nil
	}
	// The rows are locked by this transaction: the versions just read are current.
	var (
		cond strings.Builder
		args = []any{until, until, now}
	)
	for i, r := range rows {
		if i > 0 {
			cond.WriteString(" OR ")
		}
		cond.WriteString("(merchant_id = ? AND endpoint = ? AND idem_key = ?)")
		args = append(args, r.MerchantID, r.Endpoint, r.Key)
	}
	stmt := `UPDATE idempotency_keys
SET lease_version = lease_version + 1, locked_until = ?, reconcile_after = ?, updated_at = ?
WHERE state = 'IN_PROGRESS' AND (` + cond.String() + `)`
	res, err := tx.ExecContext(ctx, stmt, args...)
	if err != nil {
		return nil, fmt.Errorf("idemkeys.ClaimStale: update: %w", db.Classify(err))
	}
	if n, err := res.RowsAffected(); err != nil || n != int64(len(rows)) {
		return nil, fmt.Errorf("idemkeys.ClaimStale: bumped %d of %d locked rows: %v", n, len(rows), err)
	}
	recs := make([]Record, len(rows))
	for i, r := range rows {
		recs[i] = r.toRecord()
		recs[i].LeaseVersion++
		recs[i].LockedUntil = until
		recs[i].ReconcileAfter = until
		recs[i].UpdatedAt = now
	}
	return recs, nil
}

// Reschedule gives back a lease the reconciler could not settle: the lease
// ends now, so the client's own retry may resume at once, and the reconciler
// does not look again before `after`. attempts is the new count of passes
// that could not learn the outcome. Fenced on held.
func Reschedule(ctx context.Context, q sqlx.ExecerContext, ref Ref, held int64, after time.Time, attempts int, now time.Time) error {
	const stmt = `
UPDATE idempotency_keys
SET locked_until = ?, reconcile_after = ?, reconcile_attempts = ?, updated_at = ?
WHERE merchant_id = ? AND endpoint = ? AND idem_key = ?
  AND state = 'IN_PROGRESS' AND lease_version = ?`
	res, err := q.ExecContext(ctx, stmt, now, after, attempts, now, ref.MerchantID, ref.Endpoint, ref.Key, held)
	if err := affectedOne(res, err); err != nil {
		return fmt.Errorf("idemkeys.Reschedule(%s, v%d): %w", Hash(ref), held, err)
	}
	return nil
}

// Purge deletes up to limit completed keys finished before `before`, and
// reports how many it deleted. Callers loop until it returns fewer than
// limit: small deletes keep locks and undo logs short on a busy table.
func Purge(ctx context.Context, q sqlx.ExecerContext, before time.Time, limit int) (int64, error) {
	const stmt = `DELETE FROM idempotency_keys WHERE state = 'COMPLETED' AND completed_at < ? ORDER BY completed_at LIMIT ?`
	res, err := q.ExecContext(ctx, stmt, before, limit)
	if err != nil {
		return 0, fmt.Errorf("idemkeys.Purge: %w", db.Classify(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("idemkeys.Purge: %w", db.Classify(err))
	}
	return n, nil
}

// ReplaceResponse rewrites the stored response of a completed key after ops
// changed its payment's outcome by hand. Run it in the transaction that holds
// the payment's row lock.
func ReplaceResponse(ctx context.Context, q sqlx.ExecerContext, ref Ref, resp Response, now time.Time) error {
	const stmt = `
UPDATE idempotency_keys SET response_status = ?, response_body = ?, updated_at = ?
WHERE merchant_id = ? AND endpoint = ? AND idem_key = ? AND state = 'COMPLETED'`
	res, err := q.ExecContext(ctx, stmt, resp.Status, resp.Body, now, ref.MerchantID, ref.Endpoint, ref.Key)
	if err := affectedOne(res, err); err != nil {
		if err == ErrFenced {
			return ErrNotFound // no completed key: purged, nothing to rewrite
		}
		return fmt.Errorf("idemkeys.ReplaceResponse(%s): %w", Hash(ref), err)
	}
	return nil
}
