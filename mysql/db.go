// Package db owns the connection to MySQL/MariaDB: opening a pool with the
// driver settings the gateway relies on, the embedded schema migrations, the
// one transaction helper, and the classification of MySQL error numbers so
// that no caller ever looks at a driver error.
package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
)

// PoolOptions bound the connection pool.
type PoolOptions struct {
	MaxOpen     int
	MaxIdle     int
	MaxLifetime time.Duration
	// MaxIdleTime closes a connection idle that long, before the server or a
	// NAT on the way drops it silently (DefaultMaxIdleTime when zero).
	MaxIdleTime time.Duration
}

// Limits every serving connection works under, so that no session of the
// gateway's — a half-open one whose client side is gone included — can hold
// locks for long: the server ends a transaction left idle, a statement that
// runs away, and a wait for a lock.
const (
	// DefaultMaxIdleTime is how long an idle pooled connection is kept.
	DefaultMaxIdleTime = 30 * time.Second
	// IdleTransactionTimeout: a session idle inside a transaction that long is
	// ended by the server (MariaDB), its locks released.
	IdleTransactionTimeout = 10 * time.Second
	// StatementTimeout bounds one statement on the server (MariaDB).
	StatementTimeout = 30 * time.Second
	// LockWaitTimeout bounds a wait for a row lock; the flow's transactions
	// are a few statements long, so a longer wait means something is stuck.
	LockWaitTimeout = 5 * time.Second
	// DialTimeout, ReadTimeout and WriteTimeout are the driver's own bounds,
	// applied when the DSN sets none: a stalled server is an error, not a hang.
	DialTimeout  = 5 * time.Second
	ReadTimeout  = StatementTimeout + 10*time.Second
	WriteTimeout = 10 * time.Second
	// keepAlive probes a silent connection so that a dead peer is noticed in
	// seconds rather than the system's two hours.
	keepAliveIdle     = 5 * time.Second
	keepAliveInterval = 5 * time.Second
	keepAliveCount    = 3
)

// Open connects to dsn (a go-sql-driver DSN) and checks that the server
// answers. Besides Config's settings it bounds every connection: driver
// timeouts (unless the DSN sets its own), TCP keep-alive, server-side
// session limits (idle transactions, statements, lock waits; those the
// server has), and read-only servers refused (a demoted primary answers
// read-only: the connection is dropped and the statement fails as
// unavailable, never half-applied).
func Open(ctx context.Context, dsn string, pool PoolOptions) (*sqlx.DB, error) {
	cfg, err := Config(dsn)
	if err != nil {
		return nil, err
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DialTimeout
	}
	if cfg.ReadTimeout == 0 {
		cfg.ReadTimeout = ReadTimeout
	}
	if cfg.WriteTimeout == 0 {
		cfg.WriteTimeout = WriteTimeout
	}
	cfg.RejectReadOnly = true
	dialer := &net.Dialer{Timeout: cfg.Timeout, KeepAliveConfig: net.KeepAliveConfig{
		Enable: true, Idle: keepAliveIdle, Interval: keepAliveInterval, Count: keepAliveCount,
	}}
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		return dialer.DialContext(ctx, network, addr)
	}
	if err := setSessionLimits(ctx, cfg); err != nil {
		return nil, err
	}
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		return nil, fmt.Errorf("mysql: %w", err)
	}
	sdb := sql.OpenDB(conn)
	if pool.MaxOpen > 0 {
		sdb.SetMaxOpenConns(pool.MaxOpen)
	}
	if pool.MaxIdle > 0 {
		sdb.SetMaxIdleConns(pool.MaxIdle)
	}
	if pool.MaxLifetime > 0 {
		sdb.SetConnMaxLifetime(pool.MaxLifetime)
	}
	if pool.MaxIdleTime <= 0 {
		pool.MaxIdleTime = DefaultMaxIdleTime
	}
	sdb.SetConnMaxIdleTime(pool.MaxIdleTime)
	if err := sdb.PingContext(ctx); err != nil {
		_ = sdb.Close()
		return nil, connectErr(cfg.Addr, err)
	}
	return sqlx.NewDb(sdb, "mysql"), nil
}

