package httpapi

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/internal/authn"
	"github.com/mailroom/mailroom/internal/httpserver"
	"github.com/mailroom/mailroom/internal/views"
)

func (h handlers) listDomains(c echo.Context) error {
	states, err := h.reads.Domains(c.Request().Context(), authn.From(c).AccountID)
	if err != nil {
		return err
	}
	out := make([]views.Domain, len(states))
	for i, st := range states {
		out[i] = h.renderDomain(st)
	}
	return c.JSON(http.StatusOK, map[string]any{"data": out, "total": len(out)})
}

func (h handlers) getDomain(c echo.Context) error {
	st, err := h.reads.Domain(c.Request().Context(), authn.From(c).AccountID, c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, h.renderDomain(st))
}

type addDomainRequest struct {
	Domain string `json:"domain"`
}

func (h handlers) addDomain(c echo.Context) error {
	var req addDomainRequest
	if err := httpserver.BindJSON(c, &req); err != nil {
		return err
	}
	st, err := h.commands.AddDomain(c.Request().Context(), authn.From(c).AccountID, req.Domain, meta(c))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, h.renderDomain(st))
}

func (h handlers) verifyDomain(c echo.Context) error {
	st, check, err := h.commands.VerifyDomain(c.Request().Context(), authn.From(c).AccountID, c.Param("id"), meta(c))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, struct {
		views.Domain
		DNSCheck commands.DNSCheck `json:"dns_check"`
	}{h.renderDomain(st), check})
}

func (h handlers) rotateDomain(c echo.Context) error {
	st, err := h.commands.RotateDKIM(c.Request().Context(), authn.From(c).AccountID, c.Param("id"), meta(c))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, h.renderDomain(st))
}

func (h handlers) upgradeDomain(c echo.Context) error {
	st, err := h.commands.UpgradeDKIM(c.Request().Context(), authn.From(c).AccountID, c.Param("id"), meta(c))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, h.renderDomain(st))
}

func (h handlers) removeDomain(c echo.Context) error {
	if err := h.commands.RemoveDomain(c.Request().Context(), authn.From(c).AccountID, c.Param("id"), meta(c)); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}
