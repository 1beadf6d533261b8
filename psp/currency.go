package psp

import (
	"fmt"
	"math"
	"strings"
)

// Currency is one currency a PSP takes: how the PSP writes its amounts and
// which amounts it can accept. Amounts at the gateway are ISO 4217 minor
// units; an adapter converts them with ToPSP and back with FromPSP, and never
// rounds: an amount its PSP cannot represent exactly is refused by Check.
type Currency struct {
	// Code is the ISO 4217 code, upper case.
	Code string
	// ISOExponent is the ISO 4217 minor-unit exponent (KRW 0, USD 2, KWD 3):
	// the gateway's amounts count 10^-ISOExponent of a whole unit.
	ISOExponent int
	// Exponent is the PSP's own: it counts 10^-Exponent of a whole unit. It
	// differs from ISOExponent where the PSP does (Stripe writes ISK with two
	// decimals and MGA with none).
	Exponent int
	// Multiple, when above 1, is what every amount in the PSP's units must be
	// a multiple of (Stripe's three-decimal currencies: 10).
	Multiple int64
	// Min and Max bound an amount, in ISO minor units. Zero means no bound
	// beyond a positive amount (Min) and what the PSP's units can hold (Max).
	Min, Max int64
}

// maxExponent bounds the exponents a Currency may have (ISO 4217 has 0–4).
const maxExponent = 4

// ToPSP converts amount, in ISO minor units, to the PSP's units. It fails,
// rather than round, when the PSP cannot represent amount exactly.
func (c Currency) ToPSP(amount int64) (int64, error) {
	if err := c.valid(); err != nil {
		return 0, err
	}
	v, ok := scale(amount, c.Exponent-c.ISOExponent)
	if !ok {
		return 0, fmt.Errorf("%d %s in minor units is not a whole amount in the PSP's units (exponent %d)", amount, c.Code, c.Exponent)
	}
	if c.Multiple > 1 && v%c.Multiple != 0 {
		return 0, fmt.Errorf("%d %s in the PSP's units is not a multiple of %d", v, c.Code, c.Multiple)
	}
	return v, nil
}

// FromPSP converts amount, in the PSP's units, to ISO minor units. It fails
// when the result would not be whole: an answer the gateway cannot record
// exactly.
func (c Currency) FromPSP(amount int64) (int64, error) {
	if err := c.valid(); err != nil {
		return 0, err
	}
	v, ok := scale(amount, c.ISOExponent-c.Exponent)
	if !ok {
		return 0, fmt.Errorf("%d %s in the PSP's units is not a whole number of minor units (ISO exponent %d)", amount, c.Code, c.ISOExponent)
	}
	return v, nil
}

// Step is the smallest positive amount, in ISO minor units, that the PSP can
// represent; every amount it takes is a multiple of it.
func (c Currency) Step() int64 {
	if c.valid() != nil {
		return 0
	}
	step := int64(1)
	if d := c.ISOExponent - c.Exponent; d > 0 {
		step = pow10(d) // the PSP's unit is larger than the ISO minor unit
	}
	if c.Multiple > 1 {
		// amount·10^(e−i) must be a multiple of Multiple.
		m := c.Multiple
		if d := c.Exponent - c.ISOExponent; d > 0 {
			m /= gcd(m, pow10(d))
		}
		step = lcm(step, m)
	}
	return step
}

func (c Currency) valid() error {
	if c.ISOExponent < 0 || c.ISOExponent > maxExponent || c.Exponent < 0 || c.Exponent > maxExponent || c.Multiple < 0 {
		return fmt.Errorf("psp: currency %s has exponents %d/%d and multiple %d", c.Code, c.ISOExponent, c.Exponent, c.Multiple)
	}
	return nil
}

// scale multiplies v by 10^d (d > 0) or divides it by 10^-d (d < 0), failing
// on overflow or an inexact division.
func scale(v int64, d int) (int64, bool) {
	switch {
	case d == 0:
		return v, true
	case d > 0:
		f := pow10(d)
		if v > math.MaxInt64/f || v < math.MinInt64/f {
			return 0, false
		}
		return v * f, true
	}
	f := pow10(-d)
	if v%f != 0 {
		return 0, false
	}
	return v / f, true
}

func pow10(n int) int64 {
	v := int64(1)
	for range n {
		v *= 10
	}
	return v
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func lcm(a, b int64) int64 { return a / gcd(a, b) * b }

// Currency returns the entry for code, and false when the PSP does not take it.
func (c Capabilities) Currency(code string) (Currency, bool) {
	for _, cur := range c.Currencies {
		if cur.Code == code {
			return cur, true
		}
	}
	return Currency{}, false
}

// CheckError is why a PSP can never accept an amount or currency, in words a
// merchant's developer can act on. Field is "amount" or "currency".
type CheckError struct {
	Field  string
	Reason string
}

func (e *CheckError) Error() string { return e.Reason }

// Check returns nil when the PSP can accept amount (ISO minor units) of
// currency, and a *CheckError saying why not otherwise: a currency it does
// not take, a non-positive amount, one its units cannot represent exactly,
// or one outside its limits. A payment flow calls it before storing
// anything; adapters call it before sending, and answer Rejected.
func (c Capabilities) Check(amount int64, currency string) error {
	cur, ok := c.Currency(currency)
	if !ok {
		return &CheckError{Field: "currency", Reason: c.notTaken(currency)}
	}
	if amount <= 0 {
		return &CheckError{Field: "amount", Reason: "the amount must be positive"}
	}
	if err := cur.valid(); err != nil {
		return err
	}
	if step := cur.Step(); amount%step != 0 {
		what := fmt.Sprintf("a multiple of %d (in minor units)", step)
		if step == pow10(cur.ISOExponent) {
			what = fmt.Sprintf("whole units, a multiple of %d in minor units", step)
		}
		return &CheckError{Field: "amount", Reason: fmt.Sprintf("%s amounts at %s must be %s", currency, c.Name, what)}
	}
	if cur.Min > 0 && amount < cur.Min {
		return &CheckError{Field: "amount", Reason: fmt.Sprintf("%s amounts at %s must be at least %d (in minor units)", currency, c.Name, cur.Min)}
	}
	if cur.Max > 0 && amount > cur.Max {
		return &CheckError{Field: "amount", Reason: fmt.Sprintf("%s amounts at %s must be at most %d (in minor units)", currency, c.Name, cur.Max)}
	}
	if _, err := cur.ToPSP(amount); err != nil {
		return &CheckError{Field: "amount", Reason: fmt.Sprintf("%s cannot take this %s amount: %v", c.Name, currency, err)}
	}
	return nil
}

// notTaken names the currencies the PSP does take, when they are few.
func (c Capabilities) notTaken(currency string) string {
	if len(c.Currencies) == 0 {
		return fmt.Sprintf("%s takes no currency as configured", c.Name)
	}
	if len(c.Currencies) > 8 {
		return fmt.Sprintf("%s does not take %s", c.Name, currency)
	}
	codes := make([]string, len(c.Currencies))
	for i, cur := range c.Currencies {
		codes[i] = cur.Code
	}
	if len(codes) == 1 {
		return fmt.Sprintf("%s takes %s only, not %s", c.Name, codes[0], currency)
	}
	return fmt.Sprintf("%s takes %s, not %s", c.Name, strings.Join(codes, ", "), currency)
}
