// Package roundtrip owns one JSON request to a PSP's HTTP API and the
// classification of what can go wrong before an answer can be read: building
// the request, the caller's deadline, a bounded read of the answer, transport
// failures (psp.TransportError), and the HTTP statuses whose meaning does not
// depend on the PSP's own error codes. Adapters that speak JSON over HTTP
// (psp/toss, psp/fake/fakeclient) share it, and read the PSP's codes themselves.
package roundtrip

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"gateway/psp"
)

// MaxAnswer bounds how much of an answer is read; a PSP's answer is a few
// kilobytes.
const MaxAnswer = 1 << 20

// DefaultTimeout is the backstop of a client made without one; deadlines come
// from the caller's context.
const DefaultTimeout = 60 * time.Second

// Client sends requests to one PSP base URL.
type Client struct {
	base   string
	http   *http.Client
	header http.Header
}

// New returns a Client for base (scheme and host, no trailing slash needed)
// that sends header with every request (authentication, an API version).
// hc nil means a client with DefaultTimeout.
func New(base string, hc *http.Client, header http.Header) *Client {
	if hc == nil {
		hc = &http.Client{Timeout: DefaultTimeout}
	}
	return &Client{base: strings.TrimRight(base, "/"), http: hc, header: header.Clone()}
}

// Request is one call.
type Request struct {
	// Op names the call in errors: "charge", "lookup", "refund", "lookup_refund".
	Op     string
	Method string
	// Path is appended to the base URL; it carries its own query, escaped.
	Path string
	// Body is sent as JSON when not nil.
	Body any
	// IdempotencyKey is sent as the Idempotency-Key header when not empty.
	IdempotencyKey string
}

// Answer is an HTTP answer, read whole.
type Answer struct {
	Status int
	Body   []byte
}

// Do sends r and reads the whole answer, whatever its status. Its only errors
// are *psp.Error: NotProcessed when the request could not be built or no
// connection could be opened, Unknown when anything failed after that (the
// PSP may have acted).
func (c *Client) Do(ctx context.Context, r Request) (Answer, error) {
	var body io.Reader
	if r.Body != nil {
		b, err := json.Marshal(r.Body)
		if err != nil {
			return Answer{}, &psp.Error{Class: psp.NotProcessed, Op: r.Op, Err: err}
		}
		body = bytes.NewReader(b)
	}
	// A request Go's client sends again by itself (an Idempotency-Key makes
	// it replayable) may have reached the PSP before a later dial failed.
	ctx, sent := psp.Tracing(ctx)
	req, err := http.NewRequestWithContext(ctx, r.Method, c.base+r.Path, body)
	if err != nil {
		return Answer{}, &psp.Error{Class: psp.NotProcessed, Op: r.Op, Err: err}
	}
	for k, v := range c.header {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "application/json")
	if r.Body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.IdempotencyKey != "" {
		req.Header.Set("Idempotency-Key", r.IdempotencyKey)
	}
	res, err := c.http.Do(req)
	if err != nil {
		return Answer{}, sent.Judge(psp.TransportError(r.Op, err))
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, MaxAnswer))
	if err != nil {
		// The status line arrived, the body did not: the PSP acted or not.
		return Answer{}, &psp.Error{Class: psp.Unknown, Op: r.Op, Err: fmt.Errorf("reading the %d answer: %w", res.StatusCode, err)}
	}
	return Answer{Status: res.StatusCode, Body: raw}, nil
}

// StatusClass places a status whose meaning does not depend on the PSP's
// error code: 429 is NotProcessed (a rate-limited request is not executed);
// 408, 409 (the same idempotency key in flight) and every 5xx are Unknown.
// It reports false for any other status: the adapter reads the PSP's code.
func StatusClass(status int) (psp.Class, bool) {
	switch {
	case status == http.StatusTooManyRequests:
		return psp.NotProcessed, true
	case status == http.StatusRequestTimeout || status == http.StatusConflict || status >= 500:
		return psp.Unknown, true
	}
	return 0, false
}

// Unreadable is the Unknown error of an answer whose body the adapter could
// not read as the PSP's: a proxy's page, a truncated body. Whatever sent it,
// the PSP may have acted.
func Unreadable(op string, a Answer) *psp.Error {
	return &psp.Error{Class: psp.Unknown, Op: op, Err: fmt.Errorf("answer %d with an unreadable body %.100q", a.Status, a.Body)}
}
