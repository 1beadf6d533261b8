package api

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"gateway/errs"
	"gateway/listings"
	"gateway/payments"
	"gateway/versions"
)

// Lister answers the merchant's listings; listings.Listings is one.
type Lister interface {
	// Payments and Refunds return a page of q.MerchantID's objects, newest
	// first, or an *errs.Error (CodeInvalid for a bad query or cursor,
	// CodeNotFound for a refunds listing of an unknown payment).
	Payments(ctx context.Context, q listings.Query) (listings.Page[payments.Payment], error)
	Refunds(ctx context.Context, q listings.Query) (listings.Page[payments.Refund], error)
	// Events returns a page of q.MerchantID's events, oldest first, or an
	// *errs.Error (CodeInvalid for a bad query or cursor); Event one of
	// the merchant's events, or CodeNotFound.
	Events(ctx context.Context, q listings.EventQuery) (listings.Page[payments.Event], error)
	Event(ctx context.Context, merchantID, id string) (payments.Event, error)
}

// createRefundBody is the POST /payments/{id}/refunds body; every field is
// optional (no amount refunds the whole refundable remainder), and none is
// ever null ({"amount": null} is refused, not read as the remainder).
type createRefundBody struct {
	Amount   *int64            `json:"amount,omitzero"`
	Reason   *string           `json:"reason,omitzero"`
	Metadata map[string]string `json:"metadata,omitzero"`
}

func (s *Server) handleCreateRefund(c echo.Context) error {
	key, err := s.idempotencyKey(c, "a UUID is a good choice")
	if err != nil {
		return err
	}
	var body createRefundBody
	if err := s.decodeBody(c, &body); err != nil {
		return err
	}
	req := payments.RefundRequest{
		MerchantID: merchantOf(c).ID, PaymentID: c.Param("id"), IdempotencyKey: key,
		Amount: body.Amount, Metadata: body.Metadata,
	}
	if body.Reason != nil {
		req.Reason = *body.Reason
	}
	out, err := s.svc.CreateRefund(c.Request().Context(), req)
	if err != nil {
		return err
	}
	if out.Response.Status == http.StatusCreated || out.Response.Status == http.StatusAccepted {
		c.Response().Header().Set(echo.HeaderLocation, "/refunds/"+out.SubjectID)
	}
	if out.Replayed {
		c.Response().Header().Set("Idempotent-Replayed", "true")
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	answer, err := storedAnswer(c, versions.KindRefund, out)
	if err != nil {
		return err
	}
	return c.Blob(out.Response.Status, echo.MIMEApplicationJSON, answer)
}

func (s *Server) handleGetRefund(c echo.Context) error {
	r, err := s.svc.Refund(c.Request().Context(), merchantOf(c).ID, c.Param("id"))
	if err != nil {
		return err
	}
	return renderJSON(c, http.StatusOK, versions.KindRefund, payments.ToRefundView(r))
}

// list is a page of a listing as the API answers it.
type list[T any] struct {
	Object  string `json:"object"`
	Data    []T    `json:"data"`
	HasMore bool   `json:"has_more"`
}

// listOf is the listing of items, each rendered by view.
func listOf[I, V any](items []I, hasMore bool, view func(I) V) list[V] {
	out := list[V]{Object: "list", Data: make([]V, 0, len(items)), HasMore: hasMore}
	for _, it := range items {
		out.Data = append(out.Data, view(it))
	}
	return out
}

func (s *Server) handleListPayments(c echo.Context) error {
	q, err := listQuery(c, "idempotency_key")
	if err != nil {
		return err
	}
	if err := refuseIDParams(idParam{"starting_after", q.StartingAfter, []idKind{paymentIDs}},
		idParam{"ending_before", q.EndingBefore, []idKind{paymentIDs}}); err != nil {
		return err
	}
	page, err := s.opts.Listings.Payments(c.Request().Context(), q)
	if err != nil {
		return err
	}
	return renderJSON(c, http.StatusOK, versions.KindPaymentList, listOf(page.Items, page.HasMore, payments.ToView))
}

func (s *Server) handleListRefunds(c echo.Context) error {
	q, err := listQuery(c)
	if err != nil {
		return err
	}
	if err := refuseIDParams(idParam{"starting_after", q.StartingAfter, []idKind{refundIDs}},
		idParam{"ending_before", q.EndingBefore, []idKind{refundIDs}}); err != nil {
		return err
	}
	q.PaymentID = c.Param("id") // empty on GET /refunds
	page, err := s.opts.Listings.Refunds(c.Request().Context(), q)
	if err != nil {
		return err
	}
	return renderJSON(c, http.StatusOK, versions.KindRefundList, listOf(page.Items, page.HasMore, payments.ToRefundView))
}

// listParams are the query parameters every listing takes.
var listParams = map[string]bool{"limit": true, "starting_after": true, "ending_before": true,
	"status": true, "created[gte]": true, "created[lt]": true}

// listQuery reads a listing's query parameters, refusing unknown or
// repeated ones with a 400 naming them.
func listQuery(c echo.Context, also ...string) (listings.Query, error) {
	q := listings.Query{MerchantID: merchantOf(c).ID}
	var fields []errs.FieldError
	bad := func(field, reason string) { fields = append(fields, errs.FieldError{Field: field, Reason: reason}) }
	params := c.QueryParams()
	for name, vs := range params {
		known := listParams[name]
		for _, a := range also {
			known = known || name == a
		}
		switch {
		case !known:
			bad(name, "is not a parameter of this listing")
		case len(vs) != 1:
			bad(name, "must be given once")
		}
	}
	one := func(name string) string { return firstValue(params, name) }
	if v := one("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			bad("limit", "must be an integer")
		}
		q.Limit = n
		if err == nil && n == 0 {
			q.Limit = -1 // 0 is not a page size
		}
	}
	q.StartingAfter, q.EndingBefore, q.Status = one("starting_after"), one("ending_before"), one("status")
	for _, t := range []struct {
		name string
		dst  *time.Time
	}{{"created[gte]", &q.CreatedFrom}, {"created[lt]", &q.CreatedBefore}} {
		if v := one(t.name); v != "" {
			at, err := parseInstant(v)
			if err != nil {
				bad(t.name, "must be an RFC 3339 time or Unix seconds, in the years 1000 to 9999")
			}
			*t.dst = at
		}
	}
	if len(fields) > 0 {
		return q, &errs.Error{Code: errs.CodeInvalid, Message: "invalid listing query", Fields: fields}
	}
	return q, nil
}

func firstValue(params url.Values, name string) string {
	if vs := params[name]; len(vs) > 0 {
		return vs[0]
	}
	return ""
}

// The instants a listing compares created_at with: the range of the
// database's DATETIME, outside which the read itself would fail.
var (
	minInstant = time.Date(1000, 1, 1, 0, 0, 0, 0, time.UTC)
	maxInstant = time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)
)

// parseInstant reads an RFC 3339 time or Unix seconds, from the year 1000
// to the year 9999.
func parseInstant(v string) (time.Time, error) {
	at, err := time.Parse(time.RFC3339Nano, v)
	if secs, perr := strconv.ParseInt(v, 10, 64); perr == nil {
		at, err = time.Unix(secs, 0).UTC(), nil
	}
	if err == nil && (at.Before(minInstant) || at.After(maxInstant)) {
		err = errors.New("outside the years 1000 to 9999")
	}
	return at, err
}