// connectErr names a first connection that failed: nothing was sent, so a
// broken or refused connection is a database that cannot be reached
// (ErrUnavailable), never a write of unknown outcome; a refusal by the
// server (a wrong password, an unknown database) is said as it is.
func connectErr(addr string, err error) error {
	cerr := Classify(err)
	if errors.Is(cerr, ErrConnLost) || errors.Is(cerr, ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("mysql: cannot reach the database at %s: %w: %v", addr, ErrUnavailable, err)
	}
	return fmt.Errorf("mysql: connect to %s: %w", addr, cerr)
}

// setSessionLimits asks the server which limits it knows and adds them to
// the session settings of every connection.
func setSessionLimits(ctx context.Context, cfg *gomysql.Config) error {
	probe := cfg.Clone()
	conn, err := gomysql.NewConnector(probe)
	if err != nil {
		return fmt.Errorf("mysql: %w", err)
	}
	sdb := sql.OpenDB(conn)
	defer sdb.Close()
	var version string
	if err := sdb.QueryRowContext(ctx, `SELECT VERSION()`).Scan(&version); err != nil {
		return connectErr(cfg.Addr, err)
	}
	for k, v := range SessionLimits(version) {
		if _, set := cfg.Params[k]; !set { // a DSN's own value wins
			cfg.Params[k] = v
		}
	}
	return nil
}

// SessionLimits are the server-side session settings bounding a serving
// connection, for the server whose VERSION() is version. MariaDB ends idle
// transactions and long statements itself; MySQL has neither, so there the
// session's idle timeout (which also counts time idle in a transaction) is
// kept short instead: the pool closes idle connections well before it.
func SessionLimits(version string) map[string]string {
	secs := func(d time.Duration) string { return strconv.Itoa(int(d / time.Second)) }
	limits := map[string]string{"innodb_lock_wait_timeout": secs(LockWaitTimeout)}
	if isMariaDB(version) {
		limits["idle_transaction_timeout"] = secs(IdleTransactionTimeout)
		limits["max_statement_time"] = secs(StatementTimeout)
		return limits
	}
	limits["wait_timeout"] = secs(2 * DefaultMaxIdleTime)
	return limits
}

// A request's reads are bounded on the server by the request's own
// deadline. At the deadline the driver gives up and closes the connection,
// but the server notices a closed connection only when it next writes to
// it: a SELECT still scanning would run on for up to StatementTimeout,
// holding a server thread while the client's retries pile more on.
// MariaDB and MySQL spell a statement's limit differently, so a readLimit
// asks its server once which one it is.

// statementMargin is how much earlier than the context's deadline (at most
// a tenth of the time left) the server ends a statement, so that it is the
// server, not the driver, that stops a slow one: its error then comes back
// on a connection the pool keeps.
const statementMargin = 50 * time.Millisecond

// BoundSelect returns query, a read-only SELECT, limited on the server
// whose VERSION() is version to run for at most limit (rounded up to a
// millisecond): MariaDB's SET STATEMENT max_statement_time, MySQL's
// MAX_EXECUTION_TIME hint. Either server ends the statement with an error
// that Classify calls ErrUnavailable.
func BoundSelect(version, query string, limit time.Duration) (string, error) {
	rest, ok := strings.CutPrefix(query, "SELECT ")
	if !ok {
		return "", fmt.Errorf("mysql: only a SELECT can be bounded: %.40q", query)
	}
	ms := max(1, (limit+time.Millisecond-1)/time.Millisecond)
	if isMariaDB(version) {
		return fmt.Sprintf("SET STATEMENT max_statement_time = %d.%03d FOR %s", ms/1000, ms%1000, query), nil
	}
	return fmt.Sprintf("SELECT /*+ MAX_EXECUTION_TIME(%d) */ %s", ms, rest), nil
}

