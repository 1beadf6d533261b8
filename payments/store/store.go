// Package store is the MySQL/MariaDB implementation of payments.Store: the
// SQL for payments and merchants, composed with package idemkeys' statements
// into the short transactions the payment flow needs.
package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"gateway/db"
	"gateway/idemkeys"
	"gateway/payments"
)

// Store runs every method in its own short transaction on a pool.
type Store struct {
	db *sqlx.DB
}

// New returns a Store on dbx.
func New(dbx *sqlx.DB) *Store { return &Store{db: dbx} }

var (
	_ payments.FlowStore  = (*Store)(nil)
	_ payments.AuthStore  = (*Store)(nil)
	_ payments.AdminStore = (*Store)(nil)
)

type paymentRow struct {
	MerchantID      string         `db:"merchant_id"`
	ID              string         `db:"id"`
	IdemKey         string         `db:"idem_key"`
	MerchantOrderID string         `db:"merchant_order_id"`
	Status          string         `db:"status"`
	Amount          int64          `db:"amount"`
	Currency        string         `db:"currency"`
	PaymentMethod   string         `db:"payment_method"`
	Description     string         `db:"description"`
	Metadata        sql.NullString `db:"metadata"`
	PSPReference    sql.NullString `db:"psp_reference"`
	DeclineCode     sql.NullString `db:"decline_code"`
	CreatedAt       time.Time      `db:"created_at"`
	UpdatedAt       time.Time      `db:"updated_at"`
}

const paymentColumns = `merchant_id, id, idem_key, merchant_order_id, status, amount, currency,
    payment_method, description, metadata, psp_reference, decline_code, created_at, updated_at`

func (r paymentRow) toDomain() (payments.Payment, error) {
	p := payments.Payment{
		ID:              r.ID,
		MerchantID:      r.MerchantID,
		IdempotencyKey:  r.IdemKey,
		MerchantOrderID: r.MerchantOrderID,
		Status:          payments.Status(r.Status),
		Amount:          payments.Money{Minor: r.Amount, Currency: r.Currency},
		PaymentMethod:   r.PaymentMethod,
		Description:     r.Description,
		PSPReference:    r.PSPReference.String,
		DeclineCode:     r.DeclineCode.String,
		CreatedAt:       r.CreatedAt,
		UpdatedAt:       r.UpdatedAt,
	}
	if r.Metadata.Valid && r.Metadata.String != "" {
		if err := json.Unmarshal([]byte(r.Metadata.String), &p.Metadata); err != nil {
			return payments.Payment{}, fmt.Errorf("payment %s: metadata: %w", r.ID, err)
		}
	}
	return p, nil
}

func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

