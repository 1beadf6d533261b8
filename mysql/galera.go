package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"

	gomysql "github.com/go-sql-driver/mysql"
)

// What a Galera node (MariaDB Galera, Percona XtraDB Cluster) answers when
// it cannot take a statement.
const (
	// ErrNumNotPrepared is 1047, "WSREP has not yet prepared node for
	// application use": the node is outside the primary component, still
	// joining, or told to reject queries. It refuses every statement,
	// reads included, before doing anything; at COMMIT it means the
	// transaction was not replicated.
	ErrNumNotPrepared = 1047
	// ErrNumCommitFailed is 1180, "Error while appending streaming
	// replication fragment (provider status: Not connected to Primary
	// Component)": the node lost the primary component while committing.
	ErrNumCommitFailed = 1180
)

// NotPrimary reports whether err is a Galera node refusing work because it
// is not a synced member of the primary component (1047, or 1180 naming
// the primary component). Another node may take the work; this one will
// again once it has rejoined.
func NotPrimary(err error) bool {
	var me *gomysql.MySQLError
	if !errors.As(err, &me) {
		return false
	}
	switch me.Number {
	case ErrNumNotPrepared:
		return true
	case ErrNumCommitFailed:
		return strings.Contains(me.Message, "Primary Component")
	}
	return false
}

// NodeState is what a server says about its place in a Galera cluster.
type NodeState struct {
	Galera    bool   // a wsrep provider is loaded: the server is a cluster node
	Ready     bool   // wsrep_ready: the node accepts queries
	Component string // wsrep_cluster_status: Primary, non-Primary or Disconnected
	State     string // wsrep_local_state_comment: Synced, Joining, Joined, Donor/Desynced…
	Size      int    // wsrep_cluster_size
}

// Usable reports whether the server can take reads and writes now: any
// server that is no Galera node, or a node that is ready in the primary
// component. Statements that read no table (SELECT 1, SELECT NOW(6)) and
// pings succeed on a node outside the primary component, so a readiness
// check must use this (or read a table) to notice. A node told to refuse
// clients (wsrep_reject_queries) still looks usable here.
func (s NodeState) Usable() bool {
	return !s.Galera || (s.Ready && s.Component == "Primary")
}

// String describes the state for logs and /readyz answers.
func (s NodeState) String() string {
	if !s.Galera {
		return "not a Galera node"
	}
	return fmt.Sprintf("Galera node: %s, %s in a cluster of %d, ready %v", s.State, s.Component, s.Size, s.Ready)
}

// Querier is what GaleraState needs: a *sql.DB, *sqlx.DB, *sql.Conn or *sql.Tx.
type Querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// GaleraState asks the server behind q about its cluster. It works on every
// server: MySQL and MariaDB without a provider report Galera false. The
// status query itself is answered by a node outside the primary component,
// which refuses every other statement with 1047.
func GaleraState(ctx context.Context, q Querier) (NodeState, error) {
	var st NodeState
	rows, err := q.QueryContext(ctx, `SHOW GLOBAL STATUS WHERE Variable_name IN
    ('wsrep_provider_name', 'wsrep_ready', 'wsrep_cluster_status', 'wsrep_local_state_comment', 'wsrep_cluster_size')`)
	if err != nil {
		return st, fmt.Errorf("mysql: galera state: %w", Classify(err))
	}
	defer rows.Close()
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			return st, fmt.Errorf("mysql: galera state: %w", err)
		}
		switch strings.ToLower(name) {
		case "wsrep_provider_name":
			st.Galera = value != ""
		case "wsrep_ready":
			st.Ready = value == "ON"
		case "wsrep_cluster_status":
			st.Component = value
		case "wsrep_local_state_comment":
			st.State = value
		case "wsrep_cluster_size":
			st.Size, _ = strconv.Atoi(value)
		}
	}
	if err := rows.Err(); err != nil {
		return st, fmt.Errorf("mysql: galera state: %w", Classify(err))
	}
	if !st.Galera {
		return NodeState{}, nil
	}
	return st, nil
}
