package httpapi

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/mailroom/mailroom/internal/authn"
)

// listTokens lists the account's management tokens, revoked and expired
// ones included (is_active false), newest first.
func (h handlers) listTokens(c echo.Context) error {
	tokens, err := h.reads.Tokens(c.Request().Context(), authn.From(c).AccountID)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"data": tokens})
}

func (h handlers) revokeToken(c echo.Context) error {
	if err := h.commands.RevokeToken(c.Request().Context(), authn.From(c).AccountID, c.Param("id"), meta(c)); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}
