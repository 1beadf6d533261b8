package stripe

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	sdk "github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/form"

	"gateway/psp"
)

// Listing page sizes: Stripe's largest page, and the lines a page holds
// unless asked otherwise.
const (
	maxListLimit      = 100
	defaultLedgerPage = 100
)

// ListTransactions implements psp.Ledger with two of Stripe's lists, read
// side by side: PaymentIntents (GET /v1/payment_intents) are the charges,
// as they stand now, and Refunds (GET /v1/refunds, their PaymentIntent
// expanded) the refunds, both filtered by created[gte] and created[lt].
// Every page asks each list for half of q.Limit (100 lines unless set, at
// least one line of each list, at most 100 of each), so a page holds up to
// max(q.Limit, 2) lines, PaymentIntents first. The cursor (opaque, a few
// hundred bytes) holds where each list stands.
//
// Stripe's created is a whole second, so a line is in the period of its
// second: one created S (the instant S.000) is in [q.From, q.To) when
// q.From ≤ S < q.To. The adapter asks for created[gte] = ⌈q.From⌉ and
// created[lt] = ⌈q.To⌉, in Unix seconds, and a line's CreatedAt is S. Two
// adjacent periods so split their lines exactly even where their boundary
// falls inside a second: a PaymentIntent created at 12:00:00.7 has created
// 12:00:00, and is the period's before a boundary at 12:00:00.5; a period
// that holds no whole second's start lists nothing.
//
// Stripe lists newest first and pages to older objects (starting_after),
// so an object created while a listing pages would come before its first
// page. Each list is therefore read down from its newest object, then up
// again (ending_before) from that first object to whatever is newer, and
// the listing ends at the first page on which both lists are read up to
// their newest and answered nothing new: an object created while a listing
// pages, inside the period, is on a later page.
//
// Lines: a PaymentIntent is a charge read as Lookup reads it (succeeded,
// with what it received; requires_capture authorized; processing or
// requires_action pending; canceled declined, or voided when a manual one
// was released without a decline), except that one in
// requires_payment_method or requires_confirmation, unpaid but payable
// still, is pending: a listing changes nothing, so it is not canceled as a
// charge's decline is. MerchantID is its metadata[gateway_merchant_id]. A
// Refund is a refund as LookupRefund reads it, its ChargeReference its
// PaymentIntent, and for one made in Stripe's dashboard (no metadata) its
// PaymentIntent's order id.
//
// An empty period or a cursor this adapter did not make is Rejected without
// asking; a page Stripe refuses or does not answer is NotProcessed or
// Unknown, as a lookup's; a page that does not read, or with an object in a
// currency the adapter does not take or outside the period asked for, is
// Unknown.
func (a *Adapter) ListTransactions(ctx context.Context, q psp.LedgerQuery) (psp.LedgerPage, error) {
	const op = "list"
	if !q.From.Before(q.To) {
		return psp.LedgerPage{}, &psp.Error{Class: psp.Rejected, Op: op,
			Err: fmt.Errorf("the period [%s, %s) is empty", q.From.Format(time.RFC3339Nano), q.To.Format(time.RFC3339Nano))}
	}
	cur, err := decodeCursor(q.Cursor)
	if err != nil {
		return psp.LedgerPage{}, &psp.Error{Class: psp.Rejected, Op: op, Err: err}
	}
	created := &sdk.RangeQueryParams{GreaterThanOrEqual: ceilSecond(q.From), LesserThan: ceilSecond(q.To)}
	if created.GreaterThanOrEqual >= created.LesserThan {
		return psp.LedgerPage{}, nil // no second starts in the period
	}
	limit := q.Limit
	if limit <= 0 {
		limit = defaultLedgerPage
	}
	var page psp.LedgerPage
	quiet := true
	for _, l := range []struct {
		at    *listing
		n     int
		fetch fetch
	}{
		{&cur.PaymentIntents, (limit + 1) / 2, a.paymentIntents},
		{&cur.Refunds, limit / 2, a.refunds},
	} {
		lines, done, err := l.at.step(ctx, l.fetch, min(max(l.n, 1), maxListLimit), created)
		if err != nil {
			return psp.LedgerPage{}, err
		}
		page.Transactions = append(page.Transactions, lines...)
		quiet = quiet && done
	}
	if !quiet {
		page.Next = cur.encode()
	}
	return page, nil
}

