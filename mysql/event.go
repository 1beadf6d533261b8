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
	"gateway/payments"
)

// The outbox: every state change of a payment or a refund writes its event
// in the transaction that makes the change, so that there is no change
// without its event and no event without its change. The object's
// event_seq is bumped in the same transaction: an object's events are
// numbered 1, 2, … with no gap, in the order of its changes (its row lock
// orders them).

// eventRow is a stored event.
type eventRow struct {
	Pos        int64     `db:"pos"`
	ID         string    `db:"id"`
	MerchantID string    `db:"merchant_id"`
	Type       string    `db:"type"`
	ObjectType string    `db:"object_type"`
	ObjectID   string    `db:"object_id"`
	Seq        int64     `db:"seq"`
	Data       string    `db:"data"`
	CreatedAt  time.Time `db:"created_at"`
}

const eventColumns = `pos, id, merchant_id, type, object_type, object_id, seq, data, created_at`

func (r eventRow) toDomain() payments.Event {
	return payments.Event{
		Pos: r.Pos, ID: r.ID, MerchantID: r.MerchantID, Type: payments.EventType(r.Type),
		ObjectType: r.ObjectType, ObjectID: r.ObjectID, Seq: r.Seq, Data: []byte(r.Data), CreatedAt: r.CreatedAt,
	}
}

// InsertEvent writes e in tx, stamped with the database's clock, and
// returns its position. e.Seq must be the object's event_seq as bumped in
// tx; e.ID is made when empty. Tests and benchmarks seed events with it.
func InsertEvent(ctx context.Context, tx *sqlx.Tx, e payments.Event) (int64, error) {
	const stmt = `
INSERT INTO events (id, merchant_id, type, object_type, object_id, seq, data, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, NOW(6))`
	if e.ID == "" {
		e.ID = payments.NewEventID()
	}
	res, err := tx.ExecContext(ctx, stmt, e.ID, e.MerchantID, string(e.Type), e.ObjectType, e.ObjectID, e.Seq, string(e.Data))
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

// MerchantEvents implements payments.ListStore: a page of the merchant's
// events in the order they were written (pos), after the cursor's, on the
// index events_merchant.
func (s *Store) MerchantEvents(ctx context.Context, q payments.EventQuery) (_ payments.Page[payments.Event], err error) {
	defer errs.Wrap(&err, "Store.MerchantEvents")
	conds, args := []string{"merchant_id = ?"}, []any{q.MerchantID}
	if q.StartingAfter != "" {
		var pos int64
		err := s.db.GetContext(ctx, &pos, `SELECT pos FROM events WHERE merchant_id = ? AND id = ?`, q.MerchantID, q.StartingAfter)
		if errors.Is(err, sql.ErrNoRows) {
			return payments.Page[payments.Event]{}, payments.ErrCursorNotFound
		}
		if err != nil {
			return payments.Page[payments.Event]{}, fmt.Errorf("cursor: %w", Classify(err))
		}
		conds, args = append(conds, "pos > ?"), append(args, pos)
	}
	if q.Type != "" {
		conds, args = append(conds, "type = ?"), append(args, string(q.Type))
	}
	if q.ObjectID != "" {
		conds, args = append(conds, "object_id = ?"), append(args, q.ObjectID)
	}
	var rows []eventRow
	if err := s.db.SelectContext(ctx, &rows, `SELECT `+eventColumns+` FROM events WHERE `+strings.Join(conds, " AND ")+
		` ORDER BY pos LIMIT ?`, append(args, q.Limit+1)...); err != nil {
		return payments.Page[payments.Event]{}, Classify(err)
	}
	page := payments.Page[payments.Event]{HasMore: len(rows) > q.Limit, Items: make([]payments.Event, 0, q.Limit)}
	for _, r := range rows[:min(len(rows), q.Limit)] {
		page.Items = append(page.Items, r.toDomain())
	}
	return page, nil
}

// MerchantEvent implements payments.ListStore.
func (s *Store) MerchantEvent(ctx context.Context, merchantID, id string) (_ payments.Event, err error) {
	defer errs.Wrap(&err, "Store.MerchantEvent")
	var r eventRow
	err = s.db.GetContext(ctx, &r, `SELECT `+eventColumns+` FROM events WHERE merchant_id = ? AND id = ?`, merchantID, id)
	if errors.Is(err, sql.ErrNoRows) {
		return payments.Event{}, errs.ErrNotFound
	}
	if err != nil {
		return payments.Event{}, Classify(err)
	}
	return r.toDomain(), nil
}

// PurgeEvents implements reconcile.Store: deletes up to limit events
// written longer than retention ago by the database's clock.
func (s *Store) PurgeEvents(ctx context.Context, retention time.Duration, limit int) (_ int64, err error) {
	defer errs.Wrap(&err, "Store.PurgeEvents")
	const stmt = `DELETE FROM events WHERE created_at < NOW(6) - INTERVAL ? MICROSECOND ORDER BY created_at LIMIT ?`
	res, err := s.db.ExecContext(ctx, stmt, micros(retention), limit)
	if err != nil {
		return 0, Classify(err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, Classify(err)
	}
	return n, nil
}
