package webhooks

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"

	"gateway/errs"
	"gateway/payments"
	"gateway/versions"
)

// EndpointStore keeps endpoints; mysql implements it. Reads of
// one endpoint answer errs.ErrNotFound for an unknown (merchant, id).
type EndpointStore interface {
	// CreateEndpoint stores e, stamped with the database's clock, unless
	// its merchant has max endpoints already: ErrEndpointLimit, nothing
	// stored. The count and the insert are one decision under the
	// merchant's lock, so concurrent creates never pass max together.
	// errs.ErrNotFound when the merchant does not exist.
	CreateEndpoint(ctx context.Context, e Endpoint, max int) (Endpoint, error)
	// Endpoints lists a merchant's endpoints, oldest first.
	Endpoints(ctx context.Context, merchantID string) ([]Endpoint, error)
	// Endpoint reads one endpoint.
	Endpoint(ctx context.Context, merchantID, id string) (Endpoint, error)
	// FindEndpoint reads an endpoint by its id alone (ops).
	FindEndpoint(ctx context.Context, id string) (Endpoint, error)
	// DeleteEndpoint removes an endpoint and fails its pending deliveries.
	DeleteEndpoint(ctx context.Context, merchantID, id string) error
	// RotateSecret makes enc the endpoint's secret and keeps the one it
	// replaces valid for grace (on the database's clock).
	RotateSecret(ctx context.Context, merchantID, id string, enc []byte, grace time.Duration) (Endpoint, error)
	// SetEndpointStatus enables or disables an endpoint (disabling fails its
	// pending deliveries with reason); changed is false when it already was.
	SetEndpointStatus(ctx context.Context, merchantID, id string, status EndpointStatus, reason string) (changed bool, err error)
	// Resend makes a new pending delivery to the endpoint of every event of
	// its merchant created at or after since, and returns how many.
	Resend(ctx context.Context, merchantID, id string, since time.Time) (int, error)
}

// ErrEndpointLimit: the merchant has as many endpoints as it may (CreateEndpoint).
var ErrEndpointLimit = errors.New("webhooks: the merchant has the most endpoints it may have")

// Endpoints manages merchants' endpoints: what the API and the CLI call.
type Endpoints struct {
	st     EndpointStore
	cipher *Cipher
	guard  *Guard
	grace  time.Duration
}

// NewEndpoints returns the endpoint management over st; secrets are sealed
// with c, URLs checked by g, and a rotated secret stays valid for grace.
func NewEndpoints(st EndpointStore, c *Cipher, g *Guard, grace time.Duration) *Endpoints {
	if grace <= 0 {
		grace = DefaultRotationGrace
	}
	return &Endpoints{st: st, cipher: c, guard: g, grace: grace}
}

// EndpointRequest is what registers an endpoint.
type EndpointRequest struct {
	MerchantID  string
	URL         string
	EventTypes  []string
	Description string
	// APIVersion is the version its deliveries are rendered in; empty:
	// the version the request is answered in (the merchant's, or the
	// latest for ops).
	APIVersion string
}

// EndpointIDPrefix begins every endpoint's id, followed by a ULID
// (payments.WellFormedID tells whether text can be one).
const EndpointIDPrefix = "we_"

// Limits of an endpoint's fields.
const (
	MaxEventTypes           = 50
	MaxDescription          = 500
	MaxEndpointsPerMerchant = 16
)

var eventTypeFormat = regexp.MustCompile(`^[a-z_]+\.[a-z_]+$`)

// KnownEventTypes are the types an endpoint may subscribe to besides "*".
var KnownEventTypes = func() []string {
	out := make([]string, 0, len(payments.EventTypes))
	for _, t := range payments.EventTypes {
		out = append(out, string(t))
	}
	return out
}()

func invalid(field, reason string) error {
	return &errs.Error{Code: errs.CodeInvalid, Message: field + " " + reason,
		Fields: []errs.FieldError{{Field: field, Reason: reason}}}
}

// Create registers an endpoint and returns it with its secret, which is
// shown this once.
func (s *Endpoints) Create(ctx context.Context, req EndpointRequest) (Endpoint, string, error) {
	if err := s.guard.CheckURL(ctx, req.URL); err != nil {
		return Endpoint{}, "", invalid("url", err.Error())
	}
	types, err := checkTypes(req.EventTypes)
	if err != nil {
		return Endpoint{}, "", err
	}
	if len(req.Description) > MaxDescription {
		return Endpoint{}, "", invalid("description", fmt.Sprintf("must be at most %d characters", MaxDescription))
	}
	secret, err := NewSecret()
	if err != nil {
		return Endpoint{}, "", storeErr(err)
	}
	v := versions.FromContext(ctx)
	if req.APIVersion != "" {
		if v, err = versions.Parse(req.APIVersion); err != nil {
			return Endpoint{}, "", invalid("api_version", err.Error())
		}
	}
	e := Endpoint{ID: EndpointIDPrefix + ulid.Make().String(), MerchantID: req.MerchantID, URL: req.URL, EventTypes: types,
		Status: Enabled, Description: req.Description, APIVersion: string(v)}
	if e.SecretEnc, err = s.cipher.Seal(e.ID, secret); err != nil {
		return Endpoint{}, "", storeErr(err)
	}
	e, err = s.st.CreateEndpoint(ctx, e, MaxEndpointsPerMerchant)
	switch {
	case errors.Is(err, ErrEndpointLimit):
		return Endpoint{}, "", &errs.Error{Code: errs.CodeConflict,
			Message: fmt.Sprintf("a merchant may have at most %d endpoints: delete one first", MaxEndpointsPerMerchant)}
	case errors.Is(err, errs.ErrNotFound):
		return Endpoint{}, "", &errs.Error{Code: errs.CodeNotFound, Message: "no such merchant"}
	case err != nil:
		return Endpoint{}, "", storeErr(err)
	}
	return e, secret, nil
}

