package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"

	"gateway/mysql"
)

// The half-open fault. A database session whose client side vanished in
// the middle of a transaction (a partition, a NAT that dropped the flow, a
// crashed host) is, for the server, a client thinking: it keeps the
// transaction and its row and gap locks until something ends the session.
// Unbounded, that stalls every request that needs those rows (claims of the
// same key, the reconciler's takeover) for hours. The gateway bounds it
// with server-side session limits (mysql.Open: idle_transaction_timeout,
// innodb_lock_wait_timeout, max_statement_time) and TCP keep-alive; the
// chaos run cuts such sessions on purpose and measures, from the server's
// own tables, how long their locks were held and waited on.

// halfOpenBound is the longest a half-open session may hold its locks:
// the server ends an idle transaction after mysql.IdleTransactionTimeout; the
// rest is margin for a loaded machine and the poll's resolution.
const halfOpenBound = mysql.IdleTransactionTimeout + 5*time.Second

// halfOpenCut is one session whose client side the proxy cut.
type halfOpenCut struct {
	ConnID    uint32    // the server's id of the session (its thread id)
	Statement string    // what the transaction had just sent, e.g. "INSERT INTO idempotency_keys"
	At        time.Time // when the client side was cut (as the statement left)

	to      chan<- *halfOpenCut // where the cut is reported
	once    sync.Once
	ended   chan struct{} // closed when the server ended the session
	endedAt time.Time     // set before ended is closed
}

func (h *halfOpenCut) serverEnded() {
	h.once.Do(func() {
		h.endedAt = time.Now()
		close(h.ended)
	})
}

// armHalfOpen makes the proxy cut the next connection that sends a write
// or a locking read inside a transaction: the statement reaches the server,
// then the client's side is reset (before any answer reaches it) and the
// server's side kept open and silent. The cut is delivered on the returned channel; disarm withdraws
// an arming that has not fired.
func (p *faultProxy) armHalfOpen() (cuts <-chan *halfOpenCut, disarm func()) {
	ch := make(chan *halfOpenCut, 1)
	p.mu.Lock()
	p.halfOpenTo = ch
	p.mu.Unlock()
	return ch, func() {
		p.mu.Lock()
		if p.halfOpenTo == ch {
			p.halfOpenTo = nil
		}
		p.mu.Unlock()
	}
}

// prepareHalfOpen follows the client's transactions in its chunk, about to
// be forwarded to the server, and, when armed and the chunk is a locking
// statement inside one, marks the link cut: from now on nothing the server
// says reaches the client. The caller forwards the chunk, then cutClient.
func (p *faultProxy) prepareHalfOpen(l *link, chunk []byte) *halfOpenCut {
	query, ok := comQuery(chunk)
	if !ok {
		return nil
	}
	verb := firstWord(query)
	switch verb {
	case "START", "BEGIN":
		l.inTx = true
		return nil
	case "COMMIT", "ROLLBACK":
		l.inTx = false
		return nil
	}
	if !l.inTx || !locking(verb, query) {
		return nil
	}
	p.mu.Lock()
	ch := p.halfOpenTo
	p.halfOpenTo = nil
	p.mu.Unlock()
	if ch == nil {
		return nil
	}
	h := &halfOpenCut{ConnID: l.connID.Load(), Statement: statementLabel(verb, query), At: time.Now(), ended: make(chan struct{}), to: ch}
	l.half.Store(h)
	return h
}

// cutClient resets the client's side of a link marked cut, as a crashed
// peer or a middlebox that forgot the flow would, and reports the cut.
func (p *faultProxy) cutClient(l *link, h *halfOpenCut) {
	if tc, ok := l.client.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = l.client.Close()
	p.stats.HalfOpen.Add(1)
	h.to <- h
}

// comQuery returns the text of a COM_QUERY packet: a 3-byte length, a
// sequence byte, the command 0x03 and the statement.
func comQuery(chunk []byte) (string, bool) {
	if len(chunk) < 6 || chunk[4] != 0x03 {
		return "", false
	}
	return string(chunk[5:]), true
}

