// Package store is the MySQL/MariaDB storage of the gateway: every SQL
// statement of a payment's and an idempotency key's life (key.go), of the
// reconciler and the review queue (reconcile.go), of merchants and their API
// keys (this file). It implements the small interfaces its consumers declare
// (payments.FlowStore, merchants.AuthStore, review.Store,
// reconcile.Store); MySQL error numbers never leave it.
package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/oklog/ulid/v2"

	"gateway/errs"
	"gateway/listings"
	"gateway/merchants"
	"gateway/notices"
	"gateway/payments"
	"gateway/review"
	"gateway/versions"
)

// Store runs every method in its own short transaction on a pool.
type Store struct {
	db *sqlx.DB
	// causal prefixes the reads that decide something: on a Galera node,
	// "SET STATEMENT wsrep_sync_wait = 1 FOR " (a MariaDB form, used only there).
	causal string
	// reads bounds the listings' reads by their request's deadline (db.go).
	reads readLimit
}

// NewStore returns a Store on dbx.
func NewStore(dbx *sqlx.DB) *Store { return &Store{db: dbx} }

// CausalReads makes the reads that decide something (a duplicate's look at a
// key before it takes it over, the re-read after a lost acknowledgement)
// causal when the server is a Galera node: a node answering them first
// applies every write the cluster committed before. Elsewhere every read
// already sees the last commit and nothing changes.
func (s *Store) CausalReads(ctx context.Context) error {
	st, err := GaleraState(ctx, s.db)
	if err != nil {
		return err
	}
	if st.Galera {
		s.causal = "SET STATEMENT wsrep_sync_wait = 1 FOR "
	}
	return nil
}

var (
	_ payments.FlowStore  = (*Store)(nil)
	_ merchants.AuthStore = (*Store)(nil)
	_ review.Store        = (*Store)(nil)
	_ listings.Store      = (*Store)(nil)
	_ notices.Store       = (*Store)(nil)
)

type paymentRow struct {
	MerchantID      string         `db:"merchant_id"`
	ID              string         `db:"id"`
	IdemKey         string         `db:"idem_key"`
	MerchantOrderID string         `db:"merchant_order_id"`
	Status          string         `db:"status"`
	Amount          int64          `db:"amount"`
	AmountReserved  int64          `db:"amount_reserved"`
	AmountRefunded  int64          `db:"amount_refunded"`
	Currency        string         `db:"currency"`
	PaymentMethod   string         `db:"payment_method"`
	Description     string         `db:"description"`
	Metadata        sql.NullString `db:"metadata"`
	PSPReference    sql.NullString `db:"psp_reference"`
	DeclineCode     sql.NullString `db:"decline_code"`
	PSPCode         sql.NullString `db:"psp_code"`
	PSP             sql.NullString `db:"psp"`
	ReviewReason    sql.NullString `db:"review_reason"`
	ReviewSince     sql.NullTime   `db:"review_since"`
	ReviewAfter     sql.NullTime   `db:"review_after"`
	ReviewAttempts  int            `db:"review_attempts"`
	ReviewNotFound  sql.NullTime   `db:"review_not_found_at"`
	ExpiresAt       sql.NullTime   `db:"expires_at"`
	ConfirmKey      sql.NullString `db:"confirm_key"`
	NextAction      sql.NullString `db:"next_action"`
	ClientSecret    []byte         `db:"client_secret_hash"`
	CaptureMethod   string         `db:"capture_method"`
	AmountCaptured  int64          `db:"amount_captured"`
	CaptureBefore   sql.NullTime   `db:"capture_before"`
	CancelReason    sql.NullString `db:"cancellation_reason"`
	OpKind          sql.NullString `db:"op_kind"`
	OpKey           sql.NullString `db:"op_key"`
	OpAmount        sql.NullInt64  `db:"op_amount"`
	OpReason        sql.NullString `db:"op_reason"`
	Attempt         int            `db:"attempt"`
	AttemptAt       sql.NullTime   `db:"attempt_at"`
	Attempts        sql.NullString `db:"attempts"`
	CreatedAt       time.Time      `db:"created_at"`
	UpdatedAt       time.Time      `db:"updated_at"`
}

const paymentColumns = `merchant_id, id, idem_key, merchant_order_id, status, amount, amount_reserved, amount_refunded, currency,
    payment_method, description, metadata, psp_reference, decline_code, psp_code, psp, review_reason,
    review_since, review_after, review_attempts, review_not_found_at, expires_at, confirm_key, next_action,
    client_secret_hash, capture_method, amount_captured, capture_before, cancellation_reason,
    op_kind, op_key, op_amount, op_reason, attempt, attempt_at, attempts, created_at, updated_at`

