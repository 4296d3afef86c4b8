// Package httpapi is Mailroom's public HTTP API: every route of /api and
// /v1, its handler, and the one mapping of refusals to problem details.
// Handlers parse the request, call the commands or the read side, and
// answer; they return refusals as they are, and problemOf turns them into
// problems for every route alike.
package httpapi

import (
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain/sendingdomain"
	"github.com/mailroom/mailroom/internal/authn"
	"github.com/mailroom/mailroom/internal/httpserver"
	"github.com/mailroom/mailroom/internal/views"
	"github.com/mailroom/mailroom/readapi"
)

// Deps are what the API serves from.
type Deps struct {
	Commands *commands.Service
	Reads    *readapi.Reader
	// RenderDomain shows a domain as the API does.
	RenderDomain func(sendingdomain.State) views.Domain
	// DefaultRetentionDays is the retention of accounts that set none.
	DefaultRetentionDays int
	// Now is the clock that tells today.
	Now func() time.Time
}

// Routes mounts every route of the API. api is the /api group
// (management tokens), v1 the /v1 group (API keys); both authenticate and
// rate-limit before any route's own permission check.
func Routes(d Deps, api, v1 *echo.Group) {
	h := handlers{commands: d.Commands, reads: d.Reads, renderDomain: d.RenderDomain, now: d.Now, defaultRetention: d.DefaultRetentionDays}
	admin := authn.RequireAdmin()
	send := authn.Require("emails:send")
	read := authn.Require("emails:read")
	both := authn.Require("emails:send", "emails:read")
	for _, r := range []struct {
		group   *echo.Group
		method  string
		path    string
		handler echo.HandlerFunc
		require echo.MiddlewareFunc // nil: any credential of the group
	}{
		{api, http.MethodGet, "/auth/api-keys", h.listAPIKeys, nil},
		{api, http.MethodPost, "/auth/api-keys", h.createAPIKey, nil},
		{api, http.MethodDelete, "/auth/api-keys/:id", h.revokeAPIKey, nil},

		{api, http.MethodGet, "/account", h.getAccount, nil},
		{api, http.MethodPatch, "/account", h.updateAccount, admin},
		{api, http.MethodPost, "/erasures", h.createErasure, admin},

		{api, http.MethodGet, "/auth/tokens", h.listTokens, admin},
		{api, http.MethodDelete, "/auth/tokens/:id", h.revokeToken, admin},

		{api, http.MethodGet, "/domains", h.listDomains, nil},
		{api, http.MethodPost, "/domains", h.addDomain, nil},
		{api, http.MethodGet, "/domains/:id", h.getDomain, nil},
		{api, http.MethodPost, "/domains/:id/verify", h.verifyDomain, nil},
		{api, http.MethodPost, "/domains/:id/upgrade", h.upgradeDomain, nil},
		{api, http.MethodPost, "/domains/:id/rotate", h.rotateDomain, admin},
		{api, http.MethodDelete, "/domains/:id", h.removeDomain, admin},

		{api, http.MethodGet, "/stats/daily", h.dailyStats, nil},

		{v1, http.MethodPost, "/emails/send", h.sendEmail, send},
		{v1, http.MethodGet, "/emails", h.listEmails, read},
		{v1, http.MethodGet, "/emails/:id", h.getEmail, read},

		{v1, http.MethodGet, "/webhooks", h.listWebhooks, both},
		{v1, http.MethodPost, "/webhooks", h.createWebhook, both},
		{v1, http.MethodGet, "/webhooks/:id", h.getWebhook, both},
		{v1, http.MethodPatch, "/webhooks/:id", h.updateWebhook, both},
		{v1, http.MethodDelete, "/webhooks/:id", h.deleteWebhook, both},
		{v1, http.MethodPost, "/webhooks/:id/rotate-secret", h.rotateWebhookSecret, both},
		{v1, http.MethodPost, "/webhooks/:id/test", h.testWebhook, both},
		{v1, http.MethodGet, "/webhooks/:id/deliveries", h.listDeliveries, both},
	} {
		var mw []echo.MiddlewareFunc
		if r.require != nil {
			mw = append(mw, r.require)
		}
		methods := []string{r.method}
		if r.method == http.MethodGet {
			methods = httpserver.ReadMethods
		}
		r.group.Match(methods, r.path, answering(r.handler, resourceOf(r.path)), mw...)
	}
}

// resourceOf names what a route's :id is, for its 404s: every route of one
// resource says "no such webhook endpoint", whichever layer found nothing.
func resourceOf(path string) string {
	for prefix, name := range map[string]string{
		"/auth/api-keys/": "API key",
		"/auth/tokens/":   "management token",
		"/domains/":       "domain",
		"/emails/":        "email",
		"/webhooks/":      "webhook endpoint",
	} {
		if strings.HasPrefix(path, prefix+":id") {
			return name
		}
	}
	return "resource"
}

type handlers struct {
	commands     *commands.Service
	reads        *readapi.Reader
	renderDomain func(sendingdomain.State) views.Domain
	now          func() time.Time

	defaultRetention int
}

// meta is who asks, and on which request, for the events a command records.
func meta(c echo.Context) commands.Meta {
	ids := httpserver.RequestIDsOf(c)
	return commands.Meta{Actor: authn.From(c).Actor(), RequestID: ids.Server, ClientRequestID: ids.Client}
}
