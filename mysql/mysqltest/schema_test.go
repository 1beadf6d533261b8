package mysqltest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"gateway/mysql"
)

func TestMain(m *testing.M) { Main(m) }

// A test's database is what the migrations make: every table's definition
// and the migrations' version, against a database migrated from scratch.
func TestATestsDatabaseIsWhatTheMigrationsMake(t *testing.T) {
	ctx := context.Background()
	made := MustOpen(t)
	base := serverDSN(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "gwmig_" + hex.EncodeToString(b[:])
	admin, err := mysql.Open(ctx, base, mysql.PoolOptions{MaxOpen: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.ExecContext(context.Background(), "DROP DATABASE IF EXISTS `"+name+"`") })
	cfg, err := gomysql.ParseDSN(base)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DBName = name
	if err := mysql.MigrateUp(cfg.FormatDSN()); err != nil {
		t.Fatal(err)
	}
	var madeName string
	if err := made.GetContext(ctx, &madeName, "SELECT DATABASE()"); err != nil {
		t.Fatal(err)
	}
	definitions := func(db string) map[string]string {
		var tables []string
		if err := admin.SelectContext(ctx, &tables, `SELECT table_name FROM information_schema.tables WHERE table_schema = ?`, db); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, tb := range tables {
			var n, ddl string
			if err := admin.QueryRowContext(ctx, "SHOW CREATE TABLE `"+db+"`.`"+tb+"`").Scan(&n, &ddl); err != nil {
				t.Fatal(err)
			}
			out[tb] = autoIncrement.ReplaceAllString(ddl, "")
		}
		return out
	}
	want, got := definitions(name), definitions(madeName)
	if len(want) < 15 || len(got) != len(want) {
		t.Fatalf("%d tables made for a test, %d by the migrations", len(got), len(want))
	}
	for tb, ddl := range want {
		if got[tb] != ddl {
			t.Errorf("table %s differs:\nmigrated: %s\nmade:     %s", tb, ddl, got[tb])
		}
	}
	version := func(db string) (v int64, dirty bool) {
		if err := admin.QueryRowContext(ctx, "SELECT version, dirty FROM `"+db+"`.schema_migrations").Scan(&v, &dirty); err != nil {
			t.Fatal(err)
		}
		return v, dirty
	}
	wv, wd := version(name)
	if gv, gd := version(madeName); gv != wv || gd != wd || wd {
		t.Fatalf("schema_migrations: made %d (dirty %v), migrated %d (dirty %v)", gv, gd, wv, wd)
	}
}
