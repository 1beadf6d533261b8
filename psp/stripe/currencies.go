package stripe

import (
	"strings"

	"gateway/psp"
)

// Stripe's money units, from https://docs.stripe.com/currencies:
//
//   - amounts are integers in the currency's smallest unit, two decimals
//     unless listed otherwise ("Supported presentment currencies");
//   - zero-decimal currencies take whole units ("Zero-decimal"); MGA is one
//     at Stripe although ISO 4217 gives it two decimals, so an ISO amount
//     with a fraction of an ariary cannot be sent;
//   - three-decimal currencies take three decimals, and the last digit must
//     be 0 ("Three-decimal");
//   - "Special cases": ISK and UGX became zero-decimal, but Stripe keeps
//     writing them with two decimals that must be 00 (1,000 ISK is 100000);
//     HUF and TWD are zero-decimal for payouts only and charge with two
//     decimals;
//   - "Minimum and maximum charge amounts": up to eight digits in Stripe's
//     units, twelve for IDR. The minimum (USD 0.50 or its equivalent in the
//     account's settlement currency) moves with exchange rates: it is left to
//     Stripe, whose amount_too_small answer is Rejected.
//
// The ISO exponents are those of ISO 4217; a test holds them to the
// gateway's own table.
const (
	// stripeTwoDecimal are the presentment currencies Stripe writes with two
	// decimals, as ISO 4217 does.
	stripeTwoDecimal = "USD AED AFN ALL AMD AOA ARS AUD AWG AZN BAM BBD BDT BMD BND BOB BRL BSD BWP BYN BZD " +
		"CAD CDF CHF CNY COP CRC CVE CZK DKK DOP DZD EGP ETB EUR FJD FKP GBP GEL GIP GMD GTQ GYD " +
		"HKD HNL HTG HUF IDR ILS INR JMD KES KGS KHR KYD KZT LAK LBP LKR LRD LSL MAD MDL MKD MMK " +
		"MNT MOP MUR MVR MWK MXN MYR MZN NAD NGN NIO NOK NPR NZD PAB PEN PGK PHP PKR PLN QAR RON " +
		"RSD RUB SAR SBD SCR SEK SGD SHP SLE SOS SRD SZL THB TJS TOP TRY TTD TWD TZS UAH UYU UZS " +
		"WST XCD XCG YER ZAR ZMW"
	// stripeZeroDecimal are Stripe's zero-decimal currencies.
	stripeZeroDecimal = "BIF CLP DJF GNF JPY KMF KRW MGA PYG RWF VND VUV XAF XOF XPF"
	// stripeThreeDecimal are Stripe's three-decimal currencies (last digit 0).
	stripeThreeDecimal = "BHD JOD KWD OMR TND"
	// stripeWholeInTwoDecimals are the special cases written with two
	// decimals that must be 00.
	stripeWholeInTwoDecimals = "ISK UGX"
)

// isoExponent is code's ISO 4217 exponent where it is not Stripe's.
func isoExponent(code string, stripe int) int {
	switch code {
	case "MGA":
		return 2
	case "ISK", "UGX":
		return 0
	}
	return stripe
}

// maxDigits is how many digits an amount may have in Stripe's units.
func maxDigits(code string) int {
	if code == "IDR" {
		return 12
	}
	return 8
}

// currencies builds the table Capabilities advertises.
func currencies() []psp.Currency {
	var out []psp.Currency
	add := func(codes string, exponent int, multiple int64) {
		for _, code := range strings.Fields(codes) {
			c := psp.Currency{Code: code, ISOExponent: isoExponent(code, exponent), Exponent: exponent, Multiple: multiple}
			c.Max = maxISO(c, maxDigits(code))
			out = append(out, c)
		}
	}
	add(stripeTwoDecimal, 2, 0)
	add(stripeZeroDecimal, 0, 0)
	add(stripeThreeDecimal, 3, 10)
	add(stripeWholeInTwoDecimals, 2, 100)
	return out
}

// maxISO is the largest ISO amount whose Stripe amount has at most digits
// digits.
func maxISO(c psp.Currency, digits int) int64 {
	limit := int64(1)
	for range digits {
		limit *= 10
	}
	limit-- // 99999999
	for d := c.Exponent - c.ISOExponent; d > 0; d-- {
		limit /= 10
	}
	for d := c.ISOExponent - c.Exponent; d > 0; d-- {
		limit *= 10
	}
	return limit
}
