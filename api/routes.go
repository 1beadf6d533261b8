package api

import (
	"net/http"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"
)

// routes is the whole public API.
func (s *Server) routes(e *echo.Echo) {
	e.GET("/healthz", s.handleHealthz)
	e.GET("/readyz", s.handleReadyz)
	e.GET("/openapi.json", s.handleOpenAPI)
	// No /metrics here: the serving process exposes them on its admin
	// address only (GATEWAY_ADMIN_ADDR), never beside the public API.

	// Middleware per route, not per group: an echo group with middleware
	// catches every unmatched path, which would turn 404s and 405s into 401s.
	// Each route's chain is built once, here (echo would build it anew for
	// every request).
	// Reads run under the lookup deadline; commands keep the flow's own. A
	// path whose id cannot be one is a 404 before anything else (ids.go).
	merchant := []echo.MiddlewareFunc{noStore, s.refusePublishable, s.authenticate, s.rateLimit}
	reading := append([]echo.MiddlewareFunc{s.bounded}, merchant...)
	e.POST("/payments", chain(s.handleCreatePayment, merchant...))
	e.GET("/payments", chain(s.handleFindPayment, reading...))
	e.POST("/payments/:id/refunds", chain(s.handleCreateRefund, namedBy(paymentIDs, merchant)...))
	e.GET("/payments/:id/refunds", chain(s.handleListRefunds, namedBy(paymentIDs, reading)...))
	e.POST("/payments/:id/capture", chain(s.handleCapturePayment, namedBy(paymentIDs, merchant)...))
	e.POST("/payments/:id/cancel", chain(s.handleCancelPayment, namedBy(paymentIDs, merchant)...))
	e.POST("/payments/cancel_by_key", chain(s.handleCancelByKey, merchant...))
	e.GET("/refunds", chain(s.handleListRefunds, reading...))
	e.GET("/refunds/:id", chain(s.handleGetRefund, namedBy(refundIDs, reading)...))
	e.POST("/webhook_endpoints", chain(s.handleCreateEndpoint, merchant...))
	e.GET("/webhook_endpoints", chain(s.handleListEndpoints, reading...))
	e.GET("/webhook_endpoints/:id", chain(s.handleGetEndpoint, namedBy(endpointIDs, reading)...))
	e.DELETE("/webhook_endpoints/:id", chain(s.handleDeleteEndpoint, namedBy(endpointIDs, merchant)...))
	e.POST("/webhook_endpoints/:id/rotate", chain(s.handleRotateEndpoint, namedBy(endpointIDs, merchant)...))
	e.GET("/events", chain(s.handleListEvents, reading...))
	e.GET("/events/:id", chain(s.handleGetEvent, namedBy(eventIDs, reading)...))
	e.GET("/webhook_endpoints/:id/deliveries", chain(s.handleEndpointDeliveries, namedBy(endpointIDs, reading)...))
	e.GET("/events/:id/deliveries", chain(s.handleEventDeliveries, namedBy(eventIDs, reading)...))
	e.POST("/events/:id/redeliver", chain(s.handleRedeliver, namedBy(eventIDs, merchant)...))
	e.GET("/webhook_deliveries/:id", chain(s.handleGetDelivery, namedBy(deliveryIDs, reading)...))
	// OPTIONS of these paths tells their methods to a merchant only (echo
	// would answer anyone); browsers never come here.
	e.OPTIONS("/payments", chain(s.handleOptions("GET, POST, OPTIONS"), reading...))
	e.OPTIONS("/payments/:id/refunds", chain(s.handleOptions("GET, POST, OPTIONS"), namedBy(paymentIDs, reading)...))
	e.OPTIONS("/payments/:id/capture", chain(s.handleOptions("POST, OPTIONS"), reading...))
	e.OPTIONS("/payments/:id/cancel", chain(s.handleOptions("POST, OPTIONS"), reading...))
	e.OPTIONS("/payments/cancel_by_key", chain(s.handleOptions("POST, OPTIONS"), reading...))
	e.OPTIONS("/refunds", chain(s.handleOptions("GET, OPTIONS"), reading...))
	e.OPTIONS("/refunds/:id", chain(s.handleOptions("GET, OPTIONS"), namedBy(refundIDs, reading)...))
	e.OPTIONS("/webhook_endpoints", chain(s.handleOptions("GET, POST, OPTIONS"), reading...))
	e.OPTIONS("/webhook_endpoints/:id", chain(s.handleOptions("GET, DELETE, OPTIONS"), namedBy(endpointIDs, reading)...))
	e.OPTIONS("/webhook_endpoints/:id/rotate", chain(s.handleOptions("POST, OPTIONS"), namedBy(endpointIDs, reading)...))
	e.OPTIONS("/events", chain(s.handleOptions("GET, OPTIONS"), reading...))
	e.OPTIONS("/events/:id", chain(s.handleOptions("GET, OPTIONS"), namedBy(eventIDs, reading)...))
	e.OPTIONS("/webhook_endpoints/:id/deliveries", chain(s.handleOptions("GET, OPTIONS"), namedBy(endpointIDs, reading)...))
	e.OPTIONS("/events/:id/deliveries", chain(s.handleOptions("GET, OPTIONS"), namedBy(eventIDs, reading)...))
	e.OPTIONS("/events/:id/redeliver", chain(s.handleOptions("POST, OPTIONS"), namedBy(eventIDs, reading)...))
	e.OPTIONS("/webhook_deliveries/:id", chain(s.handleOptions("GET, OPTIONS"), namedBy(deliveryIDs, reading)...))

	// The PSPs' notifications (no API key: the PSP's
	// signature, or the PSP asked again, vouches for them).
	e.POST("/psp/stripe/webhook", s.handlePSPWebhook("stripe"))
	e.POST("/psp/toss/webhook", s.handlePSPWebhook("toss"))
	e.POST("/psp/accounts/:account/webhook", s.handleAccountWebhook)

	// Browser checkout (browser.go): the secret key from the merchant's
	// server, or a publishable key with the payment's client secret from an
	// origin its merchant allows, reads and confirms one payment, each within
	// its own budget (the merchant's, the browser's); the CORS preflights of
	// those two paths, before any authentication.
	browser := []echo.MiddlewareFunc{s.authenticateBrowser}
	e.GET("/payments/:id", chain(s.handleGetPayment, namedBy(paymentIDs, append([]echo.MiddlewareFunc{s.bounded}, browser...))...))
	e.POST("/payments/:id/confirm", chain(s.handleConfirmPayment, namedBy(paymentIDs, browser)...))
	e.OPTIONS("/payments/:id", chain(s.handlePreflight(http.MethodGet), namedBy(paymentIDs, nil)...))
	e.OPTIONS("/payments/:id/confirm", chain(s.handlePreflight(http.MethodPost), namedBy(paymentIDs, nil)...))

	// Echo hands a path below a payment or a refund (/payments/{id}/anything)
	// to the route above with the rest folded into the id, which would
	// answer "payment not found" (after authentication) for a path that does
	// not exist, and a sub-route asked with another method would be a 404.
	// Claim them here, before any authentication: an unknown route is a
	// 404, a known one with another method a 405 with Allow.
	for _, parent := range []string{"/payments/:id", "/refunds/:id"} {
		e.RouteNotFound(parent+"/*", s.belowRoute(e, parent))
	}
}

