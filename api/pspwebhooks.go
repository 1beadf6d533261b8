package api

import (
	"context"
	"net/http"

	"github.com/labstack/echo/v4"

	"gateway/errs"
)

// NoticeReceiver settles payments and refunds from a PSP's notifications;
// payments.Notices is one. Receive's nil acknowledges the notification; its
// errors are *errs.Error (CodeNotFound, CodeNoticeRejected,
// CodeUnavailable: the PSP sends it again).
type NoticeReceiver interface {
	Receive(ctx context.Context, source string, header http.Header, body []byte) error
}

// maxNoticeBytes bounds a PSP notification's body: PSPs send whole objects.
const maxNoticeBytes = 1 << 20

// handlePSPWebhook receives the notifications of the PSP named source. No
// API key: the PSP's signature, or the PSP itself asked again, vouches for
// them. The work runs to its end even when the PSP stops waiting, since
// what it writes is a compare-and-set that a repeat finds done.
func (s *Server) handlePSPWebhook(source string) echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.opts.Notices == nil {
			return &errs.Error{Code: errs.CodeNotFound, Message: "notifications from " + source + " are not configured here"}
		}
		raw, err := readBody(c, maxNoticeBytes)
		if err != nil {
			return err // *http.MaxBytesError → 413, *bodyUnreadable → 400
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request().Context()), s.opts.FlowTimeout)
		defer cancel()
		if err := s.opts.Notices.Receive(ctx, source, c.Request().Header, raw); err != nil {
			return err
		}
		return c.JSON(http.StatusOK, map[string]bool{"received": true})
	}
}
