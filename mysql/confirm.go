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
)

// The statements of a two-step payment's life: its confirm's claim, the
// expiry of one nobody confirmed, and what a PSP's notification reads and
// hastens. Every state change is a compare-and-set on the payment's status.

// ClaimConfirm implements payments.FlowStore: the confirm's key first (of
// two racing claims of one key, the loser stops at its INSERT), then the
// payment under its row lock, decided and moved from requires_confirmation
// to processing, in one short transaction on the database's clock. Of two
// confirms of one payment with different keys, the second waits for the
// first's lock and then finds the payment no longer confirmable. A refusal
// from decide rolls everything back: the key stays free.
func (s *Store) ClaimConfirm(ctx context.Context, c payments.ConfirmClaim, decide func(payments.Payment, time.Time) (payments.PaymentChange, error)) (_ payments.Payment, err error) {
	defer errs.Wrap(&err, "Store.ClaimConfirm(%s)", c.PaymentID)
	var out payments.Payment
	err = s.claimOnPayment(ctx, c.Ref, c.Fingerprint, c.Token, c.Lease, c.PaymentID, func(tx *sqlx.Tx, locked lockedPayment, now time.Time) error {
		ch, err := decide(locked.Payment, now)
		if err != nil {
			return err
		}
		p := ch.Payment
		res, err := tx.ExecContext(ctx, `
UPDATE payments SET status = ?, payment_method = ?, confirm_key = ?, review_after = NULL, event_seq = ?, updated_at = ?
WHERE merchant_id = ? AND id = ? AND status = 'requires_confirmation'`,
			string(p.Status), p.PaymentMethod, p.ConfirmKey, locked.seq+1, p.UpdatedAt, p.MerchantID, p.ID)
		if err := exactlyOne(res, err); err != nil {
			// The row is locked and was read in requires_confirmation.
			return fmt.Errorf("confirm moved no payment row: %w", err)
		}
		if err := insertEvent(ctx, tx, *ch.Event, locked.seq+1); err != nil {
			return err
		}
		out = p
		return nil
	})
	return out, err
}

// claimOnPayment is the claim of a command on an existing payment (a
// confirm, a capture, a void), in one short transaction on the database's
// clock: the command's key first (of two racing claims of one key, the
// loser stops at its INSERT), then the payment under its row lock, then
// write with both. Its error is what the caller learns: idemkeys.ErrExists
// (the key is claimed: read it; also a conflict that outlasted its retries,
// on Galera), errs.ErrNotFound (no such payment for the merchant), the
// domain's refusal (nothing stored, the key stays free), or a write of
// unknown fate.
func (s *Store) claimOnPayment(ctx context.Context, ref idemkeys.Ref, fp [32]byte, token idemkeys.Token, lease time.Duration, paymentID string,
	write func(tx *sqlx.Tx, locked lockedPayment, now time.Time) error) error {
	err := Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		var now time.Time
		if err := tx.GetContext(ctx, &now, `SELECT NOW(6)`); err != nil {
			return err
		}
		if err := claimKey(ctx, tx, ref, fp, paymentID, token, now, lease); err != nil {
			return err
		}
		locked, err := lockPayment(ctx, tx, `merchant_id = ? AND id = ?`, ref.MerchantID, paymentID)
		if err != nil {
			return err
		}
		return write(tx, locked, now.Truncate(time.Microsecond))
	})
	return s.refusedOrTaken(ctx, ref, claimed(err))
}

// refusedOrTaken is a claim's refusal (the domain's *errs.Error: its
// transaction rolled back, the key stays free), unless the key is taken
// after all: on a Galera node, the claim's INSERT may have run before the
// node applied another node's claim of the key that the payment's row,
// read later under its lock, already shows. A causal read of the key tells;
// a key there is joined (idemkeys.ErrExists), never refused.
func (s *Store) refusedOrTaken(ctx context.Context, ref idemkeys.Ref, err error) error {
	var pe *errs.Error
	if !errors.As(err, &pe) {
		return err
	}
	if _, rerr := getKey(ctx, s.db, s.causal, ref); rerr == nil {
		return fmt.Errorf("%w: refused (%v) while the key was taken", idemkeys.ErrExists, err)
	}
	return err
}

