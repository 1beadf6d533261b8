package psp_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"gateway/psp"
)

// Currencies shaped like the PSPs' odd cases.
var (
	krw = psp.Currency{Code: "KRW", ISOExponent: 0, Exponent: 0, Min: 100}
	usd = psp.Currency{Code: "USD", ISOExponent: 2, Exponent: 2, Max: 99_999_999}
	isk = psp.Currency{Code: "ISK", ISOExponent: 0, Exponent: 2, Multiple: 100} // two decimals, always 00
	mga = psp.Currency{Code: "MGA", ISOExponent: 2, Exponent: 0}                // no decimals at the PSP
	kwd = psp.Currency{Code: "KWD", ISOExponent: 3, Exponent: 3, Multiple: 10}  // must end in 0
)

func TestCurrencyConversion(t *testing.T) {
	tests := []struct {
		name     string
		cur      psp.Currency
		iso, psp int64
		toErr    bool // ToPSP refuses iso
	}{
		{"same units", usd, 1999, 1999, false},
		{"zero exponent", krw, 15000, 15000, false},
		{"two decimals at the PSP", isk, 1000, 100000, false},
		{"none at the PSP", mga, 1500, 15, false},
		{"none at the PSP, fraction", mga, 1550, 0, true},
		{"must end in 0", kwd, 5120, 5120, false},
		{"must end in 0, does not", kwd, 5124, 0, true},
		{"overflow", isk, math.MaxInt64 / 10, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.cur.ToPSP(tt.iso)
			if tt.toErr {
				if err == nil {
					t.Fatalf("ToPSP(%d) = %d, want a refusal, never a rounded amount", tt.iso, got)
				}
				return
			}
			if err != nil || got != tt.psp {
				t.Fatalf("ToPSP(%d) = %d, %v; want %d", tt.iso, got, err, tt.psp)
			}
			back, err := tt.cur.FromPSP(got)
			if err != nil || back != tt.iso {
				t.Fatalf("FromPSP(%d) = %d, %v; want %d", got, back, err, tt.iso)
			}
		})
	}
	// An answer in units the gateway cannot record exactly is refused too.
	if v, err := isk.FromPSP(150); err == nil {
		t.Fatalf("FromPSP(150 ISK at the PSP) = %d, want an error (1.5 krónur)", v)
	}
	if _, err := (psp.Currency{Code: "XXX", ISOExponent: 9}).ToPSP(1); err == nil {
		t.Fatal("an exponent beyond ISO 4217's was accepted")
	}
}

func TestCurrencyStep(t *testing.T) {
	for _, tt := range []struct {
		cur  psp.Currency
		want int64
	}{{usd, 1}, {krw, 1}, {isk, 1}, {mga, 100}, {kwd, 10},
		{psp.Currency{Code: "X", ISOExponent: 0, Exponent: 1, Multiple: 4}, 2}} {
		if got := tt.cur.Step(); got != tt.want {
			t.Errorf("%s Step() = %d, want %d", tt.cur.Code, got, tt.want)
		}
	}
}

func TestCheck(t *testing.T) {
	caps := psp.Capabilities{Name: "stripe", Currencies: []psp.Currency{krw, usd, isk, mga, kwd}}
	tests := []struct {
		name     string
		amount   int64
		currency string
		field    string // "" when accepted
		reason   string // a part of the reason
	}{
		{"ok", 1999, "USD", "", ""},
		{"ok whole krónur", 1001, "ISK", "", ""},
		{"currency not taken", 100, "EUR", "currency", "stripe takes KRW, USD, ISK, MGA, KWD, not EUR"},
		{"zero", 0, "USD", "amount", "positive"},
		{"negative", -5, "USD", "amount", "positive"},
		{"fraction of an ariary", 1050, "MGA", "amount", "MGA amounts at stripe must be whole units, a multiple of 100 in minor units"},
		{"last digit not 0", 5124, "KWD", "amount", "KWD amounts at stripe must be a multiple of 10"},
		{"below minimum", 99, "KRW", "amount", "at least 100"},
		{"minimum", 100, "KRW", "", ""},
		{"above maximum", 100_000_000, "USD", "amount", "at most 99999999"},
		{"overflow in the PSP's units", math.MaxInt64 / 10, "ISK", "amount", "stripe cannot take this ISK amount"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := caps.Check(tt.amount, tt.currency)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Check(%d %s) = %v, want nil", tt.amount, tt.currency, err)
				}
				return
			}
			var ce *psp.CheckError
			if !errors.As(err, &ce) || ce.Field != tt.field || !strings.Contains(ce.Reason, tt.reason) {
				t.Fatalf("Check(%d %s) = %#v, want field %s saying %q", tt.amount, tt.currency, err, tt.field, tt.reason)
			}
		})
	}
	one := psp.Capabilities{Name: "toss", Currencies: []psp.Currency{krw}}
	if err := one.Check(100, "USD"); err == nil || err.Error() != "toss takes KRW only, not USD" {
		t.Fatalf("Check = %v", err)
	}
	if err := (psp.Capabilities{Name: "x"}).Check(100, "USD"); err == nil {
		t.Fatal("a PSP with no currencies took USD")
	}
}

