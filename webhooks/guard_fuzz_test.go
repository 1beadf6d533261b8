package webhooks

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// refusedRanges are the addresses no delivery may reach, written down apart
// from the guard: the entries of IANA's IPv4 and IPv6 special-purpose
// address registries that are not globally reachable, multicast, and the
// IPv6 ranges that embed an IPv4 address or that some stack routes as one
// (IPv4-compatible ::/96, IPv4-translated ::ffff:0:0:0/96, NAT64, 6to4,
// Teredo). An IPv4-mapped address is judged by the IPv4 address inside.
var refusedRanges = func() []netip.Prefix {
	var out []netip.Prefix
	for _, p := range []string{
		"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
		"192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15",
		"198.51.100.0/24", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
		"::/96", "::ffff:0:0:0/96", "64:ff9b::/96", "64:ff9b:1::/48", "100::/64", "2001::/23",
		"2001:db8::/32", "2002::/16", "3fff::/20", "5f00::/16", "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8",
	} {
		out = append(out, netip.MustParsePrefix(p))
	}
	return out
}()

// refused reports whether a lies in a refused range; its zone, if any,
// changes nothing.
func refused(a netip.Addr) bool {
	a = a.WithZone("").Unmap()
	for _, p := range refusedRanges {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// errWouldConnect stops a dial the guard let through just before the
// socket connects: the fuzz targets send nothing anywhere.
var errWouldConnect = errors.New("the guard let the connection through")

// fuzzGuard is a guard over numericDNS whose dialer never connects; dialed
// records each address its control let through.
func fuzzGuard(allow []netip.Prefix, dialed *[]string) *Guard {
	g := NewGuard(allow, numericDNS{})
	g.dialer.Control = func(network, address string, c syscall.RawConn) error {
		if err := g.control(network, address, c); err != nil {
			return err
		}
		*dialed = append(*dialed, address)
		return errWouldConnect
	}
	return g
}

// numericDNS answers as a C library's resolver may: a host that inet_aton
// reads (127.1, 0x7f000001, 017700000001; a trailing dot dropped) is that
// IPv4 address, a few names have fixed answers, and nothing else resolves.
type numericDNS struct{}

var dnsNames = map[string][]netip.Addr{
	"public.example":   {netip.MustParseAddr("93.184.215.14"), netip.MustParseAddr("2606:2800:21f:cb07:6820:80da:af6b:8b2c")},
	"internal.example": {netip.MustParseAddr("10.0.0.1")},
	"mixed.example":    {netip.MustParseAddr("93.184.215.14"), netip.MustParseAddr("127.0.0.1")},
	"mapped.example":   {netip.MustParseAddr("::ffff:169.254.169.254")},
}

func (numericDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := inetAton(strings.TrimSuffix(host, ".")); ok {
		return []netip.Addr{a}, nil
	}
	if a, ok := dnsNames[strings.ToLower(strings.TrimSuffix(host, "."))]; ok {
		return a, nil
	}
	return nil, errors.New("no such host")
}

// inetAton reads s as inet_aton does: one to four parts, each decimal,
// octal (a leading 0) or hexadecimal (0x), the last filling the bytes left.
func inetAton(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var n uint64
	for i, p := range parts {
		base := 10
		switch {
		case len(p) > 2 && (p[:2] == "0x" || p[:2] == "0X"):
			p, base = p[2:], 16
		case len(p) > 1 && p[0] == '0':
			p, base = p[1:], 8
		}
		if p == "" || p[0] == '+' || p[0] == '-' {
			return netip.Addr{}, false
		}
		v, err := strconv.ParseUint(p, base, 32)
		if err != nil {
			return netip.Addr{}, false
		}
		if i < len(parts)-1 {
			if v > 255 {
				return netip.Addr{}, false
			}
			n = n<<8 | v
			continue
		}
		bits := 8 * (5 - len(parts))
		if v >= 1<<bits {
			return netip.Addr{}, false
		}
		n = n<<bits | v
	}
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), true
}

// spellings writes a as the host of a URL in every way that means it (to
// url.Parse, to net/netip or to a C resolver).
func spellings(a netip.Addr, zone string) []string {
	if a.Is4() {
		b := a.As4()
		n := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
		d := fmt.Sprintf("%d.%d.%d.%d", b[0], b[1], b[2], b[3])
		var pct strings.Builder
		for _, c := range []byte(d) {
			fmt.Fprintf(&pct, "%%%02X", c)
		}
		return []string{
			d, d + ".", d + ":443", strconv.FormatUint(uint64(n), 10), fmt.Sprintf("0x%08x", n), fmt.Sprintf("0X%X", n),
			fmt.Sprintf("0%o", n), fmt.Sprintf("0%o.0%o.0%o.0%o", b[0], b[1], b[2], b[3]),
			fmt.Sprintf("0x%x.0x%x.0x%x.0x%x", b[0], b[1], b[2], b[3]),
			fmt.Sprintf("%d.%d.%d", b[0], b[1], n&0xffff), fmt.Sprintf("%d.%d", b[0], n&0xffffff),
			pct.String(), "[::ffff:" + d + "]", fmt.Sprintf("[::ffff:%x:%x]", n>>16, n&0xffff),
			"[0:0:0:0:0:ffff:" + d + "]", "[::" + d + "]", "[::ffff:0:" + d + "]", "[64:ff9b::" + d + "]",
			fmt.Sprintf("[2002:%x:%x::1]", n>>16, n&0xffff), "[::ffff:" + d + "%25" + url.PathEscape(zone) + "]",
		}
	}
	b := a.As16()
	var full strings.Builder
	for i := 0; i < 16; i += 2 {
		if i > 0 {
			full.WriteByte(':')
		}
		fmt.Fprintf(&full, "%02x%02x", b[i], b[i+1])
	}
	s := a.String()
	return []string{
		"[" + s + "]", "[" + strings.ToUpper(s) + "]", "[" + full.String() + "]", "[" + s + "]:8443",
		"[" + s + "%25" + url.PathEscape(zone) + "]",
		fmt.Sprintf("[%s:%d.%d.%d.%d]", full.String()[:29], b[12], b[13], b[14], b[15]),
	}
}

// FuzzGuardAddress: the guard never lets a delivery reach an address in a
// refused range, however the address is spelled: as a dotted quad, one
// number in decimal, octal or hexadecimal, fewer parts, a trailing dot,
// percent-encoded, IPv4-mapped, -compatible or -translated, inside NAT64
// or 6to4, expanded, in capitals, with a zone. Registration (CheckURL),
// the address check (Check), the dialer (DialContext) and its last look at
// the socket's address (control) each refuse it; with the loopback allow
// list, only loopback gets through besides.
func FuzzGuardAddress(f *testing.F) {
	for _, s := range []string{
		"127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1", "0.0.0.0",
		"224.0.0.1", "255.255.255.255", "192.0.2.1", "198.18.0.1", "93.184.215.14", "8.8.8.8",
		"::1", "::", "fe80::1", "fd00::1", "fec0::1", "ff02::1", "2001:db8::1", "2001::1", "2002:7f00:1::1",
		"64:ff9b::7f00:1", "100::1", "2606:2800:21f:cb07:6820:80da:af6b:8b2c", "3fff::1", "5f00::1",
	} {
		a := netip.MustParseAddr(s)
		f.Add(a.AsSlice(), "eth0")
	}
	var dialed []string
	strict := fuzzGuard(nil, &dialed)
	loopback := fuzzGuard(Loopback, &dialed)
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, raw []byte, zone string) {
		var a netip.Addr
		if len(raw) <= 4 {
			var b [4]byte
			copy(b[:], raw)
			a = netip.AddrFrom4(b)
		} else {
			var b [16]byte
			copy(b[:], raw)
			a = netip.AddrFrom16(b)
		}
		if !refused(a) {
			return
		}
		for name, g := range map[string]*Guard{"strict": strict, "loopback allowed": loopback} {
			if name != "strict" && loopbackAllowed(a) {
				continue
			}
			if g.Check(a) == nil {
				t.Fatalf("%s guard: Check admits %s", name, a)
			}
			if g.control("tcp", netip.AddrPortFrom(a, 443).String(), nil) == nil {
				t.Fatalf("%s guard: control admits %s", name, a)
			}
			for _, host := range spellings(a, zone) {
				if name != "strict" && slices.ContainsFunc(meanings(hostOf(host)), loopbackAllowed) {
					continue // [::0.0.0.1] is ::1 too
				}
				if err := g.CheckURL(ctx, "https://"+host+"/hooks"); err == nil {
					t.Fatalf("%s guard: CheckURL admits https://%s/hooks, which is %s", name, host, a)
				}
				u, err := url.Parse("https://" + host + "/")
				if err != nil {
					continue
				}
				dialed = dialed[:0]
				if _, err := g.DialContext(ctx, "tcp", dialAddress(u)); errors.Is(err, errWouldConnect) {
					t.Fatalf("%s guard: the dialer connects to %v for https://%s/, which is %s", name, dialed, host, a)
				}
			}
		}
	})
}

