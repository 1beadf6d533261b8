package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"gateway/errs"
	"gateway/idemkeys"
	"gateway/payments"
	"gateway/versions"
)

// Cancel-by-key (design §15): the cancellation's claim locks the canceled
// key's record, or the gap where it would be, so that the original request
// and the cancellation are ordered by the database: whichever inserts the
// key first decides, and the other reads what it wrote.

type cancellationRow struct {
	MerchantID string         `db:"merchant_id"`
	Key        string         `db:"idem_key"`
	CancelKey  string         `db:"cancel_key"`
	Reason     string         `db:"reason"`
	Status     string         `db:"status"`
	PaymentID  sql.NullString `db:"payment_id"`
	RefundID   sql.NullString `db:"refund_id"`
	Detail     sql.NullString `db:"detail"`
	CreatedAt  time.Time      `db:"created_at"`
}

const cancellationColumns = `merchant_id, idem_key, cancel_key, reason, status, payment_id, refund_id, detail, created_at`

func (r cancellationRow) toDomain() payments.KeyCancellation {
	return payments.KeyCancellation{MerchantID: r.MerchantID, Key: r.Key, CancelKey: r.CancelKey, Reason: r.Reason,
		Status: payments.CancellationStatus(r.Status), PaymentID: r.PaymentID.String, RefundID: r.RefundID.String,
		Detail: r.Detail.String, CreatedAt: r.CreatedAt}
}

// ClaimCancellation implements payments.FlowStore in one transaction on the
// database's clock: the cancellation's own key, then the canceled key's
// record read with a locking read (an absent one locks its gap: a claim of
// it waits, then finds the tombstone), its payment locked, the decision,
// and its writes. The own key is completed before the commit: it is never
// left in progress.
func (s *Store) ClaimCancellation(ctx context.Context, c payments.CancelClaim, decide func(payments.CancelTarget, time.Time) (payments.CancelDecision, error)) (_ payments.KeyCancellation, _ idemkeys.Response, err error) {
	defer errs.Wrap(&err, "Store.ClaimCancellation")
	var (
		out    payments.KeyCancellation
		answer idemkeys.Response
	)
	err = Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		var now time.Time
		if err := tx.GetContext(ctx, &now, `SELECT NOW(6)`); err != nil {
			return err
		}
		now = now.Truncate(time.Microsecond)
		// The own key first: a retry stops here, and reads what it stored.
		if err := claimKey(ctx, tx, c.Ref, c.Fingerprint, "", c.Token, now, time.Second); err != nil {
			return err
		}
		var target payments.CancelTarget
		var kr keyRow
		err := tx.GetContext(ctx, &kr, `SELECT `+keyColumns+` FROM idempotency_keys WHERE `+keyWhere+` FOR UPDATE`, refArgs(c.Target)...)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return err
		default:
			rec := kr.toDomain()
			target.Record = &rec
			if rec.SubjectID != "" {
				locked, err := lockPayment(ctx, tx, `merchant_id = ? AND id = ?`, c.Target.MerchantID, rec.SubjectID)
				if err != nil && !errors.Is(err, errs.ErrNotFound) {
					return err
				}
				if err == nil {
					target.Payment = &locked.Payment
				}
			}
		}
		d, err := decide(target, now)
		if err != nil {
			return err
		}
		kc := d.Cancellation
		res, err := tx.ExecContext(ctx, `
INSERT IGNORE INTO key_cancellations (merchant_id, idem_key, cancel_key, reason, status, payment_id, detail, due_at, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, IF(? = 'cancel_requested', ?, NULL), ?, ?)`,
			kc.MerchantID, kc.Key, kc.CancelKey, kc.Reason, string(kc.Status), nullString(kc.PaymentID), nullString(kc.Detail),
			string(kc.Status), now, now, now)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.Join(err, payments.ErrCanceledAlready)
		}
		if kc.Status == payments.CancellationRequested && target.Record != nil && target.Record.State == idemkeys.InProgress {
			// No charge of the key is sent again from now on (ArmSend).
			if _, err := tx.ExecContext(ctx, `UPDATE idempotency_keys SET cancel_requested_at = NOW(6) WHERE `+keyWhere, refArgs(c.Target)...); err != nil {
				return err
			}
		}
		if d.Tombstone != nil {
			const stmt = `
INSERT INTO idempotency_keys
    (merchant_id, endpoint, idem_key, fingerprint, state, subject_id, lease_version,
     send_attempts, sends_not_sent, response_status, response_body, api_version, response_version, created_at, updated_at, completed_at)
VALUES (?, ?, ?, ?, 'COMPLETED', '', 0, 0, 0, ?, ?, ?, ?, ?, ?, ?)`
			if _, err := tx.ExecContext(ctx, stmt, c.Target.MerchantID, c.Target.Endpoint, c.Target.Key, payments.CanceledByKey[:],
				d.Tombstone.Status, d.Tombstone.Body, string(versions.FromContext(ctx)), bodyVersion(*d.Tombstone), now, now, now); err != nil {
				return err
			}
		}
		if ch := d.Change; ch != nil {
			before := target.Payment
			seq, err := bumped(tx.ExecContext(ctx, `
UPDATE payments SET status = ?, cancellation_reason = ?, `+bumpEventSeq+`, updated_at = ?
WHERE merchant_id = ? AND id = ? AND status = ?`,
				string(ch.Payment.Status), nullString(ch.Payment.CancellationReason), now, before.MerchantID, before.ID, string(before.Status)))
			if err != nil {
				return fmt.Errorf("cancel moved no payment row: %w", err)
			}
			if ch.Event != nil {
				if err := insertEvent(ctx, tx, *ch.Event, seq); err != nil {
					return err
				}
			}
			if d.FenceKey {
				// The expired lease is taken (a new grant: its holder is
				// fenced out) and the key completed with the canceled payment.
				res, err := tx.ExecContext(ctx, `
UPDATE idempotency_keys
SET lease_version = (((lease_version >> 32) + 1) << 32) | ?, state = 'COMPLETED', response_status = ?, response_body = ?,
    response_version = ?, locked_until = NULL, completed_at = NOW(6), updated_at = NOW(6)
WHERE `+keyWhere+` AND state = 'IN_PROGRESS' AND lease_version = ? AND locked_until <= NOW(6) AND send_attempts = sends_not_sent`,
					append(append([]any{random32(), ch.Answer.Status, ch.Answer.Body, bodyVersion(*ch.Answer)}, refArgs(c.Target)...), int64(target.Record.Token))...)
				if err := exactlyOne(res, err); err != nil {
					return fmt.Errorf("take the canceled key's lease: %w", err)
				}
			}
		}
		if err := completeKey(ctx, tx, c.Ref, c.Token, "", d.Answer); err != nil {
			return err
		}
		out, answer = kc, d.Answer
		return nil
	})
	var pe *errs.Error
	switch {
	case err == nil:
		return out, answer, nil
	case errors.Is(err, idemkeys.ErrExists), errors.Is(err, payments.ErrCanceledAlready):
		return payments.KeyCancellation{}, idemkeys.Response{}, err
	case errors.As(err, &pe):
		return payments.KeyCancellation{}, idemkeys.Response{}, pe
	case errors.Is(err, ErrRetryable):
		return payments.KeyCancellation{}, idemkeys.Response{}, fmt.Errorf("%w: %v", idemkeys.ErrExists, err)
	}
	return payments.KeyCancellation{}, idemkeys.Response{}, writeErr(err)
}

