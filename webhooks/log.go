package webhooks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gateway/errs"
	"gateway/payments"
)

// The delivery log: every attempt of every delivery is a row, written in
// the transaction that records the attempt (so a fenced-out attempt leaves
// none), and a merchant can read an endpoint's or an event's deliveries
// with their attempts, and ask for one event to be delivered again.

// DeliveryIDPrefix begins every delivery's id, followed by a ULID.
const DeliveryIDPrefix = "wd_"

// AttemptOutcome is what one attempt came to.
type AttemptOutcome string

// An attempt is delivered (the endpoint answered 2xx) or failed.
const (
	AttemptDelivered AttemptOutcome = "delivered"
	AttemptFailed    AttemptOutcome = "failed"
)

// Attempt is one POST of a delivery, as the log keeps it.
type Attempt struct {
	Number int
	// At is when the POST began, on the database's clock (its record's
	// time less its latency).
	At time.Time
	// HTTPStatus is the endpoint's answer; 0 when it answered nothing.
	HTTPStatus int
	Latency    time.Duration
	// Error says why it failed (never a secret); "" when delivered.
	Error   string
	Outcome AttemptOutcome
	// NextAttemptAt is when the delivery was due again after it; zero when
	// it was not (delivered, or given up).
	NextAttemptAt time.Time
}

// DeliveryLog is a delivery, its event's type and its attempts, oldest first.
type DeliveryLog struct {
	Delivery
	EventType string
	Log       []Attempt
}

// DeliveryQuery asks for a page of a merchant's deliveries, newest first:
// of one endpoint (EndpointID) or of one event (EventID).
type DeliveryQuery struct {
	MerchantID    string
	EndpointID    string
	EventID       string
	Limit         int
	StartingAfter string
}

// Limits of a page of deliveries.
const (
	DefaultDeliveryPage = 10
	MaxDeliveryPage     = 100
)

// Redelivery asks for one event to be delivered again to one endpoint.
// Key is the request's Idempotency-Key: a key names one redelivery.
type Redelivery struct {
	MerchantID string
	EventID    string
	EndpointID string
	Key        string
}

// LogStore keeps the delivery log; mysql implements it.
type LogStore interface {
	// Deliveries is a page of q's deliveries with their attempts, and
	// whether more lie beyond it. errs.ErrNotFound when StartingAfter
	// names no delivery of the listing.
	Deliveries(ctx context.Context, q DeliveryQuery) ([]DeliveryLog, bool, error)
	// EventType is the type of the merchant's event; errs.ErrNotFound when
	// there is none.
	EventType(ctx context.Context, merchantID, eventID string) (string, error)
	// Redeliver makes a pending delivery, due now, of r's event to its
	// endpoint, unless a delivery was made under r.Key already: then it
	// answers that one and replayed. The unique key on (merchant, key)
	// decides a race between two requests with the key.
	Redeliver(ctx context.Context, r Redelivery) (d DeliveryLog, replayed bool, err error)
	// Delivery is one of the merchant's deliveries with its attempts;
	// errs.ErrNotFound when it has none with that id.
	Delivery(ctx context.Context, merchantID, id string) (DeliveryLog, error)
	// Redelivered is the delivery made under the merchant's key;
	// errs.ErrNotFound when none was.
	Redelivered(ctx context.Context, merchantID, key string) (DeliveryLog, error)
}

// Log answers a merchant's questions about its deliveries.
type Log struct {
	st  LogStore
	eps EndpointStore
}

// NewLog returns the delivery log over st, its endpoints read from eps.
func NewLog(st LogStore, eps EndpointStore) *Log { return &Log{st: st, eps: eps} }

// ErrNoSuchEvent is the error for an event the merchant does not have.
var ErrNoSuchEvent = &errs.Error{Code: errs.CodeNotFound, Message: "no such event"}

