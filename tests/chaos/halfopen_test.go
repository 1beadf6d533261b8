package main

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	gomysql "github.com/go-sql-driver/mysql"

	"gateway/mysql"
	"gateway/mysql/mysqltest"
)

func TestMain(m *testing.M) { mysqltest.Main(m) }

func query(q string) []byte { return packet(0, append([]byte{0x03}, q...)...) }

// greeting is the start of a server's handshake packet with connection id id.
func greeting(id uint32) []byte {
	p := append([]byte{10}, "11.8.3-MariaDB\x00"...)
	p = binary.LittleEndian.AppendUint32(p, id)
	return packet(0, append(p, "salt"...)...)
}

// mysqlishServer greets every connection as session 42 and answers every
// chunk with "ok"; each accepted server-side connection is handed to the
// test, and each chunk it received.
func mysqlishServer(t *testing.T) (addr string, conns <-chan net.Conn, got <-chan []byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	cc, gc := make(chan net.Conn, 4), make(chan []byte, 64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			cc <- c
			go func() {
				if _, err := c.Write(greeting(42)); err != nil {
					return
				}
				buf := make([]byte, 4096)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						gc <- append([]byte(nil), buf[:n]...)
						if _, err := c.Write(packet(1, []byte("ok")...)); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), cc, gc
}

// exchange sends a statement and waits for the server's answer.
func exchange(t *testing.T, c net.Conn, q string) error {
	t.Helper()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := c.Write(query(q)); err != nil {
		return err
	}
	buf := make([]byte, 64)
	_, err := io.ReadAtLeast(c, buf, 6)
	return err
}

func TestProxyHalfOpenCutsOnlyTheClientSideMidTransaction(t *testing.T) {
	addr, conns, got := mysqlishServer(t)
	p, err := newFaultProxy("test", addr, 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.close)
	cuts, disarm := p.armHalfOpen()
	defer disarm()

	c, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	server := <-conns
	hello := make([]byte, len(greeting(42)))
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.ReadFull(c, hello); err != nil {
		t.Fatalf("greeting: %v", err)
	}
	// Outside a transaction, and inside one before anything is locked,
	// nothing is cut.
	for _, q := range []string{"INSERT INTO t VALUES (1)", "START TRANSACTION", "SELECT NOW(6)"} {
		if err := exchange(t, c, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		<-got
	}
	select {
	case h := <-cuts:
		t.Fatalf("cut before a locking statement inside a transaction: %+v", h)
	default:
	}

	// The first locking statement inside the transaction reaches the server,
	// then the client's side is reset.
	err = exchange(t, c, "\nUPDATE payments SET status = 'x' WHERE merchant_id = 'm' AND id = 'p'")
	var ne net.Error
	if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("the client's side was not reset after the locking statement: %v", err)
	}
	select {
	case b := <-got:
		if q, _ := comQuery(b); firstWord(q) != "UPDATE" {
			t.Fatalf("the server received %q, want the UPDATE", b)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the locking statement never reached the server")
	}
	var h *halfOpenCut
	select {
	case h = <-cuts:
	case <-time.After(2 * time.Second):
		t.Fatal("no cut reported")
	}
	if h.ConnID != 42 || h.Statement != "UPDATE payments" {
		t.Fatalf("cut %d after %q, want session 42 after UPDATE payments", h.ConnID, h.Statement)
	}

	// The server's side stays open and silent, through an outage too: the
	// server sees a client that says nothing, and its writes go nowhere.
	up := p.down()
	up()
	_ = server.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := server.Read(make([]byte, 16)); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("the server's side did not stay open and silent: %v", err)
	}
	if _, err := server.Write(packet(2, []byte("anyone?")...)); err != nil {
		t.Fatalf("the server could not write to its side: %v", err)
	}
	select {
	case <-h.ended:
		t.Fatal("the session was reported ended while the server kept it")
	default:
	}

	// When the server ends the session, the proxy notices.
	server.Close()
	select {
	case <-h.ended:
	case <-time.After(2 * time.Second):
		t.Fatal("the server ended the session and the proxy did not notice")
	}
	if h.endedAt.Before(h.At) {
		t.Fatalf("session ended at %v, before the cut at %v", h.endedAt, h.At)
	}
	if n := p.stats.HalfOpen.Load(); n != 1 {
		t.Fatalf("%d half-open cuts counted, want 1", n)
	}
	// One shot: the next connection passes untouched.
	c2, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	<-conns
	_, _ = io.ReadFull(c2, hello)
	for _, q := range []string{"START TRANSACTION", "INSERT INTO t VALUES (2)", "COMMIT"} {
		if err := exchange(t, c2, q); err != nil {
			t.Fatalf("after the cut, %s: %v", q, err)
		}
	}
}

func TestHalfOpenLabelsAndGreeting(t *testing.T) {
	for q, want := range map[string]string{
		"INSERT INTO idempotency_keys\n (merchant_id) VALUES ('m')": "INSERT INTO idempotency_keys",
		"UPDATE idempotency_keys SET x = 1 WHERE y = 2":             "UPDATE idempotency_keys",
		"DELETE FROM idempotency_keys WHERE 1":                      "DELETE FROM idempotency_keys",
		"SELECT a, b FROM payments WHERE id = 'x' FOR UPDATE":       "SELECT … FROM payments … FOR UPDATE",
	} {
		if got := statementLabel(firstWord(q), q); got != want {
			t.Errorf("statementLabel(%q) = %q, want %q", q, got, want)
		}
	}
	if !locking("SELECT", "select 1 from t for update skip locked") || locking("SELECT", "SELECT NOW(6)") {
		t.Error("locking reads told apart wrongly")
	}
	if id := greetingConnID(greeting(123456)); id != 123456 {
		t.Errorf("greetingConnID = %d, want 123456", id)
	}
	if id := greetingConnID(packet(1, []byte("ok")...)); id != 0 {
		t.Errorf("greetingConnID of another packet = %d, want 0", id)
	}
}

// TestHalfOpenSessionLocksAreBounded cuts a real gateway connection (mysql.Open,
// with its session limits) half-open right after it locked a row, while
// another session wants that row: the server must end the cut session and
// release the row within the bound, and the watch must see all of it.
func TestHalfOpenSessionLocksAreBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the server's idle transaction timeout: make proofs runs it")
	}
	ctx := t.Context()
	dsn := mysqltest.MustDSN(t)
	direct, err := mysql.Open(ctx, dsn, mysql.PoolOptions{MaxOpen: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	if _, err := direct.ExecContext(ctx, `CREATE TABLE halfopen_probe (id INT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	cfg, err := gomysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p, err := newFaultProxy("test", cfg.Addr, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	cfg.Addr = p.addr
	gateway, err := mysql.Open(ctx, cfg.FormatDSN(), mysql.PoolOptions{MaxOpen: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer gateway.Close()

	cuts, disarm := p.armHalfOpen()
	defer disarm()
	tx, err := gateway.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO halfopen_probe VALUES (1)`); err == nil {
		t.Fatal("the INSERT was answered through a cut connection")
	}
	_ = tx.Rollback()
	h := <-cuts

	// Another session wants the row: it waits on the cut session's lock
	// (each wait ends in 1205 after innodb_lock_wait_timeout) until the
	// server ends that session.
	// The cut statement is on its way: let it run (and take its lock) first.
	for done := false; !done; {
		var n int
		err := direct.GetContext(ctx, &n, `SELECT COUNT(*) FROM information_schema.innodb_trx
WHERE trx_mysql_thread_id = ? AND trx_query IS NULL`, h.ConnID)
		if err != nil {
			t.Fatal(err)
		}
		done = n > 0
		if !done && (time.Since(h.At) > 5*time.Second || !sleepCtx(ctx, halfOpenPoll)) {
			t.Fatal("the cut session's statement did not run")
		}
	}
	type outcome struct {
		err      error
		after    time.Duration // from the cut
		timeouts int           // lock wait timeouts (1205) on the way
	}
	inserted := make(chan outcome, 1)
	go func() {
		timeouts := 0
		for {
			_, err := direct.ExecContext(ctx, `INSERT INTO halfopen_probe VALUES (1)`)
			if !errors.Is(mysql.Classify(err), mysql.ErrRetryable) {
				inserted <- outcome{err, time.Since(h.At), timeouts}
				return
			}
			timeouts++
		}
	}()
	s := watchHalfOpen(ctx, direct, h, halfOpenPoll)
	t.Logf("session %d: %+v", h.ConnID, s)
	if !s.TrxSeen {
		t.Fatalf("the cut session's transaction was not seen: %+v", s)
	}
	if s.LocksHeld < mysql.IdleTransactionTimeout-time.Second || s.LocksHeld > halfOpenBound {
		t.Fatalf("locks held %s after the cut, want about the idle transaction timeout %s, at most %s", s.LocksHeld, mysql.IdleTransactionTimeout, halfOpenBound)
	}
	if s.SessionEnded < 0 || s.SessionEnded > halfOpenBound {
		t.Fatalf("the server ended the session after %s, want within %s", s.SessionEnded, halfOpenBound)
	}
	if s.LongestWait > mysql.LockWaitTimeout+time.Second {
		t.Fatalf("a wait on the cut session's lock lasted %s, longer than innodb_lock_wait_timeout %s", s.LongestWait, mysql.LockWaitTimeout)
	}
	// The other session got the row once, and only once, the server ended
	// the cut one: the stall a request sees is bounded by the session limits.
	o := <-inserted
	t.Logf("the waiting session got the row %s after the cut, after %d lock wait timeouts", o.after, o.timeouts)
	if o.err != nil {
		t.Fatalf("the waiting session never got the row: %v", o.err)
	}
	if o.after < mysql.IdleTransactionTimeout-time.Second || o.after > halfOpenBound {
		t.Fatalf("the waiting session got the row %s after the cut, want about %s, at most %s", o.after, mysql.IdleTransactionTimeout, halfOpenBound)
	}
	if inv := checkHalfOpen(&halfOpenReport{Sessions: []halfOpenSession{s}}); inv.Violations != 0 {
		t.Fatalf("invariant 8 failed a bounded session: %v", inv.Examples)
	}
}
