package payments

import (
	"encoding/json"
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
	CreatedAt  time.Time
}

// PaymentEventData renders p as an event carries it: its API view, without
// the client secret (shown once, to the merchant's server that created it).
func PaymentEventData(p Payment) json.RawMessage {
	v := ToView(p)
	v.ClientSecret = ""
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

// NewEventID is a fresh event id: evt_ and a ULID.
func NewEventID() string { return "evt_" + ulid.Make().String() }
