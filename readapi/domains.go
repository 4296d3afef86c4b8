package readapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/jackc/pgx/v5"
	"github.com/labstack/echo/v4"

	"github.com/mailroom/mailroom/domain/sendingdomain"
	"github.com/mailroom/mailroom/internal/authn"
	"github.com/mailroom/mailroom/internal/httpserver"
	"github.com/mailroom/mailroom/internal/views"
)

func (r reader) listDomains(c echo.Context) error {
	rows, err := r.pool.Query(c.Request().Context(),
		`SELECT state FROM domains WHERE account_id = $1 ORDER BY created_at DESC, id`, authn.From(c).AccountID)
	if err != nil {
		return err
	}
	states, err := pgx.CollectRows(rows, scanState)
	if err != nil {
		return err
	}
	out := make([]views.Domain, len(states))
	for i, st := range states {
		out[i] = r.domain(st)
	}
	return c.JSON(http.StatusOK, map[string]any{"data": out, "total": len(out)})
}

func (r reader) getDomain(c echo.Context) error {
	st, err := DomainState(c.Request().Context(), r.pool, authn.From(c).AccountID, c.Param("id"))
	if errors.Is(err, ErrNotFound) {
		return httpserver.NotFound("no such domain")
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, r.domain(st))
}

func scanState(row pgx.CollectableRow) (sendingdomain.State, error) {
	var raw []byte
	var st sendingdomain.State
	if err := row.Scan(&raw); err != nil {
		return st, err
	}
	return st, json.Unmarshal(raw, &st)
}

// ErrNotFound is returned for a resource that does not exist or belongs to
// another account.
var ErrNotFound = errors.New("not found")

// DomainState reads a domain of an account from the read model.
func DomainState(ctx context.Context, q Querier, accountID, id string) (sendingdomain.State, error) {
	rows, err := q.Query(ctx, `SELECT state FROM domains WHERE id = $1 AND account_id = $2`, id, accountID)
	if err != nil {
		return sendingdomain.State{}, err
	}
	st, err := pgx.CollectExactlyOneRow(rows, scanState)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, ErrNotFound
	}
	return st, err
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

// Querier is what reads need of a pool or transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
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
