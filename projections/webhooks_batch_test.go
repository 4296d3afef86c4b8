package projections_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/delivery"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/domain/webhook"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/projections"
)

// hooksOneByOne is the webhooks projector without its ApplyBatch.
type hooksOneByOne struct{ p projections.Webhooks }

func (r hooksOneByOne) Name() projections.Name { return r.p.Name() }
func (r hooksOneByOne) Version() int           { return r.p.Version() }
func (r hooksOneByOne) Tables() []string       { return r.p.Tables() }
func (r hooksOneByOne) Schema() string         { return r.p.Schema() }
func (r hooksOneByOne) Apply(ev eventstore.RecordedEvent, b *pgx.Batch) error {
	return r.p.Apply(ev, b)
}

// mixedHooks appends endpoints whose lives cover every event the webhooks
// projector reads (paused, resumed, disabled, rotated, updated, deleted),
// fan-outs of several deliveries at once, attempts that fail, succeed (some
// twice in a row) or are skipped, expired and dropped, with email events
// between, emails erased, and deliveries read with their email erased.
func mixedHooks(t *testing.T, store eventstore.Store, rounds int) eventstore.Position {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(56, 78))
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	at := func() time.Time { return base.Add(time.Duration(rng.IntN(100000)) * time.Millisecond) }
	var last eventstore.Position
	put := func(parts ...eventstore.StreamAppend) {
		res, err := store.AppendMany(ctx, parts...)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if last.Less(r.Position) {
				last = r.Position
			}
		}
	}
	part := func(stream string, events ...domain.Event) eventstore.StreamAppend {
		data, err := codec.EncodeAll(events, eventstore.Metadata{Actor: "test"})
		if err != nil {
			t.Fatal(err)
		}
		return eventstore.StreamAppend{Stream: stream, Expected: eventstore.Any, Events: data}
	}
	endpoints := make([]string, 6)
	for i := range endpoints {
		endpoints[i] = uuid.NewString()
		put(part(webhook.Stream(endpoints[i]), &webhook.Created{EndpointID: endpoints[i], AccountID: "acct", URL: "https://x.test/" + fmt.Sprint(i),
			EventTypes: []string{"email.sent", "email.delivered"}, SealedSecret: "s", CreatedAt: at()}))
	}
	var open []*delivery.Created
	tried := map[string]int{} // failed attempts so far, by delivery
	for range rounds {
		switch rng.IntN(10) {
		case 0: // an endpoint changes
			ep := endpoints[rng.IntN(len(endpoints))]
			var e domain.Event
			switch rng.IntN(7) {
			case 0:
				e = &webhook.Paused{EndpointID: ep, PausedAt: at()}
			case 1:
				e = &webhook.Resumed{EndpointID: ep, ResumedAt: at()}
			case 2:
				e = &webhook.Disabled{EndpointID: ep, Reason: "failing", DisabledAt: at()}
			case 3:
				e = &webhook.SecretRotated{EndpointID: ep, SealedSecret: fmt.Sprint(rng.IntN(100)), RotatedAt: at()}
			case 4:
				u := fmt.Sprintf("https://y.test/%d", rng.IntN(100))
				e = &webhook.Updated{EndpointID: ep, URL: &u, UpdatedAt: at()}
			case 5:
				e = &webhook.EventExhausted{EndpointID: ep, At: at()}
			default:
				e = &webhook.FailuresReset{EndpointID: ep, At: at()}
			}
			put(part(webhook.Stream(ep), e))
		case 1: // an email event the projector ignores
			id := uuid.NewString()
			put(part(email.Stream(id), &email.Queued{EmailID: id, AccountID: "acct", QueuedAt: at()}))
		case 9: // the email of an open delivery is erased
			if len(open) > 0 {
				d := open[rng.IntN(len(open))]
				put(part(email.Stream(d.EmailID), &email.Erased{EmailID: d.EmailID, AccountID: "acct", Reason: email.ErasedByRetention, ErasedAt: at()}))
			}
		case 2, 3, 4: // a fan-out: one append of several deliveries
			emailID := uuid.NewString()
			erased := rng.IntN(10) == 0
			var parts []eventstore.StreamAppend
			for _, ep := range endpoints[:1+rng.IntN(len(endpoints))] {
				d := &delivery.Created{DeliveryID: uuid.NewString(), EndpointID: ep, AccountID: "acct", EmailID: emailID, Type: "email.sent", CreatedAt: at(), Erased: erased}
				open = append(open, d)
				parts = append(parts, part(delivery.Stream(d.DeliveryID), d))
			}
			put(parts...)
		default: // attempts on open deliveries
			for range 1 + rng.IntN(4) {
				if len(open) == 0 {
					break
				}
				i := rng.IntN(len(open))
				d := open[i]
				var events []domain.Event
				keep := false
				switch rng.IntN(7) {
				case 0: // one or two failed attempts, with or without an answer (the later counts); the delivery stays open while one is left
					var next time.Time
					for range 1 + rng.IntN(2) {
						tried[d.DeliveryID]++
						next = at()
						if rng.IntN(4) == 0 {
							next = time.Time{} // none left
						}
						var code *int
						if rng.IntN(2) == 0 {
							c := 500 + rng.IntN(4)
							code = &c
						}
						events = append(events, &delivery.AttemptFailed{DeliveryID: d.DeliveryID, EndpointID: d.EndpointID, Attempt: tried[d.DeliveryID],
							ResponseStatus: code, Error: fmt.Sprint("failed ", tried[d.DeliveryID]), At: at(), NextAttemptAt: next})
						if next.IsZero() {
							break
						}
					}
					keep = !next.IsZero()
				case 1:
					events = []domain.Event{&delivery.Skipped{DeliveryID: d.DeliveryID, EndpointID: d.EndpointID, Reason: "disabled", Error: "endpoint disabled", At: at()}}
				case 2:
					events = []domain.Event{&delivery.Expired{DeliveryID: d.DeliveryID, EndpointID: d.EndpointID, Error: "held too long", At: at()}}
				case 6:
					events = []domain.Event{&delivery.Dropped{DeliveryID: d.DeliveryID, EndpointID: d.EndpointID, Reason: delivery.ReasonEmailErased, At: at()}}
				case 3: // two successes in a row: the later counts
					events = []domain.Event{&delivery.AttemptSucceeded{DeliveryID: d.DeliveryID, EndpointID: d.EndpointID, Attempt: 1, ResponseStatus: 200, At: at()},
						&delivery.AttemptSucceeded{DeliveryID: d.DeliveryID, EndpointID: d.EndpointID, Attempt: 2, ResponseStatus: 204, At: at()}}
				default:
					events = []domain.Event{&delivery.AttemptSucceeded{DeliveryID: d.DeliveryID, EndpointID: d.EndpointID, Attempt: 1 + rng.IntN(3), ResponseStatus: 200 + rng.IntN(5), At: at()}}
				}
				if !keep {
					open = append(open[:i], open[i+1:]...)
				}
				put(part(delivery.Stream(d.DeliveryID), events...))
			}
		}
	}
	// One endpoint goes, with its deliveries.
	put(part(webhook.Stream(endpoints[0]), &webhook.Deleted{EndpointID: endpoints[0], AccountID: "acct", DeletedAt: at()}))
	return last
}

// The batches leave the webhooks read model exactly as applying each event
// in turn does, whether caught up live or rebuilt.
func TestWebhooksBatchesMatchEventByEvent(t *testing.T) {
	pool, store := setup(t)
	last := mixedHooks(t, store, 600)
	want := matchesOneByOne(t, pool, store, last, projections.Webhooks{}, hooksOneByOne{},
		[]tableOrder{{"webhook_endpoints", "id"}, {"webhook_deliveries", "id"}})
	if len(want[0]) < 500 || len(want[1]) < 5000 {
		t.Fatalf("too little projected to compare: %d, %d bytes", len(want[0]), len(want[1]))
	}
}
