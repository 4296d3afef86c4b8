package sealed_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/delivery"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/datakeys"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/eventstore/postgres"
	"github.com/mailroom/mailroom/internal/eventstore/sealed"
	"github.com/mailroom/mailroom/internal/pgtest"
	"github.com/mailroom/mailroom/internal/secretbox"
)

type world struct {
	pool  *pgxpool.Pool
	raw   eventstore.Store
	store *sealed.Store
	keys  *datakeys.Keyring
}

func newWorld(t *testing.T) world {
	t.Helper()
	pool := pgtest.NewPool(t)
	box, err := secretbox.New(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	raw := postgres.New(pool)
	keys := datakeys.New(pool, box)
	return world{pool: pool, raw: raw, store: sealed.New(raw, keys), keys: keys}
}

func queued(id string) *email.Queued {
	return &email.Queued{
		EmailID: id, AccountID: "acct-1", DomainID: "dom-1", From: "Shop <shop@example.com>", FromEmail: "shop@example.com",
		To: []string{"Alice Liddell <alice@example.org>"}, Bcc: []string{"carol@example.org"}, Subject: "Your order 4711",
		Tags: map[string]string{"customer": "alice"}, HTMLDigest: "sha256:" + strings.Repeat("a", 64),
		RecipientKeys: []string{"ak1:x"}, QueuedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	}
}

func (w world) append(t *testing.T, stream string, events ...domain.Event) {
	t.Helper()
	data, err := codec.EncodeAll(events, eventstore.Metadata{Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.store.Append(context.Background(), stream, eventstore.Any, data...); err != nil {
		t.Fatal(err)
	}
}

func readStream(t *testing.T, s eventstore.Store, stream string) []eventstore.RecordedEvent {
	t.Helper()
	evs, err := s.ReadStream(context.Background(), stream, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// readAll reads the log once its first n events are visible to readers
// of $all, which trail appends by a moment.
func readAll(t *testing.T, s eventstore.Store, n int) []eventstore.RecordedEvent {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; {
		evs, err := s.ReadAll(context.Background(), eventstore.Start, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) >= n || time.Now().After(deadline) {
			return evs
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func decode(t *testing.T, ev eventstore.RecordedEvent) domain.Event {
	t.Helper()
	e, err := codec.Decode(ev)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// personalWords are what must never be stored in the clear.
var personalWords = []string{"alice", "Alice", "carol", "4711", "shop@example.com", "Liddell"}

func TestPersonalFieldsAreStoredSealedAndReadBackOpen(t *testing.T) {
	w := newWorld(t)
	w.append(t, email.Stream("e1"), queued("e1"),
		&email.Bounced{EmailID: "e1", FeedbackID: "f1", BounceType: "Permanent", Recipients: []string{"alice@example.org"}, RecipientKeys: []string{"ak1:x"}})

	for _, ev := range readStream(t, w.raw, email.Stream("e1")) {
		for _, word := range personalWords {
			if bytes.Contains(ev.Data, []byte(word)) {
				t.Errorf("stored %s holds %q in the clear: %s", ev.Type, word, ev.Data)
			}
		}
		if !bytes.Contains(ev.Data, []byte(`"personal"`)) {
			t.Errorf("stored %s has no sealed member: %s", ev.Type, ev.Data)
		}
	}
	// What is not personal stays readable without the key.
	if raw := readStream(t, w.raw, email.Stream("e1"))[0].Data; !bytes.Contains(raw, []byte(`"account_id":"acct-1"`)) || !bytes.Contains(raw, []byte(`"recipient_keys":["ak1:x"]`)) {
		t.Errorf("stored EmailQueued lost its clear fields: %s", raw)
	}

	evs := readStream(t, w.store, email.Stream("e1"))
	q := decode(t, evs[0]).(*email.Queued)
	want := queued("e1")
	if q.Erased || q.Subject != want.Subject || q.To[0] != want.To[0] || q.Bcc[0] != want.Bcc[0] || q.From != want.From || q.Tags["customer"] != "alice" || q.HTMLDigest != want.HTMLDigest {
		t.Errorf("opened EmailQueued = %+v, want %+v", q, want)
	}
	b := decode(t, evs[1]).(*email.Bounced)
	if b.Erased || len(b.Recipients) != 1 || b.Recipients[0] != "alice@example.org" {
		t.Errorf("opened EmailBounced = %+v", b)
	}
}

func TestDestroyedKeyReadsAsErasedAndTheChainStillVerifies(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	w.append(t, email.Stream("e1"), queued("e1"), &email.Sent{EmailID: "e1", ProviderMessageID: "p1"})
	w.append(t, email.Stream("e2"), queued("e2"))
	if err := w.keys.Destroy(ctx, codec.KeyID("e1"), "acct-1"); err != nil {
		t.Fatal(err)
	}

	// A fresh keyring, as another process would have, reads the same.
	box, _ := secretbox.New(bytes.Repeat([]byte{7}, 32))
	for name, s := range map[string]eventstore.Store{"this process": w.store, "another process": sealed.New(w.raw, datakeys.New(w.pool, box))} {
		evs := readAll(t, s, 3)
		var erased, open int
		for _, ev := range evs {
			q, ok := decode(t, ev).(*email.Queued)
			if !ok {
				continue
			}
			switch q.EmailID {
			case "e1":
				if !q.Erased || q.Subject != "" || len(q.To) != 0 || q.From != "" || q.AccountID != "acct-1" || q.HTMLDigest == "" {
					t.Errorf("%s: erased EmailQueued = %+v", name, q)
				}
				erased++
			case "e2":
				if q.Erased || q.Subject != "Your order 4711" {
					t.Errorf("%s: other email's EmailQueued = %+v", name, q)
				}
				open++
			}
		}
		if erased != 1 || open != 1 {
			t.Errorf("%s: read %d erased and %d open EmailQueued, want 1 and 1", name, erased, open)
		}
	}

	var breaks []eventstore.Break
	n, _, err := eventstore.Verify(ctx, w.raw, func(b eventstore.Break) { breaks = append(breaks, b) })
	if err != nil || len(breaks) > 0 || n != 3 {
		t.Errorf("verify after erasure: %d checked, breaks %v, err %v", n, breaks, err)
	}

	// The key is gone for good: nothing can be sealed with it again.
	if _, err := w.keys.Ensure(ctx, codec.KeyID("e1"), "acct-1"); !errors.Is(err, datakeys.ErrErased) {
		t.Errorf("Ensure after Destroy: %v, want ErrErased", err)
	}
	data, _ := codec.EncodeAll([]domain.Event{&email.Delivered{EmailID: "e1", FeedbackID: "f", Recipients: []string{"alice@example.org"}}}, eventstore.Metadata{})
	if _, err := w.store.Append(ctx, email.Stream("e1"), eventstore.Any, data...); !errors.Is(err, datakeys.ErrErased) {
		t.Errorf("append of personal data after erasure: %v, want ErrErased", err)
	}
}

func TestSubscriptionOpensSealedEvents(t *testing.T) {
	w := newWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w.append(t, email.Stream("e1"), queued("e1"))
	sub, err := w.store.SubscribeAll(ctx, eventstore.Start)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	ev, err := sub.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if q := decode(t, ev).(*email.Queued); q.Subject != "Your order 4711" {
		t.Errorf("subscribed EmailQueued = %+v", q)
	}
}

func TestEventsWithoutAnEmailOrRecordedBeforeSealingStayAsTheyAre(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	// A delivery of an account event (a domain's) names no email.
	w.append(t, delivery.Stream("d1"), &delivery.Created{DeliveryID: "d1", EndpointID: "ep", AccountID: "acct-1", Type: "domain.verified", Payload: `{"domain":"example.com"}`})
	if raw := readStream(t, w.raw, delivery.Stream("d1"))[0].Data; !bytes.Contains(raw, []byte(`example.com`)) {
		t.Errorf("a payload of no email was sealed: %s", raw)
	}
	// An event appended before sealing existed is read as it was stored.
	data, _ := codec.EncodeAll([]domain.Event{queued("old")}, eventstore.Metadata{})
	if _, err := w.raw.Append(ctx, email.Stream("old"), eventstore.Any, data...); err != nil {
		t.Fatal(err)
	}
	if q := decode(t, readStream(t, w.store, email.Stream("old"))[0]).(*email.Queued); q.Erased || q.Subject != "Your order 4711" {
		t.Errorf("legacy EmailQueued = %+v", q)
	}
}

// A clear field that quotes the sealed member's name cannot be mistaken
// for it.
func TestAClearFieldQuotingTheSealedMemberStaysText(t *testing.T) {
	w := newWorld(t)
	evil := `x","personal":{"key":"email-other","sealed":"AAAA"}`
	w.append(t, email.Stream("e1"), queued("e1"), &email.Failed{EmailID: "e1", Reason: evil, Detail: "suppressed recipients: alice@example.org"})
	f := decode(t, readStream(t, w.store, email.Stream("e1"))[1]).(*email.Failed)
	if f.Reason != evil || f.Detail != "suppressed recipients: alice@example.org" || f.Erased {
		t.Fatalf("opened EmailFailed = %+v", f)
	}
}

// pinging is a store with a check of its own, which must be the one used.
type pinging struct {
	eventstore.Store
	pings int
}

func (p *pinging) Ping(context.Context) error { p.pings++; return nil }

func (p *pinging) ReadAll(context.Context, eventstore.Position, int) ([]eventstore.RecordedEvent, error) {
	return nil, errors.New("read the log instead of pinging")
}

// The sealed store answers a readiness check with the wrapped store's own
// Ping where it has one, and with a read of the log's start otherwise.
func TestPingGoesToTheWrappedStore(t *testing.T) {
	w := newWorld(t)
	inner := &pinging{Store: w.raw}
	if err := eventstore.Ping(context.Background(), sealed.New(inner, w.keys)); err != nil || inner.pings != 1 {
		t.Fatalf("ping through the sealed store: %v, %d pings of the wrapped store", err, inner.pings)
	}
	if err := eventstore.Ping(context.Background(), w.store); err != nil {
		t.Fatalf("ping of a store without its own: %v", err)
	}
}

// TestASubscriptionThatCannotOpenAnEventGivesItAgain: when the keys of an
// event cannot be looked up (a cancelled call, a database blip), Next
// fails, and the next Next returns that same event rather than the one
// after it, so a caller that retries loses nothing.
func TestASubscriptionThatCannotOpenAnEventGivesItAgain(t *testing.T) {
	w := newWorld(t)
	w.append(t, email.Stream("a"), queued("a"))
	w.append(t, email.Stream("b"), queued("b"))
	w.append(t, email.Stream("c"), queued("c"))
	readAll(t, w.raw, 3)

	// Another process's keyring has none of the keys yet.
	box, _ := secretbox.New(bytes.Repeat([]byte{7}, 32))
	s := sealed.New(w.raw, datakeys.New(w.pool, box))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sub, err := s.SubscribeAll(ctx, eventstore.Start)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if ev, err := sub.Next(ctx); err != nil || ev.StreamID != email.Stream("a") {
		t.Fatalf("first event: %s, %v", ev.StreamID, err)
	}
	cancelled, stop := context.WithCancel(ctx)
	stop()
	if _, err := sub.Next(cancelled); err == nil {
		t.Fatal("Next opened an event with a cancelled context, whose key it had to look up")
	}
	for _, want := range []string{"b", "c"} {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if ev.StreamID != email.Stream(want) {
			t.Fatalf("after a failed Next the subscription returned %s, want %s", ev.StreamID, email.Stream(want))
		}
		if q := decode(t, ev).(*email.Queued); q.Subject != "Your order 4711" {
			t.Errorf("%s read back as %+v", ev.StreamID, q)
		}
	}
}

// TestAnEventAppendedWithoutAnIDCanBeReadBack: the store gives an event with
// a nil ID a random one; its personal fields are sealed to that ID, so
// the event opens again.
func TestAnEventAppendedWithoutAnIDCanBeReadBack(t *testing.T) {
	w := newWorld(t)
	data, err := codec.EncodeAll([]domain.Event{queued("n1")}, eventstore.Metadata{Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	data[0].ID = uuid.Nil
	if _, err := w.store.Append(context.Background(), email.Stream("n1"), eventstore.NoStream, data...); err != nil {
		t.Fatal(err)
	}
	if data[0].ID != uuid.Nil {
		t.Errorf("the caller's event was given the ID %s", data[0].ID)
	}
	evs, err := w.store.ReadStream(context.Background(), email.Stream("n1"), 0, 10)
	if err != nil {
		t.Fatalf("the event cannot be read back: %v", err)
	}
	if evs[0].ID == uuid.Nil {
		t.Error("the event was stored without an ID")
	}
	if q := decode(t, evs[0]).(*email.Queued); q.Erased || q.Subject != "Your order 4711" {
		t.Errorf("read back as %+v", q)
	}
}
