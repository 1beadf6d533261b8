package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"

	"gateway/payments"
	"gateway/psp/fake/fakeserver"
)

// The refund invariants (design §7.1 and §11) are numbered from
// refundInvariantBase, apart from the others'.
const refundInvariantBase = 11

type dbRefund struct {
	MerchantID    string         `db:"merchant_id"`
	ID            string         `db:"id"`
	PaymentID     string         `db:"payment_id"`
	IdemKey       string         `db:"idem_key"`
	RefundOrderID string         `db:"refund_order_id"`
	Status        string         `db:"status"`
	Amount        int64          `db:"amount"`
	Currency      string         `db:"currency"`
	PSPReference  sql.NullString `db:"psp_reference"`
	FailureCode   sql.NullString `db:"failure_code"`
	ReviewReason  sql.NullString `db:"review_reason"`
}

type dbRefundKey struct {
	MerchantID     string        `db:"merchant_id"`
	IdemKey        string        `db:"idem_key"`
	State          string        `db:"state"`
	RefundID       string        `db:"subject_id"`
	ResponseStatus sql.NullInt32 `db:"response_status"`
	ResponseBody   []byte        `db:"response_body"`
}

// dbRefundedPayment is a payment with what its refunds hold.
type dbRefundedPayment struct {
	MerchantID      string `db:"merchant_id"`
	ID              string `db:"id"`
	MerchantOrderID string `db:"merchant_order_id"`
	Status          string `db:"status"`
	Amount          int64  `db:"amount"`
	Currency        string `db:"currency"`
	AmountReserved  int64  `db:"amount_reserved"`
	AmountRefunded  int64  `db:"amount_refunded"`
}

// refundEvidence is what the refund invariants are judged on: the database,
// the PSP's ledger and what the refund clients were told.
type refundEvidence struct {
	merchants []string // merchant ids, by the index the records use
	payments  []dbRefundedPayment
	refunds   []dbRefund
	keys      []dbRefundKey
	ledger    fakeserver.Ledger
	records   []*refundRecord
	// canceled are the payments canceled by key (merchant, payment id):
	// their cancellation refunds them under a key of its own.
	canceled map[payRef]bool
	// settled: no refund key in progress and no refund pending when the
	// drain ended (pendingLeft, inProgressLeft: what was left otherwise).
	settled                     bool
	inProgressLeft, pendingLeft int
}

func loadRefundEvidence(ctx context.Context, dbx *sqlx.DB, ledger fakeserver.Ledger, merchants []merchant, records []*refundRecord) (*refundEvidence, error) {
	ev := &refundEvidence{ledger: ledger, records: records}
	for _, m := range merchants {
		ev.merchants = append(ev.merchants, m.ID)
	}
	if err := dbx.SelectContext(ctx, &ev.payments, `SELECT merchant_id, id, merchant_order_id, status, amount, currency,
    amount_reserved, amount_refunded FROM payments`); err != nil {
		return nil, fmt.Errorf("read payments: %w", err)
	}
	if err := dbx.SelectContext(ctx, &ev.refunds, `SELECT merchant_id, id, payment_id, idem_key, refund_order_id, status,
    amount, currency, psp_reference, failure_code, review_reason FROM refunds`); err != nil {
		return nil, fmt.Errorf("read refunds: %w", err)
	}
	if err := dbx.SelectContext(ctx, &ev.keys, `SELECT merchant_id, idem_key, state, subject_id, response_status, response_body
    FROM idempotency_keys WHERE endpoint = ?`, payments.EndpointCreateRefund); err != nil {
		return nil, fmt.Errorf("read refund keys: %w", err)
	}
	var canceled []struct {
		MerchantID string `db:"merchant_id"`
		PaymentID  string `db:"payment_id"`
	}
	if err := dbx.SelectContext(ctx, &canceled, `SELECT merchant_id, payment_id FROM key_cancellations WHERE payment_id IS NOT NULL`); err != nil {
		return nil, fmt.Errorf("read cancellations: %w", err)
	}
	ev.canceled = map[payRef]bool{}
	for _, kc := range canceled {
		ev.canceled[payRef{kc.MerchantID, kc.PaymentID}] = true
	}
	return ev, nil
}

