package api

import (
	"log/slog"
	"net/http"
	"time"
)

// The HTTP server the API runs in, with the limits that keep careless and
// hostile clients from holding it: how long a request's header and body may
// take to arrive, how long an idle keep-alive connection is kept.

// Defaults of the HTTP server: the one place they are written.
const (
	// DefaultReadHeaderTimeout bounds the arrival of a request's header.
	DefaultReadHeaderTimeout = 5 * time.Second
	// DefaultReadTimeout bounds the arrival of a whole request, body
	// included: a body still coming then is cut, answered 400.
	DefaultReadTimeout = 15 * time.Second
	// DefaultIdleTimeout is how long an idle keep-alive connection is kept.
	DefaultIdleTimeout = 30 * time.Second
	// DefaultMaxHeaderBytes bounds a request's header.
	DefaultMaxHeaderBytes = 32 << 10
)

// ServerOptions are the HTTP server's limits; zero values take the defaults.
type ServerOptions struct {
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	// WriteTimeout bounds a request from its header to its answer: it must
	// outlast a payment's PSP call and a duplicate's wait.
	WriteTimeout   time.Duration
	IdleTimeout    time.Duration
	MaxHeaderBytes int
	// Logger receives the server's own complaints, at WARN.
	Logger *slog.Logger
}

// NewHTTPServer returns the server for handler (the API's, or one wrapping
// it). Serve it on a listener from Listen: that is where request framing is
// watched.
func NewHTTPServer(handler http.Handler, o ServerOptions) *http.Server {
	if o.ReadHeaderTimeout <= 0 {
		o.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = DefaultReadTimeout
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.MaxHeaderBytes <= 0 {
		o.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &http.Server{
		Handler:     refuseAmbiguousFraming(handler),
		ConnContext: connContext,
		ConnState:   connState,
		// Every request reaches the handler, "OPTIONS *" included: the
		// framing watcher's verdicts are taken one per request, in order.
		DisableGeneralOptionsHandler: true,
		ReadHeaderTimeout:            o.ReadHeaderTimeout,
		ReadTimeout:                  o.ReadTimeout,
		WriteTimeout:                 o.WriteTimeout,
		IdleTimeout:                  o.IdleTimeout,
		MaxHeaderBytes:               o.MaxHeaderBytes,
		ErrorLog:                     slog.NewLogLogger(o.Logger.Handler(), slog.LevelWarn),
	}
}

// The connection cap's default, from the descriptor limit.
const (
	// descriptorReserve is what the process keeps for itself besides the
	// database pool and client connections: PSP connections, the admin
	// listener, log files, the binary's own files.
	descriptorReserve = 128
	// minConns and maxConns bound the derived cap.
	minConns = 16
	maxConns = 10_000
	// fallbackConns is the cap when the descriptor limit cannot be read.
	fallbackConns = 1024
)

// DefaultMaxConns is the connection cap derived from the process's
// descriptor limit (RLIMIT_NOFILE), leaving room for a database pool of
// dbPool connections and descriptorReserve more: at most 10,000, at least 16.
func DefaultMaxConns(dbPool int) int {
	return maxConnsFor(descriptorLimit(), dbPool)
}

func maxConnsFor(limit, dbPool int) int {
	if limit <= 0 {
		return fallbackConns
	}
	return min(max(limit-dbPool-descriptorReserve, minConns), maxConns)
}
