package mysql_test

import (
	"context"
	"errors"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jmoiron/sqlx"

	"gateway/mysql"
	"gateway/mysql/mysqltest"
)

// latestMigration reads the highest version among the migration files the
// binary embeds, so that adding a migration does not need a test edit.
func latestMigration(tb testing.TB) uint {
	tb.Helper()
	entries, err := os.ReadDir("migrations")
	if err != nil {
		tb.Fatal(err)
	}
	name := regexp.MustCompile(`^(\d+)_\w+\.(up|down)\.sql$`)
	var latest uint
	ups, downs := 0, 0
	for _, e := range entries {
		m := name.FindStringSubmatch(e.Name())
		if m == nil {
			tb.Errorf("migration file %q does not follow NNN_name.up|down.sql", e.Name())
			continue
		}
		if m[2] == "up" {
			ups++
		} else {
			downs++
		}
		v, err := strconv.ParseUint(m[1], 10, 32)
		if err != nil {
			tb.Fatal(err)
		}
		latest = max(latest, uint(v))
	}
	if ups == 0 || ups != downs {
		tb.Fatalf("%d up and %d down migrations: every up needs its down", ups, downs)
	}
	return latest
}

func mustMigrator(tb testing.TB, dsn string) *mysql.Migrator {
	tb.Helper()
	mg, err := mysql.NewMigrator(dsn)
	if err != nil {
		tb.Fatalf("NewMigrator: %v", err)
	}
	tb.Cleanup(func() {
		if err := mg.Close(); err != nil {
			tb.Errorf("Migrator.Close: %v", err)
		}
	})
	return mg
}

func mustVersion(tb testing.TB, mg *mysql.Migrator, want uint) {
	tb.Helper()
	v, dirty, err := mg.Version()
	if err != nil {
		tb.Fatalf("Version: %v", err)
	}
	if v != want || dirty {
		tb.Fatalf("Version = %d (dirty %v), want %d (clean)", v, dirty, want)
	}
}

// tables lists the schema's tables other than golang-migrate's own.
func tables(tb testing.TB, dbx *sqlx.DB) []string {
	tb.Helper()
	var names []string
	err := dbx.SelectContext(context.Background(), &names, `
SELECT TABLE_NAME FROM information_schema.TABLES
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME <> 'schema_migrations'
ORDER BY TABLE_NAME`)
	if err != nil {
		tb.Fatal(err)
	}
	return names
}

func mustOpenDSN(tb testing.TB, dsn string) *sqlx.DB {
	tb.Helper()
	dbx, err := mysql.Open(context.Background(), dsn, mysql.PoolOptions{MaxOpen: 4})
	if err != nil {
		tb.Fatalf("Open: %v", err)
	}
	tb.Cleanup(func() { dbx.Close() })
	return dbx
}

func TestMigratorVersionIsLatest(t *testing.T) {
	dsn := mysqltest.MustDSN(t)
	mg := mustMigrator(t, dsn)
	mustVersion(t, mg, latestMigration(t))
	// Up on an up-to-date schema is not an error and changes nothing.
	if err := mg.Up(); err != nil {
		t.Errorf("Up on an up-to-date schema = %v, want nil", err)
	}
	mustVersion(t, mg, latestMigration(t))
	if err := mysql.MigrateUp(dsn); err != nil {
		t.Errorf("MigrateUp on an up-to-date schema = %v, want nil", err)
	}
}

