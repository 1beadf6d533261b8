// Package listings answers a merchant's listings (GET /payments, GET
// /refunds, GET /events): pages of its own objects, with stable cursors.
package listings

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"gateway/errs"
	"gateway/payments"
)

// MaxPageSize bounds a page of a listing.
const MaxPageSize = 100

// DefaultPageSize is a listing's page when the client names none.
const DefaultPageSize = 10

// Query asks for one page of a merchant's payments or refunds, newest
// first. The cursors name an object of the listing: StartingAfter pages on
// to older ones, EndingBefore back to newer ones. Paging by (created_at, id)
// keeps pages stable while new objects arrive: they only ever appear before
// the first page.
type Query struct {
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
func (q *Query) Validate(statuses ...string) error {
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
var ErrCursorNotFound = errors.New("listings: cursor not found")

// Store is what listings read.
type Store interface {
	// MerchantPayments reads a page of q.MerchantID's payments, newest
	// first. ErrCursorNotFound when a cursor names none of the merchant's.
	MerchantPayments(ctx context.Context, q Query) (Page[payments.Payment], error)
	// MerchantRefunds does the same for refunds; errs.ErrNotFound when
	// q.PaymentID names none of the merchant's payments.
	MerchantRefunds(ctx context.Context, q Query) (Page[payments.Refund], error)
	// LogEvents places up to limit of the merchant's committed events in its
	// events listing, after every event placed before (nothing when another
	// request is placing them now), and says how many it placed.
	LogEvents(ctx context.Context, merchantID string, limit int) (int, error)
	// MerchantEvents reads a page of q.MerchantID's placed events, in their
	// listing's order. ErrCursorNotFound when the cursor names none of the
	// merchant's.
	MerchantEvents(ctx context.Context, q EventQuery) (Page[payments.Event], error)
	// MerchantEvent reads one of the merchant's events; errs.ErrNotFound otherwise.
	MerchantEvent(ctx context.Context, merchantID, id string) (payments.Event, error)
}

// Listings answers GET /payments, GET /refunds and GET /events: a merchant's own objects only.
type Listings struct{ store Store }

// New returns listings over store.
func New(store Store) *Listings { return &Listings{store: store} }

// Payments lists a page of the merchant's payments.
func (l *Listings) Payments(ctx context.Context, q Query) (Page[payments.Payment], error) {
	if err := q.Validate(payments.PaymentStatuses...); err != nil {
		return Page[payments.Payment]{}, err
	}
	p, err := l.store.MerchantPayments(ctx, q)
	return p, listErr(err, "payment")
}

// Refunds lists a page of the merchant's refunds (of one payment, with PaymentID).
func (l *Listings) Refunds(ctx context.Context, q Query) (Page[payments.Refund], error) {
	if err := q.Validate(payments.RefundStatuses...); err != nil {
		return Page[payments.Refund]{}, err
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

// EventQuery asks for one page of a merchant's events, oldest first: the
// page after the event StartingAfter names (an event id), or from the
// oldest one retained. Type and ObjectID filter when set.
type EventQuery struct {
	MerchantID    string
	Limit         int
	StartingAfter string
	Type          payments.EventType
	ObjectID      string
}

// Validate checks the query before anything is read.
func (q *EventQuery) Validate() error {
	var fields []errs.FieldError
	switch {
	case q.Limit == 0:
		q.Limit = DefaultPageSize
	case q.Limit < 0 || q.Limit > MaxPageSize:
		fields = append(fields, errs.FieldError{Field: "limit", Reason: fmt.Sprintf("must be 1 to %d", MaxPageSize)})
	}
	if q.Type != "" && !slices.Contains(payments.EventTypes, q.Type) {
		fields = append(fields, errs.FieldError{Field: "type", Reason: "must be one of " + eventTypeNames()})
	}
	if len(q.ObjectID) > 40 {
		fields = append(fields, errs.FieldError{Field: "object_id", Reason: "must be a payment or refund id"})
	}
	if len(q.StartingAfter) > 40 {
		fields = append(fields, errs.FieldError{Field: "starting_after", Reason: "must be the id of one of your events"})
	}
	if len(fields) > 0 {
		return &errs.Error{Code: errs.CodeInvalid, Message: "invalid listing query", Fields: fields}
	}
	return nil
}

func eventTypeNames() string {
	names := make([]string, len(payments.EventTypes))
	for i, t := range payments.EventTypes {
		names[i] = string(t)
	}
	return strings.Join(names, ", ")
}

// logBatch bounds the events a listing places before it reads.
const logBatch = 1000

// Events lists a page of the merchant's events, oldest first.
func (l *Listings) Events(ctx context.Context, q EventQuery) (Page[payments.Event], error) {
	if err := q.Validate(); err != nil {
		return Page[payments.Event]{}, err
	}
	// Every event committed by now takes its place before the page is read.
	// Positions are given after commit, so a page never holds an event that
	// could be passed by one committing later: the listing has no gaps for a
	// consumer paging with its cursor.
	if _, err := l.store.LogEvents(ctx, q.MerchantID, logBatch); err != nil {
		return Page[payments.Event]{}, errs.Internal(err)
	}
	p, err := l.store.MerchantEvents(ctx, q)
	if errors.Is(err, ErrCursorNotFound) {
		return Page[payments.Event]{}, &errs.Error{Code: errs.CodeInvalid, Message: "the cursor names no event of this listing",
			Fields: []errs.FieldError{{Field: "starting_after", Reason: "must be the id of one of your events"}}}
	}
	if err != nil {
		return Page[payments.Event]{}, errs.Internal(err)
	}
	return p, nil
}

// Event reads one of the merchant's events.
func (l *Listings) Event(ctx context.Context, merchantID, id string) (payments.Event, error) {
	e, err := l.store.MerchantEvent(ctx, merchantID, id)
	switch {
	case errors.Is(err, errs.ErrNotFound):
		return payments.Event{}, &errs.Error{Code: errs.CodeNotFound, Message: "event not found"}
	case err != nil:
		return payments.Event{}, errs.Internal(err)
	}
	return e, nil
}
