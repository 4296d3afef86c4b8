package commands

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/account"
	"github.com/mailroom/mailroom/internal/credential"
	"github.com/mailroom/mailroom/projections"
)

// NewAccount is what creating an account hands back once.
type NewAccount struct {
	AccountID string `json:"account_id"`
	Token     string `json:"token"`
}

// CreateAccount creates an account with a first org:admin token.
func (s *Service) CreateAccount(ctx context.Context, name string, meta Meta) (NewAccount, error) {
	id := uuid.NewString()
	tok := credential.Mint(credential.TokenPrefix)
	now := s.now()
	_, err := execute(ctx, s, account.Stream(id), account.Evolve, func(st account.State) ([]domain.Event, error) {
		created, err := account.Create(st, id, name, now)
		if err != nil {
			return nil, err
		}
		for _, e := range created {
			st = account.Evolve(st, e)
		}
		issued, err := account.IssueToken(st, uuid.NewString(), account.RoleAdmin, tok.Hash, now, time.Time{})
		return append(created, issued...), err
	}, meta, projections.AccountsName)
	if err != nil {
		return NewAccount{}, err
	}
	return NewAccount{AccountID: id, Token: tok.Secret}, nil
}

// IssueToken issues a management token with role on an account that never
// expires, and returns its secret.
func (s *Service) IssueToken(ctx context.Context, accountID string, role account.Role, meta Meta) (string, error) {
	t, err := s.IssueExpiringToken(ctx, accountID, role, 0, meta)
	return t.Token, err
}

// IssuedToken is a new management token: the secret, shown only now, and
// what identifies it afterwards.
type IssuedToken struct {
	ID        string
	Token     string
	ExpiresAt time.Time // zero: never
}

// IssueExpiringToken issues a management token that expires after
// expiresIn (0: never).
func (s *Service) IssueExpiringToken(ctx context.Context, accountID string, role account.Role, expiresIn time.Duration, meta Meta) (IssuedToken, error) {
	tok := credential.Mint(credential.TokenPrefix)
	id := uuid.NewString()
	now := s.now()
	var expiresAt time.Time
	if expiresIn != 0 {
		expiresAt = now.Add(expiresIn)
	}
	_, err := execute(ctx, s, account.Stream(accountID), account.Evolve, func(st account.State) ([]domain.Event, error) {
		return account.IssueToken(st, id, role, tok.Hash, now, expiresAt)
	}, meta, projections.AccountsName)
	if err != nil {
		return IssuedToken{}, err
	}
	return IssuedToken{ID: id, Token: tok.Secret, ExpiresAt: expiresAt}, nil
}

// RevokeToken revokes a management token of the account. It returns once
// every instance's authentication refuses the token, or ErrNotVisible.
func (s *Service) RevokeToken(ctx context.Context, accountID, tokenID string, meta Meta) error {
	if _, err := uuid.Parse(accountID); err != nil {
		return domain.ErrNotFound
	}
	now := s.now()
	_, err := executeConfirmed(ctx, s, account.Stream(accountID), account.Evolve, func(st account.State) ([]domain.Event, error) {
		return account.RevokeToken(st, tokenID, now)
	}, meta, projections.AccountsName)
	return err
}

// SuspendAccount suspends an account: its API keys get 403 on /v1, its
// tokens may only read, and its emails and webhooks are held. It returns
// once the suspension is in effect, or ErrNotVisible.
func (s *Service) SuspendAccount(ctx context.Context, accountID string, meta Meta) error {
	now := s.now()
	_, err := executeConfirmed(ctx, s, account.Stream(accountID), account.Evolve, func(st account.State) ([]domain.Event, error) {
		return account.Suspend(st, now)
	}, meta, projections.AccountsName)
	return err
}

// ReinstateAccount lifts a suspension; held emails and webhooks go out.
func (s *Service) ReinstateAccount(ctx context.Context, accountID string, meta Meta) error {
	now := s.now()
	_, err := executeConfirmed(ctx, s, account.Stream(accountID), account.Evolve, func(st account.State) ([]domain.Event, error) {
		return account.Reinstate(st, now)
	}, meta, projections.AccountsName)
	return err
}
