package projections

import (
	"github.com/jackc/pgx/v5"

	"github.com/mailroom/mailroom/domain/account"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/eventstore"
)

// Accounts projects accounts, their management tokens (the rows that
// authenticate /api requests and decide suspension) and the emails their
// suspension holds (what a reinstatement releases).
type Accounts struct{}

func (Accounts) Name() Name       { return AccountsName }
func (Accounts) Version() int     { return 3 }
func (Accounts) Tables() []string { return []string{"accounts", "management_tokens", "held_emails"} }

func (Accounts) Schema() string {
	return `
CREATE TABLE IF NOT EXISTS accounts (
    id         text PRIMARY KEY,
    name       text NOT NULL,
    status     text NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    retention_days integer -- days the account keeps its emails' content; NULL: the server's default
);
CREATE TABLE IF NOT EXISTS management_tokens (
    id         text PRIMARY KEY,
    account_id text NOT NULL,
    role       text NOT NULL,
    token_hash text NOT NULL UNIQUE,
    created_at timestamptz NOT NULL,
    expires_at timestamptz,
    revoked_at timestamptz
);
CREATE INDEX IF NOT EXISTS management_tokens_account_idx ON management_tokens (account_id, created_at);
CREATE TABLE IF NOT EXISTS held_emails (
    email_id   text PRIMARY KEY,
    account_id text NOT NULL,
    held_at    timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS held_emails_account_idx ON held_emails (account_id);`
}

// heldTypes are the events of other streams this projector reads; it skips
// the rest without decoding them.
var heldTypes = map[string]bool{(&email.Held{}).EventType(): true, (&email.Released{}).EventType(): true,
	(&email.Erased{}).EventType(): true}

func (Accounts) Apply(ev eventstore.RecordedEvent, b *pgx.Batch) error {
	if _, ok := account.IDFromStream(ev.StreamID); !ok && !heldTypes[ev.Type] {
		return nil
	}
	e, known, err := codec.DecodeKnown(ev)
	if err != nil || !known {
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
	case *account.RetentionSet:
		b.Queue(`UPDATE accounts SET retention_days = NULLIF($2, 0), updated_at = $3 WHERE id = $1`, e.AccountID, e.Days, e.SetAt)
	case *account.TokenIssued:
		b.Queue(`INSERT INTO management_tokens (id, account_id, role, token_hash, created_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (id) DO NOTHING`, e.TokenID, e.AccountID, string(e.Role), e.TokenHash, e.IssuedAt, e.ExpiresAt)
	case *account.TokenRevoked:
		b.Queue(`UPDATE management_tokens SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL`, e.TokenID, e.RevokedAt)
	case *email.Held:
		b.Queue(`INSERT INTO held_emails (email_id, account_id, held_at) VALUES ($1, $2, $3)
			ON CONFLICT (email_id) DO NOTHING`, e.EmailID, e.AccountID, e.HeldAt)
	case *email.Released:
		b.Queue(`DELETE FROM held_emails WHERE email_id = $1`, e.EmailID)
	case *email.Erased:
		// Erased while held: there is nothing left to release.
		b.Queue(`DELETE FROM held_emails WHERE email_id = $1`, e.EmailID)
	}
	return nil
}
