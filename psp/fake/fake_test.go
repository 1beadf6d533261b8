package fake

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"gateway/payments"
	"gateway/psp"
)

func req(orderID, method string) psp.ChargeRequest {
	return psp.ChargeRequest{MerchantOrderID: orderID, Amount: 1999, Currency: "EUR", PaymentMethod: method}
}

// wantClass fails the test unless err is a *psp.Error of class want for op.
func wantClass(t *testing.T, err error, op string, want psp.Class) *psp.Error {
	t.Helper()
	var e *psp.Error
	if !errors.As(err, &e) {
		t.Fatalf("err = %v, want *psp.Error class %s", err, want)
	}
	if e.Class != want || e.Op != op {
		t.Fatalf("err = %v, want class %s op %q", err, want, op)
	}
	return e
}

func TestCapabilities(t *testing.T) {
	eur := psp.Currency{Code: "EUR", ISOExponent: 2, Exponent: 2, Min: 50}
	tests := []struct {
		name       string
		opts       []Option
		window     time.Duration
		account    string
		currencies []psp.Currency
	}{
		{"default", nil, 2 * time.Minute, "", Currencies()},
		{"custom_window", []Option{WithCreationWindow(5 * time.Second)}, 5 * time.Second, "", Currencies()},
		{"negative_window_ignored", []Option{WithCreationWindow(-time.Second)}, 2 * time.Minute, "", Currencies()},
		{"account", []Option{WithAccount("kr-main")}, 2 * time.Minute, "kr-main", Currencies()},
		{"currencies", []Option{WithCurrencies(eur)}, 2 * time.Minute, "", []psp.Currency{eur}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := New(tt.opts...).Capabilities()
			if got.Name != "fake" || !got.AuthoritativeLookup || got.CreationWindow != tt.window || !got.DedupesOrderID ||
				got.MaxOrderIDLen != 64 || got.DedupeWindow != 0 || got.Account != tt.account || !slices.Equal(got.Currencies, tt.currencies) {
				t.Fatalf("Capabilities() = %+v", got)
			}
		})
	}
}

// The default currencies are ISO 4217's own units, as the gateway counts them.
func TestCurrenciesAreISO(t *testing.T) {
	for _, c := range Currencies() {
		exp, ok := payments.CurrencyExponent(c.Code)
		if !ok || exp != c.ISOExponent || c.Exponent != c.ISOExponent {
			t.Errorf("%+v: ISO 4217 says exponent %d (known: %v)", c, exp, ok)
		}
	}
}

func TestChargeOutcomeByMethod(t *testing.T) {
	tests := []struct {
		name        string
		method      string
		status      psp.ChargeStatus
		declineCode string
		succeeded   int
	}{
		{"pm_card_ok", "pm_card_ok", psp.Succeeded, "", 1},
		{"pm_card_declined", "pm_card_declined", psp.Declined, "card_declined", 0},
		{"pm_card_insufficient_funds", "pm_card_insufficient_funds", psp.Declined, "insufficient_funds", 0},
		{"pm_card_lost", "pm_card_lost", psp.Declined, "lost_card", 0},
		{"pm_card_3ds_one_step", "pm_card_3ds", psp.Declined, "authentication_required", 0},
		{"pm_virtual_account", "pm_virtual_account", psp.Pending, "", 0},
		{"pm_something_else", "pm_something_else", psp.Declined, "invalid_payment_method", 0},
		{"empty_method", "", psp.Declined, "invalid_payment_method", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := New()
			r := req("order-1", tt.method)
			c, err := p.Charge(t.Context(), r)
			if err != nil {
				t.Fatalf("Charge: %v", err)
			}
			if c.Status != tt.status || c.DeclineCode != tt.declineCode || c.Code != tt.declineCode || c.NextAction != nil {
				t.Fatalf("got %+v, want %s/%q", c, tt.status, tt.declineCode)
			}
			if c.MerchantOrderID != r.MerchantOrderID || c.Amount != r.Amount || c.Currency != r.Currency {
				t.Fatalf("charge %+v does not match request %+v", c, r)
			}
			if !strings.HasPrefix(c.Reference, "fake_ch_") {
				t.Fatalf("Reference = %q, want fake_ch_ prefix", c.Reference)
			}
			// Declined or not, the PSP remembers the order.
			if n := p.ChargeCount(); n != 1 {
				t.Fatalf("ChargeCount = %d, want 1", n)
			}
			if n := p.SucceededCount(); n != tt.succeeded {
				t.Fatalf("SucceededCount = %d, want %d", n, tt.succeeded)
			}
			got, err := p.Lookup(t.Context(), r.MerchantOrderID)
			if err != nil || got != c {
				t.Fatalf("Lookup = %+v, %v; want %+v", got, err, c)
			}
			again, err := p.Charge(t.Context(), req("order-1", "pm_card_ok"))
			if err != nil || again != c {
				t.Fatalf("second Charge = %+v, %v; want the first record %+v", again, err, c)
			}
		})
	}
}

