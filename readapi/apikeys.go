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

// ListedRevokedKeys is how many revoked keys the list shows, the latest
// revoked: active keys are capped, but revoked ones pile up without end
// when a client creates and revokes a key per deployment.
const ListedRevokedKeys = 100

// APIKeys lists an account's API keys, newest first: every active one and
// the ListedRevokedKeys revoked last.
func (r *Reader) APIKeys(ctx context.Context, accountID string) ([]APIKey, error) {
	rows, err := r.pool.Query(ctx, `
		SELECT k.id, k.name, k.key_preview, k.permissions, k.is_active, k.created_at, u.last_used
		FROM ((SELECT * FROM api_keys WHERE account_id = $1 AND is_active)
			UNION ALL
			(SELECT * FROM api_keys WHERE account_id = $1 AND NOT is_active ORDER BY revoked_at DESC, id DESC LIMIT $2)) AS k
		LEFT JOIN api_key_usage u ON u.key_id = k.id
		ORDER BY k.created_at DESC, k.id DESC`, accountID, ListedRevokedKeys)
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
