package readapi

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/mailroom/mailroom/domain/sendingdomain"
	"github.com/mailroom/mailroom/projections"
)

// queryDomains reads the domains that where (a condition on the domains
// table, with args) selects, in the order order gives.
func queryDomains(ctx context.Context, q Querier, where, order string, args ...any) ([]sendingdomain.State, error) {
	rows, err := q.Query(ctx, `SELECT `+projections.DomainColumns+` FROM domains WHERE `+where+` ORDER BY `+order, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, projections.ScanDomain)
}

// queryDomain reads the one domain where selects; pgx.ErrNoRows when
// there is none.
func queryDomain(ctx context.Context, q Querier, where string, args ...any) (sendingdomain.State, error) {
	rows, err := q.Query(ctx, `SELECT `+projections.DomainColumns+` FROM domains WHERE `+where, args...)
	if err != nil {
		return sendingdomain.State{}, err
	}
	return pgx.CollectExactlyOneRow(rows, projections.ScanDomain)
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