func TestReferencesUnique(t *testing.T) {
	p := New()
	seen := map[string]bool{}
	for _, id := range []string{"a", "b", "c"} {
		c, err := p.Charge(t.Context(), req(id, "pm_card_ok"))
		if err != nil {
			t.Fatal(err)
		}
		if seen[c.Reference] {
			t.Fatalf("reference %q reused", c.Reference)
		}
		seen[c.Reference] = true
	}
	p.Reset()
	c, err := p.Charge(t.Context(), req("a", "pm_card_ok"))
	if err != nil {
		t.Fatal(err)
	}
	if seen[c.Reference] {
		t.Fatalf("reference %q reused after Reset", c.Reference)
	}
}

func TestValidation(t *testing.T) {
	long := strings.Repeat("x", 65)
	tests := []struct {
		name string
		mod  func(*psp.ChargeRequest)
		ok   bool
	}{
		{"empty_order_id", func(r *psp.ChargeRequest) { r.MerchantOrderID = "" }, false},
		{"order_id_65", func(r *psp.ChargeRequest) { r.MerchantOrderID = long }, false},
		{"order_id_64", func(r *psp.ChargeRequest) { r.MerchantOrderID = long[:64] }, true},
		{"zero_amount", func(r *psp.ChargeRequest) { r.Amount = 0 }, false},
		{"negative_amount", func(r *psp.ChargeRequest) { r.Amount = -5 }, false},
		{"lowercase_currency", func(r *psp.ChargeRequest) { r.Currency = "eur" }, false},
		{"short_currency", func(r *psp.ChargeRequest) { r.Currency = "EU" }, false},
		{"long_currency", func(r *psp.ChargeRequest) { r.Currency = "EURO" }, false},
		{"digit_in_currency", func(r *psp.ChargeRequest) { r.Currency = "E1R" }, false},
		{"empty_currency", func(r *psp.ChargeRequest) { r.Currency = "" }, false},
		{"currency_not_taken", func(r *psp.ChargeRequest) { r.Currency = "XTS" }, false},
		{"refused_by_the_psp", func(r *psp.ChargeRequest) { r.PaymentMethod = MethodInvalidRequest }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := New()
			r := req("order-1", "pm_card_ok")
			tt.mod(&r)
			_, err := p.Charge(t.Context(), r)
			if tt.ok {
				if err != nil {
					t.Fatalf("Charge: %v", err)
				}
				return
			}
			e := wantClass(t, err, "charge", psp.Rejected)
			if !errors.Is(err, ErrInvalidRequest) || e.Code != CodeInvalidRequest {
				t.Fatalf("err = %v, want ErrInvalidRequest with code %s", err, CodeInvalidRequest)
			}
			if _, err := p.Charge(t.Context(), r); !errors.Is(err, ErrInvalidRequest) {
				t.Fatalf("the same request again = %v, want the same refusal", err)
			}
			if n := p.ChargeCount(); n != 0 {
				t.Fatalf("ChargeCount = %d, want 0", n)
			}
			if n := p.ChargeCalls(); n != 2 {
				t.Fatalf("ChargeCalls = %d, want 2", n)
			}
		})
	}
}

