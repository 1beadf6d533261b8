package gateway

import (
	"encoding/json"
	"fmt"
	"time"
)

// The objects of the API (api/openapi.json, components.schemas), one type
// each. Money is an int64 amount in the currency's ISO 4217 minor units
// (cents for USD, won for KRW) beside its upper-case currency code; never
// a float. A nullable string of the API is "" when null.

// PaymentStatus is where a payment stands.
type PaymentStatus string

// Payment statuses (docs/api.md, POST /payments).
const (
	PaymentProcessing           PaymentStatus = "processing"
	PaymentSucceeded            PaymentStatus = "succeeded"
	PaymentDeclined             PaymentStatus = "declined"
	PaymentFailed               PaymentStatus = "failed" // the PSP never processed it
	PaymentRequiresReview       PaymentStatus = "requires_review"
	PaymentRequiresConfirmation PaymentStatus = "requires_confirmation"
	PaymentRequiresAction       PaymentStatus = "requires_action"
	PaymentRequiresCapture      PaymentStatus = "requires_capture"
	PaymentCanceled             PaymentStatus = "canceled"
)

// CaptureMethod says when an authorized amount is taken.
type CaptureMethod string

// Capture methods.
const (
	CaptureAutomatic CaptureMethod = "automatic"
	CaptureManual    CaptureMethod = "manual" // authorize now, capture later
)

// CancellationReason says why a payment was canceled.
type CancellationReason string

// Cancellation reasons; the gateway sets AuthorizationExpired itself.
const (
	ReasonDuplicate            CancellationReason = "duplicate"
	ReasonFraudulent           CancellationReason = "fraudulent"
	ReasonRequestedByCustomer  CancellationReason = "requested_by_customer"
	ReasonAbandoned            CancellationReason = "abandoned"
	ReasonAuthorizationExpired CancellationReason = "authorization_expired"
)

// Payment is a payment as the gateway renders it.
type Payment struct {
	ID              string        `json:"id"`
	Status          PaymentStatus `json:"status"`
	Amount          int64         `json:"amount"`
	Currency        string        `json:"currency"`
	PaymentMethod   string        `json:"payment_method"`
	MerchantOrderID string        `json:"merchant_order_id"`
	PSPReference    string        `json:"psp_reference"`
	DeclineCode     string        `json:"decline_code"`
	Description     string        `json:"description"`
	// Metadata is empty ({}) in answers to a publishable key.
	Metadata       map[string]string `json:"metadata"`
	AmountRefunded int64             `json:"amount_refunded"`
	Refunded       bool              `json:"refunded"`
	CreatedAt      time.Time         `json:"created_at"`
	// Attempts lists the PSP accounts the payment went to, the current last.
	Attempts []PaymentAttempt `json:"attempts,omitempty"`
	// ExpiresAt, Checkout and ClientSecret come with a two-step payment
	// (created with Confirm false); only its creation's answer carries
	// ClientSecret, for the customer's browser.
	ExpiresAt    time.Time   `json:"expires_at,omitzero"`
	Checkout     *Checkout   `json:"checkout,omitempty"`
	ClientSecret string      `json:"client_secret,omitempty"`
	NextAction   *NextAction `json:"next_action,omitempty"`
	// The capture fields come with a payment created with CaptureManual.
	CaptureMethod      CaptureMethod      `json:"capture_method,omitempty"`
	AmountCapturable   int64              `json:"amount_capturable,omitempty"`
	AmountCaptured     int64              `json:"amount_captured,omitempty"`
	CaptureBefore      time.Time          `json:"capture_before,omitzero"`
	CancellationReason CancellationReason `json:"cancellation_reason,omitempty"`
}

// PaymentAttempt is one PSP account a payment was sent to.
type PaymentAttempt struct {
	Attempt      int    `json:"attempt"`
	Account      string `json:"account"`
	OrderID      string `json:"order_id"`
	Outcome      string `json:"outcome"`
	PSPReference string `json:"psp_reference"`
}

// Checkout is what a front end needs to start the PSP's own client for a
// two-step payment. Its Amount is in the PSP's own units, which its client
// expects.
type Checkout struct {
	PSP            string `json:"psp"`
	Client         string `json:"client"` // toss_payment_widget, stripe_js, none
	PublishableKey string `json:"publishable_key,omitempty"`
	OrderID        string `json:"order_id"`
	Amount         int64  `json:"amount"`
	Currency       string `json:"currency"`
	ConfirmWith    string `json:"confirm_with"` // payment_key or payment_method
}

