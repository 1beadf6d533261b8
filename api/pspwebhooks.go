package api

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"gateway/errs"
)

// NoticeReceiver settles payments and refunds from a PSP's notifications;
// notices.Notices is one. Receive's nil acknowledges the notification; its
// errors are *errs.Error (CodeNotFound, CodeNoticeRejected,
// CodeUnavailable: the PSP sends it again).
type NoticeReceiver interface {
	Receive(ctx context.Context, source string, header http.Header, body []byte) error
}

// maxNoticeBytes bounds a PSP notification's body: PSPs send whole objects.
const maxNoticeBytes = 1 << 20

// Anyone may post to /psp/*, and each notification costs the gateway a
// signature check and database reads or, for a PSP that does not sign (Toss),
// a question to the PSP, out of the quota real charges share. So each client
// address has a bucket of notifications, taken before the body is read;
// beyond it the request is answered 429 with Retry-After, which a PSP takes
// as "send it again later". A flood is not logged request by request: a
// refused notification has no access log line, and one line every
// noticeLogEvery says how many were refused since the last.

// Defaults of the PSP notifications' limit.
const (
	// DefaultNoticeRate is how many notifications per second one client
	// address may post in the long run (a PSP sends from a few addresses).
	DefaultNoticeRate = 20.0
	// DefaultNoticeBurst is how many it may post at once (a PSP's backlog
	// after an outage).
	DefaultNoticeBurst = 100
)

// noticeLogEvery is how often, at most, the refused notifications are logged.
const noticeLogEvery = 10 * time.Second

// noticeRefusals counts the notifications refused since the last log line.
type noticeRefusals struct {
	mu     sync.Mutex
	count  int
	logged time.Time
}

// refused counts one refusal and says how many to log now (0: not yet).
func (r *noticeRefusals) refused(now time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.count++
	if !r.logged.IsZero() && now.Sub(r.logged) < noticeLogEvery {
		return 0
	}
	n := r.count
	r.count, r.logged = 0, now
	return n
}

// limitNotices refuses a notification beyond its address's bucket.
func (s *Server) limitNotices(c echo.Context, source string) error {
	now := s.opts.Now()
	ok, wait := s.notices.allow(clientAddr(c), now)
	if ok {
		return nil
	}
	s.obs.RateLimited()
	noteOf(c).quiet = true
	if n := s.noticeRefusals.refused(now); n > 0 {
		s.log.WarnContext(c.Request().Context(), "PSP notifications refused: too many from one address", "source", source, "refused", n)
	}
	return &errs.Error{Code: codeRateLimited, RetryAfter: wait,
		Message: "too many notifications from this address; send them again after the Retry-After delay"}
}

// handlePSPWebhook receives the notifications of the PSP named source. No
// API key: the PSP's signature, or the PSP itself asked again, vouches for
// them. The work runs to its end even when the PSP stops waiting, since
// what it writes is a compare-and-set that a repeat finds done.
func (s *Server) handlePSPWebhook(source string) echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.opts.Notices == nil {
			return &errs.Error{Code: errs.CodeNotFound, Message: "notifications from " + source + " are not configured here"}
		}
		if err := s.limitNotices(c, source); err != nil {
			return err
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

// handleAccountWebhook receives the notifications of one configured PSP
// account (design §16), as handlePSPWebhook does for its source
// "accounts/NAME".
func (s *Server) handleAccountWebhook(c echo.Context) error {
	return s.handlePSPWebhook(AccountNoticeSource(c.Param("account")))(c)
}

// AccountNoticeSource is the notification source of the PSP account named account.
func AccountNoticeSource(account string) string { return "accounts/" + account }
