package api

import (
	_ "embed"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"gateway/errs"
	"gateway/versions"
)

// OpenAPI is the published contract of the public API (OpenAPI 3.1) in
// the latest version. Tests validate every response the suite produces
// against it, so it cannot drift.
//
//go:embed openapi.json
var OpenAPI []byte

// openAPIByVersion is the document of every version, made once.
var openAPIByVersion = func() map[versions.Version][]byte {
	out := make(map[versions.Version][]byte, len(versions.All))
	for _, v := range versions.All {
		doc, err := versions.Document(OpenAPI, v)
		if err != nil {
			panic(fmt.Sprintf("api: the OpenAPI document of %s: %v", v, err))
		}
		out[v] = doc
	}
	return out
}()

// OpenAPIOf is the document of version v (nil for a version the gateway
// does not render).
func OpenAPIOf(v versions.Version) []byte { return openAPIByVersion[v] }

// handleOpenAPI answers the document of the version the request names
// (Gateway-Version, or ?version=), the latest when it names none.
func (s *Server) handleOpenAPI(c echo.Context) error {
	v := versions.Latest
	name := c.QueryParam("version")
	if h := c.Request().Header.Get(versions.Header); name == "" && h != "" {
		name = h
	}
	if name != "" {
		p, err := versions.Parse(name)
		if err != nil {
			return &errs.Error{Code: errs.CodeInvalid, Message: err.Error(),
				Fields: []errs.FieldError{{Field: "version", Reason: "must name an API version of this gateway"}}}
		}
		v = p
	}
	c.Response().Header().Set(versions.Header, string(v))
	return c.Blob(http.StatusOK, "application/json", openAPIByVersion[v])
}
