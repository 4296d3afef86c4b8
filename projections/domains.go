package projections

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/mailroom/mailroom/domain/sendingdomain"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/eventstore"
)

// Domains projects sending domains. It keeps each domain's whole state,
// folded by the domain package itself, so the read side renders exactly
// what the aggregate decided; removed domains leave the table.
type Domains struct{}

func (Domains) Name() Name       { return DomainsName }
func (Domains) Version() int     { return 1 }
func (Domains) Tables() []string { return []string{"domains"} }

func (Domains) Schema() string {
	return `
CREATE TABLE IF NOT EXISTS domains (
    id         text PRIMARY KEY,
    account_id text NOT NULL,
    name       text NOT NULL,
    status     text NOT NULL,
    created_at timestamptz NOT NULL,
    state      jsonb NOT NULL
);
CREATE INDEX IF NOT EXISTS domains_account_idx ON domains (account_id, name);
CREATE INDEX IF NOT EXISTS domains_status_idx ON domains (status);
CREATE INDEX IF NOT EXISTS domains_name_idx ON domains (name);`
}

// Reads is true of the events ApplyTx acts on: those of domain streams,
// and a removal wherever it is.
func (Domains) Reads(ev eventstore.RecordedEvent) bool {
	_, ok := sendingdomain.IDFromStream(ev.StreamID)
	return ok || ev.Type == (&sendingdomain.Removed{}).EventType()
}

// Apply is unused: Domains folds in Go (ApplyTx).
func (Domains) Apply(eventstore.RecordedEvent, *pgx.Batch) error {
	return errors.New("domains projection applies in its transaction")
}

func (Domains) ApplyTx(ctx context.Context, tx pgx.Tx, ev eventstore.RecordedEvent) error {
	e, known, err := codec.DecodeKnown(ev)
	if err != nil || !known {
		return err
	}
	if rm, ok := e.(*sendingdomain.Removed); ok {
		_, err := tx.Exec(ctx, `DELETE FROM domains WHERE id = $1`, rm.DomainID)
		return err
	}
	// Every domain event names its domain; claim events have no domain_id.
	var ref struct {
		DomainID string `json:"domain_id"`
	}
	_, isDomain := sendingdomain.IDFromStream(ev.StreamID)
	if err := json.Unmarshal(ev.Data, &ref); err != nil || ref.DomainID == "" || !isDomain {
		return err
	}
	id := ref.DomainID
	var st sendingdomain.State
	var raw []byte
	err = tx.QueryRow(ctx, `SELECT state FROM domains WHERE id = $1`, id).Scan(&raw)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return err
	default:
		if err := json.Unmarshal(raw, &st); err != nil {
			return err
		}
	}
	st = sendingdomain.Evolve(st, e)
	if st.ID == "" {
		return nil // an event for a domain this projection never saw added
	}
	state, err := json.Marshal(st)
	if err != nil {
		return err
	}
	_, err = tx.Exec(ctx, `INSERT INTO domains (id, account_id, name, status, created_at, state)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (id) DO UPDATE SET status = $4, state = $6`,
		st.ID, st.AccountID, st.Name, string(st.Status), st.CreatedAt, state)
	return err
}
