package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"strconv"
	"sync"

	"gateway/errs"
)

// Request framing, watched on the wire. A request with both Content-Length
// and Transfer-Encoding is what request smuggling starts from: a proxy in
// front and this server may disagree on where it ends. Go's server settles
// it by the Transfer-Encoding and drops the Content-Length header before the
// handler can see it, so the listener watches the bytes each connection
// carries, tells every request's framing to the handler, and the handler
// refuses such a request with 400 and closes the connection.

// ListenOptions shape the listener the server accepts on.
type ListenOptions struct {
	// MaxConns caps the connections open at once (0: no cap). At the cap,
	// an idle keep-alive connection is closed to make room; when none is
	// idle, the next connection waits in the kernel's backlog until one
	// closes, so the process never runs out of descriptors for its
	// database pool. DefaultMaxConns derives one from the descriptor limit.
	MaxConns int
	// OnFull, when set, is called each time a new connection has to wait
	// for a free slot (for tests and logs).
	OnFull func()
}

// Listen wraps ln for the server NewHTTPServer returns: every connection's
// request framing is watched, and connections are capped.
func Listen(ln net.Listener, o ListenOptions) net.Listener {
	l := &listener{Listener: ln, onFull: o.OnFull, idle: map[*watchedConn]struct{}{},
		idleNow: make(chan struct{}, 1), done: make(chan struct{})}
	if o.MaxConns > 0 {
		l.slots = make(chan struct{}, o.MaxConns)
	}
	return l
}

type listener struct {
	net.Listener
	slots  chan struct{} // one per open connection; nil: no cap
	onFull func()
	mu     sync.Mutex
	idle   map[*watchedConn]struct{}
	// idleNow is signalled when a connection goes idle.
	idleNow chan struct{}
	done    chan struct{}
	once    sync.Once
}

func (l *listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	wc := &watchedConn{Conn: c, frames: &framing{}, l: l}
	if l.slots == nil {
		return wc, nil
	}
	select {
	case l.slots <- struct{}{}:
		return wc, nil
	default:
	}
	// A signal left from before this wait says nothing about now: taken
	// later, it would close a second idle connection for this one.
	select {
	case <-l.idleNow:
	default:
	}
	l.closeIdle()
	if l.onFull != nil {
		l.onFull()
	}
	for {
		// A slot freed (by the close above, or by a client leaving) is
		// taken before anything else is closed.
		select {
		case l.slots <- struct{}{}:
			return wc, nil
		default:
		}
		select {
		case l.slots <- struct{}{}:
			return wc, nil
		case <-l.idleNow: // a busy connection went idle: its slot is wanted
			l.closeIdle()
		case <-l.done:
			_ = c.Close()
			return nil, net.ErrClosed
		}
	}
}

func (l *listener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// closeIdle closes one idle keep-alive connection, if there is one: its
// client reconnects when it has something to send, a new client is
// waiting now.
func (l *listener) closeIdle() {
	l.mu.Lock()
	var victim *watchedConn
	for c := range l.idle {
		victim = c
		break
	}
	delete(l.idle, victim)
	l.mu.Unlock()
	if victim != nil {
		_ = victim.Close()
	}
}

// setIdle records whether c waits idle for its next request.
func (l *listener) setIdle(c *watchedConn, idle bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if idle {
		l.idle[c] = struct{}{}
		select {
		case l.idleNow <- struct{}{}:
		default:
		}
	} else {
		delete(l.idle, c)
	}
}

// watchedConn is an accepted connection whose bytes read are parsed for
// their framing, and which gives its slot back when closed.
type watchedConn struct {
	net.Conn
	frames *framing
	l      *listener
	once   sync.Once
}

func (c *watchedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.frames.feed(p[:n])
	}
	return n, err
}

func (c *watchedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.setIdle(c, false)
		if c.l.slots != nil {
			<-c.l.slots
		}
	})
	return err
}

// connState tells the listener which connections sit idle.
func connState(c net.Conn, st http.ConnState) {
	if wc, ok := c.(*watchedConn); ok {
		wc.l.setIdle(wc, st == http.StateIdle)
	}
}

type framingKey struct{}

// connContext hands each connection's framing to its requests' contexts.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if wc, ok := c.(*watchedConn); ok {
		return context.WithValue(ctx, framingKey{}, wc.frames)
	}
	return ctx
}

