// Package gateway is the payment gateway's Go client, for merchants'
// servers: payments, refunds, events, webhook endpoints and their delivery
// log over the gateway's HTTP API, with the API's retry rules kept so that
// a payment intent is never charged twice:
//
//   - every POST carries an Idempotency-Key, the caller's
//     (WithIdempotencyKey) or one made for the call, and every retry of the
//     call sends that key and the same body again;
//   - a call is retried on a network error (an answer lost after the
//     gateway acted included), 409 request-in-flight, 429 and 5xx, with
//     exponential back-off and full jitter, never sooner than Retry-After,
//     at most MaxRetries times and never past the caller's context;
//   - a refusal the gateway would repeat (400, 401, 403, 404, 413, 422, any
//     other 409) is returned at once as an *Error.
//
// A decline is an answer, not an error: the gateway answers 402 with the
// payment (status declined or failed), stores it and replays it, and so
// does this client (the returned Payment's Status says it). Package webhook
// receives the gateway's webhook deliveries.
//
// The package imports nothing but the standard library.
package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Defaults of a Client.
const (
	DefaultMaxRetries  = 3
	DefaultBackoffBase = 250 * time.Millisecond
	DefaultBackoffMax  = 5 * time.Second
	// DefaultTimeout bounds one attempt when the client is not given an
	// *http.Client of its own.
	DefaultTimeout = 30 * time.Second
	// MaxRetryAfter is the longest Retry-After the client waits for: a
	// longer one ends the call with its *Error (whose RetryAfter says when
	// to try again) rather than holding the caller.
	MaxRetryAfter = time.Minute
)

// maxAnswer bounds what is read of an answer: a page of a hundred payments
// with the largest texts the gateway accepts stays well within it.
const maxAnswer = 16 << 20

// userAgent names this client in the gateway's access log.
const userAgent = "gateway-go/1"

// APIVersion is the API version this client's types describe. Every
// request names it (Gateway-Version), so the gateway answers in it
// whatever version the merchant is pinned to, and a webhook endpoint
// created through the client has its deliveries rendered in it.
const APIVersion = "2026-12-02"

// Client calls the gateway with a merchant's secret API key. It is safe
// for concurrent use; make one per key and keep it.
type Client struct {
	Payments          *PaymentService
	Refunds           *RefundService
	Events            *EventService
	WebhookEndpoints  *WebhookEndpointService
	WebhookDeliveries *WebhookDeliveryService

	secretKey  string
	baseURL    string // scheme://host[:port][/path], without a trailing slash
	http       *http.Client
	maxRetries int
	base, max  time.Duration
	sleep      func(ctx context.Context, d time.Duration) error
	// jitter draws a duration in [0, n); n > 0.
	jitter func(n time.Duration) time.Duration
	now    func() time.Time
}

// Option configures a Client.
type Option func(*Client) error

// WithBaseURL is where the gateway is served, such as
// "https://pay.example" (required).
func WithBaseURL(u string) Option {
	return func(c *Client) error {
		parsed, err := url.Parse(strings.TrimRight(u, "/"))
		if err != nil {
			return fmt.Errorf("gateway: base URL: %w", err)
		}
		if parsed.Scheme != "http" && parsed.Scheme != "https" || parsed.Host == "" {
			return errors.New("gateway: base URL must be http(s)://host[:port][/path]")
		}
		if parsed.RawQuery != "" || parsed.Fragment != "" || parsed.User != nil {
			return errors.New("gateway: base URL must have no query, fragment or user information")
		}
		c.baseURL = parsed.String()
		return nil
	}
}

// WithHTTPClient sends the requests with hc; its Timeout bounds each
// attempt (the context bounds the whole call, retries included).
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) error {
		if hc == nil {
			return errors.New("gateway: nil *http.Client")
		}
		c.http = hc
		return nil
	}
}

// WithMaxRetries bounds the retries of one call (DefaultMaxRetries); 0
// sends each request once.
func WithMaxRetries(n int) Option {
	return func(c *Client) error {
		if n < 0 {
			return errors.New("gateway: max retries must not be negative")
		}
		c.maxRetries = n
		return nil
	}
}

// WithBackoff sets the back-off: retry n waits a random time below
// min(max, base·2^(n-1)), and never less than the answer's Retry-After.
func WithBackoff(base, max time.Duration) Option {
	return func(c *Client) error {
		if base <= 0 || max < base {
			return errors.New("gateway: back-off needs 0 < base <= max")
		}
		c.base, c.max = base, max
		return nil
	}
}

