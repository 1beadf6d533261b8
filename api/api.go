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
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"gateway/errs"
	"gateway/idemkeys"
	"gateway/merchants"
	"gateway/payments"
)

// Pinger reports whether the gateway can serve from its database; /readyz
// uses it. A *errs.Error is answered as it is (a schema this release
// cannot use, say); any other error means the database does not answer.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Authenticator resolves an API key to its merchant; merchants.Auth is one.
type Authenticator interface {
	// Authenticate returns the merchant owning an active key, or an *errs.Error
	// with CodeUnauthorized (or CodeUnavailable when it cannot tell).
	Authenticate(ctx context.Context, apiKey string) (merchants.Merchant, error)
}

// cachedAuthenticator answers keys verified lately from memory, without a
// deadline set up for a database read that does not happen.
type cachedAuthenticator interface {
	Cached(apiKey string) (merchants.Merchant, bool)
}

// Observer is told about HTTP traffic, for metrics.
type Observer interface {
	ObserveHTTP(route, method string, status int, d time.Duration)
	// PreinitHTTP creates a series at zero.
	PreinitHTTP(route, method string, status int)
	MissingKey()
	RateLimited()
}

type noObserver struct{}

func (noObserver) ObserveHTTP(string, string, int, time.Duration) {}
func (noObserver) PreinitHTTP(string, string, int)                {}
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
	// BrowserLimits shape the budget of browser requests, per payment and
	// per client address (browser.go); zero fields take the defaults.
	BrowserLimits BrowserLimits
	// NoticeRate and NoticeBurst shape each client address's bucket of PSP
	// notifications (pspwebhooks.go); zero takes the defaults.
	NoticeRate  float64
	NoticeBurst int
	// TrustedProxies are the load balancers and proxies in front: from
	// them, the client's address is read from X-Forwarded-For.
	TrustedProxies []*net.IPNet
	// Listings answers GET /payments, GET /refunds, a payment's refunds and GET /events.
	Listings Lister
	// Observer counts the traffic; the metrics are served elsewhere (an
	// admin listener), never by this handler.
	Observer Observer
	// Logger receives the access log (one line per request) and the
	// failures of requests.
	Logger *slog.Logger
	// Hasher names merchants in the access log; a random key when nil.
	Hasher *idemkeys.Hasher
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
	// Webhooks manages merchants' webhook endpoints (/webhook_endpoints);
	// nil answers them 404.
	Webhooks WebhookEndpoints
	// Deliveries answers the webhook delivery log and redeliveries
	// (/webhook_endpoints/{id}/deliveries, /events/{id}/deliveries,
	// /events/{id}/redeliver); nil answers them 404.
	Deliveries DeliveryLog
}

// Server holds what the handlers need.
type Server struct {
	svc    *payments.Service
	auth   Authenticator
	db     Pinger
	opts   Options
	log    *slog.Logger
	obs    Observer
	limits *limiters
	// authFails counts failed authentications per client address.
	authFails *authFailures
	// browser is the budget of browser requests.
	browser browserBudget
	// notices limits PSP notifications per client address.
	notices        *limiters
	noticeRefusals noticeRefusals
	hash           *idemkeys.Hasher
	// routes are the templates of the routes served, the only values of
	// the route label besides "other".
	routeSet map[string]bool
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
	if opts.Hasher == nil {
		opts.Hasher = idemkeys.NewHasher(nil)
	}
	if opts.NoticeRate <= 0 {
		opts.NoticeRate = DefaultNoticeRate
	}
	if opts.NoticeBurst <= 0 {
		opts.NoticeBurst = DefaultNoticeBurst
	}
	s := &Server{svc: svc, auth: auth, db: db, opts: opts, log: opts.Logger, obs: opts.Observer,
		limits: newLimiters(opts.RatePerSecond, max(opts.RateBurst, 1)), hash: opts.Hasher, routeSet: map[string]bool{},
		authFails: newAuthFailures(opts.AuthFailureRate, opts.AuthFailureBurst),
		browser:   newBrowserBudget(opts.BrowserLimits), notices: newLimiters(opts.NoticeRate, opts.NoticeBurst)}
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = s.handleError
	e.JSONSerializer = jsonSerializer{}
	e.IPExtractor = ipExtractor(opts.TrustedProxies)
	e.Use(withRequestID)
	e.Use(announceVersion)
	e.Use(s.observe)
	e.Use(s.recoverer)
	s.routes(e)
	var served []*echo.Route
	for _, r := range e.Routes() {
		if methodLabel(r.Method) != labelOther {
			s.routeSet[r.Path] = true
			served = append(served, r)
		}
	}
	s.preinitHTTP(served)
	return e
}

