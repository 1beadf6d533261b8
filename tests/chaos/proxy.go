package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"gateway/mysql/localdb"
)

// faultProxy is a small TCP proxy that sits between the gateway and one of
// its dependencies (MariaDB, the fake PSP) and misbehaves on demand:
//
//   - latency: every chunk travelling back to the client waits a random time;
//   - resets: a chunk is not forwarded, both connections are reset instead;
//   - dropped responses: a request chunk is forwarded, and the connection is
//     reset when the answer comes back (the server acted, the client never
//     learns it: a lost COMMIT acknowledgement, for instance);
//   - down: the listener is closed (new connections are refused) and every
//     open connection is reset;
//   - stall: nothing moves in either direction until the stall ends (a
//     network partition, or a server that hangs); the bytes are delivered
//     afterwards, as TCP would after a partition heals;
//   - half-open: one connection in the middle of a transaction loses its
//     client side (reset, as a crashed host or a NAT that dropped the flow
//     leaves it) while its server side stays open and silent: the server
//     keeps the session, its transaction and its locks until it ends the
//     session itself (see halfopen.go).
//
// It always listens on the same address, also after an outage, so that the
// gateway's pool reconnects to it.
type faultProxy struct {
	name     string
	addr     string
	upstream string

	mu         sync.Mutex
	ln         net.Listener
	links      map[*link]struct{}
	faults     proxyFaults
	rng        *rand.Rand
	stallDepth int
	downDepth  int
	closed     bool
	changed    chan struct{} // closed and replaced on every change of stall, down or closed
	// stallAfter, when set, stalls the proxy right after it forwarded a
	// client chunk it matches (one shot): a reproduction's precise partition.
	stallAfter func([]byte) bool
	stalledBy  chan struct{} // closed when a stallAfter trigger fired
	// halfOpenTo, when set, receives the next link cut half-open (one shot).
	halfOpenTo chan *halfOpenCut

	wg    sync.WaitGroup
	stats proxyStats

	// sniff counts the MySQL error packets delivered to clients, by number.
	sniff     bool
	errMu     sync.Mutex
	errCounts map[uint16]int64
}

// proxyFaults are the per-chunk fault settings.
type proxyFaults struct {
	LatencyMin time.Duration `json:"latency_min"`
	LatencyMax time.Duration `json:"latency_max"`
	// ResetRate is the probability that a chunk (either direction) resets its connection instead of passing.
	ResetRate float64 `json:"reset_rate"`
	// DropResponseRate is the probability that a client chunk is delivered and
	// the connection reset before the answer reaches the client.
	DropResponseRate float64 `json:"drop_response_rate"`
}

// proxyStats counts what a proxy did.
type proxyStats struct {
	Conns            atomic.Int64
	Resets           atomic.Int64
	DroppedResponses atomic.Int64
	DelayedChunks    atomic.Int64
	Downs            atomic.Int64
	Stalls           atomic.Int64
	OutageResets     atomic.Int64
	HalfOpen         atomic.Int64
}

func (s *proxyStats) snapshot() map[string]int64 {
	return map[string]int64{
		"connections":       s.Conns.Load(),
		"resets":            s.Resets.Load(),
		"dropped_responses": s.DroppedResponses.Load(),
		"delayed_chunks":    s.DelayedChunks.Load(),
		"outages_down":      s.Downs.Load(),
		"stalls":            s.Stalls.Load(),
		"outage_resets":     s.OutageResets.Load(),
		"half_open":         s.HalfOpen.Load(),
	}
}

// link is one proxied connection.
type link struct {
	client, server net.Conn
	once           sync.Once
	dropNext       atomic.Bool
	scan           errScanner // of the server's stream, used by its pump alone
	// connID is the server's id of the session, read from its greeting by
	// the server's pump (greeted once it has).
	connID  atomic.Uint32
	greeted bool
	// inTx: the client began a transaction it has not ended (the client's
	// pump alone writes it).
	inTx bool
	// half is set when the client's side was cut half-open.
	half atomic.Pointer[halfOpenCut]
}

// reset closes both ends with RST, as a crashed peer or a middlebox would.
func (l *link) reset() {
	l.once.Do(func() {
		for _, c := range []net.Conn{l.client, l.server} {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			_ = c.Close()
		}
	})
}

// close closes both ends normally.
func (l *link) close() {
	l.once.Do(func() {
		_ = l.client.Close()
		_ = l.server.Close()
	})
}

