package httpapi

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/mailroom/mailroom/internal/apitime"
	"github.com/mailroom/mailroom/internal/authn"
	"github.com/mailroom/mailroom/internal/httpserver"
)

func (h handlers) listAPIKeys(c echo.Context) error {
	keys, err := h.reads.APIKeys(c.Request().Context(), authn.From(c).AccountID)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"data": keys})
}

type createAPIKeyRequest struct {
	Name        string             `json:"name"`
	Permissions httpserver.Strings `json:"permissions"`
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
	k, err := h.commands.CreateAPIKey(c.Request().Context(), authn.From(c).AccountID, req.Name, req.Permissions, meta(c))
	if err != nil {
		return err
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
	if err := h.commands.RevokeAPIKey(c.Request().Context(), authn.From(c).AccountID, c.Param("id"), meta(c)); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}
