package payments_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"gateway/errs"
	"gateway/payments"
)

// validRequest is a request that passes Validate; each case below breaks it
// in one place (or several).
func validRequest() payments.CreateRequest {
	return payments.CreateRequest{
		MerchantID:     "mer_01HZX",
		IdempotencyKey: "key-1",
		Amount:         payments.Money{Minor: 1999, Currency: "USD"},
		PaymentMethod:  "pm_card_visa",
		Description:    "Order #1001",
		Metadata:       map[string]string{"order_id": "1001", "channel": "web"},
	}
}

// metadataN returns n distinct valid metadata entries.
func metadataN(n int) map[string]string {
	m := make(map[string]string, n)
	for i := range n {
		m[fmt.Sprintf("k%02d", i)] = fmt.Sprintf("v%d", i)
	}
	return m
}

func TestCreateRequestValidateAccepts(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(r *payments.CreateRequest)
	}{
		{"baseline", func(r *payments.CreateRequest) {}},
		{"amount 1", func(r *payments.CreateRequest) { r.Amount.Minor = 1 }},
		{"amount max", func(r *payments.CreateRequest) { r.Amount.Minor = payments.MaxAmountMinor }},
		{"zero-exponent currency", func(r *payments.CreateRequest) { r.Amount.Currency = "KRW" }},
		{"payment method at limit", func(r *payments.CreateRequest) {
			r.PaymentMethod = strings.Repeat("p", payments.MaxPaymentMethodLen)
		}},
		{"empty description", func(r *payments.CreateRequest) { r.Description = "" }},
		{"description at limit (ascii)", func(r *payments.CreateRequest) {
			r.Description = strings.Repeat("d", payments.MaxDescriptionLen)
		}},
		{"description at limit in runes, 3 bytes each", func(r *payments.CreateRequest) {
			r.Description = strings.Repeat("가", payments.MaxDescriptionLen)
		}},
		{"description at limit in runes, 4 bytes each", func(r *payments.CreateRequest) {
			r.Description = strings.Repeat("🙂", payments.MaxDescriptionLen)
		}},
		{"description with no-break space and punctuation", func(r *payments.CreateRequest) {
			r.Description = "Café\u00a0«crème» — 2×€3, 100% <ok> & \"quoted\""
		}},
		{"nil metadata", func(r *payments.CreateRequest) { r.Metadata = nil }},
		{"empty metadata", func(r *payments.CreateRequest) { r.Metadata = map[string]string{} }},
		{"metadata at key count limit", func(r *payments.CreateRequest) { r.Metadata = metadataN(payments.MaxMetadataKeys) }},
		{"metadata key at limit (ascii)", func(r *payments.CreateRequest) {
			r.Metadata = map[string]string{strings.Repeat("k", payments.MaxMetadataKeyLen): "v"}
		}},
		{"metadata key at limit in runes", func(r *payments.CreateRequest) {
			r.Metadata = map[string]string{strings.Repeat("키", payments.MaxMetadataKeyLen): "v"}
		}},
		{"metadata value at limit (ascii)", func(r *payments.CreateRequest) {
			r.Metadata = map[string]string{"k": strings.Repeat("v", payments.MaxMetadataValueLen)}
		}},
		{"metadata value at limit in runes", func(r *payments.CreateRequest) {
			r.Metadata = map[string]string{"k": strings.Repeat("값", payments.MaxMetadataValueLen)}
		}},
		{"metadata empty value", func(r *payments.CreateRequest) { r.Metadata = map[string]string{"k": ""} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := validRequest()
			tt.mutate(&r)
			if err := r.Validate(); err != nil {
				t.Errorf("Validate() = %v, want nil", err)
			}
		})
	}
}

