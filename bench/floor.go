package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/oklog/ulid/v2"

	"gateway/idemkeys"
	"gateway/payments"
	"gateway/psp/fake"
	"gateway/versions"
)

// The floor issues, statement for statement, what the payment flow sends
// the database for a fresh payment (mysql: Claim, then Settle), for a
// fresh refund (ClaimRefund, then SettleRefund) and for the capture of an
// authorization (ClaimOperation, then SettleOperation), with arguments of the
// same kinds and sizes, the outbox's events included: the ratio to it is the
// gateway's overhead above the database's own cost of the same work.
// TestFloorIssuesTheFlowsStatements records both sides and fails when they
// drift apart.
const (
	floorNow    = `SELECT NOW(6)`
	floorKeyIns = `
INSERT INTO idempotency_keys
    (merchant_id, endpoint, idem_key, fingerprint, state, subject_id, lease_version,
     locked_until, may_send_until, reconcile_after, send_attempts, sends_not_sent, api_version, created_at, updated_at)
VALUES (?, ?, ?, ?, 'IN_PROGRESS', ?, ?, ?, ?, ?, 1, 0, ?, ?, ?)`
	floorPaymentIns = `
INSERT INTO payments (merchant_id, id, idem_key, merchant_order_id, status, amount, currency,
    payment_method, description, metadata, psp, expires_at, client_secret_hash, capture_method, event_seq, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?)`
	floorEventIns = `
INSERT INTO events (id, merchant_id, type, object_type, object_id, seq, data, data_version, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, NOW(6))`
	floorKeyComplete = `
UPDATE idempotency_keys
SET state = 'COMPLETED', response_status = ?, response_body = ?, response_version = ?, locked_until = NULL,
    completed_at = NOW(6), updated_at = NOW(6)
WHERE merchant_id = ? AND endpoint = ? AND idem_key = ? AND state = 'IN_PROGRESS' AND lease_version = ? AND subject_id = ?`
	floorSettle = `
UPDATE payments
SET status = ?, psp_reference = ?, decline_code = ?, psp_code = ?, review_reason = ?,
    review_since = IF(? IN ('requires_review', 'requires_action'), NOW(6), NULL),
    review_after = CASE ? WHEN 'requires_review' THEN NOW(6) + INTERVAL ? MICROSECOND
                          WHEN 'requires_action' THEN IF(review_after IS NULL, NOW(6) + INTERVAL ? MICROSECOND, NOW(6)) END,
    next_action = ?, amount_captured = ?, capture_before = ?, cancellation_reason = ?,
    event_seq = LAST_INSERT_ID(event_seq + 1), updated_at = NOW(6)
WHERE merchant_id = ? AND id = ? AND status = 'processing'`
	floorPaymentColumns = `merchant_id, id, idem_key, merchant_order_id, status, amount, amount_reserved, amount_refunded, currency,
    payment_method, description, metadata, psp_reference, decline_code, psp_code, psp, review_reason,
    review_since, review_after, review_attempts, review_not_found_at, expires_at, confirm_key, next_action,
    client_secret_hash, capture_method, amount_captured, capture_before, cancellation_reason,
    op_kind, op_key, op_amount, op_reason, attempt, attempt_at, attempts, created_at, updated_at`
	floorPaymentLock = `SELECT ` + floorPaymentColumns + `, event_seq, NOW(6) AS db_now FROM payments WHERE merchant_id = ? AND id = ? FOR UPDATE`
	floorMoveAmounts = `UPDATE payments SET amount_refunded = amount_refunded + ?, amount_reserved = amount_reserved + ?
WHERE merchant_id = ? AND id = ? AND amount_reserved + ? <= IF(capture_method = 'manual', amount_captured, amount)`
	floorRefundIns = `
INSERT INTO refunds (merchant_id, id, payment_id, idem_key, refund_order_id, status, amount, currency,
    reason, metadata, psp, event_seq, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?)`
	floorSettleRefund = `
UPDATE refunds
SET status = ?, psp_reference = ?, failure_code = ?, psp_code = ?, review_reason = ?,
    review_since = IF(? = 'requires_review', NOW(6), NULL),
    review_after = CASE ? WHEN 'requires_review' THEN NOW(6) + INTERVAL ? MICROSECOND
                          WHEN 'pending' THEN NOW(6) + INTERVAL ? MICROSECOND END,
    event_seq = LAST_INSERT_ID(event_seq + ?), updated_at = ?
WHERE merchant_id = ? AND id = ? AND status = 'pending'`
	floorOperationClaim = `
UPDATE payments SET op_kind = ?, op_key = ?, op_amount = ?, op_reason = ?, updated_at = ?
WHERE merchant_id = ? AND id = ? AND op_kind IS NULL`
	floorSettleOperation = `
UPDATE payments
SET review_since = CASE WHEN status = ? THEN review_since WHEN ? = 'requires_review' THEN NOW(6) END,
    review_after = CASE WHEN status = ? THEN review_after WHEN ? = 'requires_review' THEN NOW(6) + INTERVAL ? MICROSECOND END,
    status = ?, psp_reference = COALESCE(?, psp_reference), decline_code = ?, psp_code = ?, review_reason = ?,
    next_action = ?, amount_captured = ?, capture_before = ?, cancellation_reason = ?,
    op_kind = NULL, op_key = NULL, op_amount = NULL, op_reason = NULL,
    event_seq = LAST_INSERT_ID(event_seq + 1), updated_at = NOW(6)
WHERE merchant_id = ? AND id = ? AND op_key = ? AND op_kind = ? AND (? = '' OR status = ?)`
	floorReadResponse = `
SELECT response_status, response_body FROM idempotency_keys
WHERE merchant_id = ? AND endpoint = ? AND idem_key = ?`
)

