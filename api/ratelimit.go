package api

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// limiters keeps one token bucket per merchant. It lives in each replica:
// with N replicas a merchant may get up to N times the rate, which the
// load balancer's spread makes rare; the limit protects the gateway and its
// database from one client, not a billing quota.
type limiters struct {
	rate  rate.Limit
	burst int
	mu    sync.Mutex
	byID  map[string]*rate.Limiter
}

func newLimiters(perSecond float64, burst int) *limiters {
	if perSecond <= 0 {
		return nil
	}
	return &limiters{rate: rate.Limit(perSecond), burst: burst, byID: map[string]*rate.Limiter{}}
}

// allow takes a token for merchantID, or says how long until one is available.
func (l *limiters) allow(merchantID string, now time.Time) (ok bool, retryAfter time.Duration) {
	if l == nil {
		return true, 0
	}
	l.mu.Lock()
	lim, found := l.byID[merchantID]
	if !found {
		lim = rate.NewLimiter(l.rate, l.burst)
		l.byID[merchantID] = lim
	}
	l.mu.Unlock()
	r := lim.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now) // refused requests do not consume the bucket
		return false, d
	}
	return true, 0
}
