package fakeclient_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"gateway/psp"
	"gateway/psp/fake"
	"gateway/psp/fake/fakeclient"
	"gateway/psp/fake/fakeserver"
	"gateway/psp/psptest"
)

func TestConformance(t *testing.T) {
	psptest.Run(t, func(t *testing.T) psptest.Harness {
		srv, err := fakeserver.New(fakeserver.Options{})
		if err != nil {
			t.Fatal(err)
		}
		faults := &psptest.HTTPFaults{
			Handler: srv,
			OpOf:    opOf,
			Refuse: func(w http.ResponseWriter, r *http.Request) {
				writeError(w, http.StatusServiceUnavailable, fakeserver.CodeNotProcessed)
			},
			ServerError: func(w http.ResponseWriter, r *http.Request) {
				writeError(w, http.StatusInternalServerError, fakeserver.CodeInternal)
			},
		}
		ts := httptest.NewServer(faults)
		t.Cleanup(ts.Close)
		t.Cleanup(srv.Close)
		return psptest.Harness{
			Adapter:     mustNew(t, ts.URL),
			Backend:     backend{faults, srv, ts.URL},
			Method:      method,
			Unreachable: mustNew(t, psptest.UnreachableURL(t)),
		}
	})
}

func mustNew(t *testing.T, url string) *fakeclient.Adapter {
	t.Helper()
	a, err := fakeclient.New(fakeclient.Config{BaseURL: url})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func method(o psptest.Outcome, _ string) string {
	switch o {
	case psptest.DeclinedCard:
		return fake.MethodDeclined
	case psptest.DeclinedFunds:
		return fake.MethodInsufficientFunds
	case psptest.DeclinedOther:
		return fake.MethodLostCard
	case psptest.Invalid:
		return fake.MethodInvalidRequest
	case psptest.Pending:
		return fake.MethodThreeDS
	}
	return fake.MethodOK
}

func opOf(r *http.Request) psptest.Op {
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/charges":
		return psptest.OpCharge
	case r.Method == http.MethodPost && r.URL.Path == "/v1/refunds":
		return psptest.OpRefund
	case r.Method == http.MethodPost && r.URL.Path == "/v1/captures":
		return psptest.OpCapture
	case r.Method == http.MethodPost && r.URL.Path == "/v1/voids":
		return psptest.OpVoid
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/charges/"):
		return psptest.OpLookup
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/refunds/"):
		return psptest.OpLookupRefund
	}
	return 0
}

func writeError(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(`{"error":{"code":"` + code + `","message":"injected"}}`))
}

type backend struct {
	*psptest.HTTPFaults
	srv *fakeserver.Server
	url string
}