// Claim implements payments.Store.
func (s *Store) Claim(ctx context.Context, rec idemkeys.Record, p payments.Payment) error {
	md, err := json.Marshal(p.Metadata)
	if err != nil {
		return fmt.Errorf("store.Claim: metadata: %w", err)
	}
	const insertPayment = `
INSERT INTO payments (` + paymentColumns + `)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	err = db.Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		// The key first: of two racing claims, the loser stops at this INSERT.
		if err := idemkeys.Insert(ctx, tx, rec); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, insertPayment,
			p.MerchantID, p.ID, p.IdempotencyKey, p.MerchantOrderID, string(p.Status),
			p.Amount.Minor, p.Amount.Currency, p.PaymentMethod, p.Description, string(md),
			nullString(p.PSPReference), nullString(p.DeclineCode), p.CreatedAt, p.UpdatedAt)
		return err
	})
	switch {
	case err == nil, errors.Is(err, idemkeys.ErrExists):
		return err
	case errors.Is(err, db.ErrDuplicate):
		// The key is free but a payment holds it: its record was purged after
		// retention. Never run the payment again; name the existing one.
		existing, gerr := s.PaymentByKey(ctx, p.MerchantID, p.IdempotencyKey)
		if gerr != nil {
			// Not err itself: MySQL's duplicate-key message quotes the key, which must not reach the logs.
			return fmt.Errorf("store.Claim: payment %s refused as a duplicate (order id %s taken?) and none found for its key: %w",
				p.ID, p.MerchantOrderID, gerr)
		}
		return &payments.Error{
			Code:      payments.CodeKeyReused,
			Message:   "this Idempotency-Key was used for payment " + existing.ID + " whose stored response has expired; look the payment up instead of retrying",
			PaymentID: existing.ID,
		}
	case errors.Is(err, db.ErrConnLost):
		return fmt.Errorf("store.Claim: %w: %v", payments.ErrWriteUnknown, err)
	}
	return fmt.Errorf("store.Claim: %w", err)
}

// LoadKey implements payments.Store.
func (s *Store) LoadKey(ctx context.Context, ref idemkeys.Ref) (idemkeys.Record, payments.Payment, error) {
	rec, err := idemkeys.Get(ctx, s.db, ref)
	if err != nil {
		return idemkeys.Record{}, payments.Payment{}, err
	}
	p, err := s.Payment(ctx, ref.MerchantID, rec.PaymentID)
	if err != nil {
		return idemkeys.Record{}, payments.Payment{}, fmt.Errorf("store.LoadKey: payment of key: %w", err)
	}
	return rec, p, nil
}

// Record implements payments.Store.
func (s *Store) Record(ctx context.Context, ref idemkeys.Ref) (idemkeys.Record, error) {
	return idemkeys.Get(ctx, s.db, ref)
}

// TakeOver implements payments.Store.
func (s *Store) TakeOver(ctx context.Context, ref idemkeys.Ref, seen int64, now, until time.Time) (int64, error) {
	return idemkeys.TakeOver(ctx, s.db, ref, seen, now, until)
}

// ArmCharge implements payments.Store.
func (s *Store) ArmCharge(ctx context.Context, ref idemkeys.Ref, held int64, until, now time.Time) error {
	return idemkeys.ArmCharge(ctx, s.db, ref, held, until, now)
}

// Release implements payments.Store.
func (s *Store) Release(ctx context.Context, ref idemkeys.Ref, held int64, now time.Time) error {
	return idemkeys.Release(ctx, s.db, ref, held, now)
}

// Settle implements payments.Store with one autocommitted statement that
// completes the key and settles its payment together, fenced on the lease
// version: atomic like a transaction of two UPDATEs, at a quarter of the
// round trips. It matches two rows (the key, the payment) or none; none means
// the writer lost its lease, or the payment was settled by other means, and
// either way the caller re-reads.
func (s *Store) Settle(ctx context.Context, ref idemkeys.Ref, held int64, p payments.Payment, resp idemkeys.Response, now time.Time) error {
	const stmt = `
UPDATE idempotency_keys k JOIN payments p ON p.merchant_id = k.merchant_id AND p.id = k.payment_id
SET k.state = 'COMPLETED', k.response_status = ?, k.response_body = ?, k.locked_until = NULL,
    k.completed_at = ?, k.updated_at = ?,
    p.status = ?, p.psp_reference = ?, p.decline_code = ?, p.updated_at = ?
WHERE k.merchant_id = ? AND k.endpoint = ? AND k.idem_key = ?
  AND k.state = 'IN_PROGRESS' AND k.lease_version = ? AND p.status = 'processing'`
	n, err := db.ExecRetry(ctx, s.db, stmt, resp.Status, resp.Body, now, now,
		string(p.Status), nullString(p.PSPReference), nullString(p.DeclineCode), now,
		ref.MerchantID, ref.Endpoint, ref.Key, held)
	switch {
	case errors.Is(err, db.ErrConnLost):
		return fmt.Errorf("store.Settle: %w: %v", payments.ErrWriteUnknown, err)
	case err != nil:
		return fmt.Errorf("store.Settle: %w", err)
	case n != 2:
		return fmt.Errorf("store.Settle(%s, v%d): %w", idemkeys.Hash(ref), held, idemkeys.ErrFenced)
	}
	return nil
}

// Payment implements payments.Store.
func (s *Store) Payment(ctx context.Context, merchantID, id string) (payments.Payment, error) {
	const q = `SELECT ` + paymentColumns + ` FROM payments WHERE merchant_id = ? AND id = ?`
	return s.getPayment(ctx, q, merchantID, id)
}

// PaymentByKey implements payments.Store.
func (s *Store) PaymentByKey(ctx context.Context, merchantID, key string) (payments.Payment, error) {
	const q = `SELECT ` + paymentColumns + ` FROM payments WHERE merchant_id = ? AND idem_key = ?`
	return s.getPayment(ctx, q, merchantID, key)
}

func (s *Store) getPayment(ctx context.Context, q string, args ...any) (payments.Payment, error) {
	var r paymentRow
	err := s.db.GetContext(ctx, &r, q, args...)
	if errors.Is(err, sql.ErrNoRows) {
		return payments.Payment{}, payments.ErrNotFound
	}
	if err != nil {
		return payments.Payment{}, fmt.Errorf("store: read payment: %w", db.Classify(err))
	}
	return r.toDomain()
}

// CreateMerchant implements payments.Store.
func (s *Store) CreateMerchant(ctx context.Context, m payments.Merchant, key payments.APIKey) error {
	return db.Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx,
			`INSERT INTO merchants (id, name, created_at) VALUES (?, ?, ?)`,
			m.ID, m.Name, m.CreatedAt); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx,
			`INSERT INTO api_keys (key_hash, merchant_id, prefix, created_at) VALUES (?, ?, ?, ?)`,
			key.Hash[:], m.ID, key.Prefix, m.CreatedAt)
		return err
	})
}

type keyRow struct {
	KeyHash      []byte       `db:"key_hash"`
	MerchantID   string       `db:"merchant_id"`
	Prefix       string       `db:"prefix"`
	CreatedAt    time.Time    `db:"created_at"`
	RevokedAt    sql.NullTime `db:"revoked_at"`
	MerchantName string       `db:"merchant_name"`
	MerchantAt   time.Time    `db:"merchant_created_at"`
}

func (r keyRow) toDomain() payments.StoredKey {
	k := payments.StoredKey{MerchantID: r.MerchantID, Prefix: r.Prefix, CreatedAt: r.CreatedAt, RevokedAt: r.RevokedAt.Time}
	copy(k.Hash[:], r.KeyHash)
	return k
}

const keyQuery = `
SELECT k.key_hash, k.merchant_id, k.prefix, k.created_at, k.revoked_at,
       m.name AS merchant_name, m.created_at AS merchant_created_at
FROM api_keys k JOIN merchants m ON m.id = k.merchant_id`

// ActiveKeysByPrefix implements payments.Store.
func (s *Store) ActiveKeysByPrefix(ctx context.Context, prefix string) ([]payments.StoredKey, []payments.Merchant, error) {
	var rows []keyRow
	if err := s.db.SelectContext(ctx, &rows, keyQuery+` WHERE k.prefix = ? AND k.revoked_at IS NULL`, prefix); err != nil {
		return nil, nil, fmt.Errorf("store: keys by prefix: %w", db.Classify(err))
	}
	keys := make([]payments.StoredKey, len(rows))
	merchants := make([]payments.Merchant, len(rows))
	for i, r := range rows {
		keys[i] = r.toDomain()
		merchants[i] = payments.Merchant{ID: r.MerchantID, Name: r.MerchantName, CreatedAt: r.MerchantAt}
	}
	return keys, merchants, nil
}

// AddAPIKey implements payments.Store.
func (s *Store) AddAPIKey(ctx context.Context, merchantID string, key payments.APIKey, now time.Time) error {
	return db.Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		var n int
		// A locking read, so a merchant cannot vanish between the check and the insert.
		if err := tx.GetContext(ctx, &n, `SELECT COUNT(*) FROM merchants WHERE id = ? FOR UPDATE`, merchantID); err != nil {
			return err
		}
		if n == 0 {
			return payments.ErrNotFound
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO api_keys (key_hash, merchant_id, prefix, created_at) VALUES (?, ?, ?, ?)`,
			key.Hash[:], merchantID, key.Prefix, now)
		return err
	})
}

