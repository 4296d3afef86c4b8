package commands

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/account"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/domain/sendingdomain"
	"github.com/mailroom/mailroom/domain/webhook"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/eventstore/postgres"
	"github.com/mailroom/mailroom/internal/pgtest"
)

// These benchmarks load, from PostgreSQL, the streams that grow with an
// account's history and that a frequent command reads: what such a command
// pays at a year's size under heavy use, the first time in a process
// ("whole", linear in the events loaded per op) and after that, from the
// state the process kept ("kept", folds.go).

// seed appends n events, made by next, to stream in appends of a thousand.
func seed(b testing.TB, store eventstore.Store, stream string, n int, next func(i int) domain.Event) {
	b.Helper()
	ctx := context.Background()
	for i := 0; i < n; {
		var evs []domain.Event
		for ; i < n && len(evs) < 1000; i++ {
			evs = append(evs, next(i))
		}
		data, err := codec.EncodeAll(evs, Started("bench").metadata())
		if err != nil {
			b.Fatal(err)
		}
		if _, err := store.Append(ctx, stream, eventstore.Any, data...); err != nil {
			b.Fatal(err)
		}
	}
}

// benchLoad loads stream, n events long, as the first command on it in a
// process does ("whole"), and, for the streams a process keeps
// (folds.go), as each later command does: after one more event, made by
// next, was appended ("kept").
func benchLoad[S any](b *testing.B, store eventstore.Store, stream string, n int, evolve func(S, domain.Event) S, next func(i int) domain.Event) {
	ctx := context.Background()
	b.Run("whole", func(b *testing.B) {
		s := &Service{store: store}
		for b.Loop() {
			if _, _, err := load(ctx, s, stream, evolve); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(n), "events/op")
	})
	if !keeps[S]() {
		return
	}
	b.Run("kept", func(b *testing.B) {
		s := New(Deps{Store: store})
		if _, _, err := load(ctx, s, stream, evolve); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			b.StopTimer()
			seed(b, store, stream, 1, func(int) domain.Event { n++; return next(n - 1) })
			b.StartTimer()
			if _, _, err := load(ctx, s, stream, evolve); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// An endpoint whose receiver refuses one kind of event for good (say, a
// 400 on every email.complained) while taking the rest: each refused event
// adds a WebhookEventExhausted, and the next success a WebhookFailuresReset.
// At 100 refused events a day, 73,000 events a year; every exhausted
// delivery, every first success after one, and every PATCH, rotation,
// test and delete of the endpoint loads the endpoint.
func BenchmarkLoadingAWebhookEndpointAfterAYearOfRefusedEvents(b *testing.B) {
	store := postgres.New(pgtest.NewPool(b))
	b.Cleanup(func() { store.Close() })
	id, t0 := uuid.NewString(), time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const n = 73000
	next := func(i int) domain.Event {
		at := t0.Add(time.Duration(i) * 7 * time.Minute)
		switch {
		case i == 0:
			return &webhook.Created{EndpointID: id, AccountID: "acct", URL: "https://hooks.example.com/mailroom",
				EventTypes: webhook.EventTypes, SealedSecret: "sealed", CreatedAt: at}
		case i%2 == 1:
			return &webhook.EventExhausted{EndpointID: id, DeliveryID: uuid.NewString(), At: at}
		default:
			return &webhook.FailuresReset{EndpointID: id, DeliveryID: uuid.NewString(), At: at}
		}
	}
	seed(b, store, webhook.Stream(id), n, next)
	benchLoad(b, store, webhook.Stream(id), n, webhook.Evolve, next)
}

// An account whose deployments create a webhook endpoint each and delete
// it after (as clients do with API keys): a SlotTaken and a SlotFreed on
// the account's slots stream per deployment. At 50 a day, 36,500 events a
// year, loaded by every endpoint create and delete.
func BenchmarkLoadingTheSlotsOfAnAccountThatCreatesAnEndpointPerDeployment(b *testing.B) {
	store := postgres.New(pgtest.NewPool(b))
	b.Cleanup(func() { store.Close() })
	const n = 36500
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var ep string
	next := func(i int) domain.Event {
		at := t0.Add(time.Duration(i) * 14 * time.Minute)
		switch {
		case i == 0:
			return &webhook.SlotsSeeded{AccountID: "acct", EndpointIDs: []string{}, SeededAt: at}
		case i%2 == 1:
			ep = uuid.NewString()
			return &webhook.SlotTaken{AccountID: "acct", EndpointID: ep, TakenAt: at}
		default:
			return &webhook.SlotFreed{AccountID: "acct", EndpointID: ep, FreedAt: at}
		}
	}
	seed(b, store, webhook.SlotsStream("acct"), n, next)
	benchLoad(b, store, webhook.SlotsStream("acct"), n, webhook.EvolveSlots, next)
}

// A verified domain whose owner's monitoring asks to verify it every
// minute: a check that finds what the last one found is recorded once an
// hour, 8,760 a year, each naming what three resolvers found of five
// records. Every verify, rotation and removal loads them.
func BenchmarkLoadingADomainVerifiedEveryMinuteForAYear(b *testing.B) {
	store := postgres.New(pgtest.NewPool(b))
	b.Cleanup(func() { store.Close() })
	id, t0 := uuid.NewString(), time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const n = 8760
	var servers []sendingdomain.ServerCheck
	for _, s := range []string{"1.1.1.1:53", "8.8.8.8:53", "9.9.9.9:53"} {
		sc := sendingdomain.ServerCheck{Server: s, OK: true}
		for _, r := range []string{"sel._domainkey", "mail", "mail", "_dmarc", "@"} {
			sc.Records = append(sc.Records, sendingdomain.RecordVerdict{Type: "TXT", Name: r + ".example.com", OK: true})
		}
		servers = append(servers, sc)
	}
	next := func(i int) domain.Event {
		at := t0.Add(time.Duration(i) * time.Hour)
		if i == 0 {
			return &sendingdomain.Added{DomainID: id, AccountID: "acct", Name: "example.com", Region: "eu-west-1",
				DkimMode: sendingdomain.BYODKIM, Key: &sendingdomain.Key{Selector: "sel", PublicKey: "pk", SealedKey: "sk", CreatedAt: at},
				AddedAt: at, Deadline: at.Add(sendingdomain.VerificationWindow)}
		}
		return &sendingdomain.Checked{DomainID: id, DkimOK: true, MailFromOK: true, DmarcOK: true, Servers: servers, CheckedAt: at}
	}
	seed(b, store, sendingdomain.Stream(id), n, next)
	benchLoad(b, store, sendingdomain.Stream(id), n, sendingdomain.Evolve, next)
}

// An account an operator issued an expiring token a day to for ten years,
// each revoked: 7,300 events, loaded by every token issue and revoke,
// suspension, reinstatement and retention change.
func BenchmarkLoadingAnAccountWithTenYearsOfDailyTokens(b *testing.B) {
	store, id, n, next := accountWithDailyTokens(b)
	benchLoad(b, store, account.Stream(id), n, account.Evolve, next)
}

// What a legacy domain import and an erasure ask of that account: only
// that it exists.
func BenchmarkCheckingThatAnAccountWithTenYearsOfDailyTokensExists(b *testing.B) {
	store, id, _, _ := accountWithDailyTokens(b)
	s := New(Deps{Store: store})
	for b.Loop() {
		if err := s.accountExists(context.Background(), id); err != nil {
			b.Fatal(err)
		}
	}
}

func accountWithDailyTokens(b *testing.B) (eventstore.Store, string, int, func(int) domain.Event) {
	store := postgres.New(pgtest.NewPool(b))
	b.Cleanup(func() { store.Close() })
	id, t0 := uuid.NewString(), time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const n = 7300
	var tok string
	next := func(i int) domain.Event {
		at := t0.Add(time.Duration(i) * 12 * time.Hour)
		switch {
		case i == 0:
			return &account.Created{AccountID: id, Name: "Acme", CreatedAt: at}
		case i%2 == 1:
			tok = uuid.NewString()
			exp := at.Add(24 * time.Hour)
			return &account.TokenIssued{AccountID: id, TokenID: tok, Role: account.RoleMember, TokenHash: fmt.Sprintf("%064d", i), IssuedAt: at, ExpiresAt: &exp}
		default:
			return &account.TokenRevoked{AccountID: id, TokenID: tok, RevokedAt: at}
		}
	}
	seed(b, store, account.Stream(id), n, next)
	return store, id, n, next
}

// An email at the engagement cap: a click's webhook fan-out reads the
// click from the email's stream, for its link stays sealed in the log.
// Finding the last of a thousand clicks is what the fan-out of each click
// pays as the email nears the cap.
func BenchmarkReadingTheLastClickOfAnEmailAtTheCap(b *testing.B) {
	store := postgres.New(pgtest.NewPool(b))
	b.Cleanup(func() { store.Close() })
	s := New(Deps{Store: store})
	id, t0 := uuid.NewString(), time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	next := func(i int) domain.Event {
		return &email.Clicked{EmailID: id, FeedbackID: uuid.NewString(), Link: "https://example.com/offer?utm=" + fmt.Sprint(i),
			OccurredAt: t0.Add(time.Duration(i) * time.Minute)}
	}
	seed(b, store, email.Stream(id), email.MaxEngagement, next)
	ctx := context.Background()
	last, err := store.ReadStream(ctx, email.Stream(id), email.MaxEngagement-1, 1)
	if err != nil || len(last) != 1 {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := s.EmailEvent(ctx, id, last[0].ID.String(), last[0].StreamRevision); err != nil {
			b.Fatal(err)
		}
	}
}

// The same email loaded whole: what recording each of its opens and
// clicks, and each one's webhook fan-out, pays near the cap.
func BenchmarkLoadingAnEmailAtTheCap(b *testing.B) {
	store := postgres.New(pgtest.NewPool(b))
	b.Cleanup(func() { store.Close() })
	id, t0 := uuid.NewString(), time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	next := func(i int) domain.Event {
		return &email.Clicked{EmailID: id, FeedbackID: uuid.NewString(), Link: "https://example.com/offer?utm=" + fmt.Sprint(i),
			OccurredAt: t0.Add(time.Duration(i) * time.Minute)}
	}
	seed(b, store, email.Stream(id), email.MaxEngagement, next)
	benchLoad(b, store, email.Stream(id), email.MaxEngagement, email.Evolve, next)
}