// Settle passes 3-D Secure the way a customer does: by visiting the page the
// charge's next action points to.
func (b backend) Settle(orderID string, o psptest.Outcome) {
	for _, c := range b.srv.LedgerSnapshot().Charges {
		if c.MerchantOrderID != orderID {
			continue
		}
		page := b.url + "/3ds/" + c.Reference
		if o != psptest.Success {
			page += "?result=failed"
		}
		res, err := http.Get(page)
		if err != nil {
			panic(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			panic(fmt.Sprintf("GET %s: %s", page, res.Status))
		}
		return
	}
	panic("no charge for " + orderID)
}

func (b backend) Charges(orderID string) int {
	n := 0
	for _, c := range b.srv.LedgerSnapshot().Charges {
		if c.MerchantOrderID == orderID {
			n++
		}
	}
	return n
}

func (b backend) Refunds(refundID string) int {
	n := 0
	for _, r := range b.srv.LedgerSnapshot().Refunds {
		if r.RefundOrderID == refundID {
			n++
		}
	}
	return n
}

func (b backend) Captures(captureID string) int {
	n := 0
	for _, c := range b.srv.LedgerSnapshot().Captures {
		if c.CaptureOrderID == captureID {
			n++
		}
	}
	return n
}

func (b backend) Voids(voidID string) int {
	n := 0
	for _, v := range b.srv.LedgerSnapshot().Voids {
		if v.VoidOrderID == voidID {
			n++
		}
	}
	return n
}

// Lapse asks the server's admin API, as a person or a chaos run would.
func (b backend) Lapse(orderID string) {
	res, err := http.Post(b.url+"/admin/charges/"+orderID+"/lapse", "application/json", nil)
	if err != nil {
		panic(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		panic("lapse " + orderID + ": " + res.Status)
	}
}

// Each answer the server (or something in its place) can give lands in its
// outcome class.
func TestAnswers(t *testing.T) {
	const charge = `{"merchant_order_id":"ord_1","reference":"fake_ch_1","status":"succeeded","amount":100,"currency":"KRW"}`
	tests := []struct {
		name   string
		call   string // "charge" or "lookup"
		status int
		body   string
		class  psp.Class // 0: a succeeded charge
		is     error
	}{
		{"charge created", "charge", 201, charge, 0, nil},
		{"charge deduplicated", "charge", 200, charge, 0, nil},
		{"order id reused", "charge", 409, `{"error":{"code":"order_id_reused","message":"x"}}`, psp.NotProcessed, psp.ErrOrderConflict},
		{"invalid", "charge", 400, `{"error":{"code":"invalid_request","message":"x"}}`, psp.Rejected, nil},
		{"unprocessable", "charge", 422, `{"error":{"code":"amount_too_small","message":"x"}}`, psp.Rejected, nil},
		{"unauthorized", "charge", 401, `{"error":{"code":"unauthorized","message":"x"}}`, psp.NotProcessed, nil},
		{"rate limited", "charge", 429, `{"error":{"code":"rate_limited","message":"x"}}`, psp.NotProcessed, nil},
		{"400 from a proxy", "charge", 400, `<html>bad request</html>`, psp.Unknown, nil},
		{"not processed", "charge", 503, `{"error":{"code":"not_processed","message":"x"}}`, psp.NotProcessed, nil},
		{"503 from a proxy", "charge", 503, `<html>unavailable</html>`, psp.Unknown, nil},
		{"internal error", "charge", 500, `{"error":{"code":"internal_error","message":"x"}}`, psp.Unknown, nil},
		{"wrong route", "charge", 404, `{"error":{"code":"route_not_found","message":"x"}}`, psp.Unknown, nil},
		{"unreadable", "charge", 201, `{"merchant_order_id":`, psp.Unknown, nil},
		{"unknown status", "charge", 201, strings.Replace(charge, "succeeded", "partially_captured", 1), psp.Unknown, nil},
		{"authorized only", "charge", 201, strings.Replace(charge, "succeeded", "authorized", 1), psp.Unknown, psp.ErrMismatch},
		{"captured more than charged", "charge", 201, strings.Replace(charge, `"amount":100`, `"amount":100,"amount_captured":101`, 1), psp.Unknown, psp.ErrMismatch},
		{"another order", "charge", 201, strings.Replace(charge, "ord_1", "ord_2", 1), psp.Unknown, psp.ErrMismatch},
		{"another amount", "charge", 201, strings.Replace(charge, "100", "101", 1), psp.Unknown, psp.ErrMismatch},
		{"another currency", "charge", 201, strings.Replace(charge, "KRW", "JPY", 1), psp.Unknown, psp.ErrMismatch},
		{"lookup found", "lookup", 200, charge, 0, nil},
		{"lookup not found", "lookup", 404, `{"error":{"code":"not_found","message":"x"}}`, 0, psp.ErrNotFound},
		{"lookup 404 from elsewhere", "lookup", 404, `404 page not found`, psp.Unknown, nil},
		{"lookup another order", "lookup", 200, strings.Replace(charge, "ord_1", "ord_2", 1), psp.Unknown, psp.ErrMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.status)
				_, _ = w.Write([]byte(tt.body))
			}))
			defer ts.Close()
			a := mustNew(t, ts.URL)
			var (
				c   psp.Charge
				err error
			)
			if tt.call == "charge" {
				c, err = a.Charge(t.Context(), psp.ChargeRequest{MerchantOrderID: "ord_1", Amount: 100, Currency: "KRW", PaymentMethod: "pm_card_ok"})
			} else {
				c, err = a.Lookup(t.Context(), "ord_1")
			}
			switch {
			case tt.is == psp.ErrNotFound:
				if err != psp.ErrNotFound {
					t.Fatalf("err = %v, want psp.ErrNotFound itself", err)
				}
			case tt.class != 0:
				if class, ok := psp.ClassOf(err); !ok || class != tt.class {
					t.Fatalf("got %+v, %v; want class %s", c, err, tt.class)
				}
				if tt.is != nil && !errors.Is(err, tt.is) {
					t.Fatalf("err = %v, want %v", err, tt.is)
				}
			default:
				if err != nil || c.Status != psp.Succeeded || c.Reference != "fake_ch_1" {
					t.Fatalf("got %+v, %v; want the succeeded charge", c, err)
				}
			}
		})
	}
}

