package projections_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/delivery"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/domain/webhook"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/datakeys"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/eventstore/postgres"
	"github.com/mailroom/mailroom/internal/eventstore/sealed"
	"github.com/mailroom/mailroom/internal/pgtest"
	"github.com/mailroom/mailroom/internal/secretbox"
	"github.com/mailroom/mailroom/projections"
	"github.com/mailroom/mailroom/readapi"
)

// An erased email's pending deliveries fail, unattempted, and leave the
// due set; its delivered ones and other emails' deliveries stay as they
// were, and a rebuild after the key is destroyed gives the same rows.
func TestErasedEmailsPendingDeliveriesLeaveTheDueSet(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	box, err := secretbox.New(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, projections.Accounts{}.Schema()); err != nil { // the due list's
		t.Fatal(err)
	}
	keys := datakeys.New(pool, box)
	store := sealed.New(postgres.New(pool), keys)
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	put, last := appender(t, store)
	ep := uuid.NewString()
	put(webhook.Stream(ep), &webhook.Created{EndpointID: ep, AccountID: "acct", URL: "https://x.test", EventTypes: []string{"email.sent"},
		SealedSecret: "s", CreatedAt: t0})
	erased, kept := uuid.NewString(), uuid.NewString()
	created := func(emailID string) *delivery.Created {
		d := &delivery.Created{DeliveryID: uuid.NewString(), EndpointID: ep, AccountID: "acct", EmailID: emailID, Type: "email.sent",
			Payload: `{"data":{"to":"ann@example.com","subject":"Your invoice"}}`, CreatedAt: t0}
		put(delivery.Stream(d.DeliveryID), d)
		return d
	}
	first, retried, delivered, other := created(erased), created(erased), created(erased), created(kept)
	status := 503
	put(delivery.Stream(retried.DeliveryID), &delivery.AttemptFailed{DeliveryID: retried.DeliveryID, EndpointID: ep, Attempt: 1,
		ResponseStatus: &status, Error: "receiver returned 503", At: t0, NextAttemptAt: t0.Add(time.Minute)})
	put(delivery.Stream(delivered.DeliveryID), &delivery.AttemptSucceeded{DeliveryID: delivered.DeliveryID, EndpointID: ep, Attempt: 1,
		ResponseStatus: 200, At: t0})

	r := projections.NewRunner(pool, store, nil, quiet, projections.Webhooks{})
	if err := r.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	catchUpTo(t, r, projections.Webhooks{}, *last)
	if due := dueIDs(t, pool); len(due) != 3 {
		t.Fatalf("due before erasure: %v", due)
	}

	if err := keys.Destroy(ctx, codec.KeyID(erased), "acct"); err != nil {
		t.Fatal(err)
	}
	put(email.Stream(erased), &email.Erased{EmailID: erased, AccountID: "acct", Reason: email.ErasedOnRequest, ErasedAt: t0.Add(time.Hour)})
	catchUpTo(t, r, projections.Webhooks{}, *last)
	if due := dueIDs(t, pool); len(due) != 1 || !due[other.DeliveryID] {
		t.Fatalf("due after erasure: %v, want only %s", due, other.DeliveryID)
	}
	log, err := readapi.New(pool, time.Now).Deliveries(ctx, "acct", ep, readapi.DeliveryFilter{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{first.DeliveryID: "failed", retried.DeliveryID: "failed", delivered.DeliveryID: "delivered", other.DeliveryID: "pending"}
	for _, d := range log.Deliveries {
		if d.Status != want[d.ID] {
			t.Errorf("delivery %s is %s, want %s", d.ID, d.Status, want[d.ID])
		}
		if d.Status == "failed" && (d.Error == nil || *d.Error != delivery.DroppedError) {
			t.Errorf("delivery %s failed with %v, want %q", d.ID, d.Error, delivery.DroppedError)
		}
	}
	tables := []tableOrder{{"webhook_endpoints", "id"}, {"webhook_deliveries", "id"}}
	live := tablesJSON(t, pool, tables)

	// The worker's drop of one of them changes nothing more.
	put(delivery.Stream(first.DeliveryID), &delivery.Dropped{DeliveryID: first.DeliveryID, EndpointID: ep, Reason: delivery.ReasonEmailErased, At: t0.Add(2 * time.Hour)})
	catchUpTo(t, r, projections.Webhooks{}, *last)
	afterDrop := tablesJSON(t, pool, tables)
	if afterDrop[1] != live[1] {
		t.Errorf("a drop changed the rows:\n%s\nwant\n%s", afterDrop[1], live[1])
	}

	// Rebuilt, the erased email's deliveries read erased from the start.
	if err := r.Rebuild(ctx, projections.Webhooks{}, nil); err != nil {
		t.Fatal(err)
	}
	catchUpTo(t, r, projections.Webhooks{}, *last)
	if rebuilt := tablesJSON(t, pool, tables); rebuilt[1] != afterDrop[1] {
		t.Errorf("rebuilt rows differ:\n%s\nwant\n%s", rebuilt[1], afterDrop[1])
	}
}

// appender returns put, which appends events to a stream of store, and
// where the last event put is.
func appender(t *testing.T, store eventstore.Store) (put func(stream string, events ...domain.Event), last *eventstore.Position) {
	last = new(eventstore.Position)
	return func(stream string, events ...domain.Event) {
		t.Helper()
		data, err := codec.EncodeAll(events, eventstore.Metadata{Actor: "test"})
		if err != nil {
			t.Fatal(err)
		}
		res, err := store.Append(context.Background(), stream, eventstore.Any, data...)
		if err != nil {
			t.Fatal(err)
		}
		*last = res.Position
	}, last
}

// dueIDs are the deliveries a worker would pick, however late.
func dueIDs(t *testing.T, pool readapi.Querier) map[string]bool {
	t.Helper()
	list, err := readapi.Overdue(context.Background(), pool, time.Now().Add(24*365*time.Hour), readapi.OverdueDelivery{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, d := range list {
		ids[d.ID] = true
	}
	return ids
}
