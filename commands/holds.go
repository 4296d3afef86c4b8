package commands

import (
	"context"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/email"
)

// HoldEmail records that an email waits while its account is suspended.
func (s *Service) HoldEmail(ctx context.Context, id string, meta Meta) error {
	_, err := execute(ctx, s, email.Stream(id), email.Evolve, func(st email.State) ([]domain.Event, error) {
		return email.Hold(st, s.now()), nil
	}, meta)
	return err
}

// ReleaseEmail records that a held email goes on; the pipeline takes it from
// there.
func (s *Service) ReleaseEmail(ctx context.Context, id string, meta Meta) error {
	_, err := execute(ctx, s, email.Stream(id), email.Evolve, func(st email.State) ([]domain.Event, error) {
		return email.Release(st, s.now()), nil
	}, meta)
	return err
}
