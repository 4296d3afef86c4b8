package readapi

import (
	"context"
	"time"

	"github.com/mailroom/mailroom/internal/apitime"
)

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

// APIKeys lists an account's API keys, revoked ones included, newest first.
func (r *Reader) APIKeys(ctx context.Context, accountID string) ([]APIKey, error) {
	rows, err := r.pool.Query(ctx, `
		SELECT k.id, k.name, k.key_preview, k.permissions, k.is_active, k.created_at, u.last_used
		FROM api_keys k LEFT JOIN api_key_usage u ON u.key_id = k.id
		WHERE k.account_id = $1
		ORDER BY k.created_at DESC, k.id DESC`, accountID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	keys := []APIKey{}
	for rows.Next() {
		var k APIKey
		var created time.Time
		var lastUsed *time.Time
		if err := rows.Scan(&k.ID, &k.Name, &k.KeyPreview, &k.Permissions, &k.IsActive, &created, &lastUsed); err != nil {
			return nil, err
		}
		k.CreatedAt = apitime.Of(created)
		if lastUsed != nil {
			k.LastUsed = apitime.Of(*lastUsed)
		}
		keys = append(keys, k)
	}
	return keys, rows.Err()
}