// An amount the PSP's currency table refuses is Rejected, nothing recorded.
func TestValidationByCurrencyTable(t *testing.T) {
	p := New(WithCurrencies(psp.Currency{Code: "EUR", ISOExponent: 2, Exponent: 2, Min: 50, Max: 1000}))
	for _, amount := range []int64{49, 1001} {
		r := req("order-1", MethodOK)
		r.Amount = amount
		_, err := p.Charge(t.Context(), r)
		var ce *psp.CheckError
		if wantClass(t, err, "charge", psp.Rejected); !errors.As(err, &ce) || ce.Field != "amount" {
			t.Fatalf("Charge(%d EUR) = %v, want the CheckError", amount, err)
		}
	}
	r := req("order-1", MethodOK)
	r.Amount = 1000
	if _, err := p.Charge(t.Context(), r); err != nil {
		t.Fatal(err)
	}
	if n := p.ChargeCount(); n != 1 {
		t.Fatalf("ChargeCount = %d, want 1", n)
	}
}

func TestPendingAndSettle(t *testing.T) {
	tests := []struct {
		name    string
		method  string
		action  bool
		status  psp.ChargeStatus
		decline string
	}{
		{"3ds_passed", MethodThreeDS, true, psp.Succeeded, ""},
		{"3ds_failed", MethodThreeDS, true, psp.Declined, "authentication_failed"},
		{"deposit_arrived", MethodVirtualAccount, false, psp.Succeeded, ""},
		{"deposit_expired", MethodVirtualAccount, false, psp.Declined, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := New()
			r := req("order-1", tt.method)
			r.AllowNextAction = tt.action
			c, err := p.Charge(t.Context(), r)
			if err != nil || c.Status != psp.Pending || c.DeclineCode != "" {
				t.Fatalf("Charge = %+v, %v; want pending", c, err)
			}
			if want := tt.method == MethodThreeDS; (c.NextAction != nil) != want {
				t.Fatalf("NextAction = %+v, want one: %v", c.NextAction, want)
			}
			if tt.method == MethodThreeDS && (c.NextAction.Type != psp.NextActionRedirect || c.NextAction.URL != "/3ds/"+c.Reference) {
				t.Fatalf("NextAction = %+v", c.NextAction)
			}
			if got, err := p.Lookup(t.Context(), r.MerchantOrderID); err != nil || !got.Equal(c) {
				t.Fatalf("Lookup = %+v, %v; want %+v", got, err, c)
			}
			if again, err := p.Charge(t.Context(), r); err != nil || !again.Equal(c) {
				t.Fatalf("second Charge = %+v, %v; want %+v", again, err, c)
			}
			// Nothing to refund while pending.
			rf, err := p.Refund(t.Context(), psp.RefundRequest{RefundOrderID: "rfd-1", MerchantOrderID: r.MerchantOrderID,
				ChargeReference: c.Reference, Amount: 1, Currency: r.Currency})
			if err != nil || rf.Status != psp.RefundDeclined || rf.DeclineCode != psp.RefundDeclineNotRefundable {
				t.Fatalf("Refund of a pending charge = %+v, %v", rf, err)
			}

			done, err := p.Settle(r.MerchantOrderID, tt.status, tt.decline)
			wantCode := tt.decline
			if tt.status == psp.Declined && wantCode == "" {
				wantCode = DeclineCardDeclined
			}
			if err != nil || done.Status != tt.status || done.DeclineCode != wantCode || done.Code != wantCode ||
				done.NextAction != nil || done.Reference != c.Reference || done.Amount != c.Amount {
				t.Fatalf("Settle = %+v, %v", done, err)
			}
			if got, err := p.Lookup(t.Context(), r.MerchantOrderID); err != nil || !got.Equal(done) {
				t.Fatalf("Lookup after Settle = %+v, %v; want %+v", got, err, done)
			}
			if _, err := p.Settle(r.MerchantOrderID, psp.Succeeded, ""); !errors.Is(err, ErrNotPending) {
				t.Fatalf("second Settle = %v, want ErrNotPending", err)
			}
			if n := p.ChargesFor(r.MerchantOrderID); n != 1 {
				t.Fatalf("ChargesFor = %d, want 1", n)
			}
		})
	}
	p := New()
	if _, err := p.Settle("missing", psp.Succeeded, ""); !errors.Is(err, ErrNotPending) {
		t.Fatalf("Settle of no charge = %v", err)
	}
	if _, err := p.Charge(t.Context(), req("order-1", MethodVirtualAccount)); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Settle("order-1", psp.Pending, ""); err == nil {
		t.Fatal("Settle to pending was accepted")
	}
}

