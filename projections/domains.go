package projections

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailroom/mailroom/domain/sendingdomain"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/eventstore"
)

// Domains projects sending domains into columns of their own. Each event is
// folded by the domain package itself onto the domain its row holds, so the
// read side shows exactly what the aggregate decided; removed domains leave
// the table.
//
// A domain's keys are the active one, and during a key change the next one
// and, once cut over, the old one until it is retired: each is four
// columns, NULL when there is no such key.
type Domains struct{}

// Version 3 projects DkimKeyReplaced, which an older release skipped.
func (Domains) Version() int     { return 3 }
func (Domains) Name() Name       { return DomainsName }
func (Domains) Tables() []string { return []string{"domains"} }

func (Domains) Schema() string {
	return `
CREATE TABLE IF NOT EXISTS domains (
    id                             text PRIMARY KEY,
    account_id                     text NOT NULL,
    name                           text NOT NULL,
    region                         text NOT NULL,
    mail_from_domain               text NOT NULL,
    dkim_mode                      text NOT NULL,
    status                         text NOT NULL,
    dkim_ok                        boolean NOT NULL,
    mail_from_ok                   boolean NOT NULL,
    active_selector                text,
    active_public_key              text,
    active_sealed_key              text,
    active_created_at              timestamptz,
    legacy_tokens                  text[],
    transition_kind                text,
    transition_state               text,
    transition_started_at          timestamptz,
    transition_cut_over_at         timestamptz,
    transition_old_key_retires_at  timestamptz,
    next_selector                  text,
    next_public_key                text,
    next_sealed_key                text,
    next_created_at                timestamptz,
    old_selector                   text,
    old_public_key                 text,
    old_sealed_key                 text,
    old_created_at                 timestamptz,
    created_at                     timestamptz NOT NULL,
    verification_deadline          timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS domains_account_idx ON domains (account_id, name);
CREATE INDEX IF NOT EXISTS domains_status_idx ON domains (status);
CREATE INDEX IF NOT EXISTS domains_name_idx ON domains (name);
CREATE INDEX IF NOT EXISTS domains_to_poll_idx ON domains (created_at)
    WHERE status = 'pending' OR transition_kind IS NOT NULL;`
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
	var st sendingdomain.State
	rows, err := tx.Query(ctx, `SELECT `+DomainColumns+` FROM domains WHERE id = $1`, ref.DomainID)
	if err == nil {
		st, err = pgx.CollectExactlyOneRow(rows, ScanDomain)
	}
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	st = sendingdomain.Evolve(st, e)
	if st.ID == "" {
		return nil // an event for a domain this projection never saw added
	}
	_, err = tx.Exec(ctx, upsertDomain, domainRow(st)...)
	return err
}

const upsertDomain = `INSERT INTO domains (id, account_id, name, region, mail_from_domain, dkim_mode, status, dkim_ok, mail_from_ok,
	active_selector, active_public_key, active_sealed_key, active_created_at, legacy_tokens,
	transition_kind, transition_state, transition_started_at, transition_cut_over_at, transition_old_key_retires_at,
	next_selector, next_public_key, next_sealed_key, next_created_at,
	old_selector, old_public_key, old_sealed_key, old_created_at,
	created_at, verification_deadline)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20,
	$21, $22, $23, $24, $25, $26, $27, $28, $29)
ON CONFLICT (id) DO UPDATE SET account_id = $2, name = $3, region = $4, mail_from_domain = $5, dkim_mode = $6,
	status = $7, dkim_ok = $8, mail_from_ok = $9,
	active_selector = $10, active_public_key = $11, active_sealed_key = $12, active_created_at = $13, legacy_tokens = $14,
	transition_kind = $15, transition_state = $16, transition_started_at = $17, transition_cut_over_at = $18,
	transition_old_key_retires_at = $19,
	next_selector = $20, next_public_key = $21, next_sealed_key = $22, next_created_at = $23,
	old_selector = $24, old_public_key = $25, old_sealed_key = $26, old_created_at = $27,
	created_at = $28, verification_deadline = $29`

// domainRow is st as the arguments of upsertDomain.
func domainRow(st sendingdomain.State) []any {
	row := []any{st.ID, st.AccountID, st.Name, st.Region, st.MailFromDomain, string(st.Mode), string(st.Status),
		st.DkimOK, st.MailFromOK}
	row = append(row, keyRow(st.Active)...)
	row = append(row, st.LegacyTokens)
	var next, old *sendingdomain.Key
	if t := st.Transition; t != nil {
		row = append(row, string(t.Kind), t.State, t.StartedAt, orNull(t.CutOverAt), orNull(t.OldKeyRetiresAt))
		next, old = &t.Key, t.OldKey
	} else {
		row = append(row, nil, nil, nil, nil, nil)
	}
	row = append(row, keyRow(next)...)
	row = append(row, keyRow(old)...)
	return append(row, st.CreatedAt, st.Deadline)
}

// keyRow is k as its four columns, NULL when there is no key.
func keyRow(k *sendingdomain.Key) []any {
	if k == nil {
		return []any{nil, nil, nil, nil}
	}
	return []any{k.Selector, k.PublicKey, k.SealedKey, k.CreatedAt}
}

// orNull is t, or NULL for the zero time (a step not taken yet).
func orNull(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}
