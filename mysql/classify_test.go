package mysql_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"

	"gateway/mysql"
)

func mysqlErr(number uint16, msg string) *gomysql.MySQLError {
	return &gomysql.MySQLError{Number: number, Message: msg}
}

func TestClassify(t *testing.T) {
	kinds := []error{mysql.ErrDuplicate, mysql.ErrRetryable, mysql.ErrConnLost, mysql.ErrUnavailable}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	tests := []struct {
		name string
		err  error
		want error // the kind, or nil when the error must come back unchanged
	}{
		{"duplicate 1062", mysqlErr(1062, "Duplicate entry 'k' for key 'PRIMARY'"), mysql.ErrDuplicate},
		{"deadlock 1213", mysqlErr(1213, "Deadlock found when trying to get lock"), mysql.ErrRetryable},
		{"lock wait timeout 1205", mysqlErr(1205, "Lock wait timeout exceeded"), mysql.ErrRetryable},
		{"lost during query 2013", mysqlErr(2013, "Lost connection to server during query"), mysql.ErrConnLost},
		{"server gone 2006", mysqlErr(2006, "MySQL server has gone away"), mysql.ErrConnLost},
		{"connection killed 1927", mysqlErr(1927, "Connection was killed"), mysql.ErrConnLost},
		{"server shutdown 1053", mysqlErr(1053, "Server shutdown in progress"), mysql.ErrConnLost},
		{"invalid conn", gomysql.ErrInvalidConn, mysql.ErrConnLost},
		{"bad conn", driver.ErrBadConn, mysql.ErrConnLost},
		{"wrapped duplicate", fmt.Errorf("insert payment: %w", mysqlErr(1062, "Duplicate entry")), mysql.ErrDuplicate},
		{"wrapped deadlock", fmt.Errorf("update: %w", mysqlErr(1213, "Deadlock")), mysql.ErrRetryable},
		{"wrapped invalid conn", fmt.Errorf("exec: %w", gomysql.ErrInvalidConn), mysql.ErrConnLost},
		{"wrapped bad conn", fmt.Errorf("exec: %w", driver.ErrBadConn), mysql.ErrConnLost},
		{"dial refused", refused, mysql.ErrUnavailable},
		{"read-only server 1290", mysqlErr(1290, "The MariaDB server is running with the --read-only option"), mysql.ErrUnavailable},
		{"read-only mode 1836", mysqlErr(1836, "Running in read-only mode"), mysql.ErrUnavailable},
		{"read-only transaction 1792", mysqlErr(1792, "Cannot execute statement in a READ ONLY transaction"), mysql.ErrUnavailable},
		{"cluster node not ready 1047", mysqlErr(1047, "WSREP has not yet prepared node for application use"), mysql.ErrUnavailable},
		{"commit outside the primary component 1180", mysqlErr(1180, "Error while appending streaming replication fragment(provider status: Not connected to Primary Component)"), mysql.ErrConnLost},
		{"statement time limit 1969", mysqlErr(1969, "Query execution was interrupted (max_statement_time exceeded)"), mysql.ErrUnavailable},
		{"statement time limit 3024 (MySQL)", mysqlErr(3024, "Query execution was interrupted, maximum statement execution time exceeded"), mysql.ErrUnavailable},
		{"wrapped dial refused", fmt.Errorf("begin: %w", refused), mysql.ErrUnavailable},
		// The driver's unexported errBadConnNoWrite, by its text: a broken
		// connection before anything was sent (a new connection's handshake).
		{"the driver's bad connection, nothing sent", errors.New("bad connection"), mysql.ErrUnavailable},
		{"wrapped, from a begin", fmt.Errorf("begin: %w", errors.New("bad connection")), mysql.ErrUnavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mysql.Classify(tt.err)
			if !errors.Is(got, tt.want) {
				t.Fatalf("Classify(%v) = %v, want it to be %v", tt.err, got, tt.want)
			}
			for _, k := range kinds {
				if k != tt.want && errors.Is(got, k) {
					t.Errorf("Classify(%v) = %v is also %v", tt.err, got, k)
				}
			}
			// The original stays readable for logs.
			if !strings.Contains(got.Error(), tt.err.Error()) {
				t.Errorf("Classify(%v) = %q lost the original message", tt.err, got)
			}
			// Classifying twice (a helper classifies, then Transact does) keeps the kind.
			if again := mysql.Classify(got); !errors.Is(again, tt.want) {
				t.Errorf("Classify(Classify(err)) = %v, lost %v", again, tt.want)
			}
		})
	}
}

func TestClassifyLeavesOtherErrorsUnchanged(t *testing.T) {
	tests := []struct {
		name string
		err  error
	}{
		{"unknown table 1146", mysqlErr(1146, "Table 'x' doesn't exist")},
		{"syntax 1064", mysqlErr(1064, "You have an error in your SQL syntax")},
		{"data too long 1406", mysqlErr(1406, "Data too long for column")},
		{"foreign key 1452", mysqlErr(1452, "Cannot add or update a child row")},
		{"plain", errors.New("boom")},
		{"no rows", sql.ErrNoRows},
		{"tx done", sql.ErrTxDone},
		{"canceled", context.Canceled},
		{"deadline", context.DeadlineExceeded},
		{"wrapped other", fmt.Errorf("x: %w", mysqlErr(1048, "Column cannot be null"))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := mysql.Classify(tt.err)
			if got != tt.err {
				t.Errorf("Classify(%v) = %v, want the same error back", tt.err, got)
			}
			for _, k := range []error{mysql.ErrDuplicate, mysql.ErrRetryable, mysql.ErrConnLost, mysql.ErrUnavailable} {
				if errors.Is(got, k) {
					t.Errorf("Classify(%v) is %v", tt.err, k)
				}
			}
		})
	}
	t.Run("nil", func(t *testing.T) {
		if got := mysql.Classify(nil); got != nil {
			t.Errorf("Classify(nil) = %v, want nil", got)
		}
	})
}

// A write whose deadline fires while it is in flight may have reached the
// server: its outcome is unknown, never a plain failure.
func TestClassifyWriteDeadlineIsUnknown(t *testing.T) {
	for _, err := range []error{context.DeadlineExceeded, context.Canceled, fmt.Errorf("exec: %w", context.DeadlineExceeded)} {
		if got := mysql.ClassifyWrite(err); !errors.Is(got, mysql.ErrConnLost) {
			t.Errorf("ClassifyWrite(%v) = %v, want ErrConnLost", err, got)
		}
	}
	if got := mysql.ClassifyWrite(mysqlErr(1062, "Duplicate entry")); !errors.Is(got, mysql.ErrDuplicate) {
		t.Errorf("ClassifyWrite keeps the other kinds: %v", got)
	}
}

// A conflict that outlasts the retries, a broken connection and an
// unreachable server all tell the payment flow "unavailable: retry" (503),
// never "internal" (500).
func TestUnavailableKinds(t *testing.T) {
	for _, err := range []error{
		mysql.Classify(mysqlErr(1213, "Deadlock")), mysql.Classify(mysqlErr(1205, "Lock wait timeout exceeded")),
		mysql.Classify(mysqlErr(2013, "Lost connection")), mysql.Classify(mysqlErr(1047, "WSREP has not yet prepared node")),
	} {
		var u interface{ Unavailable() bool }
		if !errors.As(err, &u) || !u.Unavailable() {
			t.Errorf("%v does not say unavailable", err)
		}
	}
}
