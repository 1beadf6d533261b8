package roundtrip_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"gateway/psp"
	"gateway/psp/roundtrip"
)

func TestDoSendsTheRequest(t *testing.T) {
	type seen struct {
		method, path, query, auth, version, accept, ctype, idem string
		body                                                    map[string]any
	}
	got := make(chan seen, 2)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := seen{method: r.Method, path: r.URL.Path, query: r.URL.RawQuery, auth: r.Header.Get("Authorization"),
			version: r.Header.Get("X-Version"), accept: r.Header.Get("Accept"), ctype: r.Header.Get("Content-Type"),
			idem: r.Header.Get("Idempotency-Key")}
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &s.body)
		got <- s
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	defer ts.Close()
	header := http.Header{"Authorization": {"Basic x"}, "X-Version": {"2022-11-16"}}
	c := roundtrip.New(ts.URL+"/", nil, header)
	header.Set("Authorization", "changed") // the client keeps its own copy

	a, err := c.Do(t.Context(), roundtrip.Request{Op: "charge", Method: http.MethodPost, Path: "/v1/x?y=1",
		Body: map[string]any{"amount": 15000}, IdempotencyKey: "k-1"})
	if err != nil || a.Status != http.StatusCreated || string(a.Body) != `{"ok":true}` {
		t.Fatalf("Do = %+v, %v", a, err)
	}
	s := <-got
	if s.method != "POST" || s.path != "/v1/x" || s.query != "y=1" || s.auth != "Basic x" || s.version != "2022-11-16" ||
		s.accept != "application/json" || s.ctype != "application/json" || s.idem != "k-1" || s.body["amount"] != 15000.0 {
		t.Fatalf("the server saw %+v", s)
	}
	if _, err := c.Do(t.Context(), roundtrip.Request{Op: "lookup", Method: http.MethodGet, Path: "/v1/x"}); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s.ctype != "" || s.idem != "" || s.body != nil {
		t.Fatalf("a GET carried a body or key: %+v", s)
	}
}

// Every way a round trip can fail before an answer is read has its class.
func TestDoFailures(t *testing.T) {
	hang, arrived := make(chan struct{}), make(chan struct{})
	defer close(hang)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hang":
			close(arrived)
			select {
			case <-hang:
			case <-r.Context().Done():
			}
		case "/cut":
			// Promise a longer body than is sent, then close.
			w.Header().Set("Content-Length", "100")
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, `{"id":`)
			conn, _, _ := http.NewResponseController(w).Hijack()
			_ = conn.Close()
		case "/reset":
			conn, _, _ := http.NewResponseController(w).Hijack()
			if tc, ok := conn.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			_ = conn.Close()
		}
	}))
	defer ts.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String()
	ln.Close()

	cancelled, cancel := context.WithCancel(t.Context())
	go func() {
		// Give up once the server holds the request.
		<-arrived
		cancel()
	}()
	tests := []struct {
		name string
		c    *roundtrip.Client
		ctx  context.Context
		r    roundtrip.Request
		want psp.Class
	}{
		{"refused", roundtrip.New(refused, nil, nil), t.Context(), roundtrip.Request{Method: "POST", Path: "/"}, psp.NotProcessed},
		{"unmarshalable body", roundtrip.New(ts.URL, nil, nil), t.Context(), roundtrip.Request{Method: "POST", Path: "/", Body: func() {}}, psp.NotProcessed},
		{"bad method", roundtrip.New(ts.URL, nil, nil), t.Context(), roundtrip.Request{Method: "BAD METHOD", Path: "/"}, psp.NotProcessed},
		{"reset", roundtrip.New(ts.URL, nil, nil), t.Context(), roundtrip.Request{Method: "POST", Path: "/reset"}, psp.Unknown},
		{"body cut", roundtrip.New(ts.URL, nil, nil), t.Context(), roundtrip.Request{Method: "POST", Path: "/cut"}, psp.Unknown},
		{"caller gave up", roundtrip.New(ts.URL, nil, nil), cancelled, roundtrip.Request{Method: "POST", Path: "/hang"}, psp.Unknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.r.Op = "charge"
			_, err := tt.c.Do(tt.ctx, tt.r)
			var e *psp.Error
			if !asError(err, &e) || e.Class != tt.want || e.Op != "charge" {
				t.Fatalf("Do = %v, want class %s", err, tt.want)
			}
		})
	}
}

func asError(err error, e **psp.Error) bool {
	pe, ok := err.(*psp.Error)
	if ok {
		*e = pe
	}
	return ok
}

func TestAnswerIsBounded(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, strings.Repeat("x", roundtrip.MaxAnswer+10))
	}))
	defer ts.Close()
	a, err := roundtrip.New(ts.URL, nil, nil).Do(t.Context(), roundtrip.Request{Op: "lookup", Method: "GET", Path: "/"})
	if err != nil || len(a.Body) != roundtrip.MaxAnswer {
		t.Fatalf("read %d bytes, %v; want %d", len(a.Body), err, roundtrip.MaxAnswer)
	}
}

func TestStatusClass(t *testing.T) {
	tests := []struct {
		status int
		class  psp.Class
		ok     bool
	}{
		{200, 0, false}, {400, 0, false}, {401, 0, false}, {403, 0, false}, {404, 0, false},
		{408, psp.Unknown, true}, {409, psp.Unknown, true}, {429, psp.NotProcessed, true},
		{500, psp.Unknown, true}, {502, psp.Unknown, true}, {503, psp.Unknown, true},
	}
	for _, tt := range tests {
		if class, ok := roundtrip.StatusClass(tt.status); class != tt.class || ok != tt.ok {
			t.Errorf("StatusClass(%d) = %v, %v; want %v, %v", tt.status, class, ok, tt.class, tt.ok)
		}
	}
	e := roundtrip.Unreadable("lookup", roundtrip.Answer{Status: 502, Body: []byte("<html>")})
	if e.Class != psp.Unknown || e.Op != "lookup" || !strings.Contains(e.Error(), "502") {
		t.Fatalf("Unreadable = %v", e)
	}
}
