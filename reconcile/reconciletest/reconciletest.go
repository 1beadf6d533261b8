// Package reconciletest seeds what the reconciler works on, for its
// benchmarks and for bench: unfinished payments whose leases expired
// long ago, as a crashed gateway leaves them.
package reconciletest

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jmoiron/sqlx"

	"gateway/idemkeys"
	"gateway/merchants"
	"gateway/mysql"
	"gateway/payments"
	"gateway/psp"
)

// seedChunk is the number of rows per multi-row INSERT: large enough to make
// seeding 10,000 rows take well under a second, small enough for any
// max_allowed_packet.
const seedChunk = 500

// SeedStale creates a merchant and writes n unfinished keys for it, each with
// its processing payment sent to adapter, whose leases (and last chargeable
// lease) ended `ago` before the database's clock. Every other key (the even
// ones) is charged at the adapter first, so a reconciler settles half of
// them succeeded; the other half carry a first authoritative "not found" of
// `ago` too, so that once the PSP's creation window is over one pass fails
// them. Rows are written with multi-row INSERTs straight into the tables,
// mirroring what the payment flow stores at claim time. It returns the
// merchant that owns the rows.
func SeedStale(ctx context.Context, dbx *sqlx.DB, adapter psp.Adapter, n int, ago time.Duration) (merchants.Merchant, error) {
	var now time.Time
	if err := dbx.GetContext(ctx, &now, `SELECT NOW(6)`); err != nil {
		return merchants.Merchant{}, fmt.Errorf("reconciletest: %w", err)
	}
	at := now.Add(-ago)
	name := payments.PSPName(adapter.Capabilities())
	merchant, key, err := merchants.NewMerchant("Reconcile seed", at)
	if err != nil {
		return merchants.Merchant{}, err
	}
	if err := mysql.NewStore(dbx).CreateMerchant(ctx, merchant, key); err != nil {
		return merchants.Merchant{}, fmt.Errorf("reconciletest: create merchant: %w", err)
	}
	for lo := 0; lo < n; lo += seedChunk {
		hi := min(lo+seedChunk, n)
		var pv, kv []string
		var pargs, kargs []any
		for i := lo; i < hi; i++ {
			k := fmt.Sprintf("stale-%06d", i)
			id := fmt.Sprintf("pay_stale%06d", i)
			order := payments.MerchantOrderID(merchant.ID, k)
			pv = append(pv, "(?, ?, ?, ?, 'processing', 1000, 'USD', 'pm_card_ok', '', '{}', ?, ?, ?)")
			pargs = append(pargs, merchant.ID, id, k, order, name, at, at)
			fp := idemkeys.Fingerprint(k)
			kv = append(kv, "(?, ?, ?, ?, 'IN_PROGRESS', ?, ?, ?, ?, ?, ?, ?, ?)")
			kargs = append(kargs, merchant.ID, payments.EndpointCreatePayment, k, fp[:], id, int64(idemkeys.FirstToken()), at, at, at, at, at, at)
			if i%2 == 0 {
				if _, err := adapter.Charge(ctx, psp.ChargeRequest{MerchantOrderID: order, Amount: 1000, Currency: "USD", PaymentMethod: "pm_card_ok"}); err != nil {
					return merchants.Merchant{}, fmt.Errorf("reconciletest: charge %s: %w", order, err)
				}
			}
		}
		if _, err := dbx.ExecContext(ctx, `INSERT INTO payments (merchant_id, id, idem_key, merchant_order_id, status, amount, currency,
			payment_method, description, metadata, psp, created_at, updated_at) VALUES `+strings.Join(pv, ","), pargs...); err != nil {
			return merchants.Merchant{}, fmt.Errorf("reconciletest: insert payments: %w", err)
		}
		if _, err := dbx.ExecContext(ctx, `INSERT INTO idempotency_keys (merchant_id, endpoint, idem_key, fingerprint, state, subject_id,
			lease_version, locked_until, may_send_until, reconcile_after, not_found_at, created_at, updated_at) VALUES `+strings.Join(kv, ","), kargs...); err != nil {
			return merchants.Merchant{}, fmt.Errorf("reconciletest: insert keys: %w", err)
		}
	}
	return merchant, nil
}
