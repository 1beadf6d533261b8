package mysql

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/binary"
	"fmt"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/oklog/ulid/v2"

	"gateway/errs"
	"gateway/idemkeys"
	"gateway/payments"
)

// ClaimStale implements reconcile.Store: one short transaction that locks
// up to limit unfinished keys whose lease and schedule are due (by the
// database's clock), reads their payments, sets aside the ones it cannot
// read (quarantined, with the reason), and gives every other one a new
// token and a lease of `lease`. Rows locked by another claimer are skipped,
// never waited for, so concurrent reconcilers split the work. It runs at
// READ COMMITTED: its scan of the queue then locks only the rows it claims,
// not the gaps and rows it passed over (rows just claimed or being settled),
// so it makes no settle and no other claim wait.
func (s *Store) ClaimStale(ctx context.Context, lease time.Duration, limit int) (_ payments.Claimed, err error) {
	defer errs.Wrap(&err, "Store.ClaimStale")
	var out payments.Claimed
	err = TransactReadCommitted(ctx, s.db, func(tx *sqlx.Tx) error {
		out = payments.Claimed{}
		const query = `SELECT ` + keyColumns + ` FROM idempotency_keys
WHERE state = 'IN_PROGRESS' AND (reconcile_after <= NOW(6) OR reconcile_after IS NULL) AND locked_until <= NOW(6)
  AND quarantine_reason IS NULL
ORDER BY reconcile_after
LIMIT ?
FOR UPDATE SKIP LOCKED`
		// reconcile_after IS NULL: rows written by a binary older than migration 3.
		var rows []keyRow
		if err := tx.SelectContext(ctx, &rows, query, limit); err != nil {
			return fmt.Errorf("select keys: %w", err)
		}
		if len(rows) == 0 {
			return nil
		}
		byID, refunds, bad, err := subjectsOf(ctx, tx, rows)
		if err != nil {
			return err
		}
		var (
			cond strings.Builder
			r    = random32()
			args = []any{r, micros(lease), micros(lease)}
		)
		for _, k := range rows {
			rec := k.toDomain()
			if reason, ok := bad[rec.MerchantID+"/"+rec.SubjectID]; ok {
				if err := quarantine(ctx, tx, rec.Ref, reason); err != nil {
					return err
				}
				out.Quarantined = append(out.Quarantined, payments.Quarantined{Key: rec, Reason: reason})
				continue
			}
			if cond.Len() > 0 {
				cond.WriteString(" OR ")
			}
			cond.WriteString("(" + keyWhere + ")")
			args = append(args, refArgs(rec.Ref)...)
			// The row is locked by this transaction: the token just read is current.
			rec.Token = rec.Token.NextWith(r)
			rec.LockedUntil = rec.DBNow.Add(lease)
			rec.ReconcileAfter = rec.LockedUntil
			pending := payments.Pending{Key: rec, Payment: byID[rec.MerchantID+"/"+rec.SubjectID]}
			if r, ok := refunds[rec.MerchantID+"/"+rec.SubjectID]; ok {
				pending.Refund = &r
				pending.Payment = byID[r.MerchantID+"/"+r.PaymentID]
			}
			out.Pending = append(out.Pending, pending)
		}
		if len(out.Pending) == 0 {
			return nil
		}
		// The new token is computed by the server from the locked row's own
		// (the same arithmetic as idemkeys.Token.NextWith), the lease from its clock.
		stmt := `UPDATE idempotency_keys
SET lease_version = (((lease_version >> 32) + 1) << 32) | ?,
    locked_until = NOW(6) + INTERVAL ? MICROSECOND, reconcile_after = NOW(6) + INTERVAL ? MICROSECOND,
    updated_at = NOW(6)
WHERE state = 'IN_PROGRESS' AND (` + cond.String() + `)`
		res, err := tx.ExecContext(ctx, stmt, args...)
		if err != nil {
			return fmt.Errorf("bump tokens: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil || n != int64(len(out.Pending)) {
			return fmt.Errorf("bumped %d of %d locked rows: %v", n, len(out.Pending), err)
		}
		return nil
	})
	if err != nil {
		return payments.Claimed{}, err
	}
	return out, nil
}

// subjectsOf reads what locked keys created (a payment, or a refund with
// its payment); a key whose row is missing or cannot be decoded is returned
// in bad with the reason, so that one broken row never stops a pass.
func subjectsOf(ctx context.Context, tx *sqlx.Tx, keys []keyRow) (map[string]payments.Payment, map[string]payments.Refund, map[string]string, error) {
	var (
		pcond, rcond strings.Builder
		pargs, rargs []any
	)
	or := func(b *strings.Builder, clause string) {
		if b.Len() > 0 {
			b.WriteString(" OR ")
		}
		b.WriteString(clause)
	}
	for _, k := range keys {
		if kind, _ := payments.KindOf(k.Endpoint); kind == payments.KindRefund {
			or(&rcond, "(merchant_id = ? AND id = ?)")
			rargs = append(rargs, k.MerchantID, k.SubjectID)
		} else {
			or(&pcond, "(merchant_id = ? AND id = ?)")
			pargs = append(pargs, k.MerchantID, k.SubjectID)
		}
	}
	bad := map[string]string{}
	refunds := map[string]payments.Refund{}
	if rcond.Len() > 0 {
		var rows []refundRow
		if err := tx.SelectContext(ctx, &rows, `SELECT `+refundColumns+` FROM refunds WHERE `+rcond.String(), rargs...); err != nil {
			return nil, nil, nil, fmt.Errorf("select refunds: %w", err)
		}
		for _, row := range rows {
			id := row.MerchantID + "/" + row.ID
			r, err := row.toDomain()
			if err != nil {
				bad[id] = "refund row unreadable: " + err.Error()
				continue
			}
			refunds[id] = r
			// The refund's payment is read with the others.
			or(&pcond, "(merchant_id = ? AND id = ?)")
			pargs = append(pargs, r.MerchantID, r.PaymentID)
		}
	}
	byID := map[string]payments.Payment{}
	if pcond.Len() > 0 {
		var rows []paymentRow
		if err := tx.SelectContext(ctx, &rows, `SELECT `+paymentColumns+` FROM payments WHERE `+pcond.String(), pargs...); err != nil {
			return nil, nil, nil, fmt.Errorf("select payments: %w", err)
		}
		for _, r := range rows {
			id := r.MerchantID + "/" + r.ID
			p, err := r.toDomain()
			if err != nil {
				bad[id] = "payment row unreadable: " + err.Error()
				continue
			}
			byID[id] = p
		}
	}
	for _, k := range keys {
		id := k.MerchantID + "/" + k.SubjectID
		if bad[id] != "" {
			continue
		}
		if kind, _ := payments.KindOf(k.Endpoint); kind == payments.KindRefund {
			r, ok := refunds[id]
			switch {
			case !ok:
				bad[id] = "refund row missing"
			case bad[r.MerchantID+"/"+r.PaymentID] != "":
				bad[id] = bad[r.MerchantID+"/"+r.PaymentID]
			default:
				if _, ok := byID[r.MerchantID+"/"+r.PaymentID]; !ok {
					bad[id] = "the refund's payment row is missing"
				}
			}
			continue
		}
		if _, ok := byID[id]; !ok {
			bad[id] = "payment row missing"
		}
	}
	return byID, refunds, bad, nil
}

func quarantine(ctx context.Context, tx *sqlx.Tx, ref idemkeys.Ref, reason string) error {
	if len(reason) > 255 {
		reason = reason[:255]
	}
	_, err := tx.ExecContext(ctx, `UPDATE idempotency_keys SET quarantine_reason = ?, updated_at = NOW(6) WHERE `+keyWhere,
		append([]any{reason}, refArgs(ref)...)...)
	if err != nil {
		return fmt.Errorf("quarantine: %w", err)
	}
	return nil
}

func random32() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return binary.BigEndian.Uint32(b[:])
}

