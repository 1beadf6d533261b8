package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strings"
	"sync"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"gateway/mysql"
)

// statement is one thing a connection was asked to do, as the server sees
// it: a statement's text (whitespace folded) and the kinds of its arguments,
// or BEGIN, COMMIT, ROLLBACK.
type statement struct {
	SQL  string
	Args []string
}

func (s statement) String() string {
	if len(s.Args) == 0 {
		return s.SQL
	}
	return s.SQL + "  -- args: " + strings.Join(s.Args, ",")
}

// recorder keeps every statement sent through the connections it made.
type recorder struct {
	mu   sync.Mutex
	list []statement
}

func (r *recorder) add(query string, args []driver.NamedValue) {
	s := statement{SQL: strings.Join(strings.Fields(query), " ")}
	for _, a := range args {
		kind := "NULL"
		if a.Value != nil {
			kind = fmt.Sprintf("%T", a.Value)
		}
		s.Args = append(s.Args, kind)
	}
	r.mu.Lock()
	r.list = append(r.list, s)
	r.mu.Unlock()
}

// take returns what was recorded since the last take.
func (r *recorder) take() []statement {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.list
	r.list = nil
	return out
}

// openRecorded opens dsn as mysql.Open configures a connection (mysql.Config's
// settings: interpolated parameters, found rows), one connection at a time,
// with every statement recorded.
func openRecorded(tb testing.TB, dsn string) (*sqlx.DB, *recorder) {
	tb.Helper()
	cfg, err := mysql.Config(dsn)
	if err != nil {
		tb.Fatal(err)
	}
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	rec := &recorder{}
	sdb := sql.OpenDB(recConnector{conn, rec})
	sdb.SetMaxOpenConns(1)
	tb.Cleanup(func() { _ = sdb.Close() })
	return sqlx.NewDb(sdb, "mysql"), rec
}

type recConnector struct {
	driver.Connector
	rec *recorder
}

func (c recConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &recConn{conn: conn, rec: c.rec}, nil
}

// recConn passes everything to the driver's connection, recording statements.
type recConn struct {
	conn driver.Conn
	rec  *recorder
}

func (c *recConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *recConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	return c.conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
}

func (c *recConn) Close() error { return c.conn.Close() }

func (c *recConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *recConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	tx, err := c.conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	c.rec.add("BEGIN", nil)
	return recTx{tx, c.rec}, nil
}

func (c *recConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	c.rec.add(query, args)
	return c.conn.(driver.ExecerContext).ExecContext(ctx, query, args)
}

func (c *recConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.rec.add(query, args)
	return c.conn.(driver.QueryerContext).QueryContext(ctx, query, args)
}

func (c *recConn) Ping(ctx context.Context) error { return c.conn.(driver.Pinger).Ping(ctx) }

func (c *recConn) ResetSession(ctx context.Context) error {
	return c.conn.(driver.SessionResetter).ResetSession(ctx)
}

func (c *recConn) IsValid() bool { return c.conn.(driver.Validator).IsValid() }

func (c *recConn) CheckNamedValue(nv *driver.NamedValue) error {
	return c.conn.(driver.NamedValueChecker).CheckNamedValue(nv)
}

type recTx struct {
	tx  driver.Tx
	rec *recorder
}

func (t recTx) Commit() error {
	t.rec.add("COMMIT", nil)
	return t.tx.Commit()
}

func (t recTx) Rollback() error {
	t.rec.add("ROLLBACK", nil)
	return t.tx.Rollback()
}