// schema describes every column and index of the database's tables, so that
// a migration that only alters tables is seen to be reverted too.
func schema(tb testing.TB, dbx *sqlx.DB) []string {
	tb.Helper()
	var cols, idx []string
	err := dbx.SelectContext(context.Background(), &cols, `
SELECT CONCAT_WS(' ', TABLE_NAME, COLUMN_NAME, COLUMN_TYPE, IS_NULLABLE, COALESCE(COLLATION_NAME, '-'))
FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME <> 'schema_migrations'
ORDER BY TABLE_NAME, COLUMN_NAME`)
	if err != nil {
		tb.Fatal(err)
	}
	err = dbx.SelectContext(context.Background(), &idx, `
SELECT CONCAT_WS(' ', TABLE_NAME, INDEX_NAME, NON_UNIQUE, SEQ_IN_INDEX, COLUMN_NAME)
FROM information_schema.STATISTICS
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME <> 'schema_migrations'
ORDER BY TABLE_NAME, INDEX_NAME, SEQ_IN_INDEX`)
	if err != nil {
		tb.Fatal(err)
	}
	return append(cols, idx...)
}

func TestMigratorDownUpRoundTrip(t *testing.T) {
	dsn := mysqltest.MustDSN(t)
	dbx := mustOpenDSN(t, dsn)
	mg := mustMigrator(t, dsn)
	latest := latestMigration(t)
	wantTables, wantSchema := tables(t, dbx), schema(t, dbx)
	for _, name := range []string{"merchants", "api_keys", "payments", "idempotency_keys"} {
		if !slices.Contains(wantTables, name) {
			t.Fatalf("tables after migration = %q, missing %s", wantTables, name)
		}
	}

	t.Run("one step down and up", func(t *testing.T) {
		if err := mg.Down(); err != nil {
			t.Fatalf("Down: %v", err)
		}
		mustVersion(t, mg, latest-1)
		if got := schema(t, dbx); slices.Equal(got, wantSchema) {
			t.Errorf("schema unchanged after reverting migration %d", latest)
		}
		if err := mg.Up(); err != nil {
			t.Fatalf("Up: %v", err)
		}
		mustVersion(t, mg, latest)
		if got := schema(t, dbx); !slices.Equal(got, wantSchema) {
			t.Errorf("schema after Down, Up differs:\n got %q\nwant %q", got, wantSchema)
		}
	})

	t.Run("all the way down and back", func(t *testing.T) {
		for v := latest; v > 0; v-- {
			if err := mg.Down(); err != nil {
				t.Fatalf("Down from version %d: %v", v, err)
			}
			mustVersion(t, mg, v-1)
			if v-1 == 1 {
				// Only the merchants migration is left: the payment tables are gone.
				got := tables(t, dbx)
				for _, gone := range []string{"payments", "idempotency_keys"} {
					if slices.Contains(got, gone) {
						t.Errorf("at version 1, table %s still exists", gone)
					}
				}
				if !slices.Contains(got, "merchants") {
					t.Errorf("at version 1, tables = %q, want merchants", got)
				}
			}
		}
		if got := tables(t, dbx); len(got) != 0 {
			t.Errorf("tables with every migration reverted = %q, want none", got)
		}
		if err := mg.Up(); err != nil {
			t.Fatalf("Up: %v", err)
		}
		mustVersion(t, mg, latest)
		if got := tables(t, dbx); !slices.Equal(got, wantTables) {
			t.Errorf("tables after the round trip = %q, want %q", got, wantTables)
		}
		if got := schema(t, dbx); !slices.Equal(got, wantSchema) {
			t.Errorf("schema after the round trip differs:\n got %q\nwant %q", got, wantSchema)
		}
	})

	t.Run("the schema works after the round trip", func(t *testing.T) {
		mustExec(t, dbx, `INSERT INTO idempotency_keys
    (merchant_id, endpoint, idem_key, fingerprint, state, subject_id, lease_version, created_at, updated_at)
VALUES ('mer_1', 'POST /payments', 'k', REPEAT('x', 32), 'IN_PROGRESS', 'pay_1', 1, NOW(6), NOW(6))`)
	})
}

func TestNewMigratorRejectsBadDSN(t *testing.T) {
	mg, err := mysql.NewMigrator("not a dsn")
	if err == nil {
		mg.Close()
		t.Fatal("NewMigrator(bad DSN) succeeded, want an error")
	}
	if !strings.Contains(err.Error(), "invalid DSN") {
		t.Errorf("error %q does not say the DSN is invalid", err)
	}
}

