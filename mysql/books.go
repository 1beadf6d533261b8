package mysql

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"gateway/books"
	"gateway/errs"
	"gateway/idemkeys"
	"gateway/payments"
	"gateway/psp"
	"gateway/routing"
)

// Books is the books job's store (books.Store) over s.
type Books struct{ s *Store }

// Books returns the books job's store.
func (s *Store) Books() *Books { return &Books{s: s} }

var _ books.Store = (*Books)(nil)

type runRow struct {
	ID          int64          `db:"id"`
	Account     string         `db:"account"`
	From        time.Time      `db:"period_from"`
	To          time.Time      `db:"period_to"`
	Status      string         `db:"status"`
	Passes      int            `db:"passes"`
	Token       int64          `db:"lease_token"`
	LeaseUntil  sql.NullTime   `db:"lease_until"`
	Cursor      sql.NullString `db:"ledger_cursor"`
	Phase       string         `db:"phase"`
	Lines       int64          `db:"ledger_lines"`
	Matched     int64          `db:"matched"`
	Unsettled   int64          `db:"unsettled"`
	NoMoney     int64          `db:"no_money"`
	Outside     int64          `db:"outside"`
	Checked     int64          `db:"checked"`
	LastError   sql.NullString `db:"last_error"`
	CreatedAt   time.Time      `db:"created_at"`
	UpdatedAt   time.Time      `db:"updated_at"`
	CompletedAt sql.NullTime   `db:"completed_at"`
	Held        bool           `db:"held"`
}

const runColumns = `id, account, period_from, period_to, status, passes, lease_token, lease_until, ledger_cursor, phase,
    ledger_lines, matched, unsettled, no_money, outside, checked, last_error, created_at, updated_at, completed_at`

func (r runRow) run() books.Run {
	return books.Run{ID: r.ID, Account: r.Account, From: r.From.UTC(), To: r.To.UTC(), Status: r.Status, Passes: r.Passes,
		Token: r.Token, Cursor: r.Cursor.String, Phase: r.Phase,
		Counts:    books.Counts{Lines: r.Lines, Matched: r.Matched, Unsettled: r.Unsettled, NoMoney: r.NoMoney, Outside: r.Outside, Checked: r.Checked},
		LastError: r.LastError.String, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, CompletedAt: r.CompletedAt.Time}
}

// ClaimRun implements books.Store. The period's row is made once (its
// unique key decides a race between replicas); a pass takes it over when
// no other holds its lease, bumping the token that fences the pass's
// writes.
func (b *Books) ClaimRun(ctx context.Context, account string, from, to time.Time, lease time.Duration, again bool) (_ books.Run, err error) {
	defer errs.Wrap(&err, "Books.ClaimRun(%s)", account)
	var out books.Run
	err = Transact(ctx, b.s.db, func(tx *sqlx.Tx) error {
		_, err := tx.ExecContext(ctx, `
INSERT INTO books_runs (account, period_from, period_to, status, passes, lease_token, lease_until, phase, created_at, updated_at)
VALUES (?, ?, ?, 'running', 1, 1, NOW(6) + INTERVAL ? MICROSECOND, 'ledger', NOW(6), NOW(6))`, account, from, to, micros(lease))
		fresh := err == nil
		if err != nil && !errors.Is(Classify(err), ErrDuplicate) {
			return err
		}
		var r runRow
		if err := tx.GetContext(ctx, &r, `SELECT `+runColumns+`, COALESCE(lease_until > NOW(6), FALSE) AS held
FROM books_runs WHERE account = ? AND period_from = ? AND period_to = ? FOR UPDATE`, account, from, to); err != nil {
			return err
		}
		if fresh {
			out = r.run()
			return nil
		}
		switch {
		case r.Status == books.RunRunning && r.Held:
			return books.ErrRunHeld
		case r.Status == books.RunComplete && !again:
			return books.ErrRunComplete
		}
		if _, err := tx.ExecContext(ctx, `
UPDATE books_runs SET status = 'running', passes = passes + IF(status = 'complete', 1, 0), lease_token = lease_token + 1,
    lease_until = NOW(6) + INTERVAL ? MICROSECOND, updated_at = NOW(6)
WHERE id = ?`, micros(lease), r.ID); err != nil {
			return err
		}
		if r.Status == books.RunComplete {
			r.Passes++
		}
		r.Status, r.Token = books.RunRunning, r.Token+1
		out = r.run()
		return nil
	})
	return out, err
}