func TestCreateRequestValidateRefuses(t *testing.T) {
	tests := []struct {
		name       string
		mutate     func(r *payments.CreateRequest)
		wantFields []string
	}{
		{"amount 0", func(r *payments.CreateRequest) { r.Amount.Minor = 0 }, []string{"amount"}},
		{"amount -1", func(r *payments.CreateRequest) { r.Amount.Minor = -1 }, []string{"amount"}},
		{"amount most negative", func(r *payments.CreateRequest) { r.Amount.Minor = -1 << 63 }, []string{"amount"}},
		{"amount max+1", func(r *payments.CreateRequest) { r.Amount.Minor = payments.MaxAmountMinor + 1 }, []string{"amount"}},
		{"amount max int64", func(r *payments.CreateRequest) { r.Amount.Minor = 1<<63 - 1 }, []string{"amount"}},

		{"currency empty", func(r *payments.CreateRequest) { r.Amount.Currency = "" }, []string{"currency"}},
		{"currency lower case, not normalized", func(r *payments.CreateRequest) { r.Amount.Currency = "usd" }, []string{"currency"}},
		{"currency unknown", func(r *payments.CreateRequest) { r.Amount.Currency = "ABC" }, []string{"currency"}},
		{"currency without minor unit", func(r *payments.CreateRequest) { r.Amount.Currency = "XAU" }, []string{"currency"}},
		{"currency too long", func(r *payments.CreateRequest) { r.Amount.Currency = "USDD" }, []string{"currency"}},
		{"currency padded", func(r *payments.CreateRequest) { r.Amount.Currency = " USD" }, []string{"currency"}},

		{"payment method empty", func(r *payments.CreateRequest) { r.PaymentMethod = "" }, []string{"payment_method"}},
		{"payment method over limit", func(r *payments.CreateRequest) {
			r.PaymentMethod = strings.Repeat("p", payments.MaxPaymentMethodLen+1)
		}, []string{"payment_method"}},
		{"payment method with newline", func(r *payments.CreateRequest) { r.PaymentMethod = "pm_card\n" }, []string{"payment_method"}},
		{"payment method with NUL", func(r *payments.CreateRequest) { r.PaymentMethod = "pm\x00card" }, []string{"payment_method"}},
		{"payment method invalid utf-8", func(r *payments.CreateRequest) { r.PaymentMethod = "pm_\xff" }, []string{"payment_method"}},

		{"description over limit (ascii)", func(r *payments.CreateRequest) {
			r.Description = strings.Repeat("d", payments.MaxDescriptionLen+1)
		}, []string{"description"}},
		{"description over limit in runes", func(r *payments.CreateRequest) {
			r.Description = strings.Repeat("가", payments.MaxDescriptionLen+1)
		}, []string{"description"}},
		{"description with newline", func(r *payments.CreateRequest) { r.Description = "line1\nline2" }, []string{"description"}},
		{"description with tab", func(r *payments.CreateRequest) { r.Description = "a\tb" }, []string{"description"}},
		{"description with NUL", func(r *payments.CreateRequest) { r.Description = "a\x00b" }, []string{"description"}},
		{"description with escape", func(r *payments.CreateRequest) { r.Description = "\x1b[31mred" }, []string{"description"}},
		{"description with DEL", func(r *payments.CreateRequest) { r.Description = "a\x7fb" }, []string{"description"}},
		{"description with C1 control", func(r *payments.CreateRequest) { r.Description = "a\u0085b" }, []string{"description"}},
		{"description with last C1 control", func(r *payments.CreateRequest) { r.Description = "a\u009fb" }, []string{"description"}},
		{"description invalid utf-8", func(r *payments.CreateRequest) { r.Description = "caf\xe9" }, []string{"description"}},
		{"description truncated utf-8", func(r *payments.CreateRequest) { r.Description = "가"[:2] }, []string{"description"}},

		{"metadata over key count", func(r *payments.CreateRequest) {
			r.Metadata = metadataN(payments.MaxMetadataKeys + 1)
		}, []string{"metadata"}},
		{"metadata empty key", func(r *payments.CreateRequest) { r.Metadata = map[string]string{"": "v"} }, []string{"metadata"}},
		{"metadata key over limit (ascii)", func(r *payments.CreateRequest) {
			r.Metadata = map[string]string{strings.Repeat("k", payments.MaxMetadataKeyLen+1): "v"}
		}, []string{"metadata"}},
		{"metadata key over limit in runes", func(r *payments.CreateRequest) {
			r.Metadata = map[string]string{strings.Repeat("키", payments.MaxMetadataKeyLen+1): "v"}
		}, []string{"metadata"}},
		{"metadata key with control", func(r *payments.CreateRequest) { r.Metadata = map[string]string{"a\nb": "v"} }, []string{"metadata"}},
		{"metadata key invalid utf-8", func(r *payments.CreateRequest) { r.Metadata = map[string]string{"k\xff": "v"} }, []string{"metadata"}},
		{"metadata value over limit (ascii)", func(r *payments.CreateRequest) {
			r.Metadata = map[string]string{"note": strings.Repeat("v", payments.MaxMetadataValueLen+1)}
		}, []string{"metadata.note"}},
		{"metadata value over limit in runes", func(r *payments.CreateRequest) {
			r.Metadata = map[string]string{"note": strings.Repeat("값", payments.MaxMetadataValueLen+1)}
		}, []string{"metadata.note"}},
		{"metadata value with control", func(r *payments.CreateRequest) { r.Metadata = map[string]string{"note": "a\rb"} }, []string{"metadata.note"}},
		{"metadata value invalid utf-8", func(r *payments.CreateRequest) { r.Metadata = map[string]string{"note": "\xc3\x28"} }, []string{"metadata.note"}},
		{"metadata two bad values, sorted by key", func(r *payments.CreateRequest) {
			r.Metadata = map[string]string{"zeta": "\x00", "alpha": "\x01", "ok": "fine"}
		}, []string{"metadata.alpha", "metadata.zeta"}},

		{"several fields at once", func(r *payments.CreateRequest) {
			r.Amount = payments.Money{Minor: 0, Currency: "usd"}
			r.PaymentMethod = ""
			r.Description = "bad\x00"
			r.Metadata = map[string]string{"note": "\n"}
		}, []string{"amount", "currency", "payment_method", "description", "metadata.note"}},
		{"every field over its limit", func(r *payments.CreateRequest) {
			r.Amount.Minor = payments.MaxAmountMinor + 1
			r.Amount.Currency = "ZZZ"
			r.PaymentMethod = strings.Repeat("p", payments.MaxPaymentMethodLen+1)
			r.Description = strings.Repeat("d", payments.MaxDescriptionLen+1)
			r.Metadata = metadataN(payments.MaxMetadataKeys + 1)
		}, []string{"amount", "currency", "payment_method", "description", "metadata"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := validRequest()
			tt.mutate(&r)
			e := mustInvalid(t, r.Validate())
			var got []string
			for _, f := range e.Fields {
				got = append(got, f.Field)
				if f.Reason == "" {
					t.Errorf("field %q has no reason", f.Field)
				}
			}
			if !slices.Equal(got, tt.wantFields) {
				t.Errorf("invalid fields = %q, want %q", got, tt.wantFields)
			}
		})
	}
}