// PurgeKeys implements reconcile.Store: one step of a purge. It reads the
// next limit keys completed longer than retention ago (by the database's
// clock) after the cursor, in the order of the index on completion time,
// then deletes them by primary key, checked again as it deletes. Each step
// starts where the last one ended, so it never walks again over what was
// deleted, and no statement holds locks beyond its own rows. done: no key
// is left after the returned cursor.
func (s *Store) PurgeKeys(ctx context.Context, retention time.Duration, after payments.PurgeCursor, limit int) (_ int64, _ payments.PurgeCursor, _ bool, err error) {
	defer errs.Wrap(&err, "Store.PurgeKeys")
	// A key canceled by key before anything claimed it (no subject) is
	// kept: it is what stops a late duplicate of its request from charging.
	const pick = `SELECT merchant_id, endpoint, idem_key, completed_at FROM idempotency_keys
WHERE state = 'COMPLETED' AND completed_at < NOW(6) - INTERVAL ? MICROSECOND
  AND NOT (subject_id = '' AND endpoint = 'POST /payments')
  AND (completed_at > ? OR (completed_at = ? AND (merchant_id > ? OR (merchant_id = ? AND (endpoint > ? OR (endpoint = ? AND idem_key > ?))))))
ORDER BY completed_at, merchant_id, endpoint, idem_key
LIMIT ?`
	var rows []struct {
		MerchantID  string    `db:"merchant_id"`
		Endpoint    string    `db:"endpoint"`
		Key         string    `db:"idem_key"`
		CompletedAt time.Time `db:"completed_at"`
	}
	a := after
	if err := s.db.SelectContext(ctx, &rows, pick, micros(retention), a.CompletedAt, a.CompletedAt,
		a.Ref.MerchantID, a.Ref.MerchantID, a.Ref.Endpoint, a.Ref.Endpoint, a.Ref.Key, limit); err != nil {
		return 0, after, false, Classify(err)
	}
	if len(rows) == 0 {
		return 0, after, true, nil
	}
	var cond strings.Builder
	args := []any{micros(retention)}
	for i, r := range rows {
		if i > 0 {
			cond.WriteString(" OR ")
		}
		cond.WriteString("(" + keyWhere + ")")
		args = append(args, r.MerchantID, r.Endpoint, r.Key)
	}
	last := rows[len(rows)-1]
	next := payments.PurgeCursor{CompletedAt: last.CompletedAt, Ref: idemkeys.Ref{MerchantID: last.MerchantID, Endpoint: last.Endpoint, Key: last.Key}}
	n, err := ExecRetry(ctx, s.db, `DELETE FROM idempotency_keys
WHERE state = 'COMPLETED' AND completed_at < NOW(6) - INTERVAL ? MICROSECOND AND (`+cond.String()+`)`, args...)
	if err != nil {
		return 0, after, false, Classify(err)
	}
	return n, next, len(rows) < limit, nil
}

