// Package readapi serves every GET route from the read models. It never
// reads the event store.
package readapi

import (
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/mailroom/mailroom/domain/sendingdomain"
	"github.com/mailroom/mailroom/internal/apitime"
	"github.com/mailroom/mailroom/internal/authn"
	"github.com/mailroom/mailroom/internal/httpserver"
	"github.com/mailroom/mailroom/internal/views"
)

// Routes mounts the read routes on the /api and /v1 groups. render shows a
// domain as the API does; now is the clock that decides expiry.
func Routes(pool *pgxpool.Pool, render func(sendingdomain.State) views.Domain, now func() time.Time, api, v1 *echo.Group) {
	r := reader{pool: pool, domain: render, now: now}
	api.GET("/auth/api-keys", r.listAPIKeys)
	api.GET("/auth/tokens", r.listTokens, authn.RequireAdmin())
	api.GET("/domains", r.listDomains)
	api.GET("/domains/:id", r.getDomain)
	v1.GET("/emails", r.listEmails, authn.Require("emails:read"))
	v1.GET("/emails/:id", r.getEmail, authn.Require("emails:read"))
	both := authn.Require("emails:send", "emails:read")
	v1.GET("/webhooks", r.listWebhooks, both)
	v1.GET("/webhooks/:id", r.getWebhook, both)
	v1.GET("/webhooks/:id/deliveries", r.listDeliveries, both)
}

type reader struct {
	pool   *pgxpool.Pool
	domain func(sendingdomain.State) views.Domain
	now    func() time.Time
}

// APIKey is a key as listed: never the secret.
type APIKey struct {
	ID          string       `json:"id"`
	Name        string       `json:"name"`
	KeyPreview  string       `json:"key_preview"`
	Permissions []string     `json:"permissions"`
	IsActive    bool         `json:"is_active"`
	CreatedAt   apitime.Time `json:"created_at"`
	LastUsed    apitime.Time `json:"last_used"`
}

func (r reader) listAPIKeys(c echo.Context) error {
	rows, err := r.pool.Query(c.Request().Context(), `
		SELECT k.id, k.name, k.key_preview, k.permissions, k.is_active, k.created_at, u.last_used
		FROM api_keys k LEFT JOIN api_key_usage u ON u.key_id = k.id
		WHERE k.account_id = $1
		ORDER BY k.created_at DESC, k.id DESC`, authn.From(c).AccountID)
	if err != nil {
		return err
	}
	defer rows.Close()
	keys := []APIKey{}
	for rows.Next() {
		var k APIKey
		var created time.Time
		var lastUsed *time.Time
		if err := rows.Scan(&k.ID, &k.Name, &k.KeyPreview, &k.Permissions, &k.IsActive, &created, &lastUsed); err != nil {
			return err
		}
		k.CreatedAt = apitime.Of(created)
		if lastUsed != nil {
			k.LastUsed = apitime.Of(*lastUsed)
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"data": keys})
}

// validationOf collects query-parameter errors into one 422.
func validationOf(errs ...*httpserver.FieldError) error {
	var out []httpserver.FieldError
	for _, e := range errs {
		if e != nil {
			out = append(out, *e)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return httpserver.Validation(out...)
}
