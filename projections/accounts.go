package projections

import (
	"github.com/jackc/pgx/v5"

	"github.com/mailroom/mailroom/domain/account"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/eventstore"
)

// Accounts projects accounts and their management tokens, the rows that
// authenticate /api requests and decide suspension.
type Accounts struct{}

func (Accounts) Name() string     { return "accounts" }
func (Accounts) Version() int     { return 1 }
func (Accounts) Tables() []string { return []string{"accounts", "management_tokens"} }

func (Accounts) Schema() string {
	return `
CREATE TABLE IF NOT EXISTS accounts (
    id         text PRIMARY KEY,
    name       text NOT NULL,
    status     text NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS management_tokens (
    id         text PRIMARY KEY,
    account_id text NOT NULL,
    role       text NOT NULL,
    token_hash text NOT NULL UNIQUE,
    created_at timestamptz NOT NULL
);`
}

func (Accounts) Apply(ev eventstore.RecordedEvent, b *pgx.Batch) error {
	e, err := codec.Decode(ev)
	if err != nil {
		return err
	}
	switch e := e.(type) {
	case *account.Created:
		b.Queue(`INSERT INTO accounts (id, name, status, created_at, updated_at) VALUES ($1, $2, 'active', $3, $3)
			ON CONFLICT (id) DO NOTHING`, e.AccountID, e.Name, e.CreatedAt)
	case *account.Suspended:
		b.Queue(`UPDATE accounts SET status = 'suspended', updated_at = $2 WHERE id = $1`, e.AccountID, e.SuspendedAt)
	case *account.Reinstated:
		b.Queue(`UPDATE accounts SET status = 'active', updated_at = $2 WHERE id = $1`, e.AccountID, e.ReinstatedAt)
	case *account.TokenIssued:
		b.Queue(`INSERT INTO management_tokens (id, account_id, role, token_hash, created_at) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (id) DO NOTHING`, e.TokenID, e.AccountID, string(e.Role), e.TokenHash, e.IssuedAt)
	}
	return nil
}
