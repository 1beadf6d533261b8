package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"gateway/errs"
	"gateway/idemkeys"
	"gateway/payments"
)

type refundRow struct {
	MerchantID     string         `db:"merchant_id"`
	ID             string         `db:"id"`
	PaymentID      string         `db:"payment_id"`
	IdemKey        string         `db:"idem_key"`
	RefundOrderID  string         `db:"refund_order_id"`
	Status         string         `db:"status"`
	Amount         int64          `db:"amount"`
	Currency       string         `db:"currency"`
	Reason         string         `db:"reason"`
	Metadata       sql.NullString `db:"metadata"`
	PSPReference   sql.NullString `db:"psp_reference"`
	FailureCode    sql.NullString `db:"failure_code"`
	PSPCode        sql.NullString `db:"psp_code"`
	PSP            sql.NullString `db:"psp"`
	ReviewReason   sql.NullString `db:"review_reason"`
	ReviewSince    sql.NullTime   `db:"review_since"`
	ReviewAfter    sql.NullTime   `db:"review_after"`
	ReviewAttempts int            `db:"review_attempts"`
	ReviewNotFound sql.NullTime   `db:"review_not_found_at"`
	CreatedAt      time.Time      `db:"created_at"`
	UpdatedAt      time.Time      `db:"updated_at"`
}

const refundColumns = `merchant_id, id, payment_id, idem_key, refund_order_id, status, amount, currency, reason,
    metadata, psp_reference, failure_code, psp_code, psp, review_reason, review_since, review_after,
    review_attempts, review_not_found_at, created_at, updated_at`

func (r refundRow) toDomain() (payments.Refund, error) {
	x := payments.Refund{
		ID: r.ID, MerchantID: r.MerchantID, PaymentID: r.PaymentID, IdempotencyKey: r.IdemKey,
		RefundOrderID: r.RefundOrderID, Status: payments.RefundStatus(r.Status),
		Amount: payments.Money{Minor: r.Amount, Currency: r.Currency}, Reason: r.Reason,
		PSPReference: r.PSPReference.String, FailureCode: r.FailureCode.String, PSPCode: r.PSPCode.String,
		PSP: r.PSP.String, ReviewReason: r.ReviewReason.String,
		Review: payments.Review{Since: r.ReviewSince.Time, After: r.ReviewAfter.Time, Attempts: r.ReviewAttempts,
			NotFoundAt: r.ReviewNotFound.Time},
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
	if r.Metadata.Valid && r.Metadata.String != "" {
		if err := json.Unmarshal([]byte(r.Metadata.String), &x.Metadata); err != nil {
			return payments.Refund{}, fmt.Errorf("refund %s: metadata: %w", r.ID, err)
		}
	}
	return x, nil
}

// ClaimRefund implements payments.FlowStore: the key first (of two racing
// claims the loser stops at its INSERT), then the payment under its row
// lock, the refund decided, its amount reserved, the refund and its event
// inserted, in one short transaction on the database's clock. A refusal
// from decide rolls the whole transaction back: nothing is stored and the
// key stays free.
func (s *Store) ClaimRefund(ctx context.Context, c payments.RefundClaim, decide func(payments.Payment, time.Time) (payments.RefundChange, error)) (_ payments.Refund, _ payments.Payment, err error) {
	defer errs.Wrap(&err, "Store.ClaimRefund(%s)", c.PaymentID)
	const insertRefund = `
INSERT INTO refunds (merchant_id, id, payment_id, idem_key, refund_order_id, status, amount, currency,
    reason, metadata, psp, event_seq, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?)`
	var (
		r payments.Refund
		p payments.Payment
	)
	err = Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		var now time.Time
		if err := tx.GetContext(ctx, &now, `SELECT NOW(6)`); err != nil {
			return err
		}
		if err := claimKey(ctx, tx, c.Ref, c.Fingerprint, c.RefundID, c.Token, now, c.Lease); err != nil {
			return err
		}
		locked, err := lockPayment(ctx, tx, `merchant_id = ? AND id = ?`, c.Ref.MerchantID, c.PaymentID)
		if err != nil {
			return err
		}
		p = locked.Payment
		ch, err := decide(p, now)
		if err != nil {
			return err
		}
		r = ch.Refund
		if r.ID != c.RefundID {
			return fmt.Errorf("decide made refund %s of the claim of %s", r.ID, c.RefundID)
		}
		md, err := metadataJSON(r.Metadata)
		if err != nil {
			return err
		}
		// The row is locked: the reservation just decided cannot be raced.
		if err := movePayment(ctx, tx, r.MerchantID, r.PaymentID, ch.Refunded, ch.Reserved); err != nil {
			return err
		}
		p.AmountRefunded += ch.Refunded
		p.AmountReserved += ch.Reserved
		if _, err := tx.ExecContext(ctx, insertRefund, r.MerchantID, r.ID, r.PaymentID, r.IdempotencyKey, r.RefundOrderID,
			string(r.Status), r.Amount.Minor, r.Amount.Currency, r.Reason, md, nullString(r.PSP), r.CreatedAt, r.UpdatedAt); err != nil {
			return err
		}
		return insertEvent(ctx, tx, *ch.Event, 1)
	})
	err = s.refusedOrTaken(ctx, c.Ref, err)
	switch {
	case err == nil:
		return r, p, nil
	case errors.Is(err, idemkeys.ErrExists), errors.Is(err, errs.ErrNotFound):
		return payments.Refund{}, payments.Payment{}, err
	case errors.Is(err, ErrRetryable):
		return payments.Refund{}, payments.Payment{}, fmt.Errorf("%w: %v", idemkeys.ErrExists, err)
	case errors.Is(err, ErrDuplicate):
		// The key is free but a refund holds it: its record was purged after
		// retention. Never send the refund again; name the existing one.
		var existing string
		if gerr := s.db.GetContext(ctx, &existing, `SELECT id FROM refunds WHERE merchant_id = ? AND idem_key = ?`, c.Ref.MerchantID, c.Ref.Key); gerr != nil {
			return payments.Refund{}, payments.Payment{}, fmt.Errorf("refund %s refused as a duplicate and none found for its key: %w", c.RefundID, Classify(gerr))
		}
		return payments.Refund{}, payments.Payment{}, &errs.Error{
			Code:     errs.CodeKeyReused,
			Message:  "this Idempotency-Key was used for refund " + existing + " whose stored response has expired; look the refund up instead of retrying",
			RefundID: existing,
		}
	}
	var pe *errs.Error
	if errors.As(err, &pe) {
		return payments.Refund{}, payments.Payment{}, pe
	}
	return payments.Refund{}, payments.Payment{}, writeErr(err)
}