// latest is the API version the flow stamps on what it stores.
var latest = string(versions.Latest)

// The second floor: the least durable work an idempotent request can be,
// two commits (claim, complete) of the smallest row, in a table of its own.
const (
	floorMinimalTable = `CREATE TABLE IF NOT EXISTS bench_minimal (
    k VARBINARY(64) NOT NULL PRIMARY KEY, done TINYINT NOT NULL DEFAULT 0) ENGINE=InnoDB`
	floorMinimalIns = `INSERT INTO bench_minimal (k) VALUES (?)`
	floorMinimalUpd = `UPDATE bench_minimal SET done = 1 WHERE k = ? AND done = 0`
)

// floorFresh is one fresh payment as the database sees it: the database's
// clock read, the claim transaction (key, payment, its first event), the
// PSP's time (pspWait, holding no connection), and the settle transaction
// (the key completed, fenced on its token; the payment settled, its event
// number taken in the same statement; its event).
func (b *bench) floorFresh(ctx context.Context, key string, pspWait time.Duration) error {
	_, err := b.floorPayment(ctx, key, pspWait, false)
	return err
}

// floorAuthorize is floorFresh for a payment with manual capture: the same
// statements, the payment left authorized (requires_capture) until its
// capture_before. It returns the payment's id.
func (b *bench) floorAuthorize(ctx context.Context, key string) (string, error) {
	return b.floorPayment(ctx, key, 0, true)
}

// floorPayment is floorFresh, or floorAuthorize when manual, returning the
// payment's id.
func (b *bench) floorPayment(ctx context.Context, key string, pspWait time.Duration, manual bool) (string, error) {
	merchantID := b.gw.merchant.ID
	id := "pay_" + ulid.Make().String()
	order := payments.MerchantOrderID(merchantID, key)
	resp, method, status := b.floorResp, payments.CaptureAutomatic, payments.Succeeded
	if manual {
		resp, method, status = b.floorAuthResp, payments.CaptureManual, payments.RequiresCapture
	}
	// An event's data is the payment's view, of the stored answer's size.
	data := string(resp.Body)
	var now time.Time
	if err := b.floor.QueryRowContext(ctx, floorNow).Scan(&now); err != nil {
		return "", fmt.Errorf("floor clock: %w", err)
	}
	err := b.floorTx(ctx, func(tx *sql.Tx) error {
		until := now.Add(serviceConfig().Lease)
		if _, err := tx.ExecContext(ctx, floorKeyIns, merchantID, payments.EndpointCreatePayment, key, b.floorFP[:],
			id, int64(1), until, until, until, latest, now, now); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, floorPaymentIns, merchantID, id, key, order, string(payments.Processing),
			int64(12500), "USD", "pm_card_ok", "Order "+key, `{"channel":"web","order":"`+key+`"}`,
			sql.NullString{String: "fake", Valid: true}, sql.NullTime{}, []byte(nil), string(method), now, now); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, floorEventIns, payments.NewEventID(), merchantID,
			string(payments.PaymentEventType(payments.Processing)), payments.ObjectPayment, id, int64(1), data, latest)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("floor claim: %w", err)
	}
	if !sleep(ctx, pspWait) {
		return "", ctx.Err()
	}
	var captureBefore sql.NullTime
	if manual {
		captureBefore = sql.NullTime{Time: now.Add(fake.DefaultAuthorizationValidity).Truncate(time.Second), Valid: true}
	}
	err = b.floorTx(ctx, func(tx *sql.Tx) error {
		if err := affectedN(1)(tx.ExecContext(ctx, floorKeyComplete, resp.Status, resp.Body, latest,
			merchantID, payments.EndpointCreatePayment, key, int64(1), id)); err != nil {
			return err
		}
		seq, err := bumpedSeq(tx.ExecContext(ctx, floorSettle,
			string(status), "fake_ch_"+id[4:20], sql.NullString{}, sql.NullString{}, sql.NullString{},
			string(status), string(status), payments.ReviewFirstLook.Microseconds(), payments.ActionFirstLook.Microseconds(), sql.NullString{},
			int64(0), captureBefore, sql.NullString{},
			merchantID, id))
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, floorEventIns, payments.NewEventID(), merchantID,
			string(payments.PaymentEventType(status)), payments.ObjectPayment, id, seq, data, latest)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("floor settle: %w", err)
	}
	return id, nil
}

