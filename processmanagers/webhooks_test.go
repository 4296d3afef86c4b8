package processmanagers

import (
	"context"
	"crypto/sha1"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/delivery"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/eventstore/memory"
	"github.com/mailroom/mailroom/internal/pgtest"
	"github.com/mailroom/mailroom/projections"
)

// An email event becomes no fan-out job only when the email was seen
// queued, the read model had read past that, and the account has no
// endpoint, in whatever state, for the event's type.
func TestPlanSkipsFanoutNoEndpointCanHear(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(ctx, projections.Webhooks{}.Schema()); err != nil {
		t.Fatal(err)
	}
	// Account b has a paused endpoint for deliveries only; a has none.
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_endpoints (id, account_id, url, description, event_types, sealed_secret, is_active, created_at, updated_at)
		VALUES ('ep', 'b', 'https://b.test', '', '{email.delivered}', 'x', false, now(), now())`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO projection_checkpoints (name, commit_position, prepare_position) VALUES ('webhooks', 100, 100)`); err != nil {
		t.Fatal(err)
	}
	at := uint64(0)
	event := func(id string, e domain.Event, pos uint64) eventstore.RecordedEvent { return emailEvent(t, id, e, pos) }
	queued := func(id, account string) eventstore.RecordedEvent {
		at += 10
		return event(id, &email.Queued{EmailID: id, AccountID: account}, at)
	}
	a1, b1, a2, unknown := uuid.NewString(), uuid.NewString(), uuid.NewString(), uuid.NewString()
	// The emails are queued in one batch, their events come in the next.
	queuedBatch := []eventstore.RecordedEvent{queued(a1, "a"), queued(b1, "b")}
	at = 100
	queuedBatch = append(queuedBatch, queued(a2, "a")) // past the read model
	var batch []eventstore.RecordedEvent
	now := time.Now()
	for _, id := range []string{a1, b1, a2, unknown} {
		at += 10
		batch = append(batch, event(id, &email.Sent{EmailID: id, SentAt: now}, at), event(id, &email.Delivered{EmailID: id, OccurredAt: now}, at+1))
	}

	// plan plans both batches, preparing each if prepare.
	plan := func(w *Webhooks, prepare bool) map[string]bool {
		return fanouts(t, w, prepare, queuedBatch, batch)
	}
	w := &Webhooks{Pool: pool}
	got := plan(w, true)
	want := map[string]bool{b1 + " email.delivered": true, a2 + " email.sent": true, a2 + " email.delivered": true,
		unknown + " email.sent": true, unknown + " email.delivered": true}
	if len(got) != len(want) {
		t.Errorf("fan-outs %v, want %v", got, want)
	}
	for k := range want {
		if !got[k] {
			t.Errorf("no fan-out for %s", k)
		}
	}

	// Without a read of the endpoints every event gets its fan-out.
	if got := plan(&Webhooks{Pool: pool}, false); len(got) != 8 {
		t.Errorf("%d fan-outs without Prepare, want 8", len(got))
	}
	// Nor with a read model not yet started.
	if _, err := pool.Exec(ctx, `DELETE FROM projection_checkpoints`); err != nil {
		t.Fatal(err)
	}
	if got := plan(&Webhooks{Pool: pool}, true); len(got) != 8 {
		t.Errorf("%d fan-outs before the read model started, want 8", len(got))
	}
}