// newFaultProxy listens on a fresh loopback port and forwards to upstream.
func newFaultProxy(name, upstream string, seed uint64) (*faultProxy, error) {
	ln, err := listenLowPort()
	if err != nil {
		return nil, fmt.Errorf("proxy %s: %w", name, err)
	}
	p := &faultProxy{
		name:     name,
		addr:     ln.Addr().String(),
		upstream: upstream,
		ln:       ln,
		links:    map[*link]struct{}{},
		rng:      rand.New(rand.NewPCG(seed, seed^0x5bd1e995)),
		changed:  make(chan struct{}),
	}
	p.wg.Add(1)
	go p.serve(ln)
	return p, nil
}

func (p *faultProxy) serve(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		p.wg.Add(1)
		go p.handle(c)
	}
}

func (p *faultProxy) handle(c net.Conn) {
	defer p.wg.Done()
	p.stats.Conns.Add(1)
	s, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
	if err != nil {
		(&link{client: c, server: nopConn{}}).reset()
		return
	}
	l := &link{client: c, server: s}
	p.mu.Lock()
	if p.closed || p.downDepth > 0 {
		p.mu.Unlock()
		l.reset()
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pump(l, c, s, false) }()
	go func() { defer wg.Done(); p.pump(l, s, c, true) }()
	wg.Wait()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// pump copies src to dst chunk by chunk, applying the faults.
func (p *faultProxy) pump(l *link, src, dst net.Conn, toClient bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if h := l.half.Load(); h != nil {
			if !toClient {
				return // the cut client's side: gone, the server's stays
			}
			// What the server says goes nowhere; reading on only notices
			// when the server ends the session.
			if err != nil {
				h.serverEnded()
				_ = src.Close()
				return
			}
			continue
		}
		if n > 0 {
			if toClient && !l.greeted {
				l.greeted = true
				l.connID.Store(greetingConnID(buf[:n]))
			}
			if !p.gate() {
				p.stats.OutageResets.Add(1)
				l.reset()
				return
			}
			reset, drop, delay := p.decide(toClient)
			if toClient && l.dropNext.Swap(false) {
				p.stats.DroppedResponses.Add(1)
				l.reset()
				return
			}
			if reset {
				p.stats.Resets.Add(1)
				l.reset()
				return
			}
			if delay > 0 {
				p.stats.DelayedChunks.Add(1)
				if !p.sleep(delay) {
					l.reset()
					return
				}
			}
			var cut *halfOpenCut
			if !toClient {
				// Both before the write: the answer may come back before
				// the write returns.
				if drop {
					l.dropNext.Store(true)
				}
				cut = p.prepareHalfOpen(l, buf[:n])
			}
			_, werr := dst.Write(buf[:n])
			if cut != nil {
				p.cutClient(l, cut)
				return
			}
			if werr != nil {
				if l.half.Load() != nil {
					continue // cut meanwhile: the server's side stays open
				}
				l.close()
				return
			}
			if toClient && p.sniff {
				l.scan.feed(buf[:n], p.countError)
			}
			if !toClient {
				p.maybeStallAfter(buf[:n])
			}
		}
		if err != nil {
			if l.half.Load() != nil {
				continue // the next read ends the server's side
			}
			l.close()
			return
		}
	}
}

// gate waits while the proxy is stalled; false when it is down or closed.
func (p *faultProxy) gate() bool {
	for {
		p.mu.Lock()
		dead, stalled, ch := p.closed || p.downDepth > 0, p.stallDepth > 0, p.changed
		p.mu.Unlock()
		if dead {
			return false
		}
		if !stalled {
			return true
		}
		<-ch
	}
}

// sleep waits d unless the proxy closes or goes down first.
func (p *faultProxy) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		p.mu.Lock()
		dead, ch := p.closed || p.downDepth > 0, p.changed
		p.mu.Unlock()
		if dead {
			return false
		}
		select {
		case <-t.C:
			return true
		case <-ch:
		}
	}
}

func (p *faultProxy) decide(toClient bool) (reset, drop bool, delay time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f := p.faults
	if f.ResetRate > 0 && p.rng.Float64() < f.ResetRate {
		return true, false, 0
	}
	if !toClient {
		return false, f.DropResponseRate > 0 && p.rng.Float64() < f.DropResponseRate, 0
	}
	if f.LatencyMax > 0 {
		delay = f.LatencyMin + time.Duration(p.rng.Int64N(int64(f.LatencyMax-f.LatencyMin)+1))
	}
	return false, false, delay
}

func (p *faultProxy) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *faultProxy) countError(code uint16) {
	p.errMu.Lock()
	defer p.errMu.Unlock()
	if p.errCounts == nil {
		p.errCounts = map[uint16]int64{}
	}
	p.errCounts[code]++
}