// ceilSecond is the first whole second at or after t, in Unix seconds.
func ceilSecond(t time.Time) int64 {
	s := t.Unix()
	if t.Nanosecond() > 0 {
		s++
	}
	return s
}

// fetch asks one of Stripe's lists for a page of objects created in
// created, by lp's cursor, limit and context. It returns their ids and lines, newest
// first, and has_more.
type fetch func(lp sdk.ListParams, created *sdk.RangeQueryParams) (ids []string, lines []psp.Transaction, more bool, err error)

// listing is where one of Stripe's lists stands in a ledger listing.
type listing struct {
	// After is the oldest object read on the way down (starting_after of
	// the next page down); empty before the first page.
	After string `json:"a,omitempty"`
	// Head is the newest object read: the first of the first page down,
	// then of each page up (ending_before of the next page up).
	Head string `json:"h,omitempty"`
	// Up says the way down is done.
	Up bool `json:"u,omitempty"`
}

// step reads l's next page of n objects: down from its newest object, then
// up from there. done says the page was read up to the list's newest
// object and held nothing new.
func (l *listing) step(ctx context.Context, f fetch, n int, created *sdk.RangeQueryParams) (lines []psp.Transaction, done bool, err error) {
	lp := sdk.ListParams{Context: ctx, Limit: sdk.Int64(int64(n))}
	// Up with no head is a list that was empty: it is read from the top
	// again.
	down := !l.Up || l.Head == ""
	switch {
	case down && l.After != "":
		lp.StartingAfter = sdk.String(l.After)
	case !down:
		lp.EndingBefore = sdk.String(l.Head)
	}
	ids, lines, more, err := f(lp, created)
	if err != nil {
		return nil, false, err
	}
	if !down {
		if len(ids) > 0 {
			l.Head = ids[0]
		}
		return lines, len(ids) == 0 && !more, nil
	}
	first := l.After == ""
	if first && len(ids) > 0 {
		l.Head = ids[0]
	}
	if len(ids) > 0 {
		l.After = ids[len(ids)-1]
	}
	l.Up = !more
	if l.Up {
		l.After = ""
	}
	return lines, first && len(ids) == 0 && !more, nil
}

// ledgerCursor is a listing's cursor: where each list stands.
type ledgerCursor struct {
	PaymentIntents listing `json:"p"`
	Refunds        listing `json:"r"`
}