// waitRefundsSettled polls until no refund key is IN_PROGRESS and no
// refund pending, or limit passes.
func waitRefundsSettled(ctx context.Context, dbx *sqlx.DB, limit time.Duration) (ok bool, inProgress, pending int, err error) {
	deadline := time.Now().Add(limit)
	for {
		err := dbx.QueryRowxContext(ctx, `SELECT
    (SELECT COUNT(*) FROM idempotency_keys WHERE state = 'IN_PROGRESS' AND endpoint = ?),
    (SELECT COUNT(*) FROM refunds WHERE status = 'pending')`, payments.EndpointCreateRefund).Scan(&inProgress, &pending)
		if err != nil {
			return false, 0, 0, fmt.Errorf("count unfinished refunds: %w", err)
		}
		if inProgress == 0 && pending == 0 {
			return true, 0, 0, nil
		}
		if time.Now().After(deadline) {
			return false, inProgress, pending, nil
		}
		if !sleepCtx(ctx, 250*time.Millisecond) {
			return false, inProgress, pending, ctx.Err()
		}
	}
}

func newRefundInvariants() []*invariant {
	names := []string{
		"refunds: at most one PSP refund per refund order id, derived from (merchant, payment, key)",
		"refunds: the PSP's refunds of a payment never exceed its charge",
		"refunds: every PSP refund is exactly one refund row, with its amount and a status that agrees",
		"refunds: every refund row agrees with the PSP (succeeded: refunded there; failed: not)",
		"refunds: a payment's pending, succeeded and in-review refunds never exceed it; its sums agree",
		"refunds: nothing left pending or IN_PROGRESS after the drain (requires_review allowed)",
		"refunds: every answer replays identically; refusals store nothing",
		"refunds: no cross-merchant leaks",
	}
	invs := make([]*invariant, len(names))
	for i, n := range names {
		invs[i] = &invariant{ID: refundInvariantBase + i, Name: n}
	}
	return invs
}

// Indexes into the list newRefundInvariants returns.
const (
	riOnce = iota
	riWithinCharge
	riLedgerRows
	riRowsLedger
	riReserved
	riSettled
	riAnswers
	riMerchants
)

type payRef struct{ merchant, id string }

// checkRefundState judges the refund invariants that need no HTTP: every
// one but the replays and the cross-merchant reads, each by a function of
// its own.
func checkRefundState(ev *refundEvidence, invs []*invariant) {
	x := indexRefunds(ev)
	checkRefundOnce(ev, x, invs[riOnce])
	checkRefundsWithinCharge(ev, x, invs[riWithinCharge])
	checkLedgerRefundsHaveRows(ev, x, invs[riLedgerRows])
	checkRefundRowsAgree(ev, x, invs[riRowsLedger])
	checkRefundReservations(ev, x, invs[riReserved])
	checkRefundsSettled(ev, x, invs[riSettled])
	checkRefundAnswers(ev, x, invs[riAnswers])
}

// refundIndex is the evidence looked up by what each invariant needs.
type refundIndex struct {
	charges                       map[string]fakeserver.Charge
	ledgerByOrder, ledgerByCharge map[string][]fakeserver.Refund
	pays                          map[payRef]dbRefundedPayment
	rowsByOrder                   map[string][]dbRefund
	rowsByPayment                 map[payRef][]dbRefund
	rowsByKey, rowsByID           map[payRef]dbRefund // rowsByKey: by (merchant, refund key)
	keysByKey, keysByRefund       map[payRef]dbRefundKey
}

