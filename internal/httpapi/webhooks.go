package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/mailroom/mailroom/domain/webhook"
	"github.com/mailroom/mailroom/internal/apitime"
	"github.com/mailroom/mailroom/internal/authn"
	"github.com/mailroom/mailroom/internal/httpserver"
	"github.com/mailroom/mailroom/readapi"
)

func (h handlers) listWebhooks(c echo.Context) error {
	list, err := h.reads.WebhookEndpoints(c.Request().Context(), authn.From(c).AccountID)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"data": list, "event_types": webhook.EventTypes})
}

func (h handlers) getWebhook(c echo.Context) error {
	e, err := h.reads.WebhookEndpoint(c.Request().Context(), authn.From(c).AccountID, c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, e)
}

type webhookRequest struct {
	URL         *string             `json:"url"`
	Description *string             `json:"description"`
	EventTypes  *httpserver.Strings `json:"event_types"`
	IsActive    *bool               `json:"is_active"`
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
	st, secret, err := h.commands.CreateWebhook(ctx, acct, req.settings(), meta(c))
	if err != nil {
		return err
	}
	// A new endpoint is all in its creation: the answer, which is the
	// only one to carry the secret, never depends on the read side
	// having caught up.
	return c.JSON(http.StatusCreated, struct {
		readapi.WebhookEndpoint
		Secret string `json:"secret"`
	}{newEndpoint(st), secret})
}

// newEndpoint is the view of an endpoint just created: active, with no
// delivery yet.
func newEndpoint(st webhook.State) readapi.WebhookEndpoint {
	return readapi.WebhookEndpoint{
		ID: st.ID, URL: st.URL, Description: st.Description, EventTypes: st.EventTypes, IsActive: true,
		CreatedAt: apitime.Of(st.CreatedAt), UpdatedAt: apitime.Of(st.CreatedAt),
	}
}

func (h handlers) updateWebhook(c echo.Context) error {
	ctx := c.Request().Context()
	acct := authn.From(c).AccountID
	// The endpoint first: another account's id is a 404 whatever the body
	// holds, and its body is not even read.
	if err := h.commands.OwnWebhook(ctx, acct, c.Param("id")); err != nil {
		return err
	}
	var req webhookRequest
	if err := httpserver.BindJSON(c, &req); err != nil {
		return err
	}
	if err := h.commands.UpdateWebhook(ctx, acct, c.Param("id"), req.settings(), req.IsActive, meta(c)); err != nil {
		return err
	}
	view, err := h.writtenEndpoint(ctx, acct, c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, view)
}

// writtenEndpoint reads the endpoint a write has just recorded, to answer
// with it. An endpoint deleted meanwhile by another request is gone, a
// 404 like any; otherwise not finding it is the server's failure, never
// the client's 404, so the read side's not-found is not passed on as such.
func (h handlers) writtenEndpoint(ctx context.Context, accountID, id string) (readapi.WebhookEndpoint, error) {
	e, err := h.reads.WebhookEndpoint(ctx, accountID, id)
	if err == nil {
		return e, nil
	}
	if gone := h.commands.OwnWebhook(ctx, accountID, id); gone != nil {
		return e, gone
	}
	return e, fmt.Errorf("reading webhook endpoint %s after a write: %v", id, err)
}

func (h handlers) deleteWebhook(c echo.Context) error {
	if err := h.commands.DeleteWebhook(c.Request().Context(), authn.From(c).AccountID, c.Param("id"), meta(c)); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

func (h handlers) rotateWebhookSecret(c echo.Context) error {
	secret, err := h.commands.RotateWebhookSecret(c.Request().Context(), authn.From(c).AccountID, c.Param("id"), meta(c))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]string{"id": c.Param("id"), "secret": secret})
}

func (h handlers) testWebhook(c echo.Context) error {
	id, err := h.commands.TestWebhook(c.Request().Context(), authn.From(c).AccountID, c.Param("id"), meta(c))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusAccepted, map[string]string{"delivery_id": id, "status": "pending"})
}

func (h handlers) listDeliveries(c echo.Context) error {
	ctx := c.Request().Context()
	acct := authn.From(c).AccountID
	id := c.Param("id")
	// The endpoint first: another account's id is a 404 whatever the query.
	if _, err := h.reads.WebhookEndpoint(ctx, acct, id); err != nil {
		return err
	}
	limit, limitErr := httpserver.QueryInt(c, "limit", 25, 100)
	status, statusErr := httpserver.Query(c, "status")
	switch status {
	case "", "pending", "delivered", "failed":
	default:
		statusErr = &httpserver.FieldError{Field: "status", Message: "must be pending, delivered or failed"}
	}
	after, afterErr := httpserver.Query(c, "after")
	after = canonicalIDs([]string{after})[0]
	if err := validationOf(limitErr, statusErr, afterErr); err != nil {
		return err
	}
	page, err := h.reads.Deliveries(ctx, acct, id, readapi.DeliveryFilter{Status: status, Limit: limit, After: after})
	if errors.Is(err, readapi.ErrNoSuchDelivery) {
		return validationOf(&httpserver.FieldError{Field: "after", Message: "names no delivery of this endpoint"})
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, deliveryList{Data: page.Deliveries, HasMore: page.HasMore})
}

// deliveryList is a page of deliveries; has_more says the next page, asked
// with after= the last id of this one, is not empty.
type deliveryList struct {
	Data    []readapi.Delivery `json:"data"`
	HasMore bool               `json:"has_more"`
}