// claimed maps a claim transaction's error to what its caller learns (see
// claimOnPayment).
func claimed(err error) error {
	var pe *errs.Error
	switch {
	case err == nil, errors.Is(err, idemkeys.ErrExists), errors.Is(err, errs.ErrNotFound):
		return err
	case errors.As(err, &pe):
		return pe
	case errors.Is(err, ErrRetryable):
		// Still conflicting after the retries (Galera: another node's claim
		// of this key, or another command on this payment, won): the caller
		// reads the key, and claims again if it is not there.
		return fmt.Errorf("%w: %v", idemkeys.ErrExists, err)
	}
	return writeErr(err)
}

// lockedPayment is a payment read under its row lock, with its event
// number and the database's clock as it was read.
type lockedPayment struct {
	payments.Payment
	seq   int64
	dbNow time.Time
}

// lockPayment reads the payment where (a condition on its primary key)
// under a row lock in tx; errs.ErrNotFound when there is none.
func lockPayment(ctx context.Context, tx *sqlx.Tx, where string, args ...any) (lockedPayment, error) {
	var r struct {
		paymentRow
		Seq   int64     `db:"event_seq"`
		DBNow time.Time `db:"db_now"`
	}
	err := tx.GetContext(ctx, &r, `SELECT `+paymentColumns+`, event_seq, NOW(6) AS db_now FROM payments WHERE `+where+` FOR UPDATE`, args...)
	if errors.Is(err, sql.ErrNoRows) {
		return lockedPayment{}, errs.ErrNotFound
	}
	if err != nil {
		return lockedPayment{}, err
	}
	p, err := r.toDomain()
	return lockedPayment{Payment: p, seq: r.Seq, dbNow: r.DBNow}, err
}

