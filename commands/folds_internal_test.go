package commands

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/account"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/domain/sendingdomain"
	"github.com/mailroom/mailroom/domain/webhook"
	"github.com/mailroom/mailroom/internal/eventstore/memory"
)

// A kept state is the start of every later load of its stream, several at
// once: the loads and decisions that go on from it must leave it as the
// store's events made it. Each case makes a long stream, loads it (so it
// is kept), appends the events that change the parts of the state held by
// reference (maps, lists, pointers), one load after each, and decides on
// every state loaded; the state first loaded must still equal its stream
// folded afresh.
func TestAKeptStateIsNotChangedByWhatIsFoldedOrDecidedOnIt(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	id := uuid.NewString()
	key := func(sel string) sendingdomain.Key {
		return sendingdomain.Key{Selector: sel, PublicKey: "pk-" + sel, SealedKey: "sk-" + sel, CreatedAt: t0}
	}
	t.Run("endpoint", func(t *testing.T) {
		long(t, webhook.Stream(id), webhook.Evolve, func(i int) domain.Event {
			if i == 0 {
				return &webhook.Created{EndpointID: id, AccountID: "acct", URL: "https://hooks.example.com/a",
					EventTypes: []string{"email.sent", "email.bounced"}, SealedSecret: "s", CreatedAt: t0}
			}
			if i%2 == 0 {
				return &webhook.FailuresReset{EndpointID: id, DeliveryID: fmt.Sprint("d", i), At: t0}
			}
			return &webhook.EventExhausted{EndpointID: id, DeliveryID: fmt.Sprint("d", i), At: t0}
		}, []domain.Event{
			&webhook.EventExhausted{EndpointID: id, DeliveryID: "late", At: t0},
			&webhook.Updated{EndpointID: id, EventTypes: []string{"email.sent"}, UpdatedAt: t0},
			&webhook.FailuresReset{EndpointID: id, DeliveryID: "ok", At: t0},
			&webhook.Resumed{EndpointID: id, ResumedAt: t0},
		}, func(st webhook.State) {
			webhook.RecordOutcome(st, "next", false, t0)
			webhook.Update(st, "acct", webhook.Settings{EventTypes: []string{"email.opened"}, TypesGiven: true}, nil, t0)
		})
	})
	t.Run("slots", func(t *testing.T) {
		long(t, webhook.SlotsStream("acct"), webhook.EvolveSlots, func(i int) domain.Event {
			if i == 0 {
				return &webhook.SlotsSeeded{AccountID: "acct", EndpointIDs: []string{"a", "b"}, SeededAt: t0}
			}
			return &webhook.SlotTaken{AccountID: "acct", EndpointID: fmt.Sprint("ep", i%8), TakenAt: t0.Add(time.Duration(i))}
		}, []domain.Event{
			&webhook.SlotTaken{AccountID: "acct", EndpointID: "new", TakenAt: t0},
			&webhook.SlotFreed{AccountID: "acct", EndpointID: "a", FreedAt: t0},
		}, func(st webhook.Slots) {
			webhook.TakeSlot(st, "acct", "another", nil, map[string]bool{"new": true}, t0)
			webhook.FreeSlot(st, "acct", "b", t0)
		})
	})
	t.Run("domain", func(t *testing.T) {
		long(t, sendingdomain.Stream(id), sendingdomain.Evolve, func(i int) domain.Event {
			switch i {
			case 0:
				k := key("s0")
				return &sendingdomain.Added{DomainID: id, AccountID: "acct", Name: "example.com", Region: "eu-west-1",
					DkimMode: sendingdomain.BYODKIM, Key: &k, AddedAt: t0, Deadline: t0.Add(sendingdomain.VerificationWindow)}
			case 1:
				return &sendingdomain.Verified{DomainID: id, VerifiedAt: t0}
			case 2:
				return &sendingdomain.KeyChangeStarted{DomainID: id, Kind: sendingdomain.Rotation, Key: key("s1"), StartedAt: t0}
			}
			return &sendingdomain.Checked{DomainID: id, DkimOK: true, MailFromOK: true,
				Servers: []sendingdomain.ServerCheck{{Server: "1.1.1.1:53", OK: true}}, CheckedAt: t0.Add(time.Duration(i) * time.Hour)}
		}, []domain.Event{
			&sendingdomain.KeyCutOver{DomainID: id, Kind: sendingdomain.Rotation, Selector: "s1", OldSelector: "s0", CutOverAt: t0, OldKeyRetiresAt: t0},
			&sendingdomain.KeyReplaced{DomainID: id, Key: key("s2"), OldSelector: "s1", ReplacedAt: t0},
			&sendingdomain.OldKeyRetired{DomainID: id, Selector: "s0", RetiredAt: t0},
			&sendingdomain.Checked{DomainID: id, Servers: []sendingdomain.ServerCheck{{Server: "8.8.8.8:53"}}, CheckedAt: t0},
		}, func(st sendingdomain.State) {
			sendingdomain.StartRotation(st, "acct", key("s9"), t0)
			sendingdomain.RetireOldKey(st, t0.Add(30*24*time.Hour))
		})
	})
}

