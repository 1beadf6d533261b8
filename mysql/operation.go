package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"gateway/errs"
	"gateway/idemkeys"
	"gateway/payments"
)

// Captures and voids (design §15): the claim sets the operation in flight
// on the payment under its row lock; the settle writes what it did, fenced
// on the key's token and on that operation still being the payment's.

// ClaimOperation implements payments.FlowStore: the operation's key first
// (of two racing claims of one key, the loser stops at its INSERT), then
// the payment under its row lock, decided and written, in one short
// transaction on the database's clock. Of two operations on one payment
// with different keys, the second waits for the first's lock and then
// finds its operation in flight. A refusal from decide rolls everything
// back: the key stays free.
func (s *Store) ClaimOperation(ctx context.Context, c payments.OperationClaim, decide func(payments.Payment, time.Time) (payments.PaymentChange, error)) (_ payments.Payment, err error) {
	defer errs.Wrap(&err, "Store.ClaimOperation(%s)", c.PaymentID)
	var out payments.Payment
	err = s.claimOnPayment(ctx, c.Ref, c.Fingerprint, c.Token, c.Lease, c.PaymentID, func(tx *sqlx.Tx, locked lockedPayment, now time.Time) error {
		ch, err := decide(locked.Payment, now)
		if err != nil {
			return err
		}
		p := ch.Payment
		if ch.Answer != nil {
			// Settled at its claim (a payment nobody confirmed, canceled).
			seq, err := bumped(tx.ExecContext(ctx, `
UPDATE payments SET status = ?, cancellation_reason = ?, `+bumpEventSeq+`, updated_at = ?
WHERE merchant_id = ? AND id = ? AND status = ?`,
				string(p.Status), nullString(p.CancellationReason), p.UpdatedAt, p.MerchantID, p.ID, string(locked.Status)))
			if err != nil {
				return fmt.Errorf("operation moved no payment row: %w", err)
			}
			if ch.Event != nil {
				if err := insertEvent(ctx, tx, *ch.Event, seq); err != nil {
					return err
				}
			}
			out = p
			return completeKey(ctx, tx, c.Ref, c.Token, p.ID, *ch.Answer)
		}
		op := p.Operation
		res, err := tx.ExecContext(ctx, `
UPDATE payments SET op_kind = ?, op_key = ?, op_amount = ?, op_reason = ?, updated_at = ?
WHERE merchant_id = ? AND id = ? AND op_kind IS NULL`,
			string(op.Kind), op.Key, op.Amount, nullString(op.Reason), p.UpdatedAt, p.MerchantID, p.ID)
		if err := exactlyOne(res, err); err != nil {
			// The row is locked and was read with no operation in flight.
			return fmt.Errorf("operation claimed no payment row: %w", err)
		}
		out = p
		return nil
	})
	return out, err
}

// SettleOperation implements payments.FlowStore with one short transaction
// of single-table statements: the key completes with the answer, fenced on
// the token; the payment takes the operation's outcome and lets it go,
// fenced on the operation in flight being the key's (no row: rolled back,
// idemkeys.ErrFenced); then the change's event.
func (s *Store) SettleOperation(ctx context.Context, ref idemkeys.Ref, token idemkeys.Token, c payments.PaymentChange) (err error) {
	p := c.Payment
	defer errs.Wrap(&err, "Store.SettleOperation(%s)", p.ID)
	action, err := nextActionJSON(p.NextAction)
	if err != nil {
		return err
	}
	status := string(p.Status)
	err = Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		if err := completeKey(ctx, tx, ref, token, p.ID, *c.Answer); err != nil {
			return err
		}
		// The schedule first: MySQL assigns left to right, and the status
		// compared there must be the one before this change. A payment
		// that stays where it was (a refused operation) keeps its schedule.
		seqs := `event_seq = event_seq`
		if c.Event != nil {
			seqs = bumpEventSeq
		}
		stmt := `
UPDATE payments
SET review_since = CASE WHEN status = ? THEN review_since WHEN ? = 'requires_review' THEN NOW(6) END,
    review_after = CASE WHEN status = ? THEN review_after WHEN ? = 'requires_review' THEN NOW(6) + INTERVAL ? MICROSECOND END,
    status = ?, psp_reference = COALESCE(?, psp_reference), decline_code = ?, psp_code = ?, review_reason = ?,
    next_action = ?, amount_captured = ?, capture_before = ?, cancellation_reason = ?,
    op_kind = NULL, op_key = NULL, op_amount = NULL, op_reason = NULL,
    ` + seqs + `, updated_at = NOW(6)
WHERE merchant_id = ? AND id = ? AND op_key = ? AND op_kind = ? AND (? = '' OR status = ?)`
		kind := payments.OpCapture
		if ref.Endpoint == payments.EndpointCancelPayment {
			kind = payments.OpVoid
		}
		seq, err := bumped(tx.ExecContext(ctx, stmt,
			status, status, status, status, micros(payments.ReviewFirstLook),
			status, nullString(p.PSPReference), nullString(p.DeclineCode), nullString(p.PSPCode), nullString(p.ReviewReason),
			action, p.AmountCaptured, nullTime(p.CaptureBefore), nullString(p.CancellationReason),
			ref.MerchantID, p.ID, ref.Key, string(kind), string(c.From), string(c.From)))
		if err != nil {
			return err
		}
		if c.Event != nil {
			return insertEvent(ctx, tx, *c.Event, seq)
		}
		return nil
	})
	return settleErr(err)
}

// ExpireAuthorizations implements reconcile.Store: in one short
// transaction, locks up to limit authorizations past their capture_before
// (the database's clock) with no operation in flight, skipping those a
// capture or a void holds, and records them as expire decides, with a
// compare-and-set on the status and on no operation being in flight. A
// capture that locked one first has its operation in flight (and the
// capture settles it); one that comes after finds it canceled.
func (s *Store) ExpireAuthorizations(ctx context.Context, limit int, expire func(payments.Payment) payments.PaymentChange) (_ []payments.Payment, err error) {
	defer errs.Wrap(&err, "Store.ExpireAuthorizations")
	var out []payments.Payment
	err = Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		out = out[:0]
		const q = `SELECT ` + paymentColumns + `, event_seq FROM payments
WHERE capture_before <= NOW(6) AND status = 'requires_capture' AND op_kind IS NULL
ORDER BY capture_before LIMIT ? FOR UPDATE SKIP LOCKED`
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
				// Expire it all the same, its event rendered with what can
				// be read of it.
				r.Metadata, r.NextAction = sql.NullString{}, sql.NullString{}
				if p, err = r.toDomain(); err != nil {
					return err
				}
			}
			c := expire(p)
			res, err := tx.ExecContext(ctx, `UPDATE payments SET status = ?, cancellation_reason = ?, capture_before = NULL, event_seq = ?, updated_at = NOW(6)
WHERE merchant_id = ? AND id = ? AND status = 'requires_capture' AND op_kind IS NULL`,
				string(c.Payment.Status), nullString(c.Payment.CancellationReason), r.Seq+1, p.MerchantID, p.ID)
			if err := exactlyOne(res, err); err != nil {
				return fmt.Errorf("expire locked payment %s: %w", p.ID, err)
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