// RevokeAPIKey implements payments.Store.
func (s *Store) RevokeAPIKey(ctx context.Context, merchantID, prefix string, now time.Time) (int, error) {
	res, err := s.db.ExecContext(ctx, `UPDATE api_keys SET revoked_at = ? WHERE merchant_id = ? AND prefix = ? AND revoked_at IS NULL`,
		now, merchantID, prefix)
	if err != nil {
		return 0, fmt.Errorf("store.RevokeAPIKey: %w", db.Classify(err))
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// APIKeys implements payments.Store.
func (s *Store) APIKeys(ctx context.Context, merchantID string) ([]payments.StoredKey, error) {
	var rows []keyRow
	if err := s.db.SelectContext(ctx, &rows, keyQuery+` WHERE k.merchant_id = ? ORDER BY k.created_at, k.prefix`, merchantID); err != nil {
		return nil, fmt.Errorf("store.APIKeys: %w", db.Classify(err))
	}
	out := make([]payments.StoredKey, len(rows))
	for i, r := range rows {
		out[i] = r.toDomain()
	}
	return out, nil
}

// Ping reports whether the database answers.
func (s *Store) Ping(ctx context.Context) error { return s.db.PingContext(ctx) }

// DB returns the pool, for tests and benchmarks that seed rows in bulk.
func (s *Store) DB() *sqlx.DB { return s.db }
