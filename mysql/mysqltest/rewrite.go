package mysqltest

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"gateway/mysql"
)

// Rewrite sees each statement a pool sends, with its arguments, on its way
// to the server, and returns the text to send instead: query itself to
// send it as it is. A test makes a statement slow with it (a SLEEP added
// to its WHERE) or keeps it, arguments and all, to EXPLAIN it.
type Rewrite func(query string, args []driver.NamedValue) string

// SlowMarker is what the statements SlowReads slows carry.
const SlowMarker = "SLEEP(20) = 0"

// SlowReads returns a Rewrite that, while on is set, makes every read of
// the tables named (a SELECT that locks nothing, bounded or not) run for
// 20 s: SlowMarker added to its WHERE. Like a long scan, and unlike a wait
// for a lock, a SLEEP does not notice that its client went away: only the
// server's own limit on the statement ends it early.
func SlowReads(on *atomic.Bool, tables ...string) Rewrite {
	return func(query string, _ []driver.NamedValue) string {
		read := strings.HasPrefix(query, "SELECT ") || strings.HasPrefix(query, "SET STATEMENT ")
		if !on.Load() || !read || strings.Contains(query, " FOR UPDATE") {
			return query
		}
		for _, t := range tables {
			if strings.Contains(query, " FROM "+t+" ") {
				return strings.Replace(query, " WHERE ", " WHERE "+SlowMarker+" AND ", 1)
			}
		}
		return query
	}
}

// MustOpenRewritten is MustOpen with every statement passing through
// rewrite: a fresh migrated database, with the driver settings of
// mysql.Config, closed when the test ends. What the code under test builds
// is what rewrite sees, its server-side limits included.
func MustOpenRewritten(tb testing.TB, rewrite Rewrite) *sqlx.DB {
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
	sdb := sql.OpenDB(rewritingConnector{Connector: conn, rewrite: rewrite})
	sdb.SetMaxOpenConns(16)
	dbx := sqlx.NewDb(sdb, "mysql")
	if err := dbx.PingContext(context.Background()); err != nil {
		_ = dbx.Close()
		tb.Fatalf("dbtest: open: %v", err)
	}
	keep(tb, dbx, dsn)
	return dbx
}

type rewritingConnector struct {
	driver.Connector
	rewrite Rewrite
}

func (c rewritingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &rewritingConn{Conn: conn, rewrite: c.rewrite}, nil
}

// rewritingConn passes everything to the driver's connection, each
// statement rewritten on its way, and forwards every optional interface
// the MySQL driver's connection has (as recordingConn does).
type rewritingConn struct {
	driver.Conn
	rewrite Rewrite
}

var (
	_ driver.ExecerContext      = (*rewritingConn)(nil)
	_ driver.QueryerContext     = (*rewritingConn)(nil)
	_ driver.ConnPrepareContext = (*rewritingConn)(nil)
	_ driver.ConnBeginTx        = (*rewritingConn)(nil)
	_ driver.Pinger             = (*rewritingConn)(nil)
	_ driver.SessionResetter    = (*rewritingConn)(nil)
	_ driver.Validator          = (*rewritingConn)(nil)
	_ driver.NamedValueChecker  = (*rewritingConn)(nil)
)

func (c *rewritingConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, c.rewrite(query, args), args)
}

func (c *rewritingConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, c.rewrite(query, args), args)
}

func (c *rewritingConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	return c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, c.rewrite(query, nil))
}

func (c *rewritingConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c *rewritingConn) Ping(ctx context.Context) error { return c.Conn.(driver.Pinger).Ping(ctx) }

func (c *rewritingConn) ResetSession(ctx context.Context) error {
	return c.Conn.(driver.SessionResetter).ResetSession(ctx)
}

func (c *rewritingConn) IsValid() bool { return c.Conn.(driver.Validator).IsValid() }

func (c *rewritingConn) CheckNamedValue(nv *driver.NamedValue) error {
	return c.Conn.(driver.NamedValueChecker).CheckNamedValue(nv)
}

// Lingering waits up to within for every statement running on dbx's
// database whose text holds marker to end, and returns the text of those
// still running then, having killed them so that the test's cleanup does
// not wait on them. A test asks it whether the server stopped a statement
// whose client gave up.
func Lingering(tb testing.TB, dbx *sqlx.DB, marker string, within time.Duration) []string {
	tb.Helper()
	ctx := context.Background()
	const q = `SELECT ID, INFO FROM information_schema.PROCESSLIST
WHERE DB = DATABASE() AND ID <> CONNECTION_ID() AND INFO LIKE CONCAT('%', ?, '%')`
	var running []struct {
		ID   int64  `db:"ID"`
		Info string `db:"INFO"`
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(within)
	for {
		running = running[:0]
		if err := dbx.SelectContext(ctx, &running, q, marker); err != nil {
			tb.Fatalf("dbtest: processlist: %v", err)
		}
		if len(running) == 0 {
			return nil
		}
		select {
		case <-tick.C:
		case <-deadline:
			out := make([]string, len(running))
			for i, r := range running {
				out[i] = r.Info
				if _, err := dbx.ExecContext(ctx, `KILL QUERY ?`, r.ID); err != nil {
					tb.Errorf("dbtest: kill query %d: %v", r.ID, err)
				}
			}
			return out
		}
	}
}
