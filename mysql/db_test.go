package mysql_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"

	"gateway/mysql"
	"gateway/mysql/mysqltest"
)

func TestMain(m *testing.M) { mysqltest.Main(m) }

func TestConfigForcesSettings(t *testing.T) {
	tests := []struct {
		name, dsn string
	}{
		{"minimal", "/gw"},
		{"plain", "gw:secret@tcp(db.internal:3306)/gateway"},
		{"settings turned off in the DSN", "gw:secret@tcp(db.internal:3306)/gateway" +
			"?parseTime=false&loc=Local&interpolateParams=false&clientFoundRows=false" +
			"&time_zone=%27-05%3A00%27&sql_mode=%27%27"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := mysql.Config(tt.dsn)
			if err != nil {
				t.Fatalf("Config(%q) = %v", tt.dsn, err)
			}
			if !cfg.ParseTime {
				t.Errorf("ParseTime = false, want true")
			}
			if cfg.Loc != time.UTC {
				t.Errorf("Loc = %v, want UTC", cfg.Loc)
			}
			if !cfg.InterpolateParams {
				t.Errorf("InterpolateParams = false, want true")
			}
			if !cfg.ClientFoundRows {
				t.Errorf("ClientFoundRows = false, want true")
			}
			if got := cfg.Params["time_zone"]; got != "'+00:00'" {
				t.Errorf("time_zone = %q, want '+00:00'", got)
			}
			if got := cfg.Params["sql_mode"]; !strings.Contains(got, "STRICT_ALL_TABLES") {
				t.Errorf("sql_mode = %q, want strict mode", got)
			}
			if cfg.MultiStatements {
				t.Errorf("MultiStatements = true; the serving pool must not allow it")
			}
		})
	}

	t.Run("keeps the rest of the DSN", func(t *testing.T) {
		cfg, err := mysql.Config("gw:secret@tcp(db.internal:3307)/gateway?timeout=3s&readTimeout=7s")
		if err != nil {
			t.Fatal(err)
		}
		if cfg.User != "gw" || cfg.Passwd != "secret" || cfg.Addr != "db.internal:3307" || cfg.DBName != "gateway" {
			t.Errorf("Config = user %q addr %q db %q, want gw db.internal:3307 gateway", cfg.User, cfg.Addr, cfg.DBName)
		}
		if cfg.Timeout != 3*time.Second || cfg.ReadTimeout != 7*time.Second {
			t.Errorf("timeouts = %v, %v; want 3s, 7s", cfg.Timeout, cfg.ReadTimeout)
		}
	})
}

func TestConfigRejectsBadDSN(t *testing.T) {
	tests := []struct {
		name, dsn string
	}{
		{"no slash", "not a dsn"},
		{"unterminated address", "gw@tcp(127.0.0.1:3306/gateway"},
		{"bad bool", "gw@tcp(127.0.0.1:3306)/gateway?parseTime=maybe"},
		{"bad duration", "gw@tcp(127.0.0.1:3306)/gateway?timeout=soon"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := mysql.Config(tt.dsn)
			if err == nil {
				t.Fatalf("Config(%q) = %+v, want an error", tt.dsn, cfg)
			}
			if !strings.Contains(err.Error(), "invalid DSN") {
				t.Errorf("error %q does not say the DSN is invalid", err)
			}
			dbx, err := mysql.Open(context.Background(), tt.dsn, mysql.PoolOptions{})
			if err == nil {
				dbx.Close()
				t.Errorf("Open(%q) succeeded, want an error", tt.dsn)
			}
		})
	}
}

// freeAddr returns a loopback address nobody listens on.
func freeAddr(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		tb.Fatal(err)
	}
	return addr
}

func TestOpenUnreachable(t *testing.T) {
	addr := freeAddr(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
	defer cancel()
	dbx, err := mysql.Open(ctx, "root@tcp("+addr+")/", mysql.PoolOptions{})
	if err == nil {
		dbx.Close()
		t.Fatalf("Open on %s succeeded, want an error", addr)
	}
	if !strings.Contains(err.Error(), addr) {
		t.Errorf("error %q does not name the address %s", err, addr)
	}
	if dbx != nil {
		t.Errorf("Open returned a pool with its error")
	}
}

// TestOpenSilentServer: a server that accepts the connection but never
// speaks must not hang Open past its context.
func TestOpenSilentServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()

	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	dbx, err := mysql.Open(ctx, "root@tcp("+l.Addr().String()+")/", mysql.PoolOptions{})
	if err == nil {
		dbx.Close()
		t.Fatal("Open on a silent server succeeded, want an error")
	}
	if !strings.Contains(err.Error(), l.Addr().String()) {
		t.Errorf("error %q does not name the address", err)
	}
	if ctx.Err() == nil {
		t.Errorf("Open failed before its context ended: %v", err)
	}
}

