// Package routing chooses where a new payment goes (design §16): a
// merchant's route, an ordered list of PSP accounts with rules, and each
// account's health, a circuit breaker held in memory. It knows accounts by
// name only; the adapters behind them are the caller's.
package routing

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
)

// Entry is one account of a route, with the rules a payment must meet to
// go there. Empty rules take every payment.
type Entry struct {
	Account string `json:"account"`
	// Currencies are ISO 4217 codes, upper case; empty takes any.
	Currencies []string `json:"currencies,omitempty"`
	// MinAmount and MaxAmount bound the amount in minor units, both
	// inclusive; zero leaves that side open.
	MinAmount int64 `json:"min_amount,omitempty"`
	MaxAmount int64 `json:"max_amount,omitempty"`
	// PaymentMethods are prefixes of the payment method ("pm_card_",
	// "virtual_account"); empty takes any, and a payment whose method is
	// given only at its confirm matches only an entry with none.
	PaymentMethods []string `json:"payment_methods,omitempty"`
	// Weight, when positive, splits new payments among the leading run of
	// weighted entries that take a payment, in proportion.
	Weight int `json:"weight,omitempty"`
}

// Route is an ordered list of entries: a payment goes to the first that
// takes it and is healthy, and fails over down the list.
type Route []Entry

// Table is every merchant's route.
type Table struct {
	// Default is the route of a merchant without one of its own.
	Default Route `json:"default"`
	// Merchants are the merchants' own routes, by merchant id.
	Merchants map[string]Route `json:"merchants,omitempty"`
}

// Payment is what the rules read of a new payment.
type Payment struct {
	MerchantID string
	// Key is the payment's idempotency key: the weighted draw is a
	// function of it, so a retry sees the same order.
	Key           string
	Currency      string
	Amount        int64
	PaymentMethod string
}

// takes reports whether e's rules take p.
func (e Entry) takes(p Payment) bool {
	if len(e.Currencies) > 0 && !slices.Contains(e.Currencies, p.Currency) {
		return false
	}
	if (e.MinAmount > 0 && p.Amount < e.MinAmount) || (e.MaxAmount > 0 && p.Amount > e.MaxAmount) {
		return false
	}
	if len(e.PaymentMethods) == 0 {
		return true
	}
	for _, m := range e.PaymentMethods {
		if p.PaymentMethod != "" && strings.HasPrefix(p.PaymentMethod, m) {
			return true
		}
	}
	return false
}

// RouteOf is merchantID's route.
func (t Table) RouteOf(merchantID string) Route {
	if r, ok := t.Merchants[merchantID]; ok {
		return r
	}
	return t.Default
}

// Candidates are the accounts of p's merchant's route whose rules take p,
// each once, in the order to try them: a pure function of p. A leading
// run of weighted entries is ordered by a draw from p's merchant and key.
func (t Table) Candidates(p Payment) []string {
	var taking []Entry
	for _, e := range t.RouteOf(p.MerchantID) {
		if e.takes(p) {
			taking = append(taking, e)
		}
	}
	weighted := 0
	for weighted < len(taking) && taking[weighted].Weight > 0 {
		weighted++
	}
	if weighted > 1 {
		draw(taking[:weighted], p.MerchantID, p.Key)
	}
	var out []string
	for _, e := range taking {
		if !slices.Contains(out, e.Account) {
			out = append(out, e.Account)
		}
	}
	return out
}

// draw orders es (all weighted) by successive draws without replacement,
// each a hash of (merchant, key, round) against the weights left.
func draw(es []Entry, merchantID, key string) {
	for i := 0; i < len(es)-1; i++ {
		total := 0
		for _, e := range es[i:] {
			total += e.Weight
		}
		sum := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%s\x00%d", merchantID, key, i)))
		r := int(binary.BigEndian.Uint64(sum[:8]) % uint64(total))
		for j := i; j < len(es); j++ {
			if r < es[j].Weight {
				es[i], es[j] = es[j], es[i]
				break
			}
			r -= es[j].Weight
		}
	}
}

// Check lists every problem of t against the accounts configured, each
// naming where it is (routes.default[1].currencies, say).
func (t Table) Check(accounts map[string]bool) []error {
	var errs []error
	check := func(where string, r Route) {
		if len(r) == 0 {
			errs = append(errs, fmt.Errorf("%s: a route needs at least one account", where))
		}
		for i, e := range r {
			at := fmt.Sprintf("%s[%d]", where, i)
			switch {
			case e.Account == "":
				errs = append(errs, fmt.Errorf("%s.account: is required", at))
			case !accounts[e.Account]:
				errs = append(errs, fmt.Errorf("%s.account: names %q, which is not a configured account", at, e.Account))
			}
			for _, c := range e.Currencies {
				if len(c) != 3 || strings.ToUpper(c) != c {
					errs = append(errs, fmt.Errorf("%s.currencies: %q is not an upper-case ISO 4217 code such as KRW", at, c))
				}
			}
			if e.MinAmount < 0 || e.MaxAmount < 0 || (e.MaxAmount > 0 && e.MinAmount > e.MaxAmount) {
				errs = append(errs, fmt.Errorf("%s: min_amount and max_amount must be ≥ 0, min ≤ max", at))
			}
			if e.Weight < 0 {
				errs = append(errs, fmt.Errorf("%s.weight: must be ≥ 0", at))
			}
			for _, m := range e.PaymentMethods {
				if m == "" {
					errs = append(errs, fmt.Errorf("%s.payment_methods: an empty prefix takes every method; leave the list out instead", at))
				}
			}
		}
	}
	check("routes.default", t.Default)
	ids := make([]string, 0, len(t.Merchants))
	for id := range t.Merchants {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		check("routes.merchants."+id, t.Merchants[id])
	}
	return errs
}