// WithSleep replaces how the client waits before a retry (a timer that
// ends early with ctx, returning its error). Tests record the waits
// instead of sleeping them.
func WithSleep(sleep func(ctx context.Context, d time.Duration) error) Option {
	return func(c *Client) error {
		if sleep == nil {
			return errors.New("gateway: nil sleep")
		}
		c.sleep = sleep
		return nil
	}
}

// New returns a client for the merchant whose secret API key (sk_…) it is
// given. A publishable key (pk_…) is refused: it belongs in browsers, and
// the gateway takes it for nothing this client does.
func New(secretKey string, opts ...Option) (*Client, error) {
	switch {
	case secretKey == "":
		return nil, errors.New("gateway: no secret API key")
	case strings.HasPrefix(secretKey, "pk_"):
		return nil, errors.New("gateway: a publishable key (pk_…) cannot call the merchant API: use the secret key (sk_…)")
	}
	c := &Client{
		secretKey:  secretKey,
		http:       &http.Client{Timeout: DefaultTimeout},
		maxRetries: DefaultMaxRetries,
		base:       DefaultBackoffBase,
		max:        DefaultBackoffMax,
		sleep:      sleepCtx,
		jitter:     rand.N[time.Duration],
		now:        time.Now,
	}
	for _, o := range opts {
		if err := o(c); err != nil {
			return nil, err
		}
	}
	if c.baseURL == "" {
		return nil, errors.New("gateway: no base URL: pass WithBaseURL")
	}
	c.Payments = &PaymentService{c: c}
	c.Refunds = &RefundService{c: c}
	c.Events = &EventService{c: c}
	c.WebhookEndpoints = &WebhookEndpointService{c: c}
	c.WebhookDeliveries = &WebhookDeliveryService{c: c}
	return c, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// CallOption adjusts one call.
type CallOption func(*callOptions)

type callOptions struct {
	key       string
	requestID string
}

// WithIdempotencyKey sends key as the call's Idempotency-Key instead of one
// made for the call. Keep it with the operation it names (an order's id,
// say) to retry that operation later, after this process gave up or
// restarted: the gateway then replays the first answer rather than acting
// twice. 1 to 255 visible ASCII characters, case-sensitive; scoped per
// merchant and endpoint.
func WithIdempotencyKey(key string) CallOption {
	return func(o *callOptions) { o.key = key }
}

// WithRequestID sends id as X-Request-Id (1 to 64 of A-Z a-z 0-9 . _ -),
// which the gateway logs and answers with, to correlate with its logs.
func WithRequestID(id string) CallOption {
	return func(o *callOptions) { o.requestID = id }
}

// call is one operation: its attempts share its body and its key.
type call struct {
	method string
	path   string // escaped, below the base URL
	query  url.Values
	body   []byte // nil: no body
	key    string // Idempotency-Key; "" for none
	reqID  string
	// replayable: the gateway deduplicates the operation (a keyed POST) or
	// it changes nothing (a read), so an attempt whose answer was lost may
	// be sent again. Otherwise only attempts that certainly did nothing
	// (429, a connection never made) are.
	replayable bool
}

func (cl call) op() string { return cl.method + " " + cl.path }

// post is a call with a JSON body and an Idempotency-Key.
func (c *Client) post(path string, body any, replayable bool, opts []CallOption) (call, error) {
	o := applyOptions(opts)
	cl := call{method: http.MethodPost, path: path, key: o.key, reqID: o.requestID, replayable: replayable}
	if cl.key == "" {
		cl.key = NewIdempotencyKey()
	}
	if err := validKey(cl.key); err != nil {
		return call{}, err
	}
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return call{}, fmt.Errorf("gateway: %s: encode the request: %w", cl.op(), err)
		}
		cl.body = b
	}
	return cl, nil
}

// get is a read.
func get(path string, query url.Values, opts []CallOption) call {
	o := applyOptions(opts)
	return call{method: http.MethodGet, path: path, query: query, reqID: o.requestID, replayable: true}
}

func applyOptions(opts []CallOption) callOptions {
	var o callOptions
	for _, f := range opts {
		f(&o)
	}
	return o
}

