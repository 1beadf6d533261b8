package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"

	"gateway/mysql"
	"gateway/mysql/mysqltest"
)

func mustKVTable(tb testing.TB, dbx *sqlx.DB) {
	tb.Helper()
	mustExec(tb, dbx, "CREATE TABLE kv (k VARCHAR(16) NOT NULL PRIMARY KEY, v INT NOT NULL)")
}

func TestTransactCommits(t *testing.T) {
	dbx := mysqltest.MustOpen(t)
	mustKVTable(t, dbx)
	var attempts atomic.Int32
	err := mysql.Transact(t.Context(), dbx, func(tx *sqlx.Tx) error {
		attempts.Add(1)
		if _, err := tx.ExecContext(t.Context(), "INSERT INTO kv (k, v) VALUES ('a', 1)"); err != nil {
			return err
		}
		_, err := tx.ExecContext(t.Context(), "INSERT INTO kv (k, v) VALUES ('b', 2)")
		return err
	})
	if err != nil {
		t.Fatalf("Transact = %v", err)
	}
	if n := attempts.Load(); n != 1 {
		t.Errorf("fn ran %d times, want 1", n)
	}
	if n := mysqltest.Count(t, dbx, "SELECT COUNT(*) FROM kv"); n != 2 {
		t.Errorf("%d rows after commit, want 2", n)
	}
}

func TestTransactRollsBackOnError(t *testing.T) {
	dbx := mysqltest.MustOpen(t)
	mustKVTable(t, dbx)
	mustExec(t, dbx, "INSERT INTO kv (k, v) VALUES ('keep', 1)")
	var attempts atomic.Int32
	err := mysql.Transact(t.Context(), dbx, func(tx *sqlx.Tx) error {
		attempts.Add(1)
		if _, err := tx.ExecContext(t.Context(), "INSERT INTO kv (k, v) VALUES ('a', 1)"); err != nil {
			return err
		}
		if _, err := tx.ExecContext(t.Context(), "UPDATE kv SET v = 99 WHERE k = 'keep'"); err != nil {
			return err
		}
		return errSentinel
	})
	if !errors.Is(err, errSentinel) {
		t.Fatalf("Transact = %v, want fn's error", err)
	}
	if n := attempts.Load(); n != 1 {
		t.Errorf("fn ran %d times, want 1 (its error is not retryable)", n)
	}
	if n := mysqltest.Count(t, dbx, "SELECT COUNT(*) FROM kv WHERE k = 'a'"); n != 0 {
		t.Errorf("the row fn inserted is present after its error")
	}
	if n := mysqltest.Count(t, dbx, "SELECT COUNT(*) FROM kv WHERE k = 'keep' AND v = 1"); n != 1 {
		t.Errorf("the update fn made survived its error")
	}
}

func TestTransactDuplicateIsNotRetried(t *testing.T) {
	dbx := mysqltest.MustOpen(t)
	mustKVTable(t, dbx)
	mustExec(t, dbx, "INSERT INTO kv (k, v) VALUES ('taken', 1)")
	var attempts atomic.Int32
	err := mysql.Transact(t.Context(), dbx, func(tx *sqlx.Tx) error {
		attempts.Add(1)
		if _, err := tx.ExecContext(t.Context(), "INSERT INTO kv (k, v) VALUES ('fresh', 1)"); err != nil {
			return err
		}
		_, err := tx.ExecContext(t.Context(), "INSERT INTO kv (k, v) VALUES ('taken', 2)")
		return err // the raw driver error: Transact classifies it
	})
	if !errors.Is(err, mysql.ErrDuplicate) {
		t.Fatalf("Transact = %v, want ErrDuplicate", err)
	}
	if errors.Is(err, mysql.ErrRetryable) || errors.Is(err, mysql.ErrConnLost) {
		t.Errorf("Transact = %v is classified as more than a duplicate", err)
	}
	if n := attempts.Load(); n != 1 {
		t.Errorf("fn ran %d times, want 1", n)
	}
	if n := mysqltest.Count(t, dbx, "SELECT COUNT(*) FROM kv WHERE k = 'fresh'"); n != 0 {
		t.Errorf("the row inserted before the duplicate is present")
	}
	if n := mysqltest.Count(t, dbx, "SELECT COUNT(*) FROM kv WHERE k = 'taken' AND v = 1"); n != 1 {
		t.Errorf("the existing row changed")
	}
}

