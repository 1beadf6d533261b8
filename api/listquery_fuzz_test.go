package api

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"gateway/errs"
	"gateway/listings"
	"gateway/merchants"
)

// queryContext is a GET of path?raw as echo hands it to a handler, from
// the fuzz merchant.
func queryContext(e *echo.Echo, path, raw string) echo.Context {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	r.URL.RawQuery = raw
	c := e.NewContext(r, httptest.NewRecorder())
	c.Set(merchantKey, merchants.Merchant{ID: "mer_fuzz"})
	return c
}

// listSeeds are listing queries, good and bad.
var listSeeds = []string{
	"", "limit=5", "limit=0", "limit=-1", "limit=+7", "limit=x", "limit=1&limit=2",
	"starting_after=pay_01&limit=3", "ending_before=re_01", "starting_after=a&ending_before=b",
	"status=succeeded", "status=pending&created[gte]=2026-11-30T12:00:00Z",
	"created[gte]=1764504000&created[lt]=1764590400", "created[lt]=2026-11-30T12:00:00.123456789%2B09:00",
	"created[gte]=-99999999999", "created[lt]=9223372036854775807", "created[gte]=0000-01-01T00:00:00Z",
	"created[lt]=9999-12-31T23:59:59-01:00", "idempotency_key=k", "type=payment.succeeded",
	"object_id=pay_01", "starting_after=%C3%A9", "cursor=x", "limit=1;limit=2", "%zz=1",
}

// FuzzListQuery: a listing's query means what it says or is refused. An
// accepted query names only the listing's parameters, each once; its
// fields are the parameters' values; its instants lie in the years the
// database's DATETIME holds (1000–9999, so that the read cannot fail on
// them); and the query written back from its fields means the same query.
// A refused one is a 400 naming each parameter at fault.
func FuzzListQuery(f *testing.F) {
	for _, s := range listSeeds {
		f.Add(s, false)
		f.Add(s, true)
	}
	e := echo.New()
	f.Fuzz(func(t *testing.T, raw string, withKey bool) {
		var also []string
		if withKey {
			also = []string{"idempotency_key"}
		}
		params, _ := url.ParseQuery(raw) // as echo reads them
		q, err := listQuery(queryContext(e, "/payments", raw), also...)
		if err != nil {
			wantFieldsNamed(t, raw, err)
			return
		}
		for name, vs := range params {
			if !listParams[name] && !slices.Contains(also, name) || len(vs) != 1 {
				t.Fatalf("%q: accepted with %s=%q", raw, name, vs)
			}
		}
		if q.MerchantID != "mer_fuzz" || q.StartingAfter != params.Get("starting_after") ||
			q.EndingBefore != params.Get("ending_before") || q.Status != params.Get("status") {
			t.Fatalf("%q: query %+v", raw, q)
		}
		if v := params.Get("limit"); v != "" {
			n, _ := strconv.Atoi(v)
			if n == 0 {
				n = -1 // refused by Validate, not taken as the default
			}
			if q.Limit != n {
				t.Fatalf("%q: limit %d", raw, q.Limit)
			}
		} else if q.Limit != 0 {
			t.Fatalf("%q: limit %d without a limit parameter", raw, q.Limit)
		}
		for _, at := range []time.Time{q.CreatedFrom, q.CreatedBefore} {
			if !at.IsZero() && (at.Before(minInstant) || at.After(maxInstant)) {
				t.Fatalf("%q: accepted instant %v, which no DATETIME holds", raw, at)
			}
		}
		again := url.Values{}
		for name, v := range map[string]string{"starting_after": q.StartingAfter, "ending_before": q.EndingBefore,
			"status": q.Status, "created[gte]": instant(q.CreatedFrom), "created[lt]": instant(q.CreatedBefore)} {
			if v != "" {
				again.Set(name, v)
			}
		}
		if q.Limit != 0 {
			again.Set("limit", strconv.Itoa(q.Limit))
		}
		back, err := listQuery(queryContext(e, "/payments", again.Encode()), also...)
		if err != nil {
			t.Fatalf("%q written back as %q is refused: %v", raw, again.Encode(), err)
		}
		if !sameListQuery(q, back) {
			t.Fatalf("%q written back as %q means %+v, not %+v", raw, again.Encode(), back, q)
		}
	})
}

// FuzzEventQuery: the same for GET /events.
func FuzzEventQuery(f *testing.F) {
	for _, s := range listSeeds {
		f.Add(s)
	}
	e := echo.New()
	f.Fuzz(func(t *testing.T, raw string) {
		params, _ := url.ParseQuery(raw)
		q, err := eventQuery(queryContext(e, "/events", raw))
		if err != nil {
			wantFieldsNamed(t, raw, err)
			return
		}
		for name, vs := range params {
			if !eventParams[name] || len(vs) != 1 {
				t.Fatalf("%q: accepted with %s=%q", raw, name, vs)
			}
		}
		if q.MerchantID != "mer_fuzz" || q.StartingAfter != params.Get("starting_after") ||
			string(q.Type) != params.Get("type") || q.ObjectID != params.Get("object_id") {
			t.Fatalf("%q: query %+v", raw, q)
		}
		again := url.Values{}
		for name, v := range map[string]string{"starting_after": q.StartingAfter, "type": string(q.Type), "object_id": q.ObjectID} {
			if v != "" {
				again.Set(name, v)
			}
		}
		if q.Limit != 0 {
			again.Set("limit", strconv.Itoa(q.Limit))
		}
		back, err := eventQuery(queryContext(e, "/events", again.Encode()))
		if err != nil || back != q {
			t.Fatalf("%q written back as %q means %+v (%v), not %+v", raw, again.Encode(), back, err, q)
		}
	})
}

// wantFieldsNamed checks a refused query's 400: it names what is wrong.
func wantFieldsNamed(t *testing.T, raw string, err error) {
	t.Helper()
	pe, ok := err.(*errs.Error)
	if !ok || pe.Code != errs.CodeInvalid || len(pe.Fields) == 0 {
		t.Fatalf("%q refused with %#v, want a 400 naming the parameters at fault", raw, err)
	}
}

// instant writes t as a listing's parameter: Unix seconds when whole, so
// that any instant the parser took is written back exactly.
func instant(t time.Time) string {
	switch {
	case t.IsZero():
		return ""
	case t.Nanosecond() == 0:
		return strconv.FormatInt(t.Unix(), 10)
	}
	return t.Format(time.RFC3339Nano)
}

func sameListQuery(a, b listings.Query) bool {
	return a.CreatedFrom.Equal(b.CreatedFrom) && a.CreatedBefore.Equal(b.CreatedBefore) &&
		a.MerchantID == b.MerchantID && a.Limit == b.Limit && a.StartingAfter == b.StartingAfter &&
		a.EndingBefore == b.EndingBefore && a.Status == b.Status && a.PaymentID == b.PaymentID
}
