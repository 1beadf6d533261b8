package mysql

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/oklog/ulid/v2"

	"gateway/errs"
	"gateway/versions"
	"gateway/webhooks"
)

// Webhook endpoints (webhooks.EndpointStore). Every statement names its
// merchant but FindEndpoint, ops' look-up by id.

var (
	_ webhooks.EndpointStore = (*Store)(nil)
	_ webhooks.DispatchStore = (*Store)(nil)
)

type endpointRow struct {
	MerchantID      string         `db:"merchant_id"`
	ID              string         `db:"id"`
	URL             string         `db:"url"`
	EventTypes      string         `db:"event_types"`
	Status          string         `db:"status"`
	Description     string         `db:"description"`
	SecretEnc       []byte         `db:"secret_enc"`
	PrevSecretEnc   []byte         `db:"prev_secret_enc"`
	PrevSecretUntil sql.NullTime   `db:"prev_secret_until"`
	FailingSince    sql.NullTime   `db:"failing_since"`
	DisabledReason  sql.NullString `db:"disabled_reason"`
	APIVersion      string         `db:"api_version"`
	CreatedAt       time.Time      `db:"created_at"`
	UpdatedAt       time.Time      `db:"updated_at"`
}

const endpointColumns = `merchant_id, id, url, event_types, status, description, secret_enc, prev_secret_enc,
    prev_secret_until, failing_since, disabled_reason, api_version, created_at, updated_at`

func (r endpointRow) toDomain() webhooks.Endpoint {
	return webhooks.Endpoint{
		ID: r.ID, MerchantID: r.MerchantID, URL: r.URL, EventTypes: strings.Split(r.EventTypes, ","),
		Status: webhooks.EndpointStatus(r.Status), Description: r.Description,
		SecretEnc: r.SecretEnc, PrevSecretEnc: r.PrevSecretEnc, PrevSecretUntil: r.PrevSecretUntil.Time,
		FailingSince: r.FailingSince.Time, DisabledReason: r.DisabledReason.String, APIVersion: r.APIVersion,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
}

// CreateEndpoint implements webhooks.EndpointStore. The merchant's row,
// locked first, serialises its creates: the count read after the lock sees
// every endpoint committed before, whatever the isolation level.
func (s *Store) CreateEndpoint(ctx context.Context, e webhooks.Endpoint, max int) (_ webhooks.Endpoint, err error) {
	defer errs.Wrap(&err, "Store.CreateEndpoint")
	const q = `
INSERT INTO webhook_endpoints (merchant_id, id, url, event_types, status, description, secret_enc, api_version, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, NOW(6), NOW(6))`
	err = Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		var id string
		err := tx.GetContext(ctx, &id, `SELECT id FROM merchants WHERE id = ? FOR UPDATE`, e.MerchantID)
		if errors.Is(err, sql.ErrNoRows) {
			return errs.ErrNotFound
		}
		if err != nil {
			return err
		}
		var n int
		if err := tx.GetContext(ctx, &n, `SELECT COUNT(*) FROM webhook_endpoints WHERE merchant_id = ?`, e.MerchantID); err != nil {
			return err
		}
		if n >= max {
			return webhooks.ErrEndpointLimit
		}
		_, err = tx.ExecContext(ctx, q, e.MerchantID, e.ID, e.URL, strings.Join(e.EventTypes, ","), string(e.Status),
			e.Description, e.SecretEnc, string(versions.OrFirst(e.APIVersion)))
		return err
	})
	if err != nil {
		return webhooks.Endpoint{}, err
	}
	return s.Endpoint(ctx, e.MerchantID, e.ID)
}