// long makes stream keepAfter+100 events long (made by next), loads it
// through a service that keeps it, then appends more one at a time,
// loading and deciding after each, and compares the first state loaded
// with a fresh fold of what it was loaded from.
func long[S any](t *testing.T, stream string, evolve func(S, domain.Event) S, next func(int) domain.Event,
	more []domain.Event, decide func(S)) {
	t.Helper()
	if !keeps[S]() {
		t.Fatalf("%T is not kept", *new(S))
	}
	ctx := context.Background()
	store := memory.New()
	t.Cleanup(func() { store.Close() })
	seed(t, store, stream, keepAfter+100, next)
	s := New(Deps{Store: store})
	first, _, err := load(ctx, s, stream, evolve)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := foldedFrom[S](s.folds, stream); !ok {
		t.Fatal("the long stream's state is not kept")
	}
	afresh, _, err := load(ctx, &Service{store: store}, stream, evolve)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(first, afresh) {
		t.Fatalf("loaded\n%+v\nfolded afresh\n%+v", first, afresh)
	}
	decide(first)
	for _, e := range more {
		seed(t, store, stream, 1, func(int) domain.Event { return e })
		st, _, err := load(ctx, s, stream, evolve)
		if err != nil {
			t.Fatal(err)
		}
		decide(st)
	}
	if !reflect.DeepEqual(first, afresh) {
		t.Fatalf("the kept state changed under later loads and decisions:\n%+v\nwas\n%+v", first, afresh)
	}
	last, _, err := load(ctx, s, stream, evolve)
	if err != nil {
		t.Fatal(err)
	}
	if want, _, _ := load(ctx, &Service{store: store}, stream, evolve); !reflect.DeepEqual(last, want) {
		t.Fatalf("loaded from what was kept\n%+v\nfolded afresh\n%+v", last, want)
	}
}

// Emails and accounts are never kept, however long: an email's events
// carry personal data, an account's state every token it issued.
func TestEmailsAndAccountsAreNotKept(t *testing.T) {
	ctx := context.Background()
	store := memory.New()
	t.Cleanup(func() { store.Close() })
	id, t0 := uuid.NewString(), time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	seed(t, store, email.Stream(id), email.MaxEngagement, func(i int) domain.Event {
		return &email.Opened{EmailID: id, FeedbackID: fmt.Sprint("f", i), UserAgent: "Mail/1.0", OccurredAt: t0.Add(time.Duration(i))}
	})
	seed(t, store, account.Stream(id), keepAfter+100, func(i int) domain.Event {
		if i == 0 {
			return &account.Created{AccountID: id, Name: "Acme", CreatedAt: t0}
		}
		return &account.TokenIssued{AccountID: id, TokenID: fmt.Sprint("t", i), Role: account.RoleMember, TokenHash: fmt.Sprintf("%064d", i), IssuedAt: t0}
	})
	s := New(Deps{Store: store})
	if _, _, err := load(ctx, s, email.Stream(id), email.Evolve); err != nil {
		t.Fatal(err)
	}
	if _, _, err := load(ctx, s, account.Stream(id), account.Evolve); err != nil {
		t.Fatal(err)
	}
	if n := s.folds.kept.Len(); n != 0 {
		t.Fatalf("%d states kept after loading an email and an account", n)
	}
}
