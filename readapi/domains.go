package readapi

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/mailroom/mailroom/domain/sendingdomain"
)

// Domains reads an account's domains, newest first.
func (r *Reader) Domains(ctx context.Context, accountID string) ([]sendingdomain.State, error) {
	rows, err := r.pool.Query(ctx,
		`SELECT state FROM domains WHERE account_id = $1 ORDER BY created_at DESC, id`, accountID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanState)
}

// Domain reads a domain of an account; a *NotFoundError when the account
// has no such domain.
func (r *Reader) Domain(ctx context.Context, accountID, id string) (sendingdomain.State, error) {
	rows, err := r.pool.Query(ctx, `SELECT state FROM domains WHERE id = $1 AND account_id = $2`, id, accountID)
	if err != nil {
		return sendingdomain.State{}, err
	}
	st, err := pgx.CollectExactlyOneRow(rows, scanState)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, &NotFoundError{Resource: "domain"}
	}
	return st, err
}

func scanState(row pgx.CollectableRow) (sendingdomain.State, error) {
	var raw []byte
	var st sendingdomain.State
	if err := row.Scan(&raw); err != nil {
		return st, err
	}
	return st, json.Unmarshal(raw, &st)
}

// SendingDomain reads the domain an account sends from by name, for the
// sending pipeline. ErrNotFound when the account has no such domain; the
// caller checks State.CanSend.
func SendingDomain(ctx context.Context, q Querier, accountID, name string) (sendingdomain.State, error) {
	rows, err := q.Query(ctx, `SELECT state FROM domains WHERE account_id = $1 AND name = $2`, accountID, name)
	if err != nil {
		return sendingdomain.State{}, err
	}
	st, err := pgx.CollectExactlyOneRow(rows, scanState)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, ErrNotFound
	}
	return st, err
}

// SendableDomainID is the id of the account's verified domain of that name,
// for accepting a send: the table's own columns, without decoding the
// domain's state. ErrNotFound when it has none, or it is not verified.
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
	rows, err := q.Query(ctx, `SELECT state FROM domains WHERE name = $1 ORDER BY created_at, id`, name)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanState)
}

// DomainCount counts an account's domains (removed ones leave the table).
func DomainCount(ctx context.Context, q Querier, accountID string) (int, error) {
	rows, err := q.Query(ctx, `SELECT count(*) FROM domains WHERE account_id = $1`, accountID)
	if err != nil {
		return 0, err
	}
	return pgx.CollectExactlyOneRow(rows, pgx.RowTo[int])
}
