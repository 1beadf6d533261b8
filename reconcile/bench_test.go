package reconcile_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"gateway/mysql"
	"gateway/mysql/mysqltest"
	"gateway/payments"
	"gateway/psp/fake"
	"gateway/reconcile"
	"gateway/reconcile/reconciletest"
)

// BenchmarkReconcile measures rows settled per second by one pass over
// 10,000 stale rows (half of them charged at the PSP) with a 20 ms PSP
// lookup, for one reconciler and for three running at once. Run it with:
//
//	go run ./tests/withdb -- go test ./reconcile -run '^$' -bench Reconcile -benchtime 1x
func BenchmarkReconcile(b *testing.B) {
	for _, replicas := range []int{1, 3} {
		b.Run(fmt.Sprintf("reconcilers=%d", replicas), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				const rows = 10_000
				dbx := mysqltest.MustOpen(b)
				st := mysql.NewStore(dbx)
				m := fake.New(fake.WithCreationWindow(time.Minute))
				if _, err := reconciletest.SeedStale(context.Background(), dbx, m, rows, time.Hour); err != nil {
					b.Fatal(err)
				}
				m.SetLatency(20 * time.Millisecond)
				var wg sync.WaitGroup
				settled := make([]int, replicas)
				b.StartTimer()
				start := time.Now()
				for i := range replicas {
					r := reconcile.New(st, payments.OnePSP(m), reconcile.Config{Lease: time.Minute, PSPTimeout: 5 * time.Second})
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
