package routing

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"gateway/errs"
	"gateway/psp"
)

// Accounts are the PSP accounts a replica can reach, by the name a payment
// records, with the routes and the breakers that choose among them. Every
// later call about a payment (a lookup, a resume, a refund, a capture) goes
// to the account the payment names, and a payment whose account is not
// here is left alone: asking another account about it would turn "not
// theirs" into "never charged".
type Accounts struct {
	def    string
	byName map[string]psp.Adapter
	routes Table
	health *Health
}

// NewAccounts names the accounts; def is the one account of the route of
// every merchant until WithRoutes gives routes.
func NewAccounts(def string, byName map[string]psp.Adapter) (*Accounts, error) {
	if _, ok := byName[def]; !ok {
		return nil, fmt.Errorf("routing: default account %q is not among the configured ones", def)
	}
	return &Accounts{def: def, byName: byName, routes: Table{Default: Route{{Account: def}}}}, nil
}

// One is a replica with one account, named as the adapter names itself.
func One(a psp.Adapter) *Accounts {
	name := Name(a.Capabilities())
	acc, _ := NewAccounts(name, map[string]psp.Adapter{name: a})
	return acc
}

// Name is how a payment records an adapter configured without an account
// name (GATEWAY_PSP alone): its name, and its account when it declares one.
func Name(c psp.Capabilities) string {
	if c.Account != "" {
		return c.Name + ":" + c.Account
	}
	return c.Name
}

// WithRoutes routes new payments by t, each account watched by a breaker
// of h (nil: none). Every account t names must be configured.
func (a *Accounts) WithRoutes(t Table, h *Health) error {
	known := map[string]bool{}
	for n := range a.byName {
		known[n] = true
	}
	if errs := t.Check(known); len(errs) > 0 {
		return errors.Join(errs...)
	}
	a.routes, a.health = t, h
	return nil
}

// Default returns the first account of the default route, and its adapter.
func (a *Accounts) Default() (string, psp.Adapter) {
	name := a.routes.Default[0].Account
	return name, a.byName[name]
}

// For returns the adapter of the account a payment recorded, false when
// this replica has none by that name (or the payment names none).
func (a *Accounts) For(name string) (psp.Adapter, bool) {
	ad, ok := a.byName[name]
	return ad, ok && name != ""
}

// Names lists the configured accounts, sorted.
func (a *Accounts) Names() []string {
	names := make([]string, 0, len(a.byName))
	for n := range a.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Routes is the routing table.
func (a *Accounts) Routes() Table { return a.routes }

// Health is the accounts' breakers (nil when none watch them).
func (a *Accounts) Health() *Health { return a.health }

// ErrManualCapture: no account on the route can authorize now and capture later.
var ErrManualCapture = errors.New("cannot authorize now and capture later")

// Candidates are the accounts p may go to, in order (Table.Candidates),
// less those that cannot take it: a currency or amount their adapter
// refuses (Capabilities.Check), or manual capture they cannot do. None: the
// first refusal on the route (a *psp.CheckError, or ErrManualCapture).
func (a *Accounts) Candidates(p Payment, manual bool) ([]string, error) {
	var out []string
	var first error
	for _, name := range a.routes.Candidates(p) {
		ad := a.byName[name]
		caps := ad.Capabilities()
		err := caps.Check(p.Amount, p.Currency)
		if _, ok := ad.(psp.Capturer); err == nil && manual && (!ok || !caps.ManualCapture) {
			err = fmt.Errorf("%s %w", caps.Name, ErrManualCapture)
		}
		if err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		out = append(out, name)
	}
	switch {
	case len(out) > 0:
		return out, nil
	case first == nil:
		return nil, fmt.Errorf("no account on the route takes %s payments of this amount and method", p.Currency)
	}
	return nil, first
}

// Choose is the first of candidates not in tried whose breaker lets a new
// payment through now; false when none does.
func (a *Accounts) Choose(candidates, tried []string) (string, bool) {
	for _, c := range candidates {
		if !slices.Contains(tried, c) && a.health.Allow(c) {
			return c, true
		}
	}
	return "", false
}

// Next is where a payment's next attempt goes after its attempt certainly
// did nothing: the first of candidates not in tried whose breaker lets it
// through, else the first not in tried at all. A breaker steers new
// payments; for a payment that would otherwise wait, an account that may
// be unhealthy is better than none, and its answer feeds its breaker.
func (a *Accounts) Next(candidates, tried []string) (string, bool) {
	if c, ok := a.Choose(candidates, tried); ok {
		return c, true
	}
	for _, c := range candidates {
		if !slices.Contains(tried, c) {
			return c, true
		}
	}
	return "", false
}

// Observe feeds account's breaker the outcome of a charge sent to it:
// err's class (not processed and unknown are failures; a result, a
// rejection or an order conflict is not) and how long it took.
func (a *Accounts) Observe(account string, err error, took time.Duration) {
	failed := false
	if err != nil && !errors.Is(err, psp.ErrOrderConflict) {
		class, ok := psp.ClassOf(err)
		failed = !ok || class != psp.Rejected
	}
	a.health.Record(account, failed, took)
}

// CannotAccept is the answer, before anything is stored or sent, for a
// payment no account on its route can take (Candidates' error): a
// currency or an amount its PSP refuses, or manual capture it cannot do.
func CannotAccept(err error) error {
	if errors.Is(err, ErrManualCapture) {
		return &errs.Error{Code: errs.CodePSPCannotAccept, Message: "the payment provider cannot capture later", Err: err,
			Fields: []errs.FieldError{{Field: "capture_method", Reason: err.Error() + ": leave it out or use automatic"}}}
	}
	e := &errs.Error{Code: errs.CodePSPCannotAccept, Message: "the payment provider cannot accept this payment", Err: err}
	var ce *psp.CheckError
	if errors.As(err, &ce) {
		e.Fields = []errs.FieldError{{Field: ce.Field, Reason: ce.Reason}}
	} else {
		e.Fields = []errs.FieldError{{Field: "amount", Reason: err.Error()}}
	}
	return e
}
