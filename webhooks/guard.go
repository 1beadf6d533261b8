package webhooks

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// The SSRF guard. An endpoint URL is the merchant's to choose, and the
// gateway POSTs to it from inside the operator's network: a URL naming a
// loopback, private, link-local, unspecified or multicast address (or a
// name resolving to one) would let a merchant reach the operator's own
// services. Only public addresses are let through: global unicast (for
// IPv6, 2000::/3), outside every special-purpose range. The others are
// refused when an endpoint is registered and, because DNS may answer
// differently later, again at every connection: the dialer checks the
// address it is about to connect to, after resolution.
// Deliveries follow no redirect (a 3xx is a failed attempt), so a redirect
// cannot lead anywhere either. Networks listed in the allow list (a
// development machine's loopback, a test's) are let through.

// Resolver resolves host names; *net.Resolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Guard judges the addresses deliveries may reach.
type Guard struct {
	allow    []netip.Prefix
	resolver Resolver
	dialer   *net.Dialer
}

// NewGuard returns a guard letting through public addresses and those in
// allow; resolver resolves names (net.DefaultResolver when nil).
func NewGuard(allow []netip.Prefix, resolver Resolver) *Guard {
	if resolver == nil {
		resolver = net.DefaultResolver
	}
	g := &Guard{allow: allow, resolver: resolver}
	g.dialer = &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second, Control: g.control}
	return g
}

// ParseNetworks reads a comma-separated list of CIDR prefixes or addresses
// ("127.0.0.0/8,::1").
func ParseNetworks(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		if p, err := netip.ParsePrefix(f); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("%q is neither a CIDR prefix nor an address", f)
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// Loopback is the allow list of a development machine.
var Loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// ErrForbiddenAddress is an address the guard refuses.
var ErrForbiddenAddress = errors.New("webhooks: address not allowed")

// globalUnicast6 is IPv6's global unicast space: an IPv6 address outside it
// is never public. That refuses, whatever they embed, the IPv4-compatible
// (::/96, e.g. ::127.0.0.1) and IPv4-translated (::ffff:0:0:0/96)
// addresses some stacks route to the IPv4 address inside, unique local
// and discard-only addresses, and every range IPv6 may add later.
var globalUnicast6 = netip.MustParsePrefix("2000::/3")

// nonPublic are the special-purpose ranges no endpoint may reach besides
// those the net/netip predicates and globalUnicast6 rule out.
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // carrier-grade NAT
	netip.MustParsePrefix("169.254.0.0/16"),  // link-local (cloud metadata)
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation
	netip.MustParsePrefix("192.88.99.0/24"),  // 6to4 relay anycast
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // documentation
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation
	netip.MustParsePrefix("224.0.0.0/4"),     // multicast
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, broadcast
	netip.MustParsePrefix("2001::/23"),       // IETF protocol assignments (Teredo, which may embed anything, among them)
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("2002::/16"),       // 6to4 may embed anything
	netip.MustParsePrefix("3fff::/20"),       // documentation (RFC 9637)
}

// Check refuses an address that is not public, unless an allowed network
// holds it. Public is global unicast outside every special-purpose range.
func (g *Guard) Check(a netip.Addr) error {
	a = a.Unmap()
	for _, p := range g.allow {
		if p.Contains(a) {
			return nil
		}
	}
	if !public(a) {
		return fmt.Errorf("%w: %s is not a public address (loopback, private, link-local, multicast or reserved)", ErrForbiddenAddress, a)
	}
	return nil
}

// public reports whether a (unmapped) is a global unicast address outside
// every special-purpose range.
func public(a netip.Addr) bool {
	if !a.IsValid() || !a.IsGlobalUnicast() || a.IsPrivate() || a.Is6() && !globalUnicast6.Contains(a) {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(a) {
			return false
		}
	}
	return true
}

// CheckURL validates an endpoint URL: http or https, a host, no user
// information or fragment, at most 2048 characters, and every address its
// host resolves to allowed. The error says what is wrong, fit for a merchant.
func (g *Guard) CheckURL(ctx context.Context, raw string) error {
	if len(raw) > 2048 {
		return errors.New("must be at most 2048 characters")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return errors.New("is not a URL")
	}
	switch {
	case u.Scheme != "https" && u.Scheme != "http":
		return errors.New("must be an http:// or https:// URL")
	case u.Host == "" || u.Hostname() == "":
		return errors.New("must name a host")
	case u.User != nil:
		return errors.New("must not carry a user name or password")
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return errors.New("must not carry a fragment")
	}
	for _, c := range raw {
		if c <= ' ' || c > '~' {
			return errors.New("must be plain ASCII without spaces (percent-encode the rest)")
		}
	}
	if port := u.Port(); port != "" {
		if _, err := net.LookupPort("tcp", port); err != nil {
			return errors.New("has an invalid port")
		}
	}
	host := u.Hostname()
	if a, err := netip.ParseAddr(host); err == nil {
		if g.Check(a) != nil {
			return errors.New("must be a public address")
		}
		return nil
	}
	// A name's refusal says neither whether it resolves nor to what: the
	// gateway's resolver sees the operator's internal names, and an answer
	// naming what one resolves to would map that network for whoever asks.
	addrs, err := g.resolve(ctx, host)
	if err != nil {
		return errors.New("must resolve to a public address")
	}
	for _, a := range addrs {
		if g.Check(a) != nil {
			return errors.New("must resolve to a public address")
		}
	}
	return nil
}

func (g *Guard) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		return []netip.Addr{a}, nil
	}
	addrs, err := g.resolver.LookupNetIP(ctx, "ip", host)
	if err == nil && len(addrs) == 0 {
		err = fmt.Errorf("no address for %s", host)
	}
	return addrs, err
}

// DialContext resolves addr's host, refuses it when any address it
// resolves to is not allowed, and connects to the first that answers. The
// dialer's Control checks again the very address it connects to.
func (g *Guard) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	addrs, err := g.resolve(ctx, host)
	if err != nil {
		return nil, err
	}
	for _, a := range addrs {
		if err := g.Check(a); err != nil {
			return nil, err
		}
	}
	var last error
	for _, a := range addrs {
		c, err := g.dialer.DialContext(ctx, network, net.JoinHostPort(a.Unmap().String(), port))
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, last
}

// control runs just before the socket connects, on the resolved address.
func (g *Guard) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s", ErrForbiddenAddress, address)
	}
	return g.Check(ap.Addr())
}
