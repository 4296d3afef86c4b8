package projections

import (
	"github.com/jackc/pgx/v5"

	"github.com/mailroom/mailroom/internal/eventstore"
)

// Emails projects the email list and detail views. The sending pipeline's
// events fill it; until an account sends, its list is empty.
type Emails struct{}

func (Emails) Name() string     { return "emails" }
func (Emails) Version() int     { return 1 }
func (Emails) Tables() []string { return []string{"emails"} }

func (Emails) Schema() string {
	return `
CREATE TABLE IF NOT EXISTS emails (
    id               text PRIMARY KEY,
    account_id       text NOT NULL,
    from_email       text NOT NULL,
    to_email         text NOT NULL,
    recipients       text[] NOT NULL DEFAULT '{}',
    subject          text NOT NULL,
    status           text NOT NULL,
    attachment_count integer NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS emails_account_created_idx ON emails (account_id, created_at DESC, id DESC);`
}

func (Emails) Apply(ev eventstore.RecordedEvent, b *pgx.Batch) error { return nil }

// All is every projector Mailroom runs.
func All() []Projector { return []Projector{Accounts{}, APIKeys{}, Domains{}, Emails{}} }
