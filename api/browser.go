package api

import (
	"context"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"gateway/errs"
	"gateway/merchants"
	"gateway/payments"
)

// Browser checkout over HTTP. A customer's browser reads and confirms one
// payment with the merchant's publishable key (Authorization: Bearer pk_…)
// and the payment's client secret (Client-Secret), from an origin the
// merchant allows; a publishable key can do nothing else. CORS: a preflight
// of those two paths is answered for origins some merchant allows (it
// carries no key, so no merchant), and every answer to a request from such
// an origin carries Access-Control-Allow-Origin, refusals included, so that
// the page can read why; the request itself is then judged against its own
// merchant's origins. Everything else is refused, and a secret key sent by
// a browser (with an Origin) is refused everywhere.
//
// Browser requests have a budget of their own (BrowserLimits), apart from
// every merchant's bucket: a page looping on its payment is limited, and
// the merchant's server never waits for it. Anonymous failures cost no
// database read: the allowed origins are held in memory, a client secret
// that does not name the path's payment is refused before the payment is
// read, and both count, as failed authentications do, against the client
// address (authlimit.go).

// BrowserAuthenticator resolves publishable keys and judges browser
// origins; merchants.BrowserAuth is one.
type BrowserAuthenticator interface {
	// AuthenticatePublishable returns the merchant owning an active
	// publishable key and the origins it allows, or an *errs.Error with
	// CodeUnauthorized (or CodeUnavailable when it cannot tell).
	AuthenticatePublishable(ctx context.Context, key string) (merchants.Merchant, []string, error)
	// OriginAllowed reports whether any merchant allows origin.
	OriginAllowed(ctx context.Context, origin string) (bool, error)
}

// HeaderClientSecret carries a payment's client secret with a publishable key.
const HeaderClientSecret = "Client-Secret"

// The HTTP layer's own refusals of browser requests.
const (
	// codeForbidden: the credentials cannot do this (a publishable key
	// anywhere but its two routes; a secret key sent by a browser).
	codeForbidden errs.Code = "forbidden"
	// codeOriginNotAllowed: the request's Origin is not one its merchant
	// allows (or, for a preflight, one any merchant allows).
	codeOriginNotAllowed errs.Code = "origin_not_allowed"
)

// corsAllowHeaders are the request headers a browser may send; every one
// the client needs. corsExposeHeaders are the answer's headers it may read.
var (
	corsAllowHeaders  = []string{echo.HeaderAuthorization, echo.HeaderContentType, "Idempotency-Key", HeaderClientSecret, echo.HeaderXRequestID}
	corsExposeHeaders = strings.Join([]string{"Retry-After", "Idempotent-Replayed", echo.HeaderXRequestID, echo.HeaderLocation}, ", ")
)

// corsMaxAge is how long a browser may reuse a preflight's answer.
const corsMaxAge = "600"

// BrowserLimits shape the budget of requests made with a publishable key:
// a token bucket per payment (a checkout page polls one payment) and one
// per client address (one client with many payments), in each replica. No
// merchant's bucket is touched: a shopper cannot make its merchant's server
// wait. Zero fields take the defaults.
type BrowserLimits struct {
	PaymentRate  float64
	PaymentBurst int
	AddressRate  float64
	AddressBurst int
}

// Defaults of the browser budget.
const (
	// DefaultBrowserPaymentRate is how many browser requests per second one
	// payment may have in the long run: the client polls once a second.
	DefaultBrowserPaymentRate = 2.0
	// DefaultBrowserPaymentBurst is how many it may have at once.
	DefaultBrowserPaymentBurst = 20
	// DefaultBrowserAddressRate is how many browser requests per second one
	// client address may send in the long run, whatever the payments (many
	// shoppers may share an address behind a NAT).
	DefaultBrowserAddressRate = 20.0
	// DefaultBrowserAddressBurst is how many it may send at once.
	DefaultBrowserAddressBurst = 100
)

// withDefaults fills in the zero fields.
func (l BrowserLimits) withDefaults() BrowserLimits {
	if l.PaymentRate <= 0 {
		l.PaymentRate = DefaultBrowserPaymentRate
	}
	if l.PaymentBurst <= 0 {
		l.PaymentBurst = DefaultBrowserPaymentBurst
	}
	if l.AddressRate <= 0 {
		l.AddressRate = DefaultBrowserAddressRate
	}
	if l.AddressBurst <= 0 {
		l.AddressBurst = DefaultBrowserAddressBurst
	}
	return l
}

