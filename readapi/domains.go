package readapi

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailroom/mailroom/domain/sendingdomain"
)

// domainColumns are the columns scanDomain reads, in its order.
const domainColumns = `id, account_id, name, region, mail_from_domain, dkim_mode, status, dkim_ok, mail_from_ok,
	active_selector, active_public_key, active_sealed_key, active_created_at, legacy_tokens,
	transition_kind, transition_state, transition_started_at, transition_cut_over_at, transition_old_key_retires_at,
	next_selector, next_public_key, next_sealed_key, next_created_at,
	old_selector, old_public_key, old_sealed_key, old_created_at,
	created_at, verification_deadline`

// keyColumns are the four columns of a key that may be absent.
type keyColumns struct {
	selector, publicKey, sealedKey *string
	createdAt                      *time.Time
}

func (k *keyColumns) dest() []any {
	return []any{&k.selector, &k.publicKey, &k.sealedKey, &k.createdAt}
}

// key is the key the columns hold, nil when they hold none.
func (k keyColumns) key() *sendingdomain.Key {
	if k.selector == nil {
		return nil
	}
	key := sendingdomain.Key{Selector: *k.selector}
	if k.publicKey != nil {
		key.PublicKey = *k.publicKey
	}
	if k.sealedKey != nil {
		key.SealedKey = *k.sealedKey
	}
	key.CreatedAt = utc(k.createdAt)
	return &key
}

// utc is t in UTC, the zero time when t is NULL.
func utc(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

// scanDomain builds a domain from a row of domainColumns.
func scanDomain(row pgx.CollectableRow) (sendingdomain.State, error) {
	var st sendingdomain.State
	var mode, status string
	var active, next, old keyColumns
	var kind, state *string
	var started, cutOver, retires *time.Time
	dest := []any{&st.ID, &st.AccountID, &st.Name, &st.Region, &st.MailFromDomain, &mode, &status, &st.DkimOK, &st.MailFromOK}
	dest = append(dest, active.dest()...)
	dest = append(dest, &st.LegacyTokens, &kind, &state, &started, &cutOver, &retires)
	dest = append(dest, next.dest()...)
	dest = append(dest, old.dest()...)
	dest = append(dest, &st.CreatedAt, &st.Deadline)
	if err := row.Scan(dest...); err != nil {
		return st, err
	}
	st.Mode, st.Status = sendingdomain.DkimMode(mode), sendingdomain.Status(status)
	st.Active = active.key()
	if len(st.LegacyTokens) == 0 {
		st.LegacyTokens = nil
	}
	if kind != nil {
		t := &sendingdomain.Transition{
			Kind: sendingdomain.TransitionKind(*kind), StartedAt: utc(started),
			CutOverAt: utc(cutOver), OldKeyRetiresAt: utc(retires), OldKey: old.key(),
		}
		if state != nil {
			t.State = *state
		}
		if k := next.key(); k != nil {
			t.Key = *k
		}
		st.Transition = t
	}
	st.CreatedAt, st.Deadline = st.CreatedAt.UTC(), st.Deadline.UTC()
	return st, nil
}

// queryDomains reads the domains that where (a condition on the domains
// table, with args) selects, in the order order gives.
func queryDomains(ctx context.Context, q Querier, where, order string, args ...any) ([]sendingdomain.State, error) {
	rows, err := q.Query(ctx, `SELECT `+domainColumns+` FROM domains WHERE `+where+` ORDER BY `+order, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanDomain)
}

// queryDomain reads the one domain where selects; pgx.ErrNoRows when
// there is none.
func queryDomain(ctx context.Context, q Querier, where string, args ...any) (sendingdomain.State, error) {
	rows, err := q.Query(ctx, `SELECT `+domainColumns+` FROM domains WHERE `+where, args...)
	if err != nil {
		return sendingdomain.State{}, err
	}
	return pgx.CollectExactlyOneRow(rows, scanDomain)
}

// Domains reads an account's domains, newest first.
func (r *Reader) Domains(ctx context.Context, accountID string) ([]sendingdomain.State, error) {
	return queryDomains(ctx, r.pool, `account_id = $1`, `created_at DESC, id`, accountID)
}

// Domain reads a domain of an account; a *NotFoundError when the account
// has no such domain.
func (r *Reader) Domain(ctx context.Context, accountID, id string) (sendingdomain.State, error) {
	st, err := queryDomain(ctx, r.pool, `id = $1 AND account_id = $2`, id, accountID)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, &NotFoundError{Resource: "domain"}
	}
	return st, err
}

// DomainByID reads a domain whatever its account, for the projector that
// keeps the table. ErrNotFound when there is none.
func DomainByID(ctx context.Context, q Querier, id string) (sendingdomain.State, error) {
	st, err := queryDomain(ctx, q, `id = $1`, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, ErrNotFound
	}
	return st, err
}

// SendingDomain reads the domain an account sends from by name, for the
// sending pipeline. ErrNotFound when the account has no such domain; the
// caller checks State.CanSend.
func SendingDomain(ctx context.Context, q Querier, accountID, name string) (sendingdomain.State, error) {
	st, err := queryDomain(ctx, q, `account_id = $1 AND name = $2`, accountID, name)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, ErrNotFound
	}
	return st, err
}

// SendableDomainID is the id of the account's verified domain of that name,
// for accepting a send: the id and status columns alone. ErrNotFound when
// it has none, or it is not verified.
func SendableDomainID(ctx context.Context, q Querier, accountID, name string) (string, error) {
	rows, err := q.Query(ctx, `SELECT id FROM domains WHERE account_id = $1 AND name = $2 AND status = $3`,
		accountID, name, string(sendingdomain.StatusVerified))
	if err != nil {
		return "", err
	}
	id, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[string])
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrNotFound
	}
	return id, err
}

// DomainsNamed reads the domains of a name in every account, for claiming
// the name.
func DomainsNamed(ctx context.Context, q Querier, name string) ([]sendingdomain.State, error) {
	return queryDomains(ctx, q, `name = $1`, `created_at, id`, name)
}

// DomainCount counts an account's domains (removed ones leave the table).
func DomainCount(ctx context.Context, q Querier, accountID string) (int, error) {
	rows, err := q.Query(ctx, `SELECT count(*) FROM domains WHERE account_id = $1`, accountID)
	if err != nil {
		return 0, err
	}
	return pgx.CollectExactlyOneRow(rows, pgx.RowTo[int])
}
