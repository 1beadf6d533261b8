package api

import (
	"io"
	"net"
	"net/http"
	"testing"
)

// BenchmarkServer compares requests served by a plain http.Server with the
// gateway's (framing watched, connections capped): the cost of the checks.
func BenchmarkServer(b *testing.B) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, `{"status":"ok"}`) })
	for _, tc := range []struct {
		name  string
		serve func(ln net.Listener) *http.Server
	}{
		{"plain", func(ln net.Listener) *http.Server {
			srv := &http.Server{Handler: h}
			go func() { _ = srv.Serve(ln) }()
			return srv
		}},
		{"gateway", func(ln net.Listener) *http.Server {
			srv := NewHTTPServer(h, ServerOptions{})
			go func() { _ = srv.Serve(Listen(ln, ListenOptions{MaxConns: 1000})) }()
			return srv
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			srv := tc.serve(ln)
			defer srv.Close()
			url := "http://" + ln.Addr().String() + "/healthz"
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					res, err := client.Get(url)
					if err != nil {
						b.Error(err)
						return
					}
					_, _ = io.Copy(io.Discard, res.Body)
					_ = res.Body.Close()
				}
			})
		})
	}
}