// movePayment adds refunded and reserved to a payment's amounts, as a
// refund's change decided; the payment's row is locked by the caller's tx.
// payments.ErrExceedsPayment when the payment cannot hold the reservation.
func movePayment(ctx context.Context, tx *sqlx.Tx, merchantID, paymentID string, refunded, reserved int64) error {
	if refunded == 0 && reserved == 0 {
		return nil
	}
	err := exactlyOne(tx.ExecContext(ctx, `UPDATE payments SET amount_refunded = amount_refunded + ?, amount_reserved = amount_reserved + ?
WHERE merchant_id = ? AND id = ? AND amount_reserved + ? <= IF(capture_method = 'manual', amount_captured, amount)`, refunded, reserved, merchantID, paymentID, reserved))
	if errors.Is(err, errFenced) {
		return payments.ErrExceedsPayment
	}
	return err
}

// Refund implements payments.FlowStore.
func (s *Store) Refund(ctx context.Context, merchantID, id string) (payments.Refund, error) {
	return s.getRefund(ctx, `SELECT `+refundColumns+` FROM refunds WHERE merchant_id = ? AND id = ?`, merchantID, id)
}

// RefundByID implements review.Store: ops name refunds by id alone.
func (s *Store) RefundByID(ctx context.Context, id string) (payments.Refund, error) {
	return s.getRefund(ctx, `SELECT `+refundColumns+` FROM refunds WHERE id = ?`, id)
}

func (s *Store) getRefund(ctx context.Context, q string, args ...any) (payments.Refund, error) {
	var r refundRow
	err := s.db.GetContext(ctx, &r, q, args...)
	if errors.Is(err, sql.ErrNoRows) {
		return payments.Refund{}, errs.ErrNotFound
	}
	if err != nil {
		return payments.Refund{}, fmt.Errorf("read refund: %w", Classify(err))
	}
	return r.toDomain()
}