// floorCapture is the capture of the whole of authorization paymentID with
// key as the database sees it (mysql: ClaimOperation, then
// SettleOperation): the claim transaction (the database's clock, the key,
// the payment locked, the capture set in flight on it), the PSP's time
// (pspWait), and the settle transaction (the key completed, fenced on its
// token; the payment captured and its operation let go, fenced on the
// operation being the key's, its event number taken in the same statement;
// its event).
func (b *bench) floorCapture(ctx context.Context, paymentID, key string, pspWait time.Duration) error {
	merchantID := b.gw.merchant.ID
	resp := b.floorCaptureResp
	data := string(resp.Body)
	kind := string(payments.OpCapture)
	err := b.floorTx(ctx, func(tx *sql.Tx) error {
		var now time.Time
		if err := tx.QueryRowContext(ctx, floorNow).Scan(&now); err != nil {
			return err
		}
		until := now.Add(serviceConfig().Lease)
		if _, err := tx.ExecContext(ctx, floorKeyIns, merchantID, payments.EndpointCapturePayment, key, b.floorFP[:],
			paymentID, int64(1), until, until, until, latest, now, now); err != nil {
			return err
		}
		if err := b.floorLockPayment(ctx, tx, paymentID); err != nil {
			return err
		}
		return affectedN(1)(tx.ExecContext(ctx, floorOperationClaim, kind, key, int64(12500), sql.NullString{},
			now.Truncate(time.Microsecond), merchantID, paymentID))
	})
	if err != nil {
		return fmt.Errorf("floor capture claim: %w", err)
	}
	if !sleep(ctx, pspWait) {
		return ctx.Err()
	}
	status, from := string(payments.Succeeded), string(payments.RequiresCapture)
	err = b.floorTx(ctx, func(tx *sql.Tx) error {
		if err := affectedN(1)(tx.ExecContext(ctx, floorKeyComplete, resp.Status, resp.Body, latest,
			merchantID, payments.EndpointCapturePayment, key, int64(1), paymentID)); err != nil {
			return err
		}
		seq, err := bumpedSeq(tx.ExecContext(ctx, floorSettleOperation,
			status, status, status, status, payments.ReviewFirstLook.Microseconds(),
			status, "fake_ch_"+paymentID[4:20], sql.NullString{}, sql.NullString{}, sql.NullString{},
			sql.NullString{}, int64(12500), sql.NullTime{}, sql.NullString{},
			merchantID, paymentID, key, kind, from, from))
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, floorEventIns, payments.NewEventID(), merchantID,
			string(payments.EventPaymentCaptured), payments.ObjectPayment, paymentID, seq, data, latest)
		return err
	})
	if err != nil {
		return fmt.Errorf("floor capture settle: %w", err)
	}
	return nil
}

