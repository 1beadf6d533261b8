package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
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
func (s *Store) ClaimConfirm(ctx context.Context, c payments.ConfirmClaim, decide func(payments.Payment, time.Time) (payments.Payment, error)) (payments.Payment, error) {
	var out payments.Payment
	ref := c.Ref
	err := Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		var now time.Time
		if err := tx.GetContext(ctx, &now, `SELECT NOW(6)`); err != nil {
			return err
		}
		if err := claimKey(ctx, tx, ref, c.Fingerprint, c.PaymentID, c.Token, now, c.Lease); err != nil {
			return err
		}
		var pr paymentRow
		err := tx.GetContext(ctx, &pr, `SELECT `+paymentColumns+` FROM payments WHERE merchant_id = ? AND id = ? FOR UPDATE`, ref.MerchantID, c.PaymentID)
		if errors.Is(err, sql.ErrNoRows) {
			return errs.ErrNotFound
		}
		if err != nil {
			return err
		}
		before, err := pr.toDomain()
		if err != nil {
			return err
		}
		p, err := decide(before, now)
		if err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `
UPDATE payments SET status = 'processing', payment_method = ?, confirm_key = ?, `+bumpEventSeq+`, updated_at = ?
WHERE merchant_id = ? AND id = ? AND status = 'requires_confirmation'`,
			p.PaymentMethod, ref.Key, now, p.MerchantID, p.ID)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			// The row is locked and was read in requires_confirmation.
			return fmt.Errorf("confirm moved %d payment rows: %v", n, err)
		}
		if _, err := paymentEvent(ctx, tx, p.MerchantID, p.ID); err != nil {
			return err
		}
		p.Status, p.ConfirmKey, p.UpdatedAt = payments.Processing, ref.Key, now
		out = p
		return nil
	})
	var pe *errs.Error
	switch {
	case err == nil:
		return out, nil
	case errors.Is(err, idemkeys.ErrExists), errors.Is(err, errs.ErrNotFound):
		return payments.Payment{}, err
	case errors.As(err, &pe):
		return payments.Payment{}, pe
	case errors.Is(err, ErrRetryable):
		// Still conflicting after the retries (Galera: another node's claim
		// of this key, or another confirm of this payment, won): the caller
		// reads the key, and claims again if it is not there.
		return payments.Payment{}, fmt.Errorf("store.ClaimConfirm: %w: %v", idemkeys.ErrExists, err)
	}
	return payments.Payment{}, writeErr("store.ClaimConfirm", err)
}

// ExpireUnconfirmed implements reconcile.Store: in one short transaction,
// locks up to limit payments still awaiting confirmation past their expiry
// (the database's clock), skipping those a confirm holds, and cancels
// them with a compare-and-set on the status. A confirm that locked one
// first has moved it out of requires_confirmation; one that comes after
// finds it canceled.
func (s *Store) ExpireUnconfirmed(ctx context.Context, limit int) ([]payments.Payment, error) {
	var out []payments.Payment
	err := Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		out = out[:0]
		const q = `SELECT ` + paymentColumns + ` FROM payments
WHERE status = 'requires_confirmation' AND expires_at <= NOW(6)
ORDER BY expires_at LIMIT ? FOR UPDATE SKIP LOCKED`
		var rows []paymentRow
		if err := tx.SelectContext(ctx, &rows, q, limit); err != nil {
			return err
		}
		if len(rows) == 0 {
			return nil
		}
		var (
			cond strings.Builder
			args = []any{payments.DeclineExpired}
		)
		for _, r := range rows {
			p, err := r.toDomain()
			if err != nil {
				// Cancel it all the same: expiry reads nothing of it but its key.
				p = payments.Payment{ID: r.ID, MerchantID: r.MerchantID, IdempotencyKey: r.IdemKey, CreatedAt: r.CreatedAt}
			}
			p.Status, p.DeclineCode = payments.Canceled, payments.DeclineExpired
			out = append(out, p)
			if cond.Len() > 0 {
				cond.WriteString(" OR ")
			}
			cond.WriteString("(merchant_id = ? AND id = ?)")
			args = append(args, r.MerchantID, r.ID)
		}
		res, err := tx.ExecContext(ctx, `UPDATE payments SET status = 'canceled', decline_code = ?, `+bumpEventSeq+`, updated_at = NOW(6)
WHERE status = 'requires_confirmation' AND (`+cond.String()+`)`, args...)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != int64(len(out)) {
			return fmt.Errorf("canceled %d of %d locked payments: %v", n, len(out), err)
		}
		for _, p := range out {
			if _, err := paymentEvent(ctx, tx, p.MerchantID, p.ID); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store.ExpireUnconfirmed: %w", err)
	}
	return out, nil
}

