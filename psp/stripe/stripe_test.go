package stripe_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"gateway/payments"
	"gateway/psp"
	"gateway/psp/psptest"
	"gateway/psp/stripe"
	"gateway/psp/stripe/stripetest"
)

const key = "sk_test_51FakeKeyForTheGatewayTests"

func mustNew(t *testing.T, url string) *stripe.Adapter {
	t.Helper()
	a, err := stripe.New(stripe.Config{SecretKey: key, BaseURL: url})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestConformance(t *testing.T) {
	psptest.Run(t, func(t *testing.T) psptest.Harness {
		fake := stripetest.New(key)
		faults := &psptest.HTTPFaults{
			Handler: fake,
			OpOf:    opOf,
			Refuse: func(w http.ResponseWriter, r *http.Request) {
				stripetest.Error(w, http.StatusTooManyRequests, "invalid_request_error", "rate_limit", "", "Too many requests hit the API too quickly.")
			},
			// A 5xx from Stripe's edge: the API's own 5xx would be kept for
			// the idempotency key (see TestCachedServerError).
			ServerError: func(w http.ResponseWriter, r *http.Request) {
				stripetest.Error(w, http.StatusServiceUnavailable, "api_error", "", "", "The service is temporarily unavailable.")
			},
		}
		ts := httptest.NewServer(faults)
		t.Cleanup(ts.Close)
		return psptest.Harness{
			Adapter:     mustNew(t, ts.URL),
			Backend:     backend{faults, fake},
			Method:      method,
			Unreachable: mustNew(t, psptest.UnreachableURL(t)),
		}
	})
}

func method(o psptest.Outcome, _ string) string {
	switch o {
	case psptest.DeclinedCard:
		return "pm_card_chargeDeclined"
	case psptest.DeclinedFunds:
		return "pm_card_chargeDeclinedInsufficientFunds"
	case psptest.DeclinedOther:
		return "pm_card_chargeDeclinedLostCard"
	case psptest.Invalid:
		return "pm_fake_amountTooSmall"
	case psptest.Pending:
		return "pm_card_authenticationRequired"
	}
	return "pm_card_visa"
}

func opOf(r *http.Request) psptest.Op {
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/v1/payment_intents":
		return psptest.OpCharge
	case r.Method == http.MethodPost && r.URL.Path == "/v1/refunds":
		return psptest.OpRefund
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/capture"):
		return psptest.OpCapture
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/cancel") && strings.HasPrefix(r.Header.Get("Idempotency-Key"), "gw-void-"):
		// A void, not the cancel that makes a decline final.
		return psptest.OpVoid
	case r.URL.Path == "/v1/payment_intents/search":
		return psptest.OpLookup
	case r.URL.Path == "/v1/refunds":
		return psptest.OpLookupRefund
	}
	return 0
}

type backend struct {
	*psptest.HTTPFaults
	fake *stripetest.Server
}

var _ psptest.Lapser = backend{}

func (b backend) Charges(orderID string) int    { return b.fake.Charges(orderID) }
func (b backend) Refunds(refundID string) int   { return b.fake.RefundCount(refundID) }
func (b backend) Captures(captureID string) int { return b.fake.Captures(captureID) }
func (b backend) Voids(voidID string) int       { return b.fake.CancelsWithKey("gw-void-" + voidID) }
func (b backend) Lapse(orderID string)          { b.fake.Lapse(orderID) }
func (b backend) Settle(orderID string, o psptest.Outcome) {
	b.fake.Authenticate(orderID, o == psptest.Success)
}

// The SDK sends the documented request: form fields, Bearer key, a
// deterministic Idempotency-Key, and no retries of its own.
func TestChargeRequestShape(t *testing.T) {
	fake := stripetest.New(key)
	ts := httptest.NewServer(fake)
	defer ts.Close()
	order := payments.MerchantOrderID("mer_1", "key-1")
	a := mustNew(t, ts.URL)
	_, err := a.Charge(t.Context(), psp.ChargeRequest{MerchantOrderID: order, Amount: 15000, Currency: "KRW",
		PaymentMethod: "pm_card_visa", Description: "Order A-1"})
	if err != nil {
		t.Fatal(err)
	}
	// Two-step checkout: the customer is at a browser that can act.
	_, err = a.Charge(t.Context(), psp.ChargeRequest{MerchantOrderID: order + "_2", Amount: 15000, Currency: "KRW",
		PaymentMethod: "pm_card_visa", AllowNextAction: true})
	if err != nil {
		t.Fatal(err)
	}
	requests := fake.Requests()
	if len(requests) != 2 {
		t.Fatalf("%d requests, want 2", len(requests))
	}
	if _, ok := requests[1].PostForm["error_on_requires_action"]; ok {
		t.Errorf("a two-step charge sent error_on_requires_action: %v", requests[1].PostForm)
	}
	r := requests[0]
	want := map[string]string{
		"amount": "15000", "currency": "krw", "payment_method": "pm_card_visa", "confirm": "true",
		"error_on_requires_action": "true", "automatic_payment_methods[enabled]": "true",
		"automatic_payment_methods[allow_redirects]": "never", "metadata[merchant_order_id]": order, "description": "Order A-1",
	}
	for k, v := range want {
		if got := r.PostForm.Get(k); got != v {
			t.Errorf("form %s = %q, want %q", k, got, v)
		}
	}
	if got := r.Header.Get("Idempotency-Key"); got != "gw-charge-"+order {
		t.Errorf("Idempotency-Key %q", got)
	}
	if r.Header.Get("Authorization") != "Bearer "+key || r.Header.Get("Stripe-Version") == "" {
		t.Errorf("headers %v", r.Header)
	}
}