func TestRefundRefusals(t *testing.T) {
	p := New()
	c, err := p.Charge(t.Context(), req("order-1", MethodOK))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		mod  func(*psp.RefundRequest)
	}{
		{"other_currency", func(r *psp.RefundRequest) { r.Currency = "USD" }},
		{"currency_not_taken", func(r *psp.RefundRequest) { r.Currency = "XTS" }},
		{"zero_amount", func(r *psp.RefundRequest) { r.Amount = 0 }},
		{"empty_refund_order_id", func(r *psp.RefundRequest) { r.RefundOrderID = "" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := psp.RefundRequest{RefundOrderID: "rfd-1", MerchantOrderID: c.MerchantOrderID, ChargeReference: c.Reference,
				Amount: 100, Currency: c.Currency}
			tt.mod(&r)
			_, err := p.Refund(t.Context(), r)
			wantClass(t, err, "refund", psp.Rejected)
			if len(p.Refunds()) != 0 {
				t.Fatal("a rejected refund was recorded")
			}
		})
	}
	_, err = p.LookupRefund(t.Context(), "", "rfd-1")
	wantClass(t, err, "lookup_refund", psp.Rejected)
	_, err = p.LookupRefund(t.Context(), c.Reference, "")
	wantClass(t, err, "lookup_refund", psp.Rejected)
	_, err = p.Lookup(t.Context(), "")
	wantClass(t, err, "lookup", psp.Rejected)
}

func TestDedupe(t *testing.T) {
	tests := []struct {
		name    string
		second  func(*psp.ChargeRequest)
		wantErr bool
	}{
		{"same_amount_and_currency", func(*psp.ChargeRequest) {}, false},
		{"different_payment_method", func(r *psp.ChargeRequest) { r.PaymentMethod = "pm_card_declined" }, false},
		{"different_amount", func(r *psp.ChargeRequest) { r.Amount++ }, true},
		{"different_currency", func(r *psp.ChargeRequest) { r.Currency = "USD" }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := New()
			r := req("order-1", "pm_card_ok")
			first, err := p.Charge(t.Context(), r)
			if err != nil {
				t.Fatal(err)
			}
			tt.second(&r)
			second, err := p.Charge(t.Context(), r)
			if tt.wantErr {
				wantClass(t, err, "charge", psp.NotProcessed)
				if !errors.Is(err, ErrOrderIDReused) {
					t.Fatalf("err = %v, want ErrOrderIDReused", err)
				}
			} else if err != nil || second != first {
				t.Fatalf("second Charge = %+v, %v; want %+v", second, err, first)
			}
			if n := p.ChargesFor("order-1"); n != 1 {
				t.Fatalf("ChargesFor = %d, want 1", n)
			}
			if got := p.Charges(); len(got) != 1 || got[0] != first {
				t.Fatalf("Charges = %+v, want [%+v]", got, first)
			}
			if n := p.ChargeCalls(); n != 2 {
				t.Fatalf("ChargeCalls = %d, want 2", n)
			}
		})
	}
}

