package commands

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/apikey"
	"github.com/mailroom/mailroom/internal/credential"
	"github.com/mailroom/mailroom/projections"
)

// NewAPIKey is a created key, including the secret shown only now.
type NewAPIKey struct {
	Created *apikey.Created
	Key     string
}

// CreateAPIKey creates a key for an account. permissions nil means both.
// An account holds at most apikey.MaxActive active keys (counted on the read
// model: two creates racing at the limit could both pass).
func (s *Service) CreateAPIKey(ctx context.Context, accountID, name string, permissions []string, meta Meta) (NewAPIKey, error) {
	if s.activeAPIKeys != nil {
		n, err := s.activeAPIKeys(ctx, accountID)
		if err != nil {
			return NewAPIKey{}, err
		}
		if n >= apikey.MaxActive {
			return NewAPIKey{}, &LimitError{Detail: fmt.Sprintf("an account may hold at most %d active API keys; revoke one first", apikey.MaxActive)}
		}
	}
	id := uuid.NewString()
	minted := credential.Mint(credential.APIKeyPrefix)
	now := s.now()
	evs, err := execute(ctx, s, apikey.Stream(id), apikey.Evolve, func(st apikey.State) ([]domain.Event, error) {
		return apikey.Create(st, id, accountID, name, permissions, apikey.Secret{Hash: minted.Hash, Preview: minted.Preview}, now)
	}, meta, projections.APIKeysName)
	if err != nil {
		return NewAPIKey{}, err
	}
	return NewAPIKey{Created: evs[0].(*apikey.Created), Key: minted.Secret}, nil
}

// RevokeAPIKey revokes a key of the account. It returns once every
// instance's authentication refuses the key, or ErrNotVisible.
func (s *Service) RevokeAPIKey(ctx context.Context, accountID, keyID string, meta Meta) error {
	if _, err := uuid.Parse(keyID); err != nil {
		return domain.ErrNotFound
	}
	now := s.now()
	_, err := executeConfirmed(ctx, s, apikey.Stream(keyID), apikey.Evolve, func(st apikey.State) ([]domain.Event, error) {
		return apikey.Revoke(st, accountID, now)
	}, meta, projections.APIKeysName)
	return err
}
