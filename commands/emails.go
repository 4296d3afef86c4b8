package commands

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/eventstore"
)

// Email returns an email's current state from its stream.
func (s *Service) Email(ctx context.Context, id string) (email.State, error) {
	if _, err := uuid.Parse(id); err != nil {
		return email.State{}, domain.ErrNotFound
	}
	st, _, err := load(ctx, s, email.Stream(id), email.Evolve)
	return st, err
}

// EmailAt is Email that also returns the version an append based on the
// state must meet (see RecordEmailSentAt).
func (s *Service) EmailAt(ctx context.Context, id string) (email.State, eventstore.ExpectedVersion, error) {
	if _, err := uuid.Parse(id); err != nil {
		return email.State{}, eventstore.ExpectedVersion{}, domain.ErrNotFound
	}
	return load(ctx, s, email.Stream(id), email.Evolve)
}

// EmailSince is Email that also tells where the email was queued in the
// global log.
func (s *Service) EmailSince(ctx context.Context, id string) (email.State, eventstore.Position, error) {
	if _, err := uuid.Parse(id); err != nil {
		return email.State{}, eventstore.Position{}, domain.ErrNotFound
	}
	st, _, first, err := loadFrom(ctx, s, email.Stream(id), email.Evolve)
	return st, first, err
}

// EmailEvent is the email's event eventID, read from its stream: the
// personal data it carries (a clicked link, the recipients of a bounce)
// is kept sealed in the log only, never in a job. revision, when not zero,
// is where the event was recorded in the stream, and only that event is
// read: scanning an email near its thousand opens and clicks for each of
// their fan-outs made them cost the square of the cap. (Revision 0 is the
// email's EmailQueued, never asked for; jobs queued before they carried a
// revision have none and scan.)
func (s *Service) EmailEvent(ctx context.Context, emailID, eventID string, revision uint64) (domain.Event, error) {
	if revision > 0 {
		evs, err := s.store.ReadStream(ctx, email.Stream(emailID), revision, 1)
		if err != nil {
			return nil, err
		}
		if len(evs) == 1 && evs[0].ID.String() == eventID {
			return codec.Decode(evs[0])
		}
	}
	for from := uint64(0); ; {
		evs, err := s.store.ReadStream(ctx, email.Stream(emailID), from, 256)
		if err != nil {
			return nil, err
		}
		if len(evs) == 0 {
			return nil, fmt.Errorf("email %s has no event %s", emailID, eventID)
		}
		for _, ev := range evs {
			if ev.ID.String() == eventID {
				return codec.Decode(ev)
			}
		}
		from = evs[len(evs)-1].StreamRevision + 1
	}
}

// The pipeline's commands: they record what the content gateway, the
// provider and its feedback did. Each is a no-op when the email has moved
// past it, so redelivered events change nothing.

// Acceptance is the provider's acceptance of an email.
type Acceptance struct {
	MessageID string    // the provider's message id
	At        time.Time // when the provider accepted it, the email's sent_at
	// Attachments are the email's final attachments, as the content
	// gateway passed them.
	Attachments []email.Attachment
	// Feedback, when set, gives the provider's feedback at the moment of
	// sending (the sandbox's simulator).
	Feedback func(st email.State, at time.Time) []domain.Event
}

// RecordEmailSent records, in one append, that the content gateway passed
// an email (with its final attachments), that the provider accepted it, and
// any feedback the provider knew at once (the sandbox's simulator).
func (s *Service) RecordEmailSent(ctx context.Context, id string, a Acceptance, meta Meta) error {
	_, err := execute(ctx, s, email.Stream(id), email.Evolve, s.sentDecision(a), meta)
	return err
}

// RecordEmailSentAt is RecordEmailSent for a caller holding the email's
// state at version (EmailAt): it appends without reading the stream again,
// which is one round trip less per email sent. Only when the stream moved
// meanwhile does it decide again on a fresh read.
func (s *Service) RecordEmailSentAt(ctx context.Context, st email.State, version eventstore.ExpectedVersion, a Acceptance, meta Meta) error {
	if !st.Exists() {
		return domain.ErrNotFound
	}
	id := st.Queued.EmailID
	if version == (eventstore.ExpectedVersion{}) { // any version: nothing to guard the append
		return s.RecordEmailSent(ctx, id, a, meta)
	}
	evs, err := s.sentDecision(a)(st)
	if err != nil || len(evs) == 0 {
		return err
	}
	data, err := codec.EncodeAll(evs, meta.metadata())
	if err != nil {
		return err
	}
	_, err = s.store.Append(ctx, email.Stream(id), version, data...)
	if eventstore.IsConflict(err) {
		return s.RecordEmailSent(ctx, id, a, meta)
	}
	if err != nil {
		return fmt.Errorf("append to %s: %w", email.Stream(id), err)
	}
	return nil
}

