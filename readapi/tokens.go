package readapi

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/mailroom/mailroom/internal/apitime"
	"github.com/mailroom/mailroom/internal/authn"
)

// Token is a management token as listed: never the secret or its hash.
type Token struct {
	ID        string       `json:"id"`
	Role      string       `json:"role"`
	IsActive  bool         `json:"is_active"`
	CreatedAt apitime.Time `json:"created_at"`
	ExpiresAt apitime.Time `json:"expires_at"`
	RevokedAt apitime.Time `json:"revoked_at"`
	LastUsed  apitime.Time `json:"last_used"`
}

// listTokens lists the account's management tokens, revoked and expired
// ones included (is_active false), newest first.
func (r reader) listTokens(c echo.Context) error {
	rows, err := r.pool.Query(c.Request().Context(), `
		SELECT t.id, t.role, t.created_at, t.expires_at, t.revoked_at, u.last_used
		FROM management_tokens t LEFT JOIN management_token_usage u ON u.token_id = t.id
		WHERE t.account_id = $1
		ORDER BY t.created_at DESC, t.id DESC`, authn.From(c).AccountID)
	if err != nil {
		return err
	}
	defer rows.Close()
	now := r.now()
	tokens := []Token{}
	for rows.Next() {
		var t Token
		var created time.Time
		var expires, revoked, lastUsed *time.Time
		if err := rows.Scan(&t.ID, &t.Role, &created, &expires, &revoked, &lastUsed); err != nil {
			return err
		}
		t.CreatedAt = apitime.Of(created)
		t.IsActive = revoked == nil && (expires == nil || expires.After(now))
		for _, f := range []struct {
			dst *apitime.Time
			src *time.Time
		}{{&t.ExpiresAt, expires}, {&t.RevokedAt, revoked}, {&t.LastUsed, lastUsed}} {
			if f.src != nil {
				*f.dst = apitime.Of(*f.src)
			}
		}
		tokens = append(tokens, t)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"data": tokens})
}