// Backlog implements reconcile.Store: what a pass leaves for people and
// gauges, every age on the database's clock.
func (s *Store) Backlog(ctx context.Context) (_ payments.Backlog, err error) {
	defer errs.Wrap(&err, "Store.Backlog")
	var b payments.Backlog
	var row struct {
		Oldest      sql.NullInt64 `db:"oldest"`
		Quarantined int           `db:"quarantined"`
	}
	const q = `SELECT TIMESTAMPDIFF(MICROSECOND, MIN(created_at), NOW(6)) AS oldest,
    COUNT(quarantine_reason) AS quarantined
FROM idempotency_keys WHERE state = 'IN_PROGRESS'`
	if err := s.db.GetContext(ctx, &row, q); err != nil {
		return b, fmt.Errorf("keys: %w", Classify(err))
	}
	b.OldestUnfinished = time.Duration(row.Oldest.Int64) * time.Microsecond
	b.Quarantined = row.Quarantined
	var review struct {
		N      int           `db:"n"`
		Oldest sql.NullInt64 `db:"oldest"`
	}
	const rq = `SELECT COUNT(*) AS n, TIMESTAMPDIFF(MICROSECOND, MIN(review_since), NOW(6)) AS oldest
FROM payments WHERE status = 'requires_review'`
	if err := s.db.GetContext(ctx, &review, rq); err != nil {
		return b, fmt.Errorf("review: %w", Classify(err))
	}
	b.NeedsReview = review.N
	b.OldestReview = time.Duration(review.Oldest.Int64) * time.Microsecond
	const rrq = `SELECT COUNT(*) AS n, TIMESTAMPDIFF(MICROSECOND, MIN(review_since), NOW(6)) AS oldest
FROM refunds WHERE status = 'requires_review'`
	if err := s.db.GetContext(ctx, &review, rrq); err != nil {
		return b, fmt.Errorf("refunds in review: %w", Classify(err))
	}
	b.RefundsNeedReview = review.N
	b.OldestRefundReview = time.Duration(review.Oldest.Int64) * time.Microsecond
	return b, nil
}