func (r paymentRow) toDomain() (payments.Payment, error) {
	p := payments.Payment{
		ID:              r.ID,
		MerchantID:      r.MerchantID,
		IdempotencyKey:  r.IdemKey,
		MerchantOrderID: r.MerchantOrderID,
		Status:          payments.Status(r.Status),
		Amount:          payments.Money{Minor: r.Amount, Currency: r.Currency},
		AmountReserved:  r.AmountReserved,
		AmountRefunded:  r.AmountRefunded,
		PaymentMethod:   r.PaymentMethod,
		Description:     r.Description,
		PSPReference:    r.PSPReference.String,
		DeclineCode:     r.DeclineCode.String,
		PSPCode:         r.PSPCode.String,
		PSP:             r.PSP.String,
		ReviewReason:    r.ReviewReason.String,
		Review: payments.Review{
			Since:      r.ReviewSince.Time,
			After:      r.ReviewAfter.Time,
			Attempts:   r.ReviewAttempts,
			NotFoundAt: r.ReviewNotFound.Time,
		},
		ExpiresAt:          r.ExpiresAt.Time,
		ConfirmKey:         r.ConfirmKey.String,
		CaptureMethod:      payments.CaptureMethod(r.CaptureMethod),
		AmountCaptured:     r.AmountCaptured,
		CaptureBefore:      r.CaptureBefore.Time,
		CancellationReason: r.CancelReason.String,
		Attempt:            r.Attempt,
		AttemptAt:          r.AttemptAt.Time,
		CreatedAt:          r.CreatedAt,
		UpdatedAt:          r.UpdatedAt,
	}
	if r.OpKind.Valid {
		p.Operation = &payments.Operation{Kind: payments.OperationKind(r.OpKind.String), Key: r.OpKey.String,
			Amount: r.OpAmount.Int64, Reason: r.OpReason.String}
	}
	copy(p.ClientSecretHash[:], r.ClientSecret)
	if r.Metadata.Valid && r.Metadata.String != "" {
		if err := json.Unmarshal([]byte(r.Metadata.String), &p.Metadata); err != nil {
			return payments.Payment{}, fmt.Errorf("payment %s: metadata: %w", r.ID, err)
		}
	}
	if r.Attempts.Valid && r.Attempts.String != "" {
		if err := json.Unmarshal([]byte(r.Attempts.String), &p.Attempts); err != nil {
			return payments.Payment{}, fmt.Errorf("payment %s: attempts: %w", r.ID, err)
		}
	}
	if r.NextAction.Valid && r.NextAction.String != "" {
		if err := json.Unmarshal([]byte(r.NextAction.String), &p.NextAction); err != nil {
			return payments.Payment{}, fmt.Errorf("payment %s: next_action: %w", r.ID, err)
		}
	}
	return p, nil
}

