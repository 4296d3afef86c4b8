package commands

import (
	"context"
	"errors"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/eventstore"
)

// HoldEmail records that an email waits while its account is suspended.
func (s *Service) HoldEmail(ctx context.Context, id string, meta Meta) error {
	_, err := execute(ctx, s, email.Stream(id), email.Evolve, func(st email.State) ([]domain.Event, error) {
		return email.Hold(st, s.now()), nil
	}, meta)
	return err
}

// ReleaseEmail records that a held email goes on; the pipeline takes it from
// there. The release names meta's cause (the reinstatement) but keeps the
// email's own story, so the send's request id still finds every event of
// the email after it.
func (s *Service) ReleaseEmail(ctx context.Context, id string, meta Meta) error {
	story, err := s.StoryOf(ctx, email.Stream(id))
	if err != nil {
		return err
	}
	if story.CorrelationID != "" {
		meta.RequestID = story.CorrelationID
	}
	_, err = execute(ctx, s, email.Stream(id), email.Evolve, func(st email.State) ([]domain.Event, error) {
		return email.Release(st, s.now()), nil
	}, meta)
	return err
}

// StoryOf is the metadata of a stream's first event: the request or run
// that began it (CorrelationID) and what that event reacted to
// (CausationID). Work picked up again later, by a release or a sweep,
// continues that story. A stream that does not exist has none.
func (s *Service) StoryOf(ctx context.Context, stream string) (eventstore.Metadata, error) {
	evs, err := s.store.ReadStream(ctx, stream, 0, 1)
	if errors.Is(err, eventstore.ErrStreamNotFound) || (err == nil && len(evs) == 0) {
		return eventstore.Metadata{}, nil
	}
	if err != nil {
		return eventstore.Metadata{}, err
	}
	return evs[0].Metadata, nil
}
