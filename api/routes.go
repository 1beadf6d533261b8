package api

import "github.com/labstack/echo/v4"

// routes is the whole public API.
func (s *Server) routes(e *echo.Echo) {
	e.GET("/healthz", s.handleHealthz)
	e.GET("/readyz", s.handleReadyz)
	e.GET("/openapi.json", s.handleOpenAPI)
	if s.opts.Metrics != nil {
		e.GET("/metrics", echo.WrapHandler(s.opts.Metrics))
	}

	auth := e.Group("", s.authenticate, s.rateLimit)
	auth.POST("/payments", s.handleCreatePayment)
	auth.GET("/payments", s.handleFindPayment)
	auth.GET("/payments/:id", s.handleGetPayment)
}
