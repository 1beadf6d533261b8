package payments

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gateway/errs"
)

// MaxPageSize bounds a page of a listing.
const MaxPageSize = 100

// DefaultPageSize is a listing's page when the client names none.
const DefaultPageSize = 10

// ListQuery asks for one page of a merchant's payments or refunds, newest
// first. The cursors name an object of the listing: StartingAfter pages on
// to older ones, EndingBefore back to newer ones. Paging by (created_at, id)
// keeps pages stable while new objects arrive: they only ever appear before
// the first page.
type ListQuery struct {
	MerchantID    string
	Limit         int
	StartingAfter string
	EndingBefore  string
	// Status filters by status when set (a payment's or a refund's).
	Status string
	// CreatedFrom (inclusive) and CreatedBefore (exclusive) bound created_at.
	CreatedFrom   time.Time
	CreatedBefore time.Time
	// PaymentID narrows a refunds listing to one payment.
	PaymentID string
}

// Validate checks the query before anything is read.
func (q *ListQuery) Validate(statuses ...string) error {
	var fields []errs.FieldError
	switch {
	case q.Limit == 0:
		q.Limit = DefaultPageSize
	case q.Limit < 0 || q.Limit > MaxPageSize:
		fields = append(fields, errs.FieldError{Field: "limit", Reason: fmt.Sprintf("must be 1 to %d", MaxPageSize)})
	}
	if q.StartingAfter != "" && q.EndingBefore != "" {
		fields = append(fields, errs.FieldError{Field: "ending_before", Reason: "cannot be used with starting_after"})
	}
	if q.Status != "" {
		ok := false
		for _, s := range statuses {
			ok = ok || q.Status == s
		}
		if !ok {
			fields = append(fields, errs.FieldError{Field: "status", Reason: fmt.Sprintf("must be one of %v", statuses)})
		}
	}
	if !q.CreatedFrom.IsZero() && !q.CreatedBefore.IsZero() && !q.CreatedFrom.Before(q.CreatedBefore) {
		fields = append(fields, errs.FieldError{Field: "created", Reason: "the range is empty"})
	}
	if len(fields) > 0 {
		return &errs.Error{Code: errs.CodeInvalid, Message: "invalid listing query", Fields: fields}
	}
	return nil
}

// Page is one page of a listing, newest first; HasMore says whether more
// lie beyond it in the direction it was asked for.
type Page[T any] struct {
	Items   []T
	HasMore bool
}

// ErrCursorNotFound: a cursor names no object of the listing.
var ErrCursorNotFound = errors.New("payments: cursor not found")

// ListStore is what listings read.
type ListStore interface {
	// MerchantPayments reads a page of q.MerchantID's payments, newest
	// first. ErrCursorNotFound when a cursor names none of the merchant's.
	MerchantPayments(ctx context.Context, q ListQuery) (Page[Payment], error)
	// MerchantRefunds does the same for refunds; errs.ErrNotFound when
	// q.PaymentID names none of the merchant's payments.
	MerchantRefunds(ctx context.Context, q ListQuery) (Page[Refund], error)
	// LogEvents places up to limit of the merchant's committed events in its
	// events listing, after every event placed before (nothing when another
	// request is placing them now), and says how many it placed.
	LogEvents(ctx context.Context, merchantID string, limit int) (int, error)
	// MerchantEvents reads a page of q.MerchantID's placed events, in their
	// listing's order. ErrCursorNotFound when the cursor names none of the
	// merchant's.
	MerchantEvents(ctx context.Context, q EventQuery) (Page[Event], error)
	// MerchantEvent reads one of the merchant's events; errs.ErrNotFound otherwise.
	MerchantEvent(ctx context.Context, merchantID, id string) (Event, error)
}

// PaymentStatuses lists every payment status, for validation.
var PaymentStatuses = func() []string {
	out := make([]string, len(Statuses))
	for i, s := range Statuses {
		out[i] = string(s)
	}
	return out
}()

// RefundStatuses lists every refund status, for validation.
var RefundStatuses = []string{string(RefundPending), string(RefundSucceeded), string(RefundFailed), string(RefundRequiresReview)}

// Listings answers GET /payments, GET /refunds and GET /events: a merchant's own objects only.
type Listings struct{ store ListStore }

// NewListings returns listings over store.
func NewListings(store ListStore) *Listings { return &Listings{store: store} }

// Payments lists a page of the merchant's payments.
func (l *Listings) Payments(ctx context.Context, q ListQuery) (Page[Payment], error) {
	if err := q.Validate(PaymentStatuses...); err != nil {
		return Page[Payment]{}, err
	}
	p, err := l.store.MerchantPayments(ctx, q)
	return p, listErr(err, "payment")
}

// Refunds lists a page of the merchant's refunds (of one payment, with PaymentID).
func (l *Listings) Refunds(ctx context.Context, q ListQuery) (Page[Refund], error) {
	if err := q.Validate(RefundStatuses...); err != nil {
		return Page[Refund]{}, err
	}
	p, err := l.store.MerchantRefunds(ctx, q)
	return p, listErr(err, "refund")
}

func listErr(err error, what string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrCursorNotFound):
		return &errs.Error{Code: errs.CodeInvalid, Message: "the cursor names no " + what + " of this listing",
			Fields: []errs.FieldError{{Field: "starting_after", Reason: "must be the id of one of your " + what + "s"}}}
	case errors.Is(err, errs.ErrNotFound):
		return &errs.Error{Code: errs.CodeNotFound, Message: "payment not found"}
	}
	return errs.Internal(err)
}
