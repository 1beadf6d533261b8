package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"gateway/errs"
	"gateway/idemkeys"
	"gateway/merchants"
	"gateway/payments"
	"gateway/review"
)

// The reads of merchant and ops administration (review.Store). They
// look across merchants, as an operator does; none of them is on a request's
// path.

// Merchants implements merchants.AdminStore.
func (s *Store) Merchants(ctx context.Context) (_ []merchants.MerchantSummary, err error) {
	defer errs.Wrap(&err, "Store.Merchants")
	const q = `
SELECT m.id, m.name, m.api_version, m.created_at,
       COUNT(k.key_hash) - COUNT(k.revoked_at) AS active_keys,
       COUNT(k.revoked_at) AS revoked_keys
FROM merchants m LEFT JOIN api_keys k ON k.merchant_id = m.id
GROUP BY m.id, m.name, m.api_version, m.created_at
ORDER BY m.created_at, m.id`
	var rows []struct {
		ID          string    `db:"id"`
		Name        string    `db:"name"`
		APIVersion  string    `db:"api_version"`
		CreatedAt   time.Time `db:"created_at"`
		ActiveKeys  int       `db:"active_keys"`
		RevokedKeys int       `db:"revoked_keys"`
	}
	if err := s.db.SelectContext(ctx, &rows, q); err != nil {
		return nil, Classify(err)
	}
	out := make([]merchants.MerchantSummary, len(rows))
	for i, r := range rows {
		out[i] = merchants.MerchantSummary{
			Merchant:   merchants.Merchant{ID: r.ID, Name: r.Name, APIVersion: r.APIVersion, CreatedAt: r.CreatedAt},
			ActiveKeys: r.ActiveKeys, RevokedKeys: r.RevokedKeys,
		}
	}
	return out, nil
}

// FindPayments implements review.Store. A status or a merchant lets
// the query use an index (payments_status, the primary key).
func (s *Store) FindPayments(ctx context.Context, f review.PaymentFilter) (_ []payments.Payment, err error) {
	defer errs.Wrap(&err, "Store.FindPayments")
	var (
		conds []string
		args  []any
	)
	if f.Status != "" {
		conds, args = append(conds, "status = ?"), append(args, string(f.Status))
	}
	if f.MerchantID != "" {
		conds, args = append(conds, "merchant_id = ?"), append(args, f.MerchantID)
	}
	if !f.Since.IsZero() {
		conds, args = append(conds, "created_at >= ?"), append(args, f.Since.UTC())
	}
	q := `SELECT ` + paymentColumns + ` FROM payments`
	if len(conds) > 0 {
		q += ` WHERE ` + strings.Join(conds, " AND ")
	}
	q += ` ORDER BY created_at, id LIMIT ?`
	args = append(args, f.Limit)
	var rows []paymentRow
	if err := s.db.SelectContext(ctx, &rows, q, args...); err != nil {
		return nil, Classify(err)
	}
	return paymentsOf(rows)
}

// PaymentRecord implements review.Store.
func (s *Store) PaymentRecord(ctx context.Context, id string) (_ review.PaymentRecord, err error) {
	defer errs.Wrap(&err, "Store.PaymentRecord")
	p, err := s.PaymentByID(ctx, id)
	if err != nil {
		return review.PaymentRecord{}, err
	}
	rec := review.PaymentRecord{Payment: p}
	const history = `
SELECT id, from_status, to_status, psp_reference, reason, actor, created_at
FROM payment_resolutions WHERE merchant_id = ? AND payment_id = ?
ORDER BY created_at, id`
	var rows []struct {
		ID           string         `db:"id"`
		From         string         `db:"from_status"`
		To           string         `db:"to_status"`
		PSPReference sql.NullString `db:"psp_reference"`
		Reason       string         `db:"reason"`
		Actor        string         `db:"actor"`
		CreatedAt    time.Time      `db:"created_at"`
	}
	if err := s.db.SelectContext(ctx, &rows, history, p.MerchantID, p.ID); err != nil {
		return review.PaymentRecord{}, fmt.Errorf("resolutions: %w", Classify(err))
	}
	for _, r := range rows {
		rec.Resolutions = append(rec.Resolutions, review.ResolutionRecord{
			ID: r.ID, From: payments.Status(r.From), To: payments.Status(r.To), PSPReference: r.PSPReference.String,
			Reason: r.Reason, Actor: r.Actor, At: r.CreatedAt,
		})
	}
	key, err := s.Record(ctx, idemkeys.Ref{MerchantID: p.MerchantID, Endpoint: payments.EndpointCreatePayment, Key: p.IdempotencyKey})
	switch {
	case err == nil:
		rec.Key = &key
	case !errors.Is(err, idemkeys.ErrNotFound):
		return review.PaymentRecord{}, fmt.Errorf("key: %w", err)
	}
	return rec, nil
}

// FindRefunds implements review.Store.
func (s *Store) FindRefunds(ctx context.Context, f review.RefundFilter) (_ []payments.Refund, err error) {
	defer errs.Wrap(&err, "Store.FindRefunds")
	var (
		conds []string
		args  []any
	)
	if f.Status != "" {
		conds, args = append(conds, "status = ?"), append(args, string(f.Status))
	}
	if f.MerchantID != "" {
		conds, args = append(conds, "merchant_id = ?"), append(args, f.MerchantID)
	}
	if f.PaymentID != "" {
		conds, args = append(conds, "payment_id = ?"), append(args, f.PaymentID)
	}
	q := `SELECT ` + refundColumns + ` FROM refunds`
	if len(conds) > 0 {
		q += ` WHERE ` + strings.Join(conds, " AND ")
	}
	q += ` ORDER BY created_at, id LIMIT ?`
	var rows []refundRow
	if err := s.db.SelectContext(ctx, &rows, q, append(args, f.Limit)...); err != nil {
		return nil, Classify(err)
	}
	return refundsOf(rows)
}