// SettleRefund implements payments.FlowStore with one short transaction of
// single-table statements: the key completes with the answer, fenced on the
// token; the refund leaves pending (or stays pending with the PSP's
// reference), fenced on its status; its payment's amounts move as the
// change says; a refund that changed status writes its event. A fenced
// settle rolls back whole.
func (s *Store) SettleRefund(ctx context.Context, ref idemkeys.Ref, token idemkeys.Token, c payments.RefundChange) (err error) {
	r := c.Refund
	defer errs.Wrap(&err, "Store.SettleRefund(%s)", r.ID)
	const settleRefund = `
UPDATE refunds
SET status = ?, psp_reference = ?, failure_code = ?, psp_code = ?, review_reason = ?,
    review_since = IF(? = 'requires_review', NOW(6), NULL),
    review_after = CASE ? WHEN 'requires_review' THEN NOW(6) + INTERVAL ? MICROSECOND
                          WHEN 'pending' THEN NOW(6) + INTERVAL ? MICROSECOND END,
    event_seq = LAST_INSERT_ID(event_seq + ?), updated_at = ?
WHERE merchant_id = ? AND id = ? AND status = 'pending'`
	status := string(r.Status)
	changed := 0
	if c.Event != nil {
		changed = 1
	}
	err = Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		if err := completeKey(ctx, tx, ref, token, r.ID, *c.Answer); err != nil {
			return err
		}
		seq, err := bumped(tx.ExecContext(ctx, settleRefund,
			status, nullString(r.PSPReference), nullString(r.FailureCode), nullString(r.PSPCode), nullString(r.ReviewReason),
			status, status, micros(payments.ReviewFirstLook), micros(payments.RefundFirstCheck), changed, r.UpdatedAt,
			ref.MerchantID, r.ID))
		if err != nil || c.Event == nil {
			return err
		}
		if err := insertEvent(ctx, tx, *c.Event, seq); err != nil {
			return err
		}
		return movePayment(ctx, tx, r.MerchantID, r.PaymentID, c.Refunded, c.Reserved)
	})
	return settleErr(err)
}

// ResolveRefund implements review.Store and reconcile.Store: decide
// turns the refund locked with its payment (at the database's time) into
// its change; the payment's amounts, the refund, its event, its key's
// answer and res in the audit table are written as the change says, all in
// one transaction.
func (s *Store) ResolveRefund(ctx context.Context, id string, decide func(payments.Refund, time.Time) (payments.RefundChange, error), res payments.Resolution) (_ payments.Refund, err error) {
	defer errs.Wrap(&err, "Store.ResolveRefund(%s)", id)
	var out payments.Refund
	err = Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		out, err = resolveRefundIn(ctx, tx, id, decide, res)
		return err
	})
	return out, err
}

