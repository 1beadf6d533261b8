// Package api is the HTTP face of the gateway: routes, authentication,
// request decoding, and the one table that maps error codes to HTTP statuses
// and RFC 9457 problem types. It is the only package that imports echo.
package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"gateway/payments"
)

// Pinger reports whether the database answers; /readyz uses it.
type Pinger interface {
	Ping(ctx context.Context) error
}

// Options configure the handler.
type Options struct {
	// MaxBodyBytes bounds a request body; larger bodies get 413.
	MaxBodyBytes int64
	Logger       *slog.Logger
}

// Server holds what the handlers need.
type Server struct {
	svc  *payments.Service
	db   Pinger
	opts Options
	log  *slog.Logger
}

// NewHandler returns the gateway's HTTP API.
func NewHandler(svc *payments.Service, db Pinger, opts Options) http.Handler {
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = 64 << 10
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{svc: svc, db: db, opts: opts, log: opts.Logger}
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = s.handleError
	e.Use(withRequestID)
	e.Use(s.recoverer)
	s.routes(e)
	return e
}

// recoverer turns a panic in a handler into a logged 500 problem.
func (s *Server) recoverer(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) (err error) {
		defer func() {
			if r := recover(); r != nil {
				s.log.Error("panic in handler", "panic", r, "path", c.Path(), "request_id", requestID(c))
				err = &payments.Error{Code: payments.CodeInternal, Message: "internal error"}
			}
		}()
		return next(c)
	}
}

// withRequestID tags every request with an id, echoed in X-Request-Id, in
// problem bodies and in logs. A client's own id is kept only when it is short
// and plain, since it ends up in logs.
func withRequestID(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		id := c.Request().Header.Get(echo.HeaderXRequestID)
		if !plainID(id) {
			var b [12]byte
			_, _ = rand.Read(b[:])
			id = "req_" + hex.EncodeToString(b[:])
		}
		c.Response().Header().Set(echo.HeaderXRequestID, id)
		return next(c)
	}
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