// Endpoints implements webhooks.EndpointStore.
func (s *Store) Endpoints(ctx context.Context, merchantID string) (_ []webhooks.Endpoint, err error) {
	defer errs.Wrap(&err, "Store.Endpoints")
	var rows []endpointRow
	if err := s.db.SelectContext(ctx, &rows, `SELECT `+endpointColumns+` FROM webhook_endpoints WHERE merchant_id = ? ORDER BY created_at, id`, merchantID); err != nil {
		return nil, Classify(err)
	}
	out := make([]webhooks.Endpoint, len(rows))
	for i, r := range rows {
		out[i] = r.toDomain()
	}
	return out, nil
}

// Endpoint implements webhooks.EndpointStore.
func (s *Store) Endpoint(ctx context.Context, merchantID, id string) (_ webhooks.Endpoint, err error) {
	defer errs.Wrap(&err, "Store.Endpoint")
	var r endpointRow
	err = s.db.GetContext(ctx, &r, `SELECT `+endpointColumns+` FROM webhook_endpoints WHERE merchant_id = ? AND id = ?`, merchantID, id)
	if errors.Is(err, sql.ErrNoRows) {
		return webhooks.Endpoint{}, errs.ErrNotFound
	}
	if err != nil {
		return webhooks.Endpoint{}, Classify(err)
	}
	return r.toDomain(), nil
}

// FindEndpoint implements webhooks.EndpointStore: ops know an endpoint by its id.
func (s *Store) FindEndpoint(ctx context.Context, id string) (_ webhooks.Endpoint, err error) {
	defer errs.Wrap(&err, "Store.FindEndpoint")
	var r endpointRow
	err = s.db.GetContext(ctx, &r, `SELECT `+endpointColumns+` FROM webhook_endpoints WHERE id = ?`, id)
	if errors.Is(err, sql.ErrNoRows) {
		return webhooks.Endpoint{}, errs.ErrNotFound
	}
	if err != nil {
		return webhooks.Endpoint{}, Classify(err)
	}
	return r.toDomain(), nil
}

// failPending fails an endpoint's pending deliveries (it was deleted or disabled).
func failPending(ctx context.Context, tx *sqlx.Tx, merchantID, endpointID, reason string) error {
	const q = `
UPDATE webhook_deliveries SET status = 'failed', last_error = ?, lease_until = NULL, updated_at = NOW(6)
WHERE merchant_id = ? AND endpoint_id = ? AND status = 'pending'`
	_, err := tx.ExecContext(ctx, q, reason, merchantID, endpointID)
	return err
}

