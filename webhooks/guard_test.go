package webhooks_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"gateway/errs"
	"gateway/payments"
	"gateway/webhooks"
)

// fakeDNS answers names from a table; rebind, when set, answers a name's
// later look-ups with other addresses (DNS rebinding).
type fakeDNS struct {
	mu     sync.Mutex
	names  map[string][]netip.Addr
	rebind map[string][]netip.Addr
	asked  map[string]int
}

func (f *fakeDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.asked == nil {
		f.asked = map[string]int{}
	}
	f.asked[host]++
	if r, ok := f.rebind[host]; ok && f.asked[host] > 1 {
		return r, nil
	}
	if a, ok := f.names[host]; ok {
		return a, nil
	}
	return nil, errors.New("no such host")
}

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}

// By default, a URL reaching a loopback, private, link-local, unspecified
// or multicast address is refused at registration, by address or by a name
// resolving to one; public ones are taken.
func TestSSRFRefusedAtRegistration(t *testing.T) {
	t.Parallel()
	dns := &fakeDNS{names: map[string][]netip.Addr{
		"localhost.example": addrs("127.0.0.1"),
		"mixed.example":     addrs("93.184.215.14", "10.0.0.5"),
		"metadata.example":  addrs("169.254.169.254"),
		"shop.example":      addrs("93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"),
	}}
	g := webhooks.NewGuard(nil, dns)
	for _, c := range []struct {
		url string
		ok  bool
	}{
		{"https://shop.example/hooks", true},
		{"http://93.184.215.14:8443/hooks", true},
		{"http://127.0.0.1:8080/", false},
		{"http://[::1]/", false},
		{"http://[::ffff:127.0.0.1]/", false},
		{"http://10.1.2.3/", false},
		{"http://172.16.0.1/", false},
		{"http://192.168.1.1/", false},
		{"http://169.254.169.254/latest/meta-data/", false},
		{"http://[fe80::1]/", false},
		{"http://[fd00::1]/", false},
		{"http://0.0.0.0/", false},
		{"http://224.0.0.1/", false},
		{"http://100.64.0.1/", false},
		{"https://localhost.example/", false},
		{"https://mixed.example/", false},
		{"https://metadata.example/", false},
		{"https://nowhere.example/", false},
		{"ftp://shop.example/", false},
		{"https://user:pass@shop.example/", false},
		{"https://shop.example/#frag", false},
		{"https://shop.example/a b", false},
		{"/relative", false},
	} {
		t.Run(c.url, func(t *testing.T) {
			err := g.CheckURL(context.Background(), c.url)
			if (err == nil) != c.ok {
				t.Fatalf("CheckURL(%s) = %v, want ok %v", c.url, err, c.ok)
			}
		})
	}

	// Through the endpoint API the refusal is a 400-class error, nothing stored.
	e := newEnvGuard(t, webhooks.NewGuard(nil, dns))
	_, _, err := e.eps.Create(e.ctx, webhooks.EndpointRequest{MerchantID: e.merchant, URL: "https://localhost.example/", EventTypes: []string{"*"}})
	if errs.CodeOf(err) != errs.CodeInvalid {
		t.Fatalf("create to a name resolving to loopback: %v", err)
	}
	if n := e.count(`SELECT COUNT(*) FROM webhook_endpoints`); n != 0 {
		t.Fatal("a refused endpoint was stored")
	}
}

