package localdb

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// ListenLowPort listens on a random free port of ip below the kernel's
// ephemeral range. A port there can be closed (a killed server, a proxy
// during an outage) and bound again later without an outgoing connection
// having taken it meanwhile, which a port the kernel handed out from the
// ephemeral range cannot promise. It falls back to any free port.
func ListenLowPort(ip string) (net.Listener, error) {
	low := ephemeralLow()
	const floor = 20000
	if low-floor >= 2000 {
		for range 40 {
			port := floor + rand.IntN(low-floor)
			ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
			if err == nil {
				return ln, nil
			}
		}
	}
	return net.Listen("tcp", net.JoinHostPort(ip, "0"))
}

// ephemeralLow is the first port of the kernel's ephemeral range.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return n
}
