package reconcile_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"gateway/db/dbtest"
	"gateway/idemkeys"
	"gateway/payments"
	"gateway/payments/store"
	"gateway/psp"
	"gateway/psp/mock"
	"gateway/reconcile"
)

// BenchmarkReconcile measures rows settled per second by one pass over
// 10,000 stale rows (half of them charged at the PSP) with a 20 ms PSP
// lookup, for one reconciler and for three running at once. Run it with:
//
//	go run ./cmd/withdb -- go test ./reconcile -run '^$' -bench Reconcile -benchtime 1x
func BenchmarkReconcile(b *testing.B) {
	for _, replicas := range []int{1, 3} {
		b.Run(fmt.Sprintf("reconcilers=%d", replicas), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				const rows = 10_000
				dbx := dbtest.MustOpen(b)
				st := store.New(dbx)
				m := mock.New(mock.WithCreationWindow(time.Minute))
				now := time.Now().UTC().Truncate(time.Microsecond)
				seedStale(b, st, m, rows, now.Add(-time.Hour))
				m.SetLatency(20 * time.Millisecond)
				var wg sync.WaitGroup
				settled := make([]int, replicas)
				b.StartTimer()
				start := time.Now()
				for i := range replicas {
					r := reconcile.New(st, m, reconcile.Config{Lease: time.Minute, PSPTimeout: 5 * time.Second})
					wg.Add(1)
					go func() {
						defer wg.Done()
						sum, err := r.RunOnce(context.Background())
						if err != nil {
							b.Error(err)
						}
						settled[i] = sum.Counts[reconcile.Succeeded] + sum.Counts[reconcile.Failed]
					}()
				}
				wg.Wait()
				elapsed := time.Since(start)
				b.StopTimer()
				total := 0
				for _, n := range settled {
					total += n
				}
				if total != rows {
					b.Fatalf("settled %d of %d rows", total, rows)
				}
				b.ReportMetric(float64(total)/elapsed.Seconds(), "rows/s")
				b.ReportMetric(float64(total)/elapsed.Seconds()/(16/0.020*float64(replicas)), "x_lookup_bound")
			}
		})
	}
}

// seedStale writes n unfinished keys whose leases expired at `at`, with
// multi-row INSERTs, and charges every other one at the PSP.
func seedStale(b *testing.B, st *store.Store, m *mock.PSP, n int, at time.Time) {
	b.Helper()
	dbx := st.DB()
	merchant, key, err := payments.NewMerchant("Bench", at)
	if err != nil {
		b.Fatal(err)
	}
	if err := st.CreateMerchant(context.Background(), merchant, key); err != nil {
		b.Fatal(err)
	}
	const chunk = 500
	for lo := 0; lo < n; lo += chunk {
		hi := min(lo+chunk, n)
		var pv, kv []string
		var pargs, kargs []any
		for i := lo; i < hi; i++ {
			k := fmt.Sprintf("bench-%06d", i)
			id := fmt.Sprintf("pay_bench%06d", i)
			order := payments.MerchantOrderID(merchant.ID, k)
			pv = append(pv, "(?, ?, ?, ?, 'processing', 1000, 'USD', 'pm_card_ok', '', '{}', ?, ?)")
			pargs = append(pargs, merchant.ID, id, k, order, at, at)
			fp := idemkeys.Fingerprint(k)
			kv = append(kv, "(?, ?, ?, ?, 'IN_PROGRESS', ?, 1, ?, ?, ?, ?, ?)")
			kargs = append(kargs, merchant.ID, payments.EndpointCreatePayment, k, fp[:], id, at, at, at, at, at)
			if i%2 == 0 {
				if _, err := m.Charge(context.Background(), psp.ChargeRequest{MerchantOrderID: order, Amount: 1000, Currency: "USD", PaymentMethod: mock.MethodOK}); err != nil {
					b.Fatal(err)
				}
			}
		}
		if _, err := dbx.Exec(`INSERT INTO payments (merchant_id, id, idem_key, merchant_order_id, status, amount, currency,
			payment_method, description, metadata, created_at, updated_at) VALUES `+strings.Join(pv, ","), pargs...); err != nil {
			b.Fatal(err)
		}
		if _, err := dbx.Exec(`INSERT INTO idempotency_keys (merchant_id, endpoint, idem_key, fingerprint, state, payment_id,
			lease_version, locked_until, may_charge_until, reconcile_after, created_at, updated_at) VALUES `+strings.Join(kv, ","), kargs...); err != nil {
			b.Fatal(err)
		}
	}
}