// TestIdempotencyKeyColumnsAreBinary: keys are case-sensitive, so the columns
// holding them must compare bytes.
func TestIdempotencyKeyColumnsAreBinary(t *testing.T) {
	dbx := mysqltest.MustOpen(t)
	for _, table := range []string{"idempotency_keys", "payments"} {
		t.Run(table, func(t *testing.T) {
			var collation *string
			mustGet(t, dbx, &collation, `
SELECT COLLATION_NAME FROM information_schema.COLUMNS
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = 'idem_key'`, table)
			if collation == nil || !strings.HasSuffix(*collation, "_bin") {
				t.Errorf("%s.idem_key collation = %v, want a binary (_bin) collation", table, deref(collation))
			}
		})
	}

	t.Run("keys differing only in case are different rows", func(t *testing.T) {
		for _, key := range []string{"order-abc", "ORDER-ABC", "Order-Abc"} {
			mustExec(t, dbx, `INSERT INTO idempotency_keys
    (merchant_id, endpoint, idem_key, fingerprint, state, subject_id, lease_version, created_at, updated_at)
VALUES ('mer_1', 'POST /payments', ?, REPEAT('x', 32), 'IN_PROGRESS', ?, 1, NOW(6), NOW(6))`, key, "pay_"+key)
			mustExec(t, dbx, `INSERT INTO payments
    (merchant_id, id, idem_key, merchant_order_id, status, amount, currency, payment_method, created_at, updated_at)
VALUES ('mer_1', ?, ?, ?, 'processing', 100, 'USD', 'card', NOW(6), NOW(6))`, "pay_"+key, key, "ord_"+key)
		}
		if n := mysqltest.Count(t, dbx, "SELECT COUNT(*) FROM idempotency_keys WHERE idem_key = 'order-abc'"); n != 1 {
			t.Errorf("lookup of order-abc matched %d idempotency rows, want 1", n)
		}
		if n := mysqltest.Count(t, dbx, "SELECT COUNT(*) FROM payments WHERE merchant_id = 'mer_1' AND idem_key = 'ORDER-ABC'"); n != 1 {
			t.Errorf("lookup of ORDER-ABC matched %d payments, want 1", n)
		}
	})
}

func deref(s *string) string {
	if s == nil {
		return "NULL"
	}
	return *s
}

// TestKeysLeadWithMerchant: every primary and unique key of the tables a
// request touches starts with merchant_id, so each request stays on one
// shard if the data is ever sharded by merchant.
func TestKeysLeadWithMerchant(t *testing.T) {
	dbx := mysqltest.MustOpen(t)
	for _, table := range []string{"payments", "idempotency_keys"} {
		t.Run(table, func(t *testing.T) {
			var keys []struct {
				Name   string `db:"INDEX_NAME"`
				Column string `db:"COLUMN_NAME"`
			}
			err := dbx.SelectContext(t.Context(), &keys, `
SELECT INDEX_NAME, COLUMN_NAME FROM information_schema.STATISTICS
WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND NON_UNIQUE = 0 AND SEQ_IN_INDEX = 1
ORDER BY INDEX_NAME`, table)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, k := range keys {
				names = append(names, k.Name)
				if k.Column != "merchant_id" {
					t.Errorf("%s key %s starts with %s, want merchant_id", table, k.Name, k.Column)
				}
			}
			if !slices.Contains(names, "PRIMARY") {
				t.Errorf("%s unique keys = %q, want a PRIMARY key among them", table, names)
			}
		})
	}
}

