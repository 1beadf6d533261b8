package psp_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"syscall"
	"testing"

	"gateway/psp"
)

func TestTransportError(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want psp.Class
	}{
		{"connection refused", &url.Error{Op: "Post", URL: "http://x", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}, psp.NotProcessed},
		{"name not resolved", &url.Error{Op: "Post", URL: "http://x", Err: &net.OpError{Op: "dial", Err: &net.DNSError{Err: "no such host", Name: "x"}}}, psp.NotProcessed},
		{"reset while reading", &url.Error{Op: "Post", URL: "http://x", Err: &net.OpError{Op: "read", Err: syscall.ECONNRESET}}, psp.Unknown},
		{"closed before answering", &url.Error{Op: "Post", URL: "http://x", Err: io.EOF}, psp.Unknown},
		{"deadline", &url.Error{Op: "Post", URL: "http://x", Err: context.DeadlineExceeded}, psp.Unknown},
		{"anything else", errors.New("tls: handshake failure"), psp.Unknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := psp.TransportError("charge", tt.err)
			if e.Class != tt.want || e.Op != "charge" || !errors.Is(e, tt.err) {
				t.Fatalf("TransportError(%v) = %v, want class %s wrapping the cause", tt.err, e, tt.want)
			}
			if class, ok := psp.ClassOf(e); !ok || class != tt.want {
				t.Fatalf("ClassOf = %v, %v", class, ok)
			}
		})
	}
}

// A real refused connection is classified NotProcessed.
func TestTransportErrorRealDial(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = http.Post("http://"+addr+"/v1/charges", "application/json", nil)
	if err == nil {
		t.Fatal("nothing listens, yet the request went through")
	}
	if e := psp.TransportError("charge", err); e.Class != psp.NotProcessed {
		t.Fatalf("TransportError(%v) = %s, want not_processed", err, e.Class)
	}
}

func TestClassOfUnclassified(t *testing.T) {
	for _, err := range []error{nil, psp.ErrNotFound, errors.New("x")} {
		if _, ok := psp.ClassOf(err); ok {
			t.Fatalf("ClassOf(%v) reported a class", err)
		}
	}
}