// belowRoute answers a path below parent that no route took: 405 (or, for
// OPTIONS, 204) with Allow when some route has that path with other
// methods, as echo answers its other paths, else 404.
func (s *Server) belowRoute(e *echo.Echo, parent string) echo.HandlerFunc {
	return func(c echo.Context) error {
		path := parent + "/" + c.Param("*")
		allow := []string{http.MethodOptions}
		for _, r := range e.Routes() {
			if r.Path == path && r.Method != http.MethodOptions && methodLabel(r.Method) != labelOther {
				allow = append(allow, r.Method)
			}
		}
		if len(allow) == 1 {
			return echo.ErrNotFound
		}
		slices.Sort(allow[1:])
		c.Response().Header().Set(echo.HeaderAllow, strings.Join(allow, ", "))
		if c.Request().Method == http.MethodOptions {
			return c.NoContent(http.StatusNoContent)
		}
		return echo.ErrMethodNotAllowed
	}
}

// chain wraps h in mw once, the first outermost, as echo orders a route's
// middleware.
func chain(h echo.HandlerFunc, mw ...echo.MiddlewareFunc) echo.HandlerFunc {
	for i := len(mw) - 1; i >= 0; i-- {
		h = mw[i](h)
	}
	return h
}

// handleOptions answers OPTIONS with the methods a path takes.
func (s *Server) handleOptions(allow string) echo.HandlerFunc {
	return func(c echo.Context) error {
		c.Response().Header().Set(echo.HeaderAllow, allow)
		return c.NoContent(http.StatusNoContent)
	}
}

// noStore keeps every answer of a merchant route, refusals included, out of
// caches: they carry payment data.
func noStore(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		c.Response().Header().Set(echo.HeaderCacheControl, "no-store")
		return next(c)
	}
}
