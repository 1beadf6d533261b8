package api

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/labstack/echo/v4"
)

// bodyUnreadable is a request body the client failed to deliver: cut short
// (the connection closed before Content-Length bytes came), too slow for
// the server's read timeout, or in broken chunked encoding. It is the
// client's doing, answered 400 (when the connection still takes an answer)
// and logged at INFO: it must not feed the server-error alerts.
type bodyUnreadable struct{ err error }

func (e *bodyUnreadable) Error() string { return "request body unreadable: " + e.err.Error() }
func (e *bodyUnreadable) Unwrap() error { return e.err }

// readBody reads the request's body up to limit bytes: a longer one is an
// *http.MaxBytesError (413), one that cannot be read a *bodyUnreadable.
func readBody(c echo.Context, limit int64) ([]byte, error) {
	raw, err := io.ReadAll(http.MaxBytesReader(c.Response(), c.Request().Body, limit))
	if err == nil {
		return raw, nil
	}
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		return nil, err
	}
	return nil, &bodyUnreadable{err: err}
}

// jsonSerializer writes answers as the payments package stores them:
// without HTML escaping (an answer is JSON, never embedded in HTML), so that
// a text holding <, > or & is answered at its own size.
type jsonSerializer struct{ echo.DefaultJSONSerializer }

func (jsonSerializer) Serialize(c echo.Context, v any, indent string) error {
	enc := json.NewEncoder(c.Response())
	enc.SetEscapeHTML(false)
	if indent != "" {
		enc.SetIndent("", indent)
	}
	return enc.Encode(v)
}
