package gateway

import (
	"context"
	"iter"
	"net/url"
	"strconv"
)

// WebhookDeliveryService is /webhook_deliveries: the delivery log, kept as
// long as events are.
type WebhookDeliveryService struct{ c *Client }

// Get reads one delivery with its attempts. Errors: CodeNotFound.
func (s *WebhookDeliveryService) Get(ctx context.Context, id string, opts ...CallOption) (*WebhookDelivery, error) {
	p, err := idPath("/webhook_deliveries/", id)
	if err != nil {
		return nil, err
	}
	return getFor[WebhookDelivery](ctx, s.c, p, nil, opts)
}

// DeliveryListParams page a delivery log (newest first).
type DeliveryListParams struct {
	// Limit is the page size, 1 to 100 (10 when 0).
	Limit int
	// StartingAfter walks on from this delivery, toward older ones.
	StartingAfter string
}

// ListDeliveries walks one endpoint's deliveries, newest first. An unknown
// endpoint ends the walk with CodeNotFound.
func (s *WebhookEndpointService) ListDeliveries(ctx context.Context, endpointID string, params *DeliveryListParams, opts ...CallOption) iter.Seq2[WebhookDelivery, error] {
	return deliveries(ctx, s.c, "/webhook_endpoints/", endpointID, params, opts)
}

// ListDeliveries walks one event's deliveries (to each endpoint, and each
// redelivery), newest first. An unknown event ends the walk with
// CodeNotFound.
func (s *EventService) ListDeliveries(ctx context.Context, eventID string, params *DeliveryListParams, opts ...CallOption) iter.Seq2[WebhookDelivery, error] {
	return deliveries(ctx, s.c, "/events/", eventID, params, opts)
}

// Redeliver delivers an event once more to one of the merchant's endpoints
// (enabled, subscribed to its type), due now, under the same event id: a
// receiver that deduplicates acknowledges it without acting twice. One
// delivery per key: a retry answers the delivery the first request made.
// Errors: CodeInvalidRequest (the endpoint does not subscribe to the
// event's type), CodeNotFound, CodeConflict (the endpoint is disabled),
// CodeIdempotencyKeyMismatch, and the transient ones.
func (s *EventService) Redeliver(ctx context.Context, eventID string, req *RedeliverEventRequest, opts ...CallOption) (*WebhookDelivery, error) {
	p, err := idPath("/events/", eventID)
	if err != nil {
		return nil, err
	}
	if req == nil {
		req = &RedeliverEventRequest{}
	}
	return postFor[WebhookDelivery](ctx, s.c, p+"/redeliver", req, opts)
}

func deliveries(ctx context.Context, c *Client, prefix, id string, params *DeliveryListParams, opts []CallOption) iter.Seq2[WebhookDelivery, error] {
	p, err := idPath(prefix, id)
	if err != nil {
		return func(yield func(WebhookDelivery, error) bool) { yield(WebhookDelivery{}, err) }
	}
	q := url.Values{}
	if params != nil {
		if params.Limit != 0 {
			q.Set("limit", strconv.Itoa(params.Limit))
		}
		if params.StartingAfter != "" {
			q.Set("starting_after", params.StartingAfter)
		}
	}
	return paginate(ctx, c, p+"/deliveries", q, false, func(d WebhookDelivery) string { return d.ID }, opts)
}
