package app

import (
	"context"
	"errors"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/processmanagers"
	"github.com/mailroom/mailroom/projections"
	"github.com/mailroom/mailroom/readapi"
)

// accountSuspended reads an account's status from the read model.
func (a *App) accountSuspended(ctx context.Context, accountID string) (bool, error) {
	return readapi.AccountSuspended(ctx, a.Pool, accountID)
}

// releaser releases held emails on reinstatement.
func (a *App) releaser() *processmanagers.Releaser {
	return &processmanagers.Releaser{
		Commands: a.Commands, Settle: a.settle, AccountSuspended: a.accountSuspended,
		Held: func(ctx context.Context, accountID string) ([]string, error) {
			return readapi.HeldEmails(ctx, a.Pool, accountID)
		},
	}
}

// activeAPIKeys counts an account's active API keys.
func (a *App) activeAPIKeys(ctx context.Context, accountID string) (int, error) {
	return readapi.ActiveAPIKeys(ctx, a.Pool, accountID)
}

// TokenAccount finds the account of a management token, for operators who
// know only the token's id. It brings the accounts projection up to date
// first, so a token issued a moment ago is found.
func (a *App) TokenAccount(ctx context.Context, tokenID string) (string, error) {
	return a.ownerOf(ctx, projections.AccountsName, readapi.TokenAccount, tokenID)
}

// APIKeyAccount finds the account of an API key, as TokenAccount does a
// token's.
func (a *App) APIKeyAccount(ctx context.Context, keyID string) (string, error) {
	return a.ownerOf(ctx, projections.APIKeysName, readapi.APIKeyAccount, keyID)
}

func (a *App) ownerOf(ctx context.Context, projection projections.Name, read func(context.Context, readapi.Querier, string) (string, error), id string) (string, error) {
	if _, err := a.Runner.CatchUp(ctx, a.Runner.Projector(projection)); err != nil {
		return "", err
	}
	accountID, err := read(ctx, a.Pool, id)
	if errors.Is(err, readapi.ErrNotFound) {
		return "", domain.ErrNotFound
	}
	return accountID, err
}
