package mysql

import (
	"context"
	"database/sql"
	"errors"
	"sort"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"gateway/errs"
	"gateway/versions"
	"gateway/webhooks"
)

// Webhook deliveries (webhooks.DispatchStore): the fan-out of events into
// deliveries, the claim of due deliveries under a lease with a fencing
// token, and the record of each attempt. The fan-out's and the look for due
// endpoints' scans are the scatters here (background work, declared in
// shard_test.go); the claim and the records name their merchant.

// FanOut implements webhooks.DispatchStore. The events are claimed in
// their order, locked (SKIP LOCKED: another dispatcher takes the next
// ones), given one delivery per enabled endpoint of their merchant that
// subscribes to their type, and marked fanned out, all in one transaction:
// an event is fanned out exactly once.
func (s *Store) FanOut(ctx context.Context, limit int) (events, deliveries int, err error) {
	defer errs.Wrap(&err, "Store.FanOut")
	err = Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		events, deliveries = 0, 0
		var evs []struct {
			Pos        int64  `db:"pos"`
			ID         string `db:"id"`
			MerchantID string `db:"merchant_id"`
			Type       string `db:"type"`
		}
		const q = `SELECT pos, id, merchant_id, type FROM events WHERE fanned_out = 0 ORDER BY pos LIMIT ? FOR UPDATE SKIP LOCKED`
		if err := tx.SelectContext(ctx, &evs, q, limit); err != nil {
			return err
		}
		byMerchant := map[string][]int{}
		var merchants []string
		for i, e := range evs {
			if _, ok := byMerchant[e.MerchantID]; !ok {
				merchants = append(merchants, e.MerchantID)
			}
			byMerchant[e.MerchantID] = append(byMerchant[e.MerchantID], i)
		}
		sort.Strings(merchants)
		for _, m := range merchants {
			var rows []endpointRow
			const eq = `SELECT ` + endpointColumns + ` FROM webhook_endpoints WHERE merchant_id = ? AND status = 'enabled' ORDER BY id`
			if err := tx.SelectContext(ctx, &rows, eq, m); err != nil {
				return err
			}
			for _, r := range rows {
				ep := r.toDomain()
				var ids []string
				for _, i := range byMerchant[m] {
					if ep.Subscribes(evs[i].Type) {
						ids = append(ids, evs[i].ID)
					}
				}
				if err := insertDeliveries(ctx, tx, m, ep.ID, ids); err != nil {
					return err
				}
				deliveries += len(ids)
			}
			pos := make([]string, len(byMerchant[m]))
			args := []any{m}
			for j, i := range byMerchant[m] {
				pos[j] = "?"
				args = append(args, evs[i].Pos)
			}
			if _, err := tx.ExecContext(ctx, `UPDATE events SET fanned_out = 1 WHERE merchant_id = ? AND pos IN (`+strings.Join(pos, ", ")+`)`, args...); err != nil {
				return err
			}
		}
		events = len(evs)
		return nil
	})
	return events, deliveries, err
}

// DueEndpoints implements webhooks.DispatchStore: the endpoints with a
// delivery due now, the longest-waiting first.
func (s *Store) DueEndpoints(ctx context.Context, limit int) (_ []webhooks.EndpointRef, err error) {
	defer errs.Wrap(&err, "Store.DueEndpoints")
	const q = `
SELECT merchant_id, endpoint_id FROM webhook_deliveries
WHERE status = 'pending' AND next_attempt_at <= NOW(6)
GROUP BY merchant_id, endpoint_id
ORDER BY MIN(next_attempt_at)
LIMIT ?`
	var rows []struct {
		MerchantID string `db:"merchant_id"`
		EndpointID string `db:"endpoint_id"`
	}
	if err := s.db.SelectContext(ctx, &rows, q, limit); err != nil {
		return nil, Classify(err)
	}
	out := make([]webhooks.EndpointRef, len(rows))
	for i, r := range rows {
		out[i] = webhooks.EndpointRef{MerchantID: r.MerchantID, ID: r.EndpointID}
	}
	return out, nil
}

type deliveryRow struct {
	MerchantID       string         `db:"merchant_id"`
	ID               string         `db:"id"`
	EndpointID       string         `db:"endpoint_id"`
	EventID          string         `db:"event_id"`
	Status           string         `db:"status"`
	Attempts         int            `db:"attempts"`
	NextAttemptAt    time.Time      `db:"next_attempt_at"`
	LeaseToken       int64          `db:"lease_token"`
	LastHTTPStatus   sql.NullInt64  `db:"last_http_status"`
	LastError        sql.NullString `db:"last_error"`
	FirstDeliveredAt sql.NullTime   `db:"first_delivered_at"`
	CreatedAt        time.Time      `db:"created_at"`
}

