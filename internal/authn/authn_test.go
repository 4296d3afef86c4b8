package authn

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mailroom/mailroom/internal/credential"
	"github.com/mailroom/mailroom/internal/httpserver"
	"github.com/mailroom/mailroom/internal/pgtest"
	"github.com/mailroom/mailroom/projections"
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
		{"an empty header before another", bearerHeader("", "Bearer "+wellFormedKey), a.APIKeys(), "more than one Authorization header; send one"},
		{"another scheme", bearerHeader("Basic " + wellFormedKey), a.APIKeys(), "malformed Authorization header; want Bearer <key>"},
		{"no space", bearerHeader("Bearer" + wellFormedKey), a.APIKeys(), "malformed Authorization header; want Bearer <key>"},
		{"no secret", bearerHeader("Bearer   "), a.APIKeys(), "malformed Authorization header; want Bearer <key>"},
		{"a token on /v1", bearerHeader("Bearer " + wellFormedToken), a.APIKeys(), "management tokens are not accepted on /v1 routes; use an API key"},
		{"a short key", bearerHeader("Bearer mr_" + strings.Repeat("a", 31)), a.APIKeys(), "malformed API key; want mr_ followed by the letters and digits shown when the key was created"},
		{"a key on /api", bearerHeader("Bearer " + wellFormedKey), a.Tokens(), "API keys are not accepted on /api routes; use a management token"},
		{"a token of another alphabet", bearerHeader("Bearer mrt_" + strings.Repeat("a", 39) + "!"), a.Tokens(), "malformed management token; want mrt_ followed by the letters and digits shown when the token was created"},
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

