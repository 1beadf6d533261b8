package payments

import "strings"

// currencyExponents maps each ISO 4217 currency the gateway accepts to its
// minor-unit exponent (2: amounts are in hundredths, 0: in whole units).
// Codes without a minor unit (precious metals, XXX, XTS) are left out.
var currencyExponents = func() map[string]int {
	m := map[string]int{}
	for exp, codes := range map[int]string{
		0: "BIF CLP DJF GNF ISK JPY KMF KRW PYG RWF UGX UYI VND VUV XAF XOF XPF",
		2: "AED AFN ALL AMD AOA ARS AUD AWG AZN BAM BBD BDT BMD BND BOB BOV BRL BSD BTN BWP BYN BZD " +
			"CAD CDF CHE CHF CHW CNY COP COU CRC CUP CVE CZK DKK DOP DZD EGP ERN ETB EUR FJD FKP GBP " +
			"GEL GHS GIP GMD GTQ GYD HKD HNL HTG HUF IDR ILS INR IRR JMD KES KGS KHR KPW KYD KZT LAK " +
			"LBP LKR LRD LSL MAD MDL MGA MKD MMK MNT MOP MRU MUR MVR MWK MXN MXV MYR MZN NAD NGN NIO " +
			"NOK NPR NZD PAB PEN PGK PHP PKR PLN QAR RON RSD RUB SAR SBD SCR SDG SEK SGD SHP SLE SOS " +
			"SRD SSP STN SVC SYP SZL THB TJS TMT TOP TRY TTD TWD TZS UAH USD USN UYU UZS VED VES WST " +
			"XCD XCG YER ZAR ZMW ZWG",
		3: "BHD IQD JOD KWD LYD OMR TND",
		4: "CLF UYW",
	} {
		for _, c := range strings.Fields(codes) {
			m[c] = exp
		}
	}
	return m
}()

// CurrencyExponent returns the minor-unit exponent of an ISO 4217 code, and
// false when the gateway does not accept the code.
func CurrencyExponent(code string) (int, bool) {
	e, ok := currencyExponents[code]
	return e, ok
}