// readLimit bounds read-only SELECTs by their context's deadline (less
// statementMargin), and by StatementTimeout on a MySQL server when the
// context has none (MariaDB's session limit already does). Its zero value
// is ready: the server's version is read on first use. It must not be copied.
type readLimit struct {
	mu      sync.Mutex
	version string
}

// bound returns query bounded as above; a deadline already past is the
// context's error, and the statement is not sent.
func (l *readLimit) bound(ctx context.Context, q sqlx.QueryerContext, query string) (string, error) {
	version, err := l.serverVersion(ctx, q)
	if err != nil {
		return "", err
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		if isMariaDB(version) {
			return query, nil
		}
		return BoundSelect(version, query, StatementTimeout)
	}
	left := time.Until(deadline)
	if left <= 0 {
		return "", context.DeadlineExceeded
	}
	return BoundSelect(version, query, min(StatementTimeout, left-min(left/10, statementMargin)))
}

func (l *readLimit) serverVersion(ctx context.Context, q sqlx.QueryerContext) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.version == "" {
		// A failed read is not kept: the next statement asks again.
		if err := sqlx.GetContext(ctx, q, &l.version, `SELECT VERSION()`); err != nil {
			return "", Classify(err)
		}
	}
	return l.version, nil
}

// get is sqlx.GetContext of a bounded read-only SELECT, its error classified.
func (l *readLimit) get(ctx context.Context, q sqlx.QueryerContext, dest any, query string, args ...any) error {
	query, err := l.bound(ctx, q, query)
	if err != nil {
		return err
	}
	return Classify(sqlx.GetContext(ctx, q, dest, query, args...))
}

// sel is sqlx.SelectContext of a bounded read-only SELECT, its error classified.
func (l *readLimit) sel(ctx context.Context, q sqlx.QueryerContext, dest any, query string, args ...any) error {
	query, err := l.bound(ctx, q, query)
	if err != nil {
		return err
	}
	return Classify(sqlx.SelectContext(ctx, q, dest, query, args...))
}

// isMariaDB tells MariaDB from MySQL by the server's VERSION().
func isMariaDB(version string) bool { return strings.Contains(strings.ToLower(version), "mariadb") }

// Config parses dsn and applies the settings every gateway connection needs.
func Config(dsn string) (*gomysql.Config, error) {
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		return nil, fmt.Errorf("mysql: invalid DSN: %w", err)
	}
	cfg.ParseTime = true
	cfg.Loc = time.UTC
	// The driver's own log lines (a reset connection, a refused dial) would
	// reach stderr raw; every such failure is returned as an error instead.
	cfg.Logger = &gomysql.NopLogger{}
	cfg.InterpolateParams = true
	// Compare-and-set updates read RowsAffected as "did my condition match";
	// without this flag MySQL counts only rows whose values changed.
	cfg.ClientFoundRows = true
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	// Stored DATETIMEs are UTC; make NOW() and friends agree with them.
	cfg.Params["time_zone"] = "'+00:00'"
	// Every statement below relies on strict mode: a value that does not fit is an error, not a silent truncation.
	cfg.Params["sql_mode"] = "'STRICT_ALL_TABLES,NO_ZERO_DATE,NO_ENGINE_SUBSTITUTION'"
	return cfg, nil
}

// Kinds of database failure callers branch on.
var (
	// ErrDuplicate is a unique-constraint violation (MySQL 1062).
	ErrDuplicate = errors.New("duplicate key")
	// ErrRetryable is a deadlock (1213, the server rolled the transaction back)
	// or a lock wait timeout (1205, only the statement was rolled back: the
	// caller must roll back the rest). Either way the transaction may be run again.
	ErrRetryable error = retryable{}
	// ErrConnLost is a connection that broke mid-statement or mid-commit: the
	// outcome is unknown and must be re-read, never blindly retried. It also
	// says the database is (for now) unavailable.
	ErrConnLost error = connLost{}
	// ErrUnavailable is a server that cannot be reached: nothing was done.
	ErrUnavailable error = unavailable{}
)