// resolveRefundIn is ResolveRefund's work in tx.
func resolveRefundIn(ctx context.Context, tx *sqlx.Tx, id string, decide func(payments.Refund, time.Time) (payments.RefundChange, error), res payments.Resolution) (payments.Refund, error) {
	var out payments.Refund
	err := func() error {
		var rr struct {
			refundRow
			Seq   int64     `db:"event_seq"`
			DBNow time.Time `db:"db_now"`
		}
		err := tx.GetContext(ctx, &rr, `SELECT `+refundColumns+`, event_seq, NOW(6) AS db_now FROM refunds WHERE id = ? FOR UPDATE`, id)
		if errors.Is(err, sql.ErrNoRows) {
			return errs.ErrNotFound
		}
		if err != nil {
			return err
		}
		before, err := rr.toDomain()
		if err != nil {
			return err
		}
		// Lock the payment too: its amounts change with the refund.
		var locked int
		if err := tx.GetContext(ctx, &locked, `SELECT 1 FROM payments WHERE merchant_id = ? AND id = ? FOR UPDATE`, before.MerchantID, before.PaymentID); err != nil {
			return err
		}
		c, err := decide(before, rr.DBNow.Truncate(time.Microsecond))
		if err != nil {
			return err
		}
		after := c.Refund
		if err := movePayment(ctx, tx, after.MerchantID, after.PaymentID, c.Refunded, c.Reserved); err != nil {
			return err
		}
		seq := rr.Seq
		if c.Event != nil {
			seq++
		}
		if _, err := tx.ExecContext(ctx, `
UPDATE refunds SET status = ?, psp_reference = ?, failure_code = ?, psp_code = ?, review_reason = ?,
    review_since = IF(? = 'requires_review', COALESCE(review_since, NOW(6)), NULL),
    review_after = IF(? IN ('requires_review', 'pending'), COALESCE(review_after, NOW(6)), NULL),
    event_seq = ?, updated_at = ?
WHERE merchant_id = ? AND id = ?`,
			string(after.Status), nullString(after.PSPReference), nullString(after.FailureCode), nullString(after.PSPCode),
			nullString(after.ReviewReason), string(after.Status), string(after.Status), seq, after.UpdatedAt, after.MerchantID, after.ID); err != nil {
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
		if _, err := tx.ExecContext(ctx, `
INSERT INTO refund_resolutions (merchant_id, id, refund_id, from_status, to_status, psp_reference, reason, actor, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, NOW(6))`,
			after.MerchantID, "rres_"+newULID(), after.ID, string(before.Status), string(after.Status),
			nullString(res.PSPReference), res.Reason, res.Actor); err != nil {
			return err
		}
		out = after
		return nil
	}()
	return out, err
}

// ClaimRefundChecks implements reconcile.Store: locks up to limit refunds
// pending at their PSP or in review whose next look is due, and marks them
// looked at for `lease` (the mark is the fence of every later write).
func (s *Store) ClaimRefundChecks(ctx context.Context, lease time.Duration, limit int) (_ []payments.RefundCheck, err error) {
	defer errs.Wrap(&err, "Store.ClaimRefundChecks")
	var out []payments.RefundCheck
	err = Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		out = out[:0]
		// A pending refund whose key is still in progress belongs to the key's
		// lease holder (or the unfinished-key reconciler), not to this queue:
		// its review_after is NULL until its key completes.
		const q = `SELECT ` + refundColumns + `, NOW(6) AS db_now FROM refunds
WHERE status IN ('pending', 'requires_review') AND review_after <= NOW(6)
ORDER BY review_after LIMIT ? FOR UPDATE SKIP LOCKED`
		var rows []struct {
			refundRow
			DBNow time.Time `db:"db_now"`
		}
		if err := tx.SelectContext(ctx, &rows, q, limit); err != nil {
			return err
		}
		for _, row := range rows {
			c, err := refundCheck(ctx, tx, row.refundRow)
			if err != nil {
				return err
			}
			mark := row.DBNow.Add(lease).Truncate(time.Microsecond)
			if c.Unreadable != "" {
				// Set aside for a day: the next claims go on without it.
				mark = row.DBNow.Add(24 * time.Hour).Truncate(time.Microsecond)
			}
			if _, err := tx.ExecContext(ctx, `UPDATE refunds SET review_after = ? WHERE merchant_id = ? AND id = ?`, mark, row.MerchantID, row.ID); err != nil {
				return err
			}
			c.Refund.Review.After, c.DBNow = mark, row.DBNow
			out = append(out, c)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// refundCheck reads a claimed refund and its payment; one that cannot be
// read (its row or its payment's undecodable, its payment missing) comes
// back Unreadable, with only its ids, and only the database's failures are
// errors: one bad row never stops the queue of every merchant.
func refundCheck(ctx context.Context, tx *sqlx.Tx, row refundRow) (payments.RefundCheck, error) {
	unreadable := func(why string) (payments.RefundCheck, error) {
		return payments.RefundCheck{Refund: payments.Refund{ID: row.ID, MerchantID: row.MerchantID, PaymentID: row.PaymentID, IdempotencyKey: row.IdemKey},
			Unreadable: why}, nil
	}
	r, err := row.toDomain()
	if err != nil {
		return unreadable("the refund's row cannot be read: " + err.Error())
	}
	var pr paymentRow
	err = tx.GetContext(ctx, &pr, `SELECT `+paymentColumns+` FROM payments WHERE merchant_id = ? AND id = ?`, r.MerchantID, r.PaymentID)
	if errors.Is(err, sql.ErrNoRows) {
		return unreadable("its payment " + r.PaymentID + " is missing")
	}
	if err != nil {
		return payments.RefundCheck{}, err
	}
	p, err := pr.toDomain()
	if err != nil {
		return unreadable("its payment's row cannot be read: " + err.Error())
	}
	return payments.RefundCheck{Refund: r, Payment: p}, nil
}

// RescheduleRefundCheck implements reconcile.Store: the next look at a
// refund pending or in review, fenced on the claim's mark.
func (s *Store) RescheduleRefundCheck(ctx context.Context, r payments.Refund, rs payments.Reschedule) (err error) {
	defer errs.Wrap(&err, "Store.RescheduleRefundCheck")
	const stmt = `
UPDATE refunds
SET review_after = GREATEST(NOW(6) + INTERVAL ? MICROSECOND, COALESCE(?, NOW(6))), review_attempts = ?,
    review_not_found_at = IF(?, COALESCE(review_not_found_at, NOW(6)), review_not_found_at)
WHERE merchant_id = ? AND id = ? AND status IN ('pending', 'requires_review') AND review_after = ?`
	notBefore := sql.NullTime{Time: rs.NotBefore, Valid: !rs.NotBefore.IsZero()}
	n, err := ExecRetry(ctx, s.db, stmt, micros(rs.After), notBefore, rs.Attempts, rs.NotFound, r.MerchantID, r.ID, r.Review.After)
	switch {
	case err != nil:
		return writeErr(err)
	case n == 0:
		return idemkeys.ErrFenced
	}
	return nil
}