func TestCreateRequestValidateReasons(t *testing.T) {
	r := validRequest()
	r.Amount.Minor = payments.MaxAmountMinor + 1
	r.PaymentMethod = ""
	e := mustInvalid(t, r.Validate())
	want := map[string]string{
		"amount":         fmt.Sprint(int64(payments.MaxAmountMinor)),
		"payment_method": "required",
	}
	for _, f := range e.Fields {
		if w, ok := want[f.Field]; ok && !strings.Contains(f.Reason, w) {
			t.Errorf("reason for %s = %q, want it to mention %q", f.Field, f.Reason, w)
		}
	}
}

func mustInvalid(tb testing.TB, err error) *errs.Error {
	tb.Helper()
	var e *errs.Error
	if !errors.As(err, &e) {
		tb.Fatalf("Validate() = %v (%T), want *errs.Error", err, err)
	}
	if e.Code != errs.CodeInvalid {
		tb.Fatalf("errs.Code = %q, want %q", e.Code, errs.CodeInvalid)
	}
	if e.Message == "" {
		tb.Errorf("Message is empty")
	}
	return e
}

func TestCreateRequestNormalize(t *testing.T) {
	tests := []struct {
		name, currency, want string
	}{
		{"lower", "usd", "USD"},
		{"mixed", "kRw", "KRW"},
		{"upper", "EUR", "EUR"},
		{"empty", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := validRequest()
			r.Amount.Currency = tt.currency
			r.Description = "Mixed Case Description"
			r.PaymentMethod = "PM_Card"
			r.Metadata = map[string]string{"Key": "Value"}
			r.Normalize()
			if r.Amount.Currency != tt.want {
				t.Errorf("Currency = %q, want %q", r.Amount.Currency, tt.want)
			}
			// Only the currency is case-insensitive; everything else is the client's data.
			if r.Description != "Mixed Case Description" || r.PaymentMethod != "PM_Card" || r.Metadata["Key"] != "Value" {
				t.Errorf("Normalize changed other fields: %+v", r)
			}
		})
	}

	t.Run("lower case currency validates once normalized", func(t *testing.T) {
		r := validRequest()
		r.Amount.Currency = "jpy"
		r.Normalize()
		if err := r.Validate(); err != nil {
			t.Errorf("Validate() after Normalize = %v, want nil", err)
		}
	})
	t.Run("same command in another case fingerprints alike", func(t *testing.T) {
		a, b := validRequest(), validRequest()
		a.Amount.Currency = "usd"
		a.Normalize()
		b.Normalize()
		if a.Fingerprint() != b.Fingerprint() {
			t.Errorf("usd and USD requests fingerprint differently after Normalize")
		}
	})
}