// ExpireUnconfirmed implements reconcile.Store: in one short transaction,
// locks up to limit payments still awaiting confirmation past their expiry
// (the database's clock), skipping those a confirm holds, and cancels
// them as expire decides, with a compare-and-set on the status. A confirm
// that locked one first has moved it out of requires_confirmation; one that
// comes after finds it canceled.
func (s *Store) ExpireUnconfirmed(ctx context.Context, limit int, expire func(payments.Payment) payments.PaymentChange) (_ []payments.Payment, err error) {
	defer errs.Wrap(&err, "Store.ExpireUnconfirmed")
	var out []payments.Payment
	err = Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		out = out[:0]
		const q = `SELECT ` + paymentColumns + `, event_seq FROM payments
WHERE status = 'requires_confirmation' AND expires_at <= NOW(6)
ORDER BY expires_at LIMIT ? FOR UPDATE SKIP LOCKED`
		var rows []struct {
			paymentRow
			Seq int64 `db:"event_seq"`
		}
		if err := tx.SelectContext(ctx, &rows, q, limit); err != nil {
			return err
		}
		for _, r := range rows {
			p, err := r.toDomain()
			if err != nil {
				// Cancel it all the same (expiry reads nothing of it but its
				// key), its event rendered with what can be read of it.
				r.Metadata, r.NextAction = sql.NullString{}, sql.NullString{}
				if p, err = r.toDomain(); err != nil {
					return err
				}
			}
			c := expire(p)
			res, err := tx.ExecContext(ctx, `UPDATE payments SET status = ?, decline_code = ?, event_seq = ?, updated_at = NOW(6)
WHERE merchant_id = ? AND id = ? AND status = 'requires_confirmation'`,
				string(c.Payment.Status), nullString(c.Payment.DeclineCode), r.Seq+1, p.MerchantID, p.ID)
			if err := exactlyOne(res, err); err != nil {
				return fmt.Errorf("cancel locked payment %s: %w", p.ID, err)
			}
			if c.Event != nil {
				if err := insertEvent(ctx, tx, *c.Event, r.Seq+1); err != nil {
					return err
				}
			}
			out = append(out, c.Payment)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// PaymentsByOrder implements notices.Store: the payments with a
// merchant order id, whatever their merchant (a PSP knows order ids only;
// they are unique per merchant and, being hashes of the merchant, in
// practice across merchants).
func (s *Store) PaymentsByOrder(ctx context.Context, orderID string) (_ []payments.Payment, err error) {
	defer errs.Wrap(&err, "Store.PaymentsByOrder")
	var rows []paymentRow
	if err := s.db.SelectContext(ctx, &rows, `SELECT `+paymentColumns+` FROM payments WHERE merchant_order_id = ?`, orderID); err != nil {
		return nil, Classify(err)
	}
	return paymentsOf(rows)
}

// RefundsByOrder implements notices.Store: the refunds with a
// refund order id, whatever their merchant.
func (s *Store) RefundsByOrder(ctx context.Context, refundOrderID string) (_ []payments.Refund, err error) {
	defer errs.Wrap(&err, "Store.RefundsByOrder")
	var rows []refundRow
	if err := s.db.SelectContext(ctx, &rows, `SELECT `+refundColumns+` FROM refunds WHERE refund_order_id = ?`, refundOrderID); err != nil {
		return nil, Classify(err)
	}
	return refundsOf(rows)
}

// HastenKey implements notices.Store: the reconciler's next look at
// an unfinished key becomes due now. The lease, its token and its holder
// are left alone (the reconciler claims only expired leases), and a
// completed key is not touched. It reports whether the key was in progress.
func (s *Store) HastenKey(ctx context.Context, ref idemkeys.Ref) (_ bool, err error) {
	defer errs.Wrap(&err, "Store.HastenKey")
	const stmt = `
UPDATE idempotency_keys SET reconcile_after = LEAST(COALESCE(reconcile_after, NOW(6)), NOW(6))
WHERE ` + keyWhere + ` AND state = 'IN_PROGRESS'`
	n, err := ExecRetry(ctx, s.db, stmt, refArgs(ref)...)
	if err != nil {
		return false, writeErr(err)
	}
	return n > 0, nil
}

// HastenLook implements notices.Store: the reconciler's next look
// at a payment in requires_review or requires_action becomes due now. A
// look running meanwhile loses its mark (its writes are fenced) and the
// next pass looks afresh. A payment still processing (its key held) is
// marked (review_after, unused while processing): its settle into
// requires_action makes that look due at once.
func (s *Store) HastenLook(ctx context.Context, p payments.Payment) (err error) {
	defer errs.Wrap(&err, "Store.HastenLook")
	const stmt = `
UPDATE payments SET review_after = NOW(6)
WHERE merchant_id = ? AND id = ?
  AND ((status IN ('requires_review', 'requires_action') AND review_after > NOW(6))
       OR (status = 'processing' AND review_after IS NULL))`
	if _, err := ExecRetry(ctx, s.db, stmt, p.MerchantID, p.ID); err != nil {
		return writeErr(err)
	}
	return nil
}

// HastenRefundCheck implements notices.Store: the refund queue's
// next look at a refund pending at its PSP or in review becomes due now.
func (s *Store) HastenRefundCheck(ctx context.Context, r payments.Refund) (err error) {
	defer errs.Wrap(&err, "Store.HastenRefundCheck")
	const stmt = `
UPDATE refunds SET review_after = NOW(6)
WHERE merchant_id = ? AND id = ? AND status IN ('pending', 'requires_review') AND review_after > NOW(6)`
	if _, err := ExecRetry(ctx, s.db, stmt, r.MerchantID, r.ID); err != nil {
		return writeErr(err)
	}
	return nil
}
