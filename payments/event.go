package payments

import (
	"encoding/json"
	"fmt"
	"gateway/versions"
	"time"

	"github.com/oklog/ulid/v2"
)

// EventType names what happened to a payment or a refund: the object's kind
// and the status it entered ("payment.succeeded", "refund.failed").
type EventType string

// The event types: one per status a payment or a refund can enter.
const (
	EventPaymentRequiresConfirmation EventType = "payment.requires_confirmation"
	EventPaymentProcessing           EventType = "payment.processing"
	EventPaymentRequiresAction       EventType = "payment.requires_action"
	EventPaymentSucceeded            EventType = "payment.succeeded"
	EventPaymentDeclined             EventType = "payment.declined"
	EventPaymentFailed               EventType = "payment.failed"
	EventPaymentCanceled             EventType = "payment.canceled"
	EventPaymentRequiresReview       EventType = "payment.requires_review"
	EventRefundPending               EventType = "refund.pending"
	EventRefundSucceeded             EventType = "refund.succeeded"
	EventRefundFailed                EventType = "refund.failed"
	EventRefundRequiresReview        EventType = "refund.requires_review"
)

// EventTypes lists every event type, payments' in the order of Statuses,
// then refunds' in the order of RefundStatuses.
var EventTypes = func() []EventType {
	out := make([]EventType, 0, len(Statuses)+len(RefundStatuses))
	for _, s := range Statuses {
		out = append(out, PaymentEventType(s))
		if s == Succeeded {
			// A manual payment's capture enters succeeded with one of these.
			out = append(out, EventPaymentCaptured, EventPaymentPartiallyCaptured)
		}
	}
	for _, s := range RefundStatuses {
		out = append(out, RefundEventType(RefundStatus(s)))
	}
	return out
}()

// Object types of events.
const (
	ObjectPayment = "payment"
	ObjectRefund  = "refund"
)

// PaymentEventType is the type of the event a payment entering s writes.
func PaymentEventType(s Status) EventType { return EventType(ObjectPayment + "." + string(s)) }

// RefundEventType is the type of the event a refund entering s writes.
func RefundEventType(s RefundStatus) EventType { return EventType(ObjectRefund + "." + string(s)) }

// Event is one state change of a payment or a refund, written in the same
// transaction as the change (the outbox): Data is the object as the API
// rendered it then. Seq numbers an object's events from 1 and only grows;
// Pos is the event's place in the whole log (the listing's cursor).
type Event struct {
	Pos        int64
	ID         string
	MerchantID string
	Type       EventType
	ObjectType string
	ObjectID   string
	Seq        int64
	Data       json.RawMessage
	// DataVersion is the API version Data is rendered in: the gateway's
	// latest when it wrote the event (empty: this gateway's latest).
	DataVersion string
	CreatedAt   time.Time
}

// EventIn is e with its data rendered in API version v.
func EventIn(e Event, v versions.Version) (Event, error) {
	from := versions.Latest
	if e.DataVersion != "" {
		from = versions.Version(e.DataVersion)
	}
	kind := versions.KindNone
	switch e.ObjectType {
	case ObjectPayment:
		kind = versions.KindPayment
	case ObjectRefund:
		kind = versions.KindRefund
	}
	data, err := versions.Render(e.Data, kind, from, v)
	if err != nil {
		return Event{}, fmt.Errorf("event %s: %w", e.ID, err)
	}
	e.Data, e.DataVersion = data, string(v)
	return e, nil
}

// PaymentEventData renders p as an event carries it: its API view, without
// the client secrets: the payment's own (shown once, to the merchant's
// server that created it) and the PSP's in its next action (Stripe's
// PaymentIntent secret, which the customer's browser reads from the
// confirm's answer or the payment itself, never from an event or a
// webhook delivery, whoever receives those).
func PaymentEventData(p Payment) json.RawMessage {
	v := ToView(p)
	v.ClientSecret = ""
	if v.NextAction != nil {
		na := *v.NextAction
		na.ClientSecret = ""
		v.NextAction = &na
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic("payments: render event: " + err.Error())
	}
	return b
}

// RefundEventData renders r as an event carries it: its API view.
func RefundEventData(r Refund) json.RawMessage {
	b, err := json.Marshal(ToRefundView(r))
	if err != nil {
		panic("payments: render refund event: " + err.Error())
	}
	return b
}

// PaymentEvent is the event of p entering its status: p as its API view
// renders it then (the store numbers it).
func PaymentEvent(p Payment) Event {
	return Event{MerchantID: p.MerchantID, Type: PaymentEventType(p.Status), ObjectType: ObjectPayment, ObjectID: p.ID, Data: PaymentEventData(p)}
}

// RefundEvent is the event of r entering its status.
func RefundEvent(r Refund) Event {
	return Event{MerchantID: r.MerchantID, Type: RefundEventType(r.Status), ObjectType: ObjectRefund, ObjectID: r.ID, Data: RefundEventData(r)}
}

// NewEventID is a fresh event id: evt_ and a ULID.
func NewEventID() string { return "evt_" + ulid.Make().String() }

// EventView is an event as the API renders it.
type EventView struct {
	ID         string          `json:"id"`
	Type       EventType       `json:"type"`
	ObjectType string          `json:"object_type"`
	ObjectID   string          `json:"object_id"`
	Seq        int64           `json:"seq"`
	CreatedAt  string          `json:"created_at"`
	Data       json.RawMessage `json:"data"`
}

// EventJSON is e as GET /events/{id} answers it and a webhook delivery
// carries it: the same bytes, from this one function.
func EventJSON(e Event) []byte {
	b, err := encodeJSON(ToEventView(e))
	if err != nil {
		// An EventView holds strings, an integer and JSON already valid.
		panic("payments: render event: " + err.Error())
	}
	return b
}

// ToEventView renders e for the public API.
func ToEventView(e Event) EventView {
	return EventView{
		ID: e.ID, Type: e.Type, ObjectType: e.ObjectType, ObjectID: e.ObjectID, Seq: e.Seq,
		CreatedAt: e.CreatedAt.UTC().Format(time.RFC3339Nano), Data: e.Data,
	}
}