// unavailable lets packages that do not import db recognise an unreachable
// database by behaviour: errors.As(err, &interface{ Unavailable() bool }).
type unavailable struct{}

func (unavailable) Error() string     { return "database unavailable" }
func (unavailable) Unavailable() bool { return true }

// retryable is a conflict the server resolved by rolling back: when it
// outlasts the retries it is, for the request, a database that cannot serve
// it now (a 503 to retry), not a bug. On a Galera node cut off from the
// cluster a causal read waits out its lock wait timeout this way too.
type retryable struct{}

func (retryable) Error() string     { return "transaction rolled back by the server, retry" }
func (retryable) Unavailable() bool { return true }

type connLost struct{}

func (connLost) Error() string     { return "connection lost, outcome unknown" }
func (connLost) Unavailable() bool { return true }

// Classify wraps a driver error with the kind above it belongs to, keeping
// the original for logs. Errors of no known kind are returned unchanged.
func Classify(err error) error {
	if err == nil {
		return nil
	}
	var me *gomysql.MySQLError
	if errors.As(err, &me) {
		switch me.Number {
		case 1062:
			return fmt.Errorf("%w: %v", ErrDuplicate, err)
		case 1213, 1205:
			return fmt.Errorf("%w: %v", ErrRetryable, err)
		case 1927, 1053, 2006, 2013, 4031: // killed, shutdown, server gone, lost during query, idle disconnect (MySQL 8)
			return fmt.Errorf("%w: %v", ErrConnLost, err)
		case 1290, 1836, 1792, 1047, 1969, 3024:
			// Read-only server or transaction, a cluster node not ready, a
			// statement stopped by max_statement_time (MariaDB) or
			// MAX_EXECUTION_TIME (MySQL): the statement did nothing; the
			// database cannot serve it now.
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		case ErrNumCommitFailed:
			if NotPrimary(err) {
				// A cluster node lost the primary component while committing:
				// the write may have been replicated before it did, or not.
				return fmt.Errorf("%w: %v", ErrConnLost, err)
			}
		}
		return err
	}
	if badConnNoWrite(err) {
		// Nothing of it reached the server: it did nothing, for now it cannot serve.
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if errors.Is(err, gomysql.ErrInvalidConn) || errors.Is(err, driver.ErrBadConn) {
		return fmt.Errorf("%w: %v", ErrConnLost, err)
	}
	var ne *net.OpError
	if errors.As(err, &ne) && ne.Op == "dial" {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return err
}

// badConnNoWrite recognises the driver's own "bad connection", which it
// returns, unexported, when a connection broke before anything of the
// statement was written (and which database/sql passes on as it is from a
// new connection's handshake).
func badConnNoWrite(err error) bool {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if e.Error() == "bad connection" {
			return true
		}
	}
	return false
}

// ClassifyWrite is Classify for an error of a write whose effect may
// already be on the server: a COMMIT or an autocommitted statement. A
// deadline or cancellation that fired while it was in flight leaves its
// outcome unknown, like a broken connection: ErrConnLost.
func ClassifyWrite(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return fmt.Errorf("%w: %v", ErrConnLost, err)
	}
	return Classify(err)
}

// maxAttempts bounds how often Transact reruns a transaction the server rolled back.
const maxAttempts = 5

// Transact runs fn in a transaction and commits it. A deadlock or lock wait
// timeout reruns fn from the start (so fn must have no side effects outside
// tx); any other error rolls back and is returned classified. A failed COMMIT
// whose outcome cannot be known is returned as ErrConnLost: the caller must
// re-read what it wrote.
func Transact(ctx context.Context, dbx *sqlx.DB, fn func(tx *sqlx.Tx) error) error {
	return transact(ctx, dbx, nil, fn)
}