// validKey refuses a key the gateway would refuse (400
// invalid-idempotency-key) before anything is sent.
func validKey(k string) error {
	if len(k) < 1 || len(k) > 255 {
		return errors.New("gateway: an Idempotency-Key is 1 to 255 characters")
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return errors.New("gateway: an Idempotency-Key is visible ASCII only (0x21-0x7E)")
		}
	}
	return nil
}

// do runs cl until it gets an answer to keep, decoding it into out: a 2xx,
// or a 402 carrying the object (a decline, a refused capture). Anything
// else ends as an *Error.
func (c *Client) do(ctx context.Context, cl call, out any) error {
	for attempt := 1; ; attempt++ {
		status, header, body, err := c.attempt(ctx, cl)
		var fail *Error
		retry := false
		switch {
		case err != nil:
			fail = &Error{Err: err}
			retry = ctx.Err() == nil && (cl.replayable || neverSent(err))
		case answered(status, header):
			if err := json.Unmarshal(body, out); err != nil {
				return &Error{Op: cl.op(), Status: status, RequestID: header.Get("X-Request-Id"), Attempts: attempt,
					IdempotencyKey: cl.key, Err: fmt.Errorf("unreadable answer: %w", err)}
			}
			return nil
		default:
			fail = problemError(status, header, body, c.now())
			retry = fail.retryable(cl.replayable)
		}
		fail.Op, fail.Attempts, fail.IdempotencyKey = cl.op(), attempt, cl.key
		if !retry || attempt > c.maxRetries || fail.RetryAfter > MaxRetryAfter {
			return fail
		}
		wait := max(fail.RetryAfter, c.backoff(attempt))
		if deadline, ok := ctx.Deadline(); ok && c.now().Add(wait).After(deadline) {
			return fail // the caller's context would end before the next attempt
		}
		if err := c.sleep(ctx, wait); err != nil {
			return fail
		}
	}
}

// answered reports whether an answer is the operation's outcome: a 2xx, or
// a 402 with the object (never a problem document).
func answered(status int, h http.Header) bool {
	if status >= 200 && status < 300 {
		return true
	}
	if status != http.StatusPaymentRequired {
		return false
	}
	mt, _, _ := mime.ParseMediaType(h.Get("Content-Type"))
	return mt == "application/json"
}

// backoff is the full-jitter wait before retry n (1 for the first).
func (c *Client) backoff(n int) time.Duration {
	ceiling := c.max
	if n-1 < 62 {
		if d := c.base << (n - 1); d > 0 && d < ceiling {
			ceiling = d
		}
	}
	return c.jitter(ceiling)
}

// attempt sends cl once and reads the whole answer.
func (c *Client) attempt(ctx context.Context, cl call) (int, http.Header, []byte, error) {
	target := c.baseURL + cl.path
	if len(cl.query) > 0 {
		target += "?" + cl.query.Encode()
	}
	var body io.Reader
	if cl.body != nil {
		body = bytes.NewReader(cl.body)
	}
	req, err := http.NewRequestWithContext(ctx, cl.method, target, body)
	if err != nil {
		return 0, nil, nil, err
	}
	if !cl.replayable {
		// net/http sends a request again by itself, on a kept-alive
		// connection the server closed, when it can re-read the body: not
		// an operation the gateway would do twice.
		req.GetBody = nil
	}
	req.Header.Set("Authorization", "Bearer "+c.secretKey)
	req.Header.Set("Accept", "application/json, application/problem+json")
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set("Gateway-Version", APIVersion)
	if cl.body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if cl.key != "" {
		req.Header.Set("Idempotency-Key", cl.key)
	}
	if cl.reqID != "" {
		req.Header.Set("X-Request-Id", cl.reqID)
	}
	res, err := c.http.Do(req)
	if err != nil {
		// Without the URL: its query may hold an Idempotency-Key
		// (GetByKey), which an error must not carry into a log.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return 0, nil, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, maxAnswer+1))
	if err != nil {
		return 0, nil, nil, fmt.Errorf("reading the answer: %w", err)
	}
	if len(b) > maxAnswer {
		return 0, nil, nil, fmt.Errorf("an answer over %d bytes", maxAnswer)
	}
	return res.StatusCode, res.Header, b, nil
}

// neverSent reports whether a failed attempt certainly never reached the
// gateway: its connection was never made.
func neverSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
