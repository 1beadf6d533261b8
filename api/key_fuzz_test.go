package api

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"gateway/errs"
	"gateway/idemkeys"
)

// FuzzKeyHeader: the key of a request, read from its header block as the
// HTTP server parses it, is what its one Idempotency-Key field names (the
// value byte for byte, or the content of a quoted Structured Field
// string), when that is 1–255 visible ASCII characters. Anything else (no
// field, two, an empty or overlong key, a byte outside visible ASCII,
// malformed quoting) is refused with CodeInvalidKey, whatever else the
// block holds.
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
		"Idempotency-Key: \"8e03978e-40d5-43e8-bc93-6894a57f9324\"",
		"Idempotency-Key: \"a\\\"b\\\\c\"",
		"Idempotency-Key: \"a\\b\"",
		"Idempotency-Key: \"abc",
		"Idempotency-Key: \"abc\";p=1",
		"Idempotency-Key: \"a\", \"b\"",
		"Idempotency-Key: \"\"",
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
		named, quotedOK := "", false
		if len(values) == 1 {
			named, quotedOK = namedKey(values[0])
		}
		want := len(values) == 1 && quotedOK && idemkeys.ValidateKey(named) == nil
		c := e.NewContext(r, httptest.NewRecorder())
		key, err := s.idempotencyKey(c, "")
		if err == nil && idemkeys.ValidateKey(key) != nil {
			err = &errs.Error{Code: errs.CodeInvalidKey} // as the flow refuses it
		}
		switch {
		case err == nil && !want:
			t.Fatalf("header %q: key %q accepted from fields %q", header, key, values)
		case err == nil && key != named:
			t.Fatalf("header %q: key %q, the field names %q", header, key, named)
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

// sfStringField is an RFC 8941 String as a whole field value: visible
// ASCII and spaces, \" and \\ the only escapes.
var sfStringField = regexp.MustCompile(`^"((?:[ !#-\[\]-~]|\\["\\])*)"$`)

// namedKey is the key a field value names, written apart from the code
// under test: the value, or a quoted one's unescaped content; ok is false
// for malformed quoting.
func namedKey(v string) (string, bool) {
	if !strings.HasPrefix(v, `"`) {
		return v, true
	}
	m := sfStringField.FindStringSubmatch(v)
	if m == nil {
		return "", false
	}
	return regexp.MustCompile(`\\(.)`).ReplaceAllString(m[1], "$1"), true
}