func firstWord(query string) string {
	f := strings.Fields(strings.TrimSpace(query))
	if len(f) == 0 {
		return ""
	}
	return strings.ToUpper(f[0])
}

// locking: statements that take row locks inside a transaction.
func locking(verb, query string) bool {
	switch verb {
	case "INSERT", "UPDATE", "DELETE", "REPLACE":
		return true
	case "SELECT":
		return strings.Contains(strings.ToUpper(query), "FOR UPDATE")
	}
	return false
}

// statementLabel names a statement by its verb and table only: the values
// in it are not the report's business.
func statementLabel(verb, query string) string {
	words := strings.Fields(query)
	upper := make([]string, len(words))
	for i, w := range words {
		upper[i] = strings.ToUpper(w)
	}
	after := func(kw string) string {
		if i := slices.Index(upper, kw); i >= 0 && i+1 < len(words) {
			return strings.Trim(words[i+1], "`(")
		}
		return "?"
	}
	switch verb {
	case "INSERT", "REPLACE":
		return verb + " INTO " + after("INTO")
	case "UPDATE":
		return "UPDATE " + after("UPDATE")
	case "DELETE":
		return "DELETE FROM " + after("FROM")
	default:
		return "SELECT … FROM " + after("FROM") + " … FOR UPDATE"
	}
}

// greetingConnID reads the connection id from a server's greeting: a packet
// header, protocol version 10, the NUL-terminated server version, then the
// id as 4 little-endian bytes. 0 when chunk is not one.
func greetingConnID(chunk []byte) uint32 {
	if len(chunk) < 5 || chunk[4] != 10 {
		return 0
	}
	rest := chunk[5:]
	end := slices.Index(rest, 0)
	if end < 0 || len(rest) < end+5 {
		return 0
	}
	return binary.LittleEndian.Uint32(rest[end+1 : end+5])
}

// halfOpenSession is what the server did with one cut session.
type halfOpenSession struct {
	Replica   int    `json:"replica"`
	ConnID    uint32 `json:"connection_id"`
	Statement string `json:"statement"`
	// TrxSeen: the session's transaction was seen in innodb_trx after the
	// cut; RowsLocked the most rows it was seen holding explicit locks on
	// (the rows an INSERT adds are locked implicitly, and count only once
	// another session waits for one).
	TrxSeen    bool  `json:"trx_seen"`
	RowsLocked int64 `json:"rows_locked"`
	// LocksHeld is the time from the cut until its transaction was gone
	// (rolled back, its locks released; for one never seen, until the
	// session ended); -1 if not within the watch.
	LocksHeld time.Duration `json:"locks_held_ns"`
	// SessionEnded is the time from the cut until the server closed the
	// connection; -1 if not within the watch.
	SessionEnded time.Duration `json:"session_ended_ns"`
	// Waiters counts the transactions seen waiting for its locks;
	// LongestWait is the longest such wait seen.
	Waiters     int           `json:"waiters"`
	LongestWait time.Duration `json:"longest_wait_ns"`
	// WaitsUnknown: the server has no information_schema.innodb_lock_waits (MySQL 8).
	WaitsUnknown bool `json:"waits_unknown,omitempty"`
}

// halfOpenWatch is how long a cut session is watched at most: far past
// the bound, so that an unbounded stall shows as one.
const halfOpenWatch = 4 * halfOpenBound

// halfOpenPoll is how often the watch reads the server's lock tables. Not
// faster: InnoDB refreshes what information_schema shows of transactions
// and lock waits only when nobody read it for 100 ms, so a quicker poll
// would keep reading the same stale picture (a transaction long gone, a
// wait that never ends).
const halfOpenPoll = 250 * time.Millisecond

