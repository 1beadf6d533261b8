package api

import (
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"golang.org/x/time/rate"

	"gateway/errs"
)

// Failed authentications are limited per client address: each costs the
// guesser nothing and the gateway a database read (a well-formed key with
// an unknown prefix), so past a burst an address that keeps failing is
// answered 429 with Retry-After before its key is even looked at. A
// browser's failures count too: a client secret that is not the payment's,
// an origin its merchant does not allow, a preflight from an origin nobody
// allows. Only failures count: an address whose requests authenticate is
// never slowed by this. A good merchant behind the same address as a
// guesser (one NAT) shares its fate; behind a load balancer, name it in
// TrustedProxies so that the client's own address is the one counted.

// Defaults of the failed-authentication limit.
const (
	// DefaultAuthFailureRate is how many failed authentications per second
	// an address is allowed in the long run.
	DefaultAuthFailureRate = 1.0
	// DefaultAuthFailureBurst is how many it may fail at once.
	DefaultAuthFailureBurst = 20
)

// authFailuresMax bounds the addresses remembered; when full the memory is
// emptied (it only ever forgets failures).
const authFailuresMax = 100_000

// authFailures keeps a token bucket of failures per client address.
type authFailures struct {
	rate   rate.Limit
	burst  int
	mu     sync.Mutex
	byAddr map[string]*rate.Limiter
}

func newAuthFailures(perSecond float64, burst int) *authFailures {
	if perSecond <= 0 {
		return nil
	}
	return &authFailures{rate: rate.Limit(perSecond), burst: max(burst, 1), byAddr: map[string]*rate.Limiter{}}
}

// blocked says whether addr has used up its failures, and when it may try again.
func (f *authFailures) blocked(addr string, now time.Time) (bool, time.Duration) {
	if f == nil {
		return false, 0
	}
	f.mu.Lock()
	lim, ok := f.byAddr[addr]
	f.mu.Unlock()
	if !ok {
		return false, 0
	}
	tokens := lim.TokensAt(now)
	if tokens >= 1 {
		return false, 0
	}
	return true, time.Duration((1 - tokens) / float64(f.rate) * float64(time.Second))
}

// failed counts one failed authentication of addr.
func (f *authFailures) failed(addr string, now time.Time) {
	if f == nil {
		return
	}
	f.mu.Lock()
	lim, ok := f.byAddr[addr]
	if !ok {
		if len(f.byAddr) >= authFailuresMax {
			clear(f.byAddr)
		}
		lim = rate.NewLimiter(f.rate, f.burst)
		f.byAddr[addr] = lim
	}
	f.mu.Unlock()
	lim.AllowN(now, 1)
}

// clientAddr names the request's client for the failure limit: its IP
// address (the one the trusted proxies saw), an IPv6 one by its /64, which
// one subscriber usually holds whole.
func clientAddr(c echo.Context) string {
	ip, err := netip.ParseAddr(c.RealIP())
	if err != nil {
		return c.RealIP()
	}
	ip = ip.Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}

// ipExtractor finds the client's address: the peer's, or when the peer is
// a trusted proxy, the nearest untrusted address in X-Forwarded-For.
func ipExtractor(trusted []*net.IPNet) echo.IPExtractor {
	if len(trusted) == 0 {
		return echo.ExtractIPDirect()
	}
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, n := range trusted {
		opts = append(opts, echo.TrustIPRange(n))
	}
	return echo.ExtractIPFromXFFHeader(opts...)
}

// checkAuthFailures refuses a request from an address that failed too often.
func (s *Server) checkAuthFailures(c echo.Context) error {
	if s.authFails == nil {
		return nil
	}
	if blocked, wait := s.authFails.blocked(clientAddr(c), s.opts.Now()); blocked {
		s.obs.RateLimited()
		return &errs.Error{Code: codeRateLimited, RetryAfter: wait,
			Message: "too many failed authentications from this address; retry after the Retry-After delay with a valid key"}
	}
	return nil
}

// countAuthFailure counts err against the request's address when it is a refused credential.
func (s *Server) countAuthFailure(c echo.Context, err error) error {
	if errs.CodeOf(err) == errs.CodeUnauthorized {
		s.countFailure(c)
	}
	return err
}

// countFailure counts one failure against the request's address.
func (s *Server) countFailure(c echo.Context) {
	if s.authFails != nil {
		s.authFails.failed(clientAddr(c), s.opts.Now())
	}
}
