package api

import (
	"context"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"gateway/errs"
	"gateway/versions"
	"gateway/webhooks"
)

// WebhookEndpoints manages a merchant's webhook endpoints;
// *webhooks.Endpoints is one. Errors are *errs.Error: CodeInvalid for
// a bad URL (one the SSRF guard refuses included) or event type,
// CodeNotFound for another merchant's or an unknown endpoint, CodeConflict
// past the number of endpoints a merchant may have.
type WebhookEndpoints interface {
	Create(ctx context.Context, req webhooks.EndpointRequest) (webhooks.Endpoint, string, error)
	List(ctx context.Context, merchantID string) ([]webhooks.Endpoint, error)
	Get(ctx context.Context, merchantID, id string) (webhooks.Endpoint, error)
	Delete(ctx context.Context, merchantID, id string) error
	Rotate(ctx context.Context, merchantID, id string, grace *time.Duration) (webhooks.Endpoint, string, error)
}

// endpointView is a webhook endpoint as the API shows it. Secret is there
// only in the answers that made it (creation, rotation): it is never shown
// again.
type endpointView struct {
	ID                      string   `json:"id"`
	Object                  string   `json:"object"`
	URL                     string   `json:"url"`
	EventTypes              []string `json:"event_types"`
	Status                  string   `json:"status"`
	Description             string   `json:"description"`
	DisabledReason          string   `json:"disabled_reason,omitempty"`
	Secret                  string   `json:"secret,omitempty"`
	PreviousSecretExpiresAt string   `json:"previous_secret_expires_at,omitempty"`
	APIVersion              string   `json:"api_version"`
	CreatedAt               string   `json:"created_at"`
	UpdatedAt               string   `json:"updated_at"`
}

func toEndpointView(e webhooks.Endpoint, secret string) endpointView {
	v := endpointView{ID: e.ID, Object: "webhook_endpoint", URL: e.URL, EventTypes: e.EventTypes, Status: string(e.Status),
		Description: e.Description, DisabledReason: e.DisabledReason, Secret: secret, APIVersion: string(versions.OrFirst(e.APIVersion)),
		CreatedAt: e.CreatedAt.UTC().Format(time.RFC3339Nano), UpdatedAt: e.UpdatedAt.UTC().Format(time.RFC3339Nano)}
	if !e.PrevSecretUntil.IsZero() && len(e.PrevSecretEnc) > 0 {
		v.PreviousSecretExpiresAt = e.PrevSecretUntil.UTC().Format(time.RFC3339Nano)
	}
	return v
}

type createEndpointBody struct {
	URL         *string  `json:"url,omitzero"`
	EventTypes  []string `json:"event_types,omitzero"`
	Description *string  `json:"description,omitzero"`
	APIVersion  *string  `json:"api_version,omitzero"`
}

type rotateBody struct {
	GracePeriodSeconds *int64 `json:"grace_period_seconds,omitzero"`
}

func (s *Server) webhookEndpoints() (WebhookEndpoints, error) {
	if s.opts.Webhooks == nil {
		return nil, &errs.Error{Code: errs.CodeNotFound, Message: "webhooks are not enabled on this gateway"}
	}
	return s.opts.Webhooks, nil
}

func (s *Server) handleCreateEndpoint(c echo.Context) error {
	w, err := s.webhookEndpoints()
	if err != nil {
		return err
	}
	var body createEndpointBody
	if err := s.decodeBody(c, &body); err != nil {
		return err
	}
	if body.URL == nil {
		return &errs.Error{Code: errs.CodeInvalid, Message: "url is required",
			Fields: []errs.FieldError{{Field: "url", Reason: "is required"}}}
	}
	req := webhooks.EndpointRequest{MerchantID: merchantOf(c).ID, URL: *body.URL, EventTypes: body.EventTypes}
	if body.Description != nil {
		req.Description = *body.Description
	}
	if body.APIVersion != nil {
		if *body.APIVersion == "" {
			return &errs.Error{Code: errs.CodeInvalid, Message: "api_version must name a version",
				Fields: []errs.FieldError{{Field: "api_version", Reason: "must name a version"}}}
		}
		req.APIVersion = *body.APIVersion
	}
	ep, secret, err := w.Create(c.Request().Context(), req)
	if err != nil {
		return err
	}
	c.Response().Header().Set(echo.HeaderLocation, "/webhook_endpoints/"+ep.ID)
	c.Response().Header().Set("Cache-Control", "no-store") // it holds the secret
	return c.JSON(http.StatusCreated, toEndpointView(ep, secret))
}

func (s *Server) handleListEndpoints(c echo.Context) error {
	w, err := s.webhookEndpoints()
	if err != nil {
		return err
	}
	if len(c.QueryParams()) > 0 {
		return &errs.Error{Code: errs.CodeInvalid, Message: "this listing takes no query parameters"}
	}
	eps, err := w.List(c.Request().Context(), merchantOf(c).ID)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, listOf(eps, false, func(e webhooks.Endpoint) endpointView { return toEndpointView(e, "") }))
}

func (s *Server) handleGetEndpoint(c echo.Context) error {
	w, err := s.webhookEndpoints()
	if err != nil {
		return err
	}
	ep, err := w.Get(c.Request().Context(), merchantOf(c).ID, c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toEndpointView(ep, ""))
}

// deletedView answers a deletion.
type deletedView struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Deleted bool   `json:"deleted"`
}

func (s *Server) handleDeleteEndpoint(c echo.Context) error {
	w, err := s.webhookEndpoints()
	if err != nil {
		return err
	}
	id := c.Param("id")
	if err := w.Delete(c.Request().Context(), merchantOf(c).ID, id); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, deletedView{ID: id, Object: "webhook_endpoint", Deleted: true})
}

func (s *Server) handleRotateEndpoint(c echo.Context) error {
	w, err := s.webhookEndpoints()
	if err != nil {
		return err
	}
	var body rotateBody
	if c.Request().ContentLength != 0 {
		if err := s.decodeBody(c, &body); err != nil {
			return err
		}
	}
	var grace *time.Duration
	if secs := body.GracePeriodSeconds; secs != nil {
		// Bounded before it is multiplied: a large count of seconds would
		// overflow into a short grace (18446744073709552 s is 384 ns).
		if *secs < 0 || *secs > int64(webhooks.MaxRotationGrace/time.Second) {
			return &errs.Error{Code: errs.CodeInvalid, Message: "grace_period_seconds must be between 0 and 604800",
				Fields: []errs.FieldError{{Field: "grace_period_seconds", Reason: "must be between 0 and 604800"}}}
		}
		g := time.Duration(*secs) * time.Second
		grace = &g
	}
	ep, secret, err := w.Rotate(c.Request().Context(), merchantOf(c).ID, c.Param("id"), grace)
	if err != nil {
		return err
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusOK, toEndpointView(ep, secret))
}