// Only global unicast addresses are public. IPv6 addresses that embed an
// IPv4 one, IPv4-compatible (::/96) and IPv4-translated (::ffff:0:0:0/96),
// are refused whatever they embed (some stacks reach the IPv4 address),
// as is everything outside IPv6's global unicast space; IPv4-mapped ones
// are judged by the IPv4 address they map.
func TestGuardAllowsOnlyGlobalUnicast(t *testing.T) {
	t.Parallel()
	g := webhooks.NewGuard(nil, nil)
	for _, c := range []struct {
		addr string
		ok   bool
	}{
		{"93.184.215.14", true},
		{"2606:2800:21f:cb07:6820:80da:af6b:8b2c", true},
		{"::ffff:93.184.215.14", true},
		{"::127.0.0.1", false},
		{"::7f00:1", false},
		{"::10.0.0.5", false},
		{"::93.184.215.14", false},
		{"::169.254.169.254", false},
		{"::ffff:0:127.0.0.1", false},
		{"::ffff:0:10.0.0.5", false},
		{"::ffff:0:93.184.215.14", false},
		{"::ffff:127.0.0.1", false},
		{"::ffff:169.254.169.254", false},
		{"::", false},
		{"::1", false},
		{"64:ff9b::7f00:1", false},
		{"100::1", false},
		{"fc00::1", false},
		{"fd12:3456::1", false},
		{"fec0::1", false},
		{"fe80::1", false},
		{"ff02::1", false},
		{"2001::7f00:1", false},
		{"2001:db8::1", false},
		{"3fff::1", false}, // documentation, RFC 9637
		{"2002:7f00:1::1", false},
		{"4000::1", false},
		{"192.0.2.1", false},
		{"198.51.100.1", false},
		{"203.0.113.1", false},
		{"255.255.255.255", false},
	} {
		t.Run(c.addr, func(t *testing.T) {
			err := g.Check(netip.MustParseAddr(c.addr))
			if (err == nil) != c.ok {
				t.Fatalf("Check(%s) = %v, want ok %v", c.addr, err, c.ok)
			}
			if err != nil && !errors.Is(err, webhooks.ErrForbiddenAddress) {
				t.Fatalf("Check(%s) = %v, not ErrForbiddenAddress", c.addr, err)
			}
		})
	}
	// By address and by name, at registration.
	dns := &fakeDNS{names: map[string][]netip.Addr{"compat.example": addrs("::127.0.0.1"), "translated.example": addrs("::ffff:0:a00:5")}}
	g = webhooks.NewGuard(nil, dns)
	for _, url := range []string{"http://[::127.0.0.1]:8080/", "http://[::ffff:0:127.0.0.1]/", "https://compat.example/", "https://translated.example/"} {
		if err := g.CheckURL(context.Background(), url); err == nil {
			t.Errorf("CheckURL(%s) accepted an address embedding a non-public IPv4 one", url)
		}
	}
}

// A refusal of a name says only that it must resolve to a public address:
// never what it resolves to, nor whether it resolves at all, which would
// let anyone map the names the operator's resolver knows.
func TestSSRFRefusalNamesNoAddress(t *testing.T) {
	t.Parallel()
	dns := &fakeDNS{names: map[string][]netip.Addr{
		"db.internal":      addrs("10.20.30.40"),
		"cache.internal":   addrs("fd00::abcd"),
		"metadata.example": addrs("169.254.169.254"),
		"mixed.example":    addrs("93.184.215.14", "192.168.7.7"),
	}}
	e := newEnvGuard(t, webhooks.NewGuard(nil, dns))
	var want string
	for _, host := range []string{"db.internal", "cache.internal", "metadata.example", "mixed.example", "nowhere.internal"} {
		_, _, err := e.eps.Create(e.ctx, webhooks.EndpointRequest{MerchantID: e.merchant, URL: "https://" + host + "/hooks", EventTypes: []string{"*"}})
		var pe *errs.Error
		if !errors.As(err, &pe) || pe.Code != errs.CodeInvalid {
			t.Fatalf("%s: %v, want invalid_request", host, err)
		}
		for _, a := range append(dns.names[host], netip.MustParseAddr("::ffff:10.20.30.40")) {
			if strings.Contains(pe.Message, a.String()) || strings.Contains(pe.Message, a.Unmap().String()) {
				t.Errorf("%s: the refusal %q names the address %s", host, pe.Message, a)
			}
		}
		if !strings.Contains(pe.Message, "must resolve to a public address") {
			t.Errorf("%s: the refusal %q does not say it must resolve to a public address", host, pe.Message)
		}
		if want == "" {
			want = strings.ReplaceAll(pe.Message, host, "HOST")
		}
		if got := strings.ReplaceAll(pe.Message, host, "HOST"); got != want {
			t.Errorf("%s: the refusal %q tells this name from another (%q)", host, got, want)
		}
	}
	if n := e.count(`SELECT COUNT(*) FROM webhook_endpoints`); n != 0 {
		t.Fatalf("%d refused endpoints stored", n)
	}
}

