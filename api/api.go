// Package api is the HTTP face of the gateway: routes, authentication,
// request decoding, and the one table that maps error codes to HTTP statuses
// and RFC 9457 problem types. It is the only package that imports echo.
package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"gateway/payments"
)

// Pinger reports whether the gateway can serve from its database; /readyz
// uses it. A *payments.Error is answered as it is (a schema this release
// cannot use, say); any other error means the database does not answer.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Authenticator resolves an API key to its merchant; payments.Auth is one.
type Authenticator interface {
	// Authenticate returns the merchant owning an active key, or an *payments.Error
	// with CodeUnauthorized (or CodeUnavailable when it cannot tell).
	Authenticate(ctx context.Context, apiKey string) (payments.Merchant, error)
}

// Observer is told about HTTP traffic, for metrics.
type Observer interface {
	ObserveHTTP(route, method string, status int, d time.Duration)
	MissingKey()
	RateLimited()
}

type noObserver struct{}

func (noObserver) ObserveHTTP(string, string, int, time.Duration) {}
func (noObserver) MissingKey()                                    {}
func (noObserver) RateLimited()                                   {}

// Options configure the handler.
type Options struct {
	// MaxBodyBytes bounds a request body; larger bodies get 413.
	MaxBodyBytes int64
	// RatePerSecond and RateBurst shape each merchant's token bucket; a rate
	// of 0 turns rate limiting off.
	RatePerSecond float64
	RateBurst     int
	// AuthFailureRate and AuthFailureBurst shape each client address's
	// bucket of failed authentications (authlimit.go); a rate of 0 turns
	// the limit off.
	AuthFailureRate  float64
	AuthFailureBurst int
	// TrustedProxies are the load balancers and proxies in front: from
	// them, the client's address is read from X-Forwarded-For.
	TrustedProxies []*net.IPNet
	// Listings answers GET /payments, GET /refunds and a payment's refunds.
	Listings Lister
	// Metrics, when set, is served at GET /metrics.
	Metrics  http.Handler
	Observer Observer
	Logger   *slog.Logger
	// Now is the rate limiter's clock; time.Now when nil.
	Now func() time.Time
	// FlowTimeout bounds a create request once claimed, whatever its client
	// does: database calls may not hang forever. One minute when zero; set it
	// above the lease plus the in-flight wait.
	FlowTimeout time.Duration
	// LookupTimeout bounds the database reads outside the payment flow:
	// authentication, lookups and listings (DefaultLookupTimeout when
	// zero). The flow keeps its own deadlines.
	LookupTimeout time.Duration
	// Notices receives the PSPs' notifications (POST /psp/{psp}/webhook);
	// nil answers them 404.
	Notices NoticeReceiver
	// Browser authenticates publishable keys and judges browser origins
	// (browser.go); nil refuses publishable keys and every CORS preflight.
	Browser BrowserAuthenticator
}

// Server holds what the handlers need.
type Server struct {
	svc       *payments.Service
	auth      Authenticator
	db        Pinger
	opts      Options
	log       *slog.Logger
	obs       Observer
	limits    *limiters
	authFails *authFailures
}

// NewHandler returns the gateway's HTTP API.
func NewHandler(svc *payments.Service, auth Authenticator, db Pinger, opts Options) http.Handler {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 64 << 10
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Observer == nil {
		opts.Observer = noObserver{}
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.FlowTimeout <= 0 {
		opts.FlowTimeout = time.Minute
	}
	if opts.LookupTimeout <= 0 {
		opts.LookupTimeout = DefaultLookupTimeout
	}
	s := &Server{svc: svc, auth: auth, db: db, opts: opts, log: opts.Logger, obs: opts.Observer,
		limits: newLimiters(opts.RatePerSecond, max(opts.RateBurst, 1)), authFails: newAuthFailures(opts.AuthFailureRate, opts.AuthFailureBurst)}
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = s.handleError
	e.JSONSerializer = jsonSerializer{}
	e.IPExtractor = ipExtractor(opts.TrustedProxies)
	e.Use(withRequestID)
	e.Use(s.observe)
	e.Use(s.recoverer)
	s.routes(e)
	return e
}

// recoverer turns a panic in a handler into a logged 500 problem.
func (s *Server) recoverer(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if r := recover(); r != nil {
				s.log.ErrorContext(c.Request().Context(), "panic in handler", "panic", r, "path", c.Path())
				err = &payments.Error{Code: payments.CodeInternal, Message: "internal error"}
			}
		}()
		return next(c)
	}
}

// withRequestID tags every request with an id, echoed in X-Request-Id, in
// problem bodies and, through the request's context, in every log line. A
// client's own id is kept only when it is short and plain, since it ends up
// in logs.
func withRequestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		id := c.Request().Header.Get(echo.HeaderXRequestID)
		if !plainID(id) {
			var b [12]byte
			_, _ = rand.Read(b[:])
			id = "req_" + hex.EncodeToString(b[:])
		}
		c.Response().Header().Set(echo.HeaderXRequestID, id)
		c.SetRequest(c.Request().WithContext(context.WithValue(c.Request().Context(), requestIDKey{}, id)))
		return next(c)
	}
}

// observe counts and times every request by route (the pattern, never the raw
// path, so ids do not explode the label set).
func (s *Server) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		if err != nil {
			c.Error(err) // write the problem now, so its status is what is counted
		}
		route := c.Path()
		if route == "" {
			route = "unmatched"
		}
		s.obs.ObserveHTTP(route, c.Request().Method, c.Response().Status, time.Since(start))
		return nil
	}
}

type requestIDKey struct{}

// RequestID returns the request id carried by ctx, or "".
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// LogHandler wraps h so that every record logged with a request's context
// carries its request_id.
func LogHandler(h slog.Handler) slog.Handler { return requestIDHandler{h} }

type requestIDHandler struct{ slog.Handler }

func (h requestIDHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := RequestID(ctx); id != "" {
		r.AddAttrs(slog.String("request_id", id))
	}
	return h.Handler.Handle(ctx, r)
}

func (h requestIDHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return requestIDHandler{h.Handler.WithAttrs(as)}
}

func (h requestIDHandler) WithGroup(name string) slog.Handler {
	return requestIDHandler{h.Handler.WithGroup(name)}
}

func plainID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

func requestID(c echo.Context) string {
	return c.Response().Header().Get(echo.HeaderXRequestID)
}

// readyTimeout bounds the database ping of /readyz.
const readyTimeout = 2 * time.Second

// DefaultLookupTimeout bounds the database reads of authentication, lookups
// and listings: a stalled database answers 503, it does not hold the
// request (and its connection) for the driver's read timeout.
const DefaultLookupTimeout = 5 * time.Second

// lookupCtx bounds a request's database reads outside the payment flow.
func (s *Server) lookupCtx(c echo.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.Request().Context(), s.opts.LookupTimeout)
}

// bounded runs a read-only request under the lookup deadline.
func (s *Server) bounded(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		ctx, cancel := s.lookupCtx(c)
		defer cancel()
		c.SetRequest(c.Request().WithContext(ctx))
		return next(c)
	}
}
