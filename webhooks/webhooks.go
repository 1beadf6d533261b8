// Package webhooks owns the pushing of events to merchants' servers: the
// webhook endpoints merchants register (URL, event types, a signing secret
// kept encrypted and rotated with a grace period), the SSRF guard every
// endpoint URL and every connection passes, the signature scheme, and the
// dispatcher that fans each event out into one delivery per subscribed
// endpoint and delivers it at least once, with retries, never letting one
// endpoint hold up another. Its storage is declared here (EndpointStore,
// DispatchStore) and implemented by mysql.
package webhooks

import (
	"encoding/json"
	"slices"
	"time"

	"gateway/payments"
	"gateway/versions"
)

// EndpointStatus says whether an endpoint receives deliveries.
type EndpointStatus string

// An endpoint is enabled until a merchant or ops disable it, or until it has
// failed continuously for too long.
const (
	Enabled  EndpointStatus = "enabled"
	Disabled EndpointStatus = "disabled"
)

// AllEvents subscribes an endpoint to every event type, present and future.
const AllEvents = "*"

// Endpoint is a merchant's webhook endpoint. Its secrets are held encrypted
// (SecretEnc, PrevSecretEnc); only the dispatcher decrypts them, to sign.
type Endpoint struct {
	ID          string
	MerchantID  string
	URL         string
	EventTypes  []string
	Status      EndpointStatus
	Description string
	SecretEnc   []byte
	// PrevSecretEnc is the secret a rotation replaced; it still signs until
	// PrevSecretUntil (zero when there is none).
	PrevSecretEnc   []byte
	PrevSecretUntil time.Time
	// FailingSince is when the current run of failed attempts began (zero
	// after any success).
	FailingSince   time.Time
	DisabledReason string
	// APIVersion is the version its deliveries are rendered in.
	APIVersion string
	CreatedAt  time.Time
	UpdatedAt  time.Time
}

// Subscribes reports whether e wants events of type t.
func (e Endpoint) Subscribes(t string) bool {
	return slices.Contains(e.EventTypes, AllEvents) || slices.Contains(e.EventTypes, t)
}

// EndpointRef names one endpoint.
type EndpointRef struct {
	MerchantID string
	ID         string
}

// DeliveryStatus is where a delivery stands.
type DeliveryStatus string

// A delivery is pending until an attempt is answered 2xx (delivered) or its
// retries run out (failed).
const (
	Pending   DeliveryStatus = "pending"
	Delivered DeliveryStatus = "delivered"
	Failed    DeliveryStatus = "failed"
)

// Delivery is one event to deliver to one endpoint.
type Delivery struct {
	ID               string
	MerchantID       string
	EndpointID       string
	EventID          string
	Status           DeliveryStatus
	Attempts         int
	NextAttemptAt    time.Time
	LeaseToken       int64
	LastHTTPStatus   int
	LastError        string
	FirstDeliveredAt time.Time
	CreatedAt        time.Time
}

// Event is what a delivery carries: one state change of a payment or a
// refund, as the outbox recorded it.
type Event struct {
	ID         string
	MerchantID string
	Type       string
	ObjectType string
	ObjectID   string
	Seq        int64
	Data       json.RawMessage
	// DataVersion is the API version Data is rendered in.
	DataVersion string
	CreatedAt   time.Time
}

// Body renders ev as a delivery's body in API version v: byte for byte
// what GET /events/{id} answers for it in v (payments.EventIn and
// payments.EventJSON render both).
func Body(ev Event, v versions.Version) ([]byte, error) {
	e, err := payments.EventIn(payments.Event{
		ID: ev.ID, MerchantID: ev.MerchantID, Type: payments.EventType(ev.Type), ObjectType: ev.ObjectType,
		ObjectID: ev.ObjectID, Seq: ev.Seq, Data: ev.Data, DataVersion: ev.DataVersion, CreatedAt: ev.CreatedAt,
	}, v)
	if err != nil {
		return nil, err
	}
	return payments.EventJSON(e), nil
}