// lookups is an Authenticator over real read models holding, for account
// acct_live and the suspended acct_held: an API key and a token each, and
// for acct_live a revoked key, a revoked token and a token expiring at
// expiry.
func lookups(t *testing.T, now, expiry time.Time) *Authenticator {
	t.Helper()
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	for _, schema := range []string{projections.Accounts{}.Schema(), projections.APIKeys{}.Schema()} {
		if _, err := pool.Exec(ctx, schema); err != nil {
			t.Fatal(err)
		}
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	for id, status := range map[string]string{"acct_live": "active", "acct_held": "suspended"} {
		exec(`INSERT INTO accounts (id, name, status, created_at, updated_at) VALUES ($1, $1, $2, $3, $3)`, id, status, now)
	}
	key := func(id, account, secret string, active bool) {
		exec(`INSERT INTO api_keys (id, account_id, name, key_preview, key_hash, permissions, is_active, created_at)
			VALUES ($1, $2, $1, 'mr_…', $3, '{emails:send}', $4, $5)`, id, account, credential.Hash(secret), active, now)
	}
	token := func(id, account, secret string, expires, revoked *time.Time) {
		exec(`INSERT INTO management_tokens (id, account_id, role, token_hash, created_at, expires_at, revoked_at)
			VALUES ($1, $2, 'org:admin', $3, $4, $5, $6)`, id, account, credential.Hash(secret), now, expires, revoked)
	}
	key("key_live", "acct_live", secret("mr_", "live"), true)
	key("key_revoked", "acct_live", secret("mr_", "revoked"), false)
	key("key_held", "acct_held", secret("mr_", "held"), true)
	token("tok_live", "acct_live", secret("mrt_", "live"), nil, nil)
	token("tok_revoked", "acct_live", secret("mrt_", "revoked"), nil, &now)
	token("tok_expiring", "acct_live", secret("mrt_", "expiring"), &expiry, nil)
	token("tok_held", "acct_held", secret("mrt_", "held"), nil, nil)
	return New(pool, slog.New(slog.DiscardHandler), func() time.Time { return now })
}

// secret is a well-formed secret with prefix, told apart by name.
func secret(prefix, name string) string {
	return prefix + name + strings.Repeat("x", 40-len(name))
}

// whoami answers the principal's account and id behind mw.
func whoami(t *testing.T, method, secret string, mw echo.MiddlewareFunc) (int, string) {
	t.Helper()
	e := httpserver.New(httpserver.Options{Logger: slog.New(slog.DiscardHandler)})
	e.Match([]string{http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPost, http.MethodDelete}, "/x", func(c echo.Context) error {
		p := From(c)
		return c.String(http.StatusOK, p.AccountID+" "+p.Actor())
	}, mw)
	req := httptest.NewRequest(method, "/x", nil)
	req.Header.Set("Authorization", "Bearer "+secret)
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

// A credential is the account it belongs to; a revoked one, or a token
// at or past its expiry, is unknown; a suspended account's API keys are
// refused everything and its tokens may only read.
func TestCredentialsLookedUp(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	a := lookups(t, now, now.Add(time.Second))
	for _, c := range []struct {
		method, secret string
		mw             echo.MiddlewareFunc
		status         int
		body           string
	}{
		{"POST", secret("mr_", "live"), a.APIKeys(), 200, "acct_live api_key:key_live"},
		{"GET", secret("mr_", "revoked"), a.APIKeys(), 401, "unknown or revoked API key"},
		{"GET", secret("mr_", "unknown"), a.APIKeys(), 401, "unknown or revoked API key"},
		{"GET", secret("mr_", "held"), a.APIKeys(), 403, "account_suspended"},
		{"POST", secret("mrt_", "live"), a.Tokens(), 200, "acct_live token:tok_live"},
		{"POST", secret("mrt_", "expiring"), a.Tokens(), 200, "acct_live token:tok_expiring"},
		{"GET", secret("mrt_", "revoked"), a.Tokens(), 401, "unknown, revoked or expired management token"},
		{"GET", secret("mrt_", "held"), a.Tokens(), 200, "acct_held token:tok_held"},
		{"HEAD", secret("mrt_", "held"), a.Tokens(), 200, ""},
		{"OPTIONS", secret("mrt_", "held"), a.Tokens(), 200, "acct_held token:tok_held"},
		{"POST", secret("mrt_", "held"), a.Tokens(), 403, "account_suspended"},
		{"DELETE", secret("mrt_", "held"), a.Tokens(), 403, "account_suspended"},
	} {
		status, body := whoami(t, c.method, c.secret, c.mw)
		if status != c.status || !strings.Contains(body, c.body) {
			t.Errorf("%s with %s: %d %s, want %d %s", c.method, c.secret[:strings.Index(c.secret, "x")], status, body, c.status, c.body)
		}
	}

	// At its expiry, a token is expired.
	a = lookups(t, now, now)
	if status, body := whoami(t, "GET", secret("mrt_", "expiring"), a.Tokens()); status != 401 {
		t.Errorf("a token at its expiry: %d %s", status, body)
	}
}

// A last use that could not be recorded is recorded at the next use, not
// a minute later: last_used is written at most about once a minute, but
// not skipped for a minute after a failed write.
func TestAFailedLastUseIsWrittenAtTheNextUse(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	a := New(pool, slog.New(slog.DiscardHandler), func() time.Time { return now })
	if _, err := pool.Exec(ctx, "ALTER TABLE api_key_usage RENAME TO api_key_usage_away"); err != nil {
		t.Fatal(err)
	}
	a.touch(Principal{Kind: APIKey, ID: "k1"})
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		a.mu.Lock()
		_, pending := a.lastSeen["k1"]
		a.mu.Unlock()
		if !pending {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the failed write is still taken for a recorded one")
		}
	}
	if _, err := pool.Exec(ctx, "ALTER TABLE api_key_usage_away RENAME TO api_key_usage"); err != nil {
		t.Fatal(err)
	}
	a.touch(Principal{Kind: APIKey, ID: "k1"})
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM api_key_usage WHERE key_id = 'k1'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the next use did not record last_used")
		}
	}
}