func indexRefunds(ev *refundEvidence) refundIndex {
	x := refundIndex{charges: map[string]fakeserver.Charge{}, ledgerByOrder: map[string][]fakeserver.Refund{},
		ledgerByCharge: map[string][]fakeserver.Refund{}, pays: map[payRef]dbRefundedPayment{}, rowsByOrder: map[string][]dbRefund{},
		rowsByPayment: map[payRef][]dbRefund{}, rowsByKey: map[payRef]dbRefund{}, rowsByID: map[payRef]dbRefund{},
		keysByKey: map[payRef]dbRefundKey{}, keysByRefund: map[payRef]dbRefundKey{}}
	for _, ch := range ev.ledger.Charges {
		x.charges[ch.MerchantOrderID] = ch
	}
	for _, lr := range ev.ledger.Refunds {
		x.ledgerByOrder[lr.RefundOrderID] = append(x.ledgerByOrder[lr.RefundOrderID], lr)
		x.ledgerByCharge[lr.MerchantOrderID] = append(x.ledgerByCharge[lr.MerchantOrderID], lr)
	}
	for _, p := range ev.payments {
		x.pays[payRef{p.MerchantID, p.ID}] = p
	}
	for _, rf := range ev.refunds {
		x.rowsByOrder[rf.RefundOrderID] = append(x.rowsByOrder[rf.RefundOrderID], rf)
		x.rowsByPayment[payRef{rf.MerchantID, rf.PaymentID}] = append(x.rowsByPayment[payRef{rf.MerchantID, rf.PaymentID}], rf)
		x.rowsByKey[payRef{rf.MerchantID, rf.IdemKey}] = rf
		x.rowsByID[payRef{rf.MerchantID, rf.ID}] = rf
	}
	for _, k := range ev.keys {
		x.keysByKey[payRef{k.MerchantID, k.IdemKey}] = k
		x.keysByRefund[payRef{k.MerchantID, k.RefundID}] = k
	}
	return x
}

// checkRefundOnce judges at most one PSP refund per refund order id, and the id the one derived from (merchant, payment, key): what makes the PSP deduplicate a refund's retries.
func checkRefundOnce(ev *refundEvidence, x refundIndex, inv *invariant) {
	for _, order := range sortedKeys(x.ledgerByOrder) {
		inv.Checked++
		if lrs := x.ledgerByOrder[order]; len(lrs) > 1 {
			inv.fail("refund order %s was refunded %d times at the PSP (%s, %s)", order, len(lrs), lrs[0].Reference, lrs[1].Reference)
		}
	}
	for _, rf := range ev.refunds {
		inv.Checked++
		if want := payments.RefundOrderID(rf.MerchantID, rf.PaymentID, rf.IdemKey); rf.RefundOrderID != want {
			inv.fail("refund %s has refund order id %s, want %s for its (merchant, payment, key)", rf.ID, rf.RefundOrderID, want)
		}
		if n := len(x.rowsByOrder[rf.RefundOrderID]); n > 1 {
			inv.fail("refund order id %s is shared by %d refund rows", rf.RefundOrderID, n)
		}
	}
}

// checkRefundsWithinCharge judges that the PSP's refunds of a charge never exceed it.
func checkRefundsWithinCharge(ev *refundEvidence, x refundIndex, inv *invariant) {
	for _, order := range sortedKeys(x.ledgerByCharge) {
		inv.Checked++
		lrs := x.ledgerByCharge[order]
		ch, ok := x.charges[order]
		if !ok {
			inv.fail("the PSP refunded %d times against order %s, which it never charged", len(lrs), order)
			continue
		}
		if ch.Status != "succeeded" {
			inv.fail("the PSP refunded order %s, whose charge %s is %s", order, ch.Reference, ch.Status)
		}
		var sum int64
		for _, lr := range lrs {
			sum += lr.Amount
			if lr.Currency != ch.Currency {
				inv.fail("PSP refund %s is in %s, its charge %s in %s", lr.Reference, lr.Currency, ch.Reference, ch.Currency)
			}
		}
		if sum > ch.Amount {
			inv.fail("the PSP refunded %d %s of charge %s (order %s), which was %d %s, in %d refunds",
				sum, ch.Currency, ch.Reference, order, ch.Amount, ch.Currency, len(lrs))
		}
	}
}

