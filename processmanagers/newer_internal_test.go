package processmanagers

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/domain/sendingdomain"
	"github.com/mailroom/mailroom/internal/eventstore"
)

// During a rolling upgrade an older process manager meets events a newer
// release wrote. It does not move past them (its checkpoint is the newer
// release's too, which would never see them): the router redelivers them,
// the job reader holds, until a process of the newer release takes over.
func TestProcessManagersWaitAtEventsOfANewerRelease(t *testing.T) {
	ctx := context.Background()
	id := uuid.NewString()
	newType := func(stream string) eventstore.RecordedEvent {
		return eventstore.RecordedEvent{ID: uuid.New(), StreamID: stream, Type: "SomethingANewerReleaseDoes", SchemaVersion: 1, Data: []byte(`{}`)}
	}
	newVersion := func(stream, typ string) eventstore.RecordedEvent {
		return eventstore.RecordedEvent{ID: uuid.New(), StreamID: stream, Type: typ, SchemaVersion: 99, Data: []byte(`{}`)}
	}

	identities := Identities(nil, nil, nil, slog.New(slog.DiscardHandler))
	// Only what it follows holds it: an unknown event of an email, or of
	// another application's stream, does not.
	for _, ev := range []eventstore.RecordedEvent{newType(email.Stream(id)), newVersion(email.Stream(id), (&email.Opened{}).EventType()), newType("orders-42")} {
		if err := identities(ctx, ev); err != nil {
			t.Errorf("identities, %s v%d on %s: %v; want it passed over", ev.Type, ev.SchemaVersion, ev.StreamID, err)
		}
	}
	for _, ev := range []eventstore.RecordedEvent{
		newType(sendingdomain.Stream(id)),
		newVersion(sendingdomain.Stream(id), (&sendingdomain.KeyReplaced{}).EventType()),
	} {
		if err := identities(ctx, ev); !errors.Is(err, errNewerRelease) || !IsTransient(err) {
			t.Errorf("identities, %s v%d: %v; want a transient errNewerRelease", ev.Type, ev.SchemaVersion, err)
		}
	}

	held := newVersion(email.Stream(id), (&email.Held{}).EventType())
	if err := (&Releaser{}).Handle(ctx, held); !errors.Is(err, errNewerRelease) || !IsTransient(err) {
		t.Errorf("releaser, %s v%d: %v; want a transient errNewerRelease", held.Type, held.SchemaVersion, err)
	}

	for _, ev := range []eventstore.RecordedEvent{
		newType(email.Stream(id)),
		newVersion(email.Stream(id), (&email.Delivered{}).EventType()),
	} {
		if jobs, err := (&Webhooks{}).Plan(ctx, ev); !errors.Is(err, errNewerRelease) {
			t.Errorf("webhooks plan, %s v%d: %v jobs, %v; want errNewerRelease", ev.Type, ev.SchemaVersion, len(jobs), err)
		}
	}
}