// TestTransactRetriesRetryableErrors: fn's first attempt writes, then fails
// as a deadlock would; the rerun starts from a clean transaction.
func TestTransactRetriesRetryableErrors(t *testing.T) {
	for _, number := range []uint16{1213, 1205} {
		t.Run(mysqlErr(number, "").Error(), func(t *testing.T) {
			dbx := mysqltest.MustOpen(t)
			mustKVTable(t, dbx)
			var attempts atomic.Int32
			err := mysql.Transact(t.Context(), dbx, func(tx *sqlx.Tx) error {
				n := attempts.Add(1)
				if _, err := tx.ExecContext(t.Context(), "INSERT INTO kv (k, v) VALUES ('a', ?)", n); err != nil {
					return err // a duplicate here would mean attempt 1 was not rolled back
				}
				if n == 1 {
					return mysqlErr(number, "simulated")
				}
				return nil
			})
			if err != nil {
				t.Fatalf("Transact = %v, want success on the second attempt", err)
			}
			if n := attempts.Load(); n != 2 {
				t.Errorf("fn ran %d times, want 2", n)
			}
			var v int
			mustGet(t, dbx, &v, "SELECT v FROM kv WHERE k = 'a'")
			if v != 2 {
				t.Errorf("stored v = %d, want 2 (the second attempt's write only)", v)
			}
		})
	}
}

func TestTransactGivesUp(t *testing.T) {
	dbx := mysqltest.MustOpen(t)
	var attempts atomic.Int32
	err := mysql.Transact(t.Context(), dbx, func(tx *sqlx.Tx) error {
		attempts.Add(1)
		return mysqlErr(1213, "Deadlock found when trying to get lock")
	})
	if !errors.Is(err, mysql.ErrRetryable) {
		t.Fatalf("Transact = %v, want ErrRetryable", err)
	}
	if n := attempts.Load(); n < 2 || n > 10 {
		t.Errorf("fn ran %d times, want a few retries and then a stop", n)
	}
}