// NextAction is what the customer must do for a payment in
// requires_action: Type "redirect" to URL, or Stripe.js's use_stripe_sdk
// with ClientSecret.
type NextAction struct {
	Type         string `json:"type"`
	URL          string `json:"url,omitempty"`
	ClientSecret string `json:"client_secret,omitempty"`
}

// CreatePaymentRequest is the body of POST /payments.
type CreatePaymentRequest struct {
	// Amount in minor units, 1 to 10¹²; Currency is ISO 4217.
	Amount        int64  `json:"amount"`
	Currency      string `json:"currency"`
	PaymentMethod string `json:"payment_method,omitempty"`
	Description   string `json:"description,omitempty"`
	// Metadata: at most 20 keys of at most 40 characters, values of at
	// most 500.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Confirm false creates a two-step payment without charging it
	// (Confirm: new(false)); nil charges at once.
	Confirm       *bool         `json:"confirm,omitempty"`
	CaptureMethod CaptureMethod `json:"capture_method,omitempty"`
}

// ConfirmPaymentRequest is the body of POST /payments/{id}/confirm: the
// PSP client's result. Amount and OrderID, when given, must be the
// payment's.
type ConfirmPaymentRequest struct {
	PaymentMethod string `json:"payment_method,omitempty"`
	PaymentKey    string `json:"payment_key,omitempty"`
	Amount        int64  `json:"amount,omitempty"`
	OrderID       string `json:"order_id,omitempty"`
}

// CapturePaymentRequest is the body of POST /payments/{id}/capture; a zero
// AmountToCapture captures all that is authorized.
type CapturePaymentRequest struct {
	AmountToCapture int64 `json:"amount_to_capture,omitempty"`
}

// CancelPaymentRequest is the body of POST /payments/{id}/cancel.
type CancelPaymentRequest struct {
	CancellationReason CancellationReason `json:"cancellation_reason,omitempty"`
}

// CancelByKeyRequest is the body of POST /payments/cancel_by_key: the key
// of the POST /payments to cancel, whatever it did or will do.
type CancelByKeyRequest struct {
	IdempotencyKey     string             `json:"idempotency_key"`
	CancellationReason CancellationReason `json:"cancellation_reason,omitempty"`
}

// CancellationStatus is what a cancellation by key did.
type CancellationStatus string

// Cancellation statuses.
const (
	CancellationCanceled       CancellationStatus = "canceled"
	CancellationVoided         CancellationStatus = "voided"
	CancellationRefunded       CancellationStatus = "refunded"
	CancellationRequested      CancellationStatus = "cancel_requested" // carried out once the PSP's truth is known
	CancellationRequiresReview CancellationStatus = "requires_review"
)

// Cancellation is the answer of POST /payments/cancel_by_key.
type Cancellation struct {
	Object             string             `json:"object"`
	IdempotencyKey     string             `json:"idempotency_key"`
	Status             CancellationStatus `json:"status"`
	CancellationReason CancellationReason `json:"cancellation_reason"`
	// Payment is the key's payment as the cancellation left it; nil when
	// the key made none.
	Payment  *Payment `json:"payment"`
	RefundID string   `json:"refund_id"`
	Detail   string   `json:"detail"`
}

// RefundStatus is where a refund stands.
type RefundStatus string

// Refund statuses.
const (
	RefundPending        RefundStatus = "pending"
	RefundSucceeded      RefundStatus = "succeeded"
	RefundFailed         RefundStatus = "failed"
	RefundRequiresReview RefundStatus = "requires_review"
)

// Refund gives back part or all of a payment.
type Refund struct {
	ID            string       `json:"id"`
	PaymentID     string       `json:"payment_id"`
	Amount        int64        `json:"amount"`
	Currency      string       `json:"currency"`
	Status        RefundStatus `json:"status"`
	RefundOrderID string       `json:"refund_order_id"`
	PSPReference  string       `json:"psp_reference"`
	Reason        string       `json:"reason"`
	// DeclineCode says why a failed refund failed: the PSP's refusal,
	// not_processed or rejected_by_psp (failure_code before API version
	// 2026-12-02).
	DeclineCode string            `json:"decline_code"`
	Metadata    map[string]string `json:"metadata"`
	CreatedAt   time.Time         `json:"created_at"`
	UpdatedAt   time.Time         `json:"updated_at"`
}

