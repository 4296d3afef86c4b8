package authn

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/mailroom/mailroom/internal/httpserver"
)

// answer serves one request to GET and POST /x behind mw and returns its
// status and problem detail ("" for a 204).
func answer(t *testing.T, method string, header http.Header, mw ...echo.MiddlewareFunc) (int, httpserver.Problem) {
	t.Helper()
	e := httpserver.New(httpserver.Options{Logger: slog.New(slog.DiscardHandler)})
	e.Match([]string{http.MethodGet, http.MethodPost}, "/x", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) }, mw...)
	req := httptest.NewRequest(method, "/x", nil)
	for k, vs := range header {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	var p httpserver.Problem
	if rec.Code != http.StatusNoContent {
		if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
			t.Fatalf("%d %s: %v", rec.Code, rec.Body, err)
		}
	}
	return rec.Code, p
}

// as is a middleware that authenticates every request as p.
func as(p Principal) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			c.Set(principalKey, p)
			return next(c)
		}
	}
}

func bearerHeader(values ...string) http.Header { return http.Header{"Authorization": values} }

var (
	wellFormedKey   = "mr_" + strings.Repeat("a", 40)
	wellFormedToken = "mrt_" + strings.Repeat("a", 40)
)

// What an Authorization header must be, and which credential each route
// family takes, is decided before any lookup (this Authenticator has no
// database: a lookup would fail the test).
func TestCredentialsRefusedBeforeAnyLookup(t *testing.T) {
	a := &Authenticator{}
	for _, c := range []struct {
		name   string
		header http.Header
		mw     echo.MiddlewareFunc
		detail string
	}{
		{"no header", nil, a.APIKeys(), "missing Authorization header; send Authorization: Bearer <key>"},
		{"an empty header", bearerHeader(""), a.APIKeys(), "missing Authorization header; send Authorization: Bearer <key>"},
		{"two headers", bearerHeader("Bearer "+wellFormedKey, "Bearer "+wellFormedKey), a.APIKeys(), "more than one Authorization header; send one"},
		{"another scheme", bearerHeader("Basic " + wellFormedKey), a.APIKeys(), "malformed Authorization header; want Bearer <key>"},
		{"no space", bearerHeader("Bearer" + wellFormedKey), a.APIKeys(), "malformed Authorization header; want Bearer <key>"},
		{"no secret", bearerHeader("Bearer   "), a.APIKeys(), "malformed Authorization header; want Bearer <key>"},
		{"a token on /v1", bearerHeader("Bearer " + wellFormedToken), a.APIKeys(), "management tokens are not accepted on /v1 routes; use an API key"},
		{"a short key", bearerHeader("Bearer mr_" + strings.Repeat("a", 31)), a.APIKeys(), "malformed API key"},
		{"a key on /api", bearerHeader("Bearer " + wellFormedKey), a.Tokens(), "API keys are not accepted on /api routes; use a management token"},
		{"a token of another alphabet", bearerHeader("Bearer mrt_" + strings.Repeat("a", 39) + "!"), a.Tokens(), "malformed management token"},
	} {
		status, p := answer(t, http.MethodGet, c.header, c.mw)
		if status != http.StatusUnauthorized || p.Detail != c.detail {
			t.Errorf("%s: %d %q, want 401 %q", c.name, status, p.Detail, c.detail)
		}
	}
}

// The scheme is read in any case and the secret without the spaces around it.
func TestBearerSchemeInAnyCase(t *testing.T) {
	for _, h := range []string{"Bearer " + wellFormedKey, "bearer " + wellFormedKey, "BEARER  " + wellFormedKey + " "} {
		e := echo.New()
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set("Authorization", h)
		got, err := bearer(e.NewContext(req, httptest.NewRecorder()))
		if err != nil || got != wellFormedKey {
			t.Errorf("%q: %q, %v", h, got, err)
		}
	}
}

// A route needing several permissions lets through only a key holding
// every one, and names the one missing.
func TestRequireEveryPermission(t *testing.T) {
	both := Principal{Kind: APIKey, ID: "k", Permissions: []string{"emails:send", "domains:write"}}
	if status, p := answer(t, http.MethodGet, nil, as(both), Require("emails:send", "domains:write")); status != http.StatusNoContent {
		t.Errorf("a key with both permissions: %d %+v", status, p)
	}
	one := Principal{Kind: APIKey, ID: "k", Permissions: []string{"emails:send"}}
	status, p := answer(t, http.MethodGet, nil, as(one), Require("emails:send", "domains:write"))
	if status != http.StatusForbidden || p.Code != "permission_denied" || p.Detail != "this route needs an API key with emails:send and domains:write; this one lacks domains:write" {
		t.Errorf("a key with one of two permissions: %d %+v", status, p)
	}
	status, p = answer(t, http.MethodGet, nil, as(Principal{Kind: APIKey, ID: "k", Permissions: []string{"domains:write"}}), Require("emails:send"))
	if status != http.StatusForbidden || p.Detail != "this API key lacks the emails:send permission" {
		t.Errorf("a key without the permission: %d %+v", status, p)
	}
}

// Only an org:admin token passes RequireAdmin.
func TestRequireAdminTakesOrgAdminTokensOnly(t *testing.T) {
	for role, want := range map[string]int{"org:admin": http.StatusNoContent, "org:member": http.StatusForbidden, "": http.StatusForbidden, "ORG:ADMIN": http.StatusForbidden} {
		status, p := answer(t, http.MethodPost, nil, as(Principal{Kind: Token, ID: "t", Role: role}), RequireAdmin())
		if status != want || (want == http.StatusForbidden && p.Code != "role_required") {
			t.Errorf("role %q: %d %+v, want %d", role, status, p, want)
		}
	}
}