// checkLedgerRefundsHaveRows judges that every PSP refund is exactly one row, of the same refund.
func checkLedgerRefundsHaveRows(ev *refundEvidence, x refundIndex, inv *invariant) {
	for _, lr := range ev.ledger.Refunds {
		inv.Checked++
		rows := x.rowsByOrder[lr.RefundOrderID]
		if len(rows) != 1 {
			inv.fail("PSP refund %s (refund order %s, %d %s) has %d refund rows", lr.Reference, lr.RefundOrderID, lr.Amount, lr.Currency, len(rows))
			continue
		}
		rf := rows[0]
		if rf.Amount != lr.Amount || rf.Currency != lr.Currency {
			inv.fail("refund %s is %d %s, the PSP refunded %d %s (%s)", rf.ID, rf.Amount, rf.Currency, lr.Amount, lr.Currency, lr.Reference)
		}
		if p, ok := x.pays[payRef{rf.MerchantID, rf.PaymentID}]; ok && p.MerchantOrderID != lr.MerchantOrderID {
			inv.fail("refund %s is of payment %s (order %s), the PSP refunded order %s", rf.ID, p.ID, p.MerchantOrderID, lr.MerchantOrderID)
		}
		switch rf.Status {
		case string(payments.RefundFailed):
			inv.fail("refund %s is failed (%s), but the PSP refunded it: %s, %d %s", rf.ID, rf.FailureCode.String, lr.Reference, lr.Amount, lr.Currency)
		case string(payments.RefundRequiresReview):
			inv.Notes = appendCapped(inv.Notes, fmt.Sprintf("PSP refund %s has refund %s in requires_review (allowed, needs a person)", lr.Reference, rf.ID))
		}
	}
}

// checkRefundRowsAgree judges that every row's final status agrees with the PSP.
func checkRefundRowsAgree(ev *refundEvidence, x refundIndex, inv *invariant) {
	for _, rf := range ev.refunds {
		inv.Checked++
		lrs := x.ledgerByOrder[rf.RefundOrderID]
		switch rf.Status {
		case string(payments.RefundSucceeded):
			switch {
			case len(lrs) == 0:
				inv.fail("refund %s (%d %s) is succeeded, but the PSP has no refund for order %s", rf.ID, rf.Amount, rf.Currency, rf.RefundOrderID)
			case !rf.PSPReference.Valid || rf.PSPReference.String != lrs[0].Reference:
				inv.fail("refund %s has psp_reference %q, the PSP's refund is %s", rf.ID, rf.PSPReference.String, lrs[0].Reference)
			}
		case string(payments.RefundFailed):
			if len(lrs) > 0 {
				inv.fail("refund %s is failed (%s), the PSP holds refund %s for order %s", rf.ID, rf.FailureCode.String, lrs[0].Reference, rf.RefundOrderID)
			}
			if !rf.FailureCode.Valid || rf.FailureCode.String == "" {
				inv.fail("refund %s is failed without a failure code", rf.ID)
			}
		case string(payments.RefundRequiresReview):
			at := "not at the PSP"
			if len(lrs) > 0 {
				at = "refunded at the PSP as " + lrs[0].Reference
			}
			inv.Notes = appendCapped(inv.Notes, fmt.Sprintf("refund %s is in requires_review, %s: %s", rf.ID, at, rf.ReviewReason.String))
		case string(payments.RefundPending):
			// Judged by the settle invariant.
		default:
			inv.fail("refund %s has unknown status %q", rf.ID, rf.Status)
		}
	}
}

