package projections_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/account"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/datakeys"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/eventstore/postgres"
	"github.com/mailroom/mailroom/internal/pgtest"
	"github.com/mailroom/mailroom/projections"
)

// BenchmarkRebuild replays 50,000 account events through every projector
// and reports events/s of the whole rebuild (replay, swap, checkpoint).
func BenchmarkRebuild(b *testing.B) {
	pool := pgtest.NewPool(b)
	store := postgres.New(pool)
	ctx := context.Background()
	const total, chunk = 50_000, 1_000
	now := time.Now()
	for done := 0; done < total; done += chunk {
		id := uuid.NewString()
		evs := []domain.Event{&account.Created{AccountID: id, Name: "bench", CreatedAt: now}}
		for len(evs) < chunk {
			evs = append(evs, &account.TokenIssued{AccountID: id, TokenID: uuid.NewString(), Role: account.RoleMember, TokenHash: uuid.NewString(), IssuedAt: now})
		}
		data, err := codec.EncodeAll(evs, eventstore.Metadata{Actor: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := store.Append(ctx, account.Stream(id), eventstore.NoStream, data...); err != nil {
			b.Fatal(err)
		}
	}
	r := projections.NewRunner(pool, store, nil, quiet, projections.All(datakeys.AddressKeys{})...)
	if err := r.Prepare(ctx); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		for _, p := range r.Projectors() {
			if err := r.Rebuild(ctx, p, nil); err != nil {
				b.Fatal(err)
			}
		}
	}
	// Each projector reads every event: events/s per projector pass.
	passes := float64(b.N * len(r.Projectors()))
	b.ReportMetric(total*passes/time.Since(start).Seconds(), "events/s")
}

// BenchmarkRebuildEmails replays 16,000 emails of five events each (queued,
// sent, delivered, opened, clicked: 80,000 events) through the emails
// projector and reports events/s of the whole rebuild. Each email has a
// recipient of its own, as the index of their trigrams costs by their
// variety.
func BenchmarkRebuildEmails(b *testing.B) {
	pool := pgtest.NewPool(b)
	store := postgres.New(pool)
	ctx := context.Background()
	const emails, perAppend = 16_000, 100
	now := time.Now()
	var parts []eventstore.StreamAppend
	for i := range emails {
		id := uuid.NewString()
		to := fmt.Sprintf("user.%d@example%d.org", i, i%50)
		evs := []domain.Event{
			&email.Queued{EmailID: id, AccountID: "bench", From: "a@acme.test", FromEmail: "a@acme.test", To: []string{to}, Subject: "bench", QueuedAt: now},
			&email.Sent{EmailID: id, ProviderMessageID: "p-" + id, SentAt: now.Add(time.Second)},
			&email.Delivered{EmailID: id, FeedbackID: "d-" + id, Recipients: []string{to}, OccurredAt: now.Add(2 * time.Second)},
			&email.Opened{EmailID: id, FeedbackID: "o-" + id, OccurredAt: now.Add(3 * time.Second)},
			&email.Clicked{EmailID: id, FeedbackID: "c-" + id, Link: "https://acme.test/", OccurredAt: now.Add(4 * time.Second)},
		}
		data, err := codec.EncodeAll(evs, eventstore.Metadata{Actor: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		parts = append(parts, eventstore.StreamAppend{Stream: email.Stream(id), Expected: eventstore.NoStream, Events: data})
		if len(parts) == perAppend {
			if _, err := store.AppendMany(ctx, parts...); err != nil {
				b.Fatal(err)
			}
			parts = parts[:0]
		}
	}
	p := projections.Emails{}
	r := projections.NewRunner(pool, store, nil, quiet, p)
	if err := r.Prepare(ctx); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		if err := r.Rebuild(ctx, p, nil); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(emails*5*float64(b.N)/time.Since(start).Seconds(), "events/s")
}
