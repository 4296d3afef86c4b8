package processmanagers

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/delivery"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/datakeys"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/eventstore/memory"
	"github.com/mailroom/mailroom/internal/eventstore/sealed"
	"github.com/mailroom/mailroom/projections"
)

// An email erased by another process (the API's, as deployed) while an
// attempt waits is not posted about: that process destroys the key, but
// this one's keyring may still hold it for a minute and open the
// delivery's payload as before; the email's EmailErased says it is gone.
func TestAnAttemptOfAnEmailErasedByAnotherProcessIsNotPosted(t *testing.T) {
	ctx := context.Background()
	pool, box := attemptWorld(t)
	url, posts := countingReceiver(t)
	addEndpoint(t, pool, box, url)
	worker := datakeys.New(pool, box) // the worker process's keyring
	api := datakeys.New(pool, box)    // the API process's, which erases
	inner := memory.New()
	defer inner.Close()
	svc := commands.New(commands.Deps{Store: sealed.New(inner, worker), Now: time.Now, Box: box, DataKeys: worker})
	c := delivery.Created{DeliveryID: uuid.NewString(), EndpointID: "ep", AccountID: "acct", EmailID: uuid.NewString(),
		Type: "email.sent", Payload: `{"data":{"to":"ann@example.org"}}`, CreatedAt: time.Now()}
	if _, _, err := svc.CreateDeliveries(ctx, []commands.NewDelivery{{Created: c}}, commands.Meta{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	store := sealed.New(inner, worker)
	appendEmail := func(ctx context.Context, e domain.Event) error {
		data, err := codec.EncodeAll([]domain.Event{e}, eventstore.Metadata{Actor: "test"})
		if err != nil {
			return err
		}
		_, err = store.Append(ctx, email.Stream(c.EmailID), eventstore.Any, data...)
		return err
	}
	if err := appendEmail(ctx, &email.Queued{EmailID: c.EmailID, AccountID: "acct", From: "a@acme.test", FromEmail: "a@acme.test",
		To: []string{"ann@example.org"}, Subject: "s", QueuedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	st, expected, err := svc.Delivery(ctx, c.DeliveryID)
	if err != nil {
		t.Fatal(err)
	}
	w := &Webhooks{Pool: pool, Commands: svc, Box: box, Client: http.DefaultClient, Now: time.Now, PerAccount: 4, PerEndpoint: 2,
		Schedule: []time.Duration{time.Minute},
		Settle: func(ctx context.Context, _ eventstore.Position, _ ...projections.Name) error {
			// The erasure, in the API process, is answered meanwhile
			// (the emails table of this world has no row for the email).
			if err := api.Destroy(ctx, codec.KeyID(c.EmailID), "acct"); err != nil {
				return err
			}
			return appendEmail(ctx, &email.Erased{EmailID: c.EmailID, AccountID: "acct", Reason: email.ErasedOnRequest, ErasedAt: time.Now()})
		}}
	listed := eventstore.Position{}
	if err := w.attempt(ctx, AttemptArgs{DeliveryID: c.DeliveryID, Attempt: 1, AccountID: "acct", EndpointID: "ep", Listed: &listed},
		st, expected, false, 0); err != nil {
		t.Fatal(err)
	}
	if posts.Load() != 0 {
		t.Fatalf("the payload of an email erased by another process was posted %d times", posts.Load())
	}
}
