package api

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// limiters keeps one token bucket per key: a merchant, a payment, a client
// address. It lives in each replica: with N replicas a key may get up to N
// times the rate, which the load balancer's spread makes rare; the limits
// protect the gateway and its database from one client, not a billing quota.
type limiters struct {
	rate  rate.Limit
	burst int
	mu    sync.Mutex
	byID  map[string]*rate.Limiter
}

// limitersMax bounds the keys remembered. When full, the buckets that are
// full again (idle keys, which a new bucket would equal) are forgotten, and
// only when none is, everything: a key that floods keeps its empty bucket.
const limitersMax = 100_000

func newLimiters(perSecond float64, burst int) *limiters {
	if perSecond <= 0 {
		return nil
	}
	return &limiters{rate: rate.Limit(perSecond), burst: max(burst, 1), byID: map[string]*rate.Limiter{}}
}

// allow takes a token for key, or says how long until one is available.
func (l *limiters) allow(key string, now time.Time) (ok bool, retryAfter time.Duration) {
	if l == nil {
		return true, 0
	}
	l.mu.Lock()
	lim, found := l.byID[key]
	if !found {
		if len(l.byID) >= limitersMax {
			l.prune(now)
		}
		lim = rate.NewLimiter(l.rate, l.burst)
		l.byID[key] = lim
	}
	l.mu.Unlock()
	r := lim.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now) // refused requests do not consume the bucket
		return false, d
	}
	return true, 0
}

// prune forgets the buckets that are full again; l.mu is held.
func (l *limiters) prune(now time.Time) {
	for k, lim := range l.byID {
		if lim.TokensAt(now) >= float64(l.burst) {
			delete(l.byID, k)
		}
	}
	if len(l.byID) >= limitersMax {
		clear(l.byID)
	}
}
