// Package dbtest gives tests a real, freshly migrated MariaDB/MySQL database:
// the server at GATEWAY_TEST_DSN when it is set, otherwise a private server
// started from the installed binaries for the test binary's lifetime.
package mysqltest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"gateway/mysql"
	"gateway/mysql/localdb"
)

// EnvDSN names the variable holding a server DSN for tests (any database
// name in it is ignored: every test gets its own database).
const EnvDSN = "GATEWAY_TEST_DSN"

var (
	mu        sync.Mutex
	server    *localdb.Server
	serverDir string
	dsns      = map[*sqlx.DB]string{}
)

// Main runs a test package and stops the private server if one was started.
// Use it as: func TestMain(m *testing.M) { mysqltest.Main(m) }
func Main(m *testing.M) {
	code := m.Run()
	mu.Lock()
	if server != nil {
		if err := server.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "dbtest: stop server:", err)
		}
		_ = os.RemoveAll(serverDir)
	}
	mu.Unlock()
	os.Exit(code)
}

// serverDSN returns a DSN for the test server with no database selected.
func serverDSN(tb testing.TB) string {
	tb.Helper()
	if dsn := os.Getenv(EnvDSN); dsn != "" {
		cfg, err := gomysql.ParseDSN(dsn)
		if err != nil {
			tb.Fatalf("%s: %v", EnvDSN, err)
		}
		cfg.DBName = ""
		return cfg.FormatDSN()
	}
	mu.Lock()
	defer mu.Unlock()
	if server == nil {
		dir, err := os.MkdirTemp("", "gateway-testdb-")
		if err != nil {
			tb.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		// A test never installs anything as a side effect: make test (through
		// tests/withdb) installs the server once, with a message, when it is missing.
		srv, err := localdb.Start(ctx, localdb.Options{DataDir: dir, Log: os.Stderr, NoInstall: true})
		if err != nil {
			_ = os.RemoveAll(dir)
			tb.Fatalf("dbtest: no %s set and a private MariaDB could not start: %v", EnvDSN, err)
		}
		server, serverDir = srv, dir
	}
	return server.DSN("")
}

// MustDSN creates a fresh migrated database and returns its DSN; the database
// is dropped when the test ends.
func MustDSN(tb testing.TB) string {
	tb.Helper()
	base := serverDSN(tb)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "gwtest_" + hex.EncodeToString(b[:])
	ctx := context.Background()
	admin, err := mysql.Open(ctx, base, mysql.PoolOptions{MaxOpen: 2})
	if err != nil {
		tb.Fatalf("dbtest: %v", err)
	}
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"); err != nil {
		admin.Close()
		tb.Fatalf("dbtest: create database: %v", err)
	}
	tb.Cleanup(func() {
		if _, err := admin.ExecContext(context.Background(), "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			tb.Errorf("dbtest: drop database %s: %v", name, err)
		}
		admin.Close()
	})
	cfg, err := gomysql.ParseDSN(base)
	if err != nil {
		tb.Fatal(err)
	}
	cfg.DBName = name
	dsn := cfg.FormatDSN()
	if err := migratedSchema(ctx, base); err != nil {
		tb.Fatalf("dbtest: migrate: %v", err)
	}
	if err := createSchema(ctx, base, name); err != nil {
		tb.Fatalf("dbtest: create the migrated schema: %v", err)
	}
	return dsn
}

// DSNOf returns the DSN of a pool opened by MustOpen.
func DSNOf(tb testing.TB, dbx *sqlx.DB) string {
	tb.Helper()
	mu.Lock()
	defer mu.Unlock()
	dsn, ok := dsns[dbx]
	if !ok {
		tb.Fatal("dbtest: DSNOf: pool not opened by MustOpen")
	}
	return dsn
}

// MustOpen returns a pool on a fresh migrated database, closed when the test ends.
func MustOpen(tb testing.TB) *sqlx.DB {
	tb.Helper()
	dsn := MustDSN(tb)
	dbx, err := mysql.Open(context.Background(), dsn, mysql.PoolOptions{MaxOpen: 64, MaxIdle: 64})
	if err != nil {
		tb.Fatalf("dbtest: open: %v", err)
	}
	keep(tb, dbx, dsn)
	return dbx
}

// keep remembers dbx's DSN for DSNOf and closes dbx when the test ends.
func keep(tb testing.TB, dbx *sqlx.DB, dsn string) {
	mu.Lock()
	dsns[dbx] = dsn
	mu.Unlock()
	tb.Cleanup(func() {
		mu.Lock()
		delete(dsns, dbx)
		mu.Unlock()
		dbx.Close()
	})
}

// Count runs a COUNT(*) query and fails the test on error.
func Count(tb testing.TB, dbx *sqlx.DB, query string, args ...any) int {
	tb.Helper()
	var n int
	if err := dbx.GetContext(context.Background(), &n, query, args...); err != nil {
		tb.Fatalf("dbtest: %s: %v", query, err)
	}
	return n
}

// Advance moves the database's clock forward by d, as the gateway sees it:
// every stored instant of the test database (each DATETIME column of each
// table but the migrations') moves d into the past, so that NOW(6) compares
// with them as if d had passed. The gateway judges leases, deadlines and
// expiry on the database's clock, so this, with the same step on the
// replicas' own injected clocks, is how a test lets time pass without
// sleeping.
func Advance(tb testing.TB, dbx *sqlx.DB, d time.Duration) {
	tb.Helper()
	ctx := context.Background()
	var cols []struct {
		Table  string `db:"table_name"`
		Column string `db:"column_name"`
	}
	err := dbx.SelectContext(ctx, &cols, `SELECT TABLE_NAME AS table_name, COLUMN_NAME AS column_name
FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = DATABASE() AND DATA_TYPE IN ('datetime', 'timestamp') AND TABLE_NAME <> 'schema_migrations'
ORDER BY TABLE_NAME, ORDINAL_POSITION`)
	if err != nil {
		tb.Fatalf("dbtest: Advance: %v", err)
	}
	byTable := map[string][]string{}
	var tables []string
	for _, c := range cols {
		if _, ok := byTable[c.Table]; !ok {
			tables = append(tables, c.Table)
		}
		byTable[c.Table] = append(byTable[c.Table], fmt.Sprintf("`%s` = `%s` - INTERVAL %d MICROSECOND", c.Column, c.Column, d.Microseconds()))
	}
	for _, t := range tables {
		if _, err := dbx.ExecContext(ctx, "UPDATE `"+t+"` SET "+strings.Join(byTable[t], ", ")); err != nil {
			tb.Fatalf("dbtest: Advance %s: %v", t, err)
		}
	}
}
