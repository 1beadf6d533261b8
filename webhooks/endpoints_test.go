package webhooks_test

import (
	"fmt"
	"sync"
	"testing"

	"gateway/errs"
	"gateway/webhooks"
)

// The endpoint limit is the database's to keep: 40 creates racing for one
// merchant leave at most MaxEndpointsPerMerchant endpoints, and every
// other create is refused as a conflict, never stored.
func TestEndpointLimitHoldsUnderConcurrentCreates(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const racers = 40
	var (
		start   = make(chan struct{})
		wg      sync.WaitGroup
		mu      sync.Mutex
		created int
		refused int
		other   []error
	)
	for i := range racers {
		wg.Go(func() {
			<-start
			_, _, err := e.eps.Create(e.ctx, webhooks.EndpointRequest{MerchantID: e.merchant,
				URL: fmt.Sprintf("http://127.0.0.1:9/hooks/%d", i), EventTypes: []string{"*"}})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				created++
			case errs.CodeOf(err) == errs.CodeConflict:
				refused++
			default:
				other = append(other, err)
			}
		})
	}
	close(start)
	wg.Wait()
	if len(other) > 0 {
		t.Fatalf("creates failed otherwise than by the limit: %v", other)
	}
	n := e.count(`SELECT COUNT(*) FROM webhook_endpoints WHERE merchant_id = ?`, e.merchant)
	if n > webhooks.MaxEndpointsPerMerchant {
		t.Fatalf("%d endpoints stored for one merchant, limit %d", n, webhooks.MaxEndpointsPerMerchant)
	}
	if n != webhooks.MaxEndpointsPerMerchant || created != n || refused != racers-n {
		t.Fatalf("%d stored, %d answered created, %d refused; want %d, %d, %d", n, created, refused,
			webhooks.MaxEndpointsPerMerchant, webhooks.MaxEndpointsPerMerchant, racers-webhooks.MaxEndpointsPerMerchant)
	}
	// Another merchant's endpoints are counted apart.
	e.merchant = e.newMerchant()
	e.endpoint("http://127.0.0.1:9/other")
}
