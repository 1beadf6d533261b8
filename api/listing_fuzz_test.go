package api_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gateway/listings"
	"gateway/payments"
)

// FuzzListCursor: a cursor never reaches past its merchant. Two merchants
// each hold payments, refunds and events; merchant A pages every listing
// with cursors made of any object's id (A's or B's, of any kind, with text
// around it). A page answered is of A's objects only, its cursor names one
// of A's objects of that listing, and the page is exactly the objects
// after (or before) that one in A's whole listing; B's ids, and anything
// naming no object of A's listing, are refused; and the refunds listing
// of B's payment is answered as that of a payment nobody has.
func FuzzListCursor(f *testing.F) {
	e := newEnv(f)
	_, bKey := e.newMerchant("Other merchant")
	type world struct {
		payments, refunds, events []string
		byPayment                 map[string][]string
	}
	var a, b world
	var k keys
	for _, m := range []struct {
		key string
		w   *world
	}{{e.apiKey, &a}, {bKey, &b}} {
		m.w.byPayment = map[string][]string{}
		for range 4 {
			res := e.fuzzDoAs(f, m.key, http.MethodPost, "/payments", idem(k.next("pay")), []byte(okBody))
			var p payments.View
			if err := json.Unmarshal(res.body, &p); err != nil || res.status != http.StatusCreated {
				f.Fatalf("payment: %d %s", res.status, res.body)
			}
			for range 2 {
				res := e.fuzzDoAs(f, m.key, http.MethodPost, "/payments/"+p.ID+"/refunds", idem(k.next("re")), []byte(`{"amount": 100}`))
				if res.status != http.StatusCreated {
					f.Fatalf("refund: %d %s", res.status, res.body)
				}
			}
		}
		m.w.payments = listIDs(f, e, m.key, "/payments")
		m.w.refunds = listIDs(f, e, m.key, "/refunds")
		m.w.events = listIDs(f, e, m.key, "/events")
		for _, p := range m.w.payments {
			m.w.byPayment[p] = listIDs(f, e, m.key, "/payments/"+p+"/refunds")
		}
	}
	var pool []string
	for _, w := range []world{a, b} {
		pool = append(append(append(pool, w.payments...), w.refunds...), w.events...)
	}
	for listing := range uint8(4) {
		for _, pick := range []uint8{0, 3, 4, 12, 20, 36, 44, 60} {
			f.Add(listing, pick, "", "", uint8(0), false)
			f.Add(listing, pick, "", "", uint8(2), true)
		}
		f.Add(listing, uint8(1), "", " ", uint8(1), false)
		f.Add(listing, uint8(1), "x", "", uint8(1), false)
		f.Add(listing, uint8(1), "", "%00", uint8(1), false)
		f.Add(listing, uint8(2), "PAY_", "", uint8(0), true)
	}
	f.Fuzz(func(t *testing.T, listing, pick uint8, prefix, suffix string, limit uint8, before bool) {
		cursor := prefix + pool[int(pick)%len(pool)] + suffix
		var path string
		var own []string // A's whole listing, in its order
		var other bool   // a refunds listing of B's payment
		switch listing % 4 {
		case 0:
			path, own = "/payments", a.payments
		case 1:
			path, own = "/refunds", a.refunds
		case 2:
			all := append(append([]string{}, a.payments...), b.payments...)
			p := all[int(limit)%len(all)]
			path, own, other = "/payments/"+p+"/refunds", a.byPayment[p], !slices.Contains(a.payments, p)
		default:
			path, own, before = "/events", a.events, false
		}
		param := "starting_after"
		if before {
			param = "ending_before"
		}
		q := url.Values{param: {cursor}}
		n := int(limit % 13)
		if n != 0 {
			q.Set("limit", strconv.Itoa(n))
		} else {
			n = listings.DefaultPageSize
		}
		res := e.fuzzDo(t, http.MethodGet, path+"?"+q.Encode(), nil, nil)
		if other {
			// Another merchant's payment is answered as one that does not exist.
			none := e.fuzzDo(t, http.MethodGet, "/payments/"+noPayment+"/refunds?"+q.Encode(), nil, nil)
			if res.status != none.status || problemType(res.body) != problemType(none.body) {
				t.Fatalf("%s?%s: %d %s; for a payment nobody has: %d %s", path, q.Encode(), res.status, res.body, none.status, none.body)
			}
			return
		}
		if res.status != http.StatusOK {
			return
		}
		var page struct {
			Data []struct {
				ID string `json:"id"`
			} `json:"data"`
			HasMore bool `json:"has_more"`
		}
		if err := json.Unmarshal(res.body, &page); err != nil {
			t.Fatal(err)
		}
		at := slices.Index(own, strings.TrimRight(cursor, " ")) // the database compares ids padded with spaces
		if at < 0 {
			t.Fatalf("%s?%s: a cursor naming none of the merchant's objects of the listing was taken: %s", path, q.Encode(), res.body)
		}
		want := own[at+1 : min(at+1+n, len(own))]
		more := at+1+n < len(own)
		if before {
			want, more = own[max(0, at-n):at], at-n > 0
		}
		var got []string
		for _, d := range page.Data {
			got = append(got, d.ID)
		}
		if !slices.Equal(got, want) || page.HasMore != more {
			t.Fatalf("%s?%s: page %q (has_more %v), want %q (%v)", path, q.Encode(), got, page.HasMore, want, more)
		}
	})
}

// noPayment is a well-formed payment id that no merchant has.
const noPayment = "pay_00000000000000000000000000"

// problemType is a problem answer's type, "" for any other body.
func problemType(body []byte) string {
	var p struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(body, &p)
	return p.Type
}

// listIDs is the whole listing at path, as the merchant of apiKey reads it.
func listIDs(tb testing.TB, e *env, apiKey, path string) []string {
	res := e.fuzzDoAs(tb, apiKey, http.MethodGet, path+"?limit=100", nil, nil)
	var page struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
		HasMore bool `json:"has_more"`
	}
	if err := json.Unmarshal(res.body, &page); err != nil || res.status != http.StatusOK || page.HasMore {
		tb.Fatalf("GET %s: %d %s", path, res.status, res.body)
	}
	ids := make([]string, 0, len(page.Data))
	for _, d := range page.Data {
		ids = append(ids, d.ID)
	}
	return ids
}