// checkRefundReservations judges that what a payment's refunds hold never exceeds it, and that its sums are its refunds'.
func checkRefundReservations(ev *refundEvidence, x refundIndex, inv *invariant) {
	for _, p := range ev.payments {
		inv.Checked++
		var reserved, refunded int64
		for _, rf := range x.rowsByPayment[payRef{p.MerchantID, p.ID}] {
			switch rf.Status {
			case string(payments.RefundSucceeded):
				refunded += rf.Amount
				reserved += rf.Amount
			case string(payments.RefundPending), string(payments.RefundRequiresReview):
				reserved += rf.Amount
			}
			if rf.Currency != p.Currency {
				inv.fail("refund %s is in %s, its payment %s in %s", rf.ID, rf.Currency, p.ID, p.Currency)
			}
			if p.Status != string(payments.Succeeded) {
				inv.fail("refund %s refunds payment %s, which is %s", rf.ID, p.ID, p.Status)
			}
		}
		switch {
		case reserved > p.Amount:
			inv.fail("payment %s (%d %s): its pending, succeeded and in-review refunds add up to %d", p.ID, p.Amount, p.Currency, reserved)
		case p.AmountReserved != reserved:
			inv.fail("payment %s has amount_reserved %d, its pending, succeeded and in-review refunds add up to %d", p.ID, p.AmountReserved, reserved)
		case p.AmountRefunded != refunded:
			inv.fail("payment %s has amount_refunded %d, its succeeded refunds add up to %d", p.ID, p.AmountRefunded, refunded)
		}
	}
	for _, rf := range ev.refunds {
		if _, ok := x.pays[payRef{rf.MerchantID, rf.PaymentID}]; !ok {
			inv.Checked++
			inv.fail("refund %s refunds payment %s, which merchant %s does not have", rf.ID, rf.PaymentID, rf.MerchantID)
		}
	}
}

// checkRefundsSettled judges that nothing is left unfinished after the drain.
func checkRefundsSettled(ev *refundEvidence, x refundIndex, inv *invariant) {
	if !ev.settled {
		inv.fail("the reconcilers did not finish the refunds within the settle timeout: %d refund keys IN_PROGRESS, %d refunds pending",
			ev.inProgressLeft, ev.pendingLeft)
	}
	review := 0
	for _, k := range ev.keys {
		inv.Checked++
		if k.State != "COMPLETED" {
			inv.fail("refund key %q of merchant %s is %s (refund %s)", k.IdemKey, k.MerchantID, k.State, k.RefundID)
		}
		if _, ok := x.rowsByID[payRef{k.MerchantID, k.RefundID}]; !ok {
			inv.fail("refund key %q of merchant %s names refund %s, which does not exist", k.IdemKey, k.MerchantID, k.RefundID)
		}
	}
	for _, rf := range ev.refunds {
		inv.Checked++
		switch rf.Status {
		case string(payments.RefundPending):
			inv.fail("refund %s (%d %s of payment %s) is still pending", rf.ID, rf.Amount, rf.Currency, rf.PaymentID)
		case string(payments.RefundRequiresReview):
			review++
		}
		if k, ok := x.keysByKey[payRef{rf.MerchantID, rf.IdemKey}]; !ok || k.RefundID != rf.ID {
			inv.fail("refund %s has no idempotency key row of its own", rf.ID)
		}
	}
	if review > 0 {
		inv.Notes = append(inv.Notes, fmt.Sprintf("%d refunds in requires_review (allowed; a person decides)", review))
	}
}

