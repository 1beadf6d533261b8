package psp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http/httptrace"
	"sync/atomic"
)

// Sent records whether a round trip wrote any request to a connection. Go's
// HTTP client may send a request again, by itself, on a new connection when
// a reused one closed before answering (a request with an Idempotency-Key
// is replayable to it): the PSP may then have received the first send
// though the call ends in the second's "connection refused". A dial error
// proves nothing was sent only when no request was ever written.
type Sent struct{ wrote atomic.Bool }

// Tracing returns ctx traced by a fresh Sent: pass the returned context to
// the HTTP calls of one money movement, then judge their errors with Judge.
func Tracing(ctx context.Context) (context.Context, *Sent) {
	s := &Sent{}
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteHeaders: func() { s.wrote.Store(true) },
		WroteRequest: func(httptrace.WroteRequestInfo) { s.wrote.Store(true) },
	}), s
}

// Wrote reports whether a request was written.
func (s *Sent) Wrote() bool { return s.wrote.Load() }

// Judge turns err, a call's answer, into Unknown when it says NotProcessed
// for a transport failure (TransportError's dial or name errors) although
// a request was written: it may have reached the PSP. Other errors, and
// nil, are returned as they are.
func (s *Sent) Judge(err error) error {
	var pe *Error
	if !s.Wrote() || !errors.As(err, &pe) || pe.Class != NotProcessed {
		return err
	}
	var opErr *net.OpError
	var dnsErr *net.DNSError
	if errors.As(pe.Err, &opErr) || errors.As(pe.Err, &dnsErr) {
		return &Error{Class: Unknown, Op: pe.Op, Code: pe.Code, Err: fmt.Errorf("a request was written before the connection failed: %w", pe.Err)}
	}
	return err
}
