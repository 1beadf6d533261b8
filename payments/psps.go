package payments

import (
	"gateway/psp"
	"gateway/routing"
)

// PSPs are the PSP accounts this replica can reach, with the routes and
// breakers that choose among them (routing.Accounts, design §16).
type PSPs = routing.Accounts

// NewPSPs names the accounts; def is the account of every merchant's route
// until routes are given (routing.NewAccounts).
func NewPSPs(def string, byName map[string]psp.Adapter) (*PSPs, error) {
	return routing.NewAccounts(def, byName)
}

// OnePSP is a replica with one PSP, named as the adapter names itself.
func OnePSP(a psp.Adapter) *PSPs { return routing.One(a) }

// PSPName is how a payment records the adapter it was sent to when no
// account names it: its name, and its account when it declares one.
func PSPName(c psp.Capabilities) string { return routing.Name(c) }