// checkRefundAnswers judges what the clients were told: the same answer to every copy of a request, refusals that stored nothing, answers that name their refund.
func checkRefundAnswers(ev *refundEvidence, x refundIndex, inv *invariant) {
	known := map[payRef]bool{}
	for _, rec := range ev.records {
		mid := merchantID(ev.merchants, rec.Merchant)
		known[payRef{mid, rec.Key}] = true
		rec.mu.Lock()
		answers, refused, unexpected, conflicts := rec.Answers, rec.Refused, rec.Unexpected, rec.Conflicts
		// A copy of a burst may have claimed the key after another copy
		// was refused, and then run out of time or attempts.
		unsure := rec.Abandoned || rec.GaveUp
		rec.mu.Unlock()
		inv.Checked++
		for _, a := range answers[min(1, len(answers)):] {
			if a.Status != answers[0].Status || !bytes.Equal(a.Body, answers[0].Body) {
				if answers[0].Status == http.StatusAccepted && sameRefund(a.Body, answers[0].Body) {
					continue // in review then settled: the answer follows the refund
				}
				inv.fail("two clients of refund key (merchant %d, key %q) were told different things: %d %s / %d %s",
					rec.Merchant, rec.Key, answers[0].Status, answers[0].Body, a.Status, a.Body)
				break
			}
		}
		for _, a := range unexpected {
			inv.fail("a correct refund of (merchant %d, key %q, payment %s) got %d %s: %s", rec.Merchant, rec.Key, rec.PaymentID, a.Status, a.Type, a.Body)
		}
		for _, a := range conflicts {
			inv.Checked++
			if a.Status != http.StatusUnprocessableEntity || a.Type != "idempotency-key-mismatch" {
				inv.fail("another body for refund key (merchant %d, key %q) got %d %s, want 422 idempotency-key-mismatch", rec.Merchant, rec.Key, a.Status, a.Body)
			}
		}
		row, hasRow := x.rowsByKey[payRef{mid, rec.Key}]
		_, hasKey := x.keysByKey[payRef{mid, rec.Key}]
		if rec.WantRefused {
			for _, a := range append(answers, refused...) {
				if a.Status != http.StatusConflict || a.Type != "payment-not-refundable" {
					inv.fail("a refund of declined payment %s (merchant %d, key %q) got %d %s, want 409 payment-not-refundable", rec.PaymentID, rec.Merchant, rec.Key, a.Status, a.Body)
				}
			}
		}
		if len(refused) > 0 && len(answers) == 0 && !unsure && (hasRow || hasKey) {
			inv.fail("refund key (merchant %d, key %q) was refused with %d %s, yet left a refund row (%v) or a key (%v) behind",
				rec.Merchant, rec.Key, refused[0].Status, refused[0].Type, hasRow, hasKey)
		}
		if len(answers) == 0 {
			continue
		}
		var v payments.RefundView
		switch {
		case !hasRow:
			inv.fail("refund key (merchant %d, key %q) was answered %d, but has no refund row", rec.Merchant, rec.Key, answers[0].Status)
		case json.Unmarshal(answers[0].Body, &v) != nil:
			inv.fail("refund key (merchant %d, key %q) was answered %d with no refund: %s", rec.Merchant, rec.Key, answers[0].Status, answers[0].Body)
		case v.ID != row.ID || v.PaymentID != rec.PaymentID || v.RefundOrderID != row.RefundOrderID:
			inv.fail("refund key (merchant %d, key %q) was answered with refund %s of payment %s (order %s), its row is %s of %s (order %s)",
				rec.Merchant, rec.Key, v.ID, v.PaymentID, v.RefundOrderID, row.ID, row.PaymentID, row.RefundOrderID)
		case rec.Amount > 0 && v.Amount != rec.Amount:
			inv.fail("refund key (merchant %d, key %q) asked for %d, was answered %d", rec.Merchant, rec.Key, rec.Amount, v.Amount)
		}
	}
	for _, rf := range ev.refunds {
		inv.Checked++
		byKey := strings.HasPrefix(rf.IdemKey, "cbk_") && ev.canceled[payRef{rf.MerchantID, rf.PaymentID}] // invariant 26 judges it
		if !known[payRef{rf.MerchantID, rf.IdemKey}] && !byKey {
			inv.fail("refund %s (merchant %s, key %q) matches no refund a client asked for", rf.ID, rf.MerchantID, rf.IdemKey)
		}
	}
}

func merchantID(ids []string, i int) string {
	if i >= 0 && i < len(ids) {
		return ids[i]
	}
	return fmt.Sprintf("unknown merchant %d", i)
}

// sameRefund: both bodies are the same refund.
func sameRefund(a, b []byte) bool {
	var x, y payments.RefundView
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && x.ID != "" && x.ID == y.ID
}