// floorLockPayment reads payment paymentID under its row lock in tx.
func (b *bench) floorLockPayment(ctx context.Context, tx *sql.Tx, paymentID string) error {
	rows, err := tx.QueryContext(ctx, floorPaymentLock, b.gw.merchant.ID, paymentID)
	if err != nil {
		return err
	}
	found := rows.Next()
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("payment %s not found", paymentID)
	}
	return nil
}

// floorRefund is one fresh refund of refundAmount of payment paymentID as
// the database sees it: the claim transaction (key, payment locked, amount
// reserved, refund, its first event), then the settle transaction (key
// fenced, refund settled and its event number taken in the same statement,
// its event, the payment's amounts moved).
func (b *bench) floorRefund(ctx context.Context, paymentID, key string) error {
	merchantID := b.gw.merchant.ID
	id := "re_" + ulid.Make().String()
	order := payments.RefundOrderID(merchantID, paymentID, key)
	resp := b.floorRefundResp
	data := string(resp.Body)
	var created time.Time
	err := b.floorTx(ctx, func(tx *sql.Tx) error {
		if err := tx.QueryRowContext(ctx, floorNow).Scan(&created); err != nil {
			return err
		}
		until := created.Add(serviceConfig().Lease)
		if _, err := tx.ExecContext(ctx, floorKeyIns, merchantID, payments.EndpointCreateRefund, key, b.floorFP[:],
			id, int64(1), until, until, until, latest, created, created); err != nil {
			return err
		}
		if err := b.floorLockPayment(ctx, tx, paymentID); err != nil {
			return err
		}
		if err := affectedN(1)(tx.ExecContext(ctx, floorMoveAmounts, int64(0), int64(refundAmount), merchantID, paymentID, int64(refundAmount))); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, floorRefundIns, merchantID, id, paymentID, key, order, string(payments.RefundPending),
			int64(refundAmount), "USD", refundReason, `{"order":"`+key+`"}`, sql.NullString{String: "fake", Valid: true}, created, created); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, floorEventIns, payments.NewEventID(), merchantID,
			string(payments.RefundEventType(payments.RefundPending)), payments.ObjectRefund, id, int64(1), data, latest)
		return err
	})
	if err != nil {
		return fmt.Errorf("floor refund claim: %w", err)
	}
	status := string(payments.RefundSucceeded)
	err = b.floorTx(ctx, func(tx *sql.Tx) error {
		if err := affectedN(1)(tx.ExecContext(ctx, floorKeyComplete, resp.Status, resp.Body, latest,
			merchantID, payments.EndpointCreateRefund, key, int64(1), id)); err != nil {
			return err
		}
		seq, err := bumpedSeq(tx.ExecContext(ctx, floorSettleRefund,
			status, "fake_re_"+id[3:19], sql.NullString{}, sql.NullString{}, sql.NullString{},
			status, status, payments.ReviewFirstLook.Microseconds(), payments.RefundFirstCheck.Microseconds(), int64(1), created,
			merchantID, id))
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, floorEventIns, payments.NewEventID(), merchantID,
			string(payments.RefundEventType(payments.RefundSucceeded)), payments.ObjectRefund, id, seq, data, latest); err != nil {
			return err
		}
		return affectedN(1)(tx.ExecContext(ctx, floorMoveAmounts, int64(refundAmount), int64(0), merchantID, paymentID, int64(0)))
	})
	if err != nil {
		return fmt.Errorf("floor refund settle: %w", err)
	}
	return nil
}

// bumpedSeq is the event number an UPDATE with LAST_INSERT_ID(event_seq + n)
// took, as the store reads it: from the statement's own result.
func bumpedSeq(res sql.Result, err error) (int64, error) {
	if err := affectedN(1)(res, err); err != nil {
		return 0, err
	}
	return res.LastInsertId()
}

// floorMinimal is the minimal durable work: a claim row committed, the
// PSP's time, the row completed with a compare-and-set, committed.
func (b *bench) floorMinimal(ctx context.Context, key string, pspWait time.Duration) error {
	if _, err := b.floor.ExecContext(ctx, floorMinimalIns, key); err != nil {
		return fmt.Errorf("minimal claim: %w", err)
	}
	if !sleep(ctx, pspWait) {
		return ctx.Err()
	}
	if err := affectedN(1)(b.floor.ExecContext(ctx, floorMinimalUpd, key)); err != nil {
		return fmt.Errorf("minimal complete: %w", err)
	}
	return nil
}