// refundsOf decodes rows, failing on the first that cannot be.
func refundsOf(rows []refundRow) ([]payments.Refund, error) {
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

// paymentsOf decodes rows, failing on the first that cannot be.
func paymentsOf(rows []paymentRow) ([]payments.Payment, error) {
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

// nextActionJSON is how next_action is stored: NULL for none.
func nextActionJSON(na *payments.NextAction) (sql.NullString, error) {
	if na == nil {
		return sql.NullString{}, nil
	}
	b, err := json.Marshal(na)
	if err != nil {
		return sql.NullString{}, fmt.Errorf("next_action: %w", err)
	}
	return sql.NullString{String: string(b), Valid: true}, nil
}

func newULID() string { return ulid.Make().String() }

func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

func nullTime(t time.Time) sql.NullTime { return sql.NullTime{Time: t, Valid: !t.IsZero()} }

// captureMethodOf is how p's capture method is stored: automatic when unset.
func captureMethodOf(p payments.Payment) payments.CaptureMethod {
	if p.CaptureMethod == "" {
		return payments.CaptureAutomatic
	}
	return p.CaptureMethod
}

func metadataJSON(md map[string]string) (string, error) {
	b, err := json.Marshal(md)
	if err != nil {
		return "", fmt.Errorf("metadata: %w", err)
	}
	return string(b), nil
}

// Payment implements payments.FlowStore.
func (s *Store) Payment(ctx context.Context, merchantID, id string) (payments.Payment, error) {
	const q = `SELECT ` + paymentColumns + ` FROM payments WHERE merchant_id = ? AND id = ?`
	return s.getPayment(ctx, q, merchantID, id)
}

// PaymentByKey implements payments.FlowStore.
func (s *Store) PaymentByKey(ctx context.Context, merchantID, key string) (payments.Payment, error) {
	const q = `SELECT ` + paymentColumns + ` FROM payments WHERE merchant_id = ? AND idem_key = ?`
	return s.getPayment(ctx, q, merchantID, key)
}

// PaymentByID implements review.Store: ops name payments by id alone.
func (s *Store) PaymentByID(ctx context.Context, id string) (payments.Payment, error) {
	const q = `SELECT ` + paymentColumns + ` FROM payments WHERE id = ?`
	return s.getPayment(ctx, q, id)
}

func (s *Store) getPayment(ctx context.Context, q string, args ...any) (payments.Payment, error) {
	var r paymentRow
	err := s.db.GetContext(ctx, &r, q, args...)
	if errors.Is(err, sql.ErrNoRows) {
		return payments.Payment{}, errs.ErrNotFound
	}
	if err != nil {
		return payments.Payment{}, fmt.Errorf("read payment: %w", Classify(err))
	}
	return r.toDomain()
}

// CreateMerchant implements merchants.AdminStore.
func (s *Store) CreateMerchant(ctx context.Context, m merchants.Merchant, key merchants.APIKey) error {
	return Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		if _, err := tx.ExecContext(ctx,
			`INSERT INTO merchants (id, name, api_version, created_at) VALUES (?, ?, ?, ?)`,
			m.ID, m.Name, merchantVersion(m), m.CreatedAt); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx,
			`INSERT INTO api_keys (key_hash, merchant_id, prefix, created_at) VALUES (?, ?, ?, ?)`,
			key.Hash[:], m.ID, key.Prefix, m.CreatedAt)
		return err
	})
}

type apiKeyRow struct {
	KeyHash      []byte       `db:"key_hash"`
	MerchantID   string       `db:"merchant_id"`
	Prefix       string       `db:"prefix"`
	CreatedAt    time.Time    `db:"created_at"`
	RevokedAt    sql.NullTime `db:"revoked_at"`
	MerchantName string       `db:"merchant_name"`
	MerchantAt   time.Time    `db:"merchant_created_at"`
	MerchantVer  string       `db:"merchant_api_version"`
}

func (r apiKeyRow) toDomain() merchants.StoredKey {
	k := merchants.StoredKey{MerchantID: r.MerchantID, Prefix: r.Prefix, CreatedAt: r.CreatedAt, RevokedAt: r.RevokedAt.Time}
	copy(k.Hash[:], r.KeyHash)
	return k
}

// apiKeyColumns reads a key with its merchant; keyQuery joins them for API
// keys (publishableKeyQuery for publishable keys, in browser.go).
const apiKeyColumns = `
SELECT k.key_hash, k.merchant_id, k.prefix, k.created_at, k.revoked_at,
       m.name AS merchant_name, m.created_at AS merchant_created_at, m.api_version AS merchant_api_version`

const keyQuery = apiKeyColumns + `
FROM api_keys k JOIN merchants m ON m.id = k.merchant_id`

// ActiveKeysByPrefix implements merchants.AuthStore.
func (s *Store) ActiveKeysByPrefix(ctx context.Context, prefix string) (_ []merchants.StoredKey, _ []merchants.Merchant, err error) {
	defer errs.Wrap(&err, "Store.ActiveKeysByPrefix")
	return s.activeKeys(ctx, keyQuery, prefix)
}

// activeKeys reads the active keys of query (keyQuery or
// publishableKeyQuery) with a visible prefix, with their merchants.
func (s *Store) activeKeys(ctx context.Context, query, prefix string) ([]merchants.StoredKey, []merchants.Merchant, error) {
	var rows []apiKeyRow
	if err := s.db.SelectContext(ctx, &rows, query+` WHERE k.prefix = ? AND k.revoked_at IS NULL`, prefix); err != nil {
		return nil, nil, Classify(err)
	}
	keys := make([]merchants.StoredKey, len(rows))
	owners := make([]merchants.Merchant, len(rows))
	for i, r := range rows {
		keys[i] = r.toDomain()
		owners[i] = merchants.Merchant{ID: r.MerchantID, Name: r.MerchantName, APIVersion: r.MerchantVer, CreatedAt: r.MerchantAt}
	}
	return keys, owners, nil
}

