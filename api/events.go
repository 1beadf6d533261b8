package api

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"gateway/errs"
	"gateway/listings"
	"gateway/payments"
)

// eventParams are the query parameters of GET /events.
var eventParams = map[string]bool{"limit": true, "starting_after": true, "type": true, "object_id": true}

func (s *Server) handleListEvents(c echo.Context) error {
	q, err := eventQuery(c)
	if err != nil {
		return err
	}
	if err := refuseIDParams(idParam{"starting_after", q.StartingAfter, []idKind{eventIDs}},
		idParam{"object_id", q.ObjectID, []idKind{paymentIDs, refundIDs}}); err != nil {
		return err
	}
	page, err := s.opts.Listings.Events(c.Request().Context(), q)
	if err != nil {
		return err
	}
	evs, err := eventsIn(c, page.Items)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, listOf(evs, page.HasMore, payments.ToEventView))
}

// eventQuery reads GET /events' query parameters, refusing unknown or
// repeated ones with a 400 naming them.
func eventQuery(c echo.Context) (listings.EventQuery, error) {
	q := listings.EventQuery{MerchantID: merchantOf(c).ID}
	var fields []errs.FieldError
	bad := func(field, reason string) { fields = append(fields, errs.FieldError{Field: field, Reason: reason}) }
	params := c.QueryParams()
	for name, vs := range params {
		switch {
		case !eventParams[name]:
			bad(name, "is not a parameter of this listing")
		case len(vs) != 1:
			bad(name, "must be given once")
		}
	}
	one := func(name string) string { return firstValue(params, name) }
	if v := one("limit"); v != "" {
		n, err := strconv.Atoi(v)
		switch {
		case err != nil:
			bad("limit", "must be an integer")
		case n == 0:
			q.Limit = -1 // 0 is not a page size
		default:
			q.Limit = n
		}
	}
	q.StartingAfter, q.Type, q.ObjectID = one("starting_after"), payments.EventType(one("type")), one("object_id")
	if len(fields) > 0 {
		return q, &errs.Error{Code: errs.CodeInvalid, Message: "invalid listing query", Fields: fields}
	}
	return q, nil
}

func (s *Server) handleGetEvent(c echo.Context) error {
	e, err := s.opts.Listings.Event(c.Request().Context(), merchantOf(c).ID, c.Param("id"))
	if err != nil {
		return err
	}
	evs, err := eventsIn(c, []payments.Event{e})
	if err != nil {
		return err
	}
	// The bytes a webhook delivery of it carries in this version, no more
	// (c.JSON would add a newline).
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, payments.EventJSON(evs[0]))
}
