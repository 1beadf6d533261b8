package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"gateway/errs"
	"gateway/idemkeys"
	"gateway/payments"
	"gateway/versions"
)

// Every statement of a key's life, on the database's clock: leases,
// deadlines and expiry are written and compared with NOW(6) in SQL, so that
// replicas whose clocks disagree never disagree about who holds a key.

type keyRow struct {
	MerchantID     string         `db:"merchant_id"`
	Endpoint       string         `db:"endpoint"`
	Key            string         `db:"idem_key"`
	Fingerprint    []byte         `db:"fingerprint"`
	State          string         `db:"state"`
	SubjectID      string         `db:"subject_id"`
	Token          int64          `db:"lease_version"`
	LockedUntil    sql.NullTime   `db:"locked_until"`
	MaySendUntil   sql.NullTime   `db:"may_send_until"`
	ReconcileAfter sql.NullTime   `db:"reconcile_after"`
	Attempts       int            `db:"reconcile_attempts"`
	SendAttempts   int            `db:"send_attempts"`
	SendsNotSent   int            `db:"sends_not_sent"`
	NotFoundAt     sql.NullTime   `db:"not_found_at"`
	ResponseStatus sql.NullInt32  `db:"response_status"`
	ResponseBody   []byte         `db:"response_body"`
	APIVersion     sql.NullString `db:"api_version"`
	BodyVersion    sql.NullString `db:"response_version"`
	CreatedAt      time.Time      `db:"created_at"`
	UpdatedAt      time.Time      `db:"updated_at"`
	CompletedAt    sql.NullTime   `db:"completed_at"`
	DBNow          time.Time      `db:"db_now"`
}

const keyColumns = `merchant_id, endpoint, idem_key, fingerprint, state, subject_id, lease_version,
    locked_until, may_send_until, reconcile_after, reconcile_attempts, send_attempts, sends_not_sent,
    not_found_at, response_status, response_body, api_version, response_version, created_at, updated_at, completed_at, NOW(6) AS db_now`

const keyWhere = `merchant_id = ? AND endpoint = ? AND idem_key = ?`

func (r keyRow) toDomain() idemkeys.Record {
	rec := idemkeys.Record{
		Ref:               idemkeys.Ref{MerchantID: r.MerchantID, Endpoint: r.Endpoint, Key: r.Key},
		State:             idemkeys.State(r.State),
		SubjectID:         r.SubjectID,
		Token:             idemkeys.Token(r.Token),
		LockedUntil:       r.LockedUntil.Time,
		MaySendUntil:      r.MaySendUntil.Time,
		SendAttempts:      r.SendAttempts,
		SendsNotSent:      r.SendsNotSent,
		NotFoundAt:        r.NotFoundAt.Time,
		ReconcileAfter:    r.ReconcileAfter.Time,
		ReconcileAttempts: r.Attempts,
		Response: idemkeys.Response{Status: int(r.ResponseStatus.Int32), Body: r.ResponseBody,
			Version: string(versions.OrFirst(r.APIVersion.String)), BodyVersion: string(versions.OrFirst(r.BodyVersion.String))},
		CreatedAt:   r.CreatedAt,
		UpdatedAt:   r.UpdatedAt,
		CompletedAt: r.CompletedAt.Time,
		DBNow:       r.DBNow,
	}
	copy(rec.Fingerprint[:], r.Fingerprint)
	return rec
}

func refArgs(ref idemkeys.Ref) []any { return []any{ref.MerchantID, ref.Endpoint, ref.Key} }

// micros writes a duration for INTERVAL ? MICROSECOND.
func micros(d time.Duration) int64 { return d.Microseconds() }

// Now implements payments.FlowStore: the database's clock.
func (s *Store) Now(ctx context.Context) (now time.Time, err error) {
	defer errs.Wrap(&err, "Store.Now")
	if err := s.db.GetContext(ctx, &now, `SELECT NOW(6)`); err != nil {
		return time.Time{}, Classify(err)
	}
	return now, nil
}

