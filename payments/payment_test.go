package payments_test

import (
	"bytes"
	"encoding/json"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gateway/payments"
)

var orderIDPattern = regexp.MustCompile(`^ord_[0-9a-f]{24}$`)

func TestMerchantOrderID(t *testing.T) {
	t.Run("format", func(t *testing.T) {
		for _, in := range [][2]string{
			{"mer_1", "key-1"},
			{"", ""},
			{"mer_01HZX", strings.Repeat("~", 255)},
		} {
			id := payments.MerchantOrderID(in[0], in[1])
			if !orderIDPattern.MatchString(id) {
				t.Errorf("MerchantOrderID(%q, %q) = %q, want ord_ + 24 lowercase hex", in[0], in[1], id)
			}
			if len(id) > 64 { // payments.merchant_order_id is VARCHAR(64)
				t.Errorf("MerchantOrderID is %d chars, the column holds 64", len(id))
			}
		}
	})
	t.Run("deterministic", func(t *testing.T) {
		a := payments.MerchantOrderID("mer_1", "key-1")
		b := payments.MerchantOrderID("mer_1", "key-1")
		if a != b {
			t.Errorf("same input gave %q and %q", a, b)
		}
	})

	differ := []struct {
		name         string
		merchA, keyA string
		merchB, keyB string
	}{
		{"merchant", "mer_1", "key-1", "mer_2", "key-1"},
		{"key", "mer_1", "key-1", "mer_1", "key-2"},
		{"key case only", "mer_1", "abc", "mer_1", "ABC"},
		{"key single char case", "mer_1", "order-a", "mer_1", "order-A"},
		{"merchant/key boundary", "mer_1", "2abc", "mer_12", "abc"},
	}
	for _, tt := range differ {
		t.Run("differs/"+tt.name, func(t *testing.T) {
			a := payments.MerchantOrderID(tt.merchA, tt.keyA)
			b := payments.MerchantOrderID(tt.merchB, tt.keyB)
			if a == b {
				t.Errorf("MerchantOrderID(%q, %q) == MerchantOrderID(%q, %q) = %q",
					tt.merchA, tt.keyA, tt.merchB, tt.keyB, a)
			}
		})
	}
}

func TestStatusCode(t *testing.T) {
	tests := []struct {
		status payments.Status
		want   int
	}{
		{payments.Succeeded, http.StatusCreated},
		{payments.Declined, http.StatusPaymentRequired},
		{payments.Failed, http.StatusPaymentRequired},
		{payments.Processing, http.StatusAccepted},
		{payments.RequiresReview, http.StatusAccepted},
	}
	for _, tt := range tests {
		t.Run(string(tt.status), func(t *testing.T) {
			if got := payments.StatusCode(tt.status); got != tt.want {
				t.Errorf("StatusCode(%q) = %d, want %d", tt.status, got, tt.want)
			}
		})
	}
}

func TestStatusFinal(t *testing.T) {
	tests := []struct {
		status payments.Status
		want   bool
	}{
		{payments.Succeeded, true},
		{payments.Declined, true},
		{payments.Failed, true},
		{payments.Processing, false},
		{payments.RequiresReview, false},
	}
	for _, tt := range tests {
		t.Run(string(tt.status), func(t *testing.T) {
			if got := tt.status.Final(); got != tt.want {
				t.Errorf("%q.Final() = %v, want %v", tt.status, got, tt.want)
			}
		})
	}
}

// viewFields is the exact field set of the public payment object.
var viewFields = []string{
	"id", "status", "amount", "currency", "payment_method", "merchant_order_id",
	"psp_reference", "decline_code", "description", "metadata", "amount_refunded", "refunded", "created_at", "attempts",
}