// watchHalfOpen polls the server (directly, not through a proxy) until the
// cut session's transaction is gone and the server ended the session, or
// halfOpenWatch has passed.
func watchHalfOpen(ctx context.Context, dbx *sqlx.DB, h *halfOpenCut, poll time.Duration) halfOpenSession {
	s := halfOpenSession{ConnID: h.ConnID, Statement: h.Statement, LocksHeld: -1, SessionEnded: -1}
	waiters := map[string]bool{}
	deadline := h.At.Add(halfOpenWatch)
	for {
		now := time.Now()
		var rows []int64
		err := dbx.SelectContext(ctx, &rows, `SELECT trx_rows_locked FROM information_schema.innodb_trx WHERE trx_mysql_thread_id = ?`, h.ConnID)
		switch {
		case err != nil:
		case len(rows) > 0:
			s.TrxSeen = true
			s.RowsLocked = max(s.RowsLocked, rows[0])
			if !s.WaitsUnknown {
				s.WaitsUnknown = !lockWaiters(ctx, dbx, h.ConnID, waiters, &s.LongestWait)
			}
		case s.TrxSeen && s.LocksHeld < 0:
			s.LocksHeld = now.Sub(h.At) // rolled back: its locks are released
		}
		select {
		case <-h.ended:
			if s.SessionEnded < 0 {
				s.SessionEnded = h.endedAt.Sub(h.At)
			}
			if !s.TrxSeen && err == nil && len(rows) == 0 {
				// Never seen (the statement took no lock, or failed): whatever
				// it held, it did not outlive its session.
				s.LocksHeld = s.SessionEnded
			}
		default:
		}
		if (s.LocksHeld >= 0 && s.SessionEnded >= 0) || now.After(deadline) {
			s.Waiters = len(waiters)
			return s
		}
		if !sleepCtx(ctx, poll) {
			s.Waiters = len(waiters)
			return s
		}
	}
}

// lockWaiters adds the transactions waiting for a lock that the session
// connID holds; false when the server cannot say (MySQL 8 has
// performance_schema.data_lock_waits instead).
func lockWaiters(ctx context.Context, dbx *sqlx.DB, connID uint32, seen map[string]bool, longest *time.Duration) bool {
	var rows []struct {
		Trx    string `db:"trx_id"`
		Waited int64  `db:"waited"`
	}
	err := dbx.SelectContext(ctx, &rows, `SELECT r.trx_id AS trx_id, TIMESTAMPDIFF(MICROSECOND, r.trx_wait_started, NOW(6)) AS waited
FROM information_schema.innodb_lock_waits w
JOIN information_schema.innodb_trx b ON b.trx_id = w.blocking_trx_id
JOIN information_schema.innodb_trx r ON r.trx_id = w.requesting_trx_id
WHERE b.trx_mysql_thread_id = ?`, connID)
	if err != nil {
		return false
	}
	for _, r := range rows {
		seen[r.Trx] = true
		*longest = max(*longest, time.Duration(r.Waited)*time.Microsecond)
	}
	return true
}

// halfOpen carries out one half-open event: arm the replica's database
// proxy, wait a moment for a transaction to cut, then watch the server.
func (x *injector) halfOpen(ctx context.Context, ev event) {
	p := x.e.dbProxies[ev.Target]
	cuts, disarm := p.armHalfOpen()
	x.halfArmed.Add(1)
	var h *halfOpenCut
	t := time.NewTimer(5 * time.Second)
	select {
	case h = <-cuts:
		t.Stop()
	case <-t.C:
	case <-ctx.Done():
		t.Stop()
	}
	disarm()
	if h == nil {
		select {
		case h = <-cuts: // fired while disarming
		default:
			return
		}
	}
	x.e.say("half-open: replica %d's session %d cut mid-transaction after %s", ev.Target, h.ConnID, h.Statement)
	// The watch outlives the chaos phase if it must: the measure is the point.
	s := watchHalfOpen(x.outer, x.e.db, h, halfOpenPoll)
	s.Replica = ev.Target
	x.e.say("half-open: session %d: locks held %s, session ended after %s, %d waiters (longest wait %s)",
		s.ConnID, watched(s.LocksHeld), watched(s.SessionEnded), s.Waiters, s.LongestWait.Round(10*time.Millisecond))
	x.mu.Lock()
	x.halfOpens = append(x.halfOpens, s)
	x.mu.Unlock()
}