const deliveryColumns = `merchant_id, id, endpoint_id, event_id, status, attempts, next_attempt_at, lease_token,
    last_http_status, last_error, first_delivered_at, created_at`

func (r deliveryRow) toDomain() webhooks.Delivery {
	return webhooks.Delivery{
		ID: r.ID, MerchantID: r.MerchantID, EndpointID: r.EndpointID, EventID: r.EventID,
		Status: webhooks.DeliveryStatus(r.Status), Attempts: r.Attempts, NextAttemptAt: r.NextAttemptAt,
		LeaseToken: r.LeaseToken, LastHTTPStatus: int(r.LastHTTPStatus.Int64), LastError: r.LastError.String,
		FirstDeliveredAt: r.FirstDeliveredAt.Time, CreatedAt: r.CreatedAt,
	}
}

// ClaimDeliveries implements webhooks.DispatchStore. The endpoint's due
// deliveries that have waited longest are locked (SKIP LOCKED: another
// dispatcher's claim takes the next ones), their tokens bumped and their
// next attempts pushed to the lease's end, all on the database's clock, in
// one short transaction; their events are read in the same transaction (an
// event never changes, and a plain read locks nothing another claim needs).
// The endpoint is read first, with a locking read that a delete or a
// disabling waits for: the deliveries of an endpoint deleted or disabled
// (made beside the delete by a fan-out that read it enabled, on another
// Galera node say) are failed, never claimed nor POSTed.
// A delivery whose event is gone (purged while webhooks resend made it) has
// failed for good: it is marked so, with the reason, and the others are
// claimed, so that one bad delivery never stops its endpoint's queue.
func (s *Store) ClaimDeliveries(ctx context.Context, ref webhooks.EndpointRef, limit int, lease time.Duration) (_ []webhooks.Claimed, err error) {
	defer errs.Wrap(&err, "Store.ClaimDeliveries")
	var out []webhooks.Claimed
	err = Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		out = nil
		if gone, err := endpointGone(ctx, tx, ref); err != nil || gone != "" {
			if err != nil {
				return err
			}
			return failPending(ctx, tx, ref.MerchantID, ref.ID, gone)
		}
		var rows []struct {
			deliveryRow
			DBNow time.Time `db:"db_now"`
		}
		const q = `SELECT ` + deliveryColumns + `, NOW(6) AS db_now FROM webhook_deliveries
WHERE merchant_id = ? AND endpoint_id = ? AND status = 'pending' AND next_attempt_at <= NOW(6)
ORDER BY next_attempt_at, id LIMIT ? FOR UPDATE SKIP LOCKED`
		if err := tx.SelectContext(ctx, &rows, q, ref.MerchantID, ref.ID, limit); err != nil || len(rows) == 0 {
			return err
		}
		ids := make([]any, 0, len(rows))
		evIDs := make([]any, 0, len(rows))
		marks := make([]string, len(rows))
		for i, r := range rows {
			ids, evIDs, marks[i] = append(ids, r.ID), append(evIDs, r.EventID), "?"
		}
		in := strings.Join(marks, ", ")
		const upd = `
UPDATE webhook_deliveries
SET lease_token = lease_token + 1, lease_until = NOW(6) + INTERVAL ? MICROSECOND,
    next_attempt_at = NOW(6) + INTERVAL ? MICROSECOND, updated_at = NOW(6)
WHERE merchant_id = ? AND id IN (`
		args := append([]any{lease.Microseconds(), lease.Microseconds(), ref.MerchantID}, ids...)
		if _, err := tx.ExecContext(ctx, upd+in+`)`, args...); err != nil {
			return err
		}
		var evs []eventRow
		if err := tx.SelectContext(ctx, &evs, `SELECT `+eventColumns+` FROM events WHERE merchant_id = ? AND id IN (`+in+`)`,
			append([]any{ref.MerchantID}, evIDs...)...); err != nil {
			return err
		}
		byID := make(map[string]eventRow, len(evs))
		for _, ev := range evs {
			byID[ev.ID] = ev
		}
		var gone []any
		for _, r := range rows {
			ev, ok := byID[r.EventID]
			if !ok {
				gone = append(gone, r.ID)
				continue
			}
			c := webhooks.Claimed{Delivery: r.toDomain(), DBNow: r.DBNow, Event: webhooks.Event{ID: ev.ID, MerchantID: ev.MerchantID,
				Type: ev.Type, ObjectType: ev.ObjectType, ObjectID: ev.ObjectID, Seq: ev.Seq, Data: []byte(ev.Data),
				DataVersion: string(versions.OrFirst(ev.DataVersion.String)), CreatedAt: ev.CreatedAt}}
			c.Delivery.LeaseToken++
			out = append(out, c)
		}
		return failGone(ctx, tx, ref.MerchantID, gone)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// endpointGone says why the endpoint's deliveries can no longer be made
// ("endpoint deleted" or "endpoint disabled"), or "" while it is enabled.
func endpointGone(ctx context.Context, tx *sqlx.Tx, ref webhooks.EndpointRef) (string, error) {
	var status string
	err := tx.GetContext(ctx, &status, `SELECT status FROM webhook_endpoints WHERE merchant_id = ? AND id = ? LOCK IN SHARE MODE`, ref.MerchantID, ref.ID)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return "endpoint deleted", nil
	case err != nil:
		return "", err
	case status != string(webhooks.Enabled):
		return "endpoint disabled", nil
	}
	return "", nil
}