func TestNewRefusesBadURL(t *testing.T) {
	for _, u := range []string{"", "127.0.0.1:9090", "ftp://x", "http://"} {
		if _, err := fakeclient.New(fakeclient.Config{BaseURL: u}); err == nil {
			t.Errorf("New accepted %q", u)
		}
	}
}

// The charge a pending answer carries reaches the caller whole, and what the
// server refuses keeps its code.
func TestPendingAndRejectedOverHTTP(t *testing.T) {
	srv, err := fakeserver.New(fakeserver.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	defer srv.Close()
	a := mustNew(t, ts.URL)
	req := psp.ChargeRequest{MerchantOrderID: "ord_3ds", Amount: 1000, Currency: "KRW", PaymentMethod: fake.MethodThreeDS, AllowNextAction: true}
	c, err := a.Charge(t.Context(), req)
	if err != nil || c.Status != psp.Pending || c.NextAction == nil || c.NextAction.Type != psp.NextActionRedirect ||
		c.NextAction.URL != ts.URL+"/3ds/"+c.Reference {
		t.Fatalf("Charge = %+v (%+v), %v", c, c.NextAction, err)
	}
	req.MerchantOrderID, req.AllowNextAction = "ord_one_step", false
	if c, err := a.Charge(t.Context(), req); err != nil || c.Status != psp.Declined || c.Code != "authentication_required" {
		t.Fatalf("one-step 3-D Secure = %+v, %v; want declined", c, err)
	}
	req.MerchantOrderID, req.PaymentMethod = "ord_invalid", fake.MethodInvalidRequest
	_, err = a.Charge(t.Context(), req)
	var e *psp.Error
	if !errors.As(err, &e) || e.Class != psp.Rejected || e.Code != fakeserver.CodeInvalidRequest {
		t.Fatalf("Charge = %v, want Rejected with the server's code", err)
	}
	if a.Capabilities().Account != "" {
		t.Fatal("an account label nobody configured")
	}
	b, _ := fakeclient.New(fakeclient.Config{BaseURL: ts.URL, Account: "kr-1"})
	if b.Capabilities().Account != "kr-1" {
		t.Fatal("the configured account label is not advertised")
	}
}

// Each answer to a capture or void lands in its outcome class: a charge
// (whatever became of it), or a failure, never a "not found".
func TestCommandAnswers(t *testing.T) {
	const authorized = `{"merchant_order_id":"ord_1","reference":"fake_ch_1","status":"authorized","amount":100,"currency":"KRW","capture_before":"2026-03-08T09:30:15+09:00"}`
	captured := strings.Replace(strings.Replace(authorized, "authorized", "succeeded", 1), `"capture_before":"2026-03-08T09:30:15+09:00"`, `"amount_captured":40`, 1)
	tests := []struct {
		name   string
		status int
		body   string
		want   psp.Charge // for a result
		class  psp.Class
		is     error
	}{
		{"captured", 201, captured, psp.Charge{MerchantOrderID: "ord_1", Reference: "fake_ch_1", Status: psp.Succeeded, Amount: 100, Currency: "KRW", AmountCaptured: 40}, 0, nil},
		{"still authorized", 200, authorized, psp.Charge{MerchantOrderID: "ord_1", Reference: "fake_ch_1", Status: psp.Authorized, Amount: 100, Currency: "KRW",
			CaptureBefore: time.Date(2026, 3, 8, 0, 30, 15, 0, time.UTC)}, 0, nil},
		{"voided", 200, strings.Replace(authorized, "authorized", "voided", 1), psp.Charge{MerchantOrderID: "ord_1", Reference: "fake_ch_1", Status: psp.Voided, Amount: 100, Currency: "KRW"}, 0, nil},
		{"order id reused", 409, `{"error":{"code":"order_id_reused","message":"x"}}`, psp.Charge{}, psp.NotProcessed, psp.ErrOrderConflict},
		{"no such charge", 400, `{"error":{"code":"invalid_request","message":"x"}}`, psp.Charge{}, psp.Rejected, nil},
		{"not found is not an answer", 404, `{"error":{"code":"not_found","message":"x"}}`, psp.Charge{}, psp.Unknown, nil},
		{"not processed", 503, `{"error":{"code":"not_processed","message":"x"}}`, psp.Charge{}, psp.NotProcessed, nil},
		{"internal error", 500, `{"error":{"code":"internal_error","message":"x"}}`, psp.Charge{}, psp.Unknown, nil},
		{"another order", 201, strings.Replace(captured, "ord_1", "ord_2", 1), psp.Charge{}, psp.Unknown, psp.ErrMismatch},
		{"another charge", 201, strings.Replace(captured, "fake_ch_1", "fake_ch_2", 1), psp.Charge{}, psp.Unknown, psp.ErrMismatch},
		{"unreadable", 201, `{"status":`, psp.Charge{}, psp.Unknown, nil},
	}
	for _, tt := range tests {
		for _, op := range []string{"capture", "void"} {
			t.Run(op+" "+tt.name, func(t *testing.T) {
				var path string
				ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					path = r.URL.Path
					w.WriteHeader(tt.status)
					_, _ = w.Write([]byte(tt.body))
				}))
				defer ts.Close()
				a := mustNew(t, ts.URL)
				var (
					c   psp.Charge
					err error
				)
				if op == "capture" {
					c, err = a.Capture(t.Context(), psp.CaptureRequest{OrderID: "cap_1", MerchantOrderID: "ord_1", ChargeReference: "fake_ch_1", Amount: 40, Currency: "KRW"})
				} else {
					c, err = a.Void(t.Context(), psp.VoidRequest{OrderID: "vod_1", MerchantOrderID: "ord_1", ChargeReference: "fake_ch_1", Reason: "duplicate"})
				}
				if path != "/v1/"+op+"s" {
					t.Fatalf("sent to %s", path)
				}
				if tt.class == 0 {
					if err != nil || !c.Equal(tt.want) {
						t.Fatalf("got %+v, %v; want %+v", c, err, tt.want)
					}
					return
				}
				if class, ok := psp.ClassOf(err); !ok || class != tt.class || errors.Is(err, psp.ErrNotFound) {
					t.Fatalf("got %+v, %v; want class %s", c, err, tt.class)
				}
				if tt.is != nil && !errors.Is(err, tt.is) {
					t.Fatalf("err = %v, want %v", err, tt.is)
				}
			})
		}
	}
}

