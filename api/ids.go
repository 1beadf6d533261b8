package api

import (
	"strings"

	"github.com/labstack/echo/v4"

	"gateway/errs"
	"gateway/payments"
	"gateway/webhooks"
)

// Ids in paths and queries. The gateway makes every id (a kind's prefix
// and a ULID), so text of another shape names nothing: it is refused
// before any query, where the database's ASCII columns would answer it
// (pay_…, with its ellipsis) with an error, a 500, rather than a miss.

// idKind is a kind of object as its ids and its answers name it.
type idKind struct {
	prefix string
	noun   string
}

var (
	paymentIDs  = idKind{payments.PaymentIDPrefix, "payment"}
	refundIDs   = idKind{payments.RefundIDPrefix, "refund"}
	eventIDs    = idKind{payments.EventIDPrefix, "event"}
	endpointIDs = idKind{webhooks.EndpointIDPrefix, "webhook endpoint"}
	deliveryIDs = idKind{webhooks.DeliveryIDPrefix, "webhook delivery"}
)

func (k idKind) names(id string) bool { return payments.WellFormedID(k.prefix, id) }

// namedBy puts first in a route's chain the refusal of a path whose id
// cannot be one of kind's: 404, as for an id that names nothing, before
// authentication, as for a path that does not exist (an id's shape is no
// secret, and nothing is read for it).
func namedBy(kind idKind, mw []echo.MiddlewareFunc) []echo.MiddlewareFunc {
	refuse := func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if !kind.names(c.Param("id")) {
				c.Response().Header().Set(echo.HeaderCacheControl, "no-store")
				return &errs.Error{Code: errs.CodeNotFound, Message: kind.noun + " not found"}
			}
			return next(c)
		}
	}
	return append([]echo.MiddlewareFunc{refuse}, mw...)
}

// idParam is a query parameter holding an id of one of kinds (a listing's
// cursor, a filter), "" when not given.
type idParam struct {
	name, value string
	kinds       []idKind
}

// refuseIDParams answers 400 naming each parameter that cannot hold an id
// of its kinds.
func refuseIDParams(params ...idParam) error {
	var fields []errs.FieldError
	for _, p := range params {
		if p.value == "" {
			continue
		}
		ok := false
		var nouns []string
		for _, k := range p.kinds {
			ok = ok || k.names(p.value)
			nouns = append(nouns, k.noun)
		}
		if !ok {
			fields = append(fields, errs.FieldError{Field: p.name,
				Reason: "must be the id of one of your " + strings.Join(nouns, "s or ") + "s"})
		}
	}
	return errs.Invalid("invalid listing query", fields)
}