// FinishCancellation implements payments.FlowStore: the cancellation's row,
// fenced on its still being requested, and its own key's answer, in one
// transaction.
func (s *Store) FinishCancellation(ctx context.Context, kc payments.KeyCancellation, answer idemkeys.Response) (err error) {
	defer errs.Wrap(&err, "Store.FinishCancellation")
	err = Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, `
UPDATE key_cancellations SET status = ?, refund_id = ?, detail = ?, due_at = NULL, updated_at = NOW(6)
WHERE merchant_id = ? AND idem_key = ? AND status = 'cancel_requested'`,
			string(kc.Status), nullString(kc.RefundID), nullString(kc.Detail), kc.MerchantID, kc.Key)
		if err := exactlyOne(res, err); err != nil {
			return err
		}
		return replaceResponse(ctx, tx, kc.Ref(), answer)
	})
	return settleErr(err)
}

// ClaimCancellations implements reconcile.Store: locks up to limit
// requested cancellations due for a look (SKIP LOCKED) and pushes their
// next look a lease out, in one short transaction.
func (s *Store) ClaimCancellations(ctx context.Context, lease time.Duration, limit int) (_ []payments.KeyCancellation, err error) {
	defer errs.Wrap(&err, "Store.ClaimCancellations")
	var out []payments.KeyCancellation
	err = Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		out = out[:0]
		var rows []cancellationRow
		if err := tx.SelectContext(ctx, &rows, `SELECT `+cancellationColumns+` FROM key_cancellations
WHERE due_at <= NOW(6) AND status = 'cancel_requested' ORDER BY due_at LIMIT ? FOR UPDATE SKIP LOCKED`, limit); err != nil {
			return err
		}
		for _, r := range rows {
			if _, err := tx.ExecContext(ctx, `UPDATE key_cancellations SET due_at = NOW(6) + INTERVAL ? MICROSECOND, attempts = attempts + 1
WHERE merchant_id = ? AND idem_key = ?`, micros(lease), r.MerchantID, r.Key); err != nil {
				return err
			}
			out = append(out, r.toDomain())
		}
		return nil
	})
	return out, err
}
