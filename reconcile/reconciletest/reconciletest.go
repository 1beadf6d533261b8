// Package reconciletest seeds what the reconciler works on, for its
// benchmarks and for cmd/bench: unfinished payments whose leases expired
// long ago, as a crashed gateway leaves them.
package reconciletest

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"gateway/idemkeys"
	"gateway/payments"
	"gateway/payments/store"
	"gateway/psp"
)

// Charger is the part of a PSP adapter the seeding needs.
type Charger interface {
	Charge(ctx context.Context, req psp.ChargeRequest) (psp.Charge, error)
}

// seedChunk is the number of rows per multi-row INSERT: large enough to make
// seeding 10,000 rows take well under a second, small enough for any
// max_allowed_packet.
const seedChunk = 500

// SeedStale creates a merchant and writes n unfinished keys for it, each with
// its processing payment, whose leases (and last chargeable lease) ended at
// `at`. Every other key (the even ones) is charged at charger first, so a
// reconciler settles half of them succeeded and, once the PSP's creation
// window after `at` is over, the other half failed. Rows are written with
// multi-row INSERTs straight into the tables, mirroring what the payment flow
// stores at claim time. It returns the merchant that owns the rows.
func SeedStale(ctx context.Context, dbx *sqlx.DB, charger Charger, n int, at time.Time) (payments.Merchant, error) {
	at = at.UTC().Truncate(time.Microsecond)
	merchant, key, err := payments.NewMerchant("Reconcile seed", at)
	if err != nil {
		return payments.Merchant{}, err
	}
	if err := store.New(dbx).CreateMerchant(ctx, merchant, key); err != nil {
		return payments.Merchant{}, fmt.Errorf("reconciletest: create merchant: %w", err)
	}
	for lo := 0; lo < n; lo += seedChunk {
		hi := min(lo+seedChunk, n)
		var pv, kv []string
		var pargs, kargs []any
		for i := lo; i < hi; i++ {
			k := fmt.Sprintf("stale-%06d", i)
			id := fmt.Sprintf("pay_stale%06d", i)
			order := payments.MerchantOrderID(merchant.ID, k)
			pv = append(pv, "(?, ?, ?, ?, 'processing', 1000, 'USD', 'pm_card_ok', '', '{}', ?, ?)")
			pargs = append(pargs, merchant.ID, id, k, order, at, at)
			fp := idemkeys.Fingerprint(k)
			kv = append(kv, "(?, ?, ?, ?, 'IN_PROGRESS', ?, 1, ?, ?, ?, ?, ?)")
			kargs = append(kargs, merchant.ID, payments.EndpointCreatePayment, k, fp[:], id, at, at, at, at, at)
			if i%2 == 0 {
				if _, err := charger.Charge(ctx, psp.ChargeRequest{MerchantOrderID: order, Amount: 1000, Currency: "USD", PaymentMethod: "pm_card_ok"}); err != nil {
					return payments.Merchant{}, fmt.Errorf("reconciletest: charge %s: %w", order, err)
				}
			}
		}
		if _, err := dbx.ExecContext(ctx, `INSERT INTO payments (merchant_id, id, idem_key, merchant_order_id, status, amount, currency,
			payment_method, description, metadata, created_at, updated_at) VALUES `+strings.Join(pv, ","), pargs...); err != nil {
			return payments.Merchant{}, fmt.Errorf("reconciletest: insert payments: %w", err)
		}
		if _, err := dbx.ExecContext(ctx, `INSERT INTO idempotency_keys (merchant_id, endpoint, idem_key, fingerprint, state, payment_id,
			lease_version, locked_until, may_charge_until, reconcile_after, created_at, updated_at) VALUES `+strings.Join(kv, ","), kargs...); err != nil {
			return payments.Merchant{}, fmt.Errorf("reconciletest: insert keys: %w", err)
		}
	}
	return merchant, nil
}