// check judges the refund invariants once the payments' checks are done:
// it replays refund keys and reads refunds over HTTP, so the replicas must
// be up and the faults off.
func (rl *refundLoad) check(ctx context.Context, c *checker, settled bool, inProgress, pending int) ([]*invariant, *refundEvidence, error) {
	ledger, err := c.fetchLedger(ctx)
	if err != nil {
		return nil, nil, err
	}
	rl.mu.Lock()
	records := append([]*refundRecord(nil), rl.order...)
	rl.mu.Unlock()
	ev, err := loadRefundEvidence(ctx, c.e.db, ledger, c.e.merchants, records)
	if err != nil {
		return nil, nil, err
	}
	ev.settled, ev.inProgressLeft, ev.pendingLeft = settled, inProgress, pending
	invs := newRefundInvariants()
	checkRefundState(ev, invs)
	if err := rl.checkReplays(ctx, c, ev, invs[riAnswers]); err != nil {
		return nil, nil, err
	}
	if err := checkRefundReads(ctx, c, ev, invs[riMerchants]); err != nil {
		return nil, nil, err
	}
	return invs, ev, nil
}

// checkReplays posts every refund key that has a row again with its body:
// the answer must be a replay of what is stored, what the clients were
// told (unless that was a 202: a refund in review is settled later), and
// must refund nothing.
func (rl *refundLoad) checkReplays(ctx context.Context, c *checker, ev *refundEvidence, inv *invariant) error {
	rows := map[payRef]dbRefund{}
	for _, rf := range ev.refunds {
		rows[payRef{rf.MerchantID, rf.IdemKey}] = rf
	}
	keys := map[payRef]dbRefundKey{}
	for _, k := range ev.keys {
		keys[payRef{k.MerchantID, k.IdemKey}] = k
	}
	type job struct {
		rec *refundRecord
		row dbRefund
	}
	var jobs []job
	for _, rec := range ev.records {
		if row, ok := rows[payRef{merchantID(ev.merchants, rec.Merchant), rec.Key}]; ok {
			jobs = append(jobs, job{rec, row})
		}
	}
	var mu sync.Mutex
	var firstErr error
	work := make(chan job)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(rand.Uint64(), 0))
			for j := range work {
				a, err := rl.replay(ctx, c, r, j.rec)
				stored := keys[payRef{j.row.MerchantID, j.row.IdemKey}].ResponseBody
				if err == nil && !bytes.Equal(a.Body, stored) {
					// A refund in review may have been settled since the
					// evidence was read: compare with what is stored now.
					var now []byte
					if gerr := c.e.db.GetContext(ctx, &now, `SELECT response_body FROM idempotency_keys WHERE merchant_id = ? AND endpoint = ? AND idem_key = ?`,
						j.row.MerchantID, payments.EndpointCreateRefund, j.row.IdemKey); gerr == nil {
						stored = now
					}
				}
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				if err == nil {
					judgeRefundReplay(inv, j.rec, j.row, stored, a)
				}
				mu.Unlock()
			}
		})
	}
	for _, j := range jobs {
		work <- j
	}
	close(work)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	after, err := c.fetchLedger(ctx)
	if err != nil {
		return err
	}
	if len(after.Refunds) != len(ev.ledger.Refunds) {
		inv.fail("replaying refund keys made %d new PSP refunds", len(after.Refunds)-len(ev.ledger.Refunds))
	}
	return nil
}

func (rl *refundLoad) replay(ctx context.Context, c *checker, r *rand.Rand, rec *refundRecord) (answer, error) {
	m := c.e.merchants[rec.Merchant]
	var last error
	for attempt := 1; attempt <= 10; attempt++ {
		base := c.e.replicas[r.IntN(len(c.e.replicas))].url()
		a, err := postKeyed(ctx, c.http, refundURL(base, rec.PaymentID), m.APIKey, rec.Key, rec.Body, 10*time.Second)
		if err == nil && !retryable(a) {
			return a, nil
		}
		last = err
		if err == nil {
			last = fmt.Errorf("%d %s", a.Status, a.Body)
		}
		if !sleepCtx(ctx, 200*time.Millisecond) {
			break
		}
	}
	return answer{}, fmt.Errorf("replay of refund key (merchant %d, key %q): %v", rec.Merchant, rec.Key, last)
}

