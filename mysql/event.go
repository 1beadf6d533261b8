package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"gateway/errs"
	"gateway/listings"
	"gateway/payments"
	"gateway/versions"
)

// The outbox: every state change of a payment or a refund writes its event
// in the transaction that makes the change, so that there is no change
// without its event and no event without its change. The object's
// event_seq is bumped in the same transaction: an object's events are
// numbered 1, 2, … with no gap, in the order of its changes (its row lock
// orders them).

// eventRow is a stored event.
type eventRow struct {
	Pos        int64  `db:"pos"`
	ID         string `db:"id"`
	MerchantID string `db:"merchant_id"`
	Type       string `db:"type"`
	ObjectType string `db:"object_type"`
	ObjectID   string `db:"object_id"`
	Seq        int64  `db:"seq"`
	Data       string `db:"data"`
	// DataVersion is NULL for events written before versions: the first.
	DataVersion sql.NullString `db:"data_version"`
	CreatedAt   time.Time      `db:"created_at"`
}

const eventColumns = `pos, id, merchant_id, type, object_type, object_id, seq, data, data_version, created_at`

func (r eventRow) toDomain() payments.Event {
	return payments.Event{
		Pos: r.Pos, ID: r.ID, MerchantID: r.MerchantID, Type: payments.EventType(r.Type),
		ObjectType: r.ObjectType, ObjectID: r.ObjectID, Seq: r.Seq, Data: []byte(r.Data),
		DataVersion: string(versions.OrFirst(r.DataVersion.String)), CreatedAt: r.CreatedAt,
	}
}

// InsertEvent writes e in tx, stamped with the database's clock, and
// returns its position. e.Seq must be the object's event_seq as bumped in
// tx; e.ID is made when empty. Tests and benchmarks seed events with it.
func InsertEvent(ctx context.Context, tx *sqlx.Tx, e payments.Event) (int64, error) {
	const stmt = `
INSERT INTO events (id, merchant_id, type, object_type, object_id, seq, data, data_version, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, NOW(6))`
	if e.ID == "" {
		e.ID = payments.NewEventID()
	}
	if e.DataVersion == "" {
		e.DataVersion = string(versions.Latest)
	}
	res, err := tx.ExecContext(ctx, stmt, e.ID, e.MerchantID, string(e.Type), e.ObjectType, e.ObjectID, e.Seq, string(e.Data), e.DataVersion)
	if err != nil {
		return 0, fmt.Errorf("insert event %s of %s %s: %w", e.Type, e.ObjectType, e.ObjectID, err)
	}
	return res.LastInsertId()
}

// insertEvent writes the event the domain rendered for a change tx made,
// numbered seq: the object's event_seq as the change took it.
func insertEvent(ctx context.Context, tx *sqlx.Tx, e payments.Event, seq int64) error {
	e.Seq = seq
	_, err := InsertEvent(ctx, tx, e)
	return err
}

// bumpEventSeq is the assignment that takes an object's next event number,
// in the UPDATE of one row that changes its status; bumped reads the number
// back from the statement's own result (LAST_INSERT_ID(expr) is what the
// server reports as the statement's insert id), with no further read. The
// row stays locked until the transaction ends, so numbers never repeat.
const bumpEventSeq = `event_seq = LAST_INSERT_ID(event_seq + 1)`

// bumped is the event number an UPDATE with bumpEventSeq took, or errFenced
// when it matched no row.
func bumped(res sql.Result, err error) (int64, error) {
	if err := exactlyOne(res, err); err != nil {
		return 0, err
	}
	return res.LastInsertId()
}

