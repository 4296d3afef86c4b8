// Package authn authenticates requests: API keys on /v1 routes, management
// tokens on /api routes. Credentials are looked up by hash in the read models
// on every request, so a revocation is seen by every instance as soon as its
// projection has been written.
package authn

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/mailroom/mailroom/internal/credential"
	"github.com/mailroom/mailroom/internal/httpserver"
	"github.com/mailroom/mailroom/readapi"
)

// Kind of credential.
type Kind string

const (
	APIKey Kind = "api_key"
	Token  Kind = "token"
)

// Principal is the authenticated caller.
type Principal struct {
	Kind        Kind
	ID          string // key or token id
	AccountID   string
	Permissions []string // API keys
	Role        string   // tokens
	Suspended   bool     // the account is suspended
}

// Actor names the principal in event metadata.
func (p Principal) Actor() string { return string(p.Kind) + ":" + p.ID }

// Can reports whether an API key holds permission.
func (p Principal) Can(permission string) bool {
	for _, have := range p.Permissions {
		if have == permission {
			return true
		}
	}
	return false
}

// Authenticator looks credentials up.
type Authenticator struct {
	pool *pgxpool.Pool
	log  *slog.Logger
	now  func() time.Time

	mu       sync.Mutex
	lastSeen map[string]time.Time // key or token id → last_used last written
}

// New returns an Authenticator over the read models in pool.
func New(pool *pgxpool.Pool, log *slog.Logger, now func() time.Time) *Authenticator {
	return &Authenticator{pool: pool, log: log, now: now, lastSeen: map[string]time.Time{}}
}

var errUnknown = errors.New("unknown credential")

func (a *Authenticator) apiKey(ctx context.Context, secret string) (Principal, error) {
	c, err := readapi.APIKeyByHash(ctx, a.pool, credential.Hash(secret))
	return principal(APIKey, c, err)
}

func (a *Authenticator) token(ctx context.Context, secret string) (Principal, error) {
	c, err := readapi.TokenByHash(ctx, a.pool, credential.Hash(secret), a.now())
	return principal(Token, c, err)
}

func principal(kind Kind, c readapi.Credential, err error) (Principal, error) {
	if errors.Is(err, readapi.ErrNotFound) {
		return Principal{Kind: kind}, errUnknown
	}
	return Principal{Kind: kind, ID: c.ID, AccountID: c.AccountID, Permissions: c.Permissions, Role: c.Role, Suspended: c.Suspended}, err
}

// usageTables are where each kind's last use is kept.
var usageTables = map[Kind]string{
	APIKey: `INSERT INTO api_key_usage (key_id, last_used) VALUES ($1, $2)
		ON CONFLICT (key_id) DO UPDATE SET last_used = GREATEST(api_key_usage.last_used, $2)`,
	Token: `INSERT INTO management_token_usage (token_id, last_used) VALUES ($1, $2)
		ON CONFLICT (token_id) DO UPDATE SET last_used = GREATEST(management_token_usage.last_used, $2)`,
}

// touch records that a credential was used, at most about once a minute
// per credential, without holding up the request.
func (a *Authenticator) touch(p Principal) {
	now := a.now()
	a.mu.Lock()
	if now.Sub(a.lastSeen[p.ID]) < time.Minute {
		a.mu.Unlock()
		return
	}
	a.lastSeen[p.ID] = now
	if len(a.lastSeen) > 100_000 { // bound memory; the worst case is an extra write
		clear(a.lastSeen)
	}
	a.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := a.pool.Exec(ctx, usageTables[p.Kind], p.ID, now); err != nil {
			a.log.Warn("recording credential use", "kind", p.Kind, "id", p.ID, "err", err)
			// The next use tries again rather than a minute later.
			a.mu.Lock()
			if a.lastSeen[p.ID].Equal(now) {
				delete(a.lastSeen, p.ID)
			}
			a.mu.Unlock()
		}
	}()
}

const principalKey = "mailroom.principal"

// From returns the request's principal; routes behind a middleware of this
// package always have one.
func From(c echo.Context) Principal {
	p, _ := c.Get(principalKey).(Principal)
	return p
}

