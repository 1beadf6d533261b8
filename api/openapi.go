package api

import (
	_ "embed"
	"net/http"

	"github.com/labstack/echo/v4"
)

// OpenAPI is the published contract of the public API (OpenAPI 3.1). Tests
// validate every response the suite produces against it, so it cannot drift.
//
//go:embed openapi.json
var OpenAPI []byte

func (s *Server) handleOpenAPI(c echo.Context) error {
	return c.Blob(http.StatusOK, "application/json", OpenAPI)
}
