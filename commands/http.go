package commands

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/sendingdomain"
	"github.com/mailroom/mailroom/internal/apitime"
	"github.com/mailroom/mailroom/internal/authn"
	"github.com/mailroom/mailroom/internal/httpserver"
	"github.com/mailroom/mailroom/internal/views"
	"github.com/mailroom/mailroom/readapi"
)

// Views render the resources that write routes answer with.
type Views struct {
	Domain   func(sendingdomain.State) views.Domain
	Endpoint func(ctx context.Context, accountID, id string) (readapi.WebhookEndpoint, error)
}

// Routes mounts the write routes. api is the /api group (management tokens),
// v1 the /v1 group (API keys).
func Routes(s *Service, v Views, api, v1 *echo.Group) {
	h := handlers{s: s, views: v}
	webhookRoutes(h, v1)
	api.POST("/auth/api-keys", h.createAPIKey)
	api.DELETE("/auth/api-keys/:id", h.revokeAPIKey)
	api.DELETE("/auth/tokens/:id", h.revokeToken, authn.RequireAdmin())

	v1.POST("/emails/send", h.sendEmail, authn.Require("emails:send"))

	api.POST("/domains", h.addDomain)
	api.POST("/domains/:id/verify", h.verifyDomain)
	api.POST("/domains/:id/upgrade", h.upgradeDomain)
	api.POST("/domains/:id/rotate", h.rotateDomain, authn.RequireAdmin())
	api.DELETE("/domains/:id", h.removeDomain, authn.RequireAdmin())
}

type handlers struct {
	s     *Service
	views Views
}

func meta(c echo.Context) Meta {
	ids := httpserver.RequestIDsOf(c)
	return Meta{Actor: authn.From(c).Actor(), RequestID: ids.Server, ClientRequestID: ids.Client}
}

// problem translates a domain refusal into its HTTP problem.
func problem(err error) error {
	var v *domain.ValidationError
	var conflict *domain.ConflictError
	var forbidden *domain.ForbiddenError
	var limit *LimitError
	switch {
	case errors.As(err, &v):
		fields := make([]httpserver.FieldError, len(v.Errors))
		for i, f := range v.Errors {
			fields[i] = httpserver.FieldError{Field: f.Field, Message: f.Message}
		}
		return httpserver.Validation(fields...)
	case errors.As(err, &conflict):
		return httpserver.Conflict(conflict.Code, conflict.Detail)
	case errors.As(err, &forbidden):
		return httpserver.Forbidden(forbidden.Code, forbidden.Detail)
	case errors.Is(err, domain.ErrNotFound):
		return httpserver.NotFound("no such resource")
	case errors.As(err, &limit):
		return httpserver.LimitExceeded(limit.Detail)
	case errors.Is(err, ErrNotVisible):
		p := httpserver.NewProblem(http.StatusServiceUnavailable, "not_yet_visible", err.Error())
		p.RetryAfter = time.Second
		return p
	}
	return err
}

type createAPIKeyRequest struct {
	Name        string   `json:"name"`
	Permissions []string `json:"permissions"`
}

// APIKeyCreated is the 201 body: the only time the full key is shown.
type APIKeyCreated struct {
	ID          string       `json:"id"`
	Name        string       `json:"name"`
	Key         string       `json:"key"`
	KeyPreview  string       `json:"key_preview"`
	Permissions []string     `json:"permissions"`
	IsActive    bool         `json:"is_active"`
	CreatedAt   apitime.Time `json:"created_at"`
}

func (h handlers) createAPIKey(c echo.Context) error {
	var req createAPIKeyRequest
	if err := httpserver.BindJSON(c, &req); err != nil {
		return err
	}
	k, err := h.s.CreateAPIKey(c.Request().Context(), authn.From(c).AccountID, req.Name, req.Permissions, meta(c))
	if err != nil {
		return problem(err)
	}
	perms := make([]string, len(k.Created.Permissions))
	for i, p := range k.Created.Permissions {
		perms[i] = string(p)
	}
	return c.JSON(http.StatusCreated, APIKeyCreated{
		ID: k.Created.KeyID, Name: k.Created.Name, Key: k.Key, KeyPreview: k.Created.KeyPreview,
		Permissions: perms, IsActive: true, CreatedAt: apitime.Of(k.Created.CreatedAt),
	})
}

