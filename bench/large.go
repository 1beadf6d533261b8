package main

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"math"
	"net/http"
	rtmetrics "runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	gomysql "github.com/go-sql-driver/mysql"
	"github.com/jmoiron/sqlx"
	"github.com/oklog/ulid/v2"
	"github.com/prometheus/client_golang/prometheus"

	"gateway/metrics"
	"gateway/mysql"
	"gateway/payments"
	"gateway/psp/fake"
)

// The large scenarios (--large): the same work on tables holding a history
// of --large-rows payments and their keys, spread over fillMerchants
// merchants and fillDays days, against the same work on the run's empty
// tables in the same run; then a purge of the history's expired keys while
// 64 clients pay, a books pass over a period of the history (books.go),
// and a reconciler backlog. The history lives in a
// database of its own (--large-db) that is kept, and filled only where it
// lacks rows, so that a run after the first starts at once; the purge
// empties its expired keys, which the next run puts back.

const (
	fillMerchants = 1000
	fillDays      = 90
	fillChunk     = 1000 // rows of one fill transaction and of one INSERT per table, and of one mark in bench_fill
	fillRun       = 100  // consecutive rows of one merchant: a chunk writes fillChunk/fillRun runs in key order
	fillPerInsert = 500  // rows of one INSERT of seedColdKeys
	fillWorkers   = 4
	coldKeys      = 40_000 // completed keys each cold-replay phase may read, none seen by the gateway
)

// largeReport is what the large scenarios measured beside the table.
type largeReport struct {
	Database    string  `json:"database"`
	Rows        int     `json:"rows"`
	Filled      int     `json:"filled_rows"`
	FillSeconds float64 `json:"fill_seconds"`
	FillRate    float64 `json:"fill_rows_per_second"`
	// TableBytes is the history tables' (payments, idempotency_keys) data
	// and indexes as information_schema.TABLES estimates them, beside the
	// server's buffer pool.
	TableBytes      int64   `json:"history_table_bytes"`
	BufferPoolBytes int64   `json:"buffer_pool_bytes"`
	Purged          int64   `json:"purged_keys"`
	PurgeRate       float64 `json:"purge_keys_per_second"`
	PurgeErrors     string  `json:"purge_error,omitempty"`
	// TableSizes and Throughputs: fresh payments per table size, for the chart.
	TableSizes  []int     `json:"table_sizes"`
	Throughputs []float64 `json:"fresh_throughputs"`
	BacklogRows int       `json:"backlog_rows,omitempty"`
	BacklogSecs float64   `json:"backlog_seconds,omitempty"`
}

// poolWarning says when the history's tables outgrow the buffer pool: then
// every random unique-index page the flow reads is a disk read, which a
// deployment avoids by sizing its pool to its hot indexes.
func (l *largeReport) poolWarning() string {
	if l.TableBytes <= l.BufferPoolBytes {
		return ""
	}
	return fmt.Sprintf("the history's tables (%.0f MiB) are larger than the buffer pool (%.0f MiB): their index pages are read from disk;"+
		" size the pool as for production (GATEWAY_BENCH_BUFFER_POOL for the private server, innodb_buffer_pool_size for a named one)",
		mib(l.TableBytes), mib(l.BufferPoolBytes))
}

