package commands

import (
	"context"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/apikey"
	"github.com/mailroom/mailroom/internal/credential"
)

// NewAPIKey is a created key, including the secret shown only now.
type NewAPIKey struct {
	Created *apikey.Created
	Key     string
}

// CreateAPIKey creates a key for an account. permissions nil means both.
func (s *Service) CreateAPIKey(ctx context.Context, accountID, name string, permissions []string, meta Meta) (NewAPIKey, error) {
	id := uuid.NewString()
	minted := credential.Mint(credential.APIKeyPrefix)
	now := s.now()
	evs, err := execute(ctx, s, apikey.Stream(id), apikey.Evolve, func(st apikey.State) ([]domain.Event, error) {
		return apikey.Create(st, id, accountID, name, permissions, apikey.Secret{Hash: minted.Hash, Preview: minted.Preview}, now)
	}, meta, "api_keys")
	if err != nil {
		return NewAPIKey{}, err
	}
	return NewAPIKey{Created: evs[0].(*apikey.Created), Key: minted.Secret}, nil
}

// RevokeAPIKey revokes a key of the account. It returns once every
// instance's authentication sees the revocation.
func (s *Service) RevokeAPIKey(ctx context.Context, accountID, keyID string, meta Meta) error {
	if _, err := uuid.Parse(keyID); err != nil {
		return domain.ErrNotFound
	}
	now := s.now()
	_, err := execute(ctx, s, apikey.Stream(keyID), apikey.Evolve, func(st apikey.State) ([]domain.Event, error) {
		return apikey.Revoke(st, accountID, now)
	}, meta, "api_keys")
	return err
}