// Each documented answer to a create lands in its outcome class.
func TestCreateAnswers(t *testing.T) {
	const order = "ord_000000000000000000000001"
	pi := `{"id":"pi_1","object":"payment_intent","amount":15000,"currency":"krw","status":"succeeded","metadata":{"merchant_order_id":"` + order + `"}}`
	// A declined PaymentIntent, in the 402's error and as the cancel that
	// makes its decline final returns it.
	declinedPI := func(status, code, decline string) string {
		return `{"id":"pi_9","object":"payment_intent","amount":15000,"currency":"krw","status":"` + status + `","cancellation_reason":"abandoned",` +
			`"metadata":{"merchant_order_id":"` + order + `"},"last_payment_error":{"type":"card_error","code":"` + code + `","decline_code":"` + decline + `"}}`
	}
	card := func(code, decline string) string {
		return `{"error":{"type":"card_error","code":"` + code + `","decline_code":"` + decline + `","message":"declined","payment_intent":` +
			strings.Replace(declinedPI("requires_payment_method", code, decline), `"cancellation_reason":"abandoned",`, "", 1) + `}}`
	}
	tests := []struct {
		name    string
		status  int
		body    string
		decline string // for a declined result
		class   psp.Class
		is      error
	}{
		{"succeeded", 200, pi, "", 0, nil},
		{"generic decline", 402, card("card_declined", "generic_decline"), psp.DeclineCardDeclined, 0, nil},
		{"insufficient funds", 402, card("card_declined", "insufficient_funds"), psp.DeclineInsufficientFunds, 0, nil},
		{"expired card", 402, card("expired_card", ""), "expired_card", 0, nil},
		{"3-D Secure required", 402, card("authentication_required", "authentication_required"), "authentication_required", 0, nil},
		{"no such payment method", 400, `{"error":{"type":"invalid_request_error","code":"resource_missing","param":"payment_method","message":"No such PaymentMethod"}}`, psp.DeclineInvalidPaymentMethod, 0, nil},
		{"key reused with other parameters", 400, `{"error":{"type":"idempotency_error","message":"Keys for idempotent requests can only be used with the same parameters"}}`, "", psp.NotProcessed, psp.ErrOrderConflict},
		{"amount too small", 400, `{"error":{"type":"invalid_request_error","code":"amount_too_small","param":"amount","message":"too small"}}`, "", psp.Rejected, nil},
		{"currency not taken", 400, `{"error":{"type":"invalid_request_error","code":"parameter_invalid_string","param":"currency","message":"Invalid currency"}}`, "", psp.Rejected, nil},
		{"code never seen", 400, `{"error":{"type":"invalid_request_error","code":"something_new","message":"?"}}`, "", psp.Rejected, nil},
		{"bad key", 401, `{"error":{"type":"invalid_request_error","message":"Invalid API Key provided"}}`, "", psp.NotProcessed, nil},
		{"restricted key lacks permission", 403, `{"error":{"type":"invalid_request_error","message":"The provided key does not have access"}}`, "", psp.NotProcessed, nil},
		{"expired key", 401, `{"error":{"type":"invalid_request_error","code":"api_key_expired","message":"Expired API Key provided"}}`, "", psp.NotProcessed, nil},
		{"object locked", 429, `{"error":{"type":"invalid_request_error","code":"lock_timeout","message":"This object cannot be accessed right now"}}`, "", psp.NotProcessed, nil},
		{"rate limited", 429, `{"error":{"type":"invalid_request_error","code":"rate_limit","message":"Too many requests"}}`, "", psp.NotProcessed, nil},
		{"same key in flight", 409, `{"error":{"type":"idempotency_error","code":"idempotency_key_in_use","message":"another request is in progress"}}`, "", psp.Unknown, nil},
		{"api error", 500, `{"error":{"type":"api_error","message":"An unknown error occurred"}}`, "", psp.Unknown, nil},
		{"edge html", 502, `<html>Bad Gateway</html>`, "", psp.Unknown, nil},
		{"4xx unreadable", 400, `<html>Bad Request</html>`, "", psp.Unknown, nil},
		{"200 unreadable", 200, `{"id":`, "", psp.Unknown, nil},
		{"authorized only", 200, strings.Replace(pi, `"succeeded"`, `"requires_capture"`, 1), "", psp.Unknown, psp.ErrMismatch},
		{"received more than charged", 200, strings.Replace(pi, `"amount":15000`, `"amount":15000,"amount_received":15001`, 1), "", psp.Unknown, psp.ErrMismatch},
		{"another order", 200, strings.Replace(pi, order, "ord_000000000000000000000002", 1), "", psp.Unknown, psp.ErrMismatch},
		{"another amount", 200, strings.Replace(pi, "15000", "15001", 1), "", psp.Unknown, psp.ErrMismatch},
		{"another currency", 200, strings.Replace(pi, "krw", "jpy", 1), "", psp.Unknown, psp.ErrMismatch},
		{"a currency it does not know", 200, strings.Replace(pi, "krw", "xts", 1), "", psp.Unknown, psp.ErrMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				if r.URL.Path == "/v1/payment_intents/pi_9/cancel" {
					// The decline made final: the PaymentIntent canceled, its error kept.
					var e struct {
						Error struct {
							Code        string `json:"code"`
							DeclineCode string `json:"decline_code"`
						}
					}
					_ = json.Unmarshal([]byte(tt.body), &e)
					_, _ = io.WriteString(w, declinedPI("canceled", e.Error.Code, e.Error.DeclineCode))
					return
				}
				w.WriteHeader(tt.status)
				_, _ = io.WriteString(w, tt.body)
			}))
			defer ts.Close()
			c, err := mustNew(t, ts.URL).Charge(t.Context(), psp.ChargeRequest{MerchantOrderID: order, Amount: 15000, Currency: "KRW", PaymentMethod: "pm_x"})
			if tt.class != 0 {
				if class, ok := psp.ClassOf(err); !ok || class != tt.class {
					t.Fatalf("Charge = %+v, %v; want class %s", c, err, tt.class)
				}
				if tt.is != nil && !errors.Is(err, tt.is) {
					t.Fatalf("err = %v, want %v", err, tt.is)
				}
				return
			}
			want := psp.Succeeded
			if tt.decline != "" {
				want = psp.Declined
			}
			if err != nil || c.Status != want || c.DeclineCode != tt.decline {
				t.Fatalf("Charge = %+v, %v; want %s %q", c, err, want, tt.decline)
			}
			if want == psp.Declined && (c.Code == "" || !strings.Contains(tt.body, `"`+c.Code+`"`)) {
				t.Fatalf("Charge = %+v: the raw code is not Stripe's", c)
			}
		})
	}
}