func (b *bench) runLarge(ctx context.Context, hc *http.Client, rep *report) error {
	dsn, dbx, err := b.openLarge(ctx, rep)
	if err != nil {
		return err
	}
	defer dbx.Close()
	gwL, err := startGateway(ctx, dsn, "", b.label)
	if err != nil {
		return err
	}
	defer gwL.close()
	empty := b.gw
	defer func() { b.gw = empty }()
	on := func(g *gateway) { b.gw = g }
	rows := rep.Large.Rows

	// Fresh payments, 64 clients.
	var e, l []stats
	var eh, lh heapPeak
	for r := range b.opts.rounds {
		on(empty)
		st, _, err := b.heapPhase(ctx, &eh, "L fresh · empty tables", "large-fresh-empty", r, b.freshGroup(hc, "gateway", fmt.Sprintf("le1r%d", r), freshClients))
		if err != nil {
			return err
		}
		e = append(e, st)
		on(gwL)
		st, _, err = b.heapPhase(ctx, &lh, fmt.Sprintf("L fresh · %d rows", rows), "large-fresh", r, b.freshGroup(hc, "gateway", fmt.Sprintf("ll1r%d", r), freshClients))
		if err != nil {
			return err
		}
		l = append(l, st)
	}
	fe, fl := mergeStats(e), mergeStats(l)
	b.largeRow(rep, fmt.Sprintf("history %d rows: fresh payments, 64 clients", rows), fl, fe, lh)
	rep.Large.TableSizes, rep.Large.Throughputs = []int{0, rows}, []float64{fe.Throughput, fl.Throughput}

	// Replays of keys this replica has never seen (its cache is cold: each
	// is read from the database), 64 clients.
	e, l, eh, lh = nil, nil, heapPeak{}, heapPeak{}
	for r := range b.opts.rounds {
		for _, side := range []struct {
			g     *gateway
			out   *[]stats
			heap  *heapPeak
			title string
			sc    string
		}{{empty, &e, &eh, "L cold replay · empty tables", "large-replay-empty"}, {gwL, &l, &lh, fmt.Sprintf("L cold replay · %d rows", rows), "large-replay"}} {
			prefix := fmt.Sprintf("cold-%s-%s-r%d", b.nonce, side.sc, r)
			keys, err := seedColdKeys(ctx, side.g.dbx, side.g.merchant.ID, prefix, coldKeys)
			if err != nil {
				return err
			}
			on(side.g)
			pick := func(c *client) string { return keys[((c.id-1)+c.seq*replayClients)%len(keys)] }
			st, _, err := b.heapPhase(ctx, side.heap, side.title, side.sc, r, group{name: "gateway", clients: replayClients,
				op: b.replayOp(hc, pick, "")})
			if err != nil {
				return err
			}
			*side.out = append(*side.out, st)
		}
	}
	b.largeRow(rep, fmt.Sprintf("history %d rows: cold replays, 64 clients", rows), mergeStats(l), mergeStats(e), lh)

	// Fresh payments, PSP 100 ms, 512 clients.
	e, l, eh, lh = nil, nil, heapPeak{}, heapPeak{}
	for r := range b.opts.rounds {
		for _, side := range []struct {
			g     *gateway
			out   *[]stats
			heap  *heapPeak
			title string
			sc    string
		}{{empty, &e, &eh, "L PSP 100 ms · empty tables", "large-slow-empty"}, {gwL, &l, &lh, fmt.Sprintf("L PSP 100 ms · %d rows", rows), "large-slow"}} {
			on(side.g)
			side.g.pspLatency = slowPSP
			st, _, err := b.heapPhase(ctx, side.heap, side.title, side.sc, r, b.freshGroup(hc, "gateway", fmt.Sprintf("%s-r%d", side.sc, r), slowClients))
			side.g.pspLatency = 0
			if err != nil {
				return err
			}
			*side.out = append(*side.out, st)
		}
	}
	b.largeRow(rep, fmt.Sprintf("history %d rows: fresh, PSP 100 ms, 512 clients", rows), mergeStats(l), mergeStats(e), lh)

	// The purge of the history's expired keys while 64 clients pay.
	on(gwL)
	if err := b.purgeUnderLoad(ctx, hc, rep, dsn, dbx, fl); err != nil {
		return err
	}
	// The books of a period of the history: after the purge, whose
	// retention a deployment's keys are under too.
	if n := b.opts.largeBooksLines; n > 0 {
		if err := b.booksRun(ctx, hc, rep, booksTarget{sc: scLarge, title: fmt.Sprintf("history %d rows: books", rows), label: "lbk",
			g: gwL, dbx: dbx, database: rep.Large.Database, rows: rows, lines: n}); err != nil {
			return err
		}
	}
	on(empty)
	if b.opts.backlogRows > 0 {
		return b.backlog(ctx, rep)
	}
	return nil
}