func judgeRefundReplay(inv *invariant, rec *refundRecord, row dbRefund, stored []byte, a answer) {
	inv.Checked++
	if !final(a.Status) || !a.Replayed {
		inv.fail("replay of refund key (merchant %d, key %q) answered %d (Idempotent-Replayed %v): %s", rec.Merchant, rec.Key, a.Status, a.Replayed, a.Body)
		return
	}
	if !bytes.Equal(a.Body, stored) {
		inv.fail("replay of refund key (merchant %d, key %q) differs from the stored answer: %s / %s", rec.Merchant, rec.Key, a.Body, stored)
	}
	rec.mu.Lock()
	var first *answer
	if len(rec.Answers) > 0 {
		first = &rec.Answers[0]
	}
	rec.mu.Unlock()
	if first != nil && first.Status != http.StatusAccepted && (a.Status != first.Status || !bytes.Equal(a.Body, first.Body)) {
		inv.fail("refund key (merchant %d, key %q): the client was told %d %s, a replay now says %d %s",
			rec.Merchant, rec.Key, first.Status, first.Body, a.Status, a.Body)
	}
	var v payments.RefundView
	if err := json.Unmarshal(a.Body, &v); err != nil || v.ID != row.ID || v.Amount != row.Amount || v.Currency != row.Currency {
		inv.fail("replay of refund key (merchant %d, key %q) is not its refund %s (%d %s): %s", rec.Merchant, rec.Key, row.ID, row.Amount, row.Currency, a.Body)
	}
}

// checkRefundReads: a sample of refunds, each read by its merchant and by
// another, directly and in the payment's listing.
func checkRefundReads(ctx context.Context, c *checker, ev *refundEvidence, inv *invariant) error {
	if len(c.e.merchants) < 2 {
		return nil
	}
	idx := map[string]int{}
	for i, id := range ev.merchants {
		idx[id] = i
	}
	sample := append([]dbRefund(nil), ev.refunds...)
	sort.Slice(sample, func(i, j int) bool { return sample[i].ID < sample[j].ID })
	rand.New(rand.NewPCG(c.e.opts.seed, 11)).Shuffle(len(sample), func(i, j int) { sample[i], sample[j] = sample[j], sample[i] })
	sample = sample[:min(len(sample), 150)]
	for n, rf := range sample {
		own, ok := idx[rf.MerchantID]
		if !ok {
			inv.fail("refund %s belongs to merchant %s, which this run never created", rf.ID, rf.MerchantID)
			continue
		}
		other := (own + 1 + n%(len(c.e.merchants)-1)) % len(c.e.merchants)
		base := c.e.replicas[n%len(c.e.replicas)].url()
		status, body, err := c.get(ctx, base+"/refunds/"+url.PathEscape(rf.ID), c.e.merchants[own].APIKey)
		if err != nil {
			return err
		}
		inv.Checked++
		var v payments.RefundView
		if status != http.StatusOK || json.Unmarshal(body, &v) != nil || v.ID != rf.ID || string(v.Status) != rf.Status {
			inv.fail("merchant %d reading its own refund %s (%s) got %d %s", own, rf.ID, rf.Status, status, body)
		}
		for _, path := range []string{"/refunds/" + url.PathEscape(rf.ID), "/payments/" + url.PathEscape(rf.PaymentID) + "/refunds"} {
			status, body, err = c.get(ctx, base+path, c.e.merchants[other].APIKey)
			if err != nil {
				return err
			}
			inv.Checked++
			if status != http.StatusNotFound {
				inv.fail("merchant %d reading merchant %d's %s got %d %s", other, own, path, status, body)
			}
		}
	}
	return nil
}