// LogEvents implements listings.Store: it gives up to limit of the
// merchant's committed events their place in its events listing (log_pos),
// numbered on from the merchant's counter (event_log), in one short
// transaction. The counter is taken with SKIP LOCKED: while another request
// holds it, LogEvents does nothing (that one is placing the same events).
// The events are read with a locking read, which sees every event committed
// so far and skips those an open transaction still holds: one that commits
// later is placed later, after every position a consumer may already have
// paged past. On a Galera cluster two nodes may take the counter at once;
// certification lets one of them commit, and the other runs again.
func (s *Store) LogEvents(ctx context.Context, merchantID string, limit int) (n int, err error) {
	defer errs.Wrap(&err, "Store.LogEvents")
	for range 2 {
		var missing bool
		// READ COMMITTED: the locking read of unplaced events locks the rows
		// it returns and no gap, so events being inserted are not held up.
		err = TransactReadCommitted(ctx, s.db, func(tx *sqlx.Tx) error {
			n, missing = 0, false
			var next int64
			err := tx.GetContext(ctx, &next, `SELECT next_pos FROM event_log WHERE merchant_id = ? FOR UPDATE SKIP LOCKED`, merchantID)
			if errors.Is(err, sql.ErrNoRows) {
				// Held by another request, or not made yet.
				var held int
				if err := tx.GetContext(ctx, &held, `SELECT COUNT(*) FROM event_log WHERE merchant_id = ?`, merchantID); err != nil {
					return err
				}
				missing = held == 0
				return nil
			}
			if err != nil {
				return err
			}
			var pending []int64
			if err := tx.SelectContext(ctx, &pending, `SELECT pos FROM events WHERE merchant_id = ? AND log_pos IS NULL ORDER BY pos LIMIT ? FOR UPDATE SKIP LOCKED`,
				merchantID, limit); err != nil {
				return err
			}
			if len(pending) == 0 {
				return nil
			}
			var (
				set  strings.Builder
				args []any
				in   = make([]string, len(pending))
			)
			set.WriteString("CASE pos")
			for i, pos := range pending {
				set.WriteString(" WHEN ? THEN ?")
				args = append(args, pos, next+int64(i))
				in[i] = "?"
			}
			set.WriteString(" END")
			args = append(args, merchantID)
			for _, pos := range pending {
				args = append(args, pos)
			}
			if _, err := tx.ExecContext(ctx, `UPDATE events SET log_pos = `+set.String()+` WHERE merchant_id = ? AND pos IN (`+strings.Join(in, ", ")+`)`, args...); err != nil {
				return err
			}
			n = len(pending)
			return exactlyOne(tx.ExecContext(ctx, `UPDATE event_log SET next_pos = ? WHERE merchant_id = ?`, next+int64(n), merchantID))
		})
		if err != nil || !missing {
			return n, err
		}
		// The merchant's first listing: its counter starts after what the
		// events written before the listing existed hold (their pos).
		var last sql.NullInt64
		if err := s.reads.get(ctx, s.db, &last, `SELECT MAX(log_pos) FROM events WHERE merchant_id = ?`, merchantID); err != nil {
			return 0, err
		}
		if _, err := s.db.ExecContext(ctx, `INSERT IGNORE INTO event_log (merchant_id, next_pos) VALUES (?, ?)`, merchantID, last.Int64+1); err != nil {
			return 0, Classify(err)
		}
	}
	return n, nil
}

// MerchantEvents implements listings.Store: a page of the merchant's
// events in the order of the events listing (log_pos), after the cursor's,
// on the index events_merchant, events_merchant_type when filtered by type,
// events_object_seq when filtered by object (whose handful of events are
// then sorted). Events not placed yet (LogEvents) are not listed. Its reads
// are bounded on the server by the request's deadline.
func (s *Store) MerchantEvents(ctx context.Context, q listings.EventQuery) (_ listings.Page[payments.Event], err error) {
	defer errs.Wrap(&err, "Store.MerchantEvents")
	conds, args := []string{"merchant_id = ?", "log_pos IS NOT NULL"}, []any{q.MerchantID}
	if q.StartingAfter != "" {
		var pos sql.NullInt64
		err := s.reads.get(ctx, s.db, &pos, `SELECT log_pos FROM events WHERE merchant_id = ? AND id = ?`, q.MerchantID, q.StartingAfter)
		if errors.Is(err, sql.ErrNoRows) {
			return listings.Page[payments.Event]{}, listings.ErrCursorNotFound
		}
		if err != nil {
			return listings.Page[payments.Event]{}, fmt.Errorf("cursor: %w", err)
		}
		if !pos.Valid {
			// The cursor's event (a webhook's, say) is not placed yet: the
			// events after it will be once it is.
			return listings.Page[payments.Event]{Items: []payments.Event{}}, nil
		}
		conds, args = append(conds, "log_pos > ?"), append(args, pos.Int64)
	}
	index := "events_merchant"
	if q.Type != "" {
		conds, args, index = append(conds, "type = ?"), append(args, string(q.Type)), "events_merchant_type"
	}
	if q.ObjectID != "" {
		conds, args, index = append(conds, "object_id = ?"), append(args, q.ObjectID), "events_object_seq"
	}
	var rows []eventRow
	if err := s.reads.sel(ctx, s.db, &rows, `SELECT `+eventColumns+` FROM events FORCE INDEX (`+index+`) WHERE `+strings.Join(conds, " AND ")+
		` ORDER BY log_pos LIMIT ?`, append(args, q.Limit+1)...); err != nil {
		return listings.Page[payments.Event]{}, err
	}
	page := listings.Page[payments.Event]{HasMore: len(rows) > q.Limit, Items: make([]payments.Event, 0, q.Limit)}
	for _, r := range rows[:min(len(rows), q.Limit)] {
		page.Items = append(page.Items, r.toDomain())
	}
	return page, nil
}

// MerchantEvent implements listings.Store.
func (s *Store) MerchantEvent(ctx context.Context, merchantID, id string) (_ payments.Event, err error) {
	defer errs.Wrap(&err, "Store.MerchantEvent")
	var r eventRow
	err = s.reads.get(ctx, s.db, &r, `SELECT `+eventColumns+` FROM events WHERE merchant_id = ? AND id = ?`, merchantID, id)
	if errors.Is(err, sql.ErrNoRows) {
		return payments.Event{}, errs.ErrNotFound
	}
	if err != nil {
		return payments.Event{}, err
	}
	return r.toDomain(), nil
}

