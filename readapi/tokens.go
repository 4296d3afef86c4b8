package readapi

import (
	"context"
	"time"

	"github.com/mailroom/mailroom/internal/apitime"
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

// Tokens lists an account's management tokens, revoked and expired ones
// included (IsActive false), newest first.
func (r *Reader) Tokens(ctx context.Context, accountID string) ([]Token, error) {
	rows, err := r.pool.Query(ctx, `
		SELECT t.id, t.role, t.created_at, t.expires_at, t.revoked_at, u.last_used
		FROM management_tokens t LEFT JOIN management_token_usage u ON u.token_id = t.id
		WHERE t.account_id = $1
		ORDER BY t.created_at DESC, t.id DESC`, accountID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	now := r.now()
	tokens := []Token{}
	for rows.Next() {
		var t Token
		var created time.Time
		var expires, revoked, lastUsed *time.Time
		if err := rows.Scan(&t.ID, &t.Role, &created, &expires, &revoked, &lastUsed); err != nil {
			return nil, err
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
	return tokens, rows.Err()
}
