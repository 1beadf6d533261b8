package api

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"gateway/errs"
	"gateway/idemkeys"
	"gateway/webhooks"
)

// DeliveryLog answers a merchant's webhook deliveries and redeliveries;
// *webhooks.Log is one.
type DeliveryLog interface {
	Deliveries(ctx context.Context, q webhooks.DeliveryQuery) ([]webhooks.DeliveryLog, bool, error)
	Redeliver(ctx context.Context, r webhooks.Redelivery) (webhooks.DeliveryLog, bool, error)
	Delivery(ctx context.Context, merchantID, id string) (webhooks.DeliveryLog, error)
}

// deliveryView is a delivery as the API shows it: one event to one
// endpoint, where it stands, and every attempt made of it.
type deliveryView struct {
	ID            string        `json:"id"`
	Object        string        `json:"object"`
	EndpointID    string        `json:"endpoint_id"`
	EventID       string        `json:"event_id"`
	EventType     *string       `json:"event_type"`
	Status        string        `json:"status"`
	AttemptCount  int           `json:"attempt_count"`
	NextAttemptAt *string       `json:"next_attempt_at"`
	DeliveredAt   *string       `json:"delivered_at"`
	LastError     *string       `json:"last_error"`
	Attempts      []attemptView `json:"attempts"`
	CreatedAt     string        `json:"created_at"`
}

type attemptView struct {
	Attempt       int     `json:"attempt"`
	AttemptedAt   string  `json:"attempted_at"`
	HTTPStatus    *int    `json:"http_status"`
	LatencyMS     int64   `json:"latency_ms"`
	Error         *string `json:"error"`
	Outcome       string  `json:"outcome"`
	NextAttemptAt *string `json:"next_attempt_at"`
}

func timeOrNil(t time.Time) *string {
	if t.IsZero() {
		return nil
	}
	s := t.UTC().Format(time.RFC3339Nano)
	return &s
}

func stringOrNil(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func toDeliveryView(d webhooks.DeliveryLog) deliveryView {
	v := deliveryView{ID: d.ID, Object: "webhook_delivery", EndpointID: d.EndpointID, EventID: d.EventID,
		EventType: stringOrNil(d.EventType), Status: string(d.Status), AttemptCount: d.Attempts,
		DeliveredAt: timeOrNil(d.FirstDeliveredAt), LastError: stringOrNil(d.LastError),
		Attempts: make([]attemptView, 0, len(d.Log)), CreatedAt: d.CreatedAt.UTC().Format(time.RFC3339Nano)}
	if d.Status == webhooks.Pending {
		v.NextAttemptAt = timeOrNil(d.NextAttemptAt)
	}
	for _, a := range d.Log {
		av := attemptView{Attempt: a.Number, AttemptedAt: a.At.UTC().Format(time.RFC3339Nano),
			LatencyMS: (a.Latency + time.Millisecond/2).Milliseconds(), Error: stringOrNil(a.Error), Outcome: string(a.Outcome),
			NextAttemptAt: timeOrNil(a.NextAttemptAt)}
		if a.HTTPStatus != 0 {
			status := a.HTTPStatus
			av.HTTPStatus = &status
		}
		v.Attempts = append(v.Attempts, av)
	}
	return v
}

func (s *Server) deliveryLog() (DeliveryLog, error) {
	if s.opts.Deliveries == nil {
		return nil, &errs.Error{Code: errs.CodeNotFound, Message: "webhooks are not enabled on this gateway"}
	}
	return s.opts.Deliveries, nil
}

// deliveryParams are the query parameters of the delivery listings.
var deliveryParams = map[string]bool{"limit": true, "starting_after": true}

// handleEndpointDeliveries answers GET /webhook_endpoints/{id}/deliveries
// and handleEventDeliveries GET /events/{id}/deliveries: the deliveries,
// newest first, each with its attempts.
func (s *Server) handleEndpointDeliveries(c echo.Context) error {
	return s.listDeliveries(c, webhooks.DeliveryQuery{MerchantID: merchantOf(c).ID, EndpointID: c.Param("id")})
}

func (s *Server) handleEventDeliveries(c echo.Context) error {
	return s.listDeliveries(c, webhooks.DeliveryQuery{MerchantID: merchantOf(c).ID, EventID: c.Param("id")})
}

func (s *Server) listDeliveries(c echo.Context, q webhooks.DeliveryQuery) error {
	log, err := s.deliveryLog()
	if err != nil {
		return err
	}
	var fields []errs.FieldError
	params := c.QueryParams()
	for name, vs := range params {
		switch {
		case !deliveryParams[name]:
			fields = append(fields, errs.FieldError{Field: name, Reason: "is not a parameter of this listing"})
		case len(vs) != 1:
			fields = append(fields, errs.FieldError{Field: name, Reason: "must be given once"})
		}
	}
	if v := firstValue(params, "limit"); v != "" {
		n, err := strconv.Atoi(v)
		switch {
		case err != nil:
			fields = append(fields, errs.FieldError{Field: "limit", Reason: "must be an integer"})
		case n == 0:
			q.Limit = -1 // 0 is not a page size
		default:
			q.Limit = n
		}
	}
	if len(fields) > 0 {
		return &errs.Error{Code: errs.CodeInvalid, Message: "invalid listing query", Fields: fields}
	}
	q.StartingAfter = firstValue(params, "starting_after")
	ds, more, err := log.Deliveries(c.Request().Context(), q)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, listOf(ds, more, toDeliveryView))
}

// handleGetDelivery answers GET /webhook_deliveries/{id}.
func (s *Server) handleGetDelivery(c echo.Context) error {
	log, err := s.deliveryLog()
	if err != nil {
		return err
	}
	d, err := log.Delivery(c.Request().Context(), merchantOf(c).ID, c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toDeliveryView(d))
}

type redeliverBody struct {
	EndpointID *string `json:"endpoint_id,omitzero"`
}

// handleRedeliver answers POST /events/{id}/redeliver: one more delivery
// of the event to one endpoint, made once per Idempotency-Key (a retry
// answers the delivery as it stands now, with Idempotent-Replayed).
func (s *Server) handleRedeliver(c echo.Context) error {
	log, err := s.deliveryLog()
	if err != nil {
		return err
	}
	key, err := s.idempotencyKey(c, "one per redelivery")
	if err != nil {
		return err
	}
	if err := idemkeys.ValidateKey(key); err != nil {
		return &errs.Error{Code: errs.CodeInvalidKey, Message: err.Error()}
	}
	var body redeliverBody
	if err := s.decodeBody(c, &body); err != nil {
		return err
	}
	if body.EndpointID == nil {
		return &errs.Error{Code: errs.CodeInvalid, Message: "endpoint_id is required",
			Fields: []errs.FieldError{{Field: "endpoint_id", Reason: "is required"}}}
	}
	if !endpointIDs.names(*body.EndpointID) {
		return &errs.Error{Code: errs.CodeNotFound, Message: "webhook endpoint not found"}
	}
	d, replayed, err := log.Redeliver(c.Request().Context(), webhooks.Redelivery{MerchantID: merchantOf(c).ID,
		EventID: c.Param("id"), EndpointID: *body.EndpointID, Key: key})
	if err != nil {
		return err
	}
	status := http.StatusCreated
	c.Response().Header().Set(echo.HeaderLocation, "/webhook_deliveries/"+d.ID)
	if replayed {
		status = http.StatusOK
		c.Response().Header().Set("Idempotent-Replayed", "true")
	}
	return c.JSON(status, toDeliveryView(d))
}