// bearer extracts the credential of an "Authorization: Bearer" header.
// The header is sent once: with two, a proxy reading the other one would
// see another caller than the server does.
func bearer(c echo.Context) (string, error) {
	hs := c.Request().Header.Values(echo.HeaderAuthorization)
	if len(hs) > 1 {
		return "", httpserver.Unauthorized("more than one Authorization header; send one")
	}
	if len(hs) == 0 || hs[0] == "" {
		return "", httpserver.Unauthorized("missing Authorization header; send Authorization: Bearer <key>")
	}
	h := hs[0]
	scheme, secret, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(secret) == "" {
		return "", httpserver.Unauthorized("malformed Authorization header; want Bearer <key>")
	}
	return strings.TrimSpace(secret), nil
}

// APIKeys authenticates /v1 requests. Management tokens are refused there.
// A suspended account gets 403 on every route.
func (a *Authenticator) APIKeys() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			secret, err := bearer(c)
			if err != nil {
				return err
			}
			if strings.HasPrefix(secret, credential.TokenPrefix) {
				return httpserver.Unauthorized("management tokens are not accepted on /v1 routes; use an API key")
			}
			if !credential.WellFormed(secret, credential.APIKeyPrefix) {
				return httpserver.Unauthorized("malformed API key; want mr_ followed by the letters and digits shown when the key was created")
			}
			p, err := a.apiKey(c.Request().Context(), secret)
			if errors.Is(err, errUnknown) {
				return httpserver.Unauthorized("unknown or revoked API key")
			}
			if err != nil {
				return err
			}
			if p.Suspended {
				return httpserver.Forbidden("account_suspended", "the account is suspended")
			}
			a.touch(p)
			c.Set(principalKey, p)
			httpserver.AddLogAttrs(c, slog.String("account_id", p.AccountID), slog.String("credential", p.Actor()))
			return next(c)
		}
	}
}

// Tokens authenticates /api requests with management tokens. API keys are
// refused there, and so are revoked and expired tokens. A suspended account
// may read but not write.
func (a *Authenticator) Tokens() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			secret, err := bearer(c)
			if err != nil {
				return err
			}
			if strings.HasPrefix(secret, credential.APIKeyPrefix) {
				return httpserver.Unauthorized("API keys are not accepted on /api routes; use a management token")
			}
			if !credential.WellFormed(secret, credential.TokenPrefix) {
				return httpserver.Unauthorized("malformed management token; want mrt_ followed by the letters and digits shown when the token was created")
			}
			p, err := a.token(c.Request().Context(), secret)
			if errors.Is(err, errUnknown) {
				return httpserver.Unauthorized("unknown, revoked or expired management token")
			}
			if err != nil {
				return err
			}
			if p.Suspended && !readOnly(c.Request().Method) {
				return httpserver.Forbidden("account_suspended", "the account is suspended; it may read but not change anything")
			}
			a.touch(p)
			c.Set(principalKey, p)
			httpserver.AddLogAttrs(c, slog.String("account_id", p.AccountID), slog.String("credential", p.Actor()))
			return next(c)
		}
	}
}

func readOnly(method string) bool {
	return method == http.MethodGet || method == http.MethodHead || method == http.MethodOptions
}

// Require lets through API keys holding every permission.
func Require(permissions ...string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			p := From(c)
			for _, perm := range permissions {
				if !p.Can(perm) {
					detail := "this API key lacks the " + perm + " permission"
					if len(permissions) > 1 {
						detail = "this route needs an API key with " + strings.Join(permissions, " and ") + "; this one lacks " + perm
					}
					return httpserver.Forbidden("permission_denied", detail)
				}
			}
			return next(c)
		}
	}
}

// RequireAdmin lets through org:admin tokens only.
func RequireAdmin() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if From(c).Role != "org:admin" {
				return httpserver.Forbidden("role_required", "this operation needs an org:admin token")
			}
			return next(c)
		}
	}
}

// RateKey keys the rate limiter by principal.
func RateKey(c echo.Context) string {
	p := From(c)
	if p.ID == "" {
		return ""
	}
	return p.ID
}