// browserBudget is the buckets of browser requests.
type browserBudget struct {
	payments, addrs *limiters
}

func newBrowserBudget(l BrowserLimits) browserBudget {
	l = l.withDefaults()
	return browserBudget{payments: newLimiters(l.PaymentRate, l.PaymentBurst), addrs: newLimiters(l.AddressRate, l.AddressBurst)}
}

// takeBrowser takes a token from bucket for key, or refuses the request 429.
func (s *Server) takeBrowser(bucket *limiters, key, what string) error {
	if ok, wait := bucket.allow(key, s.opts.Now()); !ok {
		s.obs.RateLimited()
		return &errs.Error{Code: codeRateLimited, RetryAfter: wait,
			Message: "too many browser requests " + what + "; retry after the Retry-After delay"}
	}
	return nil
}

// bearerKey is the request's bearer credential, "" when there is none.
func bearerKey(c echo.Context) string {
	scheme, key, ok := strings.Cut(c.Request().Header.Get(echo.HeaderAuthorization), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(key)
}

// refusePublishable refuses, on a route that takes secret keys only and
// before anything is read, a publishable key, and any request from a
// browser (an Origin): a secret key must never reach one, and one that did
// is refused at once rather than working until it is abused.
func (s *Server) refusePublishable(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if strings.HasPrefix(bearerKey(c), merchants.PublishableKeyPrefix) {
			return &errs.Error{Code: codeForbidden, Message: "a publishable key can only read and confirm the payment whose client secret it presents " +
				"(GET /payments/{id}, POST /payments/{id}/confirm); everything else takes the secret API key, on the merchant's server"}
		}
		if c.Request().Header.Get(echo.HeaderOrigin) != "" {
			return errSecretKeyInBrowser()
		}
		return next(c)
	}
}

// errSecretKeyInBrowser refuses a request for a secret key's route, or
// with a secret key, that a browser sent.
func errSecretKeyInBrowser() error {
	return &errs.Error{Code: codeForbidden, Message: "a secret API key must never reach a browser (this request carries an Origin): " +
		"create the payment on the merchant's server, and confirm it from the page with a publishable key and the payment's client_secret"}
}

// authenticateBrowser authenticates the two routes a browser may call: a
// publishable key with the client secret of the payment the path names,
// from an origin its merchant allows, within the browser budget; or a
// secret key from a server (not a browser: no Origin), within its
// merchant's rate limit.
func (s *Server) authenticateBrowser(next echo.HandlerFunc) echo.HandlerFunc {
	fromServer := s.authenticate(s.rateLimit(next))
	return func(c echo.Context) error {
		ctx, cancel := s.lookupCtx(c)
		defer cancel()
		origin := c.Request().Header.Get(echo.HeaderOrigin)
		c.Response().Header().Set(echo.HeaderCacheControl, "no-store")
		c.Response().Header().Add(echo.HeaderVary, echo.HeaderOrigin)
		if origin != "" {
			if err := s.allowReading(ctx, c, origin); err != nil {
				return err
			}
		}
		key := bearerKey(c)
		if !strings.HasPrefix(key, merchants.PublishableKeyPrefix) {
			if origin != "" {
				return errSecretKeyInBrowser()
			}
			return fromServer(c)
		}
		if s.opts.Browser == nil {
			return &errs.Error{Code: errs.CodeUnauthorized, Message: "publishable keys are not accepted here"}
		}
		if err := s.checkAuthFailures(c); err != nil {
			return err
		}
		if err := s.takeBrowser(s.browser.addrs, clientAddr(c), "from this address"); err != nil {
			return err
		}
		m, origins, err := s.opts.Browser.AuthenticatePublishable(ctx, key)
		if err != nil {
			return s.countAuthFailure(c, err)
		}
		if origin != "" && !merchants.AllowsOrigin(origins, origin) {
			s.countFailure(c)
			return &errs.Error{Code: codeOriginNotAllowed,
				Message: "this merchant does not allow browser requests from " + strconv.Quote(origin) + " (gateway merchants origins add)"}
		}
		secret := c.Request().Header.Get(HeaderClientSecret)
		if secret == "" {
			return &errs.Error{Code: errs.CodeUnauthorized, Message: "send the payment's client_secret as the " + HeaderClientSecret + " header with a publishable key"}
		}
		// Another payment, or none, or the wrong secret: the same answer, so
		// that a publishable key learns nothing of payments it cannot read.
		// A secret that does not name the path's payment is refused unread.
		id := c.Param("id")
		if !payments.ClientSecretNames(id, secret) {
			s.countFailure(c)
			return errBrowserNotFound()
		}
		p, err := s.svc.Payment(ctx, m.ID, id)
		if err != nil && errs.CodeOf(err) != errs.CodeNotFound {
			return err
		}
		if err != nil || !payments.ClientSecretMatches(p, secret) {
			s.countFailure(c)
			return errBrowserNotFound()
		}
		// Only who holds the payment's secret spends its budget: nobody else
		// can spend a shopper's.
		if err := s.takeBrowser(s.browser.payments, p.ID, "for this payment"); err != nil {
			return err
		}
		if err := setMerchant(c, m); err != nil {
			return err
		}
		return next(c)
	}
}

