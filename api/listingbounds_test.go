package api_test

import (
	"net/http"
	"net/url"
	"testing"
)

// The creation times a listing filters on must lie in the years the
// database's DATETIME holds: outside them the answer is a 400 naming the
// parameter, not a 500 that fires the server-error alert.
func TestListingCreatedBoundsOutsideTheDatabasesYears(t *testing.T) {
	e := newEnv(t)
	wantStatus(t, e.post("p", okBody), http.StatusCreated)
	for _, c := range []struct{ param, value string }{
		{"created[gte]", "99999999999999"},
		{"created[lt]", "-99999999999"},
		{"created[gte]", "253402300800"}, // 10000-01-01
		{"created[lt]", "0000-01-01T00:00:00Z"},
		{"created[gte]", "0999-12-31T23:59:59Z"},
		{"created[lt]", "9999-12-31T23:59:59-01:00"},
	} {
		for _, listing := range []string{"/payments", "/refunds"} {
			t.Run(listing+"?"+c.param+"="+c.value, func(t *testing.T) {
				wantFieldRefused(t, e.get(listing+"?"+url.Values{c.param: {c.value}}.Encode()), c.param)
			})
		}
	}
	for _, q := range []string{"created[gte]=1000-01-01T00:00:00Z", "created[lt]=9999-12-31T23:59:59Z", "created[gte]=-30610224000", "created[lt]=253402300799"} {
		res := e.get("/payments?" + q)
		wantStatus(t, res, http.StatusOK)
	}
}