func samplePayment() payments.Payment {
	return payments.Payment{
		ID:              "pay_01HZX0000000000000000000",
		MerchantID:      "mer_01HZX",
		IdempotencyKey:  "key-secret-1",
		MerchantOrderID: payments.MerchantOrderID("mer_01HZX", "key-secret-1"),
		Status:          payments.Succeeded,
		Amount:          payments.Money{Minor: 1999, Currency: "USD"},
		PaymentMethod:   "pm_card_visa",
		Description:     "Order #1001",
		Metadata:        map[string]string{"order_id": "1001"},
		PSPReference:    "ch_123",
		CreatedAt:       time.Date(2024, 5, 1, 21, 4, 5, 123456000, time.FixedZone("KST", 9*3600)),
		UpdatedAt:       time.Date(2024, 5, 1, 21, 4, 6, 0, time.FixedZone("KST", 9*3600)),
	}
}

func TestRender(t *testing.T) {
	tests := []struct {
		name       string
		mutate     func(p *payments.Payment)
		wantStatus int
		check      func(t *testing.T, fields map[string]json.RawMessage)
	}{
		{
			name:       "succeeded",
			mutate:     func(p *payments.Payment) {},
			wantStatus: http.StatusCreated,
			check: func(t *testing.T, f map[string]json.RawMessage) {
				wantJSON(t, f, "id", `"pay_01HZX0000000000000000000"`)
				wantJSON(t, f, "status", `"succeeded"`)
				wantJSON(t, f, "amount", `1999`)
				wantJSON(t, f, "currency", `"USD"`)
				wantJSON(t, f, "payment_method", `"pm_card_visa"`)
				wantJSON(t, f, "psp_reference", `"ch_123"`)
				wantJSON(t, f, "decline_code", `null`)
				wantJSON(t, f, "description", `"Order #1001"`)
				wantJSON(t, f, "metadata", `{"order_id":"1001"}`)
			},
		},
		{
			name: "declined",
			mutate: func(p *payments.Payment) {
				p.Status = payments.Declined
				p.DeclineCode = "insufficient_funds"
			},
			wantStatus: http.StatusPaymentRequired,
			check: func(t *testing.T, f map[string]json.RawMessage) {
				wantJSON(t, f, "status", `"declined"`)
				wantJSON(t, f, "decline_code", `"insufficient_funds"`)
				wantJSON(t, f, "psp_reference", `"ch_123"`)
			},
		},
		{
			name: "empty psp reference and decline code are null",
			mutate: func(p *payments.Payment) {
				p.PSPReference, p.DeclineCode = "", ""
			},
			wantStatus: http.StatusCreated,
			check: func(t *testing.T, f map[string]json.RawMessage) {
				wantJSON(t, f, "psp_reference", `null`)
				wantJSON(t, f, "decline_code", `null`)
			},
		},
		{
			name:       "nil metadata is an empty object",
			mutate:     func(p *payments.Payment) { p.Metadata = nil },
			wantStatus: http.StatusCreated,
			check: func(t *testing.T, f map[string]json.RawMessage) {
				wantJSON(t, f, "metadata", `{}`)
			},
		},
		{
			name:       "empty metadata is an empty object",
			mutate:     func(p *payments.Payment) { p.Metadata = map[string]string{} },
			wantStatus: http.StatusCreated,
			check: func(t *testing.T, f map[string]json.RawMessage) {
				wantJSON(t, f, "metadata", `{}`)
			},
		},
		{
			name:       "empty description is an empty string",
			mutate:     func(p *payments.Payment) { p.Description = "" },
			wantStatus: http.StatusCreated,
			check: func(t *testing.T, f map[string]json.RawMessage) {
				wantJSON(t, f, "description", `""`)
			},
		},
		{
			name:       "large amount stays an exact integer",
			mutate:     func(p *payments.Payment) { p.Amount.Minor = payments.MaxAmountMinor },
			wantStatus: http.StatusCreated,
			check: func(t *testing.T, f map[string]json.RawMessage) {
				wantJSON(t, f, "amount", `1000000000000`)
			},
		},
		{
			name:       "created_at is RFC 3339 in UTC",
			mutate:     func(p *payments.Payment) {},
			wantStatus: http.StatusCreated,
			check: func(t *testing.T, f map[string]json.RawMessage) {
				var s string
				if err := json.Unmarshal(f["created_at"], &s); err != nil {
					t.Fatalf("created_at %s: %v", f["created_at"], err)
				}
				if !strings.HasSuffix(s, "Z") {
					t.Errorf("created_at = %q, want UTC (Z suffix)", s)
				}
				got, err := time.Parse(time.RFC3339, s)
				if err != nil {
					t.Fatalf("created_at %q is not RFC 3339: %v", s, err)
				}
				if want := samplePayment().CreatedAt; !got.Equal(want) {
					t.Errorf("created_at = %v, want the instant %v", got, want)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := samplePayment()
			tt.mutate(&p)
			resp := payments.Render(p)
			if resp.Status != tt.wantStatus {
				t.Errorf("Status = %d, want %d", resp.Status, tt.wantStatus)
			}
			fields := decodeFields(t, resp.Body)
			if got := slices.Sorted(maps.Keys(fields)); !slices.Equal(got, slices.Sorted(slices.Values(viewFields))) {
				t.Errorf("fields = %q, want exactly %q", got, viewFields)
			}
			wantJSON(t, fields, "merchant_order_id", `"`+p.MerchantOrderID+`"`)
			tt.check(t, fields)

			want, err := json.Marshal(payments.ToView(p))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(resp.Body, want) {
				t.Errorf("Render body differs from ToView's JSON:\n got %s\nwant %s", resp.Body, want)
			}
		})
	}
}

func TestRenderIsByteStable(t *testing.T) {
	// A replay must be byte for byte what was sent: rendering the same payment
	// again (with metadata in a map built in another order) gives the same bytes.
	p := samplePayment()
	p.Metadata = map[string]string{"z": "1", "a": "2", "m": "3", "b": "4"}
	q := samplePayment()
	q.Metadata = map[string]string{"b": "4", "m": "3", "a": "2", "z": "1"}
	first := payments.Render(p)
	for range 20 {
		if again := payments.Render(q); !bytes.Equal(again.Body, first.Body) || again.Status != first.Status {
			t.Fatalf("Render not stable:\n%s\n%s", first.Body, again.Body)
		}
	}
	// The same instant in another zone renders the same created_at.
	q.CreatedAt = p.CreatedAt.UTC()
	if again := payments.Render(q); !bytes.Equal(again.Body, first.Body) {
		t.Errorf("same instant in UTC renders differently:\n%s\n%s", first.Body, again.Body)
	}
}

func TestToView(t *testing.T) {
	p := samplePayment()
	p.PSPReference, p.DeclineCode, p.Metadata = "", "", nil
	v := payments.ToView(p)
	if v.PSPReference != nil || v.DeclineCode != nil {
		t.Errorf("PSPReference, DeclineCode = %v, %v; want nil for empty", v.PSPReference, v.DeclineCode)
	}
	if v.Metadata == nil || len(v.Metadata) != 0 {
		t.Errorf("Metadata = %#v, want an empty non-nil map", v.Metadata)
	}
	if v.Amount != p.Amount.Minor || v.Currency != p.Amount.Currency || v.ID != p.ID || v.Status != p.Status {
		t.Errorf("ToView = %+v, does not carry the payment's fields", v)
	}
	if want := "2024-05-01T12:04:05.123456Z"; v.CreatedAt != want {
		t.Errorf("CreatedAt = %q, want %q", v.CreatedAt, want)
	}

	p.PSPReference, p.DeclineCode = "ch_1", "do_not_honor"
	v = payments.ToView(p)
	if v.PSPReference == nil || *v.PSPReference != "ch_1" || v.DeclineCode == nil || *v.DeclineCode != "do_not_honor" {
		t.Errorf("PSPReference, DeclineCode = %v, %v; want ch_1, do_not_honor", v.PSPReference, v.DeclineCode)
	}
}

func decodeFields(tb testing.TB, body []byte) map[string]json.RawMessage {
	tb.Helper()
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		tb.Fatalf("body %s is not a JSON object: %v", body, err)
	}
	return fields
}

func wantJSON(tb testing.TB, fields map[string]json.RawMessage, name, want string) {
	tb.Helper()
	got, ok := fields[name]
	if !ok {
		tb.Errorf("field %q missing", name)
		return
	}
	if string(got) != want {
		tb.Errorf("%s = %s, want %s", name, got, want)
	}
}
