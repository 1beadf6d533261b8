package psptest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
)

// Op is the kind of call a backend receives.
type Op int

const (
	OpCharge Op = iota + 1
	OpLookup
	OpRefund
	OpLookupRefund
	OpCapture
	OpVoid
)

func (o Op) String() string {
	switch o {
	case OpCharge:
		return "charge"
	case OpLookup:
		return "lookup"
	case OpRefund:
		return "refund"
	case OpLookupRefund:
		return "lookup_refund"
	case OpCapture:
		return "capture"
	case OpVoid:
		return "void"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

// Fault is how a backend misbehaves on one call. "Before" faults leave the
// backend untouched; "after" faults let it act exactly as it would have (the
// charge, refund, capture or void is made) and then lose the answer.
type Fault int

const (
	// Refuse: the backend answers that it did not process the call (an
	// explicit "not processed" or rate-limit answer). Expected: NotProcessed.
	Refuse Fault = iota + 1
	// ErrorBefore: a 5xx without acting. Expected: Unknown.
	ErrorBefore
	// ErrorAfter: acts, then answers 5xx. Expected: Unknown.
	ErrorAfter
	// TimeoutBefore: holds the request without acting until the caller's
	// deadline has passed, then drops it. Expected: Unknown.
	TimeoutBefore
	// TimeoutAfter: acts, then holds the answer until the caller's deadline
	// has passed. Expected: Unknown.
	TimeoutAfter
	// ResetBefore: reads the request and resets the connection without
	// acting. Expected: Unknown.
	ResetBefore
	// ResetAfter: acts, then resets the connection. Expected: Unknown.
	ResetAfter
	// GarbageAfter: acts, then answers 200 with a body that cannot be parsed.
	// Expected: Unknown.
	GarbageAfter
	// ForeignAfter: acts, then answers as if for other ids: in the answer,
	// every order id the suite made ("ord_…") and refund order id ("rfd_…")
	// is changed. Expected: Unknown wrapping psp.ErrMismatch.
	ForeignAfter
)

func (f Fault) String() string {
	switch f {
	case Refuse:
		return "refuse"
	case ErrorBefore:
		return "error_before"
	case ErrorAfter:
		return "error_after"
	case TimeoutBefore:
		return "timeout_before"
	case TimeoutAfter:
		return "timeout_after"
	case ResetBefore:
		return "reset_before"
	case ResetAfter:
		return "reset_after"
	case GarbageAfter:
		return "garbage_after"
	case ForeignAfter:
		return "foreign_after"
	}
	return fmt.Sprintf("Fault(%d)", int(f))
}

// Acts reports whether the backend does its work under f before the answer
// is lost.
func (f Fault) Acts() bool {
	return f == ErrorAfter || f == TimeoutAfter || f == ResetAfter || f == GarbageAfter || f == ForeignAfter
}

// Timeout reports whether f holds the request on a Gate.
func (f Fault) Timeout() bool { return f == TimeoutBefore || f == TimeoutAfter }

// Gate is where a backend parks a request under a timeout fault: Park
// reports the request as held and blocks until the test calls Release (or
// the request's context ends). The suite lets the caller's deadline pass
// once the request is held, so "after" timeouts have really acted first.
type Gate struct {
	held, release         chan struct{}
	heldOnce, releaseOnce sync.Once
}

// NewGate returns a closed gate.
func NewGate() *Gate {
	return &Gate{held: make(chan struct{}), release: make(chan struct{})}
}

// Park is the backend's side: it signals Held and blocks until Release or
// until ctx is done.
func (g *Gate) Park(ctx context.Context) {
	g.heldOnce.Do(func() { close(g.held) })
	select {
	case <-g.release:
	case <-ctx.Done():
	}
}

// Held is closed once a request is parked.
func (g *Gate) Held() <-chan struct{} { return g.held }

// Release lets every parked request go on; it may be called more than once.
func (g *Gate) Release() { g.releaseOnce.Do(func() { close(g.release) }) }

// HTTPFaults puts fault injection in front of a fake PSP's HTTP handler, for
// backends served by httptest. The fake supplies its vendor's own answers for
// Refuse and for a 5xx, and says which Op a request is.
//
// Every answer carries "Connection: close". Go's transport silently replays a
// request that failed on a reused keep-alive connection when the request is
// replayable (a GET, or a POST with an Idempotency-Key header); with fresh
// connections a fault reaches the adapter as it would the first time.
type HTTPFaults struct {
	// Handler is the fake PSP.
	Handler http.Handler
	// OpOf names the Op of a request; 0 leaves the request alone.
	OpOf func(*http.Request) Op
	// Refuse writes the vendor's "not processed" answer.
	Refuse http.HandlerFunc
	// ServerError writes the vendor's 5xx answer.
	ServerError http.HandlerFunc

	mu    sync.Mutex
	queue map[Op][]injection
}

type injection struct {
	fault Fault
	gate  *Gate
}

// Inject queues f for the next request of kind op; gate is used by the
// timeout faults.
func (h *HTTPFaults) Inject(op Op, f Fault, gate *Gate) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.queue == nil {
		h.queue = make(map[Op][]injection)
	}
	h.queue[op] = append(h.queue[op], injection{f, gate})
}

func (h *HTTPFaults) pop(op Op) (injection, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.queue[op]
	if op == 0 || len(q) == 0 {
		return injection{}, false
	}
	h.queue[op] = q[1:]
	return q[0], true
}

// ServeHTTP implements http.Handler.
func (h *HTTPFaults) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Connection", "close")
	inj, ok := h.pop(h.OpOf(r))
	if !ok {
		h.Handler.ServeHTTP(w, r)
		return
	}
	switch inj.fault {
	case Refuse:
		h.Refuse(w, r)
		return
	case ErrorBefore:
		h.ServerError(w, r)
		return
	case TimeoutBefore:
		inj.gate.Park(r.Context())
		drop(w)
		return
	case ResetBefore:
		_, _ = io.Copy(io.Discard, r.Body)
		drop(w)
		return
	}

	rec := httptest.NewRecorder()
	h.Handler.ServeHTTP(rec, r)
	switch inj.fault {
	case ErrorAfter:
		h.ServerError(w, r)
	case TimeoutAfter:
		inj.gate.Park(r.Context())
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	case ResetAfter:
		drop(w)
	case GarbageAfter:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"id": "trunc`)
	case ForeignAfter:
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.Header().Del("Content-Length")
		w.WriteHeader(rec.Code)
		_, _ = w.Write(Foreign(rec.Body.Bytes()))
	default:
		panic(fmt.Sprintf("psptest: unknown fault %v", inj.fault))
	}
}

// Foreign rewrites an answer as if for other ids: every order id the suite
// makes ("ord_…") and refund order id ("rfd_…") is changed, keeping its length.
func Foreign(answer []byte) []byte {
	b := bytes.ReplaceAll(answer, []byte(OrderPrefix), []byte("orx_"))
	return bytes.ReplaceAll(b, []byte(RefundPrefix), []byte("rfx_"))
}

// drop closes the request's connection without an answer, with a TCP reset
// where it can, the way a crashed PSP or a middlebox would.
func drop(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}