// Search may lag: a charge the lookup cannot see yet is not proof of none.
// The adapter says so in its capabilities, and a repeated Charge is safe
// because the idempotency key replays the first answer.
func TestSearchLagIsNotAuthoritative(t *testing.T) {
	fake := stripetest.New(key)
	fake.SetSearchLag(true)
	ts := httptest.NewServer(fake)
	defer ts.Close()
	a := mustNew(t, ts.URL)
	if a.Capabilities().AuthoritativeLookup {
		t.Fatal("a search-based lookup must not claim to be authoritative")
	}
	req := psp.ChargeRequest{MerchantOrderID: "ord_000000000000000000000001", Amount: 15000, Currency: "KRW", PaymentMethod: "pm_card_visa"}
	first, err := a.Charge(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Lookup(t.Context(), req.MerchantOrderID); !errors.Is(err, psp.ErrNotFound) {
		t.Fatalf("Lookup before indexing = %v, want ErrNotFound", err)
	}
	again, err := a.Charge(t.Context(), req)
	if err != nil || again != first || fake.Charges(req.MerchantOrderID) != 1 {
		t.Fatalf("repeat = %+v, %v; want %+v and one PaymentIntent", again, err, first)
	}
	fake.Index()
	if got, err := a.Lookup(t.Context(), req.MerchantOrderID); err != nil || got != first {
		t.Fatalf("Lookup after indexing = %+v, %v; want %+v", got, err, first)
	}
}

// Stripe keeps a 5xx its API produced for the idempotency key: repeats get
// the same Unknown, and only the lookup can tell that the charge exists.
func TestCachedServerError(t *testing.T) {
	fake := stripetest.New(key)
	fake.FailNextCreate()
	ts := httptest.NewServer(fake)
	defer ts.Close()
	a := mustNew(t, ts.URL)
	req := psp.ChargeRequest{MerchantOrderID: "ord_000000000000000000000001", Amount: 15000, Currency: "KRW", PaymentMethod: "pm_card_visa"}
	for i := range 2 {
		_, err := a.Charge(t.Context(), req)
		if class, ok := psp.ClassOf(err); !ok || class != psp.Unknown {
			t.Fatalf("call %d = %v, want Unknown", i, err)
		}
	}
	c, err := a.Lookup(t.Context(), req.MerchantOrderID)
	if err != nil || c.Status != psp.Succeeded || c.Reference == "" {
		t.Fatalf("Lookup = %+v, %v; want the charge made under the 500", c, err)
	}
	if n := fake.Charges(req.MerchantOrderID); n != 1 {
		t.Fatalf("%d PaymentIntents, want 1", n)
	}
}

// Should one order id have several PaymentIntents (a charge resent after its
// key expired), the lookup answers with the one that took money.
func TestLookupPrefersTheSucceededIntent(t *testing.T) {
	const order = "ord_000000000000000000000001"
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"object":"search_result","has_more":false,"data":[
			{"id":"pi_new","amount":15000,"currency":"krw","status":"requires_payment_method","created":300,"metadata":{"merchant_order_id":"`+order+`"},"last_payment_error":{"type":"card_error","code":"card_declined","decline_code":"generic_decline"}},
			{"id":"pi_old","amount":15000,"currency":"krw","status":"succeeded","created":100,"metadata":{"merchant_order_id":"`+order+`"}}]}`)
	}))
	defer ts.Close()
	c, err := mustNew(t, ts.URL).Lookup(t.Context(), order)
	if err != nil || c.Reference != "pi_old" || c.Status != psp.Succeeded {
		t.Fatalf("Lookup = %+v, %v; want pi_old", c, err)
	}
}

func TestRefundDeclineCodes(t *testing.T) {
	tests := []struct {
		name, body, code string
	}{
		{"no such payment intent", `{"error":{"type":"invalid_request_error","code":"resource_missing","param":"payment_intent","message":"No such payment_intent"}}`, psp.RefundDeclineChargeNotFound},
		{"already refunded", `{"error":{"type":"invalid_request_error","code":"charge_already_refunded","message":"has already been refunded"}}`, psp.RefundDeclineAmountExceeded},
		{"amount above what is left", `{"error":{"type":"invalid_request_error","param":"amount","message":"Refund amount is greater than unrefunded amount"}}`, psp.RefundDeclineAmountExceeded},
		{"no successful charge", `{"error":{"type":"invalid_request_error","message":"This PaymentIntent does not have a successful charge to refund."}}`, psp.RefundDeclineNotRefundable},
		{"disputed", `{"error":{"type":"invalid_request_error","code":"charge_disputed","message":"disputed"}}`, "charge_disputed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet { // the look for an earlier refund: none
					_, _ = io.WriteString(w, `{"object":"list","data":[],"has_more":false,"url":"/v1/refunds"}`)
					return
				}
				w.WriteHeader(http.StatusBadRequest)
				_, _ = io.WriteString(w, tt.body)
			}))
			defer ts.Close()
			r, err := mustNew(t, ts.URL).Refund(t.Context(), psp.RefundRequest{RefundOrderID: "rfd_1", MerchantOrderID: "ord_1",
				ChargeReference: "pi_1", Amount: 100, Currency: "KRW"})
			if err != nil || r.Status != psp.RefundDeclined || r.DeclineCode != tt.code || r.Code == "" {
				t.Fatalf("Refund = %+v, %v; want declined %s", r, err, tt.code)
			}
		})
	}
}

func TestConfig(t *testing.T) {
	if _, err := stripe.New(stripe.Config{}); err == nil {
		t.Fatal("New accepted an empty key")
	}
	if _, err := stripe.New(stripe.Config{SecretKey: key, BaseURL: "api.stripe.com"}); err == nil {
		t.Fatal("New accepted a URL without scheme")
	}
	var b strings.Builder
	slog.New(slog.NewTextHandler(&b, nil)).Info("psp", "stripe", stripe.Config{SecretKey: key})
	if strings.Contains(b.String(), key[8:]) || !strings.Contains(b.String(), "sk_test_****") {
		t.Fatalf("log line leaks the key or hides its kind: %s", b.String())
	}
	caps := mustNew(t, "http://127.0.0.1:1").Capabilities()
	if caps.Name != "stripe" || caps.AuthoritativeLookup || !caps.DedupesOrderID || caps.DedupeWindow == 0 || caps.Account != "" ||
		!caps.ManualCapture || caps.AuthorizationValidity != 7*24*time.Hour {
		t.Fatalf("Capabilities = %+v", caps)
	}
	labelled, err := stripe.New(stripe.Config{SecretKey: key, BaseURL: "http://127.0.0.1:1", Account: "acct_1Fake"})
	if err != nil || labelled.Capabilities().Account != "acct_1Fake" {
		t.Fatalf("the configured account label is not advertised: %v", err)
	}
	// The gateway's order ids fit in the idempotency key and the search query.
	if id := payments.MerchantOrderID("mer_1", "k"); len(id) > caps.MaxOrderIDLen {
		t.Fatalf("order id %q longer than %d", id, caps.MaxOrderIDLen)
	}
}

// The table follows Stripe's documented lists (docs.stripe.com/currencies)
// and ISO 4217 as the gateway counts it.
func TestCurrencyTable(t *testing.T) {
	caps := mustNew(t, "http://127.0.0.1:1").Capabilities()
	byCode := map[string]psp.Currency{}
	for _, c := range caps.Currencies {
		byCode[c.Code] = c
		iso, ok := payments.CurrencyExponent(c.Code)
		if !ok || iso != c.ISOExponent {
			t.Errorf("%s: ISO exponent %d, the gateway's table says %d (%v)", c.Code, c.ISOExponent, iso, ok)
		}
	}
	// "Zero-decimal currencies", as listed.
	for _, code := range strings.Fields("BIF CLP DJF GNF JPY KMF KRW MGA PYG RWF VND VUV XAF XOF XPF") {
		if c, ok := byCode[code]; !ok || c.Exponent != 0 {
			t.Errorf("%s: %+v, want zero-decimal", code, c)
		}
	}
	// "Three-decimal currencies": the last digit must be 0.
	for _, code := range strings.Fields("BHD JOD KWD OMR TND") {
		if c, ok := byCode[code]; !ok || c.Exponent != 3 || c.Multiple != 10 {
			t.Errorf("%s: %+v, want three decimals ending in 0", code, c)
		}
	}
	// "Special cases": two decimals that must be 00, and two decimals for
	// charges although zero-decimal for payouts.
	for _, code := range []string{"ISK", "UGX"} {
		if c := byCode[code]; c.Exponent != 2 || c.Multiple != 100 || c.ISOExponent != 0 {
			t.Errorf("%s: %+v, want two decimals, always 00", code, c)
		}
	}
	for _, code := range []string{"HUF", "TWD"} {
		if c := byCode[code]; c.Exponent != 2 || c.Multiple > 1 {
			t.Errorf("%s: %+v, want two decimals for charges", code, c)
		}
	}
	conversions := []struct {
		code        string
		iso, stripe int64
	}{
		{"USD", 1999, 1999}, {"JPY", 500, 500}, {"KRW", 15000, 15000}, {"HUF", 50050, 50050},
		{"ISK", 1000, 100000}, {"UGX", 5, 500}, {"MGA", 1500, 15}, {"KWD", 5120, 5120},
	}
	for _, tt := range conversions {
		if got, err := byCode[tt.code].ToPSP(tt.iso); err != nil || got != tt.stripe {
			t.Errorf("%d %s in ISO units = %d, %v at Stripe; want %d", tt.iso, tt.code, got, err, tt.stripe)
		}
	}
	limits := []struct {
		code string
		max  int64
	}{{"USD", 99_999_999}, {"JPY", 99_999_999}, {"IDR", 999_999_999_999}, {"ISK", 999_999}, {"MGA", 9_999_999_900}}
	for _, tt := range limits {
		if c := byCode[tt.code]; c.Max != tt.max {
			t.Errorf("%s Max = %d, want %d", tt.code, c.Max, tt.max)
		}
	}
	refused := []struct {
		amount   int64
		currency string
	}{{1550, "MGA"}, {5124, "KWD"}, {100_000_000, "USD"}, {1, "XTS"}}
	for _, tt := range refused {
		if err := caps.Check(tt.amount, tt.currency); err == nil {
			t.Errorf("Check(%d %s) accepted an amount Stripe cannot take", tt.amount, tt.currency)
		}
	}
}

// Amounts cross the wire in Stripe's units and come back in ISO units; what
// Stripe cannot represent is never sent.
func TestUnitsOnTheWire(t *testing.T) {
	fake := stripetest.New(key)
	ts := httptest.NewServer(fake)
	defer ts.Close()
	a := mustNew(t, ts.URL)
	tests := []struct {
		currency     string
		amount, sent int64
	}{{"ISK", 1000, 100000}, {"MGA", 1500, 15}, {"KWD", 5120, 5120}, {"JPY", 500, 500}, {"USD", 1999, 1999}}
	for i, tt := range tests {
		order := fmt.Sprintf("ord_%024d", i)
		c, err := a.Charge(t.Context(), psp.ChargeRequest{MerchantOrderID: order, Amount: tt.amount, Currency: tt.currency, PaymentMethod: "pm_card_visa"})
		if err != nil || c.Amount != tt.amount || c.Currency != tt.currency {
			t.Fatalf("Charge %d %s = %+v, %v", tt.amount, tt.currency, c, err)
		}
		requests := fake.Requests()
		sent := requests[len(requests)-1].PostForm.Get("amount")
		if sent != fmt.Sprint(tt.sent) {
			t.Fatalf("%d %s went to Stripe as %s, want %d", tt.amount, tt.currency, sent, tt.sent)
		}
		r, err := a.Refund(t.Context(), psp.RefundRequest{RefundOrderID: "rfd_" + order[4:], MerchantOrderID: order, ChargeReference: c.Reference,
			Amount: tt.amount, Currency: tt.currency})
		if err != nil || r.Amount != tt.amount || r.Status != psp.RefundSucceeded {
			t.Fatalf("Refund %d %s = %+v, %v", tt.amount, tt.currency, r, err)
		}
	}
	before := len(fake.Requests())
	for _, r := range []psp.ChargeRequest{
		{MerchantOrderID: "ord_mga", Amount: 1550, Currency: "MGA", PaymentMethod: "pm_card_visa"},
		{MerchantOrderID: "ord_kwd", Amount: 5124, Currency: "KWD", PaymentMethod: "pm_card_visa"},
	} {
		_, err := a.Charge(t.Context(), r)
		var ce *psp.CheckError
		if class, _ := psp.ClassOf(err); class != psp.Rejected || !errors.As(err, &ce) {
			t.Fatalf("Charge(%d %s) = %v, want Rejected with the reason", r.Amount, r.Currency, err)
		}
	}
	if len(fake.Requests()) != before {
		t.Fatal("an amount Stripe cannot represent was sent")
	}
}

// A PaymentIntent waiting for the customer or the bank is Pending, with what
// Stripe.js needs.
func TestPendingAnswers(t *testing.T) {
	const order = "ord_000000000000000000000001"
	pi := `{"id":"pi_1","object":"payment_intent","amount":15000,"currency":"krw","status":"%s","client_secret":"pi_1_secret_x","next_action":%s,"metadata":{"merchant_order_id":"` + order + `"}}`
	tests := []struct {
		name, status, next string
		want               *psp.NextAction
	}{
		{"3-D Secure", "requires_action", `{"type":"use_stripe_sdk","use_stripe_sdk":{}}`, &psp.NextAction{Type: "use_stripe_sdk", ClientSecret: "pi_1_secret_x"}},
		{"redirect", "requires_action", `{"type":"redirect_to_url","redirect_to_url":{"url":"https://hooks.stripe.com/3d_secure/x","return_url":"https://shop/back"}}`,
			&psp.NextAction{Type: psp.NextActionRedirect, URL: "https://hooks.stripe.com/3d_secure/x", ClientSecret: "pi_1_secret_x"}},
		{"processing", "processing", `null`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = fmt.Fprintf(w, pi, tt.status, tt.next)
			}))
			defer ts.Close()
			c, err := mustNew(t, ts.URL).Charge(t.Context(), psp.ChargeRequest{MerchantOrderID: order, Amount: 15000, Currency: "KRW",
				PaymentMethod: "pm_x", AllowNextAction: true})
			want := psp.Charge{MerchantOrderID: order, Reference: "pi_1", Status: psp.Pending, Amount: 15000, Currency: "KRW", NextAction: tt.want}
			if err != nil || !c.Equal(want) {
				t.Fatalf("Charge = %+v (%+v), %v; want %+v", c, c.NextAction, err, want)
			}
		})
	}
}

// One-step checkout cannot show 3-D Secure: such a card is a decline.
func TestOneStepThreeDSIsADecline(t *testing.T) {
	fake := stripetest.New(key)
	ts := httptest.NewServer(fake)
	defer ts.Close()
	c, err := mustNew(t, ts.URL).Charge(t.Context(), psp.ChargeRequest{MerchantOrderID: "ord_000000000000000000000001", Amount: 15000,
		Currency: "KRW", PaymentMethod: "pm_card_authenticationRequired"})
	if err != nil || c.Status != psp.Declined || c.DeclineCode != "authentication_required" || c.Code != "authentication_required" {
		t.Fatalf("Charge = %+v, %v; want declined authentication_required", c, err)
	}
}

// Search that answers with another order's PaymentIntent is not trusted.
func TestLookupRefusesAForeignIntent(t *testing.T) {
	const order = "ord_000000000000000000000001"
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, `{"object":"search_result","has_more":false,"data":[
			{"id":"pi_other","amount":15000,"currency":"krw","status":"succeeded","created":200,"metadata":{"merchant_order_id":"ord_else"}}]}`)
	}))
	defer ts.Close()
	c, err := mustNew(t, ts.URL).Lookup(t.Context(), order)
	if class, _ := psp.ClassOf(err); class != psp.Unknown || !errors.Is(err, psp.ErrMismatch) {
		t.Fatalf("Lookup = %+v, %v; want Unknown wrapping ErrMismatch", c, err)
	}
}

// A refund retried after Stripe forgot its idempotency key finds the refund
// it made instead of refunding again.
func TestRefundAfterKeyExpired(t *testing.T) {
	fake := stripetest.New(key)
	ts := httptest.NewServer(fake)
	defer ts.Close()
	a := mustNew(t, ts.URL)
	c, err := a.Charge(t.Context(), psp.ChargeRequest{MerchantOrderID: "ord_000000000000000000000001", Amount: 15000, Currency: "KRW", PaymentMethod: "pm_card_visa"})
	if err != nil {
		t.Fatal(err)
	}
	req := psp.RefundRequest{RefundOrderID: "rfd_000000000000000000000001", MerchantOrderID: c.MerchantOrderID, ChargeReference: c.Reference,
		Amount: 5000, Currency: "KRW"}
	first, err := a.Refund(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	fake.ForgetIdempotencyKeys()
	again, err := a.Refund(t.Context(), req)
	if err != nil || again != first || fake.RefundCount(req.RefundOrderID) != 1 {
		t.Fatalf("refund after the key expired = %+v, %v (%d refunds); want %+v once", again, err, fake.RefundCount(req.RefundOrderID), first)
	}
	req.Amount++
	_, err = a.Refund(t.Context(), req)
	if class, _ := psp.ClassOf(err); class != psp.NotProcessed || !errors.Is(err, psp.ErrOrderConflict) {
		t.Fatalf("refund order id reused with another amount = %v, want NotProcessed ErrOrderConflict", err)
	}
	if n := fake.RefundCount(req.RefundOrderID); n != 1 {
		t.Fatalf("%d refunds, want 1", n)
	}
}

// A PaymentIntent back in requires_payment_method after a decline can still
// be paid by a browser that holds its client secret: the decline is
// reported only once the PaymentIntent is canceled at Stripe, so that the
// gateway's "declined" can never be contradicted by a later payment.
func TestADeclineIsFinalAtStripe(t *testing.T) {
	const order = "ord_000000000000000000000001"
	t.Run("declined at once", func(t *testing.T) {
		fake := stripetest.New(key)
		ts := httptest.NewServer(fake)
		defer ts.Close()
		a := mustNew(t, ts.URL)
		c, err := a.Charge(t.Context(), psp.ChargeRequest{MerchantOrderID: order, Amount: 15000, Currency: "KRW", PaymentMethod: "pm_card_chargeDeclinedInsufficientFunds"})
		if err != nil || c.Status != psp.Declined || c.DeclineCode != psp.DeclineInsufficientFunds {
			t.Fatalf("Charge = %+v, %v", c, err)
		}
		if fake.Cancels() != 1 || fake.PayAgain(order) {
			t.Fatalf("%d cancels; a browser could pay the declined PaymentIntent again", fake.Cancels())
		}
		if got, err := a.Lookup(t.Context(), order); err != nil || got.Status != psp.Declined || got.DeclineCode != psp.DeclineInsufficientFunds {
			t.Fatalf("Lookup = %+v, %v; want the same decline", got, err)
		}
	})
	t.Run("3-D Secure failed, found by a lookup", func(t *testing.T) {
		fake := stripetest.New(key)
		ts := httptest.NewServer(fake)
		defer ts.Close()
		a := mustNew(t, ts.URL)
		c, err := a.Charge(t.Context(), psp.ChargeRequest{MerchantOrderID: order, Amount: 15000, Currency: "KRW",
			PaymentMethod: "pm_card_authenticationRequired", AllowNextAction: true})
		if err != nil || c.Status != psp.Pending {
			t.Fatalf("Charge = %+v, %v", c, err)
		}
		fake.Authenticate(order, false)
		got, err := a.Lookup(t.Context(), order)
		if err != nil || got.Status != psp.Declined || fake.Cancels() != 1 || fake.PayAgain(order) {
			t.Fatalf("Lookup = %+v, %v (%d cancels); want declined and canceled", got, err, fake.Cancels())
		}
	})
	declined := `{"id":"pi_1","object":"payment_intent","amount":15000,"currency":"krw","status":"requires_payment_method",` +
		`"metadata":{"merchant_order_id":"` + order + `"},"last_payment_error":{"type":"card_error","code":"card_declined","decline_code":"generic_decline"}}`
	for _, tt := range []struct {
		name          string
		cancel        func(w http.ResponseWriter)
		now           string // the PaymentIntent as Stripe has it after the cancel failed
		want          psp.ChargeStatus
		wantUnknownOK bool
	}{
		{"the customer paid meanwhile", func(w http.ResponseWriter) {
			w.WriteHeader(400)
			_, _ = io.WriteString(w, `{"error":{"type":"invalid_request_error","code":"payment_intent_unexpected_state","message":"status of succeeded"}}`)
		}, strings.Replace(strings.Replace(declined, "requires_payment_method", "succeeded", 1), `,"last_payment_error":{"type":"card_error","code":"card_declined","decline_code":"generic_decline"}`, "", 1), psp.Succeeded, false},
		{"the cancel failed", func(w http.ResponseWriter) {
			w.WriteHeader(500)
			_, _ = io.WriteString(w, `{"error":{"type":"api_error","message":"An unknown error occurred"}}`)
		}, declined, "", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch {
				case strings.HasSuffix(r.URL.Path, "/cancel"):
					tt.cancel(w)
				case r.URL.Path == "/v1/payment_intents/pi_1":
					_, _ = io.WriteString(w, tt.now)
				default:
					_, _ = io.WriteString(w, declined)
				}
			}))
			defer ts.Close()
			c, err := mustNew(t, ts.URL).Charge(t.Context(), psp.ChargeRequest{MerchantOrderID: order, Amount: 15000, Currency: "KRW", PaymentMethod: "pm_x"})
			if tt.wantUnknownOK {
				if class, _ := psp.ClassOf(err); class != psp.Unknown {
					t.Fatalf("Charge = %+v, %v; want Unknown: a decline that could still be paid is no answer", c, err)
				}
				return
			}
			if err != nil || c.Status != tt.want {
				t.Fatalf("Charge = %+v, %v; want %s", c, err, tt.want)
			}
		})
	}
}

// Manual capture sends what Stripe documents: capture_method=manual with
// the latest charge expanded, a capture of amount_to_capture in Stripe's
// units under its own key and metadata, a cancel with Stripe's reason.
func TestCaptureRequestShape(t *testing.T) {
	fake := stripetest.New(key)
	ts := httptest.NewServer(fake)
	defer ts.Close()
	a := mustNew(t, ts.URL)
	const order = "ord_000000000000000000000001"
	auth, err := a.Charge(t.Context(), psp.ChargeRequest{MerchantOrderID: order, Amount: 1000, Currency: "ISK",
		PaymentMethod: "pm_card_visa", CaptureMethod: psp.CaptureManual})
	if err != nil || auth.Status != psp.Authorized {
		t.Fatalf("Charge = %+v, %v", auth, err)
	}
	create := fake.Requests()[0]
	if create.PostForm.Get("capture_method") != "manual" || create.PostForm.Get("expand[0]") != "latest_charge" {
		t.Errorf("create form %v, want capture_method=manual and the latest charge expanded", create.PostForm)
	}
	if _, err := a.Capture(t.Context(), psp.CaptureRequest{OrderID: "cap_1", MerchantOrderID: order, ChargeReference: auth.Reference,
		Amount: 600, Currency: "ISK"}); err != nil {
		t.Fatal(err)
	}
	capture := fake.Requests()[1]
	want := map[string]string{"amount_to_capture": "60000", "metadata[capture_order_id]": "cap_1", "expand[0]": "latest_charge"}
	for k, v := range want {
		if got := capture.PostForm.Get(k); got != v {
			t.Errorf("capture form %s = %q, want %q", k, got, v)
		}
	}
	if capture.URL.Path != "/v1/payment_intents/"+auth.Reference+"/capture" || capture.Header.Get("Idempotency-Key") != "gw-capture-cap_1" {
		t.Errorf("capture sent to %s with key %q", capture.URL.Path, capture.Header.Get("Idempotency-Key"))
	}

	reasons := []struct{ gateway, stripe string }{
		{"duplicate", "duplicate"}, {"fraudulent", "fraudulent"}, {"requested_by_customer", "requested_by_customer"},
		{"abandoned", "abandoned"}, {"authorization_expired", "abandoned"}, {"something else", ""}, {"", ""},
	}
	for i, tt := range reasons {
		order := fmt.Sprintf("ord_%024d", i+2)
		auth, err := a.Charge(t.Context(), psp.ChargeRequest{MerchantOrderID: order, Amount: 1000, Currency: "KRW",
			PaymentMethod: "pm_card_visa", CaptureMethod: psp.CaptureManual})
		if err != nil {
			t.Fatal(err)
		}
		void := fmt.Sprintf("vod_%d", i)
		v, err := a.Void(t.Context(), psp.VoidRequest{OrderID: void, MerchantOrderID: order, ChargeReference: auth.Reference, Reason: tt.gateway})
		if err != nil || v.Status != psp.Voided {
			t.Fatalf("Void(%q) = %+v, %v", tt.gateway, v, err)
		}
		requests := fake.Requests()
		cancel := requests[len(requests)-1]
		_, sent := cancel.PostForm["cancellation_reason"]
		if cancel.PostForm.Get("cancellation_reason") != tt.stripe || sent != (tt.stripe != "") ||
			cancel.Header.Get("Idempotency-Key") != "gw-void-"+void || cancel.URL.Path != "/v1/payment_intents/"+auth.Reference+"/cancel" {
			t.Errorf("void with reason %q sent %s %v key %q; want cancellation_reason %q", tt.gateway, cancel.URL.Path, cancel.PostForm,
				cancel.Header.Get("Idempotency-Key"), tt.stripe)
		}
	}
	before := len(fake.Requests())
	for _, bad := range []psp.CaptureRequest{
		{OrderID: "", MerchantOrderID: order, ChargeReference: auth.Reference, Amount: 600, Currency: "ISK"},
		{OrderID: "cap 2", MerchantOrderID: order, ChargeReference: auth.Reference, Amount: 600, Currency: "ISK"},
		{OrderID: "cap_2", MerchantOrderID: order, ChargeReference: "../refunds", Amount: 600, Currency: "ISK"},
		{OrderID: "cap_2", MerchantOrderID: order, ChargeReference: auth.Reference, Amount: 1550, Currency: "MGA"}, // not whole ariary at Stripe
	} {
		_, err := a.Capture(t.Context(), bad)
		if class, _ := psp.ClassOf(err); class != psp.Rejected {
			t.Errorf("Capture(%+v) = %v, want Rejected without sending", bad, err)
		}
	}
	if _, err := a.Void(t.Context(), psp.VoidRequest{OrderID: "vod_x", MerchantOrderID: order}); err == nil {
		t.Error("a void without a payment intent was sent")
	}
	if n := len(fake.Requests()); n != before {
		t.Fatalf("%d refused requests were sent", n-before)
	}
}

// Each answer to a capture or cancel lands in its outcome class; a refusal
// because the PaymentIntent has moved on is answered with it as it stands.
func TestCommandAnswers(t *testing.T) {
	const order = "ord_000000000000000000000001"
	pi := func(status, extra string) string {
		return `{"id":"pi_1","object":"payment_intent","amount":15000,"currency":"krw","status":"` + status + `","capture_method":"manual",` +
			`"metadata":{"merchant_order_id":"` + order + `"}` + extra + `}`
	}
	unexpected := `{"error":{"type":"invalid_request_error","code":"payment_intent_unexpected_state","message":"status of canceled"}}`
	tests := []struct {
		name           string
		status         int
		body           string
		now            string // what a retrieval answers; "" fails it with a 500
		want           psp.ChargeStatus
		captured       int64
		class          psp.Class
		is             error
		noRetrieveSent bool
	}{
		{"captured", 200, pi("succeeded", `,"amount_received":6000`), "", psp.Succeeded, 6000, 0, nil, true},
		{"voided", 200, pi("canceled", `,"cancellation_reason":"requested_by_customer"`), "", psp.Voided, 0, 0, nil, true},
		{"captured already", 400, unexpected, pi("succeeded", `,"amount_received":15000`), psp.Succeeded, 15000, 0, nil, false},
		{"voided already", 400, unexpected, pi("canceled", ``), psp.Voided, 0, 0, nil, false},
		{"expired", 400, unexpected, pi("canceled", `,"cancellation_reason":"automatic"`), psp.Voided, 0, 0, nil, false},
		{"never authorized", 400, unexpected, pi("requires_action", `,"next_action":{"type":"use_stripe_sdk"}`), psp.Pending, 0, 0, nil, false},
		{"moved on, and the retrieval failed", 400, unexpected, "", "", 0, psp.Unknown, nil, false},
		{"no such payment intent", 404, `{"error":{"type":"invalid_request_error","code":"resource_missing","message":"No such payment_intent"}}`, "", "", 0, psp.Rejected, nil, true},
		{"more than capturable", 400, `{"error":{"type":"invalid_request_error","code":"amount_too_large","param":"amount_to_capture","message":"too large"}}`, "", "", 0, psp.Rejected, nil, true},
		{"key reused", 400, `{"error":{"type":"idempotency_error","message":"Keys for idempotent requests can only be used with the same parameters"}}`, "", "", 0, psp.NotProcessed, psp.ErrOrderConflict, true},
		{"rate limited", 429, `{"error":{"type":"invalid_request_error","code":"rate_limit","message":"Too many requests"}}`, "", "", 0, psp.NotProcessed, nil, true},
		{"api error", 500, `{"error":{"type":"api_error","message":"An unknown error occurred"}}`, "", "", 0, psp.Unknown, nil, true},
		{"another order", 200, strings.Replace(pi("succeeded", ""), order, "ord_000000000000000000000002", 1), "", "", 0, psp.Unknown, psp.ErrMismatch, true},
		{"received more than authorized", 200, pi("succeeded", `,"amount_received":15001`), "", "", 0, psp.Unknown, psp.ErrMismatch, true},
	}
	for _, tt := range tests {
		for _, op := range []string{"capture", "void"} {
			t.Run(op+" "+tt.name, func(t *testing.T) {
				retrieved := false
				ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", "application/json")
					if r.Method == http.MethodGet && r.URL.Path == "/v1/payment_intents/pi_1" {
						retrieved = true
						if r.URL.Query().Get("expand[0]") != "latest_charge" {
							t.Errorf("retrieved without the latest charge expanded: %s", r.URL.RawQuery)
						}
						if tt.now == "" {
							w.WriteHeader(500)
							_, _ = io.WriteString(w, `{"error":{"type":"api_error","message":"An unknown error occurred"}}`)
							return
						}
						_, _ = io.WriteString(w, tt.now)
						return
					}
					if want := "/v1/payment_intents/pi_1/" + map[string]string{"capture": "capture", "void": "cancel"}[op]; r.URL.Path != want {
						t.Errorf("sent to %s, want %s", r.URL.Path, want)
					}
					w.WriteHeader(tt.status)
					_, _ = io.WriteString(w, tt.body)
				}))
				defer ts.Close()
				a := mustNew(t, ts.URL)
				var (
					c   psp.Charge
					err error
				)
				if op == "capture" {
					c, err = a.Capture(t.Context(), psp.CaptureRequest{OrderID: "cap_1", MerchantOrderID: order, ChargeReference: "pi_1", Amount: 6000, Currency: "KRW"})
				} else {
					c, err = a.Void(t.Context(), psp.VoidRequest{OrderID: "vod_1", MerchantOrderID: order, ChargeReference: "pi_1", Reason: "duplicate"})
				}
				if retrieved == tt.noRetrieveSent {
					t.Errorf("retrieved: %v, want %v", retrieved, !tt.noRetrieveSent)
				}
				if tt.class != 0 {
					if class, ok := psp.ClassOf(err); !ok || class != tt.class {
						t.Fatalf("got %+v, %v; want class %s", c, err, tt.class)
					}
					if tt.is != nil && !errors.Is(err, tt.is) {
						t.Fatalf("err = %v, want %v", err, tt.is)
					}
					return
				}
				if err != nil || c.Status != tt.want || c.AmountCaptured != tt.captured || c.Reference != "pi_1" || c.MerchantOrderID != order {
					t.Fatalf("got %+v, %v; want %s with %d captured", c, err, tt.want, tt.captured)
				}
			})
		}
	}
}

// How a manual PaymentIntent reads: an authorization with its deadline
// when the latest charge is expanded, voided when canceled without a
// decline, declined when its decline made it canceled.
func TestAuthorizationAnswers(t *testing.T) {
	const order = "ord_000000000000000000000001"
	pi := func(status, extra string) string {
		return `{"object":"search_result","has_more":false,"data":[{"id":"pi_1","amount":15000,"currency":"krw","status":"` + status +
			`","created":100,"metadata":{"merchant_order_id":"` + order + `"}` + extra + `}]}`
	}
	deadline := time.Date(2026, 3, 8, 9, 30, 15, 0, time.UTC)
	charge := fmt.Sprintf(`,"latest_charge":{"id":"ch_1","object":"charge","payment_method_details":{"type":"card","card":{"capture_before":%d}}}`, deadline.Unix())
	lpe := `,"last_payment_error":{"type":"card_error","code":"card_declined","decline_code":"insufficient_funds"}`
	tests := []struct {
		name string
		body string
		want psp.Charge
	}{
		{"authorized", pi("requires_capture", `,"capture_method":"manual","amount_capturable":15000`+charge),
			psp.Charge{Status: psp.Authorized, CaptureBefore: deadline}},
		{"authorized, charge not expanded", pi("requires_capture", `,"capture_method":"manual","latest_charge":"ch_1"`),
			psp.Charge{Status: psp.Authorized}},
		{"captured in part", pi("succeeded", `,"capture_method":"manual","amount_received":5000`+charge),
			psp.Charge{Status: psp.Succeeded, AmountCaptured: 5000}},
		{"taken at once", pi("succeeded", `,"amount_received":15000`), psp.Charge{Status: psp.Succeeded, AmountCaptured: 15000}},
		{"voided", pi("canceled", `,"capture_method":"manual","cancellation_reason":"duplicate"`+charge), psp.Charge{Status: psp.Voided}},
		{"expired", pi("canceled", `,"capture_method":"manual","cancellation_reason":"automatic"`), psp.Charge{Status: psp.Voided}},
		{"declined, manual", pi("canceled", `,"capture_method":"manual","cancellation_reason":"abandoned"`+lpe),
			psp.Charge{Status: psp.Declined, DeclineCode: psp.DeclineInsufficientFunds, Code: "insufficient_funds"}},
		{"canceled, automatic", pi("canceled", `,"capture_method":"automatic","cancellation_reason":"duplicate"`),
			psp.Charge{Status: psp.Declined, DeclineCode: "canceled", Code: "duplicate"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Query().Get("expand[0]") != "data.latest_charge" {
					t.Errorf("searched without the latest charge expanded: %s", r.URL.RawQuery)
				}
				_, _ = io.WriteString(w, tt.body)
			}))
			defer ts.Close()
			c, err := mustNew(t, ts.URL).Lookup(t.Context(), order)
			tt.want.MerchantOrderID, tt.want.Reference, tt.want.Amount, tt.want.Currency = order, "pi_1", 15000, "KRW"
			if err != nil || !c.Equal(tt.want) {
				t.Fatalf("Lookup = %+v, %v; want %+v", c, err, tt.want)
			}
		})
	}
}