func TestChargeFaults(t *testing.T) {
	tests := []struct {
		fault   Fault
		class   psp.Class
		records int // after the faulted call
	}{
		{FaultNotProcessed, psp.NotProcessed, 0},
		{FaultUnknownBeforeCharge, psp.Unknown, 0},
		{FaultUnknownAfterCharge, psp.Unknown, 1},
	}
	for _, tt := range tests {
		t.Run(tt.fault.String(), func(t *testing.T) {
			p := New()
			p.FailNextCharges(tt.fault, 1)
			r := req("order-1", "pm_card_ok")

			_, err := p.Charge(t.Context(), r)
			wantClass(t, err, "charge", tt.class)
			if !errors.Is(err, ErrInjected) {
				t.Fatalf("err = %v, want ErrInjected", err)
			}
			if n := p.ChargesFor(r.MerchantOrderID); n != tt.records {
				t.Fatalf("ChargesFor after fault = %d, want %d", n, tt.records)
			}
			var lost psp.Charge
			if tt.records == 1 {
				// Charged, response lost: Lookup is how the caller finds out.
				lost, err = p.Lookup(t.Context(), r.MerchantOrderID)
				if err != nil || lost.Status != psp.Succeeded {
					t.Fatalf("Lookup = %+v, %v; want the succeeded charge", lost, err)
				}
			} else if _, err := p.Lookup(t.Context(), r.MerchantOrderID); !errors.Is(err, psp.ErrNotFound) {
				t.Fatalf("Lookup err = %v, want ErrNotFound", err)
			}

			// The fault was consumed: the retry goes through, and never makes a
			// second record.
			c, err := p.Charge(t.Context(), r)
			if err != nil {
				t.Fatalf("retry: %v", err)
			}
			if tt.records == 1 && c != lost {
				t.Fatalf("retry = %+v, want the record made under the fault %+v", c, lost)
			}
			if n := p.ChargesFor(r.MerchantOrderID); n != 1 {
				t.Fatalf("ChargesFor after retry = %d, want 1", n)
			}
			if n := p.ChargeCalls(); n != 2 {
				t.Fatalf("ChargeCalls = %d, want 2", n)
			}
		})
	}
}

func TestChargeFaultsFIFO(t *testing.T) {
	p := New()
	p.FailNextCharges(FaultNotProcessed, 1)
	p.FailNextCharges(FaultUnknownAfterCharge, 2)
	p.FailNextCharges(FaultUnknownBeforeCharge, 0) // no-op
	want := []psp.Class{psp.NotProcessed, psp.Unknown, psp.Unknown}
	for i, class := range want {
		_, err := p.Charge(t.Context(), req("order-1", "pm_card_ok"))
		wantClass(t, err, "charge", class)
		t.Logf("call %d: %v", i, err)
	}
	if _, err := p.Charge(t.Context(), req("order-1", "pm_card_ok")); err != nil {
		t.Fatalf("call after faults: %v", err)
	}
	if n := p.ChargeCount(); n != 1 {
		t.Fatalf("ChargeCount = %d, want 1", n)
	}
}

func TestLookup(t *testing.T) {
	p := New()
	c, err := p.Charge(t.Context(), req("order-1", "pm_card_declined"))
	if err != nil {
		t.Fatal(err)
	}
	p.FailNextLookups(2)

	tests := []struct {
		name    string
		orderID string
		want    psp.Charge
		check   func(t *testing.T, err error)
	}{
		{"first_fault", "order-1", psp.Charge{}, func(t *testing.T, err error) { wantClass(t, err, "lookup", psp.Unknown) }},
		{"second_fault", "missing", psp.Charge{}, func(t *testing.T, err error) { wantClass(t, err, "lookup", psp.Unknown) }},
		{"found", "order-1", c, func(t *testing.T, err error) {
			if err != nil {
				t.Fatalf("err = %v", err)
			}
		}},
		{"not_found", "missing", psp.Charge{}, func(t *testing.T, err error) {
			if err != psp.ErrNotFound {
				t.Fatalf("err = %v, want psp.ErrNotFound", err)
			}
		}},
	}
	// Sequential on purpose: the faults are consumed by the first two lookups.
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := p.Lookup(t.Context(), tt.orderID)
			tt.check(t, err)
			if got != tt.want {
				t.Fatalf("Lookup = %+v, want %+v", got, tt.want)
			}
		})
	}
	if n := p.LookupCalls(); n != len(tests) {
		t.Fatalf("LookupCalls = %d, want %d", n, len(tests))
	}
}

