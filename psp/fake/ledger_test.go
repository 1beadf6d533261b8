package fake_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"gateway/psp"
	"gateway/psp/fake"
)

func listAll(t *testing.T, p *fake.PSP, q psp.LedgerQuery) []psp.Transaction {
	t.Helper()
	var out []psp.Transaction
	for {
		page, err := p.ListTransactions(context.Background(), q)
		if err != nil {
			t.Fatalf("ListTransactions: %v", err)
		}
		if len(page.Transactions) > q.Limit && q.Limit > 0 {
			t.Fatalf("a page of %d lines, limit %d", len(page.Transactions), q.Limit)
		}
		out = append(out, page.Transactions...)
		if page.Next == "" {
			return out
		}
		q.Cursor = page.Next
	}
}

func TestLedgerListsChargesAndRefundsOfAPeriodOnce(t *testing.T) {
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	p := fake.New(fake.WithClock(clock))
	ctx := context.Background()
	c, err := p.Charge(ctx, psp.ChargeRequest{MerchantOrderID: "ord_1", MerchantID: "mer_1", Amount: 1000, Currency: "KRW", PaymentMethod: fake.MethodOK})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Charge(ctx, psp.ChargeRequest{MerchantOrderID: "ord_2", Amount: 500, Currency: "KRW", PaymentMethod: fake.MethodDeclined}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Refund(ctx, psp.RefundRequest{RefundOrderID: "rfd_1", MerchantOrderID: "ord_1", ChargeReference: c.Reference, Amount: 300, Currency: "KRW"}); err != nil {
		t.Fatal(err)
	}
	p.PlantCharge("ord_before", "", 100, "KRW", now.Add(-time.Hour))
	p.PlantCharge("ord_at_end", "", 100, "KRW", now.Add(time.Hour))

	q := psp.LedgerQuery{From: now.Add(-time.Minute), To: now.Add(time.Hour), Limit: 1}
	lines := listAll(t, p, q)
	if len(lines) != 3 {
		t.Fatalf("%d lines, want the 2 charges and the refund of [from, to): %+v", len(lines), lines)
	}
	if l := lines[0]; l.Kind != psp.TransactionCharge || l.MerchantOrderID != "ord_1" || l.Status != string(psp.Succeeded) ||
		l.AmountCaptured != 1000 || l.MerchantID != "mer_1" || !l.CreatedAt.Equal(now) {
		t.Fatalf("charge line %+v", l)
	}
	if l := lines[2]; l.Kind != psp.TransactionRefund || l.RefundOrderID != "rfd_1" || l.ChargeReference != c.Reference || l.Amount != 300 {
		t.Fatalf("refund line %+v", l)
	}
	if lines[1].MovedMoney() || !lines[0].MovedMoney() || !lines[2].MovedMoney() {
		t.Fatal("MovedMoney: a declined charge moved none, a succeeded charge and refund did")
	}

	if !p.Drop("ord_1") {
		t.Fatal("Drop found nothing")
	}
	if _, err := p.Lookup(ctx, "ord_1"); !errors.Is(err, psp.ErrNotFound) {
		t.Fatalf("lookup of a dropped charge: %v", err)
	}
	if n := len(listAll(t, p, q)); n != 2 {
		t.Fatalf("%d lines after the drop, want 2", n)
	}
}

func TestLedgerRefusesWhatCanListNothing(t *testing.T) {
	p := fake.New()
	now := time.Now()
	for _, q := range []psp.LedgerQuery{{From: now, To: now}, {From: now, To: now.Add(time.Hour), Cursor: "x"}} {
		var e *psp.Error
		if _, err := p.ListTransactions(context.Background(), q); !errors.As(err, &e) || e.Class != psp.Rejected {
			t.Errorf("%+v: %v, want Rejected", q, err)
		}
	}
	p.FailNextListings(1)
	var e *psp.Error
	if _, err := p.ListTransactions(context.Background(), psp.LedgerQuery{From: now, To: now.Add(time.Hour)}); !errors.As(err, &e) || e.Class != psp.NotProcessed {
		t.Fatalf("an injected failure: %v, want NotProcessed", err)
	}
	if _, err := p.ListTransactions(context.Background(), psp.LedgerQuery{From: now, To: now.Add(time.Hour)}); err != nil {
		t.Fatalf("after the failure: %v", err)
	}
}

func TestResetEmptiesTheLedger(t *testing.T) {
	p := fake.New()
	now := time.Now()
	p.PlantCharge("ord_1", "", 100, "KRW", now)
	p.FailNextListings(1)
	p.Reset()
	page, err := p.ListTransactions(context.Background(), psp.LedgerQuery{From: now.Add(-time.Hour), To: now.Add(time.Hour)})
	if err != nil || len(page.Transactions) != 0 {
		t.Fatalf("after Reset: %d lines, %v; want an empty ledger that answers", len(page.Transactions), err)
	}
}
