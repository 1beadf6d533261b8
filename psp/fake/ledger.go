package fake

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"gateway/psp"
)

// The fake's ledger (psp.Ledger) lists every charge and refund it made, in
// the order it made them, each with the time of the fake's clock then; a
// charge shows as it stands now (captured, voided, lapsed). A listing's
// cursor is a position in that order, so a line added while a listing pages
// appears on a later page. PlantCharge and PlantRefund add lines the gateway
// never asked for (made in the PSP's dashboard, or charged for a write the
// gateway lost); Drop takes one away, as a PSP that lost it would.

// Listing page sizes: the default and the most a page holds.
const (
	DefaultLedgerPage = 100
	MaxLedgerPage     = 5000
)

// ledgerLine is one line of the ledger: records[i] or refunds[i].
type ledgerLine struct {
	refund  bool
	i       int
	at      time.Time
	dropped bool
}

// record adds r, a new charge, to the records and the ledger. The caller
// holds mu.
func (p *PSP) record(r record) {
	p.byOrder[r.c.MerchantOrderID] = len(p.records)
	p.ledger = append(p.ledger, ledgerLine{i: len(p.records), at: p.now().UTC()})
	p.records = append(p.records, r)
}

// recordRefund adds r, a refund made, to the refunds and the ledger. The
// caller holds mu.
func (p *PSP) recordRefund(r psp.Refund) {
	if r.RefundOrderID != "" {
		p.byRefund[r.RefundOrderID] = len(p.refunds)
	}
	p.ledger = append(p.ledger, ledgerLine{refund: true, i: len(p.refunds), at: p.now().UTC()})
	p.refunds = append(p.refunds, r)
}

// ListTransactions implements psp.Ledger.
func (p *PSP) ListTransactions(ctx context.Context, q psp.LedgerQuery) (psp.LedgerPage, error) {
	if err := ctx.Err(); err != nil {
		return psp.LedgerPage{}, &psp.Error{Class: psp.NotProcessed, Op: "list", Err: err}
	}
	if !q.From.Before(q.To) {
		return psp.LedgerPage{}, rejected("list", fmt.Errorf("%w: the period [%s, %s) is empty", ErrInvalidRequest, q.From, q.To))
	}
	pos := 0
	if q.Cursor != "" {
		n, err := strconv.Atoi(q.Cursor)
		if err != nil || n < 0 {
			return psp.LedgerPage{}, rejected("list", fmt.Errorf("%w: cursor %q is not one of this ledger's", ErrInvalidRequest, q.Cursor))
		}
		pos = n
	}
	limit := q.Limit
	if limit <= 0 {
		limit = DefaultLedgerPage
	}
	limit = min(limit, MaxLedgerPage)

	p.mu.Lock()
	latency := p.latency
	if p.ledgerFault > 0 {
		p.ledgerFault--
		p.mu.Unlock()
		return psp.LedgerPage{}, &psp.Error{Class: psp.NotProcessed, Op: "list", Err: errors.New("fake: injected listing failure")}
	}
	var page psp.LedgerPage
	for ; pos < len(p.ledger) && len(page.Transactions) < limit; pos++ {
		l := p.ledger[pos]
		if l.dropped || l.at.Before(q.From) || !l.at.Before(q.To) {
			continue
		}
		page.Transactions = append(page.Transactions, p.line(l))
	}
	if pos < len(p.ledger) {
		page.Next = strconv.Itoa(pos)
	}
	p.mu.Unlock()
	if err := wait(ctx, latency); err != nil {
		return psp.LedgerPage{}, &psp.Error{Class: psp.NotProcessed, Op: "list", Err: err}
	}
	return page, nil
}

// line renders l as the ledger shows it now. The caller holds mu.
func (p *PSP) line(l ledgerLine) psp.Transaction {
	if l.refund {
		r := p.refunds[l.i]
		t := psp.Transaction{Kind: psp.TransactionRefund, MerchantOrderID: r.MerchantOrderID, RefundOrderID: r.RefundOrderID,
			Reference: r.Reference, Status: string(r.Status), Amount: r.Amount, Currency: r.Currency, CreatedAt: l.at}
		if i, ok := p.byOrder[r.MerchantOrderID]; ok {
			t.ChargeReference = p.records[i].c.Reference
		}
		return t
	}
	r := p.current(l.i)
	return psp.Transaction{Kind: psp.TransactionCharge, MerchantOrderID: r.c.MerchantOrderID, Reference: r.c.Reference,
		Status: string(r.c.Status), Amount: r.c.Amount, AmountCaptured: r.c.AmountCaptured, Currency: r.c.Currency,
		MerchantID: r.merchantID, CreatedAt: l.at}
}

// PlantCharge records a succeeded charge the gateway never asked for, made
// at the time at (in the PSP's dashboard, or for a payment whose row the
// gateway lost), for merchantID (empty when the PSP was not told). Lookups
// find it by orderID unless it is empty. It returns the charge.
func (p *PSP) PlantCharge(orderID, merchantID string, amount int64, currency string, at time.Time) psp.Charge {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq++
	r := record{merchantID: merchantID, c: psp.Charge{MerchantOrderID: orderID, Reference: fmt.Sprintf("fake_ch_%d", p.seq),
		Status: psp.Succeeded, Amount: amount, AmountCaptured: amount, Currency: currency}}
	i := len(p.records)
	p.record(r)
	p.ledger[len(p.ledger)-1].at = at.UTC()
	if orderID == "" {
		delete(p.byOrder, "")
	}
	return p.records[i].view()
}

// PlantRefund records a succeeded refund of amount of the charge for
// orderID that the gateway never asked for (made in the PSP's dashboard),
// at the time at, with refundOrderID (empty for a dashboard refund). It
// fails when the fake has no such charge.
func (p *PSP) PlantRefund(orderID, refundOrderID string, amount int64, at time.Time) (psp.Refund, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i, ok := p.byOrder[orderID]
	if !ok {
		return psp.Refund{}, fmt.Errorf("fake: no charge for order %q", orderID)
	}
	p.seq++
	c := p.records[i].c
	r := psp.Refund{RefundOrderID: refundOrderID, MerchantOrderID: orderID, Reference: fmt.Sprintf("fake_re_%d", p.seq),
		Status: psp.RefundSucceeded, Amount: amount, Currency: c.Currency}
	p.recordRefund(r)
	p.ledger[len(p.ledger)-1].at = at.UTC()
	return r, nil
}

// Drop makes the charge for orderID vanish from the ledger and from
// lookups, as at a PSP that lost it; it reports whether there was one.
func (p *PSP) Drop(orderID string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	i, ok := p.byOrder[orderID]
	if !ok {
		return false
	}
	delete(p.byOrder, orderID)
	for j := range p.ledger {
		if l := &p.ledger[j]; !l.refund && l.i == i {
			l.dropped = true
		}
	}
	return true
}

// FailNextListings makes the next n ListTransactions calls fail
// NotProcessed, as a PSP's listing that is down.
func (p *PSP) FailNextListings(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ledgerFault += n
}