func (c ledgerCursor) encode() string {
	b, err := json.Marshal(c)
	if err != nil {
		panic(err) // strings and a bool
	}
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeCursor reads a cursor encode wrote; "" is a listing's start.
func decodeCursor(s string) (ledgerCursor, error) {
	var c ledgerCursor
	if s == "" {
		return c, nil
	}
	bad := fmt.Errorf("cursor %q is not one of this adapter's", s)
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return c, bad
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil || dec.More() {
		return c, bad
	}
	for _, id := range []string{c.PaymentIntents.After, c.PaymentIntents.Head, c.Refunds.After, c.Refunds.Head} {
		if id != "" && !referencePattern.MatchString(id) {
			return c, bad
		}
	}
	return c, nil
}

// paymentIntents is a fetch of PaymentIntents.
func (a *Adapter) paymentIntents(lp sdk.ListParams, created *sdk.RangeQueryParams) ([]string, []psp.Transaction, bool, error) {
	const op = "list"
	svc := a.sc.V1PaymentIntents
	var list sdk.PaymentIntentList
	if err := listPage(svc.B, svc.Key, "/v1/payment_intents", &sdk.PaymentIntentListParams{ListParams: lp, CreatedRange: created}, &list); err != nil {
		return nil, nil, false, lookupFailure(op, err)
	}
	ids := make([]string, 0, len(list.Data))
	lines := make([]psp.Transaction, 0, len(list.Data))
	for _, pi := range list.Data {
		t, err := a.chargeLine(op, pi, created)
		if err != nil {
			return nil, nil, false, err
		}
		ids, lines = append(ids, pi.ID), append(lines, t)
	}
	return ids, lines, list.HasMore, nil
}

// refunds is a fetch of Refunds.
func (a *Adapter) refunds(lp sdk.ListParams, created *sdk.RangeQueryParams) ([]string, []psp.Transaction, bool, error) {
	const op = "list"
	params := &sdk.RefundListParams{ListParams: lp, CreatedRange: created}
	params.AddExpand("data.payment_intent")
	svc := a.sc.V1Refunds
	var list sdk.RefundList
	if err := listPage(svc.B, svc.Key, "/v1/refunds", params, &list); err != nil {
		return nil, nil, false, lookupFailure(op, err)
	}
	ids := make([]string, 0, len(list.Data))
	lines := make([]psp.Transaction, 0, len(list.Data))
	for _, rf := range list.Data {
		t, err := a.refundLine(op, rf, created)
		if err != nil {
			return nil, nil, false, err
		}
		ids, lines = append(ids, rf.ID), append(lines, t)
	}
	return ids, lines, list.HasMore, nil
}

// listPage GETs one page of the list at path into list, as the SDK's
// iterators do, but reads has_more, which they do not tell.
func listPage(b sdk.Backend, key, path string, params sdk.ListParamsContainer, list sdk.LastResponseSetter) error {
	v := &form.Values{}
	form.AppendTo(v, params)
	return b.CallRaw(http.MethodGet, path, key, []byte(v.Encode()), params.GetListParams().GetParams(), list)
}

// chargeLine reads a listed PaymentIntent as a ledger line.
func (a *Adapter) chargeLine(op string, pi *sdk.PaymentIntent, created *sdk.RangeQueryParams) (psp.Transaction, error) {
	if pi == nil || !referencePattern.MatchString(pi.ID) {
		return psp.Transaction{}, &psp.Error{Class: psp.Unknown, Op: op, Err: fmt.Errorf("stripe listed a payment intent without an id")}
	}
	if err := inPeriod(op, "payment intent "+pi.ID, pi.Created, created); err != nil {
		return psp.Transaction{}, err
	}
	var c psp.Charge
	switch pi.Status {
	case sdk.PaymentIntentStatusRequiresPaymentMethod, sdk.PaymentIntentStatusRequiresConfirmation:
		amount, currency, err := a.fromStripe(op, pi.Amount, pi.Currency)
		if err != nil {
			return psp.Transaction{}, err
		}
		c = psp.Charge{MerchantOrderID: pi.Metadata[metaOrderID], Reference: pi.ID, Status: psp.Pending, Amount: amount, Currency: currency}
	default:
		var err error
		if c, err = a.toCharge(op, pi); err != nil {
			return psp.Transaction{}, err
		}
	}
	return psp.Transaction{Kind: psp.TransactionCharge, MerchantOrderID: c.MerchantOrderID, Reference: c.Reference,
		Status: string(c.Status), Amount: c.Amount, AmountCaptured: c.AmountCaptured, Currency: c.Currency,
		MerchantID: pi.Metadata[metaMerchantID], CreatedAt: time.Unix(pi.Created, 0).UTC()}, nil
}

// refundLine reads a listed Refund as a ledger line.
func (a *Adapter) refundLine(op string, rf *sdk.Refund, created *sdk.RangeQueryParams) (psp.Transaction, error) {
	if rf == nil || !referencePattern.MatchString(rf.ID) {
		return psp.Transaction{}, &psp.Error{Class: psp.Unknown, Op: op, Err: fmt.Errorf("stripe listed a refund without an id")}
	}
	if err := inPeriod(op, "refund "+rf.ID, rf.Created, created); err != nil {
		return psp.Transaction{}, err
	}
	r, err := a.toRefund(op, rf)
	if err != nil {
		return psp.Transaction{}, err
	}
	t := psp.Transaction{Kind: psp.TransactionRefund, MerchantOrderID: r.MerchantOrderID, RefundOrderID: r.RefundOrderID,
		Reference: rf.ID, Status: string(r.Status), Amount: r.Amount, Currency: r.Currency, CreatedAt: time.Unix(rf.Created, 0).UTC()}
	if pi := rf.PaymentIntent; pi != nil {
		t.ChargeReference = pi.ID
		if t.MerchantOrderID == "" {
			t.MerchantOrderID = pi.Metadata[metaOrderID]
		}
	}
	return t, nil
}

// inPeriod checks that Stripe listed an object created in the range asked.
func inPeriod(op, what string, at int64, created *sdk.RangeQueryParams) error {
	if at < created.GreaterThanOrEqual || at >= created.LesserThan {
		return &psp.Error{Class: psp.Unknown, Op: op, Err: fmt.Errorf("%w: stripe listed %s, created at %d, asked for [%d, %d)",
			psp.ErrMismatch, what, at, created.GreaterThanOrEqual, created.LesserThan)}
	}
	return nil
}