// PaymentsByOrder implements payments.NoticeStore: the payments with a
// merchant order id, whatever their merchant (a PSP knows order ids only;
// they are unique per merchant and, being hashes of the merchant, in
// practice across merchants).
func (s *Store) PaymentsByOrder(ctx context.Context, orderID string) ([]payments.Payment, error) {
	var rows []paymentRow
	if err := s.db.SelectContext(ctx, &rows, `SELECT `+paymentColumns+` FROM payments WHERE merchant_order_id = ?`, orderID); err != nil {
		return nil, fmt.Errorf("store.PaymentsByOrder: %w", Classify(err))
	}
	return paymentsOf(rows)
}

// RefundsByOrder implements payments.NoticeStore: the refunds with a
// refund order id, whatever their merchant.
func (s *Store) RefundsByOrder(ctx context.Context, refundOrderID string) ([]payments.Refund, error) {
	var rows []refundRow
	if err := s.db.SelectContext(ctx, &rows, `SELECT `+refundColumns+` FROM refunds WHERE refund_order_id = ?`, refundOrderID); err != nil {
		return nil, fmt.Errorf("store.RefundsByOrder: %w", Classify(err))
	}
	out := make([]payments.Refund, 0, len(rows))
	for _, r := range rows {
		x, err := r.toDomain()
		if err != nil {
			return nil, err
		}
		out = append(out, x)
	}
	return out, nil
}

// HastenKey implements payments.NoticeStore: the reconciler's next look at
// an unfinished key becomes due now. The lease, its token and its holder
// are left alone (the reconciler claims only expired leases), and a
// completed key is not touched. It reports whether the key was in progress.
func (s *Store) HastenKey(ctx context.Context, ref idemkeys.Ref) (bool, error) {
	const stmt = `
UPDATE idempotency_keys SET reconcile_after = LEAST(COALESCE(reconcile_after, NOW(6)), NOW(6))
WHERE ` + keyWhere + ` AND state = 'IN_PROGRESS'`
	n, err := ExecRetry(ctx, s.db, stmt, refArgs(ref)...)
	if err != nil {
		return false, writeErr("store.HastenKey", err)
	}
	return n > 0, nil
}

// HastenLook implements payments.NoticeStore: the reconciler's next look
// at a payment in requires_review or requires_action becomes due now. A
// look running meanwhile loses its mark (its writes are fenced) and the
// next pass looks afresh.
func (s *Store) HastenLook(ctx context.Context, p payments.Payment) error {
	const stmt = `
UPDATE payments SET review_after = NOW(6)
WHERE merchant_id = ? AND id = ? AND status IN ('requires_review', 'requires_action') AND review_after > NOW(6)`
	if _, err := ExecRetry(ctx, s.db, stmt, p.MerchantID, p.ID); err != nil {
		return writeErr("store.HastenLook", err)
	}
	return nil
}

// HastenRefundCheck implements payments.NoticeStore: the refund queue's
// next look at a refund pending at its PSP or in review becomes due now.
func (s *Store) HastenRefundCheck(ctx context.Context, r payments.Refund) error {
	const stmt = `
UPDATE refunds SET review_after = NOW(6)
WHERE merchant_id = ? AND id = ? AND status IN ('pending', 'requires_review') AND review_after > NOW(6)`
	if _, err := ExecRetry(ctx, s.db, stmt, r.MerchantID, r.ID); err != nil {
		return writeErr("store.HastenRefundCheck", err)
	}
	return nil
}