func TestMatch(t *testing.T) {
	req := psp.ChargeRequest{MerchantOrderID: "ord_1", Amount: 1000, Currency: "KRW"}
	ok := psp.Charge{MerchantOrderID: "ord_1", Amount: 1000, Currency: "KRW", Status: psp.Succeeded}
	if err := psp.MatchCharge("lookup", req, ok); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		c        psp.Charge
		conflict bool
	}{
		{psp.Charge{MerchantOrderID: "ord_2", Amount: 1000, Currency: "KRW"}, false},
		{psp.Charge{MerchantOrderID: "ord_1", Amount: 500, Currency: "KRW"}, true},
		{psp.Charge{MerchantOrderID: "ord_1", Amount: 1000, Currency: "JPY"}, true},
	} {
		err := psp.MatchCharge("lookup", req, tt.c)
		if class, _ := psp.ClassOf(err); class != psp.Unknown || !errors.Is(err, psp.ErrMismatch) ||
			errors.Is(err, psp.ErrOrderConflict) != tt.conflict {
			t.Errorf("MatchCharge(%+v) = %v, want Unknown wrapping ErrMismatch (and ErrOrderConflict: %v)", tt.c, err, tt.conflict)
		}
	}
	rreq := psp.RefundRequest{RefundOrderID: "rfd_1", MerchantOrderID: "ord_1", Amount: 10, Currency: "KRW"}
	r := psp.Refund{RefundOrderID: "rfd_1", MerchantOrderID: "ord_1", Amount: 10, Currency: "KRW"}
	if err := psp.MatchRefund("refund", rreq, r); err != nil {
		t.Fatal(err)
	}
	r.Currency = "USD"
	if err := psp.MatchRefund("refund", rreq, r); !errors.Is(err, psp.ErrMismatch) || !errors.Is(err, psp.ErrOrderConflict) {
		t.Fatalf("MatchRefund with another currency = %v", err)
	}
	r.RefundOrderID = "rfd_2"
	if err := psp.MatchRefund("refund", rreq, r); !errors.Is(err, psp.ErrMismatch) || errors.Is(err, psp.ErrOrderConflict) {
		t.Fatalf("MatchRefund for another refund = %v", err)
	}
}

func TestChargeEqual(t *testing.T) {
	a := psp.Charge{MerchantOrderID: "o", Status: psp.Pending, NextAction: &psp.NextAction{Type: "redirect", URL: "https://x"}}
	b := a
	b.NextAction = &psp.NextAction{Type: "redirect", URL: "https://x"}
	if !a.Equal(b) {
		t.Fatal("equal answers with distinct NextAction pointers differ")
	}
	b.NextAction.URL = "https://y"
	if a.Equal(b) {
		t.Fatal("another URL is equal")
	}
	b.NextAction = nil
	if a.Equal(b) || b.Equal(a) {
		t.Fatal("a missing NextAction is equal")
	}
	c := psp.Charge{MerchantOrderID: "o"}
	if !c.Equal(c) || c.Equal(psp.Charge{MerchantOrderID: "p"}) {
		t.Fatal("plain charges compare wrong")
	}
}

func TestErrorNamesItsClassAndCode(t *testing.T) {
	e := &psp.Error{Class: psp.Rejected, Op: "charge", Code: "amount_too_small", Err: errors.New("too small")}
	if got := e.Error(); got != "psp charge: rejected (amount_too_small): too small" {
		t.Fatalf("Error() = %q", got)
	}
	if class, ok := psp.ClassOf(e); !ok || class != psp.Rejected || class.String() != "rejected" {
		t.Fatalf("ClassOf = %v, %v", class, ok)
	}
}