// FuzzGuardURL: whatever URL a merchant registers, the guard admits it
// only when every address its host can mean is outside the refused ranges
// (the address it spells to net/netip or to inet_aton, or what DNS
// answers), and the dialer, given any URL's address, connects only to
// such an address.
func FuzzGuardURL(f *testing.F) {
	for _, s := range []string{
		"https://public.example/hooks", "https://internal.example/", "https://mixed.example/", "https://mapped.example/",
		"http://127.0.0.1:8080/", "http://0177.0.0.1/", "http://2130706433/", "http://0x7f.1/", "http://127.1./",
		"http://[::1]/", "http://[::ffff:127.0.0.1]/", "http://[::127.0.0.1]/", "http://[fe80::1%25eth0]/",
		"http://[::ffff:0:7f00:1]/", "https://93.184.215.14:8443/hooks", "http://%31%32%37.0.0.1/",
		"http://user@127.0.0.1/", "http://public.example#@127.0.0.1/", "http://127.0.0.1\\@public.example/",
		"http://public.example:80@127.0.0.1/", "http://[2606:2800:21f:cb07:6820:80da:af6b:8b2c]/",
		"HTTP://PUBLIC.EXAMPLE./", "http://public.example:0/", "http://10.0.0.1.nip.io/",
	} {
		f.Add(s)
	}
	var dialed []string
	g := fuzzGuard(nil, &dialed)
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, raw string) {
		u, perr := url.Parse(raw)
		if g.CheckURL(ctx, raw) == nil {
			if perr != nil {
				t.Fatalf("admitted %q, which url.Parse refuses: %v", raw, perr)
			}
			for _, a := range meanings(u.Hostname()) {
				if refused(a) {
					t.Fatalf("admitted %q, whose host %q can mean %s", raw, u.Hostname(), a)
				}
			}
		}
		if perr != nil || u.Host == "" {
			return
		}
		dialed = dialed[:0]
		if _, err := g.DialContext(ctx, "tcp", dialAddress(u)); errors.Is(err, errWouldConnect) {
			for _, d := range dialed {
				ap, err := netip.ParseAddrPort(d)
				if err != nil || refused(ap.Addr()) {
					t.Fatalf("%q: the dialer connects to %s", raw, d)
				}
			}
		}
	})
}

// meanings are the addresses host can name: as net/netip reads it
// (brackets and zone allowed), as inet_aton reads it, and as DNS answers.
func meanings(host string) []netip.Addr {
	var out []netip.Addr
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		out = append(out, a)
	}
	for _, h := range []string{host, strings.TrimSuffix(host, ".")} {
		if a, ok := inetAton(h); ok {
			out = append(out, a)
		}
	}
	if as, err := (numericDNS{}).LookupNetIP(context.Background(), "ip", host); err == nil {
		out = append(out, as...)
	}
	return out
}

// dialAddress is the address an HTTP client dials for u.
func dialAddress(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80"}[strings.ToLower(u.Scheme)]
		if port == "" {
			port = "443"
		}
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// hostOf is the host of a URL's authority host[:port].
func hostOf(authority string) string {
	u, err := url.Parse("https://" + authority + "/")
	if err != nil {
		return authority
	}
	return u.Hostname()
}

func loopbackAllowed(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range Loopback {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