// DeleteEndpoint implements webhooks.EndpointStore.
func (s *Store) DeleteEndpoint(ctx context.Context, merchantID, id string) (err error) {
	defer errs.Wrap(&err, "Store.DeleteEndpoint")
	err = Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM webhook_endpoints WHERE merchant_id = ? AND id = ?`, merchantID, id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.Join(err, errs.ErrNotFound)
		}
		return failPending(ctx, tx, merchantID, id, "endpoint deleted")
	})
	if errors.Is(err, errs.ErrNotFound) {
		return errs.ErrNotFound
	}
	if err != nil {
		return err
	}
	return nil
}

// RotateSecret implements webhooks.EndpointStore.
func (s *Store) RotateSecret(ctx context.Context, merchantID, id string, enc []byte, grace time.Duration) (_ webhooks.Endpoint, err error) {
	defer errs.Wrap(&err, "Store.RotateSecret")
	const q = `
UPDATE webhook_endpoints
SET prev_secret_enc = secret_enc, prev_secret_until = NOW(6) + INTERVAL ? MICROSECOND, secret_enc = ?, updated_at = NOW(6)
WHERE merchant_id = ? AND id = ?`
	n, err := ExecRetry(ctx, s.db, q, grace.Microseconds(), enc, merchantID, id)
	if err != nil {
		return webhooks.Endpoint{}, err
	}
	if n == 0 {
		return webhooks.Endpoint{}, errs.ErrNotFound
	}
	return s.Endpoint(ctx, merchantID, id)
}

// SetEndpointStatus implements webhooks.EndpointStore.
func (s *Store) SetEndpointStatus(ctx context.Context, merchantID, id string, status webhooks.EndpointStatus, reason string) (_ bool, err error) {
	defer errs.Wrap(&err, "Store.SetEndpointStatus")
	const q = `
UPDATE webhook_endpoints SET status = ?, disabled_reason = ?, failing_since = NULL, updated_at = NOW(6)
WHERE merchant_id = ? AND id = ? AND status <> ?`
	var changed bool
	err = Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		var cur string
		err := tx.GetContext(ctx, &cur, `SELECT status FROM webhook_endpoints WHERE merchant_id = ? AND id = ? FOR UPDATE`, merchantID, id)
		if errors.Is(err, sql.ErrNoRows) {
			return errs.ErrNotFound
		}
		if err != nil || cur == string(status) {
			return err
		}
		var why sql.NullString
		if status == webhooks.Disabled {
			why = sql.NullString{String: reason, Valid: true}
		}
		if _, err := tx.ExecContext(ctx, q, string(status), why, merchantID, id, string(status)); err != nil {
			return err
		}
		changed = true
		if status == webhooks.Disabled {
			return failPending(ctx, tx, merchantID, id, "endpoint disabled")
		}
		return nil
	})
	if errors.Is(err, errs.ErrNotFound) {
		return false, errs.ErrNotFound
	}
	if err != nil {
		return false, err
	}
	return changed, nil
}

// resendBatch is how many deliveries one statement of a resend inserts.
const resendBatch = 500

// Resend implements webhooks.EndpointStore: the events are read page by
// page in their order and a delivery inserted for each.
func (s *Store) Resend(ctx context.Context, merchantID, id string, since time.Time) (_ int, err error) {
	defer errs.Wrap(&err, "Store.Resend")
	total := 0
	var after int64
	for {
		var evs []struct {
			Pos int64  `db:"pos"`
			ID  string `db:"id"`
		}
		const q = `SELECT pos, id FROM events WHERE merchant_id = ? AND pos > ? AND created_at >= ? ORDER BY pos LIMIT ?`
		if err := s.db.SelectContext(ctx, &evs, q, merchantID, after, since.UTC(), resendBatch); err != nil {
			return total, Classify(err)
		}
		if len(evs) == 0 {
			return total, nil
		}
		ids := make([]string, len(evs))
		for i, e := range evs {
			ids[i] = e.ID
		}
		err := Transact(ctx, s.db, func(tx *sqlx.Tx) error {
			var st string
			err := tx.GetContext(ctx, &st, `SELECT status FROM webhook_endpoints WHERE merchant_id = ? AND id = ? FOR UPDATE`, merchantID, id)
			if errors.Is(err, sql.ErrNoRows) {
				return errs.ErrNotFound
			}
			if err != nil {
				return err
			}
			return insertDeliveries(ctx, tx, merchantID, id, ids)
		})
		if errors.Is(err, errs.ErrNotFound) {
			return total, errs.ErrNotFound
		}
		if err != nil {
			return total, err
		}
		total += len(evs)
		after = evs[len(evs)-1].Pos
	}
}

// insertDeliveries makes a pending delivery, due now, of each event to one
// endpoint of one merchant, in one statement.
func insertDeliveries(ctx context.Context, tx *sqlx.Tx, merchantID, endpointID string, eventIDs []string) error {
	if len(eventIDs) == 0 {
		return nil
	}
	var b strings.Builder
	b.WriteString(`INSERT INTO webhook_deliveries (merchant_id, id, endpoint_id, event_id, status, next_attempt_at, created_at, updated_at) VALUES `)
	args := make([]any, 0, 4*len(eventIDs))
	for i, ev := range eventIDs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(`(?, ?, ?, ?, 'pending', NOW(6), NOW(6), NOW(6))`)
		args = append(args, merchantID, webhooks.DeliveryIDPrefix+ulid.Make().String(), endpointID, ev)
	}
	_, err := tx.ExecContext(ctx, b.String(), args...)
	return err
}
