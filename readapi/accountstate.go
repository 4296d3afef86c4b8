package readapi

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

// Accounts counts the accounts, to tell a new installation.
func Accounts(ctx context.Context, q Querier) (int, error) {
	rows, err := q.Query(ctx, "SELECT count(*) FROM accounts")
	if err != nil {
		return 0, err
	}
	return pgx.CollectExactlyOneRow(rows, pgx.RowTo[int])
}

// AccountExists tells whether the read model holds the account.
func AccountExists(ctx context.Context, q Querier, accountID string) (bool, error) {
	rows, err := q.Query(ctx, "SELECT EXISTS (SELECT FROM accounts WHERE id = $1)", accountID)
	if err != nil {
		return false, err
	}
	return pgx.CollectExactlyOneRow(rows, pgx.RowTo[bool])
}

// AccountSuspended tells whether an account is suspended; an account not
// in the read model yet is not.
func AccountSuspended(ctx context.Context, q Querier, accountID string) (bool, error) {
	rows, err := q.Query(ctx, "SELECT status = 'suspended' FROM accounts WHERE id = $1", accountID)
	if err != nil {
		return false, err
	}
	suspended, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[bool])
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return suspended, err
}

// HeldEmails lists the emails held for an account, oldest hold first.
func HeldEmails(ctx context.Context, q Querier, accountID string) ([]string, error) {
	rows, err := q.Query(ctx, "SELECT email_id FROM held_emails WHERE account_id = $1 ORDER BY held_at, email_id", accountID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// ActiveAPIKeys counts an account's active API keys.
func ActiveAPIKeys(ctx context.Context, q Querier, accountID string) (int, error) {
	rows, err := q.Query(ctx, "SELECT count(*) FROM api_keys WHERE account_id = $1 AND is_active", accountID)
	if err != nil {
		return 0, err
	}
	return pgx.CollectExactlyOneRow(rows, pgx.RowTo[int])
}

// TokenAccount is the account of a management token, revoked or not.
func TokenAccount(ctx context.Context, q Querier, tokenID string) (string, error) {
	return ownerOf(ctx, q, "SELECT account_id FROM management_tokens WHERE id = $1", tokenID)
}

// APIKeyAccount is the account of an API key, revoked or not.
func APIKeyAccount(ctx context.Context, q Querier, keyID string) (string, error) {
	return ownerOf(ctx, q, "SELECT account_id FROM api_keys WHERE id = $1", keyID)
}

func ownerOf(ctx context.Context, q Querier, query, id string) (string, error) {
	rows, err := q.Query(ctx, query, id)
	if err != nil {
		return "", err
	}
	owner, err := pgx.CollectExactlyOneRow(rows, pgx.RowTo[string])
	if errors.Is(err, pgx.ErrNoRows) {
		return "", ErrNotFound
	}
	return owner, err
}
