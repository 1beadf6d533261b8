package mysql_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"gateway/mysql"
	"gateway/mysql/localdb"
	"gateway/mysql/mysqltest"
)

func TestNotPrimary(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"not prepared", &gomysql.MySQLError{Number: 1047, Message: "WSREP has not yet prepared node for application use"}, true},
		{"wrapped", fmt.Errorf("store.Claim: %w", &gomysql.MySQLError{Number: 1047}), true},
		{"commit outside the primary component", &gomysql.MySQLError{Number: 1180,
			Message: "Error while appending streaming replication fragment(provider status: Not connected to Primary Component)"}, true},
		{"another commit failure", &gomysql.MySQLError{Number: 1180, Message: "Got error 28 from storage engine"}, false},
		{"certification conflict", &gomysql.MySQLError{Number: 1213}, false},
		{"duplicate", &gomysql.MySQLError{Number: 1062}, false},
		{"not a server error", errors.New("1047"), false},
		{"nil", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := mysql.NotPrimary(tt.err); got != tt.want {
				t.Errorf("NotPrimary(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

func TestGaleraStateOfAPlainServer(t *testing.T) {
	st, err := mysql.GaleraState(t.Context(), mysqltest.MustOpen(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.Galera || !st.Usable() {
		t.Errorf("a server without a wsrep provider: %+v (usable %v), want no Galera node, usable", st, st.Usable())
	}
}

// TestGaleraStateOfANode starts a one-node cluster and tells it to refuse
// queries, as a node outside the primary component does.
func TestGaleraStateOfANode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Galera node: make proofs runs it")
	}
	c, err := localdb.StartCluster(t.Context(), localdb.ClusterOptions{Nodes: 1, NoInstall: true})
	if errors.Is(err, localdb.ErrNotInstalled) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() })
	pool, err := mysql.Open(t.Context(), c.Node(0).DSN(""), mysql.PoolOptions{MaxOpen: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()

	st, err := mysql.GaleraState(t.Context(), pool)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Galera || !st.Ready || st.Component != "Primary" || st.State != "Synced" || st.Size != 1 || !st.Usable() {
		t.Fatalf("a synced single node: %s (%+v), want a usable Galera node", st, st)
	}

	// Administrators' connections are exempt from wsrep_reject_queries; an
	// application's are not, on statements that read a table.
	admin, err := pool.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	for _, q := range []string{"CREATE USER app@'127.0.0.1'", "GRANT SELECT ON *.* TO app@'127.0.0.1'",
		"SET GLOBAL wsrep_reject_queries = ALL"} {
		if _, err := admin.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	defer admin.ExecContext(context.Background(), "SET GLOBAL wsrep_reject_queries = NONE")
	app, err := mysql.Open(t.Context(), "app@tcp("+c.Node(0).Addr()+")/", mysql.PoolOptions{MaxOpen: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	_, err = app.ExecContext(t.Context(), "SELECT COUNT(*) FROM mysql.db")
	if !mysql.NotPrimary(err) {
		t.Fatalf("a query on a node rejecting queries: err = %v, want one NotPrimary recognises", err)
	}
	st, err = mysql.GaleraState(t.Context(), admin)
	if err != nil {
		t.Fatalf("the status of a node rejecting queries: %v", err)
	}
	t.Logf("rejecting queries: %s", st)
}
