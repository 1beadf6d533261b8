package api

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"gateway/errs"
	"gateway/idemkeys"
)

// FuzzKeyHeader: the key of a request, read from its header block as the
// HTTP server parses it, is its one Idempotency-Key field's value, byte
// for byte, when that value is 1–255 visible ASCII characters. Anything
// else (no field, two, an empty or overlong value, a byte outside visible
// ASCII) is refused with CodeInvalidKey, whatever else the block holds.
func FuzzKeyHeader(f *testing.F) {
	for _, h := range []string{
		"Idempotency-Key: 550e8400-e29b-41d4-a716-446655440000",
		"idempotency-key: k",
		"IDEMPOTENCY-KEY:k\r\nIdempotency-Key: k",
		"Idempotency-Key: \"abc\"",
		"Idempotency-Key:",
		"Idempotency-Key: a b",
		"Idempotency-Key: \t k \t",
		"Idempotency-Key: é",
		"Idempotency-Key: " + strings.Repeat("k", 256),
		"Idempotency-Key: k\r\n continued",
		"X-Idempotency-Key: k",
		"Idempotency-Key : k",
		"Idempotency-Key: a,b",
		"",
	} {
		f.Add(h)
	}
	s := &Server{obs: noObserver{}}
	e := echo.New()
	f.Fuzz(func(t *testing.T, header string) {
		r, err := http.ReadRequest(bufio.NewReader(strings.NewReader(
			"POST /payments HTTP/1.1\r\nHost: gateway\r\n" + header + "\r\n\r\n")))
		if err != nil {
			return // the server answers 400 before any handler runs
		}
		values := r.Header.Values("Idempotency-Key")
		want := len(values) == 1 && idemkeys.ValidateKey(values[0]) == nil
		c := e.NewContext(r, httptest.NewRecorder())
		key, err := s.idempotencyKey(c, "")
		if err == nil && idemkeys.ValidateKey(key) != nil {
			err = &errs.Error{Code: errs.CodeInvalidKey} // as the flow refuses it
		}
		switch {
		case err == nil && !want:
			t.Fatalf("header %q: key %q accepted from fields %q", header, key, values)
		case err == nil && key != values[0]:
			t.Fatalf("header %q: key %q, the field holds %q", header, key, values[0])
		case err != nil && want:
			t.Fatalf("header %q: field %q refused: %v", header, values[0], err)
		case err != nil && errs.CodeOf(err) != errs.CodeInvalidKey:
			t.Fatalf("header %q refused with %v, want %s", header, err, errs.CodeInvalidKey)
		}
		for i := 0; err == nil && i < len(key); i++ {
			if key[i] <= ' ' || key[i] > '~' {
				t.Fatalf("header %q: key %q holds byte %#x", header, key, key[i])
			}
		}
	})
}
