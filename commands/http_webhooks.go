package commands

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/mailroom/mailroom/domain/webhook"
	"github.com/mailroom/mailroom/internal/authn"
	"github.com/mailroom/mailroom/internal/httpserver"
	"github.com/mailroom/mailroom/readapi"
)

func webhookRoutes(h handlers, v1 *echo.Group) {
	both := authn.Require("emails:send", "emails:read")
	v1.POST("/webhooks", h.createWebhook, both)
	v1.PATCH("/webhooks/:id", h.updateWebhook, both)
	v1.DELETE("/webhooks/:id", h.deleteWebhook, both)
	v1.POST("/webhooks/:id/rotate-secret", h.rotateWebhookSecret, both)
	v1.POST("/webhooks/:id/test", h.testWebhook, both)
}

type webhookRequest struct {
	URL         *string   `json:"url"`
	Description *string   `json:"description"`
	EventTypes  *[]string `json:"event_types"`
	IsActive    *bool     `json:"is_active"`
}

func (r webhookRequest) settings() webhook.Settings {
	s := webhook.Settings{URL: r.URL, Description: r.Description}
	if r.EventTypes != nil {
		s.EventTypes, s.TypesGiven = *r.EventTypes, true
		if s.EventTypes == nil {
			s.EventTypes = []string{}
		}
	}
	return s
}

func (h handlers) createWebhook(c echo.Context) error {
	var req webhookRequest
	if err := httpserver.BindJSON(c, &req); err != nil {
		return err
	}
	ctx := c.Request().Context()
	acct := authn.From(c).AccountID
	st, secret, err := h.s.CreateWebhook(ctx, acct, req.settings(), meta(c))
	if err != nil {
		return problem(err)
	}
	view, err := h.views.Endpoint(ctx, acct, st.ID)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, struct {
		readapi.WebhookEndpoint
		Secret string `json:"secret"`
	}{view, secret})
}

func (h handlers) updateWebhook(c echo.Context) error {
	ctx := c.Request().Context()
	acct := authn.From(c).AccountID
	// The endpoint first: another account's id is a 404 whatever the body
	// holds, and its body is not even read.
	if err := h.s.OwnWebhook(ctx, acct, c.Param("id")); err != nil {
		return problem(err)
	}
	var req webhookRequest
	if err := httpserver.BindJSON(c, &req); err != nil {
		return err
	}
	if err := h.s.UpdateWebhook(ctx, acct, c.Param("id"), req.settings(), req.IsActive, meta(c)); err != nil {
		return problem(err)
	}
	view, err := h.views.Endpoint(ctx, acct, c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, view)
}

func (h handlers) deleteWebhook(c echo.Context) error {
	if err := h.s.DeleteWebhook(c.Request().Context(), authn.From(c).AccountID, c.Param("id"), meta(c)); err != nil {
		return problem(err)
	}
	return c.NoContent(http.StatusNoContent)
}

func (h handlers) rotateWebhookSecret(c echo.Context) error {
	secret, err := h.s.RotateWebhookSecret(c.Request().Context(), authn.From(c).AccountID, c.Param("id"), meta(c))
	if err != nil {
		return problem(err)
	}
	return c.JSON(http.StatusOK, map[string]string{"id": c.Param("id"), "secret": secret})
}

func (h handlers) testWebhook(c echo.Context) error {
	id, err := h.s.TestWebhook(c.Request().Context(), authn.From(c).AccountID, c.Param("id"), meta(c))
	if err != nil {
		return problem(err)
	}
	return c.JSON(http.StatusAccepted, map[string]string{"delivery_id": id, "status": "pending"})
}