// An email queued in the very batch that carries its later events is not
// asked about in Prepare, so the endpoints read for the batch say nothing
// of its account: its events get their fan-out even when the read model is
// past its queue and another account of the batch has no endpoint.
func TestPlanFansOutAnEmailQueuedInTheSameBatch(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if _, err := pool.Exec(ctx, projections.Webhooks{}.Schema()); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_endpoints (id, account_id, url, description, event_types, sealed_secret, is_active, created_at, updated_at)
		VALUES ('ep', 'c', 'https://c.test', '', '{email.sent}', 'x', true, now(), now());
		INSERT INTO projection_checkpoints (name, commit_position, prepare_position) VALUES ('webhooks', 100, 100)`); err != nil {
		t.Fatal(err)
	}
	a, c := uuid.NewString(), uuid.NewString()
	now := time.Now()
	got := fanouts(t, &Webhooks{Pool: pool}, true,
		[]eventstore.RecordedEvent{emailEvent(t, a, &email.Queued{EmailID: a, AccountID: "a"}, 10)},
		[]eventstore.RecordedEvent{emailEvent(t, a, &email.Sent{EmailID: a, SentAt: now}, 20), // a is asked about: it has no endpoint
			emailEvent(t, c, &email.Queued{EmailID: c, AccountID: "c"}, 30), emailEvent(t, c, &email.Sent{EmailID: c, SentAt: now}, 40)})
	if !got[c+" email.sent"] {
		t.Fatalf("no fan-out for the sent email of an account with an endpoint, queued in the same batch: %v", got)
	}
}

// emailEvent is e recorded on email id's stream at pos.
func emailEvent(t *testing.T, id string, e domain.Event, pos uint64) eventstore.RecordedEvent {
	t.Helper()
	d, err := codec.Encode(e, eventstore.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	return eventstore.RecordedEvent{ID: d.ID, StreamID: email.Stream(id), Type: d.Type, Data: d.Data, Position: eventstore.Position{Commit: pos, Prepare: pos}}
}

// fanouts plans batches in order, preparing each if prepare, and answers
// the fan-outs made, as "email-id type".
func fanouts(t *testing.T, w *Webhooks, prepare bool, batches ...[]eventstore.RecordedEvent) map[string]bool {
	t.Helper()
	ctx := context.Background()
	got := map[string]bool{}
	for _, b := range batches {
		if prepare {
			if err := w.Prepare(ctx, b); err != nil {
				t.Fatal(err)
			}
		}
		for _, ev := range b {
			jobs, err := w.Plan(ctx, ev)
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range jobs {
				f := j.Args.(FanoutArgs)
				got[f.EmailID+" "+f.Type] = true
			}
		}
	}
	return got
}

// The queued emails remembered are bounded: the oldest is forgotten first.
func TestPlanForgetsOldestQueuedEmail(t *testing.T) {
	w := &Webhooks{}
	for i := range rememberedEmails + 2 {
		w.remember(uuid.NewString(), "a", eventstore.Position{Commit: uint64(i)})
		if i == 0 {
			w.remember(w.order[0], "a", eventstore.Position{}) // planned again: no second place
		}
	}
	if len(w.queued) != rememberedEmails || len(w.order) != rememberedEmails {
		t.Fatalf("%d emails remembered in %d places", len(w.queued), len(w.order))
	}
	oldest := w.queued[w.order[w.next]].at.Commit
	if oldest != 2 {
		t.Fatalf("the oldest remembered is #%d, want #2", oldest)
	}
}

// An email event read with its email erased becomes no fan-out, and the
// erasure itself is no webhook: it drops the email's deliveries.
func TestPlanSkipsErasedEvents(t *testing.T) {
	id := uuid.NewString()
	now := time.Now()
	planned := func(e domain.Event) []river.InsertManyParams {
		d, err := codec.Encode(e, eventstore.Metadata{})
		if err != nil {
			t.Fatal(err)
		}
		jobs, err := (&Webhooks{}).Plan(context.Background(), eventstore.RecordedEvent{ID: d.ID, StreamID: email.Stream(id), Type: d.Type, Data: d.Data})
		if err != nil {
			t.Fatal(err)
		}
		return jobs
	}
	plan := func(e domain.Event) int { return len(planned(e)) }
	if n := plan(&email.Delivered{EmailID: id, OccurredAt: now}); n != 1 {
		t.Fatalf("%d fan-outs of a delivery, want 1", n)
	}
	for _, e := range []domain.Event{
		&email.Delivered{EmailID: id, OccurredAt: now, Erased: true},
		&email.Bounced{EmailID: id, BounceType: "Permanent", OccurredAt: now, Erased: true},
		&email.Clicked{EmailID: id, OccurredAt: now, Erased: true},
		&email.Failed{EmailID: id, Reason: email.ReasonSuppressed, FailedAt: now, Erased: true},
	} {
		if n := plan(e); n != 0 {
			t.Errorf("%d fan-outs of %T", n, e)
		}
	}
	jobs := planned(&email.Erased{EmailID: id, AccountID: "a", Reason: email.ErasedByRetention, ErasedAt: now})
	if len(jobs) != 1 || jobs[0].Args.Kind() != (DropArgs{}).Kind() || jobs[0].Args.(DropArgs).EmailID != id {
		t.Errorf("jobs of an erasure: %+v, want one that drops its deliveries", jobs)
	}
}

// The fan-out reads the endpoints only once the read model shows the
// email's queueing: behind that, it would find none and the event would
// reach nobody, so it waits and tries again.
func TestFanoutWaitsForTheEndpointsReadModel(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	t.Cleanup(func() { store.Close() })
	id := uuid.NewString()
	data, err := codec.Encode(&email.Queued{EmailID: id, AccountID: "acct", To: []string{"ann@example.org"}, QueuedAt: time.Now()}, eventstore.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(ctx, email.Stream(id), eventstore.NoStream, data); err != nil {
		t.Fatal(err)
	}
	behind := true
	asked := 0
	w := &Webhooks{
		Commands: commands.New(commands.Deps{Store: store}),
		Settle: func(context.Context, eventstore.Position, ...projections.Name) error {
			if behind {
				return &projections.LagError{Behind: []projections.Name{projections.WebhooksName}, Timeout: time.Millisecond}
			}
			return nil
		},
		Endpoints: func(context.Context, string, string, time.Time) ([]Target, error) {
			asked++
			return nil, nil
		},
	}
	job := &river.Job[FanoutArgs]{JobRow: &rivertype.JobRow{Attempt: 1},
		Args: FanoutArgs{EventID: uuid.NewString(), EmailID: id, Type: "email.delivered", At: time.Now()}}
	var snooze *river.JobSnoozeError
	if err := (&fanoutWorker{w: w}).Work(ctx, job); !errors.As(err, &snooze) || asked != 0 {
		t.Fatalf("behind the read model: %v, endpoints read %d times; want a snooze and no read", err, asked)
	}
	behind = false
	if err := (&fanoutWorker{w: w}).Work(ctx, job); err != nil || asked != 1 {
		t.Fatalf("caught up: %v, endpoints read %d times", err, asked)
	}
}

// A fan-out job queued by a release that kept no stories carries no
// correlation id: the deliveries it records continue the email's story
// (its send request's id) all the same, caused by the email event.
func TestFanoutWithoutACorrelationIDKeepsTheEmailsStory(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	t.Cleanup(func() { store.Close() })
	const req = "req_KVJB4SPMNTMG3XJJVNZVK6RUCK"
	id := uuid.NewString()
	data, err := codec.Encode(&email.Queued{EmailID: id, AccountID: "acct", To: []string{"ann@example.org"}, QueuedAt: time.Now()},
		eventstore.Metadata{Actor: "apikey:k_test", RequestID: req, CorrelationID: req, CausationID: req})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(ctx, email.Stream(id), eventstore.NoStream, data); err != nil {
		t.Fatal(err)
	}
	w := &Webhooks{
		Commands: commands.New(commands.Deps{Store: store, Now: time.Now}),
		Settle:   func(context.Context, eventstore.Position, ...projections.Name) error { return nil },
		Endpoints: func(context.Context, string, string, time.Time) ([]Target, error) {
			return []Target{{ID: "ep-1", Disabled: true}}, nil // skipped: recorded, never attempted
		},
	}
	sent := uuid.NewString()
	job := &river.Job[FanoutArgs]{JobRow: &rivertype.JobRow{Attempt: 1},
		Args: FanoutArgs{EventID: sent, EmailID: id, Type: "email.sent", At: time.Now()}}
	if err := (&fanoutWorker{w: w}).Work(ctx, job); err != nil {
		t.Fatal(err)
	}
	d := uuid.NewHash(sha1.New(), deliveryNamespace, []byte(sent+"/ep-1"), 5).String()
	recs, err := store.ReadStream(ctx, delivery.Stream(d), 0, 10)
	if err != nil || len(recs) == 0 {
		t.Fatalf("the delivery's stream: %v, %d events", err, len(recs))
	}
	for _, rec := range recs {
		if md := rec.Metadata; md.RequestID != req || md.CorrelationID != req || md.CausationID != sent {
			t.Errorf("%s: request_id %q, correlation_id %q, causation_id %q; want %q, %q, %q",
				rec.Type, md.RequestID, md.CorrelationID, md.CausationID, req, req, sent)
		}
	}
}

// A click's delivery carries its link, read from the email's stream at
// the revision its fan-out job names. A job that names none (queued
// before jobs did), another event's or one past the stream's end still
// finds its click.
func TestAClicksFanoutReadsItsLinkFromTheEmailsStream(t *testing.T) {
	for name, revision := range map[string]func(planned uint64) uint64{
		"as planned":          func(r uint64) uint64 { return r },
		"naming no revision":  func(uint64) uint64 { return 0 },
		"naming another":      func(r uint64) uint64 { return r + 1 },
		"naming one past all": func(uint64) uint64 { return 9 },
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			store := memory.New()
			t.Cleanup(func() { store.Close() })
			id, now := uuid.NewString(), time.Now()
			evs := []domain.Event{&email.Queued{EmailID: id, AccountID: "acct", To: []string{"ann@example.org"}, QueuedAt: now}}
			for _, link := range []string{"https://example.com/a", "https://example.com/b", "https://example.com/c"} {
				evs = append(evs, &email.Clicked{EmailID: id, FeedbackID: link, Link: link, OccurredAt: now})
			}
			data, err := codec.EncodeAll(evs, eventstore.Metadata{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := store.Append(ctx, email.Stream(id), eventstore.NoStream, data...); err != nil {
				t.Fatal(err)
			}
			recs, err := store.ReadStream(ctx, email.Stream(id), 0, 10)
			if err != nil {
				t.Fatal(err)
			}
			w := &Webhooks{
				Commands: commands.New(commands.Deps{Store: store, Now: time.Now}),
				Settle:   func(context.Context, eventstore.Position, ...projections.Name) error { return nil },
				Endpoints: func(context.Context, string, string, time.Time) ([]Target, error) {
					return []Target{{ID: "ep-1", Disabled: true}}, nil // skipped: recorded with its payload, never attempted
				},
			}
			click := recs[2] // of https://example.com/b
			planned, err := w.Plan(ctx, click)
			if err != nil || len(planned) != 1 {
				t.Fatalf("plan of a click: %v, %d jobs", err, len(planned))
			}
			args := planned[0].Args.(FanoutArgs)
			if args.Revision != click.StreamRevision {
				t.Errorf("the fan-out names revision %d, the click is at %d", args.Revision, click.StreamRevision)
			}
			args.Revision = revision(click.StreamRevision)
			if err := (&fanoutWorker{w: w}).Work(ctx, &river.Job[FanoutArgs]{JobRow: &rivertype.JobRow{Attempt: 1}, Args: args}); err != nil {
				t.Fatal(err)
			}
			d := uuid.NewHash(sha1.New(), deliveryNamespace, []byte(args.EventID+"/ep-1"), 5).String()
			drecs, err := store.ReadStream(ctx, delivery.Stream(d), 0, 1)
			if err != nil || len(drecs) != 1 {
				t.Fatalf("the delivery's stream: %v, %d events", err, len(drecs))
			}
			created, err := codec.Decode(drecs[0])
			if err != nil {
				t.Fatal(err)
			}
			if p := created.(*delivery.Created).Payload; !strings.Contains(p, `"link":"https://example.com/b"`) {
				t.Errorf("payload %s, want the link https://example.com/b", p)
			}
		})
	}
}
