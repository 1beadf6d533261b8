package localdb

import (
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"time"
)

// switchboard carries the group communication (gcomm) of a private
// cluster, so that one node can be cut off from the others.
//
// Galera nodes tell each other the port they listen on and then connect
// directly, so naming proxies in wsrep_cluster_address is not enough. The
// trick: node i listens on an address of its own, nodeIP_i:P_i, and its
// proxy on 127.0.0.1:P_i, the same port. A peer computes a node's address
// from the host it connected to (127.0.0.1) and the port the node
// announces (P_i): the proxy. Galera also binds its outgoing connections to
// the listen address, so every proxy knows which node a connection comes
// from by its source address, and cutting node i means refusing and
// resetting every connection to i's proxy and every connection coming from
// nodeIP_i.
type switchboard struct {
	mu    sync.Mutex
	byIP  map[string]int // node addresses
	cut   map[int]bool
	links map[*gcommLink]struct{}
}

// gcommLink is one proxied connection between two nodes.
type gcommLink struct {
	from, to       int // node indexes; from is -1 when the source is not a node
	client, server net.Conn
	once           sync.Once
}

func (l *gcommLink) reset() {
	l.once.Do(func() {
		for _, c := range []net.Conn{l.client, l.server} {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			_ = c.Close()
		}
	})
}

func newSwitchboard() *switchboard {
	return &switchboard{byIP: map[string]int{}, cut: map[int]bool{}, links: map[*gcommLink]struct{}{}}
}

// gcommProxy forwards 127.0.0.1:P to one node's nodeIP:P.
type gcommProxy struct {
	sb       *switchboard
	node     int
	ln       net.Listener
	upstream string
	wg       sync.WaitGroup
}

// proxy starts forwarding ln to node's upstream address.
func (sb *switchboard) proxy(node int, ln net.Listener, upstream string) *gcommProxy {
	p := &gcommProxy{sb: sb, node: node, ln: ln, upstream: upstream}
	p.wg.Add(1)
	go p.serve()
	return p
}

func (p *gcommProxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			// Out of file descriptors and the like: back off, as
			// net/http does.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		p.wg.Add(1)
		go p.handle(c)
	}
}

func (p *gcommProxy) handle(c net.Conn) {
	defer p.wg.Done()
	from := -1
	if host, _, err := net.SplitHostPort(c.RemoteAddr().String()); err == nil {
		p.sb.mu.Lock()
		if i, ok := p.sb.byIP[host]; ok {
			from = i
		}
		p.sb.mu.Unlock()
	}
	// Dial from 127.0.0.1, so that the node sees its peers at 127.0.0.1
	// and computes their proxies' addresses.
	d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}}
	s, err := d.Dial("tcp", p.upstream)
	if err != nil {
		(&gcommLink{client: c, server: c}).reset()
		return
	}
	l := &gcommLink{from: from, to: p.node, client: c, server: s}
	if !p.sb.add(l) {
		l.reset()
		return
	}
	defer p.sb.remove(l)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); pipe(l, s, c) }()
	go func() { defer wg.Done(); pipe(l, c, s) }()
	wg.Wait()
}

// pipe copies src to dst; when either side ends, both do.
func pipe(l *gcommLink, dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	l.reset()
}

func (p *gcommProxy) close() {
	_ = p.ln.Close()
	p.sb.mu.Lock()
	var mine []*gcommLink
	for l := range p.sb.links {
		if l.to == p.node {
			mine = append(mine, l)
		}
	}
	p.sb.mu.Unlock()
	for _, l := range mine {
		l.reset()
	}
	p.wg.Wait()
}

// add registers l unless one of its ends is cut off.
func (sb *switchboard) add(l *gcommLink) bool {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.cut[l.to] || (l.from >= 0 && sb.cut[l.from]) {
		return false
	}
	sb.links[l] = struct{}{}
	return true
}

func (sb *switchboard) remove(l *gcommLink) {
	sb.mu.Lock()
	delete(sb.links, l)
	sb.mu.Unlock()
}

// isolate cuts node off: its connections are reset, new ones refused.
func (sb *switchboard) isolate(node int) {
	sb.mu.Lock()
	sb.cut[node] = true
	var gone []*gcommLink
	for l := range sb.links {
		if l.to == node || l.from == node {
			gone = append(gone, l)
			delete(sb.links, l)
		}
	}
	sb.mu.Unlock()
	for _, l := range gone {
		l.reset()
	}
}

// heal lets node's connections through again.
func (sb *switchboard) heal(node int) {
	sb.mu.Lock()
	delete(sb.cut, node)
	sb.mu.Unlock()
}

func (sb *switchboard) isolated(node int) bool {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.cut[node]
}

// register records that node's gcomm traffic comes from ip.
func (sb *switchboard) register(node int, ip string) {
	sb.mu.Lock()
	sb.byIP[ip] = node
	sb.mu.Unlock()
}

// gcommPort returns a listener on 127.0.0.1:P for node's proxy, where P is
// also free on nodeIP for the node itself.
func gcommPort(nodeIP string) (net.Listener, error) {
	var last error
	for range 20 {
		ln, err := ListenLowPort("127.0.0.1")
		if err != nil {
			return nil, err
		}
		port := ln.Addr().(*net.TCPAddr).Port
		probe, err := net.Listen("tcp", net.JoinHostPort(nodeIP, strconv.Itoa(port)))
		if err == nil {
			probe.Close()
			return ln, nil
		}
		ln.Close()
		last = err
	}
	return nil, last
}