// refuseAmbiguousFraming answers 400 and closes the connection for a
// request that came with both Content-Length and Transfer-Encoding, before
// any handler sees it.
func refuseAmbiguousFraming(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, _ := r.Context().Value(framingKey{}).(*framing)
		if f == nil || !f.next() {
			next.ServeHTTP(w, r)
			return
		}
		kind := problems[errs.CodeInvalid]
		body, _ := json.Marshal(problem{Type: ProblemTypeBase + kind.slug, Title: kind.title, Status: kind.status,
			Detail: "send Content-Length or Transfer-Encoding, not both", Instance: r.URL.Path})
		w.Header().Set("Connection", "close")
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(kind.status)
		_, _ = w.Write(body)
	})
}

// framing follows HTTP/1.1 request framing over one connection's bytes:
// each request's header (noting Content-Length and Transfer-Encoding), then
// its body, by length or by chunks, then the next request. For each header
// it queues whether it was ambiguous; the handler takes them in order, as
// the server serves a connection's requests in order. Bytes it cannot parse
// stop it (the server refuses them too and closes the connection).
type framing struct {
	mu      sync.Mutex
	state   frameState
	line    []byte
	started bool // the request line was read
	http10  bool // and it was HTTP/1.0, whose bodies are never chunked
	cl, te  bool
	length  int64
	left    int64
	queue   []bool
}

type frameState int

const (
	inHeader frameState = iota
	inBody
	inChunkSize
	inChunkData
	inChunkEnd
	inTrailer
	broken
)

// maxFrameLine bounds a header or chunk-size line the watcher buffers; the
// server refuses longer headers (MaxHeaderBytes).
const maxFrameLine = 64 << 10

// next takes the framing verdict of the next request: true when it was
// ambiguous.
func (f *framing) next() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.queue) == 0 {
		return false
	}
	v := f.queue[0]
	f.queue = f.queue[1:]
	return v
}

func (f *framing) feed(p []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(p) > 0 && f.state != broken {
		switch f.state {
		case inBody, inChunkData:
			n := min(int64(len(p)), f.left)
			p, f.left = p[n:], f.left-n
			if f.left == 0 {
				if f.state == inBody {
					f.state = inHeader
				} else {
					f.state, f.left = inChunkEnd, 2
				}
			}
		case inChunkEnd:
			n := min(int64(len(p)), f.left)
			p, f.left = p[n:], f.left-n
			if f.left == 0 {
				f.state = inChunkSize
			}
		default:
			i := bytes.IndexByte(p, '\n')
			if i < 0 {
				f.line = append(f.line, p...)
				p = nil
				if len(f.line) > maxFrameLine {
					f.state = broken
				}
				continue
			}
			f.line = append(f.line, p[:i]...)
			p = p[i+1:]
			line := bytes.TrimSuffix(f.line, []byte("\r"))
			f.lineDone(line)
			f.line = f.line[:0]
		}
	}
}

func (f *framing) lineDone(line []byte) {
	switch f.state {
	case inHeader:
		if !f.started {
			if len(line) == 0 {
				return // tolerate blank lines between requests
			}
			f.started = true
			f.http10 = bytes.HasSuffix(line, []byte(" HTTP/1.0"))
			return
		}
		if len(line) > 0 {
			name, value, ok := bytes.Cut(line, []byte(":"))
			if !ok {
				return
			}
			switch string(bytes.ToLower(bytes.TrimSpace(name))) {
			case "content-length":
				f.cl = true
				n, err := strconv.ParseInt(string(bytes.TrimSpace(value)), 10, 64)
				if err != nil || n < 0 {
					f.state = broken
					return
				}
				f.length = n
			case "transfer-encoding":
				f.te = true
			}
			return
		}
		// The header ends: queue its verdict, then follow its body.
		f.queue = append(f.queue, f.cl && f.te)
		switch {
		case f.te && !f.http10:
			f.state = inChunkSize
		case f.cl && f.length > 0:
			f.state, f.left = inBody, f.length
		}
		f.started, f.cl, f.te, f.length = false, false, false, 0
	case inChunkSize:
		size, _, _ := bytes.Cut(line, []byte(";"))
		n, err := strconv.ParseInt(string(bytes.TrimSpace(size)), 16, 64)
		switch {
		case err != nil || n < 0:
			f.state = broken
		case n == 0:
			f.state = inTrailer
		default:
			f.state, f.left = inChunkData, n
		}
	case inTrailer:
		if len(line) == 0 {
			f.state = inHeader
		}
	}
}
