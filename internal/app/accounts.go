package app

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/processmanagers"
	"github.com/mailroom/mailroom/projections"
)

// accountSuspended reads an account's status from the read model.
func (a *App) accountSuspended(ctx context.Context, accountID string) (bool, error) {
	var status string
	err := a.Pool.QueryRow(ctx, "SELECT status FROM accounts WHERE id = $1", accountID).Scan(&status)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return status == "suspended", err
}

// releaser releases held emails on reinstatement.
func (a *App) releaser() *processmanagers.Releaser {
	return &processmanagers.Releaser{
		Commands: a.Commands, Settle: a.settle, AccountSuspended: a.accountSuspended,
		Held: func(ctx context.Context, accountID string) ([]string, error) {
			rows, err := a.Pool.Query(ctx, "SELECT email_id FROM held_emails WHERE account_id = $1 ORDER BY held_at, email_id", accountID)
			if err != nil {
				return nil, err
			}
			return pgx.CollectRows(rows, pgx.RowTo[string])
		},
	}
}

// activeAPIKeys counts an account's active API keys.
func (a *App) activeAPIKeys(ctx context.Context, accountID string) (int, error) {
	var n int
	err := a.Pool.QueryRow(ctx, "SELECT count(*) FROM api_keys WHERE account_id = $1 AND is_active", accountID).Scan(&n)
	return n, err
}

// TokenAccount finds the account of a management token, for operators who
// know only the token's id. It brings the accounts projection up to date
// first, so a token issued a moment ago is found.
func (a *App) TokenAccount(ctx context.Context, tokenID string) (string, error) {
	if _, err := a.Runner.CatchUp(ctx, a.Runner.Projector(projections.AccountsName)); err != nil {
		return "", err
	}
	var accountID string
	err := a.Pool.QueryRow(ctx, "SELECT account_id FROM management_tokens WHERE id = $1", tokenID).Scan(&accountID)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", domain.ErrNotFound
	}
	return accountID, err
}