// Claim implements payments.FlowStore: the key first, so that of two racing
// claims the loser stops at its INSERT, then the payment and its event, in
// one short transaction; every time is the payment's CreatedAt, read from
// the database's clock by the caller.
func (s *Store) Claim(ctx context.Context, c payments.Claim) (err error) {
	p, ref := c.Payment, c.Ref
	defer errs.Wrap(&err, "Store.Claim(%s)", p.ID)
	md, err := metadataJSON(p.Metadata)
	if err != nil {
		return err
	}
	const insertKeyCompleted = `
INSERT INTO idempotency_keys
    (merchant_id, endpoint, idem_key, fingerprint, state, subject_id, lease_version,
     send_attempts, sends_not_sent, response_status, response_body, api_version, response_version, created_at, updated_at, completed_at)
VALUES (?, ?, ?, ?, 'COMPLETED', ?, ?, 0, 0, ?, ?, ?, ?, ?, ?, ?)`
	const insertPayment = `
INSERT INTO payments (merchant_id, id, idem_key, merchant_order_id, status, amount, currency,
    payment_method, description, metadata, psp, expires_at, client_secret_hash, capture_method, event_seq, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?)`
	now := p.CreatedAt
	err = Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		if c.Answer == nil {
			if err := claimKey(ctx, tx, ref, c.Fingerprint, p.ID, c.Token, now, c.Lease); err != nil {
				return err
			}
		} else {
			_, err := tx.ExecContext(ctx, insertKeyCompleted, ref.MerchantID, ref.Endpoint, ref.Key, c.Fingerprint[:], p.ID,
				int64(c.Token), c.Answer.Status, c.Answer.Body, string(versions.FromContext(ctx)), bodyVersion(*c.Answer), now, now, now)
			if err := Classify(err); err != nil {
				if errors.Is(err, ErrDuplicate) {
					return idemkeys.ErrExists
				}
				return err
			}
		}
		expires := sql.NullTime{Time: p.ExpiresAt, Valid: !p.ExpiresAt.IsZero()}
		var secretHash []byte // NULL: no client secret
		if p.ClientSecretHash != ([32]byte{}) {
			secretHash = p.ClientSecretHash[:]
		}
		if _, err := tx.ExecContext(ctx, insertPayment,
			p.MerchantID, p.ID, p.IdempotencyKey, p.MerchantOrderID, string(p.Status), p.Amount.Minor, p.Amount.Currency,
			p.PaymentMethod, p.Description, md, nullString(p.PSP), expires, secretHash, string(captureMethodOf(p)), now, now); err != nil {
			return err
		}
		return insertEvent(ctx, tx, c.Event, 1)
	})
	switch {
	case err == nil, errors.Is(err, idemkeys.ErrExists):
		return err
	case errors.Is(err, ErrRetryable):
		// Still conflicting after the retries: on a Galera cluster, a claim
		// of the same key committed on another node. The other request won:
		// the caller reads the key (and claims again if it is not there).
		return fmt.Errorf("%w: %v", idemkeys.ErrExists, err)
	case errors.Is(err, ErrDuplicate):
		// The key is free but a payment holds it: its record was purged after
		// retention. Never run the payment again; name the existing one.
		existing, gerr := s.PaymentByKey(ctx, p.MerchantID, p.IdempotencyKey)
		if gerr != nil {
			// Not err itself: MySQL's duplicate-key message quotes the key, which must not reach the logs.
			return fmt.Errorf("payment refused as a duplicate (order id %s taken?) and none found for its key: %w", p.MerchantOrderID, gerr)
		}
		return &errs.Error{
			Code:      errs.CodeKeyReused,
			Message:   "this Idempotency-Key was used for payment " + existing.ID + " whose stored response has expired; look the payment up instead of retrying",
			PaymentID: existing.ID,
		}
	}
	return writeErr(err)
}

// claimKey claims a key in tx for a worker that may send its subject's
// money movement (a charge, a refund) until the lease ends; now is the
// database's clock. idemkeys.ErrExists when the key is claimed already.
func claimKey(ctx context.Context, tx *sqlx.Tx, ref idemkeys.Ref, fp [32]byte, subjectID string, token idemkeys.Token, now time.Time, lease time.Duration) error {
	const stmt = `
INSERT INTO idempotency_keys
    (merchant_id, endpoint, idem_key, fingerprint, state, subject_id, lease_version,
     locked_until, may_send_until, reconcile_after, send_attempts, sends_not_sent, api_version, created_at, updated_at)
VALUES (?, ?, ?, ?, 'IN_PROGRESS', ?, ?, ?, ?, ?, 1, 0, ?, ?, ?)`
	until := now.Add(lease)
	_, err := tx.ExecContext(ctx, stmt, ref.MerchantID, ref.Endpoint, ref.Key, fp[:], subjectID, int64(token), until, until, until,
		string(versions.FromContext(ctx)), now, now)
	if err := Classify(err); err != nil {
		if errors.Is(err, ErrDuplicate) {
			return idemkeys.ErrExists
		}
		return err
	}
	return nil
}