// SaveRun implements books.Store.
func (b *Books) SaveRun(ctx context.Context, r books.Run, lease time.Duration) (err error) {
	defer errs.Wrap(&err, "Books.SaveRun(%d)", r.ID)
	c := r.Counts
	n, err := ExecRetry(ctx, b.s.db, `
UPDATE books_runs SET status = ?, ledger_cursor = ?, phase = ?, ledger_lines = ?, matched = ?, unsettled = ?, no_money = ?,
    outside = ?, checked = ?, last_error = ?,
    lease_until = IF(? = 'running', NOW(6) + INTERVAL ? MICROSECOND, NULL),
    completed_at = IF(? = 'complete', NOW(6), completed_at), updated_at = NOW(6)
WHERE id = ? AND lease_token = ?`,
		r.Status, nullString(r.Cursor), r.Phase, c.Lines, c.Matched, c.Unsettled, c.NoMoney, c.Outside, c.Checked,
		nullString(r.LastError), r.Status, micros(lease), r.Status, r.ID, r.Token)
	if err != nil {
		return err
	}
	if n == 0 {
		// An UPDATE that changes nothing matches too (CLIENT_FOUND_ROWS is
		// not set): look whether the token is still the run's.
		var token int64
		if err := b.s.db.GetContext(ctx, &token, `SELECT lease_token FROM books_runs WHERE id = ?`, r.ID); err != nil {
			return Classify(err)
		}
		if token != r.Token {
			return books.ErrLost
		}
	}
	return nil
}

// fence checks in tx that run still holds its row, and locks it: every
// write of a pass is made under its run's lock and token.
func fence(ctx context.Context, tx *sqlx.Tx, run books.Run) error {
	var token int64
	if err := tx.GetContext(ctx, &token, `SELECT lease_token FROM books_runs WHERE id = ? FOR UPDATE`, run.ID); err != nil {
		return err
	}
	if token != run.Token {
		return books.ErrLost
	}
	return nil
}

// PaymentsByOrder implements books.Store.
func (b *Books) PaymentsByOrder(ctx context.Context, account string, orderIDs []string) (_ []payments.Payment, _ []books.Attempt, err error) {
	defer errs.Wrap(&err, "Books.PaymentsByOrder")
	if len(orderIDs) == 0 {
		return nil, nil, nil
	}
	q, args, err := sqlx.In(`SELECT `+paymentColumns+` FROM payments WHERE merchant_order_id IN (?)`, orderIDs)
	if err != nil {
		return nil, nil, err
	}
	var rows []paymentRow
	if err := b.s.db.SelectContext(ctx, &rows, q, args...); err != nil {
		return nil, nil, Classify(err)
	}
	ps, err := paymentsOf(rows)
	if err != nil {
		return nil, nil, err
	}
	q, args, err = sqlx.In(`SELECT merchant_id, payment_id, merchant_order_id, outcome, check_after IS NULL AS checked
FROM payment_attempts WHERE psp = ? AND merchant_order_id IN (?)`, account, orderIDs)
	if err != nil {
		return nil, nil, err
	}
	var as []struct {
		MerchantID      string `db:"merchant_id"`
		PaymentID       string `db:"payment_id"`
		MerchantOrderID string `db:"merchant_order_id"`
		Outcome         string `db:"outcome"`
		Checked         bool   `db:"checked"`
	}
	if err := b.s.db.SelectContext(ctx, &as, q, args...); err != nil {
		return nil, nil, Classify(err)
	}
	attempts := make([]books.Attempt, len(as))
	for i, a := range as {
		attempts[i] = books.Attempt{MerchantID: a.MerchantID, PaymentID: a.PaymentID, MerchantOrderID: a.MerchantOrderID, Outcome: a.Outcome, Checked: a.Checked}
	}
	return ps, attempts, nil
}