func TestOpenSession(t *testing.T) {
	dsn := mysqltest.MustDSN(t)
	ctx := t.Context()
	dbx, err := mysql.Open(ctx, dsn, mysql.PoolOptions{MaxOpen: 3, MaxIdle: 2, MaxLifetime: time.Minute})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer dbx.Close()

	t.Run("pool options", func(t *testing.T) {
		if got := dbx.Stats().MaxOpenConnections; got != 3 {
			t.Errorf("MaxOpenConnections = %d, want 3", got)
		}
	})
	t.Run("session time zone is UTC", func(t *testing.T) {
		var tz string
		mustGet(t, dbx, &tz, "SELECT @@session.time_zone")
		if tz != "+00:00" {
			t.Errorf("time_zone = %q, want +00:00", tz)
		}
	})
	t.Run("times parse as UTC time.Time", func(t *testing.T) {
		var got time.Time
		mustGet(t, dbx, &got, "SELECT CAST('2024-05-01 12:04:05.123456' AS DATETIME(6))")
		want := time.Date(2024, 5, 1, 12, 4, 5, 123456000, time.UTC)
		if !got.Equal(want) || got.Location() != time.UTC {
			t.Errorf("DATETIME scanned as %v, want %v", got, want)
		}
		// A time.Time argument is written as its UTC wall clock.
		kst := want.In(time.FixedZone("KST", 9*3600))
		var back time.Time
		mustGet(t, dbx, &back, "SELECT CAST(? AS DATETIME(6))", kst)
		if !back.Equal(want) {
			t.Errorf("round trip of %v = %v, want %v", kst, back, want)
		}
	})
	t.Run("server-side session limits", func(t *testing.T) {
		// A session half-open on the gateway's side must not hold locks for hours.
		var version string
		mustGet(t, dbx, &version, "SELECT VERSION()")
		for name, want := range mysql.SessionLimits(version) {
			var got float64
			mustGet(t, dbx, &got, "SELECT @@session."+name)
			if w, _ := strconv.ParseFloat(want, 64); got != w {
				t.Errorf("@@session.%s = %v, want %s", name, got, want)
			}
		}
		if strings.Contains(strings.ToLower(version), "mariadb") {
			var idle float64
			mustGet(t, dbx, &idle, "SELECT @@session.idle_transaction_timeout")
			if idle == 0 || idle > 60 {
				t.Errorf("idle_transaction_timeout = %v on MariaDB", idle)
			}
		}
	})
	t.Run("a write cut by its deadline is unknown", func(t *testing.T) {
		mustExec(t, dbx, "CREATE TABLE slow_t (k INT PRIMARY KEY, v INT)")
		mustExec(t, dbx, "INSERT INTO slow_t VALUES (1, 0)")
		cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		_, err := mysql.ExecRetry(cctx, dbx, "UPDATE slow_t SET v = SLEEP(1) WHERE k = 1")
		if !errors.Is(err, mysql.ErrConnLost) {
			t.Fatalf("write cut by its deadline: %v, want ErrConnLost (outcome unknown)", err)
		}
	})
	t.Run("the server takes writes", func(t *testing.T) {
		if err := mysql.Writable(ctx, dbx); err != nil {
			t.Fatalf("Writable: %v", err)
		}
	})
	t.Run("strict mode refuses truncation", func(t *testing.T) {
		mustExec(t, dbx, "CREATE TABLE strict_t (s VARCHAR(3) NOT NULL)")
		_, err := dbx.ExecContext(ctx, "INSERT INTO strict_t (s) VALUES (?)", "abcd")
		if err == nil {
			t.Errorf("inserting 4 characters into VARCHAR(3) succeeded; strict mode is off")
		}
		if n := mysqltest.Count(t, dbx, "SELECT COUNT(*) FROM strict_t"); n != 0 {
			t.Errorf("%d rows stored, want 0", n)
		}
	})
	t.Run("RowsAffected counts matched rows", func(t *testing.T) {
		mustExec(t, dbx, "CREATE TABLE found_t (id INT PRIMARY KEY, v INT NOT NULL)")
		mustExec(t, dbx, "INSERT INTO found_t VALUES (1, 5)")
		res, err := dbx.ExecContext(ctx, "UPDATE found_t SET v = 5 WHERE id = 1")
		if err != nil {
			t.Fatal(err)
		}
		if n, err := res.RowsAffected(); err != nil || n != 1 {
			t.Errorf("RowsAffected of an unchanging update = %d, %v; want 1 (CLIENT_FOUND_ROWS)", n, err)
		}
	})
	t.Run("arguments are interpolated, not prepared", func(t *testing.T) {
		conn, err := dbx.Connx(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		prepares := func() int64 {
			t.Helper()
			var name string
			var n int64
			if err := conn.QueryRowxContext(ctx, "SHOW SESSION STATUS LIKE 'Com_stmt_prepare'").Scan(&name, &n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		before := prepares()
		var x int
		if err := conn.GetContext(ctx, &x, "SELECT ? + ?", 1, 2); err != nil || x != 3 {
			t.Fatalf("SELECT ? + ? = %d, %v", x, err)
		}
		if after := prepares(); after != before {
			t.Errorf("Com_stmt_prepare went from %d to %d: the statement was prepared", before, after)
		}
	})
}

func mustExec(tb testing.TB, dbx *sqlx.DB, query string, args ...any) {
	tb.Helper()
	if _, err := dbx.ExecContext(context.Background(), query, args...); err != nil {
		tb.Fatalf("%s: %v", query, err)
	}
}

func mustGet(tb testing.TB, dbx *sqlx.DB, dest any, query string, args ...any) {
	tb.Helper()
	if err := dbx.GetContext(context.Background(), dest, query, args...); err != nil {
		tb.Fatalf("%s: %v", query, err)
	}
}

// errSentinel is returned by fn in tests that expect it back.
var errSentinel = errors.New("fn failed")
