package mysql_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"gateway/mysql"
	"gateway/mysql/localdb"
)

// A demoted primary answers read-only: the gateway must see "unavailable"
// (a 503 the client retries, /readyz failing), never a half-applied write.
// This needs a server of its own: read_only is global.
func TestReadOnlyServerIsUnavailable(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a private server: make proofs runs it")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := localdb.Start(ctx, localdb.Options{DataDir: t.TempDir(), NoInstall: true})
	if err != nil {
		t.Skipf("no private MariaDB for this test: %v", err)
	}
	defer srv.Stop()
	root, err := mysql.Open(ctx, srv.DSN(""), mysql.PoolOptions{MaxOpen: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	for _, q := range []string{
		"CREATE DATABASE ro", "CREATE TABLE ro.t (k INT PRIMARY KEY)",
		"CREATE USER 'gw'@'%' IDENTIFIED BY 'pw'", "GRANT ALL ON ro.* TO 'gw'@'%'",
	} {
		if _, err := root.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	gw, err := mysql.Open(ctx, "gw:pw@tcp("+srv.Addr()+")/ro", mysql.PoolOptions{MaxOpen: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	if err := mysql.Writable(ctx, gw); err != nil {
		t.Fatalf("writable server: %v", err)
	}
	if _, err := root.ExecContext(ctx, "SET GLOBAL read_only = 1"); err != nil {
		t.Fatal(err)
	}
	if err := mysql.Writable(ctx, gw); !errors.Is(err, mysql.ErrUnavailable) {
		t.Fatalf("read-only server: Writable = %v, want ErrUnavailable", err)
	}
	_, err = mysql.ExecRetry(ctx, gw, "INSERT INTO t VALUES (1)")
	if !errors.Is(err, mysql.ErrUnavailable) && !errors.Is(err, mysql.ErrConnLost) {
		t.Fatalf("write to a read-only server: %v, want it unavailable", err)
	}
	var n int
	if err := root.GetContext(ctx, &n, "SELECT COUNT(*) FROM ro.t"); err != nil || n != 0 {
		t.Fatalf("%d rows written to a read-only server (%v)", n, err)
	}
}