// largeRow reports a scenario on the history against the same on empty
// tables: throughput ratio (goal 0.90) and p99 ratio (goal 1.5 at most).
func (b *bench) largeRow(rep *report, name string, large, empty stats, heap heapPeak) {
	p99 := 0.0
	if empty.P99 > 0 {
		p99 = large.P99 / empty.P99
	}
	r := row{Scenario: scLarge, Name: name, Unit: "req/s", Gateway: large, Floor: &empty, FloorLabel: "empty tables",
		Reference: empty.Throughput, Goal: 0.90, GoalText: ">= 0.90 x empty, p99 <= 1.5 x",
		PeakRSSBytes: heap.rss, Note: fmt.Sprintf("p99 %.2f x empty; peak heap %.1f MiB", p99, mib(heap.heap))}
	rep.add(r)
	last := &rep.Rows[len(rep.Rows)-1]
	if last.Met != nil && p99 > 1.5 {
		f := false
		last.Met = &f
	}
}

// heapPeak is the highest RSS and Go heap seen over a scenario's phases.
type heapPeak struct{ rss, heap int64 }

// heapPhase runs one gateway phase, sampling the Go heap while it runs.
func (b *bench) heapPhase(ctx context.Context, peak *heapPeak, title, scenario string, r int, g group) (stats, int64, error) {
	stop := make(chan struct{})
	var heap atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sample := []rtmetrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			rtmetrics.Read(sample)
			if v := int64(sample[0].Value.Uint64()); v > heap.Load() {
				heap.Store(v)
			}
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	st, rss, err := b.gatewayPhase(ctx, b.roundTitle(title, r), scenario, g)
	close(stop)
	wg.Wait()
	peak.rss, peak.heap = max(peak.rss, rss), max(peak.heap, heap.Load())
	if err != nil {
		return stats{}, 0, err
	}
	return st[0], rss, nil
}

// openLarge opens (creating and migrating it when missing) the history's
// database and fills what it lacks, reporting the fill's rate.
func (b *bench) openLarge(ctx context.Context, rep *report) (string, *sqlx.DB, error) {
	rows := b.opts.largeRows
	name := b.opts.largeDB
	if name == "" {
		name = fmt.Sprintf("gwbench_history_%d", rows)
	}
	dsn, err := createHistoryDB(ctx, b.dbEnv.base, name)
	if err != nil {
		return "", nil, err
	}
	dbx, err := mysql.Open(ctx, dsn, mysql.PoolOptions{MaxOpen: fillWorkers + 2})
	if err != nil {
		return "", nil, err
	}
	rep.Large = &largeReport{Database: name, Rows: rows}
	start := time.Now()
	filled, err := fillHistory(ctx, dbx, rows, b.prog)
	if err != nil {
		dbx.Close()
		return "", nil, err
	}
	rep.Large.Filled, rep.Large.FillSeconds = filled, time.Since(start).Seconds()
	if filled > 0 {
		rep.Large.FillRate = float64(filled) / rep.Large.FillSeconds
		b.prog.line("filled %d rows in %.1f s (%.0f rows/s)", filled, rep.Large.FillSeconds, rep.Large.FillRate)
	}
	if filled > 0 {
		// The sizes information_schema gives are the statistics', which
		// lag behind a fill; ANALYZE samples a few pages of each index.
		if _, err := dbx.ExecContext(ctx, `ANALYZE TABLE payments, idempotency_keys`); err != nil {
			dbx.Close()
			return "", nil, fmt.Errorf("history size: %w", err)
		}
	}
	if err := dbx.QueryRowxContext(ctx, `SELECT @@innodb_buffer_pool_size,
    (SELECT COALESCE(SUM(data_length + index_length), 0) FROM information_schema.TABLES
     WHERE table_schema = DATABASE() AND table_name IN ('payments', 'idempotency_keys'))`).
		Scan(&rep.Large.BufferPoolBytes, &rep.Large.TableBytes); err != nil {
		dbx.Close()
		return "", nil, fmt.Errorf("history size: %w", err)
	}
	b.prog.line("history tables %.0f MiB (data and indexes), buffer pool %.0f MiB", mib(rep.Large.TableBytes), mib(rep.Large.BufferPoolBytes))
	if w := rep.Large.poolWarning(); w != "" {
		b.prog.line("WARNING: %s", w)
	}
	return dsn, dbx, nil
}