// ClaimReview implements reconcile.Store: locks up to limit payments in
// review whose next look is due, and marks them looked at for `lease` (the
// mark is the fence every later write compares).
func (s *Store) ClaimReview(ctx context.Context, lease time.Duration, limit int) (_ []payments.InReview, err error) {
	defer errs.Wrap(&err, "Store.ClaimReview")
	out, err := s.claimLooks(ctx, payments.RequiresReview, lease, limit)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ClaimActions implements reconcile.Store: ClaimReview for payments waiting
// for their customer (requires_action).
func (s *Store) ClaimActions(ctx context.Context, lease time.Duration, limit int) (_ []payments.InReview, err error) {
	defer errs.Wrap(&err, "Store.ClaimActions")
	out, err := s.claimLooks(ctx, payments.RequiresAction, lease, limit)
	if err != nil {
		return nil, err
	}
	return out, nil
}

// claimLooks locks up to limit payments in status whose next look is due
// and marks them looked at for lease; one with a capture or a void in
// flight is that operation's to settle, and waits for it.
func (s *Store) claimLooks(ctx context.Context, status payments.Status, lease time.Duration, limit int) ([]payments.InReview, error) {
	var out []payments.InReview
	err := Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		out = out[:0]
		const q = `SELECT ` + paymentColumns + `, NOW(6) AS db_now FROM payments
WHERE status = ? AND review_after <= NOW(6) AND op_kind IS NULL
ORDER BY review_after LIMIT ? FOR UPDATE SKIP LOCKED`
		var rows []struct {
			paymentRow
			DBNow time.Time `db:"db_now"`
		}
		if err := tx.SelectContext(ctx, &rows, q, string(status), limit); err != nil {
			return err
		}
		for _, r := range rows {
			p, err := r.toDomain()
			if err != nil {
				// Unreadable: push it far out of the way; ops see it in the review list.
				if _, err := tx.ExecContext(ctx, `UPDATE payments SET review_after = NOW(6) + INTERVAL 1 DAY WHERE merchant_id = ? AND id = ?`, r.MerchantID, r.ID); err != nil {
					return err
				}
				continue
			}
			mark := r.DBNow.Add(lease).Truncate(time.Microsecond)
			if _, err := tx.ExecContext(ctx, `UPDATE payments SET review_after = ? WHERE merchant_id = ? AND id = ?`, mark, p.MerchantID, p.ID); err != nil {
				return err
			}
			p.Review.After = mark
			out = append(out, payments.InReview{Payment: p, DBNow: r.DBNow})
		}
		return nil
	})
	return out, err
}

// RescheduleReview implements reconcile.Store: the next look at a payment in
// review (or waiting for its customer), fenced on the claim's mark and on
// its status.
func (s *Store) RescheduleReview(ctx context.Context, p payments.Payment, r payments.Reschedule) (err error) {
	defer errs.Wrap(&err, "Store.RescheduleReview")
	const stmt = `
UPDATE payments
SET review_after = GREATEST(NOW(6) + INTERVAL ? MICROSECOND, COALESCE(?, NOW(6))), review_attempts = ?,
    review_not_found_at = IF(?, COALESCE(review_not_found_at, NOW(6)), review_not_found_at)
WHERE merchant_id = ? AND id = ? AND status = ? AND review_after = ?`
	notBefore := sql.NullTime{Time: r.NotBefore, Valid: !r.NotBefore.IsZero()}
	n, err := ExecRetry(ctx, s.db, stmt, micros(r.After), notBefore, r.Attempts, r.NotFound, p.MerchantID, p.ID, string(p.Status), p.Review.After)
	switch {
	case err != nil:
		return writeErr(err)
	case n == 0:
		return idemkeys.ErrFenced
	}
	return nil
}

