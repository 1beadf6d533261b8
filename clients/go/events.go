package gateway

import (
	"context"
	"iter"
	"net/url"
	"strconv"
)

// EventService is /events: every change of a payment or a refund, kept
// for the gateway's event retention (30 days by default).
type EventService struct{ c *Client }

// Get reads one event. Errors: CodeNotFound.
func (s *EventService) Get(ctx context.Context, id string, opts ...CallOption) (*Event, error) {
	p, err := idPath("/events/", id)
	if err != nil {
		return nil, err
	}
	return getFor[Event](ctx, s.c, p, nil, opts)
}

// List walks the merchant's events oldest first, in the order the gateway
// found them committed: keep the last event id applied and walk on from
// it (StartingAfter) to see every event exactly once. An error ends the
// walk: it is yielded once, with a zero Event.
func (s *EventService) List(ctx context.Context, params *EventListParams, opts ...CallOption) iter.Seq2[Event, error] {
	q := url.Values{}
	if params != nil {
		if params.Limit != 0 {
			q.Set("limit", strconv.Itoa(params.Limit))
		}
		if params.StartingAfter != "" {
			q.Set("starting_after", params.StartingAfter)
		}
		if params.Type != "" {
			q.Set("type", string(params.Type))
		}
		if params.ObjectID != "" {
			q.Set("object_id", params.ObjectID)
		}
	}
	return paginate(ctx, s.c, "/events", q, false, func(e Event) string { return e.ID }, opts)
}

// EventListParams narrow and page GET /events.
type EventListParams struct {
	// Limit is the page size, 1 to 100 (10 when 0).
	Limit int
	// StartingAfter is the last event already applied.
	StartingAfter string
	Type          EventType
	// ObjectID keeps one payment's or refund's events (pay_…, re_…).
	ObjectID string
}