// eventGone is the reason a delivery whose event was purged has failed.
const eventGone = "its event was purged before it could be delivered"

// failGone fails the claimed deliveries ids, whose events are gone.
func failGone(ctx context.Context, tx *sqlx.Tx, merchantID string, ids []any) error {
	if len(ids) == 0 {
		return nil
	}
	q := `UPDATE webhook_deliveries SET status = 'failed', last_error = ?, lease_until = NULL, updated_at = NOW(6)
WHERE merchant_id = ? AND id IN (?` + strings.Repeat(", ?", len(ids)-1) + `)`
	_, err := tx.ExecContext(ctx, q, append([]any{eventGone, merchantID}, ids...)...)
	return err
}

// RecordDelivered implements webhooks.DispatchStore: fenced on the claim's
// token, so that a dispatcher whose lease ran out records nothing over the
// next one's attempt; the attempt is logged in the same transaction.
func (s *Store) RecordDelivered(ctx context.Context, d webhooks.Delivery, httpStatus int, latency time.Duration, endFailing bool) (_ bool, err error) {
	defer errs.Wrap(&err, "Store.RecordDelivered")
	const q = `
UPDATE webhook_deliveries
SET status = 'delivered', attempts = attempts + 1, last_http_status = ?, last_error = NULL, lease_until = NULL,
    first_delivered_at = COALESCE(first_delivered_at, NOW(6)), updated_at = NOW(6)
WHERE merchant_id = ? AND id = ? AND lease_token = ? AND status = 'pending'`
	var recorded bool
	err = Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		res, err := tx.ExecContext(ctx, q, httpStatus, d.MerchantID, d.ID, d.LeaseToken)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if recorded = n == 1; !recorded {
			return nil
		}
		if err := logAttempt(ctx, tx, d, httpStatus, latency, "", webhooks.AttemptDelivered); err != nil {
			return err
		}
		if !endFailing {
			return nil
		}
		_, err = tx.ExecContext(ctx, `UPDATE webhook_endpoints SET failing_since = NULL WHERE merchant_id = ? AND id = ? AND failing_since IS NOT NULL`,
			d.MerchantID, d.EndpointID)
		return err
	})
	if err != nil {
		return false, ClassifyWrite(err)
	}
	return recorded, nil
}

// logAttempt writes the attempt just recorded on d to the delivery log,
// from the row the record left (its count of attempts, its status and next
// attempt), in the record's transaction.
func logAttempt(ctx context.Context, tx *sqlx.Tx, d webhooks.Delivery, httpStatus int, latency time.Duration, msg string, o webhooks.AttemptOutcome) error {
	var row struct {
		Attempts int          `db:"attempts"`
		Next     sql.NullTime `db:"next_at"`
	}
	if err := tx.GetContext(ctx, &row, `SELECT attempts, IF(status = 'pending', next_attempt_at, NULL) AS next_at
FROM webhook_deliveries WHERE merchant_id = ? AND id = ?`, d.MerchantID, d.ID); err != nil {
		return err
	}
	status := sql.NullInt64{Int64: int64(httpStatus), Valid: httpStatus != 0}
	_, err := tx.ExecContext(ctx, `
INSERT INTO webhook_delivery_attempts (merchant_id, delivery_id, attempt, attempted_at, latency_us, http_status, error, outcome, next_attempt_at)
VALUES (?, ?, ?, NOW(6) - INTERVAL ? MICROSECOND, ?, ?, ?, ?, ?)`,
		d.MerchantID, d.ID, row.Attempts, latency.Microseconds(), latency.Microseconds(), status, nullString(msg), string(o), row.Next)
	return err
}

