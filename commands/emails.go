package commands

import (
	"context"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/email"
)

// Email returns an email's current state from its stream.
func (s *Service) Email(ctx context.Context, id string) (email.State, error) {
	if _, err := uuid.Parse(id); err != nil {
		return email.State{}, domain.ErrNotFound
	}
	st, _, err := load(ctx, s.store, email.Stream(id), email.Evolve)
	return st, err
}

// The pipeline's commands: they record what the content gateway, the
// provider and its feedback did. Each is a no-op when the email has moved
// past it, so redelivered events change nothing.

// MarkEmailScanned records that the content gateway passed an email.
func (s *Service) MarkEmailScanned(ctx context.Context, id string, atts []email.Attachment, meta Meta) error {
	_, err := execute(ctx, s, email.Stream(id), email.Evolve, func(st email.State) ([]domain.Event, error) {
		return email.MarkScanned(st, atts, s.now()), nil
	}, meta)
	return err
}

// FailEmail records that an email never leaves the service.
func (s *Service) FailEmail(ctx context.Context, id, reason, detail string, meta Meta) error {
	_, err := execute(ctx, s, email.Stream(id), email.Evolve, func(st email.State) ([]domain.Event, error) {
		return email.Fail(st, reason, detail, s.now()), nil
	}, meta)
	return err
}

// MarkEmailSent records the provider's acceptance.
func (s *Service) MarkEmailSent(ctx context.Context, id, providerMessageID string, meta Meta) error {
	_, err := execute(ctx, s, email.Stream(id), email.Evolve, func(st email.State) ([]domain.Event, error) {
		return email.MarkSent(st, providerMessageID, s.now()), nil
	}, meta)
	return err
}

// RecordEmailFeedback records provider feedback events, each once.
func (s *Service) RecordEmailFeedback(ctx context.Context, id string, feedback []domain.Event, meta Meta) error {
	_, err := execute(ctx, s, email.Stream(id), email.Evolve, func(st email.State) ([]domain.Event, error) {
		var out []domain.Event
		for _, fb := range feedback {
			if evs := email.RecordFeedback(st, fb); len(evs) > 0 {
				out = append(out, evs...)
				st = email.Evolve(st, fb)
			}
		}
		return out, nil
	}, meta)
	return err
}
