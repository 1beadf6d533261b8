package gateway

import (
	"context"
	"errors"
)

// WebhookEndpointService is /webhook_endpoints: where the gateway pushes
// events (package webhook receives them).
//
// The gateway does not deduplicate Create and Rotate by their
// Idempotency-Key, so an attempt whose answer was lost is not sent again
// (a second rotation would end the first one's grace): they are retried
// only after a 429 or a connection never made. Their *Error then
// IsRetryable; List tells what exists.
type WebhookEndpointService struct{ c *Client }

// Create registers an endpoint; its answer carries the signing secret
// (whsec_…), which is never shown again. Errors: CodeInvalidRequest (a URL
// that is not a public http(s) address, an unknown event type),
// CodeConflict (the merchant has the most endpoints it may), CodeNotFound
// (webhooks are not enabled on this gateway).
func (s *WebhookEndpointService) Create(ctx context.Context, req *CreateWebhookEndpointRequest, opts ...CallOption) (*WebhookEndpoint, error) {
	if req == nil {
		return nil, errors.New("gateway: WebhookEndpoints.Create: nil request")
	}
	return s.post(ctx, "/webhook_endpoints", req, opts)
}

// Get reads an endpoint (never its secret). Errors: CodeNotFound.
func (s *WebhookEndpointService) Get(ctx context.Context, id string, opts ...CallOption) (*WebhookEndpoint, error) {
	p, err := idPath("/webhook_endpoints/", id)
	if err != nil {
		return nil, err
	}
	return getFor[WebhookEndpoint](ctx, s.c, p, nil, opts)
}

// List reads all of the merchant's endpoints (at most 16: one page).
func (s *WebhookEndpointService) List(ctx context.Context, opts ...CallOption) ([]WebhookEndpoint, error) {
	l, err := getFor[WebhookEndpointList](ctx, s.c, "/webhook_endpoints", nil, opts)
	if err != nil {
		return nil, err
	}
	return l.Data, nil
}

// Delete removes an endpoint; its pending deliveries fail. Errors:
// CodeNotFound (none, or deleted already: a retry whose first attempt's
// answer was lost finds it so).
func (s *WebhookEndpointService) Delete(ctx context.Context, id string, opts ...CallOption) (*DeletedWebhookEndpoint, error) {
	p, err := idPath("/webhook_endpoints/", id)
	if err != nil {
		return nil, err
	}
	return deleteFor[DeletedWebhookEndpoint](ctx, s.c, p, opts)
}

// Rotate gives the endpoint a new secret, in the answer only; the old one
// keeps signing beside it until PreviousSecretExpiresAt (req nil: the
// gateway's default grace). Errors: CodeInvalidRequest, CodeNotFound.
func (s *WebhookEndpointService) Rotate(ctx context.Context, id string, req *RotateWebhookSecretRequest, opts ...CallOption) (*WebhookEndpoint, error) {
	p, err := idPath("/webhook_endpoints/", id)
	if err != nil {
		return nil, err
	}
	if req == nil {
		req = &RotateWebhookSecretRequest{}
	}
	return s.post(ctx, p+"/rotate", req, opts)
}

func (s *WebhookEndpointService) post(ctx context.Context, path string, body any, opts []CallOption) (*WebhookEndpoint, error) {
	cl, err := s.c.post(path, body, false, opts)
	if err != nil {
		return nil, err
	}
	var out WebhookEndpoint
	if err := s.c.do(ctx, cl, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
