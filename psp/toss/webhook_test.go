package toss_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"gateway/psp"
	"gateway/psp/toss"
	"gateway/psp/toss/tosstest"
)

func tossWith(t *testing.T, h http.Handler) *toss.Adapter {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return mustNew(t, ts.URL)
}

// A notification's word is never taken: the payment it names is fetched
// from Toss, and what Toss says is the notice. A forged "DONE" for a
// virtual account still waiting reads as pending; once the deposit
// arrives, the same notification reads as succeeded.
func TestReadNoticeFetchesThePayment(t *testing.T) {
	fake := tosstest.New(secret)
	a := tossWith(t, fake)
	const order = "ord_000000000000000000000b01"
	c, err := a.Charge(t.Context(), psp.ChargeRequest{MerchantOrderID: order, Amount: 15000, Currency: "KRW", PaymentMethod: "tgen_vbank_1", AllowNextAction: true})
	if err != nil || c.Status != psp.Pending {
		t.Fatalf("charge = %+v, %v; want pending", c, err)
	}
	forged := []byte(`{"eventType":"PAYMENT_STATUS_CHANGED","createdAt":"2026-11-30T12:00:00.000000","data":{"paymentKey":"tgen_vbank_1","orderId":"` + order + `","status":"DONE","totalAmount":15000}}`)
	n, err := a.ReadNotice(t.Context(), http.Header{}, forged)
	if err != nil || len(n.Charges) != 1 || n.Charges[0].Status != psp.Pending {
		t.Fatalf("forged DONE = %+v, %v; want the payment as Toss holds it: pending", n, err)
	}
	fake.Deposit(order, true)
	for name, body := range map[string][]byte{
		"status changed":   fake.Notification(order),
		"deposit callback": tosstest.DepositCallback(order, "DONE"),
	} {
		n, err := a.ReadNotice(t.Context(), http.Header{}, body)
		if err != nil || len(n.Charges) != 1 {
			t.Fatalf("%s: %+v, %v", name, n, err)
		}
		if got := n.Charges[0]; got.MerchantOrderID != order || got.Status != psp.Succeeded || got.Amount != 15000 || got.Reference != "tgen_vbank_1" {
			t.Fatalf("%s: charge %+v, want %s succeeded 15000", name, got, order)
		}
	}
}

// The refunds the gateway made (tagged cancels) come with the payment.
func TestReadNoticeRefundsOfThePayment(t *testing.T) {
	fake := tosstest.New(secret)
	a := tossWith(t, fake)
	const order = "ord_000000000000000000000b02"
	c, err := a.Charge(t.Context(), psp.ChargeRequest{MerchantOrderID: order, Amount: 15000, Currency: "KRW", PaymentMethod: "tgen_ok_2"})
	if err != nil {
		t.Fatal(err)
	}
	const refund = "rfd_000000000000000000000b02"
	if _, err := a.Refund(t.Context(), psp.RefundRequest{RefundOrderID: refund, MerchantOrderID: order, ChargeReference: c.Reference, Amount: 5000, Currency: "KRW"}); err != nil {
		t.Fatal(err)
	}
	n, err := a.ReadNotice(t.Context(), http.Header{}, fake.Notification(order))
	if err != nil || len(n.Refunds) != 1 {
		t.Fatalf("notice %+v, %v; want one refund", n, err)
	}
	if got := n.Refunds[0]; got.RefundOrderID != refund || got.Status != psp.RefundSucceeded || got.Amount != 5000 || got.MerchantOrderID != order {
		t.Fatalf("refund %+v", got)
	}
}

// What Toss does not have, or has not confirmed, is skipped; a body that
// names no payment is refused; Toss that cannot be asked is a failure to
// retry.
func TestReadNoticeRefusalsAndSkips(t *testing.T) {
	fake := tosstest.New(secret)
	fake.Seed(tosstest.Payment{PaymentKey: "tgen_ready", OrderID: "ord_000000000000000000000b03", Status: "READY", TotalAmount: 1000, Currency: "KRW"})
	a := tossWith(t, fake)
	for name, body := range map[string]string{
		"unknown to Toss":        `{"eventType":"PAYMENT_STATUS_CHANGED","data":{"paymentKey":"tgen_nobody","orderId":"ord_000000000000000000000b99"}}`,
		"authenticated, not yet": `{"eventType":"PAYMENT_STATUS_CHANGED","data":{"paymentKey":"tgen_ready","orderId":"ord_000000000000000000000b03"}}`,
	} {
		n, err := a.ReadNotice(t.Context(), http.Header{}, []byte(body))
		if err != nil || len(n.Charges) != 0 || len(n.Skipped) == 0 {
			t.Errorf("%s: %+v, %v; want it skipped", name, n, err)
		}
	}
	for name, body := range map[string]string{
		"not JSON":         `eventType=PAYMENT_STATUS_CHANGED`,
		"names no payment": `{"eventType":"PAYMENT_STATUS_CHANGED","data":{"status":"DONE"}}`,
		"a bad order id":   `{"orderId":"x y"}`,
	} {
		if _, err := a.ReadNotice(t.Context(), http.Header{}, []byte(body)); !errors.Is(err, psp.ErrUnverified) {
			t.Errorf("%s: %v, want psp.ErrUnverified", name, err)
		}
	}
	down := tossWith(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tosstest.Write(w, http.StatusInternalServerError, tosstest.Error{Code: "FAILED_INTERNAL_SYSTEM_PROCESSING", Message: "..."})
	}))
	_, err := down.ReadNotice(t.Context(), http.Header{}, []byte(`{"orderId":"ord_000000000000000000000b03"}`))
	if class, ok := psp.ClassOf(err); !ok || class != psp.Unknown {
		t.Fatalf("ReadNotice with Toss down = %v, want Unknown", err)
	}
}
