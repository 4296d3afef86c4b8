package commands

import (
	"context"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/account"
	"github.com/mailroom/mailroom/internal/credential"
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
		issued, err := account.IssueToken(st, uuid.NewString(), account.RoleAdmin, tok.Hash, now)
		return append(created, issued...), err
	}, meta, "accounts")
	if err != nil {
		return NewAccount{}, err
	}
	return NewAccount{AccountID: id, Token: tok.Secret}, nil
}

// IssueToken issues a management token with role on an account.
func (s *Service) IssueToken(ctx context.Context, accountID string, role account.Role, meta Meta) (string, error) {
	tok := credential.Mint(credential.TokenPrefix)
	now := s.now()
	_, err := execute(ctx, s, account.Stream(accountID), account.Evolve, func(st account.State) ([]domain.Event, error) {
		return account.IssueToken(st, uuid.NewString(), role, tok.Hash, now)
	}, meta, "accounts")
	if err != nil {
		return "", err
	}
	return tok.Secret, nil
}

// SuspendAccount suspends an account: its API keys get 403 on /v1.
func (s *Service) SuspendAccount(ctx context.Context, accountID string, meta Meta) error {
	now := s.now()
	_, err := execute(ctx, s, account.Stream(accountID), account.Evolve, func(st account.State) ([]domain.Event, error) {
		return account.Suspend(st, now)
	}, meta, "accounts")
	return err
}

// ReinstateAccount lifts a suspension.
func (s *Service) ReinstateAccount(ctx context.Context, accountID string, meta Meta) error {
	now := s.now()
	_, err := execute(ctx, s, account.Stream(accountID), account.Evolve, func(st account.State) ([]domain.Event, error) {
		return account.Reinstate(st, now)
	}, meta, "accounts")
	return err
}