// Deliveries is a page of an endpoint's or an event's deliveries, newest
// first, each with its attempts; an unknown endpoint or event is a 404.
func (l *Log) Deliveries(ctx context.Context, q DeliveryQuery) ([]DeliveryLog, bool, error) {
	switch {
	case q.Limit == 0:
		q.Limit = DefaultDeliveryPage
	case q.Limit < 0 || q.Limit > MaxDeliveryPage:
		return nil, false, &errs.Error{Code: errs.CodeInvalid, Message: "invalid listing query",
			Fields: []errs.FieldError{{Field: "limit", Reason: fmt.Sprintf("must be 1 to %d", MaxDeliveryPage)}}}
	}
	if q.StartingAfter != "" && !payments.WellFormedID(DeliveryIDPrefix, q.StartingAfter) {
		return nil, false, &errs.Error{Code: errs.CodeInvalid, Message: "invalid listing query",
			Fields: []errs.FieldError{{Field: "starting_after", Reason: "is not a delivery id (wd_…)"}}}
	}
	if q.EndpointID != "" {
		if _, err := l.eps.Endpoint(ctx, q.MerchantID, q.EndpointID); err != nil {
			return nil, false, storeErr(err)
		}
	} else if _, err := l.st.EventType(ctx, q.MerchantID, q.EventID); err != nil {
		return nil, false, eventErr(err)
	}
	out, more, err := l.st.Deliveries(ctx, q)
	if errors.Is(err, errs.ErrNotFound) {
		return nil, false, &errs.Error{Code: errs.CodeInvalid, Message: "invalid listing query",
			Fields: []errs.FieldError{{Field: "starting_after", Reason: "names no delivery of this listing"}}}
	}
	return out, more, storeErr(err)
}

// Delivery is one of the merchant's deliveries with its attempts.
func (l *Log) Delivery(ctx context.Context, merchantID, id string) (DeliveryLog, error) {
	d, err := l.st.Delivery(ctx, merchantID, id)
	if errors.Is(err, errs.ErrNotFound) {
		return DeliveryLog{}, &errs.Error{Code: errs.CodeNotFound, Message: "no such webhook delivery"}
	}
	return d, storeErr(err)
}

// Redeliver delivers r's event again to r's endpoint, which must be
// enabled and subscribe to the event's type. A retry with the same key
// answers the delivery the first one made (replayed), whatever the
// endpoint is now; the key with another event or endpoint is refused with
// nothing made.
func (l *Log) Redeliver(ctx context.Context, r Redelivery) (DeliveryLog, bool, error) {
	// The key first: a retry answers what it made, even once the endpoint
	// or the event is gone.
	switch d, err := l.st.Redelivered(ctx, r.MerchantID, r.Key); {
	case err == nil:
		return replay(r, d)
	case !errors.Is(err, errs.ErrNotFound):
		return DeliveryLog{}, false, storeErr(err)
	}
	typ, err := l.st.EventType(ctx, r.MerchantID, r.EventID)
	if err != nil {
		return DeliveryLog{}, false, eventErr(err)
	}
	ep, err := l.eps.Endpoint(ctx, r.MerchantID, r.EndpointID)
	if err != nil {
		return DeliveryLog{}, false, storeErr(err)
	}
	if ep.Status != Enabled {
		return DeliveryLog{}, false, &errs.Error{Code: errs.CodeConflict, Message: "the endpoint is disabled: enable it first"}
	}
	if !ep.Subscribes(typ) {
		return DeliveryLog{}, false, &errs.Error{Code: errs.CodeInvalid, Message: "the endpoint does not subscribe to " + typ + " events",
			Fields: []errs.FieldError{{Field: "endpoint_id", Reason: "does not subscribe to " + typ}}}
	}
	d, replayed, err := l.st.Redeliver(ctx, r)
	if err != nil {
		return DeliveryLog{}, false, storeErr(err)
	}
	if replayed { // another request with the key made it first
		return replay(r, d)
	}
	return d, false, nil
}

// replay answers a redelivery made under r's key before.
func replay(r Redelivery, d DeliveryLog) (DeliveryLog, bool, error) {
	if d.EventID != r.EventID || d.EndpointID != r.EndpointID {
		return DeliveryLog{}, false, &errs.Error{Code: errs.CodeKeyMismatch,
			Message: "this Idempotency-Key was used to redeliver another event or to another endpoint"}
	}
	return d, true, nil
}

func eventErr(err error) error {
	if errors.Is(err, errs.ErrNotFound) {
		return ErrNoSuchEvent
	}
	return storeErr(err)
}