func watched(d time.Duration) string {
	if d < 0 {
		return fmt.Sprintf("more than %s", halfOpenWatch)
	}
	return d.Round(10 * time.Millisecond).String()
}

// halfOpenReport sums up the half-open faults of a run.
type halfOpenReport struct {
	Armed    int64             `json:"armed"`
	Sessions []halfOpenSession `json:"sessions"`
	// Errors1205 counts lock wait timeouts the database proxies delivered
	// to the replicas during the whole run (half-open sessions are the
	// usual cause; contention can be another).
	Errors1205 int64 `json:"errors_1205"`
}

func (r *halfOpenReport) print(line func(label, format string, args ...any)) {
	var held, ended []time.Duration
	waiters := 0
	var wait time.Duration
	for _, s := range r.Sessions {
		if s.TrxSeen {
			held = append(held, s.LocksHeld)
		}
		ended = append(ended, s.SessionEnded)
		waiters += s.Waiters
		wait = max(wait, s.LongestWait)
	}
	line("half-open sessions", "%d armed, %d cut mid-transaction (%d with a transaction open at the server)", r.Armed, len(r.Sessions), len(held))
	if len(r.Sessions) == 0 {
		return
	}
	line("  locks held after the cut", "median %s, longest %s (bound %s: the server's idle_transaction_timeout %s plus margin)",
		watched(median(held)), watched(longest(held)), halfOpenBound, mysql.IdleTransactionTimeout)
	line("  server ended the session after", "median %s, longest %s", watched(median(ended)), watched(longest(ended)))
	line("  waits on their locks", "%d transactions waited, the longest %s (innodb_lock_wait_timeout %s); %d errors 1205 delivered in the run",
		waiters, wait.Round(10*time.Millisecond), mysql.LockWaitTimeout, r.Errors1205)
}

// longest is the largest of ds, where -1 (not within the watch) is larger
// than any; 0 for none.
func longest(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		if d < 0 {
			return -1
		}
		m = max(m, d)
	}
	return m
}

// median of ds, -1 (not within the watch) counting as the largest.
func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.SortFunc(s, func(a, b time.Duration) int {
		switch {
		case a == b:
			return 0
		case a < 0:
			return 1
		case b < 0:
			return -1
		case a < b:
			return -1
		}
		return 1
	})
	return s[len(s)/2]
}

// checkHalfOpen: invariant 8, every cut session's locks released within
// halfOpenBound.
func checkHalfOpen(r *halfOpenReport) *invariant {
	inv := &invariant{ID: 8, Name: fmt.Sprintf("a half-open session's locks are released within %s", halfOpenBound)}
	for _, s := range r.Sessions {
		inv.Checked++
		if s.LocksHeld < 0 || s.LocksHeld > halfOpenBound {
			inv.fail("replica %d's session %d (cut after %s) held its transaction's %d locked rows for %s; %d transactions waited, the longest %s",
				s.Replica, s.ConnID, s.Statement, s.RowsLocked, watched(s.LocksHeld), s.Waiters, s.LongestWait.Round(10*time.Millisecond))
		}
	}
	if r.Armed > 0 && len(r.Sessions) == 0 {
		inv.Notes = append(inv.Notes, "no transaction came through an armed proxy in time: nothing was cut")
	}
	return inv
}

func (x *injector) halfOpenReport(e *env) *halfOpenReport {
	x.mu.Lock()
	defer x.mu.Unlock()
	r := &halfOpenReport{Armed: x.halfArmed.Load(), Sessions: slices.Clone(x.halfOpens)}
	for _, p := range e.dbProxies {
		r.Errors1205 += p.mysqlErrors()[1205]
	}
	return r
}