func TestCreateRequestFingerprintEqual(t *testing.T) {
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	forward, backward := map[string]string{}, map[string]string{}
	for _, k := range keys {
		forward[k] = "v-" + k
	}
	for i := len(keys) - 1; i >= 0; i-- {
		backward[keys[i]] = "v-" + keys[i]
	}
	a, b := validRequest(), validRequest()
	a.Metadata, b.Metadata = forward, backward
	if a.Fingerprint() != b.Fingerprint() {
		t.Errorf("maps built in different orders fingerprint differently")
	}
	for i := range 20 { // map iteration order is randomized: repeat
		if a.Fingerprint() != a.Fingerprint() {
			t.Fatalf("run %d: Fingerprint is not stable", i)
		}
	}

	t.Run("nil and empty metadata", func(t *testing.T) {
		// Both render as "metadata": {} and mean "none".
		a, b := validRequest(), validRequest()
		a.Metadata, b.Metadata = nil, map[string]string{}
		if a.Fingerprint() != b.Fingerprint() {
			t.Errorf("nil and empty metadata fingerprint differently")
		}
	})
}

func TestCreateRequestFingerprintDiffers(t *testing.T) {
	tests := []struct {
		name string
		a, b func(r *payments.CreateRequest)
	}{
		{"amount", nop, func(r *payments.CreateRequest) { r.Amount.Minor++ }},
		{"currency", nop, func(r *payments.CreateRequest) { r.Amount.Currency = "EUR" }},
		{"payment method", nop, func(r *payments.CreateRequest) { r.PaymentMethod = "pm_card_mastercard" }},
		{"payment method case", nop, func(r *payments.CreateRequest) { r.PaymentMethod = "PM_CARD_VISA" }},
		{"description", nop, func(r *payments.CreateRequest) { r.Description = "Order #1002" }},
		{"description empty vs set", func(r *payments.CreateRequest) { r.Description = "" }, nop},
		{"metadata value", nop, func(r *payments.CreateRequest) { r.Metadata["channel"] = "app" }},
		{"metadata key renamed", nop, func(r *payments.CreateRequest) {
			r.Metadata = map[string]string{"order_id": "1001", "chanel": "web"}
		}},
		{"metadata entry added", nop, func(r *payments.CreateRequest) { r.Metadata["extra"] = "1" }},
		{"metadata entry with empty value added", nop, func(r *payments.CreateRequest) { r.Metadata["extra"] = "" }},
		{"metadata key and value swapped",
			func(r *payments.CreateRequest) { r.Metadata = map[string]string{"a": "b"} },
			func(r *payments.CreateRequest) { r.Metadata = map[string]string{"b": "a"} }},
		{"metadata key/value boundary",
			func(r *payments.CreateRequest) { r.Metadata = map[string]string{"ab": "c"} },
			func(r *payments.CreateRequest) { r.Metadata = map[string]string{"a": "bc"} }},
		{"metadata entry boundary",
			func(r *payments.CreateRequest) { r.Metadata = map[string]string{"a": "b", "c": "d"} },
			func(r *payments.CreateRequest) { r.Metadata = map[string]string{"a": "bcd"} }},
		{"description vs payment method boundary",
			func(r *payments.CreateRequest) { r.PaymentMethod, r.Description = "card", "x" },
			func(r *payments.CreateRequest) { r.PaymentMethod, r.Description = "cardx", "" }},
		{"description vs metadata boundary",
			func(r *payments.CreateRequest) { r.Description, r.Metadata = "ab", map[string]string{"c": "d"} },
			func(r *payments.CreateRequest) { r.Description, r.Metadata = "a", map[string]string{"bc": "d"} }},
		{"amount vs currency boundary",
			func(r *payments.CreateRequest) { r.Amount = payments.Money{Minor: 12, Currency: "USD"} },
			func(r *payments.CreateRequest) { r.Amount = payments.Money{Minor: 1, Currency: "2USD"} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := validRequest(), validRequest()
			tt.a(&a)
			tt.b(&b)
			if a.Fingerprint() == b.Fingerprint() {
				t.Errorf("requests fingerprint alike:\n a=%+v\n b=%+v", a, b)
			}
		})
	}
}

