package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"gateway/errs"
	"gateway/idemkeys"
	"gateway/merchants"
	"gateway/payments"
)

// FuzzParseCreate feeds arbitrary keys and bodies through the decoding and
// validation a POST /payments goes through before anything is stored. Every
// input must end as a valid command or a 4xx problem, never a panic or a 5xx;
// a valid command must survive a round trip through JSON with another key
// order as the same command (same fingerprint).
func FuzzParseCreate(f *testing.F) {
	for _, seed := range []struct{ key, body string }{
		{"k", `{"amount": 1000, "currency": "KRW", "payment_method": "pm_card_ok"}`},
		{"order-1", `{"amount": 1, "currency": "usd", "payment_method": "pm", "description": "é", "metadata": {"a": "b"}}`},
		{"", `{}`},
		{"k", `{"amount": 1.5}`},
		{"k", `{"amount": 1e3, "currency": "KRW", "payment_method": "x"}`},
		{"k", `{"amount": 1000, "currency": "KRW", "payment_method": "x", "extra": 1}`},
		{"k", `{"amount": 1000} {"amount": 2}`},
		{"k", `null`},
		{"k", `[]`},
		{"k\x00", `{"amount": 9223372036854775807, "currency": "BHD", "payment_method": "x"}`},
		{strings.Repeat("k", 256), `{"metadata": {"": ""}}`},
		{"k", "{\"description\": \"\\u0000\"}"},
		{"k", `{"amount": 1000, "currency": "KRW", "confirm": false}`},
		{"k", `{"amount": 1000, "currency": "KRW", "payment_method": "pm", "metadata": null}`},
		{"k", `{"amount": 1000, "currency": "KRW", "payment_method": "pm", "capture_method": "manual"}`},
	} {
		f.Add(seed.key, []byte(seed.body))
	}
	s := &Server{obs: noObserver{}, opts: Options{MaxBodyBytes: 16 << 10}}
	e := echo.New()
	f.Fuzz(func(t *testing.T, key string, body []byte) {
		req, err := parse(e, s, key, body)
		if err != nil {
			var (
				pe *errs.Error
				mb *http.MaxBytesError
			)
			switch {
			case errors.As(err, &mb):
			case errors.As(err, &pe):
				if kind, ok := problems[pe.Code]; !ok || kind.status < 400 || kind.status >= 500 {
					t.Fatalf("input refused with %v (status %d)", pe.Code, kind.status)
				}
			default:
				t.Fatalf("unclassified error %T: %v", err, err)
			}
			return
		}
		if req.Amount.Minor <= 0 || req.Amount.Minor > payments.MaxAmountMinor {
			t.Fatalf("accepted amount %d", req.Amount.Minor)
		}
		if _, ok := payments.CurrencyExponent(req.Amount.Currency); !ok {
			t.Fatalf("accepted currency %q", req.Amount.Currency)
		}
		// Re-encode the command with the fields in another order: same command, same fingerprint.
		fields := map[string]any{
			"payment_method": req.PaymentMethod, "description": req.Description,
			"currency": strings.ToLower(req.Amount.Currency), "amount": req.Amount.Minor,
		}
		if req.Metadata != nil {
			fields["metadata"] = req.Metadata // no field is ever null
		}
		if req.ConfirmLater {
			fields["confirm"] = false
		}
		if req.CaptureMethod != "" {
			fields["capture_method"] = string(req.CaptureMethod)
		}
		again, err := json.Marshal(fields)
		if err != nil {
			t.Fatal(err)
		}
		req2, err := parse(e, s, key, again)
		if err != nil {
			t.Fatalf("re-encoded valid command refused: %v\n%s", err, again)
		}
		if req.Fingerprint() != req2.Fingerprint() {
			t.Fatalf("fingerprint changed across a re-encoding:\n%s\n%s", body, again)
		}
	})
}

// parse runs the handler's decoding and the service's validation.
func parse(e *echo.Echo, s *Server, key string, body []byte) (payments.CreateRequest, error) {
	r := httptest.NewRequest(http.MethodPost, "/payments", bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header["Idempotency-Key"] = []string{key}
	c := e.NewContext(r, httptest.NewRecorder())
	c.Set(merchantKey, merchants.Merchant{ID: "mer_fuzz"})
	k, err := s.idempotencyKey(c, "")
	if err != nil {
		return payments.CreateRequest{}, err
	}
	raw, err := s.readJSONBody(c)
	if err != nil {
		return payments.CreateRequest{}, err
	}
	req, err := s.parseCreate(c, k, raw)
	if err != nil {
		return req, err
	}
	if err := idemkeys.ValidateKey(req.IdempotencyKey); err != nil {
		return req, &errs.Error{Code: errs.CodeInvalidKey, Message: err.Error()}
	}
	req.Normalize()
	return req, req.Validate()
}