// recoverer turns a panic in a handler into a logged 500 problem.
func (s *Server) recoverer(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if r := recover(); r != nil {
				s.log.ErrorContext(c.Request().Context(), "panic in handler", "panic", r, "route", s.routeLabel(c))
				err = &errs.Error{Code: errs.CodeInternal, Message: "internal error"}
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

// observe counts, times and logs every request. Every label comes from a
// fixed set, whatever the client sends: the route is the template of a
// route served (never the raw path), anything else is "other", and so is a
// method outside the standard ones; the status is one the server wrote.
func (s *Server) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		note := &accessNote{}
		c.SetRequest(c.Request().WithContext(context.WithValue(c.Request().Context(), accessNoteKey{}, note)))
		err := next(c)
		if err != nil {
			c.Error(err) // write the problem now, so its status is what is counted
		}
		d := time.Since(start)
		route, method, status := s.routeLabel(c), methodLabel(c.Request().Method), c.Response().Status
		s.obs.ObserveHTTP(route, method, status, d)
		s.accessLog(c, note, route, method, status, d)
		return nil
	}
}

// labelOther stands for every route and method outside the fixed sets.
const labelOther = "other"

// standardMethods are the methods that keep their own label.
var standardMethods = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
	http.MethodPatch, http.MethodDelete, http.MethodOptions}

func methodLabel(m string) string {
	for _, sm := range standardMethods {
		if m == sm {
			return sm
		}
	}
	return labelOther
}

func (s *Server) routeLabel(c echo.Context) string {
	if p := c.Path(); s.routeSet[p] {
		return p
	}
	return labelOther
}

// preinitHTTP creates the 5xx series the alerts count, at zero, so that
// rate() and increase() see a route's first failure.
func (s *Server) preinitHTTP(served []*echo.Route) {
	for _, r := range served {
		for _, status := range []int{http.StatusInternalServerError, http.StatusBadGateway, http.StatusServiceUnavailable} {
			s.obs.PreinitHTTP(r.Path, r.Method, status)
		}
	}
}

// accessNote collects what the handlers learn about a request for its
// access log line: the payment once known, and the problem of an error
// answer. The merchant is the one authentication set.
type accessNote struct {
	paymentID string
	problem   string // the problem type's slug of an error answer
	// quiet leaves the request out of the access log: one of a flood,
	// logged in bulk by whoever refused it.
	quiet bool
}

type accessNoteKey struct{}

// noteOf returns the request's access note (a throwaway one outside observe).
func noteOf(c echo.Context) *accessNote {
	if n, ok := c.Request().Context().Value(accessNoteKey{}).(*accessNote); ok {
		return n
	}
	return &accessNote{}
}

// accessLog writes the request's line: INFO below 500, WARN for a 5xx (the
// cause of an internal error has its own ERROR line), so that the 5xx stand
// out. The merchant is hashed; the path's own text is never logged, only its
// route template and a payment id that looks like one.
func (s *Server) accessLog(c echo.Context, note *accessNote, route, method string, status int, d time.Duration) {
	if note.quiet {
		return
	}
	level := slog.LevelInfo
	if status >= 500 {
		level = slog.LevelWarn
	}
	ctx := c.Request().Context()
	if !s.log.Enabled(ctx, level) {
		return
	}
	attrs := make([]slog.Attr, 0, 7)
	attrs = append(attrs, slog.String("method", method), slog.String("route", route), slog.Int("status", status),
		slog.Float64("duration_seconds", d.Seconds()))
	if merchant := merchantOf(c).ID; merchant != "" {
		attrs = append(attrs, s.hash.MerchantAttr(merchant))
	}
	payment := note.paymentID
	if payment == "" && strings.HasPrefix(route, "/payments/:id") {
		payment = c.Param("id")
	}
	if strings.HasPrefix(payment, "pay_") && plainID(payment) {
		attrs = append(attrs, slog.String("payment_id", payment))
	}
	if note.problem != "" {
		attrs = append(attrs, slog.String("problem", note.problem))
	}
	if c.Response().Header().Get("Idempotent-Replayed") == "true" {
		attrs = append(attrs, slog.Bool("replayed", true))
	}
	s.log.LogAttrs(ctx, level, "request", attrs...)
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
