package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"time"

	"github.com/jmoiron/sqlx"

	"gateway/errs"
	"gateway/idemkeys"
	"gateway/payments"
	"gateway/routing"
)

// Failover implements payments.FlowStore in one transaction: the key's
// counters start again for the new attempt under the next token (fenced on
// the token, on the ended attempt's send being the only one authorised,
// and on no cancellation by key), the ended attempt becomes a row of
// payment_attempts (due for its check at once: the reconciler waits out
// its account's creation window), and the payment moves to the new one.
func (s *Store) Failover(ctx context.Context, ref idemkeys.Ref, token, next idemkeys.Token, p payments.Payment, window time.Duration) (at time.Time, err error) {
	defer errs.Wrap(&err, "Store.Failover(%s)", p.ID)
	if len(p.Attempts) == 0 {
		return time.Time{}, errors.New("no attempt ended")
	}
	ended := p.Attempts[len(p.Attempts)-1]
	err = Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		const arm = `
UPDATE idempotency_keys
SET lease_version = ?, send_attempts = 1, sends_not_sent = 0, not_found_at = NULL,
    may_send_until = GREATEST(COALESCE(may_send_until, NOW(6)), NOW(6) + INTERVAL ? MICROSECOND),
    locked_until = GREATEST(COALESCE(locked_until, NOW(6)), NOW(6) + INTERVAL ? MICROSECOND), updated_at = NOW(6)
WHERE ` + keyWhere + ` AND state = 'IN_PROGRESS' AND lease_version = ? AND cancel_requested_at IS NULL
  AND subject_id = ? AND send_attempts = sends_not_sent + 1`
		args := append([]any{int64(next), micros(window), micros(window)}, append(refArgs(ref), int64(token), p.ID)...)
		if err := exactlyOne(tx.ExecContext(ctx, arm, args...)); err != nil {
			return err
		}
		if err := tx.GetContext(ctx, &at, `SELECT NOW(6)`); err != nil {
			return err
		}
		ended.EndedAt = at
		history := append(p.Attempts[:len(p.Attempts)-1:len(p.Attempts)-1], ended)
		b, err := json.Marshal(history)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `
INSERT INTO payment_attempts (merchant_id, payment_id, attempt, psp, merchant_order_id, outcome, psp_code, started_at, ended_at, check_after)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			p.MerchantID, p.ID, ended.Number, ended.PSP, ended.MerchantOrderID, string(ended.Outcome), nullString(ended.PSPCode),
			ended.StartedAt, at, at); err != nil {
			return err
		}
		return exactlyOne(tx.ExecContext(ctx, `
UPDATE payments SET psp = ?, merchant_order_id = ?, attempt = ?, attempt_at = ?, attempts = ?, updated_at = ?
WHERE merchant_id = ? AND id = ? AND attempt = ? AND status = 'processing'`,
			p.PSP, p.MerchantOrderID, p.Attempt, at, string(b), at, p.MerchantID, p.ID, ended.Number))
	})
	if errors.Is(err, errFenced) {
		// Nothing matched: the lease is someone else's, or the ended
		// attempt may still land (or a cancellation was asked for).
		rec, rerr := s.Record(ctx, ref)
		if rerr == nil && rec.State == idemkeys.InProgress && rec.Token == token {
			return time.Time{}, payments.ErrArmRefused
		}
		return time.Time{}, idemkeys.ErrFenced
	}
	return at, settleErr(err)
}

type attemptRow struct {
	MerchantID      string         `db:"merchant_id"`
	PaymentID       string         `db:"payment_id"`
	Attempt         int            `db:"attempt"`
	PSP             string         `db:"psp"`
	MerchantOrderID string         `db:"merchant_order_id"`
	Outcome         string         `db:"outcome"`
	PSPCode         sql.NullString `db:"psp_code"`
	PSPReference    sql.NullString `db:"psp_reference"`
	StartedAt       time.Time      `db:"started_at"`
	EndedAt         time.Time      `db:"ended_at"`
	CheckAfter      sql.NullTime   `db:"check_after"`
	CheckAttempts   int            `db:"check_attempts"`
}

// ClaimAttemptChecks implements reconcile.Store: up to limit earlier
// attempts due for their check, each marked as looked at for lease (the
// mark fences RecordAttemptCheck), with their payments.
func (s *Store) ClaimAttemptChecks(ctx context.Context, lease time.Duration, limit int) (_ []payments.AttemptCheck, err error) {
	defer errs.Wrap(&err, "Store.ClaimAttemptChecks")
	var out []payments.AttemptCheck
	err = TransactReadCommitted(ctx, s.db, func(tx *sqlx.Tx) error {
		out = out[:0]
		var rows []attemptRow
		if err := tx.SelectContext(ctx, &rows, `
SELECT merchant_id, payment_id, attempt, psp, merchant_order_id, outcome, psp_code, psp_reference, started_at, ended_at, check_after, check_attempts
FROM payment_attempts WHERE check_after <= NOW(6) ORDER BY check_after LIMIT ? FOR UPDATE SKIP LOCKED`, limit); err != nil {
			return err
		}
		var now time.Time
		if err := tx.GetContext(ctx, &now, `SELECT NOW(6)`); err != nil {
			return err
		}
		mark := now.Add(lease).Truncate(time.Microsecond)
		for _, r := range rows {
			if _, err := tx.ExecContext(ctx, `UPDATE payment_attempts SET check_after = ? WHERE merchant_id = ? AND payment_id = ? AND attempt = ?`,
				mark, r.MerchantID, r.PaymentID, r.Attempt); err != nil {
				return err
			}
			var pr paymentRow
			if err := tx.GetContext(ctx, &pr, `SELECT `+paymentColumns+` FROM payments WHERE merchant_id = ? AND id = ?`, r.MerchantID, r.PaymentID); err != nil {
				return err
			}
			p, err := pr.toDomain()
			if err != nil {
				return err
			}
			out = append(out, payments.AttemptCheck{MerchantID: r.MerchantID, PaymentID: r.PaymentID, Checks: r.CheckAttempts,
				Mark: mark, Payment: p, DBNow: now, Attempt: routing.Attempt{Number: r.Attempt, PSP: r.PSP,
					MerchantOrderID: r.MerchantOrderID, Outcome: routing.AttemptOutcome(r.Outcome), PSPCode: r.PSPCode.String,
					PSPReference: r.PSPReference.String, StartedAt: r.StartedAt, EndedAt: r.EndedAt}})
		}
		return nil
	})
	return out, err
}

// RecordAttemptCheck implements reconcile.Store: the check's finding on
// the attempt's row and on its payment's copy, fenced on the claim's mark;
// next is its next check (zero: none, the attempt is settled).
// idemkeys.ErrFenced when another check moved it.
func (s *Store) RecordAttemptCheck(ctx context.Context, c payments.AttemptCheck, next time.Time) (err error) {
	defer errs.Wrap(&err, "Store.RecordAttemptCheck(%s #%d)", c.PaymentID, c.Attempt.Number)
	return settleErr(Transact(ctx, s.db, func(tx *sqlx.Tx) error { return recordAttemptIn(ctx, tx, c, next) }))
}

// ReviewAttempt implements reconcile.Store: RecordAttemptCheck and, in the
// same transaction, the change decide makes of the payment (its review),
// with its audit row; decide's idemkeys.ErrFenced (the payment is in
// review already) leaves the payment as it is and records the attempt
// alone. One transaction, so that no look in between sees the one without
// the other: a later check reading the review without the attempt's
// finding, or the review queue settling the payment from its current
// attempt before the finding is on it.
func (s *Store) ReviewAttempt(ctx context.Context, c payments.AttemptCheck, next time.Time, decide func(payments.Payment, time.Time) (payments.PaymentChange, error), res payments.Resolution) (err error) {
	defer errs.Wrap(&err, "Store.ReviewAttempt(%s #%d)", c.PaymentID, c.Attempt.Number)
	return settleErr(Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		if err := recordAttemptIn(ctx, tx, c, next); err != nil {
			return err
		}
		_, err := resolveIn(ctx, tx, decide, res, `merchant_id = ? AND id = ?`, c.MerchantID, c.PaymentID)
		if errors.Is(err, idemkeys.ErrFenced) {
			return nil
		}
		return err
	}))
}

// recordAttemptIn is RecordAttemptCheck's work in tx.
func recordAttemptIn(ctx context.Context, tx *sqlx.Tx, c payments.AttemptCheck, next time.Time) error {
	{
		if err := exactlyOne(tx.ExecContext(ctx, `
UPDATE payment_attempts SET outcome = ?, psp_reference = ?, check_after = ?, check_attempts = ?
WHERE merchant_id = ? AND payment_id = ? AND attempt = ? AND check_after = ?`,
			string(c.Attempt.Outcome), nullString(c.Attempt.PSPReference), nullTime(next), c.Checks,
			c.MerchantID, c.PaymentID, c.Attempt.Number, c.Mark)); err != nil {
			return err
		}
		var copyJSON sql.NullString
		if err := tx.GetContext(ctx, &copyJSON, `SELECT attempts FROM payments WHERE merchant_id = ? AND id = ? FOR UPDATE`, c.MerchantID, c.PaymentID); err != nil {
			return err
		}
		var history []routing.Attempt
		if copyJSON.Valid && copyJSON.String != "" {
			if err := json.Unmarshal([]byte(copyJSON.String), &history); err != nil {
				return err
			}
		}
		for i := range history {
			if history[i].Number == c.Attempt.Number {
				history[i].Outcome, history[i].PSPReference = c.Attempt.Outcome, c.Attempt.PSPReference
			}
		}
		b, err := json.Marshal(history)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `UPDATE payments SET attempts = ? WHERE merchant_id = ? AND id = ?`, string(b), c.MerchantID, c.PaymentID)
		return err
	}
}