// TransactReadCommitted is Transact at READ COMMITTED: a locking read then
// locks only the rows it returns, no gaps and none it passed over, so a
// claim that scans a queue (FOR UPDATE SKIP LOCKED) blocks no write to the
// rows next to the ones it takes. Writes at READ COMMITTED need a row-based
// binary log where there is one (binlog_format ROW or MIXED, the defaults).
func TransactReadCommitted(ctx context.Context, dbx *sqlx.DB, fn func(tx *sqlx.Tx) error) error {
	return transact(ctx, dbx, &sql.TxOptions{Isolation: sql.LevelReadCommitted}, fn)
}

func transact(ctx context.Context, dbx *sqlx.DB, opts *sql.TxOptions, fn func(tx *sqlx.Tx) error) error {
	var err error
	for attempt := 1; ; attempt++ {
		err = transactOnce(ctx, dbx, opts, fn)
		if !errors.Is(err, ErrRetryable) || attempt == maxAttempts {
			return err
		}
		// A short, growing pause lets the transaction that won the deadlock finish.
		t := time.NewTimer(time.Duration(attempt*attempt) * 2 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

func transactOnce(ctx context.Context, dbx *sqlx.DB, opts *sql.TxOptions, fn func(tx *sqlx.Tx) error) error {
	tx, err := dbx.BeginTxx(ctx, opts)
	if err != nil {
		// Nothing was written yet: whatever broke, the outcome is known, and a
		// broken or unreachable connection means the database is unavailable.
		cerr := Classify(err)
		if errors.Is(cerr, ErrUnavailable) {
			return cerr
		}
		if errors.Is(cerr, ErrConnLost) {
			return fmt.Errorf("%w: begin: %v", ErrUnavailable, err)
		}
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return Classify(err)
	}
	if err := tx.Commit(); err != nil {
		cerr := ClassifyWrite(err)
		if errors.Is(cerr, ErrDuplicate) || errors.Is(cerr, ErrRetryable) {
			return cerr
		}
		// The server may have committed before the connection went away.
		return fmt.Errorf("%w: commit: %v", ErrConnLost, err)
	}
	return nil
}

// ExecRetry runs one autocommitted statement and reports the rows it
// matched, rerunning it after a deadlock or lock wait timeout (the server
// rolled the statement back, so nothing of it remains). A lost connection is
// ErrConnLost: the statement may or may not have been applied.
func ExecRetry(ctx context.Context, dbx *sqlx.DB, query string, args ...any) (int64, error) {
	for attempt := 1; ; attempt++ {
		res, err := dbx.ExecContext(ctx, query, args...)
		if err == nil {
			return res.RowsAffected()
		}
		err = ClassifyWrite(err)
		if !errors.Is(err, ErrRetryable) || attempt == maxAttempts {
			return 0, err
		}
		t := time.NewTimer(time.Duration(attempt*attempt) * 2 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, err
		case <-t.C:
		}
	}
}

// Writable reports whether the server takes writes: a demoted primary or a
// replica answers read-only, and a Galera node outside the primary
// component refuses every statement that reads a table (while answering
// pings and SELECT NOW(6)); a gateway on either must not report ready.
func Writable(ctx context.Context, dbx *sqlx.DB) error {
	var ro int
	if err := dbx.GetContext(ctx, &ro, `SELECT @@global.read_only`); err != nil {
		return Classify(err)
	}
	if ro != 0 {
		return fmt.Errorf("%w: the server is read-only", ErrUnavailable)
	}
	st, err := GaleraState(ctx, dbx)
	if err != nil {
		return err
	}
	if !st.Usable() {
		return fmt.Errorf("%w: %s", ErrUnavailable, st)
	}
	return nil
}