// RefundsByOrder implements books.Store.
func (b *Books) RefundsByOrder(ctx context.Context, refundOrderIDs, references []string) (_ []payments.Refund, err error) {
	defer errs.Wrap(&err, "Books.RefundsByOrder")
	if len(refundOrderIDs) == 0 && len(references) == 0 {
		return nil, nil
	}
	// IN () is not SQL: an empty list is one id no refund has.
	if len(refundOrderIDs) == 0 {
		refundOrderIDs = []string{""}
	}
	if len(references) == 0 {
		references = []string{""}
	}
	q, args, err := sqlx.In(`SELECT `+refundColumns+` FROM refunds WHERE refund_order_id IN (?)
UNION SELECT `+refundColumns+` FROM refunds WHERE psp_reference IN (?)`, refundOrderIDs, references)
	if err != nil {
		return nil, err
	}
	var rows []refundRow
	if err := b.s.db.SelectContext(ctx, &rows, q, args...); err != nil {
		return nil, Classify(err)
	}
	return refundsOf(rows)
}

type discrepancyRow struct {
	ID         int64          `db:"id"`
	RunID      int64          `db:"run_id"`
	Account    string         `db:"account"`
	Class      string         `db:"class"`
	Subject    string         `db:"subject"`
	Action     string         `db:"action"`
	MerchantID sql.NullString `db:"merchant_id"`
	PaymentID  sql.NullString `db:"payment_id"`
	RefundID   sql.NullString `db:"refund_id"`
	Detail     string         `db:"detail"`
	PSPRecord  sql.NullString `db:"psp_record"`
	Gateway    sql.NullString `db:"gateway_record"`
	CreatedAt  time.Time      `db:"created_at"`
	ResolvedAt sql.NullTime   `db:"resolved_at"`
}

const discrepancyColumns = `id, run_id, account, class, subject, action, merchant_id, payment_id, refund_id, detail,
    psp_record, gateway_record, created_at, resolved_at`

func (r discrepancyRow) discrepancy() (books.Discrepancy, error) {
	d := books.Discrepancy{ID: r.ID, RunID: r.RunID, Account: r.Account, Class: books.Class(r.Class), Subject: r.Subject,
		Action: books.Action(r.Action), MerchantID: r.MerchantID.String, PaymentID: r.PaymentID.String, RefundID: r.RefundID.String,
		Detail: r.Detail, CreatedAt: r.CreatedAt, ResolvedAt: r.ResolvedAt.Time}
	if r.PSPRecord.Valid {
		d.PSPRecord = new(psp.Transaction)
		if err := json.Unmarshal([]byte(r.PSPRecord.String), d.PSPRecord); err != nil {
			return d, fmt.Errorf("discrepancy %d's PSP record: %w", r.ID, err)
		}
	}
	if r.Gateway.Valid {
		d.GatewayRecord = json.RawMessage(r.Gateway.String)
	}
	return d, nil
}