// CreateRefundRequest is the body of POST /payments/{id}/refunds; a zero
// Amount refunds the whole refundable remainder.
type CreateRefundRequest struct {
	Amount   int64             `json:"amount,omitempty"`
	Reason   string            `json:"reason,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// EventType names a change of a payment or a refund.
type EventType string

// Event types (docs/api.md, Events).
const (
	EventPaymentRequiresConfirmation EventType = "payment.requires_confirmation"
	EventPaymentProcessing           EventType = "payment.processing"
	EventPaymentRequiresAction       EventType = "payment.requires_action"
	EventPaymentRequiresCapture      EventType = "payment.requires_capture"
	EventPaymentSucceeded            EventType = "payment.succeeded"
	EventPaymentCaptured             EventType = "payment.captured"
	EventPaymentPartiallyCaptured    EventType = "payment.partially_captured"
	EventPaymentDeclined             EventType = "payment.declined"
	EventPaymentFailed               EventType = "payment.failed"
	EventPaymentCanceled             EventType = "payment.canceled"
	EventPaymentRequiresReview       EventType = "payment.requires_review"
	EventRefundPending               EventType = "refund.pending"
	EventRefundSucceeded             EventType = "refund.succeeded"
	EventRefundFailed                EventType = "refund.failed"
	EventRefundRequiresReview        EventType = "refund.requires_review"
)

// Event is a change of status of a payment or a refund. ID never changes
// (deduplicate on it); Seq numbers one object's events 1, 2, 3… in the
// order of its changes (drop one whose Seq is not above the last applied).
type Event struct {
	ID         string    `json:"id"`
	Type       EventType `json:"type"`
	ObjectType string    `json:"object_type"` // payment or refund
	ObjectID   string    `json:"object_id"`
	Seq        int64     `json:"seq"`
	CreatedAt  time.Time `json:"created_at"`
	// Data is the object as the API rendered it then; Payment and Refund
	// decode it.
	Data json.RawMessage `json:"data"`
}

// Payment decodes the data of a payment's event.
func (e *Event) Payment() (*Payment, error) {
	var p Payment
	if err := e.decode("payment", &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// Refund decodes the data of a refund's event.
func (e *Event) Refund() (*Refund, error) {
	var r Refund
	if err := e.decode("refund", &r); err != nil {
		return nil, err
	}
	return &r, nil
}

func (e *Event) decode(kind string, v any) error {
	if e.ObjectType != kind {
		return fmt.Errorf("gateway: event %s is about a %s, not a %s", e.ID, e.ObjectType, kind)
	}
	if err := json.Unmarshal(e.Data, v); err != nil {
		return fmt.Errorf("gateway: event %s: %w", e.ID, err)
	}
	return nil
}

// PaymentList, RefundList and EventList are pages of a listing; the
// List methods walk them.
type PaymentList struct {
	Object  string    `json:"object"`
	Data    []Payment `json:"data"`
	HasMore bool      `json:"has_more"`
}

// RefundList is a page of refunds.
type RefundList struct {
	Object  string   `json:"object"`
	Data    []Refund `json:"data"`
	HasMore bool     `json:"has_more"`
}

// EventList is a page of events.
type EventList struct {
	Object  string  `json:"object"`
	Data    []Event `json:"data"`
	HasMore bool    `json:"has_more"`
}

// WebhookEndpointStatus says whether an endpoint gets deliveries.
type WebhookEndpointStatus string

// Endpoint statuses.
const (
	WebhookEndpointEnabled  WebhookEndpointStatus = "enabled"
	WebhookEndpointDisabled WebhookEndpointStatus = "disabled"
)

// WebhookEndpoint is a URL the gateway delivers events to.
type WebhookEndpoint struct {
	ID     string `json:"id"`
	Object string `json:"object"`
	URL    string `json:"url"`
	// EventTypes are the subscribed types, or "*" for all.
	EventTypes     []string              `json:"event_types"`
	Status         WebhookEndpointStatus `json:"status"`
	Description    string                `json:"description"`
	DisabledReason string                `json:"disabled_reason,omitempty"`
	// Secret (whsec_…) signs the deliveries; only the answers of Create
	// and Rotate carry it, once.
	Secret string `json:"secret,omitempty"`
	// PreviousSecretExpiresAt: after a rotation, the old secret keeps
	// signing beside the new one until then.
	PreviousSecretExpiresAt time.Time `json:"previous_secret_expires_at,omitzero"`
	CreatedAt               time.Time `json:"created_at"`
	UpdatedAt               time.Time `json:"updated_at"`
	// APIVersion is the version its deliveries are rendered in (their
	// Gateway-Version header); one created through this client is in
	// this client's (APIVersion).
	APIVersion string `json:"api_version"`
}

// WebhookEndpointList is all of a merchant's endpoints (never more than
// one page).
type WebhookEndpointList struct {
	Object  string            `json:"object"`
	Data    []WebhookEndpoint `json:"data"`
	HasMore bool              `json:"has_more"`
}

// DeletedWebhookEndpoint answers a deletion.
type DeletedWebhookEndpoint struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Deleted bool   `json:"deleted"`
}

// CreateWebhookEndpointRequest is the body of POST /webhook_endpoints.
type CreateWebhookEndpointRequest struct {
	URL         string   `json:"url"`
	EventTypes  []string `json:"event_types"`
	Description string   `json:"description,omitempty"`
	// APIVersion pins the deliveries to a version; this client's
	// (APIVersion, the version of the request) when empty, which is the
	// one package webhook decodes.
	APIVersion string `json:"api_version,omitempty"`
}

// RotateWebhookSecretRequest is the body of POST
// /webhook_endpoints/{id}/rotate: how long the old secret keeps signing
// beside the new one, 0 to 604800 seconds (the gateway's default when
// nil).
type RotateWebhookSecretRequest struct {
	GracePeriodSeconds *int64 `json:"grace_period_seconds,omitempty"`
}

// Problem is an RFC 9457 problem document, as the gateway answers a
// refusal; calls return it as an *Error.
type Problem struct {
	Type      string       `json:"type"`
	Title     string       `json:"title"`
	Status    int          `json:"status"`
	Detail    string       `json:"detail,omitempty"`
	Instance  string       `json:"instance"`
	RequestID string       `json:"request_id"`
	Errors    []FieldError `json:"errors,omitempty"`
	PaymentID string       `json:"payment_id,omitempty"`
	RefundID  string       `json:"refund_id,omitempty"`
}

// FieldError names an invalid field and why.
type FieldError struct {
	Field  string `json:"field"`
	Reason string `json:"reason"`
}

// WebhookDeliveryStatus is where a delivery, or one attempt of it, stands.
type WebhookDeliveryStatus string

// Delivery statuses; an attempt's Outcome is delivered or failed.
const (
	DeliveryPending   WebhookDeliveryStatus = "pending"
	DeliveryDelivered WebhookDeliveryStatus = "delivered" // an attempt was answered 2xx
	DeliveryFailed    WebhookDeliveryStatus = "failed"    // its retries ran out, or its endpoint was disabled or deleted
)

// WebhookDelivery is one event to deliver to one endpoint, and every
// attempt made of it, oldest first.
type WebhookDelivery struct {
	ID         string `json:"id"`
	Object     string `json:"object"`
	EndpointID string `json:"endpoint_id"`
	EventID    string `json:"event_id"`
	// EventType is "" once the event was purged (past retention).
	EventType    EventType             `json:"event_type"`
	Status       WebhookDeliveryStatus `json:"status"`
	AttemptCount int                   `json:"attempt_count"`
	// NextAttemptAt is when a pending delivery is due next; zero once it
	// ended.
	NextAttemptAt time.Time                `json:"next_attempt_at"`
	DeliveredAt   time.Time                `json:"delivered_at"`
	LastError     string                   `json:"last_error"`
	Attempts      []WebhookDeliveryAttempt `json:"attempts"`
	CreatedAt     time.Time                `json:"created_at"`
}

// WebhookDeliveryAttempt is one POST of a delivery to its endpoint.
type WebhookDeliveryAttempt struct {
	Attempt     int       `json:"attempt"`
	AttemptedAt time.Time `json:"attempted_at"`
	// HTTPStatus is the endpoint's answer; 0 when it answered nothing.
	HTTPStatus    int                   `json:"http_status"`
	LatencyMS     int64                 `json:"latency_ms"`
	Error         string                `json:"error"`
	Outcome       WebhookDeliveryStatus `json:"outcome"`
	NextAttemptAt time.Time             `json:"next_attempt_at"`
}

// WebhookDeliveryList is a page of deliveries, newest first.
type WebhookDeliveryList struct {
	Object  string            `json:"object"`
	Data    []WebhookDelivery `json:"data"`
	HasMore bool              `json:"has_more"`
}

// RedeliverEventRequest is the body of POST /events/{id}/redeliver.
type RedeliverEventRequest struct {
	EndpointID string `json:"endpoint_id"`
}