// floorPaymentID is the id of the payment the floor made with key.
func (b *bench) floorPaymentID(ctx context.Context, key string) (string, error) {
	var id string
	err := b.floor.QueryRowContext(ctx, `SELECT id FROM payments WHERE merchant_id = ? AND idem_key = ?`, b.gw.merchant.ID, key).Scan(&id)
	return id, err
}

// floorResponse is a stored response of the gateway's shape and size,
// rendered once: what the database stores matters to the floor, not what it says.
func floorResponse(merchantID string) idemkeys.Response {
	now := time.Now().UTC().Truncate(time.Microsecond)
	key := "floor-00000000-w000-000000"
	return payments.Render(payments.Payment{
		ID: "pay_" + ulid.Make().String(), MerchantID: merchantID, IdempotencyKey: key,
		MerchantOrderID: payments.MerchantOrderID(merchantID, key),
		Status:          payments.Succeeded, Amount: payments.Money{Minor: 12500, Currency: "USD"},
		PaymentMethod: "pm_card_ok", Description: "Order " + key,
		Metadata: map[string]string{"order": key, "channel": "web"}, PSPReference: "fake_ch_100000",
		CreatedAt: now, UpdatedAt: now,
	})
}

// floorManualResponse is a manual payment's stored response of the
// gateway's shape and size: its authorization's (requires_capture, with its
// capture_before) or, captured, its capture's (succeeded, all of it taken).
func floorManualResponse(merchantID string, captured bool) idemkeys.Response {
	now := time.Now().UTC().Truncate(time.Microsecond)
	key := "floor-00000000-w000-000000"
	p := payments.Payment{
		ID: "pay_" + ulid.Make().String(), MerchantID: merchantID, IdempotencyKey: key,
		MerchantOrderID: payments.MerchantOrderID(merchantID, key),
		Status:          payments.RequiresCapture, Amount: payments.Money{Minor: 12500, Currency: "USD"},
		PaymentMethod: "pm_card_ok", Description: "Order " + key,
		Metadata: map[string]string{"order": key, "channel": "web"}, PSPReference: "fake_ch_100000",
		CaptureMethod: payments.CaptureManual, CaptureBefore: now.Add(fake.DefaultAuthorizationValidity).Truncate(time.Second),
		CreatedAt: now, UpdatedAt: now,
	}
	if captured {
		p.Status, p.AmountCaptured, p.CaptureBefore = payments.Succeeded, 12500, time.Time{}
	}
	return payments.Render(p)
}

// floorRefundResponse is a refund's stored response of the gateway's shape and size.
func floorRefundResponse(merchantID string) idemkeys.Response {
	now := time.Now().UTC().Truncate(time.Microsecond)
	key := "floor-00000000-w000-000000"
	pay := "pay_" + ulid.Make().String()
	return payments.RenderRefund(payments.Refund{
		ID: "re_" + ulid.Make().String(), MerchantID: merchantID, PaymentID: pay, IdempotencyKey: key,
		RefundOrderID: payments.RefundOrderID(merchantID, pay, key), Status: payments.RefundSucceeded,
		Amount: payments.Money{Minor: refundAmount, Currency: "USD"}, Reason: refundReason,
		Metadata: map[string]string{"order": key}, PSPReference: "fake_re_100000", CreatedAt: now, UpdatedAt: now,
	})
}

// floorReplay reads a completed key's stored response by primary key.
func (b *bench) floorReplay(ctx context.Context, key string) error {
	var status sql.NullInt32
	var body []byte
	err := b.floor.QueryRowContext(ctx, floorReadResponse, b.gw.merchant.ID, payments.EndpointCreatePayment, key).Scan(&status, &body)
	if err != nil {
		return fmt.Errorf("floor replay: %w", err)
	}
	if !status.Valid || len(body) == 0 {
		return fmt.Errorf("floor replay: key %s has no stored response", key)
	}
	return nil
}

// floorTx runs fn in a transaction and commits it: BEGIN, the statements,
// COMMIT, as db.Transact does when nothing goes wrong.
func (b *bench) floorTx(ctx context.Context, fn func(*sql.Tx) error) error {
	tx, err := b.floor.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// affectedN checks that a compare-and-set matched want rows.
func affectedN(want int64) func(sql.Result, error) error {
	return func(res sql.Result, err error) error {
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n != want {
			return fmt.Errorf("compare-and-set matched %d row(s), want %d", n, want)
		}
		return nil
	}
}