func TestMigrationsListsTheEmbeddedFiles(t *testing.T) {
	ms, err := mysql.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	latest := latestMigration(t)
	if uint(len(ms)) != latest || mysql.LatestVersion() != latest {
		t.Fatalf("%d migrations, latest %d; the files say %d", len(ms), mysql.LatestVersion(), latest)
	}
	for i, m := range ms {
		if m.Version != uint(i+1) || m.Name == "" || m.Down == "" {
			t.Errorf("migration %d: %+v", i+1, m)
		}
	}
	if ms[0].Name != "merchants" || !strings.Contains(ms[0].Down, "DROP TABLE") {
		t.Errorf("first migration %q, down %q", ms[0].Name, ms[0].Down)
	}
}

// Up applies one migration at a time and reports each, in order; Down reports the one it reverts.
func TestMigratorReportsProgress(t *testing.T) {
	dsn := mysqltest.MustDSN(t)
	mg := mustMigrator(t, dsn)
	latest := latestMigration(t)
	var steps []mysql.Step
	mg.Progress = func(s mysql.Step) { steps = append(steps, s) }
	for range latest {
		if err := mg.Down(); err != nil {
			t.Fatal(err)
		}
	}
	if uint(len(steps)) != latest || steps[0].Migration.Version != latest || steps[0].Up || steps[latest-1].Migration.Name != "merchants" {
		t.Fatalf("down steps %+v", steps)
	}
	steps = nil
	if err := mg.Up(); err != nil {
		t.Fatal(err)
	}
	mustVersion(t, mg, latest)
	if uint(len(steps)) != latest {
		t.Fatalf("%d up steps reported, want %d: %+v", len(steps), latest, steps)
	}
	for i, s := range steps {
		if s.Migration.Version != uint(i+1) || !s.Up || s.Migration.Name == "" {
			t.Errorf("step %d: %+v", i, s)
		}
	}
}

// CheckSchema is what serve and /readyz ask: a schema behind this binary, or
// dirty, is refused; Force repairs the record of a dirty one.
func TestCheckSchema(t *testing.T) {
	dsn := mysqltest.MustDSN(t)
	dbx := mustOpenDSN(t, dsn)
	mg := mustMigrator(t, dsn)
	latest := latestMigration(t)
	ctx := context.Background()
	wantSchemaError := func(want mysql.SchemaError) {
		t.Helper()
		err := mysql.CheckSchema(ctx, dbx)
		var se *mysql.SchemaError
		if !errors.As(err, &se) || *se != want {
			t.Fatalf("CheckSchema = %v, want %+v", err, want)
		}
	}
	if err := mysql.CheckSchema(ctx, dbx); err != nil {
		t.Fatalf("migrated schema: %v", err)
	}
	if err := mg.Down(); err != nil {
		t.Fatal(err)
	}
	wantSchemaError(mysql.SchemaError{Version: latest - 1, Want: latest})

	mustExec(t, dbx, `UPDATE schema_migrations SET dirty = 1`)
	wantSchemaError(mysql.SchemaError{Version: latest - 1, Dirty: true, Want: latest})
	if err := mg.Force(latest - 1); err != nil {
		t.Fatal(err)
	}
	wantSchemaError(mysql.SchemaError{Version: latest - 1, Want: latest})
	if err := mg.Up(); err != nil {
		t.Fatal(err)
	}
	if err := mysql.CheckSchema(ctx, dbx); err != nil {
		t.Fatalf("after up: %v", err)
	}

	// A newer schema (the next release migrated first) still serves.
	mustExec(t, dbx, `UPDATE schema_migrations SET version = ?`, latest+1)
	if err := mysql.CheckSchema(ctx, dbx); err != nil {
		t.Fatalf("newer schema: %v", err)
	}
	if err := mg.Force(0); err != nil {
		t.Fatal(err)
	}
	wantSchemaError(mysql.SchemaError{Version: 0, Want: latest})
	mustExec(t, dbx, `DROP TABLE schema_migrations`) // a database nobody migrated
	wantSchemaError(mysql.SchemaError{Version: 0, Want: latest})
}