// RecordFailed implements webhooks.DispatchStore. On the database's clock:
// the next attempt is due after wait, unless that is past the delivery's
// creation plus f.MaxAge (then it has failed); the endpoint's run of
// failures starts now if none had; an endpoint failing for
// f.DisableAfter is disabled and its pending deliveries fail with it.
func (s *Store) RecordFailed(ctx context.Context, d webhooks.Delivery, f webhooks.Failure) (_ webhooks.FailureOutcome, err error) {
	defer errs.Wrap(&err, "Store.RecordFailed")
	const q = `
UPDATE webhook_deliveries
SET attempts = attempts + 1, last_http_status = ?, last_error = ?, lease_until = NULL, updated_at = NOW(6),
    status = IF(created_at + INTERVAL ? MICROSECOND < NOW(6) + INTERVAL ? MICROSECOND, 'failed', 'pending'),
    next_attempt_at = NOW(6) + INTERVAL ? MICROSECOND
WHERE merchant_id = ? AND id = ? AND lease_token = ? AND status = 'pending'`
	var out webhooks.FailureOutcome
	err = Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		out = webhooks.FailureOutcome{}
		status := sql.NullInt64{Int64: int64(f.HTTPStatus), Valid: f.HTTPStatus != 0}
		msg := f.Error
		if len(msg) > 500 {
			msg = msg[:500]
		}
		res, err := tx.ExecContext(ctx, q, status, msg, f.MaxAge.Microseconds(), f.Wait.Microseconds(), f.Wait.Microseconds(),
			d.MerchantID, d.ID, d.LeaseToken)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return err // fenced out: the next claim's attempt is the one that counts
		}
		out.Recorded = true
		if err := endpointFailing(ctx, tx, d, f, &out); err != nil {
			return err
		}
		// Logged once the record, and a disabling with it, is done: the
		// log's next attempt is the one the delivery is left with.
		return logAttempt(ctx, tx, d, f.HTTPStatus, f.Latency, msg, webhooks.AttemptFailed)
	})
	if err != nil {
		return webhooks.FailureOutcome{}, ClassifyWrite(err)
	}
	return out, nil
}

// endpointFailing reads the status a failed attempt's record left its
// delivery in, starts the endpoint's run of failures if none had, and
// disables an endpoint failing for f.DisableAfter, failing its pending
// deliveries with it.
func endpointFailing(ctx context.Context, tx *sqlx.Tx, d webhooks.Delivery, f webhooks.Failure, out *webhooks.FailureOutcome) error {
	const disable = `
UPDATE webhook_endpoints SET status = 'disabled', disabled_reason = ?, updated_at = NOW(6)
WHERE merchant_id = ? AND id = ? AND status = 'enabled' AND failing_since <= NOW(6) - INTERVAL ? MICROSECOND`
	var st string
	if err := tx.GetContext(ctx, &st, `SELECT status FROM webhook_deliveries WHERE merchant_id = ? AND id = ?`, d.MerchantID, d.ID); err != nil {
		return err
	}
	out.Status = webhooks.DeliveryStatus(st)
	if _, err := tx.ExecContext(ctx, `UPDATE webhook_endpoints SET failing_since = COALESCE(failing_since, NOW(6)) WHERE merchant_id = ? AND id = ?`,
		d.MerchantID, d.EndpointID); err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, disable, f.DisableReason, d.MerchantID, d.EndpointID, f.DisableAfter.Microseconds())
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 0 {
		return err
	}
	out.Disabled = true
	if out.Status == webhooks.Pending {
		out.Status = webhooks.Failed
	}
	return failPending(ctx, tx, d.MerchantID, d.EndpointID, "endpoint disabled")
}

// DeliveryBacklog implements webhooks.DispatchStore: gauges over every
// merchant (a scatter, for metrics).
func (s *Store) DeliveryBacklog(ctx context.Context) (_ webhooks.Backlog, err error) {
	defer errs.Wrap(&err, "Store.DeliveryBacklog")
	var b webhooks.Backlog
	var r struct {
		Pending int64         `db:"pending"`
		Due     int64         `db:"due"`
		Oldest  sql.NullInt64 `db:"oldest_us"`
	}
	const q = `
SELECT COUNT(*) AS pending, COALESCE(SUM(next_attempt_at <= NOW(6)), 0) AS due,
       TIMESTAMPDIFF(MICROSECOND, MIN(created_at), NOW(6)) AS oldest_us
FROM webhook_deliveries WHERE status = 'pending'`
	if err := s.db.GetContext(ctx, &r, q); err != nil {
		return b, Classify(err)
	}
	var e struct {
		Waiting int64         `db:"waiting"`
		Oldest  sql.NullInt64 `db:"oldest_us"`
	}
	const eq = `
SELECT COUNT(*) AS waiting, TIMESTAMPDIFF(MICROSECOND, MIN(created_at), NOW(6)) AS oldest_us
FROM events WHERE fanned_out = 0`
	if err := s.db.GetContext(ctx, &e, eq); err != nil {
		return b, Classify(err)
	}
	b.Pending, b.Due, b.NotFannedOut = r.Pending, r.Due, e.Waiting
	oldest := max(r.Oldest.Int64, e.Oldest.Int64)
	b.OldestUndelivered = time.Duration(oldest) * time.Microsecond
	return b, nil
}