// sentDecision decides what RecordEmailSent records on a state. Every
// event is dated at the acceptance, not at its recording: a recording
// delayed by the database would otherwise date the send after feedback
// the provider sent meanwhile.
func (s *Service) sentDecision(a Acceptance) func(email.State) ([]domain.Event, error) {
	return func(st email.State) ([]domain.Event, error) {
		evs := email.MarkScanned(st, a.Attachments, a.At)
		st = fold(st, email.Evolve, evs)
		sent := email.MarkSent(st, a.MessageID, a.At)
		if len(sent) == 0 {
			return nil, nil // failed or sent meanwhile
		}
		evs = append(evs, sent...)
		st = fold(st, email.Evolve, sent)
		if a.Feedback != nil {
			for _, fb := range a.Feedback(st, a.At) {
				if more := email.RecordFeedback(st, s.keyRecipients(st, fb)); len(more) > 0 {
					evs = append(evs, more...)
					st = fold(st, email.Evolve, more)
				}
			}
		}
		return evs, nil
	}
}

// FailEmail records that an email never leaves the service.
func (s *Service) FailEmail(ctx context.Context, id, reason, detail string, meta Meta) error {
	_, err := execute(ctx, s, email.Stream(id), email.Evolve, func(st email.State) ([]domain.Event, error) {
		return email.Fail(st, reason, detail, s.now()), nil
	}, meta)
	return err
}

// RecordEmailFeedback records provider feedback, each once; a reject after
// sending fails the email. A meta without a RequestID (feedback no request
// of Mailroom's brought) continues the email's story (continueStory).
func (s *Service) RecordEmailFeedback(ctx context.Context, id string, feedback []domain.Event, reject *string, meta Meta) error {
	if meta.RequestID == "" {
		meta = s.continueStory(ctx, id, meta)
	}
	_, err := execute(ctx, s, email.Stream(id), email.Evolve, func(st email.State) ([]domain.Event, error) {
		if !st.Exists() {
			return nil, ErrUnknownEmail
		}
		if st.Erased == nil && st.Sent == nil && st.Failed == nil {
			return nil, ErrNotSentYet
		}
		var out []domain.Event
		if reject != nil {
			out = email.RejectAfterSend(st, *reject, s.now())
		}
		for _, fb := range feedback {
			if evs := email.RecordFeedback(st, s.keyRecipients(st, fb)); len(evs) > 0 {
				out = append(out, evs...)
				st = email.Evolve(st, fb)
			}
		}
		return out, nil
	}, meta)
	return err
}

// storyStart reads the start of an email's stream, where its story is:
// its first event (EmailQueued) carries the send request's correlation id,
// and EmailSent comes within its first events (after the queueing, a hold
// or two and the scan). Only the start is read: an email's opens and
// clicks may run to a thousand.
func (s *Service) storyStart(ctx context.Context, id string) ([]eventstore.RecordedEvent, error) {
	return s.store.ReadStream(ctx, email.Stream(id), 0, 16)
}

// EmailStory is meta for work caused by eventID, an event of email id,
// when the job bringing it carries no correlation id (one queued by a
// release that kept no stories): the email's story, its send request's
// id, so that one id still finds the email's whole history. A stream that
// cannot be read yields a run of its own.
func (s *Service) EmailStory(ctx context.Context, id, eventID string, meta Meta) Meta {
	var story string
	if recs, err := s.storyStart(ctx, id); err == nil && len(recs) > 0 {
		story = recs[0].Metadata.CorrelationID
	}
	return meta.Following(eventID, story)
}

// continueStory is meta for feedback that reaches Mailroom on its own (a
// provider's notification, no request of Mailroom's): it continues the
// email's story, under its send request's correlation id and caused by
// its EmailSent (or its last event), so that one id finds an email's whole
// history. A stream that cannot be read yields a run of its own.
func (s *Service) continueStory(ctx context.Context, id string, meta Meta) Meta {
	recs, err := s.storyStart(ctx, id)
	if err != nil || len(recs) == 0 {
		return Started(meta.Actor)
	}
	cause := recs[len(recs)-1]
	for _, r := range recs {
		if r.Type == (&email.Sent{}).EventType() {
			cause = r
		}
	}
	return meta.Following(cause.ID.String(), recs[0].Metadata.CorrelationID)
}

// ErrUnknownEmail: feedback names an email the log does not hold (one
// accepted after the backup a log was restored from); nothing can be
// recorded, and nothing later will change that.
var ErrUnknownEmail = errors.New("feedback for an email the event log does not hold")

// ErrNotSentYet: feedback arrived before the email's EmailSent was
// recorded; the caller keeps the feedback and tries again later.
var ErrNotSentYet = errors.New("feedback for an email not recorded as sent yet")

// keyRecipients gives a bounce or a complaint the keyed hashes of its
// recipients, which keep them suppressed once their addresses are erased.
func (s *Service) keyRecipients(st email.State, fb domain.Event) domain.Event {
	if !st.Exists() {
		return fb
	}
	switch e := fb.(type) {
	case *email.Bounced:
		c := *e
		c.RecipientKeys = s.address.OfRecipients(st.Queued.AccountID, e.Recipients)
		return &c
	case *email.Complained:
		c := *e
		c.RecipientKeys = s.address.OfRecipients(st.Queued.AccountID, e.Recipients)
		return &c
	}
	return fb
}
