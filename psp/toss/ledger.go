package toss

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"time"

	"gateway/psp"
	"gateway/psp/roundtrip"
)

// kst is Korea Standard Time (Asia/Seoul), in which Toss reads startDate
// and endDate: +09:00 all year, Korea has kept no daylight saving time since
// 1988, so a fixed zone needs no time zone database.
var kst = time.FixedZone("KST", 9*60*60)

const (
	// tossDateTime is how the adapter writes startDate and endDate: a
	// Korean local date-time to the millisecond, as Toss's samples do.
	tossDateTime = "2006-01-02T15:04:05.000"
	// defaultListPage is Toss's own default limit.
	defaultListPage = 100
	// maxListPage is the most lines the adapter asks for. Toss gives up to
	// 5,000, but 5,000 of its lines (about half a kilobyte each, the
	// receipt URL included) would not fit roundtrip.MaxAnswer.
	maxListPage = 1000
)

// transactionKeyPattern is what a transactionKey (at most 64 characters)
// looks like; a cursor that is not one was not made by this adapter.
var transactionKeyPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// transaction is the part of Toss's Transaction object the adapter reads.
type transaction struct {
	TransactionKey string      `json:"transactionKey"`
	PaymentKey     string      `json:"paymentKey"`
	OrderID        string      `json:"orderId"`
	Status         string      `json:"status"`
	TransactionAt  string      `json:"transactionAt"`
	Currency       string      `json:"currency"`
	Amount         json.Number `json:"amount"`
}

// ListTransactions implements psp.Ledger with Toss's transactions listing,
// GET /v1/transactions?startDate=&endDate=&startingAfter=&limit=
// (https://docs.tosspayments.com/reference#거래-조회): one transaction per
// approval, virtual account issued or deposited, and cancel, in the order of
// their times, paged by startingAfter, the last transactionKey of the page
// before, which is the cursor. A page of fewer lines than asked for is the
// last. Toss may take up to 60 seconds to answer a listing: the caller's
// deadline should allow it.
//
// Toss reads startDate and endDate as Korean date-times (KST, +09:00), both
// inclusive, and writes transactionAt to the second (its samples) or the
// millisecond. The adapter asks for [q.From cut to the millisecond, q.To
// raised to the second less a millisecond], in KST: every line whose
// transactionAt, at either precision, may fall in [q.From, q.To); it keeps
// the lines whose transactionAt does. A line is so in exactly one of two
// adjacent periods, 23:59:59.999 KST in the day that ends at midnight.
//
// Lines become psp.Transactions so:
//   - DONE (an approval, or a virtual account's deposit) is a charge that
//     succeeded, its Reference the paymentKey. It stands so even once
//     cancelled: its cancels are refunds, as in Lookup.
//   - CANCELED and PARTIAL_CANCELED (a cancel) are a refund that
//     succeeded, of the line's amount (whatever its sign), its Reference
//     the cancel's transactionKey (the refund's reference, as Refund
//     answers it) and ChargeReference the paymentKey. The listing does not
//     carry cancelReason, where the adapter writes the refund order id, so
//     RefundOrderID is empty.
//   - ABORTED and EXPIRED are a declined charge.
//   - WAITING_FOR_DEPOSIT (a virtual account issued, amount 0) is left
//     out: it says nothing of the charge as it stands, and its deposit is
//     a DONE line of its own. So are READY and IN_PROGRESS (never
//     confirmed, as Lookup reads them), and a cancel or refusal of amount 0,
//     which moved no money (a virtual account cancelled before its
//     deposit).
//
// Toss keeps no merchant id for the gateway (its confirm takes no
// metadata): MerchantID is empty. An empty period or a cursor that is not a
// transactionKey is Rejected without asking; a page Toss refuses is
// NotProcessed (429, authentication) or Unknown; a page that does not read,
// a line of a status the adapter does not know, in a currency other than
// KRW or of an amount that is not whole won is Unknown.
func (a *Adapter) ListTransactions(ctx context.Context, q psp.LedgerQuery) (psp.LedgerPage, error) {
	const op = "list"
	switch {
	case !q.From.Before(q.To):
		return psp.LedgerPage{}, &psp.Error{Class: psp.Rejected, Op: op,
			Err: fmt.Errorf("the period [%s, %s) is empty", q.From.Format(time.RFC3339Nano), q.To.Format(time.RFC3339Nano))}
	case q.Cursor != "" && !transactionKeyPattern.MatchString(q.Cursor):
		return psp.LedgerPage{}, &psp.Error{Class: psp.Rejected, Op: op, Err: fmt.Errorf("cursor %q is not a Toss transactionKey", q.Cursor)}
	}
	limit := q.Limit
	if limit <= 0 {
		limit = defaultListPage
	}
	limit = min(limit, maxListPage)
	start, end := tossPeriod(q.From, q.To)
	v := url.Values{"startDate": {start}, "endDate": {end}, "limit": {strconv.Itoa(limit)}}
	if q.Cursor != "" {
		v.Set("startingAfter", q.Cursor)
	}
	ans, err := a.rt.Do(ctx, roundtrip.Request{Op: op, Method: http.MethodGet, Path: "/v1/transactions?" + v.Encode()})
	if err != nil {
		return psp.LedgerPage{}, err
	}
	if ans.Status != http.StatusOK {
		e, ok := parseError(ans)
		if !ok {
			return psp.LedgerPage{}, roundtrip.Unreadable(op, ans)
		}
		return psp.LedgerPage{}, unanswered(op, ans.Status, e)
	}
	var txs []transaction
	if err := json.Unmarshal(ans.Body, &txs); err != nil || txs == nil {
		return psp.LedgerPage{}, roundtrip.Unreadable(op, ans)
	}
	var page psp.LedgerPage
	for _, tx := range txs {
		t, listed, err := toTransaction(tx)
		if err != nil {
			return psp.LedgerPage{}, &psp.Error{Class: psp.Unknown, Op: op, Err: fmt.Errorf("transaction %q: %w", tx.TransactionKey, err)}
		}
		if listed && !t.CreatedAt.Before(q.From) && t.CreatedAt.Before(q.To) {
			page.Transactions = append(page.Transactions, t)
		}
	}
	if len(txs) >= limit {
		page.Next = txs[len(txs)-1].TransactionKey
	}
	return page, nil
}

