package projections_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/projections"
)

// rowByRow is the emails projector without its ApplyBatch: the runner
// applies its events one by one.
type rowByRow struct{ p projections.Emails }

func (r rowByRow) Name() projections.Name                      { return r.p.Name() }
func (r rowByRow) Version() int                                { return r.p.Version() }
func (r rowByRow) Tables() []string                            { return r.p.Tables() }
func (r rowByRow) Schema() string                              { return r.p.Schema() }
func (r rowByRow) Indexes(ext projections.Extensions) []string { return r.p.Indexes(ext) }
func (r rowByRow) Apply(ev eventstore.RecordedEvent, b *pgx.Batch) error {
	return r.p.Apply(ev, b)
}

// mixedEmails appends emails whose stories cover every event the emails
// projector reads, with feedback out of order, ties within a microsecond
// and at the same instant, repeated sends and shared suppressed addresses.
// Streams are interleaved, so most emails span several batches.
func mixedEmails(t *testing.T, store eventstore.Store, n int) eventstore.Position {
	t.Helper()
	rng := rand.New(rand.NewPCG(12, 34))
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	at := func() time.Time {
		// Nanoseconds within one microsecond, so ties show after storage.
		return base.Add(time.Duration(rng.IntN(40))*time.Second + time.Duration(rng.IntN(3))*time.Microsecond + time.Duration(rng.IntN(999)))
	}
	stories := make([][]domain.Event, n)
	ids := make([]string, n)
	for i := range stories {
		id := uuid.NewString()
		ids[i] = id
		acct := fmt.Sprintf("acct-%d", rng.IntN(3))
		to := []string{fmt.Sprintf("User%d@Example.org", rng.IntN(20))}
		if rng.IntN(3) == 0 {
			to = append(to, fmt.Sprintf("other%d@example.org", rng.IntN(20)))
		}
		q := &email.Queued{EmailID: id, AccountID: acct, From: "Acme <a@acme.test>", FromEmail: "a@acme.test", To: to,
			Subject: fmt.Sprintf("subject %d", i), QueuedAt: base.Add(time.Duration(rng.IntN(999)))}
		if rng.IntN(4) == 0 {
			q.Attachments = []email.Attachment{{Filename: "a.pdf", ContentType: "application/pdf", SizeBytes: 10, Path: "https://x.test/a.pdf"}}
		}
		story := []domain.Event{q}
		if rng.IntN(2) == 0 {
			story = append(story, &email.Scanned{EmailID: id, Attachments: []email.Attachment{{Filename: "b.pdf", ContentType: "application/pdf", ContentID: "cid", SizeBytes: 20}}, ScannedAt: at()})
		}
		if rng.IntN(8) == 0 {
			story = append(story, &email.Failed{EmailID: id, Reason: "rejected", Detail: "no", FailedAt: at()})
			stories[i] = story
			continue
		}
		story = append(story, &email.Sent{EmailID: id, ProviderMessageID: "p-" + id, SentAt: at()})
		if rng.IntN(10) == 0 {
			story = append(story, &email.Sent{EmailID: id, ProviderMessageID: "again-" + id, SentAt: at()})
		}
		for range rng.IntN(6) {
			fb := uuid.NewString()
			switch rng.IntN(7) {
			case 0:
				story = append(story, &email.Delivered{EmailID: id, FeedbackID: fb, Recipients: to, OccurredAt: at()})
			case 1:
				story = append(story, &email.Bounced{EmailID: id, FeedbackID: fb, BounceType: "Transient", BounceSubtype: "General", Recipients: to, OccurredAt: at()})
			case 2:
				story = append(story, &email.Bounced{EmailID: id, FeedbackID: fb, BounceType: "Permanent", BounceSubtype: "General", Recipients: to, OccurredAt: at()})
			case 3:
				story = append(story, &email.Complained{EmailID: id, FeedbackID: fb, FeedbackType: "abuse", Recipients: to[:1], OccurredAt: at()})
			case 4:
				story = append(story, &email.Opened{EmailID: id, FeedbackID: fb, UserAgent: "ua", OccurredAt: at()})
			case 5:
				story = append(story, &email.Clicked{EmailID: id, FeedbackID: fb, Link: "https://acme.test/", OccurredAt: at()})
			case 6:
				story = append(story, &email.Failed{EmailID: id, Reason: "provider_rejected", FailedAt: at()})
			}
		}
		stories[i] = story
	}
	var last eventstore.Position
	for k := 0; ; k++ {
		var parts []eventstore.StreamAppend
		for i, story := range stories {
			if k >= len(story) {
				continue
			}
			data, err := codec.EncodeAll(story[k:k+1], eventstore.Metadata{Actor: "test"})
			if err != nil {
				t.Fatal(err)
			}
			parts = append(parts, eventstore.StreamAppend{Stream: email.Stream(ids[i]), Expected: eventstore.Any, Events: data})
		}
		if len(parts) == 0 {
			return last
		}
		for len(parts) > 0 {
			chunk := parts[:min(len(parts), 97)]
			parts = parts[len(chunk):]
			res, err := store.AppendMany(context.Background(), chunk...)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res {
				if last.Less(r.Position) {
					last = r.Position
				}
			}
		}
	}
}

