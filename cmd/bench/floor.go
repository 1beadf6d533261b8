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
)

// The floor's statements are exactly those the payment flow issues, column
// for column (idemkeys.Insert, store.Claim's payment insert, idemkeys.Complete,
// store.Settle's payment update, the outbox's read of the changed payment and
// its event inserts, and a primary-key read of the stored response), with
// values of the same shape and size.
const (
	floorInsertKey = `
INSERT INTO idempotency_keys
    (merchant_id, endpoint, idem_key, fingerprint, state, payment_id, lease_version,
     locked_until, may_charge_until, reconcile_after, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	floorInsertPayment = `
INSERT INTO payments (merchant_id, id, idem_key, merchant_order_id, status, amount, currency,
    payment_method, description, metadata, psp_reference, decline_code, event_seq, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1, ?, ?)`
	floorCompleteKey = `
UPDATE idempotency_keys
SET state = 'COMPLETED', response_status = ?, response_body = ?, locked_until = NULL,
    completed_at = ?, updated_at = ?
WHERE merchant_id = ? AND endpoint = ? AND idem_key = ?
  AND state = 'IN_PROGRESS' AND lease_version = ?`
	floorSettlePayment = `
UPDATE payments
SET status = ?, psp_reference = ?, decline_code = ?, event_seq = event_seq + 1, updated_at = ?
WHERE merchant_id = ? AND id = ? AND status = 'processing'`
	floorReadPayment = `
SELECT merchant_id, id, idem_key, merchant_order_id, status, amount, amount_reserved, amount_refunded, currency,
    payment_method, description, metadata, psp_reference, decline_code, psp_code, psp, review_reason,
    review_since, review_after, review_attempts, review_not_found_at, expires_at, confirm_key, next_action,
    client_secret_hash, created_at, updated_at, event_seq
FROM payments WHERE merchant_id = ? AND id = ?`
	floorInsertEvent = `
INSERT INTO events (id, merchant_id, type, object_type, object_id, seq, data, created_at)
VALUES (?, ?, ?, ?, ?, ?, ?, NOW(6))`
	floorReadResponse = `
SELECT response_status, response_body FROM idempotency_keys
WHERE merchant_id = ? AND endpoint = ? AND idem_key = ?`
)

// floorFresh is one fresh payment as the database sees it: the claim
// transaction, the PSP's time (pspWait, holding no connection), and the
// fenced settle transaction.
func (b *bench) floorFresh(ctx context.Context, key string, pspWait time.Duration) error {
	merchantID := b.gw.merchant.ID
	now := time.Now().UTC().Truncate(time.Microsecond)
	id := "pay_" + ulid.Make().String()
	order := payments.MerchantOrderID(merchantID, key)
	until := now.Add(serviceConfig().Lease)
	err := b.floorTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, floorInsertKey, merchantID, payments.EndpointCreatePayment, key, b.floorFP[:],
			"IN_PROGRESS", id, 1, until, until, until, now, now); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, floorInsertPayment, merchantID, id, key, order, "processing",
			int64(12500), "USD", "pm_card_ok", "Order "+key, `{"channel":"web","order":"`+key+`"}`,
			nil, nil, now, now); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, floorInsertEvent, payments.NewEventID(), merchantID, "payment.processing", "payment", id, 1, b.floorResp.Body)
		return err
	})
	if err != nil {
		return fmt.Errorf("floor claim: %w", err)
	}
	if !sleep(ctx, pspWait) {
		return ctx.Err()
	}
	done := time.Now().UTC().Truncate(time.Microsecond)
	resp := b.floorResp
	err = b.floorTx(ctx, func(tx *sql.Tx) error {
		if err := affected(tx.ExecContext(ctx, floorCompleteKey, resp.Status, resp.Body, done, done,
			merchantID, payments.EndpointCreatePayment, key, 1)); err != nil {
			return err
		}
		if err := affected(tx.ExecContext(ctx, floorSettlePayment, "succeeded", "fake_ch_floor", nil, done, merchantID, id)); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, floorReadPayment, merchantID, id)
		if err != nil {
			return err
		}
		for rows.Next() { // the columns are read as the store reads them; their values matter not
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, floorInsertEvent, payments.NewEventID(), merchantID, "payment.succeeded", "payment", id, 2, resp.Body)
		return err
	})
	if err != nil {
		return fmt.Errorf("floor settle: %w", err)
	}
	return nil
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

func affected(res sql.Result, err error) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n != 1 {
		return errors.New("compare-and-set matched no row")
	}
	return nil
}
