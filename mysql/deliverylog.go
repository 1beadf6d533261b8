package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/oklog/ulid/v2"

	"gateway/errs"
	"gateway/webhooks"
)

// The delivery log (webhooks.LogStore): a merchant's deliveries with their
// attempts, and the redeliveries it asks for. Every read names its merchant.

type deliveryLogRow struct {
	deliveryRow
	EventType sql.NullString `db:"event_type"`
	Key       sql.NullString `db:"redelivery_key"`
}

// deliveryLogSelect reads deliveries (d) with their events' types; a
// delivery whose event was purged has none.
const deliveryLogSelect = `SELECT d.merchant_id, d.id, d.endpoint_id, d.event_id, d.status, d.attempts, d.next_attempt_at,
    d.lease_token, d.last_http_status, d.last_error, d.first_delivered_at, d.created_at, d.redelivery_key, e.type AS event_type
FROM webhook_deliveries d LEFT JOIN events e ON e.id = d.event_id AND e.merchant_id = d.merchant_id
WHERE d.merchant_id = ? `

// Deliveries implements webhooks.LogStore: newest first by (created_at,
// id), each page's range starting at its cursor's time.
func (s *Store) Deliveries(ctx context.Context, q webhooks.DeliveryQuery) (_ []webhooks.DeliveryLog, _ bool, err error) {
	defer errs.Wrap(&err, "Store.Deliveries")
	where, args := `AND d.endpoint_id = ? `, []any{q.MerchantID, q.EndpointID}
	if q.EndpointID == "" {
		where, args = `AND d.event_id = ? `, []any{q.MerchantID, q.EventID}
	}
	if q.StartingAfter != "" {
		var at time.Time
		err := s.db.GetContext(ctx, &at, `SELECT d.created_at FROM webhook_deliveries d WHERE d.merchant_id = ? `+where+`AND d.id = ?`,
			append(args, q.StartingAfter)...)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, false, errs.ErrNotFound
		}
		if err != nil {
			return nil, false, Classify(err)
		}
		where += `AND d.created_at <= ? AND (d.created_at < ? OR d.id < ?) `
		args = append(args, at, at, q.StartingAfter)
	}
	var rows []deliveryLogRow
	if err := s.db.SelectContext(ctx, &rows, deliveryLogSelect+where+`ORDER BY d.created_at DESC, d.id DESC LIMIT ?`,
		append(args, q.Limit+1)...); err != nil {
		return nil, false, Classify(err)
	}
	more := len(rows) > q.Limit
	if more {
		rows = rows[:q.Limit]
	}
	out, err := s.withAttempts(ctx, q.MerchantID, rows)
	return out, more, err
}

// withAttempts reads the attempts of the deliveries rows, in one query.
func (s *Store) withAttempts(ctx context.Context, merchantID string, rows []deliveryLogRow) ([]webhooks.DeliveryLog, error) {
	out := make([]webhooks.DeliveryLog, len(rows))
	if len(rows) == 0 {
		return out, nil
	}
	ids := make([]string, len(rows))
	at := make(map[string]int, len(rows))
	for i, r := range rows {
		out[i] = webhooks.DeliveryLog{Delivery: r.toDomain(), EventType: r.EventType.String}
		ids[i], at[r.ID] = r.ID, i
	}
	q, args, err := sqlx.In(`SELECT delivery_id, attempt, attempted_at, latency_us, http_status, error, outcome, next_attempt_at
FROM webhook_delivery_attempts WHERE merchant_id = ? AND delivery_id IN (?) ORDER BY delivery_id, attempt`, merchantID, ids)
	if err != nil {
		return nil, err
	}
	var as []struct {
		DeliveryID  string         `db:"delivery_id"`
		Attempt     int            `db:"attempt"`
		AttemptedAt time.Time      `db:"attempted_at"`
		LatencyUS   int64          `db:"latency_us"`
		HTTPStatus  sql.NullInt64  `db:"http_status"`
		Error       sql.NullString `db:"error"`
		Outcome     string         `db:"outcome"`
		Next        sql.NullTime   `db:"next_attempt_at"`
	}
	if err := s.db.SelectContext(ctx, &as, q, args...); err != nil {
		return nil, Classify(err)
	}
	for _, a := range as {
		i := at[a.DeliveryID]
		out[i].Log = append(out[i].Log, webhooks.Attempt{Number: a.Attempt, At: a.AttemptedAt, HTTPStatus: int(a.HTTPStatus.Int64),
			Latency: time.Duration(a.LatencyUS) * time.Microsecond, Error: a.Error.String, Outcome: webhooks.AttemptOutcome(a.Outcome),
			NextAttemptAt: a.Next.Time})
	}
	return out, nil
}