// tableOrder is a read-model table and the key its rows are compared by.
type tableOrder struct{ name, key string }

// tablesJSON reads tables as JSON, row by row in key order.
func tablesJSON(t *testing.T, pool *pgxpool.Pool, tables []tableOrder) []string {
	t.Helper()
	out := make([]string, len(tables))
	for i, tb := range tables {
		q := fmt.Sprintf(`SELECT coalesce(json_agg(t ORDER BY %s)::text, '') FROM %s t`, tb.key, tb.name)
		if err := pool.QueryRow(context.Background(), q).Scan(&out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// matchesOneByOne projects the log up to last with batched, caught up live
// and then rebuilt, and with one, event by event, and fails the test where
// the batches leave tables otherwise. It returns the tables as one left
// them, for the caller to check that there was enough to compare.
func matchesOneByOne(t *testing.T, pool *pgxpool.Pool, store eventstore.Store, last eventstore.Position,
	batched, one projections.Projector, tables []tableOrder) []string {
	t.Helper()
	ctx := context.Background()
	r := projections.NewRunner(pool, store, nil, quiet, batched)
	if err := r.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	catchUpTo(t, r, batched, last)
	caughtUp := tablesJSON(t, pool, tables)
	if err := r.Rebuild(ctx, batched, nil); err != nil {
		t.Fatal(err)
	}
	catchUpTo(t, r, batched, last)
	rebuilt := tablesJSON(t, pool, tables)

	r1 := projections.NewRunner(pool, store, nil, quiet, one)
	if err := r1.Rebuild(ctx, one, nil); err != nil {
		t.Fatal(err)
	}
	catchUpTo(t, r1, one, last)
	want := tablesJSON(t, pool, tables)
	for i, tb := range tables {
		if caughtUp[i] != want[i] {
			t.Errorf("%s caught up in batches differs from event by event:\n%s\nwant\n%s", tb.name, caughtUp[i], want[i])
		}
		if rebuilt[i] != want[i] {
			t.Errorf("%s rebuilt in batches differs from event by event:\n%s\nwant\n%s", tb.name, rebuilt[i], want[i])
		}
	}
	return want
}

// The set-based batches leave the emails read model exactly as applying
// each event in turn does, whether by rebuild or by catching up.
func TestEmailsBatchesMatchEventByEvent(t *testing.T) {
	pool, store := setup(t)
	last := mixedEmails(t, store, 400)
	want := matchesOneByOne(t, pool, store, last, projections.Emails{}, rowByRow{},
		[]tableOrder{{"emails", "id"}, {"email_events", "event_id"}, {"suppressions", "account_id, address_key"}, {"email_daily_stats", "account_id, day"}})
	if len(want[0]) < 1000 || len(want[1]) < 1000 || len(want[2]) < 100 || len(want[3]) < 100 {
		t.Fatalf("too little projected to compare: %d, %d, %d, %d bytes", len(want[0]), len(want[1]), len(want[2]), len(want[3]))
	}
}

// A value PostgreSQL refuses fails the set-based batch; applied again event
// by event, it quarantines only its own email's stream.
func TestEmailsBatchQuarantinesOnlyThePoisonedStream(t *testing.T) {
	pool, store := setup(t)
	ctx := context.Background()
	var last eventstore.Position
	var poisoned string
	for i := range 4 {
		id := uuid.NewString()
		subject := "fine"
		if i == 2 {
			subject, poisoned = "nul\x00here", id
		}
		data, err := codec.EncodeAll([]domain.Event{
			&email.Queued{EmailID: id, AccountID: "acct", From: "a@acme.test", FromEmail: "a@acme.test", To: []string{"x@example.org"}, Subject: subject, QueuedAt: time.Now()},
			&email.Sent{EmailID: id, ProviderMessageID: "p-" + id, SentAt: time.Now()},
		}, eventstore.Metadata{Actor: "test"})
		if err != nil {
			t.Fatal(err)
		}
		res, err := store.Append(ctx, email.Stream(id), eventstore.NoStream, data...)
		if err != nil {
			t.Fatal(err)
		}
		last = res.Position
	}
	p := projections.Emails{}
	r := projections.NewRunner(pool, store, nil, quiet, p)
	if err := r.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	catchUpTo(t, r, p, last)
	st, err := r.Status(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if q := st[0].Quarantined; len(q) != 1 || q[0].Stream != email.Stream(poisoned) {
		t.Fatalf("quarantined %+v, want only %s", q, email.Stream(poisoned))
	}
	var sent int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM emails WHERE status = 'sent'").Scan(&sent); err != nil {
		t.Fatal(err)
	}
	if sent != 3 {
		t.Fatalf("%d emails projected as sent, want the 3 others", sent)
	}
}
