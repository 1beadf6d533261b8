package main

import (
	"context"
	"fmt"
	"time"

	"gateway/payments"
	"gateway/routing"
)

// Two PSPs (--psps 2, design §16): invariant 27, a failover never charges
// twice; invariant 28, while one PSP is down entirely the intents routed
// to it succeed through the other.

// checkFailovers: invariant 27. Every earlier attempt ended certainly not
// processed and no ledger holds a charge under its order id; no key has
// more than one charge across both PSPs' ledgers, over all its attempts'
// order ids; a payment's current attempt is at the account it names.
func (c *checker) checkFailovers() *invariant {
	inv := &invariant{ID: 27, Name: "a failover to another PSP never charges twice: earlier attempts hold no charge, at most one charge per key across both ledgers"}
	byPayment := map[string][]dbAttempt{}
	moves := map[string]int{}
	for _, a := range c.attempts {
		byPayment[a.PaymentID] = append(byPayment[a.PaymentID], a)
	}
	for _, p := range c.payments {
		inv.Checked++
		earlier := byPayment[p.ID]
		if max(p.Attempt, 1) != len(earlier)+1 {
			inv.fail("payment %s is at attempt %d with %d earlier attempts recorded", p.ID, p.Attempt, len(earlier))
		}
		charges := len(c.charges[p.MerchantOrderID])
		for _, a := range earlier {
			inv.Checked++
			if a.Outcome != string(routing.AttemptNotProcessed) && a.Outcome != string(routing.AttemptAbsent) {
				inv.fail("attempt %d of payment %s at %s ended %s", a.Attempt, p.ID, a.PSP, a.Outcome)
			}
			if a.MerchantOrderID != payments.AttemptOrderID(p.MerchantID, p.IdemKey, a.Attempt) {
				inv.fail("attempt %d of payment %s has order id %s, not its own", a.Attempt, p.ID, a.MerchantOrderID)
			}
			if a.MerchantOrderID == p.MerchantOrderID {
				inv.fail("attempt %d of payment %s shares order id %s with the current attempt", a.Attempt, p.ID, a.MerchantOrderID)
			}
			if n := len(c.charges[a.MerchantOrderID]); n > 0 {
				charges += n
				inv.fail("attempt %d of payment %s at %s (certainly not processed) holds %d charge(s) at %s", a.Attempt, p.ID, a.PSP, n, c.accountOf[a.MerchantOrderID])
			}
		}
		if charges > 1 {
			inv.fail("payment %s (merchant %s, key %q) has %d charges across both PSPs", p.ID, p.MerchantID, p.IdemKey, charges)
		}
		if len(earlier) > 0 {
			moves[earlier[0].PSP+" → "+p.PSP.String]++
		}
	}
	for m, n := range moves {
		inv.Notes = append(inv.Notes, fmt.Sprintf("%d payments failed over %s", n, m))
	}
	return inv
}

// minOutageIntents is the fewest intents invariant 28 judges: one intent
// the database's own faults kept from any PSP is not 1 % of a short run.
const minOutageIntents = 20

// outageGrace is how long after fake_b went down its intents start to count.
const outageGrace = time.Second

// outageIntents is the figure of invariant 28.
type outageIntents struct {
	Outages int     `json:"outages"`
	Seconds float64 `json:"seconds"`
	Intents int     `json:"intents"`
	// Succeeded are the intents charged: ThroughOther at fake_a, Later at
	// fake_b once it was back.
	Succeeded    int     `json:"succeeded"`
	ThroughOther int     `json:"through_the_other"`
	Later        int     `json:"at_it_once_back"`
	Percent      float64 `json:"percent"`
}

// checkOutages: invariant 28. Of the payments created while fake_b was
// down entirely (from a second after it went down; fake_a up and without
// faults) by merchants whose route starts at fake_b, with a card that
// succeeds and not canceled by key, at least 99 % were charged: at
// fake_a, or at fake_b once it was back after their attempt at fake_a
// certainly did nothing (both are counted).
func (c *checker) checkOutages(ctx context.Context, outages, aDowns []window) (*invariant, outageIntents, error) {
	inv := &invariant{ID: 28, Name: "while one PSP is down entirely, at least 99 % of the intents routed to it succeed through the other"}
	var fig outageIntents
	canceled := map[recKey]bool{}
	var rows []struct {
		MerchantID string `db:"merchant_id"`
		IdemKey    string `db:"idem_key"`
	}
	if err := c.e.db.SelectContext(ctx, &rows, `SELECT merchant_id, idem_key FROM key_cancellations`); err != nil {
		return nil, fig, fmt.Errorf("read key cancellations: %w", err)
	}
	for _, r := range rows {
		canceled[recKey{c.idx(r.MerchantID), r.IdemKey}] = true
	}
	during := func(t time.Time) bool {
		for _, d := range aDowns {
			if !t.Before(d.From) && t.Before(d.To.Add(time.Second)) {
				return false
			}
		}
		for _, w := range outages {
			// The first second's requests may have left for fake_b before
			// it went down: they are judged by the other invariants.
			if !t.Before(w.From.Add(outageGrace)) && t.Before(w.To) {
				return true
			}
		}
		return false
	}
	fig.Outages = len(outages)
	for _, w := range outages {
		fig.Seconds += w.To.Sub(w.From).Seconds()
	}
	for _, p := range c.payments {
		i := c.idx(p.MerchantID)
		if i < 0 || firstAccount(i) != "fake_b" || p.PaymentMethod != "pm_card_ok" || canceled[recKey{i, p.IdemKey}] || !during(p.CreatedAt) {
			continue
		}
		fig.Intents++
		inv.Checked++
		charged := false
		for _, ch := range c.charges[p.MerchantOrderID] {
			charged = charged || ch.Status != "declined"
		}
		switch {
		case charged && c.accountOf[p.MerchantOrderID] == "fake_a":
			fig.Succeeded++
			fig.ThroughOther++
		case charged:
			// Charged at fake_b once it was back (its first attempt, at
			// fake_a, certainly did nothing): the intent succeeded.
			fig.Succeeded++
			fig.Later++
		case len(inv.Notes) < maxExamples:
			inv.Notes = append(inv.Notes, fmt.Sprintf("payment %s (created %s) is %s at %s, attempt %d", p.ID, p.CreatedAt.Format("15:04:05.000"), p.Status, p.PSP.String, p.Attempt))
		}
	}
	if fig.Intents > 0 {
		fig.Percent = 100 * float64(fig.Succeeded) / float64(fig.Intents)
		if fig.Intents < minOutageIntents {
			inv.Notes = append(inv.Notes, fmt.Sprintf("fewer than %d intents: too few for a percentage (a short run's outage), not judged", minOutageIntents))
		} else if fig.Succeeded*100 < fig.Intents*99 {
			inv.fail("of %d intents routed to fake_b during its outages, %d (%.1f %%) were charged", fig.Intents, fig.Succeeded, fig.Percent)
		}
	}
	inv.Notes = append([]string{fmt.Sprintf("%d outage(s) of fake_b, %.1f s in all: %d intents routed to it, %d (%.2f %%) charged: %d at fake_a, %d at fake_b once it was back",
		fig.Outages, fig.Seconds, fig.Intents, fig.Succeeded, fig.Percent, fig.ThroughOther, fig.Later)}, inv.Notes...)
	return inv, fig, nil
}
