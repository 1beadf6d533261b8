package psptest

import (
	"net"
	"testing"
)

// UnreachableURL returns an http URL on the loopback interface where nothing
// listens, for Harness.Unreachable: connecting to it is refused.
func UnreachableURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	return "http://" + addr
}