// At delivery, the dialer checks the address it connects to: a name that
// resolved to a public address at registration and to loopback later
// (DNS rebinding) is refused, and the loopback server never hears of it.
func TestSSRFRefusedAtDialAfterRebinding(t *testing.T) {
	t.Parallel()
	var hit atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hit.Add(1) }))
	t.Cleanup(target.Close)
	port := target.URL[strings.LastIndex(target.URL, ":")+1:]
	dns := &fakeDNS{
		names:  map[string][]netip.Addr{"rebind.example": addrs("93.184.215.14")},
		rebind: map[string][]netip.Addr{"rebind.example": addrs("127.0.0.1")},
	}
	e := newEnvGuard(t, webhooks.NewGuard(nil, dns))
	e.endpoint("http://rebind.example:" + port + "/")
	e.events(1, payments.EventPaymentSucceeded)
	if err := e.dispatcher(webhooks.Config{}).RunOnce(e.ctx); err != nil {
		t.Fatal(err)
	}
	if hit.Load() != 0 {
		t.Fatal("the delivery reached a loopback server")
	}
	var lastErr string
	if err := e.dbx.GetContext(e.ctx, &lastErr, `SELECT last_error FROM webhook_deliveries WHERE status = 'pending' AND attempts = 1`); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(lastErr, "not a public address") {
		t.Fatalf("last_error %q does not say why", lastErr)
	}
}

// A redirect is not followed: an endpoint (allowed, on 127.0.0.2) that
// redirects to a loopback service leaves that service untouched, and the
// attempt counts as failed with the 3xx.
func TestSSRFRedirectNotFollowed(t *testing.T) {
	t.Parallel()
	var hit atomic.Int64
	inner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { hit.Add(1) }))
	t.Cleanup(inner.Close)
	outer := listenOn(t, "127.0.0.2:0", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, inner.URL+"/admin", http.StatusTemporaryRedirect)
	}))
	e := newEnv(t, netip.MustParsePrefix("127.0.0.2/32"))
	// The inner service itself cannot be registered.
	if _, _, err := e.eps.Create(e.ctx, webhooks.EndpointRequest{MerchantID: e.merchant, URL: inner.URL, EventTypes: []string{"*"}}); errs.CodeOf(err) != errs.CodeInvalid {
		t.Fatalf("registering a loopback URL: %v", err)
	}
	e.endpoint(outer.URL)
	e.events(1, payments.EventPaymentSucceeded)
	if err := e.dispatcher(webhooks.Config{}).RunOnce(e.ctx); err != nil {
		t.Fatal(err)
	}
	if hit.Load() != 0 {
		t.Fatal("the redirect was followed to a loopback service")
	}
	if n := e.count(`SELECT COUNT(*) FROM webhook_deliveries WHERE status = 'pending' AND last_http_status = 307`); n != 1 {
		t.Fatal("the redirect is not a failed attempt")
	}
}

// Even a guard's own dialer refuses a disallowed address it is handed directly.
func TestGuardDialRefusesLoopback(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(srv.Close)
	g := webhooks.NewGuard(nil, nil)
	_, err := g.DialContext(context.Background(), "tcp", strings.TrimPrefix(srv.URL, "http://"))
	if !errors.Is(err, webhooks.ErrForbiddenAddress) {
		t.Fatalf("dial loopback: %v", err)
	}
	allowed := webhooks.NewGuard(webhooks.Loopback, nil)
	c, err := allowed.DialContext(context.Background(), "tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatalf("dial loopback when allowed: %v", err)
	}
	c.Close()
}
