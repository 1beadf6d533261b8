package toss_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
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

// A notification costs a Toss call only when it must: names outside Toss's
// alphabet are refused, an order the gateway does not hold is acknowledged
// unasked, and identical notifications arriving together share one call.
func TestReadNoticeAsksTossOnlyWhatItMust(t *testing.T) {
	fake := tosstest.New(secret)
	ts := httptest.NewServer(fake)
	t.Cleanup(ts.Close)
	const known = "ord_000000000000000000000c01"
	var asked atomic.Int64
	a, err := toss.New(toss.Config{SecretKey: secret, BaseURL: ts.URL, KnownOrder: func(_ context.Context, order string) (bool, error) {
		asked.Add(1)
		return order == known, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Charge(t.Context(), psp.ChargeRequest{MerchantOrderID: known, Amount: 15000, Currency: "KRW", PaymentMethod: "tgen_ok_c01"}); err != nil {
		t.Fatal(err)
	}
	before := fake.RequestCount()
	for name, body := range map[string]string{
		"a paymentKey with a slash":     `{"eventType":"PAYMENT_STATUS_CHANGED","data":{"paymentKey":"../orders/` + known + `","orderId":"` + known + `"}}`,
		"a paymentKey with a space":     `{"eventType":"PAYMENT_STATUS_CHANGED","data":{"paymentKey":"tgen ok","orderId":"` + known + `"}}`,
		"a paymentKey of 201 chars":     `{"eventType":"PAYMENT_STATUS_CHANGED","data":{"paymentKey":"` + strings.Repeat("k", 201) + `","orderId":"` + known + `"}}`,
		"a paymentKey without an order": `{"eventType":"PAYMENT_STATUS_CHANGED","data":{"paymentKey":"tgen_ok_c01"}}`,
		"an orderId with a dot":         `{"orderId":"ord_0000.0000"}`,
	} {
		if _, err := a.ReadNotice(t.Context(), http.Header{}, []byte(body)); !errors.Is(err, psp.ErrUnverified) {
			t.Errorf("%s: %v, want psp.ErrUnverified", name, err)
		}
	}
	if n := fake.RequestCount() - before; n != 0 || asked.Load() != 0 {
		t.Fatalf("names outside Toss's alphabet cost %d Toss calls and %d order look-ups, want none", n, asked.Load())
	}
	for i := range 100 {
		body := fmt.Sprintf(`{"eventType":"PAYMENT_STATUS_CHANGED","data":{"paymentKey":"tgen_forged_%d","orderId":"ord_%024x"}}`, i, i)
		n, err := a.ReadNotice(t.Context(), http.Header{}, []byte(body))
		if err != nil || len(n.Charges) != 0 || len(n.Skipped) != 1 {
			t.Fatalf("an order the gateway does not hold: %+v, %v; want it skipped", n, err)
		}
	}
	if n := fake.RequestCount() - before; n != 0 {
		t.Fatalf("100 notifications about orders the gateway does not hold cost %d Toss calls, want none", n)
	}
	// A paymentKey of another order, paired with a known order: Toss never
	// sent those names together.
	fake.Seed(tosstest.Payment{PaymentKey: "tgen_other", OrderID: "ord_000000000000000000000c02", Status: "DONE", TotalAmount: 1000, Currency: "KRW", ApprovedAt: tosstest.Now()})
	mixed := `{"eventType":"PAYMENT_STATUS_CHANGED","data":{"paymentKey":"tgen_other","orderId":"` + known + `"}}`
	if _, err := a.ReadNotice(t.Context(), http.Header{}, []byte(mixed)); !errors.Is(err, psp.ErrUnverified) {
		t.Fatalf("a known order with another order's paymentKey: %v, want psp.ErrUnverified", err)
	}

	// Notifications about the known order, arriving together: the first
	// fetch is held at Toss until every other caller waits for it.
	held := make(chan struct{})
	release := make(chan struct{})
	b, err := toss.New(toss.Config{SecretKey: secret, BaseURL: slowURL(t, fake, held, release), KnownOrder: func(context.Context, string) (bool, error) { return true, nil }})
	if err != nil {
		t.Fatal(err)
	}
	const callers = 16
	body := fake.Notification(known)
	before = fake.RequestCount()
	var wg sync.WaitGroup
	results := make([]psp.Notice, callers)
	failures := make([]error, callers)
	for i := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], failures[i] = b.ReadNotice(t.Context(), http.Header{}, body)
		}()
	}
	<-held
	for b.LookupsWaiting("/v1/payments/tgen_ok_c01") < callers-1 {
		runtime.Gosched()
	}
	close(release)
	wg.Wait()
	for i := range callers {
		if failures[i] != nil || len(results[i].Charges) != 1 || results[i].Charges[0].Status != psp.Succeeded {
			t.Fatalf("caller %d: %+v, %v", i, results[i], failures[i])
		}
	}
	if n := fake.RequestCount() - before; n != 1 {
		t.Fatalf("%d identical notifications at once cost %d Toss calls, want 1", callers, n)
	}
}

// slowURL serves fake behind a gate: the first request closes held, and
// every request waits for release.
func slowURL(t *testing.T, fake http.Handler, held, release chan struct{}) string {
	t.Helper()
	var once sync.Once
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { close(held) })
		<-release
		fake.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	return ts.URL
}