func TestLatencyHonoursContext(t *testing.T) {
	tests := []struct {
		name string
		call func(ctx context.Context, p *PSP) error
		op   string
	}{
		{"charge", func(ctx context.Context, p *PSP) error {
			_, err := p.Charge(ctx, req("order-1", "pm_card_ok"))
			return err
		}, "charge"},
		{"lookup", func(ctx context.Context, p *PSP) error {
			_, err := p.Lookup(ctx, "order-1")
			return err
		}, "lookup"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := New()
			p.SetLatency(time.Hour)
			// A fault queued behind the latency must survive: the call never
			// reached the PSP.
			p.FailNextCharges(FaultNotProcessed, 1)
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
			defer cancel()

			err := tt.call(ctx, p)
			wantClass(t, err, tt.op, psp.Unknown)
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("err = %v, want context.DeadlineExceeded", err)
			}
			if n := p.ChargeCount(); n != 0 {
				t.Fatalf("ChargeCount = %d, want 0", n)
			}

			p.SetLatency(0)
			_, err = p.Charge(t.Context(), req("order-1", "pm_card_ok"))
			wantClass(t, err, "charge", psp.NotProcessed)
		})
	}
}

func TestLatencyElapses(t *testing.T) {
	p := New()
	p.SetLatency(time.Millisecond)
	if _, err := p.Charge(t.Context(), req("order-1", "pm_card_ok")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Lookup(t.Context(), "order-1"); err != nil {
		t.Fatal(err)
	}
}

func TestCancelledContextMakesNoRecord(t *testing.T) {
	p := New()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := p.Charge(ctx, req("order-1", "pm_card_ok"))
	wantClass(t, err, "charge", psp.Unknown)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if n := p.ChargeCount(); n != 0 {
		t.Fatalf("ChargeCount = %d, want 0", n)
	}
}

func TestConcurrentSameOrderID(t *testing.T) {
	p := New()
	const n = 100
	refs := make(chan string, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			c, err := p.Charge(t.Context(), req("order-1", "pm_card_ok"))
			if err != nil {
				t.Error(err)
				return
			}
			refs <- c.Reference
		})
	}
	wg.Wait()
	close(refs)

	if got := p.ChargesFor("order-1"); got != 1 {
		t.Fatalf("ChargesFor = %d, want 1", got)
	}
	if got := p.ChargeCalls(); got != n {
		t.Fatalf("ChargeCalls = %d, want %d", got, n)
	}
	want := p.Charges()[0].Reference
	for ref := range refs {
		if ref != want {
			t.Fatalf("a caller got reference %q, want %q", ref, want)
		}
	}
}

func TestChargeHookBlocks(t *testing.T) {
	p := New()
	arrived := make(chan psp.ChargeRequest)
	release := make(chan struct{})
	p.SetChargeHook(func(ctx context.Context, r psp.ChargeRequest) {
		arrived <- r
		<-release
	})

	type result struct {
		c   psp.Charge
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := p.Charge(t.Context(), req("order-1", "pm_card_ok"))
		done <- result{c, err}
	}()

	if r := <-arrived; r.MerchantOrderID != "order-1" {
		t.Fatalf("hook saw %+v", r)
	}
	// The charge is parked in the hook: counted as received, not recorded,
	// not returned — and the PSP is not locked by it.
	if n := p.ChargeCalls(); n != 1 {
		t.Fatalf("ChargeCalls = %d, want 1", n)
	}
	if n := p.ChargeCount(); n != 0 {
		t.Fatalf("ChargeCount while blocked = %d, want 0", n)
	}
	if _, err := p.Lookup(t.Context(), "order-1"); !errors.Is(err, psp.ErrNotFound) {
		t.Fatalf("Lookup while blocked = %v, want ErrNotFound", err)
	}
	select {
	case r := <-done:
		t.Fatalf("Charge returned while blocked in hook: %+v", r)
	default:
	}

	close(release)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if n := p.ChargeCount(); n != 1 {
		t.Fatalf("ChargeCount after release = %d, want 1", n)
	}

	p.SetChargeHook(nil)
	if _, err := p.Charge(t.Context(), req("order-2", "pm_card_ok")); err != nil {
		t.Fatalf("Charge with hook removed: %v", err)
	}
}