// EventType implements webhooks.LogStore.
func (s *Store) EventType(ctx context.Context, merchantID, eventID string) (_ string, err error) {
	defer errs.Wrap(&err, "Store.EventType")
	var t string
	err = s.db.GetContext(ctx, &t, `SELECT type FROM events WHERE merchant_id = ? AND id = ?`, merchantID, eventID)
	if errors.Is(err, sql.ErrNoRows) {
		return "", errs.ErrNotFound
	}
	return t, Classify(err)
}

// Delivery implements webhooks.LogStore.
func (s *Store) Delivery(ctx context.Context, merchantID, id string) (_ webhooks.DeliveryLog, err error) {
	defer errs.Wrap(&err, "Store.Delivery")
	return s.oneDelivery(ctx, `AND d.id = ?`, merchantID, id)
}

// Redelivered implements webhooks.LogStore.
func (s *Store) Redelivered(ctx context.Context, merchantID, key string) (_ webhooks.DeliveryLog, err error) {
	defer errs.Wrap(&err, "Store.Redelivered")
	return s.oneDelivery(ctx, `AND d.redelivery_key = ?`, merchantID, key)
}

// oneDelivery reads the merchant's delivery that where names, with its attempts.
func (s *Store) oneDelivery(ctx context.Context, where, merchantID, arg string) (webhooks.DeliveryLog, error) {
	var rows []deliveryLogRow
	if err := s.db.SelectContext(ctx, &rows, deliveryLogSelect+where, merchantID, arg); err != nil {
		return webhooks.DeliveryLog{}, Classify(err)
	}
	if len(rows) == 0 {
		return webhooks.DeliveryLog{}, errs.ErrNotFound
	}
	out, err := s.withAttempts(ctx, merchantID, rows)
	if err != nil {
		return webhooks.DeliveryLog{}, err
	}
	return out[0], nil
}

// Redeliver implements webhooks.LogStore: the delivery is inserted under
// the endpoint's locking read (a delete or a disabling waits for it, and
// one made first is seen), and a duplicate key answers the delivery the
// key made.
func (s *Store) Redeliver(ctx context.Context, r webhooks.Redelivery) (_ webhooks.DeliveryLog, replayed bool, err error) {
	defer errs.Wrap(&err, "Store.Redeliver")
	id := webhooks.DeliveryIDPrefix + ulid.Make().String()
	var rows []deliveryLogRow
	err = Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		var st string
		err := tx.GetContext(ctx, &st, `SELECT status FROM webhook_endpoints WHERE merchant_id = ? AND id = ? LOCK IN SHARE MODE`, r.MerchantID, r.EndpointID)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return errs.ErrNotFound
		case err != nil:
			return err
		case st != string(webhooks.Enabled):
			return &errs.Error{Code: errs.CodeConflict, Message: "the endpoint is disabled: enable it first"}
		}
		// The event, read under a lock its purge waits for: a redelivery
		// is never made of an event purged meanwhile.
		var n int
		if err := tx.GetContext(ctx, &n, `SELECT COUNT(*) FROM events WHERE merchant_id = ? AND id = ? LOCK IN SHARE MODE`, r.MerchantID, r.EventID); err != nil {
			return err
		}
		if n == 0 {
			return errs.ErrNotFound
		}
		_, err = tx.ExecContext(ctx, `
INSERT INTO webhook_deliveries (merchant_id, id, endpoint_id, event_id, status, next_attempt_at, redelivery_key, created_at, updated_at)
VALUES (?, ?, ?, ?, 'pending', NOW(6), ?, NOW(6), NOW(6))`, r.MerchantID, id, r.EndpointID, r.EventID, r.Key)
		if err != nil {
			return err
		}
		rows = nil
		return tx.SelectContext(ctx, &rows, deliveryLogSelect+`AND d.id = ?`, r.MerchantID, id)
	})
	if errors.Is(Classify(err), ErrDuplicate) {
		d, err := s.Redelivered(ctx, r.MerchantID, r.Key)
		return d, true, err
	}
	if err != nil {
		return webhooks.DeliveryLog{}, false, err
	}
	if len(rows) != 1 {
		return webhooks.DeliveryLog{}, false, fmt.Errorf("the redelivery %s is not there after its commit", id)
	}
	return webhooks.DeliveryLog{Delivery: rows[0].toDomain(), EventType: rows[0].EventType.String}, false, nil
}
