package gatewaytest

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Fault is what the proxy does to one request instead of forwarding it
// plainly.
type Fault struct {
	// Kind:
	//   - "status" answers Status itself, unforwarded (with Retry-After
	//     when RetryAfter > 0);
	//   - "drop_before" closes the connection unforwarded;
	//   - "drop_after" forwards, lets the gateway answer, then closes the
	//     connection without passing the answer on;
	//   - "slow" forwards, then holds the answer for DelayMS milliseconds
	//     before passing it on; a client that gives up first gets nothing
	//     (recorded as "slow_dropped").
	Kind       string `json:"kind"`
	Status     int    `json:"status"`
	RetryAfter int    `json:"retry_after"`
	DelayMS    int    `json:"delay_ms"`
}

// Seen is one request through the proxy.
type Seen struct {
	Method string `json:"method"`
	Path   string `json:"path"`
	Key    string `json:"key"`
	Body   string `json:"body"`
	Fault  string `json:"fault"`
	Status int    `json:"status"`
	// Version is the API version the answer says it is in (its
	// Gateway-Version header).
	Version string  `json:"version"`
	At      float64 `json:"at_ms"` // since the proxy's first request, in milliseconds
}

// Proxy forwards to an upstream server, applying queued faults to the
// requests of the paths they name, and records every request.
type Proxy struct {
	URL      string
	upstream string
	client   *http.Client
	mu       sync.Mutex
	start    time.Time
	queue    map[string][]Fault // by path suffix ("/confirm", or "" for any)
	log      []Seen
	// recorded is closed, and replaced, at each record: WaitKey's signal.
	recorded chan struct{}
}

// NewProxy serves a proxy to upstream (through client) until tb ends.
func NewProxy(tb testing.TB, upstream string, client *http.Client) *Proxy {
	tb.Helper()
	p := &Proxy{upstream: upstream, client: client, recorded: make(chan struct{})}
	srv := httptest.NewServer(p)
	tb.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// Queue applies faults, one per request, to the next requests whose path
// ends with suffix ("" for any path).
func (p *Proxy) Queue(suffix string, faults ...Fault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.queue == nil {
		p.queue = map[string][]Fault{}
	}
	p.queue[suffix] = append(p.queue[suffix], faults...)
}

// Clear drops the faults queued and not yet applied.
func (p *Proxy) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.queue = nil
}

// Seen lists the requests whose path starts with prefix, in order.
func (p *Proxy) Seen(prefix string) []Seen {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := []Seen{}
	for _, s := range p.log {
		if strings.HasPrefix(s.Path, prefix) {
			out = append(out, s)
		}
	}
	return out
}

// SeenKey lists the requests that carried Idempotency-Key key.
func (p *Proxy) SeenKey(key string) []Seen {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Seen
	for _, s := range p.log {
		if s.Key == key {
			out = append(out, s)
		}
	}
	return out
}

// WaitKey waits, up to d, until the proxy has recorded n requests with
// Idempotency-Key key (a request given up on by its client is recorded
// when the proxy notices), and returns those it has.
func (p *Proxy) WaitKey(key string, n int, d time.Duration) []Seen {
	timeout := time.NewTimer(d)
	defer timeout.Stop()
	for {
		p.mu.Lock()
		recorded := p.recorded
		p.mu.Unlock()
		if seen := p.SeenKey(key); len(seen) >= n {
			return seen
		}
		select {
		case <-recorded:
		case <-timeout.C:
			return p.SeenKey(key)
		}
	}
}

func (p *Proxy) next(path string) (Fault, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for suffix, q := range p.queue {
		if len(q) > 0 && strings.HasSuffix(path, suffix) {
			p.queue[suffix] = q[1:]
			return q[0], true
		}
	}
	return Fault{}, false
}

func (p *Proxy) record(s Seen) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.start.IsZero() {
		p.start = time.Now()
	}
	s.At = float64(time.Since(p.start).Microseconds()) / 1000
	p.log = append(p.log, s)
	close(p.recorded)
	p.recorded = make(chan struct{})
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s := Seen{Method: r.Method, Path: r.URL.Path, Key: r.Header.Get("Idempotency-Key"), Body: string(body)}
	ft, faulty := p.next(r.URL.Path)
	if faulty && ft.Kind == "status" {
		s.Fault, s.Status = "status", ft.Status
		p.record(s)
		if ft.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(ft.RetryAfter))
		}
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(ft.Status)
		_, _ = io.WriteString(w, "injected by the test proxy\n")
		return
	}
	if faulty && ft.Kind == "drop_before" {
		s.Fault = ft.Kind
		p.record(s)
		drop(w)
		return
	}
	req, err := http.NewRequestWithContext(r.Context(), r.Method, p.upstream+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	req.Header = r.Header.Clone()
	res, err := p.client.Do(req)
	if err != nil {
		s.Fault = "upstream: " + err.Error()
		p.record(s)
		drop(w)
		return
	}
	answer, _ := io.ReadAll(res.Body)
	res.Body.Close()
	s.Status, s.Version = res.StatusCode, res.Header.Get("Gateway-Version")
	if faulty && ft.Kind == "drop_after" {
		s.Fault = ft.Kind
		p.record(s)
		drop(w)
		return
	}
	if faulty && ft.Kind == "slow" {
		t := time.NewTimer(time.Duration(ft.DelayMS) * time.Millisecond)
		select {
		case <-t.C:
			s.Fault = "slow"
		case <-r.Context().Done():
			t.Stop()
			s.Fault = "slow_dropped"
			p.record(s)
			drop(w)
			return
		}
	}
	p.record(s)
	for k, vs := range res.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(res.StatusCode)
	_, _ = w.Write(answer)
}

// drop closes the client's connection without an answer.
func drop(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}