func (b *Books) discrepancies(ctx context.Context, q string, args ...any) ([]books.Discrepancy, error) {
	var rows []discrepancyRow
	if err := b.s.db.SelectContext(ctx, &rows, q, args...); err != nil {
		return nil, Classify(err)
	}
	out := make([]books.Discrepancy, 0, len(rows))
	for _, r := range rows {
		d, err := r.discrepancy()
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// Known implements books.Store.
func (b *Books) Known(ctx context.Context, account string, subjects []string) (_ []books.Discrepancy, err error) {
	defer errs.Wrap(&err, "Books.Known")
	if len(subjects) == 0 {
		return nil, nil
	}
	q, args, err := sqlx.In(`SELECT `+discrepancyColumns+` FROM books_discrepancies WHERE account = ? AND subject IN (?)`, account, subjects)
	if err != nil {
		return nil, err
	}
	return b.discrepancies(ctx, q, args...)
}

// RunDiscrepancies implements books.Store.
func (b *Books) RunDiscrepancies(ctx context.Context, runID int64) (_ []books.Discrepancy, err error) {
	defer errs.Wrap(&err, "Books.RunDiscrepancies(%d)", runID)
	return b.discrepancies(ctx, `SELECT `+discrepancyColumns+` FROM books_discrepancies WHERE run_id = ? ORDER BY id`, runID)
}

// Settled implements books.Store.
func (b *Books) Settled(ctx context.Context, account string, from, to time.Time, after books.Position, limit int) (_ []payments.Payment, err error) {
	defer errs.Wrap(&err, "Books.Settled(%s)", account)
	var rows []paymentRow
	if err := b.s.db.SelectContext(ctx, &rows, `SELECT `+paymentColumns+` FROM payments FORCE INDEX (payments_books)
WHERE psp = ? AND created_at >= ? AND created_at < ? AND (created_at, merchant_id, id) > (?, ?, ?)
  AND status IN ('succeeded', 'requires_capture')
ORDER BY created_at, merchant_id, id LIMIT ?`, account, pageStart(from, after), to, after.CreatedAt, after.MerchantID, after.ID, limit); err != nil {
		return nil, Classify(err)
	}
	return paymentsOf(rows)
}

// pageStart is where a page of the period's records starts in the index:
// the position's time, or the period's start for the first page. (The
// server reads a row comparison as a filter, not as the index range's
// start: without it every page would read the period from its start.)
func pageStart(from time.Time, after books.Position) time.Time {
	if after.CreatedAt.After(from) {
		return after.CreatedAt
	}
	return from
}

// SettledRefunds implements books.Store.
func (b *Books) SettledRefunds(ctx context.Context, account string, from, to time.Time, after books.Position, limit int) (_ []books.SettledRefund, err error) {
	defer errs.Wrap(&err, "Books.SettledRefunds(%s)", account)
	var rows []struct {
		refundRow
		ChargeReference sql.NullString `db:"charge_reference"`
	}
	if err := b.s.db.SelectContext(ctx, &rows, `SELECT r.merchant_id, r.id, r.payment_id, r.idem_key, r.refund_order_id, r.status,
    r.amount, r.currency, r.reason, r.metadata, r.psp_reference, r.failure_code, r.psp_code, r.psp, r.review_reason,
    r.review_since, r.review_after, r.review_attempts, r.review_not_found_at, r.created_at, r.updated_at,
    p.psp_reference AS charge_reference
FROM refunds r FORCE INDEX (refunds_books) JOIN payments p ON p.merchant_id = r.merchant_id AND p.id = r.payment_id
WHERE r.psp = ? AND r.created_at >= ? AND r.created_at < ? AND (r.created_at, r.merchant_id, r.id) > (?, ?, ?) AND r.status = 'succeeded'
ORDER BY r.created_at, r.merchant_id, r.id LIMIT ?`, account, pageStart(from, after), to, after.CreatedAt, after.MerchantID, after.ID, limit); err != nil {
		return nil, Classify(err)
	}
	out := make([]books.SettledRefund, 0, len(rows))
	for _, r := range rows {
		x, err := r.toDomain()
		if err != nil {
			return nil, err
		}
		out = append(out, books.SettledRefund{Refund: x, ChargeReference: r.ChargeReference.String})
	}
	return out, nil
}

// LostKeys implements books.Store.
func (b *Books) LostKeys(ctx context.Context, from, to time.Time) (_ []books.LostKey, err error) {
	defer errs.Wrap(&err, "Books.LostKeys")
	var rows []struct {
		MerchantID string `db:"merchant_id"`
		Key        string `db:"idem_key"`
		PaymentID  string `db:"subject_id"`
	}
	if err := b.s.db.SelectContext(ctx, &rows, `SELECT k.merchant_id, k.idem_key, k.subject_id
FROM idempotency_keys k FORCE INDEX (idempotency_keys_created)
LEFT JOIN payments p ON p.merchant_id = k.merchant_id AND p.id = k.subject_id
WHERE k.created_at >= ? AND k.created_at < ? AND k.endpoint = ? AND p.id IS NULL`, from, to, payments.EndpointCreatePayment); err != nil {
		return nil, Classify(err)
	}
	out := make([]books.LostKey, len(rows))
	for i, r := range rows {
		out[i] = books.LostKey{Ref: idemkeys.Ref{MerchantID: r.MerchantID, Endpoint: payments.EndpointCreatePayment, Key: r.Key}, PaymentID: r.PaymentID}
	}
	return out, nil
}

// insertDiscrepancy records d in tx: books.ErrKnown when (account, class,
// subject) is recorded already.
func insertDiscrepancy(ctx context.Context, tx *sqlx.Tx, d books.Discrepancy) error {
	var pspRecord sql.NullString
	if d.PSPRecord != nil {
		b, err := json.Marshal(d.PSPRecord)
		if err != nil {
			return err
		}
		pspRecord = sql.NullString{String: string(b), Valid: true}
	}
	var gateway sql.NullString
	if d.GatewayRecord != nil {
		gateway = sql.NullString{String: string(d.GatewayRecord), Valid: true}
	}
	_, err := tx.ExecContext(ctx, `
INSERT INTO books_discrepancies (run_id, account, class, subject, action, merchant_id, payment_id, refund_id, detail,
    psp_record, gateway_record, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NOW(6))`,
		d.RunID, d.Account, string(d.Class), d.Subject, string(d.Action), nullString(d.MerchantID), nullString(d.PaymentID),
		nullString(d.RefundID), d.Detail, pspRecord, gateway)
	if errors.Is(Classify(err), ErrDuplicate) {
		return books.ErrKnown
	}
	return err
}

// booksTx runs fn in a transaction fenced on run, after recording d.
func (b *Books) booksTx(ctx context.Context, run books.Run, d books.Discrepancy, fn func(tx *sqlx.Tx) error) error {
	return Transact(ctx, b.s.db, func(tx *sqlx.Tx) error {
		if err := fence(ctx, tx, run); err != nil {
			return err
		}
		if err := insertDiscrepancy(ctx, tx, d); err != nil {
			return err
		}
		if fn == nil {
			return nil
		}
		return fn(tx)
	})
}

// Record implements books.Store.
func (b *Books) Record(ctx context.Context, run books.Run, d books.Discrepancy) (err error) {
	defer errs.Wrap(&err, "Books.Record(%s)", d.Subject)
	return b.booksTx(ctx, run, d, nil)
}

// RecordPayment implements books.Store. The payment is one no queue looks
// at (review_after NULL): only an operator settles it.
func (b *Books) RecordPayment(ctx context.Context, run books.Run, d books.Discrepancy, c payments.PaymentChange) (err error) {
	defer errs.Wrap(&err, "Books.RecordPayment(%s)", d.Subject)
	p := c.Payment
	return b.booksTx(ctx, run, d, func(tx *sqlx.Tx) error {
		// A payment whose row was lost may have kept its events: its
		// numbering goes on after theirs.
		var seq int64
		if err := tx.GetContext(ctx, &seq, `SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE merchant_id = ? AND object_id = ?`,
			p.MerchantID, p.ID); err != nil {
			return err
		}
		// A failed-over payment's earlier attempts may have kept their
		// rows: the copy every read renders is made again from them.
		var history []routing.Attempt
		if p.AttemptNumber() > 1 {
			var err error
			if history, err = attemptsOf(ctx, tx, p.MerchantID, p.ID, p.AttemptNumber()); err != nil {
				return err
			}
		}
		copyJSON := sql.NullString{}
		if len(history) > 0 {
			b, err := json.Marshal(history)
			if err != nil {
				return err
			}
			copyJSON = sql.NullString{String: string(b), Valid: true}
		}
		if _, err := tx.ExecContext(ctx, `
INSERT INTO payments (merchant_id, id, idem_key, merchant_order_id, status, amount, currency, payment_method, description,
    psp_reference, psp, review_reason, review_since, capture_method, amount_captured, event_seq, attempt, attempts, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, '', ?, ?, ?, NOW(6), ?, ?, ?, ?, ?, ?, NOW(6))`,
			p.MerchantID, p.ID, p.IdempotencyKey, p.MerchantOrderID, string(p.Status), p.Amount.Minor, p.Amount.Currency,
			p.PaymentMethod, nullString(p.PSPReference), nullString(p.PSP), nullString(p.ReviewReason),
			string(captureMethodOf(p)), p.AmountCaptured, seq, p.AttemptNumber(), copyJSON, p.CreatedAt); err != nil {
			return err
		}
		if c.Event != nil {
			return insertEvent(ctx, tx, *c.Event, seq)
		}
		return nil
	})
}

// RecordRefund implements books.Store.
func (b *Books) RecordRefund(ctx context.Context, run books.Run, d books.Discrepancy, c payments.RefundChange) (err error) {
	defer errs.Wrap(&err, "Books.RecordRefund(%s)", d.Subject)
	r := c.Refund
	return b.booksTx(ctx, run, d, func(tx *sqlx.Tx) error {
		if err := movePayment(ctx, tx, r.MerchantID, r.PaymentID, c.Refunded, c.Reserved); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `
INSERT INTO refunds (merchant_id, id, payment_id, idem_key, refund_order_id, status, amount, currency, reason,
    psp_reference, psp, review_reason, review_since, event_seq, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, '', ?, ?, ?, NOW(6), 1, ?, NOW(6))`,
			r.MerchantID, r.ID, r.PaymentID, r.IdempotencyKey, r.RefundOrderID, string(r.Status), r.Amount.Minor, r.Amount.Currency,
			nullString(r.PSPReference), nullString(r.PSP), nullString(r.ReviewReason), r.CreatedAt); err != nil {
			return err
		}
		if c.Event != nil {
			return insertEvent(ctx, tx, *c.Event, 1)
		}
		return nil
	})
}

// Review implements books.Store: the payment (or refund) goes to review
// with its event and the answer its key replays, its resolution audited
// under the books' name, and no queue looks at it again: only an
// operator resolves it.
func (b *Books) Review(ctx context.Context, run books.Run, d books.Discrepancy, reason string) (err error) {
	defer errs.Wrap(&err, "Books.Review(%s)", d.Subject)
	res := payments.Resolution{Actor: books.Actor, Reason: reason}
	return b.booksTx(ctx, run, d, func(tx *sqlx.Tx) error {
		if d.RefundID != "" {
			decide := payments.ChangeRefund(func(r payments.Refund) (payments.Refund, error) {
				r.Status, r.ReviewReason = payments.RefundRequiresReview, reason
				return r, nil
			})
			if _, err := resolveRefundIn(ctx, tx, d.RefundID, decide, res); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, `UPDATE refunds SET review_after = NULL WHERE merchant_id = ? AND id = ?`, d.MerchantID, d.RefundID)
			return err
		}
		decide := payments.ChangePayment(func(p payments.Payment) (payments.Payment, error) {
			p.Status, p.ReviewReason, p.NextAction = payments.RequiresReview, reason, nil
			return p, nil
		})
		if _, err := resolveIn(ctx, tx, decide, res, `merchant_id = ? AND id = ?`, d.MerchantID, d.PaymentID); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `UPDATE payments SET review_after = NULL WHERE merchant_id = ? AND id = ?`, d.MerchantID, d.PaymentID)
		return err
	})
}

