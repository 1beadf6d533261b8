package api

import (
	"bytes"
	"encoding/json"

	"github.com/labstack/echo/v4"

	"gateway/errs"
	"gateway/merchants"
	"gateway/payments"
	"gateway/versions"
)

// Dated API versions (docs/design.md §18): a request is answered in the
// version its Gateway-Version header names, else in its merchant's, and
// every answer says which in its own Gateway-Version header. The gateway
// renders the latest; an answer in an older one is taken back through the
// versions' changes on its way out (package versions). A replay is
// answered in the version of the request that made the key, whatever the
// retry names.

// announceVersion sets the answer's Gateway-Version before anything is
// known of the merchant: the one the request names when it is one, else
// the latest. A merchant's own version replaces it (setMerchant).
func announceVersion(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		v := versions.Latest
		if h := c.Request().Header.Values(versions.Header); len(h) == 1 {
			if p, err := versions.Parse(h[0]); err == nil {
				v = p
			}
		}
		c.Response().Header().Set(versions.Header, string(v))
		return next(c)
	}
}

// setMerchant records the authenticated merchant and the version its
// request is answered in, or refuses a Gateway-Version the gateway does
// not render.
func setMerchant(c echo.Context, m merchants.Merchant) error {
	v, err := requestedVersion(c, m)
	if err != nil {
		return err
	}
	c.Set(merchantKey, m)
	c.SetRequest(c.Request().WithContext(versions.NewContext(c.Request().Context(), v)))
	c.Response().Header().Set(versions.Header, string(v))
	return nil
}

func requestedVersion(c echo.Context, m merchants.Merchant) (versions.Version, error) {
	h := c.Request().Header.Values(versions.Header)
	switch len(h) {
	case 0:
		if m.APIVersion == "" {
			return versions.Latest, nil
		}
		return versions.Version(m.APIVersion), nil
	case 1:
		v, err := versions.Parse(h[0])
		if err != nil {
			return "", &errs.Error{Code: errs.CodeInvalid, Message: "invalid " + versions.Header + ": " + err.Error(),
				Fields: []errs.FieldError{{Field: versions.Header, Reason: "must name an API version of this gateway"}}}
		}
		return v, nil
	}
	return "", &errs.Error{Code: errs.CodeInvalid, Message: "send at most one " + versions.Header + " header",
		Fields: []errs.FieldError{{Field: versions.Header, Reason: "must be given once"}}}
}

// requestVersion is the version c's request is answered in.
func requestVersion(c echo.Context) versions.Version {
	return versions.FromContext(c.Request().Context())
}

// renderJSON answers v, an object of kind rendered in the latest version,
// in the request's version: what c.JSON writes when that is the latest.
func renderJSON(c echo.Context, status int, kind versions.Kind, v any) error {
	to := requestVersion(c)
	if to == versions.Latest || kind == versions.KindNone {
		return c.JSON(status, v)
	}
	// As echo's serializer writes it (body.go): no HTML escaping.
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return err
	}
	body, err := versions.Render(b.Bytes(), kind, versions.Latest, to)
	if err != nil {
		return errs.Internal(err)
	}
	return c.Blob(status, echo.MIMEApplicationJSON, body)
}

// storedAnswer is an idempotent command's stored answer, in the version of
// the request that made the key (for a fresh answer, this request's), with
// that version in the Gateway-Version header.
func storedAnswer(c echo.Context, kind versions.Kind, resp payments.Outcome) ([]byte, error) {
	to := requestVersion(c)
	if resp.Response.Version != "" {
		to = versions.Version(resp.Response.Version)
	}
	from := versions.Latest
	if resp.Response.BodyVersion != "" {
		from = versions.Version(resp.Response.BodyVersion)
	}
	c.Response().Header().Set(versions.Header, string(to))
	body, err := versions.Render(resp.Response.Body, kind, from, to)
	if err != nil {
		return nil, errs.Internal(err)
	}
	return body, nil
}

// eventsIn renders events' data in the request's version.
func eventsIn(c echo.Context, evs []payments.Event) ([]payments.Event, error) {
	v := requestVersion(c)
	out := make([]payments.Event, len(evs))
	for i, e := range evs {
		r, err := payments.EventIn(e, v)
		if err != nil {
			return nil, errs.Internal(err)
		}
		out[i] = r
	}
	return out, nil
}