func TestTransactStopsRetryingWhenContextEnds(t *testing.T) {
	dbx := mysqltest.MustOpen(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var attempts atomic.Int32
	err := mysql.Transact(ctx, dbx, func(tx *sqlx.Tx) error {
		attempts.Add(1)
		cancel()
		return mysqlErr(1213, "Deadlock found when trying to get lock")
	})
	if err == nil {
		t.Fatal("Transact = nil after its context was canceled")
	}
	if n := attempts.Load(); n != 1 {
		t.Errorf("fn ran %d times after the context was canceled, want 1", n)
	}
}

// TestTransactRetriesRealDeadlock makes two transactions lock two rows in
// opposite orders. Barriers make sure both hold their first lock before
// either asks for its second, so MariaDB must kill one of them with 1213;
// Transact must rerun the victim and both must end up committed exactly once.
func TestTransactRetriesRealDeadlock(t *testing.T) {
	dbx := mysqltest.MustOpen(t)
	mustExec(t, dbx, "CREATE TABLE dl (id INT NOT NULL PRIMARY KEY, n INT NOT NULL)")
	mustExec(t, dbx, "CREATE TABLE dl_log (worker VARCHAR(8) NOT NULL, attempt INT NOT NULL)")
	mustExec(t, dbx, "INSERT INTO dl (id, n) VALUES (1, 0), (2, 0)")

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	type worker struct {
		name          string
		first, second int
		ready         chan struct{} // closed once this worker holds its first lock
		attempts      atomic.Int32
		err           error
	}
	a := &worker{name: "a", first: 1, second: 2, ready: make(chan struct{})}
	b := &worker{name: "b", first: 2, second: 1, ready: make(chan struct{})}
	run := func(w, other *worker) error {
		return mysql.Transact(ctx, dbx, func(tx *sqlx.Tx) error {
			n := w.attempts.Add(1)
			// Written first, so a rolled-back attempt would leave a trace if it were committed.
			if _, err := tx.ExecContext(ctx, "INSERT INTO dl_log (worker, attempt) VALUES (?, ?)", w.name, n); err != nil {
				return err
			}
			var cur int
			if err := tx.GetContext(ctx, &cur, "SELECT n FROM dl WHERE id = ? FOR UPDATE", w.first); err != nil {
				return err
			}
			if n == 1 {
				close(w.ready)
				select {
				case <-other.ready:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			_, err := tx.ExecContext(ctx, "UPDATE dl SET n = n + 1 WHERE id = ?", w.second)
			return err
		})
	}
	var wg sync.WaitGroup
	wg.Go(func() { a.err = run(a, b) })
	wg.Go(func() { b.err = run(b, a) })
	wg.Wait()

	for _, w := range []*worker{a, b} {
		if w.err != nil {
			t.Errorf("worker %s: Transact = %v, want commit after retry", w.name, w.err)
		}
	}
	total := a.attempts.Load() + b.attempts.Load()
	if total < 3 {
		t.Errorf("fn ran %d times in all (a %d, b %d), want at least 3: no deadlock was retried",
			total, a.attempts.Load(), b.attempts.Load())
	}
	var rows []struct {
		ID int `db:"id"`
		N  int `db:"n"`
	}
	if err := dbx.SelectContext(t.Context(), &rows, "SELECT id, n FROM dl ORDER BY id"); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].N != 1 || rows[1].N != 1 {
		t.Errorf("rows = %+v, want each row incremented exactly once", rows)
	}
	for _, w := range []*worker{a, b} {
		var logged []int
		if err := dbx.SelectContext(t.Context(), &logged, "SELECT attempt FROM dl_log WHERE worker = ?", w.name); err != nil {
			t.Fatal(err)
		}
		if len(logged) != 1 || logged[0] != int(w.attempts.Load()) {
			t.Errorf("worker %s: committed attempts %v, want only its last attempt %d", w.name, logged, w.attempts.Load())
		}
	}
}

// TestTransactDeadlockErrorIsRetryable checks the driver error a real
// deadlock produces is one Classify knows, independent of Transact.
func TestTransactDeadlockErrorIsRetryable(t *testing.T) {
	dbx := mysqltest.MustOpen(t)
	mustExec(t, dbx, "CREATE TABLE dl (id INT NOT NULL PRIMARY KEY, n INT NOT NULL)")
	mustExec(t, dbx, "INSERT INTO dl (id, n) VALUES (1, 0), (2, 0)")
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	txA, err := dbx.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer txA.Rollback()
	txB, err := dbx.BeginTxx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer txB.Rollback()
	if _, err := txA.ExecContext(ctx, "UPDATE dl SET n = n + 1 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	if _, err := txB.ExecContext(ctx, "UPDATE dl SET n = n + 1 WHERE id = 2"); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 2)
	go func() {
		_, err := txA.ExecContext(ctx, "UPDATE dl SET n = n + 1 WHERE id = 2")
		if err != nil {
			_ = txA.Rollback() // let the other side go on
		}
		errs <- err
	}()
	go func() {
		_, err := txB.ExecContext(ctx, "UPDATE dl SET n = n + 1 WHERE id = 1")
		if err != nil {
			_ = txB.Rollback()
		}
		errs <- err
	}()
	var victims int
	for range 2 {
		err := <-errs
		if err == nil {
			continue
		}
		victims++
		var me *gomysql.MySQLError
		if !errors.As(err, &me) || me.Number != 1213 {
			t.Errorf("deadlock victim got %v, want MySQL error 1213", err)
		}
		if !errors.Is(mysql.Classify(err), mysql.ErrRetryable) {
			t.Errorf("Classify(%v) is not ErrRetryable", err)
		}
	}
	if victims != 1 {
		t.Errorf("%d deadlock victims, want 1", victims)
	}
}

// TestTransactUnreachable: when no connection can be made nothing was
// written, so the error says "unavailable", never "outcome unknown".
func TestTransactUnreachable(t *testing.T) {
	cfg, err := mysql.Config("root@tcp(" + freeAddr(t) + ")/gw")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := gomysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dbx := sqlx.NewDb(sql.OpenDB(conn), "mysql")
	defer dbx.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	var attempts atomic.Int32
	err = mysql.Transact(ctx, dbx, func(tx *sqlx.Tx) error {
		attempts.Add(1)
		return nil
	})
	if !errors.Is(err, mysql.ErrUnavailable) {
		t.Errorf("Transact = %v, want ErrUnavailable", err)
	}
	if errors.Is(err, mysql.ErrConnLost) {
		t.Errorf("Transact = %v claims an unknown outcome for a write never sent", err)
	}
	if n := attempts.Load(); n != 0 {
		t.Errorf("fn ran %d times without a connection", n)
	}
}

// A locking read in TransactReadCommitted keeps no lock on a row it passed
// over without taking it, so a write to that row goes through while the
// transaction is open; in Transact (REPEATABLE READ) the same write waits.
func TestTransactReadCommittedLocksOnlyWhatItTakes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		transact func(context.Context, *sqlx.DB, func(*sqlx.Tx) error) error
		blocks   bool
	}{
		{"read committed", mysql.TransactReadCommitted, false},
		{"repeatable read", mysql.Transact, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			dbx := mysqltest.MustOpen(t)
			mustKVTable(t, dbx)
			mustExec(t, dbx, "INSERT INTO kv (k, v) VALUES ('passed', 1), ('taken', 0)")
			other, err := dbx.Connx(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			if _, err := other.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 1"); err != nil {
				t.Fatal(err)
			}
			var writeErr error
			err = tc.transact(ctx, dbx, func(tx *sqlx.Tx) error {
				var k string
				if err := tx.GetContext(ctx, &k, "SELECT k FROM kv WHERE v = 0 LIMIT 1 FOR UPDATE SKIP LOCKED"); err != nil {
					return err
				}
				if k != "taken" {
					t.Fatalf("took %q", k)
				}
				_, writeErr = other.ExecContext(ctx, "UPDATE kv SET v = 2 WHERE k = 'passed'")
				return nil
			})
			if err != nil {
				t.Fatalf("transact: %v", err)
			}
			var me *gomysql.MySQLError
			switch blocked := errors.As(writeErr, &me) && me.Number == 1205; {
			case blocked != tc.blocks:
				t.Fatalf("write to the row passed over: %v, want blocked %v", writeErr, tc.blocks)
			case !blocked && writeErr != nil:
				t.Fatal(writeErr)
			}
		})
	}
}
