package psp_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"gateway/psp"
)

// A request the PSP received on a kept-alive connection that closed before
// answering is sent again by Go's client on a new connection (an
// Idempotency-Key makes it replayable); when that dial fails, the error is
// "connection refused" although the PSP may have acted: unknown, not "not
// processed".
func TestADialErrorAfterAWrittenRequestIsUnknown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	received := make(chan struct{})
	go func() {
		defer close(received)
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		r := bufio.NewReader(conn)
		read := func() bool {
			req, err := http.ReadRequest(r)
			if err != nil {
				return false
			}
			_, err = io.Copy(io.Discard, req.Body)
			return err == nil
		}
		if !read() {
			return
		}
		_, _ = conn.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"))
		if !read() { // the PSP has it
			return
		}
		ln.Close() // nobody answers, and the retry's dial is refused
	}()
	client := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
	send := func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+ln.Addr().String()+"/charge", strings.NewReader(`{}`))
		req.Header.Set("Idempotency-Key", "gw-charge-1")
		res, err := client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, res.Body) // read whole: the connection is kept for the next request
		res.Body.Close()
		return nil
	}
	if err := send(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, sent := psp.Tracing(context.Background())
	err = send(ctx)
	<-received
	if err == nil {
		t.Fatal("the second send was answered")
	}
	plain := psp.TransportError("charge", err)
	if plain.Class != psp.NotProcessed {
		t.Skipf("the client did not resend on a new connection here (%v): nothing to judge", err)
	}
	if c, _ := psp.ClassOf(sent.Judge(plain)); !sent.Wrote() || c != psp.Unknown {
		t.Fatalf("judged %v (wrote %v), want unknown: the PSP received the request", c, sent.Wrote())
	}
	// A call that never wrote anything stays not processed.
	_, fresh := psp.Tracing(context.Background())
	if c, _ := psp.ClassOf(fresh.Judge(plain)); c != psp.NotProcessed {
		t.Fatalf("a dial error with nothing written judged %v", c)
	}
}
