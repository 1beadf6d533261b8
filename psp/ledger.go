package psp

import (
	"context"
	"time"
)

// Ledger is an adapter that lists what its PSP recorded over a period: the
// PSP's own transaction list, which the books job (design §17) compares with
// the gateway's records. An adapter that cannot list does not implement it,
// and the books job says so.
//
// ListTransactions returns one page of the transactions created in
// [q.From, q.To), in the PSP's listing order, and the cursor of the next
// page ("" after the last). Every transaction appears on exactly one page of
// a listing, and one the PSP records while a listing pages, inside the
// period, appears on a later page. A failure reports the outcome classes
// as a lookup does: a listing changes nothing, so any error may be retried
// from the same cursor.
type Ledger interface {
	ListTransactions(ctx context.Context, q LedgerQuery) (LedgerPage, error)
}

// LedgerQuery asks for one page of a period's transactions. From and To are
// instants (the adapter converts them to its PSP's time zone).
type LedgerQuery struct {
	From, To time.Time
	// Cursor is "" for the first page, else a LedgerPage.Next.
	Cursor string
	// Limit is the most transactions wanted on the page; 0 lets the
	// adapter choose. An adapter may return fewer.
	Limit int
}

// LedgerPage is one page of a listing.
type LedgerPage struct {
	Transactions []Transaction
	// Next is the cursor of the next page; "" when this page is the last.
	Next string
}

// TransactionKind says what a ledger line is.
type TransactionKind string

const (
	// TransactionCharge is a charge as it stands now: its Status and, for
	// one captured in part, AmountCaptured (captures and voids show here).
	TransactionCharge TransactionKind = "charge"
	// TransactionRefund is a refund of a charge.
	TransactionRefund TransactionKind = "refund"
)

// Transaction is one line of a PSP's ledger. Amounts are in minor units of
// Currency (ISO 4217), as the gateway counts them.
type Transaction struct {
	Kind TransactionKind
	// MerchantOrderID is the charge's order id (for a refund, its charge's);
	// empty for a charge made without one (in the PSP's dashboard, say).
	MerchantOrderID string
	// RefundOrderID is a refund's own order id; empty for a charge, and
	// for a refund made in the PSP's dashboard.
	RefundOrderID string
	// Reference is the PSP's id of the charge or refund; ChargeReference a
	// refund's charge's.
	Reference       string
	ChargeReference string
	// Status is a charge's ChargeStatus or a refund's RefundStatus.
	Status         string
	Amount         int64
	AmountCaptured int64
	Currency       string
	// MerchantID is the gateway's merchant the charge was made for, where
	// the PSP keeps it (the adapter sends it with the charge); empty when
	// it does not.
	MerchantID string
	// CreatedAt is when the PSP created it, in UTC.
	CreatedAt time.Time
}

// MovedMoney reports whether t holds or moved a customer's money: a charge
// that succeeded, is authorized or may still be (pending), or a refund that
// succeeded or is pending. A declined or voided line moved none.
func (t Transaction) MovedMoney() bool {
	switch t.Kind {
	case TransactionCharge:
		switch ChargeStatus(t.Status) {
		case Succeeded, Authorized, Pending:
			return true
		}
	case TransactionRefund:
		switch RefundStatus(t.Status) {
		case RefundSucceeded, RefundPending:
			return true
		}
	}
	return false
}

// LedgerOf returns a's listing, looking through wrappers that name the
// adapter they wrap (an Unwrap() Adapter method, as the metrics' has), and
// false when the adapter cannot list.
func LedgerOf(a Adapter) (Ledger, bool) {
	for a != nil {
		if l, ok := a.(Ledger); ok {
			return l, true
		}
		u, ok := a.(interface{ Unwrap() Adapter })
		if !ok {
			return nil, false
		}
		a = u.Unwrap()
	}
	return nil, false
}