// checkTypes validates and normalises a subscription: known types or "*",
// without repeats, sorted.
func checkTypes(types []string) ([]string, error) {
	if len(types) == 0 {
		return nil, invalid("event_types", `must list at least one event type, or "*" for all`)
	}
	if len(types) > MaxEventTypes {
		return nil, invalid("event_types", fmt.Sprintf("must list at most %d types", MaxEventTypes))
	}
	out := make([]string, 0, len(types))
	for _, t := range types {
		if t != AllEvents && (!eventTypeFormat.MatchString(t) || !slices.Contains(KnownEventTypes, t)) {
			return nil, invalid("event_types", fmt.Sprintf("%q is not an event type; known: %s, or \"*\"", t, strings.Join(KnownEventTypes, ", ")))
		}
		if !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	slices.Sort(out)
	if slices.Contains(out, AllEvents) {
		out = []string{AllEvents}
	}
	return out, nil
}

// List returns a merchant's endpoints.
func (s *Endpoints) List(ctx context.Context, merchantID string) ([]Endpoint, error) {
	es, err := s.st.Endpoints(ctx, merchantID)
	return es, storeErr(err)
}

// Get returns one of a merchant's endpoints.
func (s *Endpoints) Get(ctx context.Context, merchantID, id string) (Endpoint, error) {
	e, err := s.st.Endpoint(ctx, merchantID, id)
	return e, storeErr(err)
}

// Find returns an endpoint by its id alone (ops).
func (s *Endpoints) Find(ctx context.Context, id string) (Endpoint, error) {
	e, err := s.st.FindEndpoint(ctx, id)
	return e, storeErr(err)
}

// Delete removes an endpoint; its pending deliveries fail.
func (s *Endpoints) Delete(ctx context.Context, merchantID, id string) error {
	return storeErr(s.st.DeleteEndpoint(ctx, merchantID, id))
}

// Rotate gives an endpoint a new secret, returned this once; the old one
// keeps signing (beside the new) for grace, or the configured grace when
// grace is nil.
func (s *Endpoints) Rotate(ctx context.Context, merchantID, id string, grace *time.Duration) (Endpoint, string, error) {
	g := s.grace
	if grace != nil {
		if *grace < 0 || *grace > MaxRotationGrace {
			return Endpoint{}, "", invalid("grace_period", fmt.Sprintf("must be between 0s and %s", MaxRotationGrace))
		}
		g = *grace
	}
	if _, err := s.st.Endpoint(ctx, merchantID, id); err != nil {
		return Endpoint{}, "", storeErr(err)
	}
	secret, err := NewSecret()
	if err != nil {
		return Endpoint{}, "", storeErr(err)
	}
	enc, err := s.cipher.Seal(id, secret)
	if err != nil {
		return Endpoint{}, "", storeErr(err)
	}
	e, err := s.st.RotateSecret(ctx, merchantID, id, enc, g)
	if err != nil {
		return Endpoint{}, "", storeErr(err)
	}
	return e, secret, nil
}

// SetEnabled enables or disables an endpoint; disabling fails its pending
// deliveries (resend them once it is enabled again).
func (s *Endpoints) SetEnabled(ctx context.Context, merchantID, id string, enabled bool, reason string) (bool, error) {
	st := Disabled
	if enabled {
		st, reason = Enabled, ""
	}
	changed, err := s.st.SetEndpointStatus(ctx, merchantID, id, st, reason)
	return changed, storeErr(err)
}

// Resend delivers again to an endpoint every event of its merchant since then.
func (s *Endpoints) Resend(ctx context.Context, merchantID, id string, since time.Time) (int, error) {
	e, err := s.st.Endpoint(ctx, merchantID, id)
	if err != nil {
		return 0, storeErr(err)
	}
	if e.Status != Enabled {
		return 0, &errs.Error{Code: errs.CodeConflict, Message: "the endpoint is disabled: enable it first"}
	}
	n, err := s.st.Resend(ctx, merchantID, id, since)
	return n, storeErr(err)
}

// storeErr maps the store's errors to the domain's.
func storeErr(err error) error {
	var pe *errs.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pe):
		return err
	case errors.Is(err, errs.ErrNotFound):
		return &errs.Error{Code: errs.CodeNotFound, Message: "no such webhook endpoint"}
	}
	var u interface{ Unavailable() bool }
	if errors.As(err, &u) && u.Unavailable() {
		return &errs.Error{Code: errs.CodeUnavailable, Message: "the service is temporarily unavailable; retry", RetryAfter: time.Second, Err: err}
	}
	return &errs.Error{Code: errs.CodeInternal, Message: "internal error", Err: err}
}
