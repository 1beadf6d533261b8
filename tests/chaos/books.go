package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"gateway/books"
	"gateway/mysql"
	"gateway/payments"
	"gateway/psp"
	"gateway/psp/fake/fakeclient"
	"gateway/review"
)

// lossyRestore is how many payment rows the books' check deletes, as a
// restore that lost acknowledged writes would.
const lossyRestore = 5

// booksFigures is what the books' check did.
type booksFigures struct {
	Lines    int64    `json:"lines"`
	Matched  int64    `json:"matched"`
	Deleted  []string `json:"deleted"`
	Recorded []string `json:"recorded"`
}

// booksInvariants are invariants 29 and 30, not yet checked.
func booksInvariants() []*invariant {
	return []*invariant{
		{ID: 29, Name: "the books balance: every PSP ledger line of the run matches the gateway's records, every record its line"},
		{ID: 30, Name: "a lossy restore of N payment rows is found by the books: exactly those N recorded in review, and mended"},
	}
}

// checkBooks is invariants 29 and 30 (design §17). 29: the books of the
// run's period balance at every PSP account, once everything settled. 30:
// after N random succeeded payments lose their rows, a rerun of the books
// records exactly those N as payments in review under their own ids, and
// nothing else; an operator's resolution then makes them succeeded again,
// and the charge invariants are checked once more over the mended records.
func (c *checker) checkBooks(ctx context.Context, began time.Time, seed uint64) ([]*invariant, booksFigures, error) {
	invs := booksInvariants()
	balance, restore := invs[0], invs[1]
	var fig booksFigures
	e := c.e
	byName := map[string]psp.Adapter{}
	urls := map[string]string{"fake_a": e.pspURL}
	if e.psp2 != nil {
		urls["fake_b"] = e.psp2URL
	}
	var accounts []string
	if err := e.db.SelectContext(ctx, &accounts, `SELECT DISTINCT psp FROM payments WHERE psp IS NOT NULL ORDER BY psp`); err != nil {
		return nil, fig, err
	}
	for _, name := range accounts {
		u, ok := urls[name]
		if !ok && e.psp2 == nil {
			u = e.pspURL // one PSP: the account is GATEWAY_PSP's own name
		}
		if u == "" {
			return nil, fig, fmt.Errorf("books: payments name account %q, which this run does not have", name)
		}
		a, err := fakeclient.New(fakeclient.Config{BaseURL: u, Account: name, CreationWindow: c.w.opts.creationWindow})
		if err != nil {
			return nil, fig, err
		}
		byName[name] = a
	}
	if len(accounts) == 0 {
		return invs, fig, nil
	}
	psps, err := payments.NewPSPs(accounts[0], byName)
	if err != nil {
		return nil, fig, err
	}
	st := mysql.NewStore(e.db)
	job := books.New(books.Config{Store: st.Books(), PSPs: psps, Now: func() time.Time { return time.Now().Add(48 * time.Hour) }})
	from, to := began.Add(-time.Minute).UTC().Truncate(time.Microsecond), time.Now().Add(time.Minute).UTC().Truncate(time.Microsecond)
	pass := func(again bool) ([]books.Discrepancy, error) {
		var found []books.Discrepancy
		for _, account := range accounts {
			rep, err := job.Reconcile(ctx, account, from, to, again)
			if err != nil {
				return nil, fmt.Errorf("books of %s: %w", account, err)
			}
			if !again {
				fig.Lines += rep.Run.Counts.Lines
				fig.Matched += rep.Run.Counts.Matched
			}
			found = append(found, rep.Discrepancies...)
		}
		return found, nil
	}

	found, err := pass(false)
	if err != nil {
		return nil, fig, err
	}
	balance.Checked = int(fig.Lines)
	first := map[int64]bool{}
	for _, d := range found {
		first[d.ID] = true
		balance.fail("%s %s at %s: %s (%s)", d.Class, d.Subject, d.Account, d.Detail, d.Action)
	}

	// The restore: succeeded payments of automatic capture, with no
	// refund and no operation, lose their rows; their keys and events stay.
	var cands []struct {
		MerchantID string `db:"merchant_id"`
		ID         string `db:"id"`
	}
	if err := e.db.SelectContext(ctx, &cands, `SELECT merchant_id, id FROM payments
WHERE status = 'succeeded' AND capture_method = 'automatic' AND amount_reserved = 0 AND op_kind IS NULL AND psp IS NOT NULL
ORDER BY id`); err != nil {
		return nil, fig, err
	}
	r := rand.New(rand.NewPCG(seed, 30))
	r.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
	cands = cands[:min(lossyRestore, len(cands))]
	for _, p := range cands {
		if _, err := e.db.ExecContext(ctx, `DELETE FROM payments WHERE merchant_id = ? AND id = ?`, p.MerchantID, p.ID); err != nil {
			return nil, fig, err
		}
		fig.Deleted = append(fig.Deleted, p.ID)
	}
	slices.Sort(fig.Deleted)
	found, err = pass(true)
	if err != nil {
		return nil, fig, err
	}
	restore.Checked = len(fig.Deleted)
	for _, d := range found {
		switch {
		case d.Class == books.OrphanCharge && d.Action == books.ActionRecordedPayment && slices.Contains(fig.Deleted, d.PaymentID):
			fig.Recorded = append(fig.Recorded, d.PaymentID)
		case first[d.ID]:
			// Found by the first pass: invariant 29's.
		default:
			restore.fail("%s %s at %s: %s (%s), not one of the rows deleted", d.Class, d.Subject, d.Account, d.Detail, d.Action)
		}
	}
	slices.Sort(fig.Recorded)
	if !slices.Equal(fig.Recorded, fig.Deleted) {
		restore.fail("deleted %v, the books recorded %v", fig.Deleted, fig.Recorded)
	}
	admin := review.New(st, review.Config{PSPs: psps})
	for _, id := range fig.Recorded {
		if _, err := admin.Resolve(ctx, payments.Resolution{PaymentID: id, To: payments.Succeeded, Actor: "chaos",
			Reason: "the books found its charge after a restore lost its row"}); err != nil {
			restore.fail("resolving %s: %v", id, err)
		}
	}
	// The mended records against the PSPs' ledgers: invariants 1 to 3
	// again. (Replays and events are not: a recorded payment renders what
	// the ledger knows, and its review and resolution are events of their own.)
	mended := &checker{e: c.e, w: c.w, http: c.http}
	mended.invs = [7]*invariant{nil, {ID: 1}, {ID: 2}, {ID: 3}, {ID: 4}, {ID: 5}, {ID: 6}}
	if err := mended.load(ctx); err != nil {
		return nil, fig, err
	}
	mended.checkCharges()
	mended.checkSettled(true, 0, 0)
	for _, inv := range mended.invs[1:4] {
		for _, ex := range inv.Examples {
			restore.fail("after mending, invariant %d: %s", inv.ID, ex)
		}
		if n := inv.Violations - len(inv.Examples); n > 0 {
			restore.fail("after mending, invariant %d: %d more", inv.ID, n)
		}
	}
	return invs, fig, nil
}
