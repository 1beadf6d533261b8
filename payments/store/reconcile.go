package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/oklog/ulid/v2"

	"gateway/db"
	"gateway/idemkeys"
	"gateway/payments"
)

// ClaimStale implements payments.Store: one short transaction that locks,
// bumps and reads the stale keys and their payments.
func (s *Store) ClaimStale(ctx context.Context, now, until time.Time, limit int) ([]payments.Pending, error) {
	var out []payments.Pending
	err := db.Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		out = out[:0]
		recs, err := idemkeys.ClaimStale(ctx, tx, now, until, limit)
		if err != nil || len(recs) == 0 {
			return err
		}
		var (
			cond strings.Builder
			args []any
		)
		for i, r := range recs {
			if i > 0 {
				cond.WriteString(" OR ")
			}
			cond.WriteString("(merchant_id = ? AND id = ?)")
			args = append(args, r.MerchantID, r.PaymentID)
		}
		var rows []paymentRow
		if err := tx.SelectContext(ctx, &rows, `SELECT `+paymentColumns+` FROM payments WHERE `+cond.String(), args...); err != nil {
			return err
		}
		byID := make(map[string]payments.Payment, len(rows))
		for _, r := range rows {
			p, err := r.toDomain()
			if err != nil {
				return err
			}
			byID[p.MerchantID+"/"+p.ID] = p
		}
		for _, r := range recs {
			p, ok := byID[r.MerchantID+"/"+r.PaymentID]
			if !ok {
				return fmt.Errorf("key %s has no payment %s", idemkeys.Hash(r.Ref), r.PaymentID)
			}
			out = append(out, payments.Pending{Key: r, Payment: p})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("store.ClaimStale: %w", err)
	}
	return out, nil
}

// Reschedule implements payments.Store.
func (s *Store) Reschedule(ctx context.Context, ref idemkeys.Ref, held int64, until time.Time, attempts int, now time.Time) error {
	return idemkeys.Reschedule(ctx, s.db, ref, held, until, attempts, now)
}

// PurgeKeys implements payments.Store.
func (s *Store) PurgeKeys(ctx context.Context, before time.Time, limit int) (int64, error) {
	return idemkeys.Purge(ctx, s.db, before, limit)
}

// OldestUnfinished implements payments.Store.
func (s *Store) OldestUnfinished(ctx context.Context) (time.Time, error) {
	var t sql.NullTime
	if err := s.db.GetContext(ctx, &t, `SELECT MIN(created_at) FROM idempotency_keys WHERE state = 'IN_PROGRESS'`); err != nil {
		return time.Time{}, fmt.Errorf("store.OldestUnfinished: %w", db.Classify(err))
	}
	return t.Time, nil
}

// ListPayments implements payments.Store.
func (s *Store) ListPayments(ctx context.Context, status payments.Status, limit int) ([]payments.Payment, error) {
	const q = `SELECT ` + paymentColumns + ` FROM payments WHERE status = ? ORDER BY created_at, id LIMIT ?`
	var rows []paymentRow
	if err := s.db.SelectContext(ctx, &rows, q, string(status), limit); err != nil {
		return nil, fmt.Errorf("store.ListPayments: %w", db.Classify(err))
	}
	out := make([]payments.Payment, 0, len(rows))
	for _, r := range rows {
		p, err := r.toDomain()
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// CountPayments implements payments.Store.
func (s *Store) CountPayments(ctx context.Context, status payments.Status) (int, error) {
	var n int
	if err := s.db.GetContext(ctx, &n, `SELECT COUNT(*) FROM payments WHERE status = ?`, string(status)); err != nil {
		return 0, fmt.Errorf("store.CountPayments: %w", db.Classify(err))
	}
	return n, nil
}

// Resolve implements payments.Store.
func (s *Store) Resolve(ctx context.Context, id string, decide func(payments.Payment) (payments.Payment, error), res payments.Resolution, now time.Time) (payments.Payment, error) {
	var out payments.Payment
	err := db.Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		var r paymentRow
		err := tx.GetContext(ctx, &r, `SELECT `+paymentColumns+` FROM payments WHERE id = ? FOR UPDATE`, id)
		if errors.Is(err, sql.ErrNoRows) {
			return payments.ErrNotFound
		}
		if err != nil {
			return err
		}
		before, err := r.toDomain()
		if err != nil {
			return err
		}
		after, err := decide(before)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `
UPDATE payments SET status = ?, psp_reference = ?, decline_code = ?, updated_at = ?
WHERE merchant_id = ? AND id = ?`,
			string(after.Status), nullString(after.PSPReference), nullString(after.DeclineCode), now,
			after.MerchantID, after.ID); err != nil {
			return err
		}
		ref := idemkeys.Ref{MerchantID: after.MerchantID, Endpoint: payments.EndpointCreatePayment, Key: after.IdempotencyKey}
		if err := idemkeys.ReplaceResponse(ctx, tx, ref, payments.Render(after), now); err != nil && !errors.Is(err, idemkeys.ErrNotFound) {
			return err
		}
		auditID := "res_" + ulid.Make().String()
		if _, err := tx.ExecContext(ctx, `
INSERT INTO payment_resolutions
    (merchant_id, id, payment_id, from_status, to_status, psp_reference, reason, actor, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			after.MerchantID, auditID, after.ID, string(before.Status), string(after.Status),
			nullString(res.PSPReference), res.Reason, res.Actor, now); err != nil {
			return err
		}
		out = after
		return nil
	})
	return out, err
}