// AddAPIKey implements merchants.AdminStore.
func (s *Store) AddAPIKey(ctx context.Context, merchantID string, key merchants.APIKey, now time.Time) error {
	return s.addKey(ctx, "api_keys", merchantID, key, now)
}

// addKey stores key in table (api_keys or publishable_keys) for an
// existing merchant, in one transaction.
func (s *Store) addKey(ctx context.Context, table, merchantID string, key merchants.APIKey, now time.Time) error {
	return Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		if err := lockMerchant(ctx, tx, merchantID); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO `+table+` (key_hash, merchant_id, prefix, created_at) VALUES (?, ?, ?, ?)`,
			key.Hash[:], merchantID, key.Prefix, now)
		return err
	})
}

// merchantVersion is the version a merchant is created pinned to: the
// latest unless it names one.
func merchantVersion(m merchants.Merchant) string {
	if m.APIVersion == "" {
		return string(versions.Latest)
	}
	return m.APIVersion
}

// SetMerchantAPIVersion implements merchants.AdminStore.
func (s *Store) SetMerchantAPIVersion(ctx context.Context, merchantID, version string) (err error) {
	defer errs.Wrap(&err, "Store.SetMerchantAPIVersion")
	return Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		if err := lockMerchant(ctx, tx, merchantID); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `UPDATE merchants SET api_version = ? WHERE id = ?`, version, merchantID)
		return err
	})
}

// Merchant implements merchants.AdminStore and merchants.BrowserAdminStore.
func (s *Store) Merchant(ctx context.Context, id string) (_ merchants.Merchant, err error) {
	defer errs.Wrap(&err, "Store.Merchant")
	var m merchants.Merchant
	err = s.db.QueryRowxContext(ctx, `SELECT id, name, api_version, created_at FROM merchants WHERE id = ?`, id).Scan(&m.ID, &m.Name, &m.APIVersion, &m.CreatedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return merchants.Merchant{}, errs.ErrNotFound
	}
	if err != nil {
		return merchants.Merchant{}, Classify(err)
	}
	return m, nil
}

// lockMerchant takes a shared look at a merchant's row in tx, so that it
// cannot vanish before what tx adds for it; errs.ErrNotFound when there
// is none.
func lockMerchant(ctx context.Context, tx *sqlx.Tx, merchantID string) error {
	var n int
	if err := tx.GetContext(ctx, &n, `SELECT COUNT(*) FROM merchants WHERE id = ? FOR UPDATE`, merchantID); err != nil {
		return err
	}
	if n == 0 {
		return errs.ErrNotFound
	}
	return nil
}

// RevokeAPIKey implements merchants.AdminStore.
func (s *Store) RevokeAPIKey(ctx context.Context, merchantID, prefix string, now time.Time) (_ int, err error) {
	defer errs.Wrap(&err, "Store.RevokeAPIKey")
	return s.revokeKey(ctx, "api_keys", merchantID, prefix, now)
}

// revokeKey revokes the merchant's active keys of table with a prefix.
func (s *Store) revokeKey(ctx context.Context, table, merchantID, prefix string, now time.Time) (int, error) {
	res, err := s.db.ExecContext(ctx, `UPDATE `+table+` SET revoked_at = ? WHERE merchant_id = ? AND prefix = ? AND revoked_at IS NULL`,
		now, merchantID, prefix)
	if err != nil {
		return 0, Classify(err)
	}
	n, err := res.RowsAffected()
	return int(n), err
}

// APIKeys implements merchants.AdminStore.
func (s *Store) APIKeys(ctx context.Context, merchantID string) (_ []merchants.StoredKey, err error) {
	defer errs.Wrap(&err, "Store.APIKeys")
	return s.merchantKeys(ctx, keyQuery, merchantID)
}

// merchantKeys lists a merchant's keys of query, revoked ones included.
func (s *Store) merchantKeys(ctx context.Context, query, merchantID string) ([]merchants.StoredKey, error) {
	var rows []apiKeyRow
	if err := s.db.SelectContext(ctx, &rows, query+` WHERE k.merchant_id = ? ORDER BY k.created_at, k.prefix`, merchantID); err != nil {
		return nil, Classify(err)
	}
	out := make([]merchants.StoredKey, len(rows))
	for i, r := range rows {
		out[i] = r.toDomain()
	}
	return out, nil
}

// Ping reports whether the database answers.
func (s *Store) Ping(ctx context.Context) error { return s.db.PingContext(ctx) }

// DB returns the pool, for tests and benchmarks that seed rows in bulk.
func (s *Store) DB() *sqlx.DB { return s.db }
