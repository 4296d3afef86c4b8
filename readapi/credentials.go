package readapi

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
)

// Credential is an active API key or management token, found by the hash
// of its secret.
type Credential struct {
	ID          string
	AccountID   string
	Permissions []string // an API key's
	Role        string   // a management token's
	Suspended   bool     // its account is suspended
}

// APIKeyByHash finds the active API key whose secret hashes to hash;
// ErrNotFound when there is none.
func APIKeyByHash(ctx context.Context, q Querier, hash string) (Credential, error) {
	rows, err := q.Query(ctx, `SELECT k.id, k.account_id, k.permissions, '', a.status = 'suspended'
		FROM api_keys k JOIN accounts a ON a.id = k.account_id
		WHERE k.key_hash = $1 AND k.is_active`, hash)
	return credential(rows, err)
}

// TokenByHash finds the management token whose secret hashes to hash,
// neither revoked nor expired at now; ErrNotFound when there is none.
func TokenByHash(ctx context.Context, q Querier, hash string, now time.Time) (Credential, error) {
	rows, err := q.Query(ctx, `SELECT t.id, t.account_id, NULL::text[], t.role, a.status = 'suspended'
		FROM management_tokens t JOIN accounts a ON a.id = t.account_id
		WHERE t.token_hash = $1 AND t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > $2)`, hash, now)
	return credential(rows, err)
}

func credential(rows pgx.Rows, err error) (Credential, error) {
	if err != nil {
		return Credential{}, err
	}
	c, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByPos[Credential])
	if errors.Is(err, pgx.ErrNoRows) {
		return c, ErrNotFound
	}
	return c, err
}