func (h handlers) revokeAPIKey(c echo.Context) error {
	if err := h.s.RevokeAPIKey(c.Request().Context(), authn.From(c).AccountID, c.Param("id"), meta(c)); err != nil {
		return problem(err)
	}
	return c.NoContent(http.StatusNoContent)
}

func (h handlers) revokeToken(c echo.Context) error {
	if err := h.s.RevokeToken(c.Request().Context(), authn.From(c).AccountID, c.Param("id"), meta(c)); err != nil {
		return problem(err)
	}
	return c.NoContent(http.StatusNoContent)
}

type addDomainRequest struct {
	Domain string `json:"domain"`
}

func (h handlers) addDomain(c echo.Context) error {
	var req addDomainRequest
	if err := httpserver.BindJSON(c, &req); err != nil {
		return err
	}
	st, err := h.s.AddDomain(c.Request().Context(), authn.From(c).AccountID, req.Domain, meta(c))
	if err != nil {
		return problem(err)
	}
	return c.JSON(http.StatusCreated, h.views.Domain(st))
}

func (h handlers) verifyDomain(c echo.Context) error {
	st, check, err := h.s.VerifyDomain(c.Request().Context(), authn.From(c).AccountID, c.Param("id"), meta(c))
	if err != nil {
		return problem(err)
	}
	return c.JSON(http.StatusOK, struct {
		views.Domain
		DNSCheck DNSCheck `json:"dns_check"`
	}{h.views.Domain(st), check})
}

func (h handlers) rotateDomain(c echo.Context) error {
	st, err := h.s.RotateDKIM(c.Request().Context(), authn.From(c).AccountID, c.Param("id"), meta(c))
	if err != nil {
		return problem(err)
	}
	return c.JSON(http.StatusOK, h.views.Domain(st))
}

func (h handlers) upgradeDomain(c echo.Context) error {
	st, err := h.s.UpgradeDKIM(c.Request().Context(), authn.From(c).AccountID, c.Param("id"), meta(c))
	if err != nil {
		return problem(err)
	}
	return c.JSON(http.StatusOK, h.views.Domain(st))
}

func (h handlers) removeDomain(c echo.Context) error {
	if err := h.s.RemoveDomain(c.Request().Context(), authn.From(c).AccountID, c.Param("id"), meta(c)); err != nil {
		return problem(err)
	}
	return c.NoContent(http.StatusNoContent)
}

type sendRequest struct {
	From        string                  `json:"from"`
	To          httpserver.StringOrList `json:"to"`
	Cc          httpserver.StringOrList `json:"cc"`
	Bcc         httpserver.StringOrList `json:"bcc"`
	ReplyTo     httpserver.StringOrList `json:"reply_to"`
	Subject     string                  `json:"subject"`
	HTML        string                  `json:"html"`
	Text        string                  `json:"text"`
	Tags        map[string]string       `json:"tags"`
	Attachments []SendAttachment        `json:"attachments"`
}

func (h handlers) sendEmail(c echo.Context) error {
	var req sendRequest
	body, err := httpserver.ReadJSON(c, &req)
	if err != nil {
		return err
	}
	acc, err := h.s.SendEmail(c.Request().Context(), authn.From(c).AccountID, SendEmail{
		From: req.From, To: req.To, Cc: req.Cc, Bcc: req.Bcc, ReplyTo: req.ReplyTo, Subject: req.Subject,
		HTML: req.HTML, Text: req.Text, Tags: req.Tags, Attachments: req.Attachments,
	}, c.Request().Header.Get("Idempotency-Key"), body, meta(c))
	if err != nil {
		return problem(err)
	}
	return c.JSON(http.StatusAccepted, map[string]any{
		"id": acc.ID, "status": "queued", "created_at": apitime.Of(acc.CreatedAt),
		"recipients": acc.Recipients, "attachments": acc.Attachments,
	})
}
