package payments_test

import (
	"strings"
	"testing"

	"github.com/oklog/ulid/v2"

	"gateway/payments"
)

// Every id the gateway makes is well formed; text of any other shape,
// the docs' own placeholders among them, is not.
func TestWellFormedID(t *testing.T) {
	for range 1000 {
		id := payments.PaymentIDPrefix + ulid.Make().String()
		if !payments.WellFormedID(payments.PaymentIDPrefix, id) {
			t.Fatalf("%s is not well formed", id)
		}
	}
	if id := payments.NewEventID(); !payments.WellFormedID(payments.EventIDPrefix, id) {
		t.Fatalf("%s is not well formed", id)
	}
	const ok = "01M8SVRZDH8JWSTQVXXY9DNHZC"
	for _, c := range []struct{ prefix, id string }{
		{payments.PaymentIDPrefix, "pay_…"},
		{payments.PaymentIDPrefix, "pay_01M8SVRZDH8JWSTQVXXY9DNHZ…"},
		{payments.PaymentIDPrefix, "pay_01m8svrzdh8jwstqvxxy9dnhzc"},
		{payments.PaymentIDPrefix, "pay_01M8SVRZDH8JWSTQVXXY9DNHZI"},
		{payments.PaymentIDPrefix, "pay_81M8SVRZDH8JWSTQVXXY9DNHZC"},
		{payments.PaymentIDPrefix, "pay_" + ok[:25]},
		{payments.PaymentIDPrefix, "pay_" + ok + "0"},
		{payments.PaymentIDPrefix, "re_" + ok},
		{payments.PaymentIDPrefix, ok},
		{payments.PaymentIDPrefix, ""},
		{payments.PaymentIDPrefix, "pay_missing"},
		{payments.RefundIDPrefix, "re_é" + strings.Repeat("0", 24)},
		{payments.EventIDPrefix, "evt_" + ok[:13] + "\x00" + ok[14:]},
	} {
		if payments.WellFormedID(c.prefix, c.id) {
			t.Errorf("WellFormedID(%q, %q) = true", c.prefix, c.id)
		}
	}
	for _, prefix := range []string{payments.PaymentIDPrefix, payments.RefundIDPrefix, payments.EventIDPrefix} {
		if !payments.WellFormedID(prefix, prefix+ok) {
			t.Errorf("%s%s is not well formed", prefix, ok)
		}
	}
}