// Standing implements books.Store.
func (b *Books) Standing(ctx context.Context) (_ books.Standing, err error) {
	defer errs.Wrap(&err, "Books.Standing")
	out := books.Standing{Open: map[string]map[books.Class]int{}, LastComplete: map[string]time.Time{}}
	var open []struct {
		Account string `db:"account"`
		Class   string `db:"class"`
		N       int    `db:"n"`
	}
	// Open: not acknowledged, and its payment or refund still in review
	// (an operator's decision on it settles the discrepancy too) or not
	// there at all.
	if err := b.s.db.SelectContext(ctx, &open, `SELECT d.account, d.class, COUNT(*) AS n FROM books_discrepancies d
LEFT JOIN payments p ON d.refund_id IS NULL AND p.merchant_id = d.merchant_id AND p.id = d.payment_id
LEFT JOIN refunds r ON r.merchant_id = d.merchant_id AND r.id = d.refund_id
WHERE d.resolved_at IS NULL
  AND (d.action = 'alert_only' OR p.status = 'requires_review' OR r.status = 'requires_review' OR (p.id IS NULL AND r.id IS NULL))
GROUP BY d.account, d.class`); err != nil {
		return out, Classify(err)
	}
	for _, o := range open {
		if out.Open[o.Account] == nil {
			out.Open[o.Account] = map[books.Class]int{}
		}
		out.Open[o.Account][books.Class(o.Class)] = o.N
	}
	var last []struct {
		Account string    `db:"account"`
		At      time.Time `db:"at"`
	}
	if err := b.s.db.SelectContext(ctx, &last, `SELECT account, MAX(completed_at) AS at FROM books_runs
WHERE completed_at IS NOT NULL GROUP BY account`); err != nil {
		return out, Classify(err)
	}
	for _, l := range last {
		out.LastComplete[l.Account] = l.At
	}
	return out, nil
}