// writeErr says, when it is so, that a failed write's outcome is unknown:
// the caller must re-read before it believes either way.
func writeErr(err error) error {
	if errors.Is(err, ErrConnLost) {
		return fmt.Errorf("%w: %w", errs.ErrWriteUnknown, err)
	}
	return err
}

// Record implements payments.FlowStore. What it reads decides a takeover or
// what a lost acknowledgement did, so on a Galera cluster it is a causal
// read: the node first applies every write the cluster committed before it.
func (s *Store) Record(ctx context.Context, ref idemkeys.Ref) (idemkeys.Record, error) {
	return getKey(ctx, s.db, s.causal, ref)
}

func getKey(ctx context.Context, q sqlx.QueryerContext, causal string, ref idemkeys.Ref) (rec idemkeys.Record, err error) {
	defer errs.Wrap(&err, "Store.Record")
	var r keyRow
	err = sqlx.GetContext(ctx, q, &r, causal+`SELECT `+keyColumns+` FROM idempotency_keys WHERE `+keyWhere, refArgs(ref)...)
	if errors.Is(err, sql.ErrNoRows) {
		return idemkeys.Record{}, idemkeys.ErrNotFound
	}
	if err != nil {
		return idemkeys.Record{}, Classify(err)
	}
	return r.toDomain(), nil
}

// LoadKey reads a key's record and the payment it holds.
func (s *Store) LoadKey(ctx context.Context, ref idemkeys.Ref) (_ idemkeys.Record, _ payments.Payment, err error) {
	defer errs.Wrap(&err, "Store.LoadKey")
	rec, err := s.Record(ctx, ref)
	if err != nil {
		return idemkeys.Record{}, payments.Payment{}, err
	}
	p, err := s.Payment(ctx, ref.MerchantID, rec.SubjectID)
	if err != nil {
		return idemkeys.Record{}, payments.Payment{}, err
	}
	return rec, p, nil
}

// fenced runs one compare-and-set on a key: exactly one row must match, or
// the writer no longer holds what it thinks it holds (idemkeys.ErrFenced).
// Open sets CLIENT_FOUND_ROWS, so a matched row counts even when the write
// leaves its values as they were.
func (s *Store) fenced(ctx context.Context, stmt string, args ...any) error {
	n, err := ExecRetry(ctx, s.db, stmt, args...)
	switch {
	case errors.Is(err, ErrRetryable):
		// Still conflicting after the retries (a certification conflict on a
		// Galera cluster: another node's writer changed the row): nothing was
		// written, and another worker's write won. The caller re-reads.
		return fmt.Errorf("%w: %v", idemkeys.ErrFenced, err)
	case err != nil:
		return writeErr(err)
	case n == 0:
		return idemkeys.ErrFenced
	}
	return nil
}

// TakeOver implements payments.FlowStore.
func (s *Store) TakeOver(ctx context.Context, ref idemkeys.Ref, seen idemkeys.Token, lease time.Duration) (_ idemkeys.Token, err error) {
	defer errs.Wrap(&err, "Store.TakeOver")
	const stmt = `
UPDATE idempotency_keys
SET lease_version = ?, locked_until = NOW(6) + INTERVAL ? MICROSECOND, updated_at = NOW(6)
WHERE ` + keyWhere + ` AND state = 'IN_PROGRESS' AND lease_version = ? AND locked_until <= NOW(6)`
	next := seen.Next()
	args := append([]any{int64(next), micros(lease)}, append(refArgs(ref), int64(seen))...)
	if err := s.fenced(ctx, stmt, args...); err != nil {
		return 0, err
	}
	return next, nil
}

