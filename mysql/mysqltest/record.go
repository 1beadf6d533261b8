package mysqltest

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"gateway/mysql"
)

// Statement is one distinct statement text sent through a recording pool,
// with the functions on the stack of every call that sent it (innermost
// first; runtime, database/sql and driver frames left out).
type Statement struct {
	SQL     string
	Callers [][]string
}

// Recorder keeps the text of every statement sent through the pool that
// MustOpenRecorded returned, as the driver received it (placeholders, not
// values), and who sent it.
type Recorder struct {
	mu    sync.Mutex
	stmts map[string]*Statement
	seen  map[string]bool // SQL + callers, to keep each distinct caller chain once
}

// Statements returns every distinct statement recorded so far, by text.
func (r *Recorder) Statements() []Statement {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Statement, 0, len(r.stmts))
	for _, s := range r.stmts {
		out = append(out, Statement{SQL: s.SQL, Callers: append([][]string(nil), s.Callers...)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SQL < out[j].SQL })
	return out
}

func (r *Recorder) record(query string) {
	callers := callerFuncs()
	key := query + "\x00" + strings.Join(callers, "\x00")
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen[key] {
		return
	}
	r.seen[key] = true
	s := r.stmts[query]
	if s == nil {
		s = &Statement{SQL: query}
		r.stmts[query] = s
	}
	s.Callers = append(s.Callers, callers)
}

// callerFuncs names the functions that led to a statement. database/sql
// calls the driver on the caller's goroutine, so the stack reaches from the
// driver back to whoever ran the statement.
func callerFuncs() []string {
	pcs := make([]uintptr, 64)
	n := runtime.Callers(3, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	var out []string
	for {
		f, more := frames.Next()
		name := f.Function
		switch {
		case strings.HasPrefix(name, "runtime."), strings.HasPrefix(name, "database/sql."),
			strings.HasPrefix(name, "github.com/jmoiron/sqlx."), strings.HasPrefix(name, "gateway/mysql/mysqltest."):
		default:
			out = append(out, name)
		}
		if !more {
			return out
		}
	}
}

// MustOpenRecorded is MustOpen with every statement the pool sends recorded:
// a fresh migrated database, with the driver settings of mysql.Config, closed
// when the test ends.
func MustOpenRecorded(tb testing.TB) (*sqlx.DB, *Recorder) {
	tb.Helper()
	dsn := MustDSN(tb)
	cfg, err := mysql.Config(dsn)
	if err != nil {
		tb.Fatalf("dbtest: %v", err)
	}
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		tb.Fatalf("dbtest: %v", err)
	}
	rec := &Recorder{stmts: map[string]*Statement{}, seen: map[string]bool{}}
	sdb := sql.OpenDB(recordingConnector{Connector: conn, rec: rec})
	sdb.SetMaxOpenConns(16)
	dbx := sqlx.NewDb(sdb, "mysql")
	if err := dbx.PingContext(context.Background()); err != nil {
		_ = dbx.Close()
		tb.Fatalf("dbtest: open: %v", err)
	}
	keep(tb, dbx, dsn)
	return dbx, rec
}

type recordingConnector struct {
	driver.Connector
	rec *Recorder
}

func (c recordingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &recordingConn{Conn: conn, rec: c.rec}, nil
}

// recordingConn passes everything to the driver's connection and records
// each statement's text on its way. It forwards every optional interface
// the MySQL driver's connection has, so that database/sql uses the driver
// exactly as it would unwrapped.
type recordingConn struct {
	driver.Conn
	rec *Recorder
}

var (
	_ driver.ExecerContext      = (*recordingConn)(nil)
	_ driver.QueryerContext     = (*recordingConn)(nil)
	_ driver.ConnPrepareContext = (*recordingConn)(nil)
	_ driver.ConnBeginTx        = (*recordingConn)(nil)
	_ driver.Pinger             = (*recordingConn)(nil)
	_ driver.SessionResetter    = (*recordingConn)(nil)
	_ driver.Validator          = (*recordingConn)(nil)
	_ driver.NamedValueChecker  = (*recordingConn)(nil)
)

func (c *recordingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	c.rec.record(query)
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, query, args)
}

func (c *recordingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.rec.record(query)
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, query, args)
}

func (c *recordingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	c.rec.record(query)
	return c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
}

func (c *recordingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c *recordingConn) Ping(ctx context.Context) error { return c.Conn.(driver.Pinger).Ping(ctx) }

func (c *recordingConn) ResetSession(ctx context.Context) error {
	return c.Conn.(driver.SessionResetter).ResetSession(ctx)
}

func (c *recordingConn) IsValid() bool { return c.Conn.(driver.Validator).IsValid() }

func (c *recordingConn) CheckNamedValue(nv *driver.NamedValue) error {
	return c.Conn.(driver.NamedValueChecker).CheckNamedValue(nv)
}