// errBrowserNotFound answers a publishable key that presented no secret of
// the path's payment.
func errBrowserNotFound() error {
	return &errs.Error{Code: errs.CodeNotFound, Message: "payment not found (a publishable key reads only the payment whose client_secret it presents)"}
}

// allowReading lets the page on origin read the answer when some merchant
// allows origin: the request itself is judged afterwards.
func (s *Server) allowReading(ctx context.Context, c echo.Context, origin string) error {
	if s.opts.Browser == nil {
		return nil
	}
	ok, err := s.opts.Browser.OriginAllowed(ctx, origin)
	if err != nil || !ok {
		return err
	}
	h := c.Response().Header()
	h.Set(echo.HeaderAccessControlAllowOrigin, origin)
	h.Set(echo.HeaderAccessControlExposeHeaders, corsExposeHeaders)
	return nil
}

// handlePreflight answers a CORS preflight of a browser route whose one
// method is method: 204 with what the browser may send, for an origin some
// merchant allows, asking for that method and headers the client needs;
// 403 otherwise, without CORS headers, which the browser takes as a refusal.
func (s *Server) handlePreflight(method string) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		origin := req.Header.Get(echo.HeaderOrigin)
		asked := req.Header.Get(echo.HeaderAccessControlRequestMethod)
		h := c.Response().Header()
		h.Add(echo.HeaderVary, echo.HeaderOrigin)
		h.Add(echo.HeaderVary, echo.HeaderAccessControlRequestMethod)
		h.Add(echo.HeaderVary, echo.HeaderAccessControlRequestHeaders)
		if origin == "" || asked == "" {
			return &errs.Error{Code: codeOriginNotAllowed, Message: "not a CORS preflight: send Origin and Access-Control-Request-Method"}
		}
		if err := s.checkAuthFailures(c); err != nil {
			return err
		}
		allowed := false
		if s.opts.Browser != nil {
			var err error
			ctx, cancel := s.lookupCtx(c)
			allowed, err = s.opts.Browser.OriginAllowed(ctx, origin)
			cancel()
			if err != nil {
				return err
			}
		}
		if !allowed {
			s.countFailure(c)
			return &errs.Error{Code: codeOriginNotAllowed, Message: "no merchant allows browser requests from " + strconv.Quote(origin)}
		}
		if asked != method {
			return &errs.Error{Code: codeForbidden, Message: "browsers may only " + method + " " + req.URL.Path}
		}
		for _, name := range strings.Split(req.Header.Get(echo.HeaderAccessControlRequestHeaders), ",") {
			if name = strings.TrimSpace(name); name != "" && !allowedHeader(name) {
				return &errs.Error{Code: codeForbidden, Message: "browsers may not send the header " + strconv.Quote(name) +
					"; they may send " + strings.Join(corsAllowHeaders, ", ")}
			}
		}
		h.Set(echo.HeaderAccessControlAllowOrigin, origin)
		h.Set(echo.HeaderAccessControlAllowMethods, method)
		h.Set(echo.HeaderAccessControlAllowHeaders, strings.Join(corsAllowHeaders, ", "))
		h.Set(echo.HeaderAccessControlMaxAge, corsMaxAge)
		return c.NoContent(http.StatusNoContent)
	}
}

func allowedHeader(name string) bool {
	for _, h := range corsAllowHeaders {
		if strings.EqualFold(h, name) {
			return true
		}
	}
	return false
}