// PurgeEvents implements reconcile.Store: deletes the events written
// longer than retention ago by the database's clock among the next limit
// after the cursor (in the order of events_created), keeping every event
// with a webhook delivery still pending, however old. Each merchant's share
// is deleted in a transaction of its own that first reads its pending
// deliveries with a locking read, so that a delivery made meanwhile (by
// webhooks resend) waits for the delete and then finds its event gone: a
// delivery never outlives its event by the purge, and ClaimDeliveries
// fails one whose event went another way. done says the walk is over.
func (s *Store) PurgeEvents(ctx context.Context, retention time.Duration, after payments.EventPurgeCursor, limit int) (_ int64, _ payments.EventPurgeCursor, done bool, err error) {
	defer errs.Wrap(&err, "Store.PurgeEvents")
	const pick = `SELECT pos, merchant_id, id, created_at FROM events
WHERE created_at < NOW(6) - INTERVAL ? MICROSECOND AND (created_at > ? OR (created_at = ? AND pos > ?))
ORDER BY created_at, pos LIMIT ?`
	var rows []struct {
		Pos        int64     `db:"pos"`
		MerchantID string    `db:"merchant_id"`
		ID         string    `db:"id"`
		CreatedAt  time.Time `db:"created_at"`
	}
	if err := s.db.SelectContext(ctx, &rows, pick, micros(retention), after.CreatedAt, after.CreatedAt, after.Pos, limit); err != nil {
		return 0, after, false, Classify(err)
	}
	if len(rows) == 0 {
		return 0, after, true, nil
	}
	byMerchant := map[string][]string{}
	var merchants []string
	for _, r := range rows {
		if _, ok := byMerchant[r.MerchantID]; !ok {
			merchants = append(merchants, r.MerchantID)
		}
		byMerchant[r.MerchantID] = append(byMerchant[r.MerchantID], r.ID)
	}
	sort.Strings(merchants)
	var total int64
	for _, m := range merchants {
		n, err := s.purgeMerchantEvents(ctx, m, byMerchant[m], retention)
		total += n
		if err != nil {
			return total, after, false, err
		}
	}
	last := rows[len(rows)-1]
	return total, payments.EventPurgeCursor{CreatedAt: last.CreatedAt, Pos: last.Pos}, len(rows) < limit, nil
}

// purgeMerchantEvents deletes those of the merchant's events ids that are
// still past retention and have no delivery pending.
func (s *Store) purgeMerchantEvents(ctx context.Context, merchantID string, ids []string, retention time.Duration) (int64, error) {
	var n int64
	err := Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		n = 0
		in, args := inList(merchantID, ids)
		var pending []string
		if err := tx.SelectContext(ctx, &pending, `SELECT DISTINCT event_id FROM webhook_deliveries
WHERE merchant_id = ? AND status = 'pending' AND event_id IN (`+in+`) LOCK IN SHARE MODE`, args...); err != nil {
			return err
		}
		keep := make(map[string]bool, len(pending))
		for _, id := range pending {
			keep[id] = true
		}
		var gone []string
		for _, id := range ids {
			if !keep[id] {
				gone = append(gone, id)
			}
		}
		if len(gone) == 0 {
			return nil
		}
		in, args = inList(merchantID, gone)
		res, err := tx.ExecContext(ctx, `DELETE FROM events WHERE merchant_id = ? AND id IN (`+in+`) AND created_at < NOW(6) - INTERVAL ? MICROSECOND`,
			append(args, micros(retention))...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

// inList is the placeholders of ids and the arguments merchantID, ids….
func inList(merchantID string, ids []string) (string, []any) {
	args := make([]any, 0, len(ids)+1)
	args = append(args, merchantID)
	for _, id := range ids {
		args = append(args, id)
	}
	return "?" + strings.Repeat(", ?", len(ids)-1), args
}

// PurgeDeliveries implements reconcile.Store: deletes up to limit webhook
// deliveries that ended (delivered or failed) and were last due longer than
// retention ago by the database's clock, then, while the batch has room,
// the delivery log's attempts made longer than retention ago. Pending
// deliveries are never purged.
func (s *Store) PurgeDeliveries(ctx context.Context, retention time.Duration, limit int) (_ int64, err error) {
	defer errs.Wrap(&err, "Store.PurgeDeliveries")
	const stmt = `
DELETE FROM webhook_deliveries
WHERE status IN ('delivered', 'failed') AND next_attempt_at < NOW(6) - INTERVAL ? MICROSECOND
LIMIT ?`
	n, err := deleted(s.db.ExecContext(ctx, stmt, micros(retention), limit))
	if err != nil || n >= int64(limit) {
		return n, err
	}
	const attempts = `DELETE FROM webhook_delivery_attempts WHERE attempted_at < NOW(6) - INTERVAL ? MICROSECOND LIMIT ?`
	m, err := deleted(s.db.ExecContext(ctx, attempts, micros(retention), limit-int(n)))
	return n + m, err
}

// deleted is how many rows a DELETE took.
func deleted(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, Classify(err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, Classify(err)
	}
	return n, nil
}
