package api

import "testing"

// BenchmarkStrictJSON is what the check costs a typical POST /payments body.
func BenchmarkStrictJSON(b *testing.B) {
	raw := []byte(`{"amount": 1000, "currency": "KRW", "payment_method": "pm_card_ok", "description": "Order A-1", "metadata": {"order": "A-1", "channel": "web"}}`)
	var body createPaymentBody
	b.ReportAllocs()
	for b.Loop() {
		if err := strictJSON(raw, &body); err != nil {
			b.Fatal(err)
		}
	}
}