func TestChargeHookAfter(t *testing.T) {
	tests := []struct {
		name   string
		cancel bool // the client's context ends while the response is slow
	}{
		{"response_delivered", false},
		{"deadline_after_charge", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := New()
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var seen psp.Charge
			p.SetChargeHookAfter(func(ctx context.Context, r psp.ChargeRequest, c psp.Charge) {
				seen = c
				if tt.cancel {
					cancel()
				}
			})

			c, err := p.Charge(ctx, req("order-1", "pm_card_ok"))
			if n := p.ChargesFor("order-1"); n != 1 {
				t.Fatalf("ChargesFor = %d, want 1", n)
			}
			if seen.Reference == "" || seen != p.Charges()[0] {
				t.Fatalf("after hook saw %+v, want the record %+v", seen, p.Charges()[0])
			}
			if !tt.cancel {
				if err != nil || c != seen {
					t.Fatalf("Charge = %+v, %v; want %+v", c, err, seen)
				}
				return
			}
			wantClass(t, err, "charge", psp.Unknown)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("err = %v, want context.Canceled", err)
			}
			got, err := p.Lookup(t.Context(), "order-1")
			if err != nil || got != seen {
				t.Fatalf("Lookup = %+v, %v; want %+v", got, err, seen)
			}
		})
	}
}

func TestChargesReturnsCopy(t *testing.T) {
	p := New()
	if _, err := p.Charge(t.Context(), req("order-1", "pm_card_ok")); err != nil {
		t.Fatal(err)
	}
	got := p.Charges()
	got[0].Status = psp.Declined
	if p.Charges()[0].Status != psp.Succeeded {
		t.Fatal("mutating Charges() changed the ledger")
	}
}

func TestReset(t *testing.T) {
	p := New(WithCreationWindow(time.Second))
	if _, err := p.Charge(t.Context(), req("order-1", "pm_card_ok")); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Lookup(t.Context(), "order-1"); err != nil {
		t.Fatal(err)
	}
	p.FailNextCharges(FaultNotProcessed, 3)
	p.FailNextLookups(3)
	p.SetLatency(time.Hour)
	p.SetChargeHook(func(context.Context, psp.ChargeRequest) { t.Error("hook survived Reset") })
	p.SetChargeHookAfter(func(context.Context, psp.ChargeRequest, psp.Charge) { t.Error("after hook survived Reset") })

	p.Reset()

	if p.ChargeCount() != 0 || p.SucceededCount() != 0 || p.ChargeCalls() != 0 || p.LookupCalls() != 0 || len(p.Charges()) != 0 {
		t.Fatal("ledger or counters survived Reset")
	}
	if _, err := p.Lookup(t.Context(), "order-1"); !errors.Is(err, psp.ErrNotFound) {
		t.Fatalf("Lookup after Reset = %v, want ErrNotFound", err)
	}
	if _, err := p.Charge(t.Context(), req("order-1", "pm_card_ok")); err != nil {
		t.Fatalf("Charge after Reset: %v", err)
	}
	if w := p.Capabilities().CreationWindow; w != time.Second {
		t.Fatalf("CreationWindow after Reset = %v, want the option's 1s", w)
	}
}