func nop(*payments.CreateRequest) {}

func TestCurrencyExponent(t *testing.T) {
	tests := []struct {
		code string
		want int
		ok   bool
	}{
		{"KRW", 0, true},
		{"JPY", 0, true},
		{"CLP", 0, true},
		{"USD", 2, true},
		{"EUR", 2, true},
		{"GBP", 2, true},
		{"BHD", 3, true},
		{"KWD", 3, true},
		{"CLF", 4, true},
		{"usd", 0, false},
		{"Usd", 0, false},
		{"krw", 0, false},
		{"", 0, false},
		{"XXX", 0, false},
		{"XAU", 0, false},
		{"ABC", 0, false},
		{"USDX", 0, false},
		{"US", 0, false},
	}
	for _, tt := range tests {
		name := tt.code
		if name == "" {
			name = "empty"
		}
		t.Run(name, func(t *testing.T) {
			got, ok := payments.CurrencyExponent(tt.code)
			if ok != tt.ok || (ok && got != tt.want) {
				t.Errorf("CurrencyExponent(%q) = %d, %v; want %d, %v", tt.code, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestNormalizeFoldsASCIIOnly(t *testing.T) {
	for in, want := range map[string]string{"usd": "USD", "Krw": "KRW", "uſd": "UſD", "ınr": "ıNR"} {
		r := payments.CreateRequest{Amount: payments.Money{Minor: 1, Currency: in}}
		r.Normalize()
		if r.Amount.Currency != want {
			t.Errorf("Normalize(%q) = %q, want %q", in, r.Amount.Currency, want)
		}
	}
}