// Resolve implements review.Store and reconcile.Store: decide turns
// the payment locked at the database's time into its change; the payment,
// its event, its outcome key's answer and res in the audit table are
// written as the change says, all in one transaction.
func (s *Store) Resolve(ctx context.Context, id string, decide func(payments.Payment, time.Time) (payments.PaymentChange, error), res payments.Resolution) (_ payments.Payment, err error) {
	defer errs.Wrap(&err, "Store.Resolve(%s)", id)
	var out payments.Payment
	err = Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		out, err = resolveIn(ctx, tx, decide, res, `id = ?`, id)
		return err
	})
	return out, err
}

// resolveIn is Resolve's work in tx, on the payment where names.
func resolveIn(ctx context.Context, tx *sqlx.Tx, decide func(payments.Payment, time.Time) (payments.PaymentChange, error), res payments.Resolution, where string, args ...any) (payments.Payment, error) {
	var out payments.Payment
	err := func() error {
		locked, err := lockPayment(ctx, tx, where, args...)
		if err != nil {
			return err
		}
		before, seq := locked.Payment, locked.seq
		c, err := decide(before, locked.dbNow)
		if err != nil {
			return err
		}
		after := c.Payment
		action, err := nextActionJSON(after.NextAction)
		if err != nil {
			return err
		}
		if c.Event != nil {
			seq++
		}
		// The schedule first: MySQL assigns left to right, and the status
		// compared there must be the one before this change. A payment that
		// enters review (or starts waiting for its customer) is scheduled
		// afresh; one that stays keeps its schedule; one that leaves both
		// has none.
		to := string(after.Status)
		if _, err := tx.ExecContext(ctx, `
UPDATE payments SET
    review_since = IF(? IN ('requires_review', 'requires_action') AND status <> ?, NOW(6), review_since),
    review_attempts = IF(status = ?, review_attempts, 0),
    review_not_found_at = IF(status = ?, review_not_found_at, NULL),
    review_after = CASE WHEN ? NOT IN ('requires_review', 'requires_action') THEN NULL
                        WHEN status = ? THEN review_after
                        WHEN ? = 'requires_review' THEN NOW(6) + INTERVAL ? MICROSECOND
                        ELSE NOW(6) + INTERVAL ? MICROSECOND END,
    status = ?, psp_reference = ?, decline_code = ?, psp_code = ?, review_reason = ?, next_action = ?,
    amount_captured = ?, capture_before = ?, cancellation_reason = ?,
    event_seq = ?, updated_at = NOW(6)
WHERE merchant_id = ? AND id = ?`,
			to, to, to, to, to, to, to, micros(payments.ReviewFirstLook), micros(payments.ActionFirstLook),
			to, nullString(after.PSPReference), nullString(after.DeclineCode), nullString(after.PSPCode), nullString(after.ReviewReason), action,
			after.AmountCaptured, nullTime(after.CaptureBefore), nullString(after.CancellationReason),
			seq, after.MerchantID, after.ID); err != nil {
			return err
		}
		if c.Event != nil {
			if err := insertEvent(ctx, tx, *c.Event, seq); err != nil {
				return err
			}
		}
		if c.Answer != nil {
			if err := replaceResponse(ctx, tx, c.Key, *c.Answer); err != nil {
				return err
			}
		}
		if c.Reopen {
			if _, err := tx.ExecContext(ctx, `
UPDATE key_cancellations SET status = 'cancel_requested', due_at = NOW(6), updated_at = NOW(6),
    detail = 'the payment holds money after all: it is voided or refunded'
WHERE merchant_id = ? AND idem_key = ? AND status IN ('canceled', 'voided')`, after.MerchantID, after.IdempotencyKey); err != nil {
				return err
			}
		}
		auditID := "res_" + ulid.Make().String()
		if _, err := tx.ExecContext(ctx, `
INSERT INTO payment_resolutions
    (merchant_id, id, payment_id, from_status, to_status, psp_reference, reason, actor, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, NOW(6))`,
			after.MerchantID, auditID, after.ID, string(before.Status), string(after.Status),
			nullString(res.PSPReference), res.Reason, res.Actor); err != nil {
			return err
		}
		out = after
		return nil
	}()
	return out, err
}