// tossPeriod is the inclusive startDate and endDate, in KST, that hold
// every line whose transactionAt, to the second or the millisecond, is in
// [from, to).
func tossPeriod(from, to time.Time) (start, end string) {
	last := to.Truncate(time.Second)
	if last.Before(to) {
		last = last.Add(time.Second)
	}
	last = last.Add(-time.Millisecond)
	return from.Truncate(time.Millisecond).In(kst).Format(tossDateTime), last.In(kst).Format(tossDateTime)
}

// toTransaction reads one line of the listing; listed is false for a line
// left out (see ListTransactions).
func toTransaction(tx transaction) (t psp.Transaction, listed bool, err error) {
	if tx.TransactionKey == "" || tx.PaymentKey == "" || tx.Status == "" {
		return psp.Transaction{}, false, fmt.Errorf("a transaction needs its transactionKey, paymentKey and status")
	}
	at, err := transactionTime(tx.TransactionAt)
	if err != nil {
		return psp.Transaction{}, false, err
	}
	if tx.Currency != currency {
		return psp.Transaction{}, false, fmt.Errorf("%w: a transaction in %q; the adapter counts %s only", psp.ErrMismatch, tx.Currency, currency)
	}
	amount, err := whole(tx.Amount)
	if err != nil {
		return psp.Transaction{}, false, err
	}
	t = psp.Transaction{Kind: psp.TransactionCharge, MerchantOrderID: tx.OrderID, Reference: tx.PaymentKey,
		Currency: tx.Currency, CreatedAt: at}
	switch tx.Status {
	case "DONE":
		t.Status = string(psp.Succeeded)
	case "CANCELED", "PARTIAL_CANCELED":
		t.Kind, t.Status = psp.TransactionRefund, string(psp.RefundSucceeded)
		t.Reference, t.ChargeReference = tx.TransactionKey, tx.PaymentKey
		amount = max(amount, -amount) // money back, whichever sign it is written with
	case "ABORTED", "EXPIRED":
		t.Status = string(psp.Declined)
	case "WAITING_FOR_DEPOSIT", "READY", "IN_PROGRESS":
		return psp.Transaction{}, false, nil
	default:
		return psp.Transaction{}, false, fmt.Errorf("toss transaction status %q", tx.Status)
	}
	switch {
	case amount < 0:
		return psp.Transaction{}, false, fmt.Errorf("%s transaction of %d won", tx.Status, amount)
	case amount == 0 && tx.Status != "DONE":
		return psp.Transaction{}, false, nil // moved no money
	}
	t.Amount = amount
	if tx.Status == "DONE" {
		t.AmountCaptured = amount
	}
	return t, true, nil
}

// transactionTime reads transactionAt: ISO 8601 with its offset, as Toss
// writes it, or a Korean date-time without one.
func transactionTime(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t.UTC(), nil
	}
	if t, err := time.ParseInLocation("2006-01-02T15:04:05.999999999", s, kst); err == nil {
		return t.UTC(), nil
	}
	return time.Time{}, fmt.Errorf("transactionAt %q is not an ISO 8601 date-time", s)
}
