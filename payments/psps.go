package payments

import (
	"fmt"
	"sort"

	"gateway/psp"
)

// PSPs are the payment service providers this replica can reach, by the
// name a payment records. New payments go to the default one; every later
// call about a payment (a lookup, a resume, a refund) goes to the PSP the
// payment names, and a payment whose PSP is not here is left alone: asking
// another PSP about it would turn "not theirs" into "never charged".
type PSPs struct {
	def    string
	byName map[string]psp.Adapter
}

// NewPSPs names the default adapter def and the others by name; the default
// is one of byName.
func NewPSPs(def string, byName map[string]psp.Adapter) (*PSPs, error) {
	if _, ok := byName[def]; !ok {
		return nil, fmt.Errorf("payments: default PSP %q is not among the configured ones", def)
	}
	return &PSPs{def: def, byName: byName}, nil
}

// OnePSP is a replica with one PSP, named as the adapter names itself.
func OnePSP(a psp.Adapter) *PSPs {
	name := PSPName(a.Capabilities())
	return &PSPs{def: name, byName: map[string]psp.Adapter{name: a}}
}

// PSPName is how a payment records the adapter it was sent to: its name, and
// its account when it declares one.
func PSPName(c psp.Capabilities) string {
	if c.Account != "" {
		return c.Name + ":" + c.Account
	}
	return c.Name
}

// Default returns the adapter new payments are sent to, and its name.
func (p *PSPs) Default() (string, psp.Adapter) { return p.def, p.byName[p.def] }

// For returns the adapter a payment recorded, false when this replica has
// none by that name (or the payment names none).
func (p *PSPs) For(name string) (psp.Adapter, bool) {
	a, ok := p.byName[name]
	return a, ok && name != ""
}

// Names lists the configured PSPs, sorted.
func (p *PSPs) Names() []string {
	names := make([]string, 0, len(p.byName))
	for n := range p.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