// ArmSend implements payments.FlowStore. The guard is judged in the same
// statement, on the database's clock: a resumed worker that stalled
// between its lookup and this write cannot send past the PSP's dedupe memory.
func (s *Store) ArmSend(ctx context.Context, ref idemkeys.Ref, token idemkeys.Token, window time.Duration, g payments.ArmGuard) (err error) {
	defer errs.Wrap(&err, "Store.ArmSend")
	const stmt = `
UPDATE idempotency_keys
SET may_send_until = GREATEST(COALESCE(may_send_until, NOW(6)), NOW(6) + INTERVAL ? MICROSECOND),
    locked_until = GREATEST(COALESCE(locked_until, NOW(6)), NOW(6) + INTERVAL ? MICROSECOND),
    send_attempts = send_attempts + 1, not_found_at = NULL, updated_at = NOW(6)
WHERE ` + keyWhere + ` AND state = 'IN_PROGRESS' AND lease_version = ? AND cancel_requested_at IS NULL
  AND (? OR (? AND created_at > NOW(6) - INTERVAL ? MICROSECOND)
         OR (? AND may_send_until < NOW(6) - INTERVAL ? MICROSECOND))`
	args := append([]any{micros(window), micros(window)}, append(refArgs(ref), int64(token),
		g.Forever, g.DedupeAge > 0, micros(g.DedupeAge), g.Authoritative, micros(g.LateAfter))...)
	err = s.fenced(ctx, stmt, args...)
	if !errors.Is(err, idemkeys.ErrFenced) {
		return err
	}
	// Nothing matched: the lease is someone else's, or the guard said no.
	rec, rerr := s.Record(ctx, ref)
	if rerr == nil && rec.State == idemkeys.InProgress && rec.Token == token {
		return payments.ErrArmRefused
	}
	return err
}

// Release implements payments.FlowStore.
func (s *Store) Release(ctx context.Context, ref idemkeys.Ref, token idemkeys.Token, notSent bool) (err error) {
	defer errs.Wrap(&err, "Store.Release")
	const stmt = `
UPDATE idempotency_keys
SET locked_until = NOW(6), sends_not_sent = sends_not_sent + ?, updated_at = NOW(6)
WHERE ` + keyWhere + ` AND state = 'IN_PROGRESS' AND lease_version = ?`
	inc := 0
	if notSent {
		inc = 1
	}
	args := append([]any{inc}, append(refArgs(ref), int64(token))...)
	return s.fenced(ctx, stmt, args...)
}

// Settle implements payments.FlowStore with one short transaction of
// single-table statements: the key completes with the answer, fenced on the
// token (no row: the writer lost its lease, and nothing is written), then
// the payment leaves processing (no row: it was settled by other means),
// then the change's event. Either way a fenced settle rolls back whole and
// the caller re-reads. A payment sent to review enters the review queue,
// one that waits for its customer (requires_action) the reconciler's looks:
// at once when a PSP's notification came while it was processing (marked
// by HastenLook), else after ActionFirstLook.
func (s *Store) Settle(ctx context.Context, ref idemkeys.Ref, token idemkeys.Token, c payments.PaymentChange) (err error) {
	p := c.Payment
	defer errs.Wrap(&err, "Store.Settle(%s)", p.ID)
	const settlePayment = `
UPDATE payments
SET status = ?, psp_reference = ?, decline_code = ?, psp_code = ?, review_reason = ?,
    review_since = IF(? IN ('requires_review', 'requires_action'), NOW(6), NULL),
    review_after = CASE ? WHEN 'requires_review' THEN NOW(6) + INTERVAL ? MICROSECOND
                          WHEN 'requires_action' THEN IF(review_after IS NULL, NOW(6) + INTERVAL ? MICROSECOND, NOW(6)) END,
    next_action = ?, amount_captured = ?, capture_before = ?, cancellation_reason = ?,
    ` + bumpEventSeq + `, updated_at = NOW(6)
WHERE merchant_id = ? AND id = ? AND status = 'processing'`
	status := string(p.Status)
	action, err := nextActionJSON(p.NextAction)
	if err != nil {
		return err
	}
	err = Transact(ctx, s.db, func(tx *sqlx.Tx) error {
		if err := completeKey(ctx, tx, ref, token, p.ID, *c.Answer); err != nil {
			return err
		}
		seq, err := bumped(tx.ExecContext(ctx, settlePayment,
			status, nullString(p.PSPReference), nullString(p.DeclineCode), nullString(p.PSPCode), nullString(p.ReviewReason),
			status, status, micros(payments.ReviewFirstLook), micros(payments.ActionFirstLook), action,
			p.AmountCaptured, nullTime(p.CaptureBefore), nullString(p.CancellationReason),
			ref.MerchantID, p.ID))
		if err != nil {
			return err
		}
		return insertEvent(ctx, tx, *c.Event, seq)
	})
	return settleErr(err)
}