// mysqlErrors returns how many MySQL errors of each number the proxy
// delivered to its clients (sniffing proxies only).
func (p *faultProxy) mysqlErrors() map[uint16]int64 {
	p.errMu.Lock()
	defer p.errMu.Unlock()
	out := make(map[uint16]int64, len(p.errCounts))
	for k, v := range p.errCounts {
		out[k] = v
	}
	return out
}

// setFaults replaces the per-chunk fault settings.
func (p *faultProxy) setFaults(f proxyFaults) {
	p.mu.Lock()
	p.faults = f
	p.mu.Unlock()
}

// stall holds every byte until the returned function is called.
func (p *faultProxy) stall() (end func()) {
	p.mu.Lock()
	p.stallDepth++
	p.stats.Stalls.Add(1)
	p.notifyLocked()
	p.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(p.unstall)
	}
}

// down refuses new connections and resets the open ones until the returned
// function is called.
func (p *faultProxy) down() (end func()) {
	p.mu.Lock()
	p.downDepth++
	p.stats.Downs.Add(1)
	if p.downDepth == 1 && p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		// A half-open session's client is already gone; its server side is
		// what is being measured, and an outage cannot reach a peer that
		// left.
		if l.half.Load() == nil {
			links = append(links, l)
		}
	}
	p.notifyLocked()
	p.mu.Unlock()
	for _, l := range links {
		p.stats.OutageResets.Add(1)
		l.reset()
	}
	var once sync.Once
	return func() { once.Do(p.up) }
}

func (p *faultProxy) up() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.downDepth > 0 {
		p.downDepth--
	}
	p.notifyLocked()
	if p.downDepth > 0 || p.closed || p.ln != nil {
		return
	}
	// The port is outside the ephemeral range, so nobody else should take it
	// meanwhile; a few attempts cover a slow kernel.
	var err error
	for range 50 {
		var ln net.Listener
		if ln, err = net.Listen("tcp", p.addr); err == nil {
			p.ln = ln
			p.wg.Add(1)
			go p.serve(ln)
			return
		}
		p.mu.Unlock()
		time.Sleep(100 * time.Millisecond)
		p.mu.Lock()
		if p.closed || p.downDepth > 0 || p.ln != nil {
			return
		}
	}
	fmt.Fprintf(os.Stderr, "chaos: proxy %s could not listen on %s again: %v\n", p.name, p.addr, err)
}

// calm turns every fault off (no latency, resets, stall or outage) and
// listens again if it was down. Fault ends still pending become no-ops.
func (p *faultProxy) calm() {
	p.mu.Lock()
	p.faults = proxyFaults{}
	p.stallAfter = nil
	p.halfOpenTo = nil
	p.stallDepth = 0
	down := p.downDepth > 0 || p.ln == nil
	if down {
		p.downDepth = 1 // up() takes it to 0 and listens again
	}
	p.notifyLocked()
	p.mu.Unlock()
	if down {
		p.up()
	}
}

// armStallAfter makes the proxy stall right after it forwards the next client
// chunk match accepts. The returned channel is closed when that happened.
func (p *faultProxy) armStallAfter(match func([]byte) bool) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stallAfter = match
	p.stalledBy = make(chan struct{})
	return p.stalledBy
}

func (p *faultProxy) maybeStallAfter(chunk []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stallAfter == nil || !p.stallAfter(chunk) {
		return
	}
	p.stallAfter = nil
	p.stallDepth++
	p.stats.Stalls.Add(1)
	p.notifyLocked()
	close(p.stalledBy)
}

// unstall ends a stall started by armStallAfter.
func (p *faultProxy) unstall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stallDepth > 0 {
		p.stallDepth--
		p.notifyLocked()
	}
}

// close stops the proxy and resets every connection.
func (p *faultProxy) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.notifyLocked()
	p.mu.Unlock()
	for _, l := range links {
		l.reset()
	}
	p.wg.Wait()
}

// nopConn stands in for an upstream that could not be dialled.
type nopConn struct{ net.Conn }

func (nopConn) Close() error { return nil }

// listenLowPort listens on a free loopback port below the ephemeral
// range, so that it can be bound again after an outage or a kill.
func listenLowPort() (net.Listener, error) { return localdb.ListenLowPort("127.0.0.1") }

// lowPort returns a free port from listenLowPort, closed for a child to bind.
func lowPort() (string, error) {
	ln, err := listenLowPort()
	if err != nil {
		return "", err
	}
	addr := ln.Addr().String()
	return addr, ln.Close()
}