// createHistoryDB creates (when missing) and migrates a history's
// database on the server base names, and returns its DSN.
func createHistoryDB(ctx context.Context, base, name string) (string, error) {
	admin, err := mysql.Open(ctx, base, mysql.PoolOptions{MaxOpen: 2})
	if err != nil {
		return "", err
	}
	_, err = admin.ExecContext(ctx, "CREATE DATABASE IF NOT EXISTS `"+name+"` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
	admin.Close()
	if err != nil {
		return "", fmt.Errorf("create the history's database: %w", err)
	}
	cfg, err := gomysql.ParseDSN(base)
	if err != nil {
		return "", err
	}
	cfg.DBName = name
	dsn := cfg.FormatDSN()
	if err := mysql.MigrateUp(dsn); err != nil {
		return "", fmt.Errorf("migrate the history's database: %w", err)
	}
	return dsn, nil
}

// fillHistory makes the history's rows: chunks of fillChunk payments, each
// with its completed key, inserted with multi-row INSERTs by fillWorkers
// transactions at once and marked done in bench_fill. A chunk whose keys a
// purge removed gets them back. It returns the rows (payments and keys) it
// wrote.
func fillHistory(ctx context.Context, dbx *sqlx.DB, rows int, prog *progress) (int, error) {
	if _, err := dbx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS bench_fill (
    chunk INT NOT NULL PRIMARY KEY, has_keys TINYINT NOT NULL) ENGINE=InnoDB`); err != nil {
		return 0, err
	}
	var ms []string
	var margs []any
	for m := range fillMerchants {
		ms = append(ms, "(?, ?, NOW(6))")
		margs = append(margs, fillMerchant(m), fmt.Sprintf("History merchant %d", m))
	}
	if _, err := dbx.ExecContext(ctx, `INSERT IGNORE INTO merchants (id, name, created_at) VALUES `+strings.Join(ms, ","), margs...); err != nil {
		return 0, fmt.Errorf("fill merchants: %w", err)
	}
	var done []struct {
		Chunk   int  `db:"chunk"`
		HasKeys bool `db:"has_keys"`
	}
	if err := dbx.SelectContext(ctx, &done, `SELECT chunk, has_keys FROM bench_fill`); err != nil {
		return 0, err
	}
	state := map[int]bool{}
	for _, d := range done {
		state[d.Chunk] = d.HasKeys
	}
	chunks := (rows + fillChunk - 1) / fillChunk
	var todo []int
	for c := range chunks {
		if has, ok := state[c]; !ok || !has {
			todo = append(todo, c)
		}
	}
	if len(todo) == 0 {
		prog.line("history of %d payments found complete", rows)
		return 0, nil
	}
	prog.line("filling the history: %d of %d chunks of %d payments and keys", len(todo), chunks, fillChunk)
	var (
		next    atomic.Int64
		written atomic.Int64
		wg      sync.WaitGroup
		mu      sync.Mutex
		errs    []error
	)
	now := time.Now().UTC().Truncate(time.Microsecond)
	stop := prog.count("fill", int64(len(todo)*fillChunk*2), &written)
	for range fillWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fail := func(err error) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
			conn, err := fillConn(ctx, dbx)
			if err != nil {
				fail(err)
				return
			}
			defer closeFillConn(conn)
			for i := int(next.Add(1)) - 1; i < len(todo) && ctx.Err() == nil; i = int(next.Add(1)) - 1 {
				c := todo[i]
				_, paid := state[c]
				n, err := fillChunkRows(ctx, conn, c, rows, now, !paid)
				if err != nil {
					fail(err)
					return
				}
				written.Add(int64(n))
			}
		}()
	}
	wg.Wait()
	stop()
	if len(errs) > 0 {
		return int(written.Load()), fmt.Errorf("fill the history: %w", errs[0])
	}
	return int(written.Load()), ctx.Err()
}

func fillMerchant(m int) string { return fmt.Sprintf("mer_fill_%04d", m) }

// fillMerchantOf is the merchant of history row i: runs of fillRun
// consecutive rows per merchant, the merchants in turn, so that each
// INSERT appends runs in the order of the primary keys and of the
// (merchant, ...) indexes instead of touching a page per row.
func fillMerchantOf(i int) string { return fillMerchant((i / fillRun) % fillMerchants) }

// fillConn is a connection of its own for one fill worker, with the
// session settings of a bulk load: the generated rows are unique by
// construction (their keys are numbered, and a chunk and its mark in
// bench_fill commit together), so the secondary unique indexes need not
// be checked and no foreign key is involved.
func fillConn(ctx context.Context, dbx *sqlx.DB) (*sqlx.Conn, error) {
	conn, err := dbx.Connx(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := conn.ExecContext(ctx, "SET SESSION unique_checks = 0, foreign_key_checks = 0"); err != nil {
		conn.Close()
		return nil, fmt.Errorf("fill session: %w", err)
	}
	return conn, nil
}

// closeFillConn gives a fill connection back to its pool with the checks
// on again, or, when they cannot be restored, closes it for good: no other
// statement of the pool may run without them.
func closeFillConn(conn *sqlx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := conn.ExecContext(ctx, "SET SESSION unique_checks = 1, foreign_key_checks = 1"); err != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	_ = conn.Close()
}

// fillRows is the history's rows lo (the first argument) to hi (the
// second, excluded), made by the database: the row number i, its merchant,
// key, payment id, merchant order id (payments.MerchantOrderID), amount,
// PSP reference and time (the third argument, the history's start, plus i
// times the fourth, microseconds per row). Generating them there spares
// the client rendering and the server parsing a thousand rows of values
// per statement, which cost as much CPU as the inserts themselves.
var fillRows = fmt.Sprintf(`(SELECT i, m, k, pid, CONCAT('ord_', LEFT(SHA2(CONCAT(m, CHAR(0 USING ascii), k), 256), 24)) AS ord,
    1000 + i MOD 90000 AS amount, CONCAT('fake_ch_f', i) AS ref, at
  FROM (SELECT i, CONCAT('mer_fill_', LPAD((i DIV %d) MOD %d, 4, '0')) AS m,
      CONCAT('fill-', LPAD(i, 11, '0')) AS k, CONCAT('pay_f', LPAD(i, 11, '0')) AS pid,
      ? + INTERVAL FLOOR(i * ?) MICROSECOND AS at
    FROM (WITH RECURSIVE n (i) AS (SELECT CAST(? AS UNSIGNED) UNION ALL SELECT i + 1 FROM n WHERE i + 1 < ?) SELECT i FROM n) AS n) AS r) AS f`, fillRun, fillMerchants)

// Placeholders rendered into the template of a history row's stored
// response (payments.Render), replaced by the row's values in SQL.
const (
	tokID     = "QQPAYMENTIDQQ"
	tokKey    = "QQIDEMKEYQQ"
	tokOrder  = "QQORDERIDQQ"
	tokRef    = "QQPSPREFQQ"
	tokAmount = 987654321
	tokAt     = "QQCREATEDATQQ"
)

// fillBodyTemplate is payments.Render's answer for a history payment, its
// varying values as placeholders; the time is written with all six
// fractional digits.
func fillBodyTemplate() (int, string) {
	at := time.Date(2001, 2, 3, 4, 5, 6, 123456000, time.UTC)
	p := payments.Payment{ID: tokID, MerchantID: "m", IdempotencyKey: tokKey, MerchantOrderID: tokOrder,
		Status: payments.Succeeded, Amount: payments.Money{Minor: tokAmount, Currency: "USD"}, PaymentMethod: "pm_card_ok",
		Description: "Order " + tokKey, Metadata: map[string]string{"order": tokKey, "channel": "web"},
		PSP: "fake", PSPReference: tokRef, CreatedAt: at, UpdatedAt: at}
	r := payments.Render(p)
	return r.Status, strings.ReplaceAll(string(r.Body), at.Format(time.RFC3339Nano), tokAt)
}

// fillChunkRows writes chunk c's payments (when withPayments) and keys in
// one transaction with one INSERT ... SELECT per table, retrying a deadlock.
func fillChunkRows(ctx context.Context, conn *sqlx.Conn, c, rows int, now time.Time, withPayments bool) (int, error) {
	span := time.Duration(fillDays) * 24 * time.Hour
	lo, hi := c*fillChunk, min((c+1)*fillChunk, rows)
	// Oldest first, as they were made: the last rows are today's.
	gen := []any{now.Add(-span), float64(span.Microseconds()) / float64(rows), lo, hi}
	status, tmpl := fillBodyTemplate()
	// The amount first: no placeholder's value can then hold its digits.
	body := fmt.Sprintf(`REPLACE(REPLACE(REPLACE(REPLACE(REPLACE(REPLACE(?, '%d', amount),
    '%s', DATE_FORMAT(at, '%%Y-%%m-%%dT%%H:%%i:%%s.%%fZ')), '%s', pid), '%s', k), '%s', ord), '%s', ref)`,
		tokAmount, tokAt, tokID, tokKey, tokOrder, tokRef)
	var written int64 // rows inserted (INSERT IGNORE skips the keys a purge left)
	write := func() error {
		written = 0
		tx, err := conn.BeginTxx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() //nolint:errcheck // a no-op after Commit
		if withPayments {
			res, err := tx.ExecContext(ctx, `INSERT IGNORE INTO payments (merchant_id, id, idem_key, merchant_order_id, status, amount,
    currency, payment_method, description, metadata, psp, psp_reference, created_at, updated_at)
SELECT m, pid, k, ord, 'succeeded', amount, 'USD', 'pm_card_ok', CONCAT('Order ', k),
    CONCAT('{"channel":"web","order":"', k, '"}'), 'fake', ref, at, at FROM `+fillRows+` ORDER BY m, pid`, gen...)
			if err != nil {
				return err
			}
			if written, err = res.RowsAffected(); err != nil {
				return err
			}
		}
		res, err := tx.ExecContext(ctx, `INSERT IGNORE INTO idempotency_keys (merchant_id, endpoint, idem_key, fingerprint, state,
    subject_id, lease_version, send_attempts, sends_not_sent, response_status, response_body, created_at, updated_at, completed_at)
SELECT m, 'POST /payments', k, UNHEX(SHA2(k, 256)), 'COMPLETED', pid, 1, 1, 0, ?, `+body+`, at, at, at
FROM `+fillRows+` ORDER BY m, k`, append([]any{status, tmpl}, gen...)...)
		if err != nil {
			return err
		}
		keys, err := res.RowsAffected()
		if err != nil {
			return err
		}
		written += keys
		if _, err := tx.ExecContext(ctx, `INSERT INTO bench_fill (chunk, has_keys) VALUES (?, 1) ON DUPLICATE KEY UPDATE has_keys = 1`, c); err != nil {
			return err
		}
		return tx.Commit()
	}
	var err error
	for attempt := 1; attempt <= 5; attempt++ {
		if err = write(); err == nil || !errors.Is(mysql.Classify(err), mysql.ErrRetryable) {
			break
		}
	}
	if err != nil {
		return 0, err
	}
	return int(written), nil
}

// seedColdKeys writes n completed keys of merchantID with their payments,
// as the gateway would have stored them for paymentBody's requests, without
// the gateway: no replica has them in its cache.
func seedColdKeys(ctx context.Context, dbx *sqlx.DB, merchantID, prefix string, n int) ([]string, error) {
	keys := make([]string, n)
	now := time.Now().UTC().Truncate(time.Microsecond)
	for lo := 0; lo < n; lo += fillPerInsert {
		hi := min(lo+fillPerInsert, n)
		var pv, kv []string
		var pa, ka []any
		for i := lo; i < hi; i++ {
			key := fmt.Sprintf("%s-%07d", prefix, i)
			keys[i] = key
			req := createRequest(merchantID, key)
			p := payments.Payment{ID: "pay_" + ulid.Make().String(), MerchantID: merchantID, IdempotencyKey: key,
				MerchantOrderID: payments.MerchantOrderID(merchantID, key), Status: payments.Succeeded, Amount: req.Amount,
				PaymentMethod: req.PaymentMethod, Description: req.Description, Metadata: req.Metadata, PSP: "fake",
				PSPReference: "fake_ch_cold", CreatedAt: now, UpdatedAt: now}
			pv = append(pv, "(?, ?, ?, ?, 'succeeded', ?, 'USD', 'pm_card_ok', ?, ?, 'fake', ?, ?, ?)")
			pa = append(pa, merchantID, p.ID, key, p.MerchantOrderID, p.Amount.Minor, p.Description,
				`{"channel":"web","order":"`+key+`"}`, p.PSPReference, now, now)
			resp := payments.Render(p)
			fp := req.Fingerprint()
			kv = append(kv, "(?, 'POST /payments', ?, ?, 'COMPLETED', ?, 1, 1, 0, ?, ?, NOW(6), NOW(6), NOW(6))")
			ka = append(ka, merchantID, key, fp[:], p.ID, resp.Status, resp.Body)
		}
		if _, err := dbx.ExecContext(ctx, `INSERT INTO payments (merchant_id, id, idem_key, merchant_order_id, status, amount,
    currency, payment_method, description, metadata, psp, psp_reference, created_at, updated_at) VALUES `+strings.Join(pv, ","), pa...); err != nil {
			return nil, fmt.Errorf("seed cold keys: %w", err)
		}
		if _, err := dbx.ExecContext(ctx, `INSERT INTO idempotency_keys (merchant_id, endpoint, idem_key, fingerprint, state,
    subject_id, lease_version, send_attempts, sends_not_sent, response_status, response_body, created_at, updated_at, completed_at)
VALUES `+strings.Join(kv, ","), ka...); err != nil {
			return nil, fmt.Errorf("seed cold keys: %w", err)
		}
	}
	return keys, nil
}

// purgeCounter counts purged keys.
type purgeCounter struct {
	settledCounter
	purged *atomic.Int64
}

func (p purgeCounter) Purged(n int64) {
	p.purged.Add(n)
	p.settledCounter.Purged(n)
}

// purgeUnderLoad purges the history's expired keys (serve's purge
// settings) while 64 clients pay on it, and compares the fresh rate with
// the one on the same tables without the purge (alone).
func (b *bench) purgeUnderLoad(ctx context.Context, hc *http.Client, rep *report, dsn string, dbx *sqlx.DB, alone stats) error {
	var expired int64
	if err := dbx.GetContext(ctx, &expired, `SELECT COUNT(*) FROM idempotency_keys WHERE state = 'COMPLETED' AND completed_at < NOW(6) - INTERVAL ? MICROSECOND`,
		payments.DefaultRetention.Microseconds()); err != nil {
		return err
	}
	b.prog.line("purging %d expired keys while %d clients pay", expired, freshClients)
	pdb, err := mysql.Open(ctx, dsn, poolOptions())
	if err != nil {
		return err
	}
	defer pdb.Close()
	var purged, settled atomic.Int64
	met := metrics.New(prometheus.NewRegistry())
	rec := newReconciler(pdb, fake.New(), purgeCounter{settledCounter{met, &settled}, &purged})
	pctx, cancel := context.WithCancel(ctx)
	var perr error
	var took time.Duration
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		_, perr = rec.Purge(pctx)
		took = time.Since(start)
		if pctx.Err() != nil {
			// The phase's end cancelled it, whatever statement it was in.
			perr = nil
		}
	}()
	st, rss, err := b.gatewayPhase(ctx, "L purge under load · gateway", "large-purge", b.freshGroup(hc, "gateway", "lp", freshClients))
	cancel()
	<-done
	if err != nil {
		return err
	}
	if err := markPurged(ctx, dbx); err != nil {
		return err
	}
	n := purged.Load()
	rate := float64(n) / took.Seconds()
	rep.Large.Purged, rep.Large.PurgeRate = n, rate
	if perr != nil {
		rep.Large.PurgeErrors = perr.Error()
		rep.Violations = append(rep.Violations, "purge under load: "+perr.Error())
	}
	note := fmt.Sprintf("%d of %d expired keys purged in %.1f s", n, expired, took.Seconds())
	rep.add(row{Scenario: scLarge, Name: "purge under load: fresh payments during the purge, 64 clients", Unit: "req/s",
		Gateway: st[0], Floor: &alone, FloorLabel: "no purge", Reference: alone.Throughput, Goal: 0.85,
		GoalText: ">= 0.85 x no purge", PeakRSSBytes: rss, Note: note})
	rep.add(row{Scenario: scLarge, Name: "purge under load: keys purged per second vs fresh payments per second", Unit: "keys/s",
		Gateway: stats{Throughput: rate, Requests: int(n), Seconds: took.Seconds()}, FloorLabel: "fresh rate",
		Reference: st[0].Throughput, Goal: 5, GoalText: ">= 5 x fresh rate", NoLatency: true})
	return nil
}

// markPurged marks the chunks whose keys a purge removed, for the next
// fill to put back. The purge walks keys oldest first, and the history's
// row i is older than row i+1 and than any key the runs add, so the oldest
// key left is the first one the purge did not reach: the chunks before its
// own lack their keys, its own some of them (all, when no history key is
// left).
func markPurged(ctx context.Context, dbx *sqlx.DB) error {
	var oldest []string
	if err := dbx.SelectContext(ctx, &oldest, `SELECT idem_key FROM idempotency_keys WHERE state = 'COMPLETED'
ORDER BY completed_at LIMIT 1`); err != nil {
		return err
	}
	var first int
	if len(oldest) == 0 || !strings.HasPrefix(oldest[0], "fill-") {
		first = math.MaxInt32
	} else if _, err := fmt.Sscanf(oldest[0], "fill-%d", &first); err != nil {
		return fmt.Errorf("the oldest key %q: %w", oldest[0], err)
	}
	_, err := dbx.ExecContext(ctx, `UPDATE bench_fill SET has_keys = 0 WHERE chunk <= ?`, first/fillChunk)
	return err
}

// backlog has one reconciler settle --backlog-rows stale rows, timed beside the lookup bound.
func (b *bench) backlog(ctx context.Context, rep *report) error {
	saved := b.opts.reconcileRows
	b.opts.reconcileRows = b.opts.backlogRows
	defer func() { b.opts.reconcileRows = saved }()
	st, rss, err := b.reconcileRun(ctx, rep, 1, 0)
	if err != nil {
		return err
	}
	bound := reconcileConc / lookupLatency.Seconds()
	rep.Large.BacklogRows, rep.Large.BacklogSecs = b.opts.backlogRows, st.Seconds
	rep.add(row{Scenario: scLarge, Name: fmt.Sprintf("backlog: %d stale rows, 1 reconciler, lookup 20 ms", b.opts.backlogRows),
		Unit: "rows/s", Gateway: st, FloorLabel: "lookup bound", Reference: bound, Goal: 0.95, GoalText: ">= 0.95 x bound",
		PeakRSSBytes: rss, NoLatency: true,
		Note: fmt.Sprintf("settled in %.0f s; at the bound %.0f s", st.Seconds, float64(b.opts.backlogRows)/bound)})
	return nil
}