// completeKey completes a key in tx with its answer, fenced on the token
// and on the subject it was claimed for: errFenced when no row matched.
func completeKey(ctx context.Context, tx *sqlx.Tx, ref idemkeys.Ref, token idemkeys.Token, subjectID string, resp idemkeys.Response) error {
	const stmt = `
UPDATE idempotency_keys
SET state = 'COMPLETED', response_status = ?, response_body = ?, response_version = ?, locked_until = NULL,
    completed_at = NOW(6), updated_at = NOW(6)
WHERE ` + keyWhere + ` AND state = 'IN_PROGRESS' AND lease_version = ? AND subject_id = ?`
	args := append([]any{resp.Status, resp.Body, bodyVersion(resp)}, append(refArgs(ref), int64(token), subjectID)...)
	return exactlyOne(tx.ExecContext(ctx, stmt, args...))
}

// errFenced ends a settle's transaction whose compare-and-set matched no
// row: it rolls back, and the caller learns idemkeys.ErrFenced.
var errFenced = errors.New("no row matched the fence")

// exactlyOne turns the result of a fenced write into errFenced when it
// matched no row (Open sets CLIENT_FOUND_ROWS: a matched row counts even
// when its values stay as they were).
func exactlyOne(res sql.Result, err error) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	switch {
	case err != nil:
		return err
	case n != 1:
		return errFenced
	}
	return nil
}

// settleErr names the outcome of a settle's transaction for its caller:
// fenced (nothing written; re-read), unknown (a lost COMMIT; re-read), or
// another failure.
func settleErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errFenced):
		return idemkeys.ErrFenced
	case errors.Is(err, ErrRetryable):
		// Still conflicting after the retries (a certification conflict on a
		// Galera cluster: another node's writer changed a row): nothing was
		// written, and another worker's write won. The caller re-reads.
		return fmt.Errorf("%w: %v", idemkeys.ErrFenced, err)
	}
	return writeErr(err)
}

// Reschedule implements reconcile.Store: the lease ends now, so the client's
// own retry may resume at once, and the reconciler looks again after r.
func (s *Store) Reschedule(ctx context.Context, ref idemkeys.Ref, token idemkeys.Token, r payments.Reschedule) (err error) {
	defer errs.Wrap(&err, "Store.Reschedule")
	const stmt = `
UPDATE idempotency_keys
SET locked_until = NOW(6),
    reconcile_after = GREATEST(NOW(6) + INTERVAL ? MICROSECOND, COALESCE(?, NOW(6))),
    reconcile_attempts = ?,
    not_found_at = IF(?, COALESCE(not_found_at, NOW(6)), not_found_at),
    updated_at = NOW(6)
WHERE ` + keyWhere + ` AND state = 'IN_PROGRESS' AND lease_version = ?`
	notBefore := sql.NullTime{Time: r.NotBefore, Valid: !r.NotBefore.IsZero()}
	args := append([]any{micros(r.After), notBefore, r.Attempts, r.NotFound}, append(refArgs(ref), int64(token))...)
	return s.fenced(ctx, stmt, args...)
}

// replaceResponse rewrites the stored response of a completed key after its
// subject's outcome changed (a resolution). Run it in the transaction that
// holds the subject's row lock. A key already purged has nothing to rewrite.
func replaceResponse(ctx context.Context, tx *sqlx.Tx, ref idemkeys.Ref, resp idemkeys.Response) error {
	const stmt = `
UPDATE idempotency_keys SET response_status = ?, response_body = ?, response_version = ?, updated_at = NOW(6)
WHERE ` + keyWhere + ` AND state = 'COMPLETED'`
	_, err := tx.ExecContext(ctx, stmt, append([]any{resp.Status, resp.Body, bodyVersion(resp)}, refArgs(ref)...)...)
	return err
}

// bodyVersion is the version resp's body is rendered in: this gateway's
// latest, unless it was read from a row that says otherwise.
func bodyVersion(resp idemkeys.Response) string {
	if resp.BodyVersion != "" {
		return resp.BodyVersion
	}
	return string(versions.Latest)
}
