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
// tx; e.ID is made when empty. Other packages' stores (deliveries, endpoint
// changes) call it in their own transactions.
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

// paymentEvent writes the event of the payment's change that tx just made
// with an UPDATE that also took its next event number (bumpEventSeq; the
// row stays locked until tx ends, so numbers never repeat): the payment is
// rendered as tx now sees it. It returns the payment so rendered.
func paymentEvent(ctx context.Context, tx *sqlx.Tx, merchantID, id string) (payments.Payment, error) {
	var r struct {
		paymentRow
		Seq int64 `db:"event_seq"`
	}
	if err := tx.GetContext(ctx, &r, `SELECT `+paymentColumns+`, event_seq FROM payments WHERE merchant_id = ? AND id = ?`, merchantID, id); err != nil {
		return payments.Payment{}, err
	}
	p, err := r.toDomain()
	if err != nil {
		// A row whose metadata or next action cannot be decoded (the expiry
		// cancels such payments all the same) still has its event: with
		// what can be read of it.
		r.Metadata, r.NextAction = sql.NullString{}, sql.NullString{}
		if p, err = r.toDomain(); err != nil {
			return payments.Payment{}, err
		}
	}
	_, err = InsertEvent(ctx, tx, payments.Event{
		MerchantID: p.MerchantID, Type: payments.PaymentEventType(p.Status), ObjectType: payments.ObjectPayment,
		ObjectID: p.ID, Seq: r.Seq, Data: payments.PaymentEventData(p),
	})
	return p, err
}

// refundEvent is paymentEvent for a refund.
func refundEvent(ctx context.Context, tx *sqlx.Tx, merchantID, id string) (payments.Refund, error) {
	var r struct {
		refundRow
		Seq int64 `db:"event_seq"`
	}
	if err := tx.GetContext(ctx, &r, `SELECT `+refundColumns+`, event_seq FROM refunds WHERE merchant_id = ? AND id = ?`, merchantID, id); err != nil {
		return payments.Refund{}, err
	}
	x, err := r.toDomain()
	if err != nil {
		return payments.Refund{}, err
	}
	_, err = InsertEvent(ctx, tx, payments.Event{
		MerchantID: x.MerchantID, Type: payments.RefundEventType(x.Status), ObjectType: payments.ObjectRefund,
		ObjectID: x.ID, Seq: r.Seq, Data: payments.RefundEventData(x),
	})
	return x, err
}

// bumpEventSeq is the assignment that takes an object's next event number,
// in the UPDATE that changes its status: paymentEvent or refundEvent then
// writes the event with it, in the same transaction.
const bumpEventSeq = `event_seq = event_seq + 1`

// createdEvent writes the first event of an object tx just inserted with
// event_seq 1, rendered from what tx inserted.
func createdEvent(ctx context.Context, tx *sqlx.Tx, e payments.Event) error {
	e.Seq = 1
	_, err := InsertEvent(ctx, tx, e)
	return err
}

// MerchantEvents implements payments.ListStore: a page of the merchant's
// events in the order they were written (pos), after the cursor's, on the
// index events_merchant.
func (s *Store) MerchantEvents(ctx context.Context, q payments.EventQuery) (payments.Page[payments.Event], error) {
	conds, args := []string{"merchant_id = ?"}, []any{q.MerchantID}
	if q.StartingAfter != "" {
		var pos int64
		err := s.db.GetContext(ctx, &pos, `SELECT pos FROM events WHERE merchant_id = ? AND id = ?`, q.MerchantID, q.StartingAfter)
		if errors.Is(err, sql.ErrNoRows) {
			return payments.Page[payments.Event]{}, payments.ErrCursorNotFound
		}
		if err != nil {
			return payments.Page[payments.Event]{}, fmt.Errorf("store.MerchantEvents: cursor: %w", Classify(err))
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
		return payments.Page[payments.Event]{}, fmt.Errorf("store.MerchantEvents: %w", Classify(err))
	}
	page := payments.Page[payments.Event]{HasMore: len(rows) > q.Limit, Items: make([]payments.Event, 0, q.Limit)}
	for _, r := range rows[:min(len(rows), q.Limit)] {
		page.Items = append(page.Items, r.toDomain())
	}
	return page, nil
}

// MerchantEvent implements payments.ListStore.
func (s *Store) MerchantEvent(ctx context.Context, merchantID, id string) (payments.Event, error) {
	var r eventRow
	err := s.db.GetContext(ctx, &r, `SELECT `+eventColumns+` FROM events WHERE merchant_id = ? AND id = ?`, merchantID, id)
	if errors.Is(err, sql.ErrNoRows) {
		return payments.Event{}, errs.ErrNotFound
	}
	if err != nil {
		return payments.Event{}, fmt.Errorf("store.MerchantEvent: %w", Classify(err))
	}
	return r.toDomain(), nil
}

// PurgeEvents implements reconcile.Store: deletes up to limit events
// written longer than retention ago by the database's clock.
func (s *Store) PurgeEvents(ctx context.Context, retention time.Duration, limit int) (int64, error) {
	const stmt = `DELETE FROM events WHERE created_at < NOW(6) - INTERVAL ? MICROSECOND ORDER BY created_at LIMIT ?`
	res, err := s.db.ExecContext(ctx, stmt, micros(retention), limit)
	if err != nil {
		return 0, fmt.Errorf("store.PurgeEvents: %w", Classify(err))
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("store.PurgeEvents: %w", Classify(err))
	}
	return n, nil
}