// Manual capture over HTTP: the request carries the capture method, the
// answer the authorization's deadline, and the admin API lapses it.
func TestManualCaptureOverHTTP(t *testing.T) {
	srv, err := fakeserver.New(fakeserver.Options{AuthorizationValidity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	defer srv.Close()
	a, err := fakeclient.New(fakeclient.Config{BaseURL: ts.URL, AuthorizationValidity: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if caps := a.Capabilities(); !caps.ManualCapture || caps.AuthorizationValidity != time.Hour {
		t.Fatalf("Capabilities = %+v", caps)
	}
	if caps := mustNew(t, ts.URL).Capabilities(); caps.AuthorizationValidity != fake.DefaultAuthorizationValidity {
		t.Fatalf("default AuthorizationValidity %v", caps.AuthorizationValidity)
	}
	before := time.Now()
	c, err := a.Charge(t.Context(), psp.ChargeRequest{MerchantOrderID: "ord_m", Amount: 1000, Currency: "KRW",
		PaymentMethod: fake.MethodOK, CaptureMethod: psp.CaptureManual})
	if err != nil || c.Status != psp.Authorized || c.CaptureBefore.Before(before.Add(time.Hour-time.Second)) ||
		c.CaptureBefore.After(time.Now().Add(time.Hour)) {
		t.Fatalf("Charge = %+v, %v; want authorized for an hour", c, err)
	}
	if l := srv.LedgerSnapshot(); len(l.Authorizations) != 1 || !l.Authorizations[0].CaptureBefore.Equal(c.CaptureBefore) || l.Authorizations[0].Status != "authorized" {
		t.Fatalf("ledger %+v", l.Authorizations)
	}
	res, err := http.Post(ts.URL+"/admin/charges/ord_m/lapse", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if got, err := a.Lookup(t.Context(), "ord_m"); err != nil || got.Status != psp.Voided || !got.CaptureBefore.IsZero() {
		t.Fatalf("Lookup after the lapse = %+v, %v", got, err)
	}
	if l := srv.LedgerSnapshot(); len(l.Authorizations) != 1 || !l.Authorizations[0].Lapsed || len(l.Voids) != 0 {
		t.Fatalf("ledger after the lapse %+v", l)
	}
}
