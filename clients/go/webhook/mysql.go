package webhook

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"iter"
	"reflect"
	"strings"
)

// MySQLInbox is an Inbox in the merchant's MySQL or MariaDB database, over
// database/sql: the caller opens db with the driver of its choice. Each
// handled event is a row of gateway_webhook_inbox, inserted in the
// transaction of the merchant's change; the primary key decides between
// two deliveries of one event.
type MySQLInbox struct {
	db *sql.DB
}

var _ Inbox[*sql.Tx] = (*MySQLInbox)(nil)

// NewMySQLInbox returns the inbox in db; CreateTable makes its table.
func NewMySQLInbox(db *sql.DB) *MySQLInbox {
	return &MySQLInbox{db: db}
}

// MySQLInboxTable is the inbox's table, for the merchant's own migrations.
const MySQLInboxTable = `CREATE TABLE IF NOT EXISTS gateway_webhook_inbox (
  event_id VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin PRIMARY KEY,
  received_at DATETIME(6) NOT NULL
) ENGINE=InnoDB`

// CreateTable creates the inbox's table unless it exists.
func (m *MySQLInbox) CreateTable(ctx context.Context) error {
	if _, err := m.db.ExecContext(ctx, MySQLInboxTable); err != nil {
		return fmt.Errorf("webhook: create gateway_webhook_inbox: %w", err)
	}
	return nil
}

// Begin opens a transaction on the inbox's database.
func (m *MySQLInbox) Begin(ctx context.Context) (*sql.Tx, error) {
	tx, err := m.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("webhook: begin: %w", err)
	}
	return tx, nil
}

// Record inserts eventID's row in tx; false when the row exists (MySQL's
// error 1062, a duplicate key). The insert of an event another transaction
// is recording waits for that one to end.
func (m *MySQLInbox) Record(ctx context.Context, tx *sql.Tx, eventID string) (bool, error) {
	if eventID == "" || len(eventID) > 64 {
		return false, fmt.Errorf("webhook: event id %q cannot be recorded (1 to 64 ASCII characters)", eventID)
	}
	const q = `INSERT INTO gateway_webhook_inbox (event_id, received_at) VALUES (?, UTC_TIMESTAMP(6))`
	_, err := tx.ExecContext(ctx, q, eventID)
	switch {
	case err == nil:
		return true, nil
	case duplicateKey(err):
		return false, nil
	default:
		return false, fmt.Errorf("webhook: record event %s: %w", eventID, err)
	}
}

// Commit commits tx.
func (m *MySQLInbox) Commit(tx *sql.Tx) error { return tx.Commit() }

// Rollback rolls tx back.
func (m *MySQLInbox) Rollback(tx *sql.Tx) error {
	if err := tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return err
	}
	return nil
}

// erDupEntry is MySQL's and MariaDB's ER_DUP_ENTRY.
const erDupEntry = 1062

// duplicateKey reports whether err is MySQL's error 1062, without importing
// a driver: a Number() method (as some drivers have), a uint16 Number field
// (go-sql-driver/mysql's *MySQLError), or the server's text "Error 1062".
func duplicateKey(err error) bool {
	for e := range chain(err) {
		if n, ok := e.(interface{ Number() uint16 }); ok && n.Number() == erDupEntry {
			return true
		}
		v := reflect.ValueOf(e)
		if v.Kind() == reflect.Pointer && !v.IsNil() {
			v = v.Elem()
		}
		if v.Kind() == reflect.Struct {
			if f := v.FieldByName("Number"); f.IsValid() && f.Kind() == reflect.Uint16 && f.Uint() == erDupEntry {
				return true
			}
		}
	}
	return strings.Contains(err.Error(), "Error 1062")
}

// chain yields err and every error it wraps.
func chain(err error) iter.Seq[error] {
	return func(yield func(error) bool) {
		var walk func(error) bool
		walk = func(e error) bool {
			if e == nil {
				return true
			}
			if !yield(e) {
				return false
			}
			switch u := e.(type) {
			case interface{ Unwrap() error }:
				return walk(u.Unwrap())
			case interface{ Unwrap() []error }:
				for _, x := range u.Unwrap() {
					if !walk(x) {
						return false
					}
				}
			}
			return true
		}
		walk(err)
	}
}