// ResolveDiscrepancy implements books.Store.
func (b *Books) ResolveDiscrepancy(ctx context.Context, id int64, resolution string) (err error) {
	defer errs.Wrap(&err, "Books.ResolveDiscrepancy(%d)", id)
	n, err := ExecRetry(ctx, b.s.db, `UPDATE books_discrepancies SET resolved_at = NOW(6), resolution = ?
WHERE id = ? AND resolved_at IS NULL`, resolution, id)
	if err != nil {
		return err
	}
	if n == 0 {
		var found int
		if err := b.s.db.GetContext(ctx, &found, `SELECT COUNT(*) FROM books_discrepancies WHERE id = ?`, id); err != nil {
			return Classify(err)
		}
		if found == 0 {
			return errs.ErrNotFound
		}
	}
	return nil
}

// attemptsOf are the rows of payment id's attempts before attempt before.
func attemptsOf(ctx context.Context, tx *sqlx.Tx, merchant, id string, before int) ([]routing.Attempt, error) {
	var rows []struct {
		Number    int            `db:"attempt"`
		PSP       string         `db:"psp"`
		OrderID   string         `db:"merchant_order_id"`
		Outcome   string         `db:"outcome"`
		Code      sql.NullString `db:"psp_code"`
		Reference sql.NullString `db:"psp_reference"`
		StartedAt time.Time      `db:"started_at"`
		EndedAt   time.Time      `db:"ended_at"`
	}
	if err := tx.SelectContext(ctx, &rows, `
SELECT attempt, psp, merchant_order_id, outcome, psp_code, psp_reference, started_at, ended_at
FROM payment_attempts WHERE merchant_id = ? AND payment_id = ? AND attempt < ? ORDER BY attempt`, merchant, id, before); err != nil {
		return nil, err
	}
	out := make([]routing.Attempt, len(rows))
	for i, r := range rows {
		out[i] = routing.Attempt{Number: r.Number, PSP: r.PSP, MerchantOrderID: r.OrderID, Outcome: routing.AttemptOutcome(r.Outcome),
			PSPCode: r.Code.String, PSPReference: r.Reference.String, StartedAt: r.StartedAt.UTC(), EndedAt: r.EndedAt.UTC()}
	}
	return out, nil
}
