package projections

import (
	"github.com/jackc/pgx/v5"

	"github.com/mailroom/mailroom/domain/apikey"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/eventstore"
)

// APIKeys projects API keys: the list behind GET /api/auth/api-keys and the
// hash lookup that authenticates /v1 requests. last_used is telemetry kept in
// api_key_usage, outside the projection, so a rebuild does not lose it.
type APIKeys struct{}

func (APIKeys) Name() Name       { return APIKeysName }
func (APIKeys) Version() int     { return 1 }
func (APIKeys) Tables() []string { return []string{"api_keys"} }

func (APIKeys) Schema() string {
	return `
CREATE TABLE IF NOT EXISTS api_keys (
    id          text PRIMARY KEY,
    account_id  text NOT NULL,
    name        text NOT NULL,
    key_preview text NOT NULL,
    key_hash    text NOT NULL UNIQUE,
    permissions text[] NOT NULL,
    is_active   boolean NOT NULL,
    created_at  timestamptz NOT NULL,
    revoked_at  timestamptz
);
CREATE INDEX IF NOT EXISTS api_keys_account_idx ON api_keys (account_id, created_at);
CREATE INDEX IF NOT EXISTS api_keys_revoked_idx ON api_keys (account_id, revoked_at DESC, id DESC) WHERE NOT is_active;`
}

func (APIKeys) Apply(ev eventstore.RecordedEvent, b *pgx.Batch) error {
	e, known, err := codec.DecodeKnown(ev)
	if err != nil || !known {
		return err
	}
	switch e := e.(type) {
	case *apikey.Created:
		perms := make([]string, len(e.Permissions))
		for i, p := range e.Permissions {
			perms[i] = string(p)
		}
		b.Queue(`INSERT INTO api_keys (id, account_id, name, key_preview, key_hash, permissions, is_active, created_at)
			VALUES ($1, $2, $3, $4, $5, $6, true, $7) ON CONFLICT (id) DO NOTHING`,
			e.KeyID, e.AccountID, e.Name, e.KeyPreview, e.KeyHash, perms, e.CreatedAt)
	case *apikey.Revoked:
		b.Queue(`UPDATE api_keys SET is_active = false, revoked_at = $2 WHERE id = $1`, e.KeyID, e.RevokedAt)
	}
	return nil
}
