package processmanagers

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain/delivery"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/datakeys"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/eventstore/memory"
	"github.com/mailroom/mailroom/internal/eventstore/sealed"
	"github.com/mailroom/mailroom/internal/pgtest"
	"github.com/mailroom/mailroom/internal/secretbox"
	"github.com/mailroom/mailroom/projections"
)

// attemptWorld is a database with the read models an attempt reads, and
// the box its endpoints' secrets are sealed with.
func attemptWorld(t *testing.T) (*pgxpool.Pool, *secretbox.Box) {
	t.Helper()
	pool := pgtest.NewPool(t)
	for _, ddl := range []string{projections.Accounts{}.Schema(), projections.Webhooks{}.Schema(), projections.Emails{}.Schema()} {
		if _, err := pool.Exec(context.Background(), ddl); err != nil {
			t.Fatal(err)
		}
	}
	box, err := secretbox.New(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	return pool, box
}

// addEndpoint lists the endpoint "ep" of account "acct", active and
// subscribed to email.sent, posting to url.
func addEndpoint(t *testing.T, pool *pgxpool.Pool, box *secretbox.Box, url string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `INSERT INTO webhook_endpoints (id, account_id, url, description, event_types, sealed_secret, is_active, created_at, updated_at)
		VALUES ('ep', 'acct', $1, '', '{email.sent}', $2, true, now(), now())`, url, box.Seal([]byte("whsec_test"), commands.SecretContext("ep"))); err != nil {
		t.Fatal(err)
	}
}

// countingReceiver is a webhook receiver that counts the posts it gets,
// until t ends.
func countingReceiver(t *testing.T) (url string, posts *atomic.Int32) {
	posts = new(atomic.Int32)
	rcv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { posts.Add(1) }))
	t.Cleanup(rcv.Close)
	return rcv.URL, posts
}

// An attempt that waited (for the read model, for its place) goes by its
// endpoint as it is when it posts: one paused, deleted or moved to another
// URL meanwhile, the change already answered, is not posted to as it was.
func TestAnAttemptGoesByTheEndpointAsItIsWhenItPosts(t *testing.T) {
	ctx := context.Background()
	pool, box := attemptWorld(t)
	oldURL, before := countingReceiver(t)
	movedURL, after := countingReceiver(t)
	store := memory.New()
	defer store.Close()
	svc := commands.New(commands.Deps{Store: store, Now: time.Now})

	for change, wantMoved := range map[string]int32{
		"UPDATE webhook_endpoints SET is_active = false":        0,
		"DELETE FROM webhook_endpoints":                         0,
		"UPDATE webhook_endpoints SET url = '" + movedURL + "'": 1,
	} {
		before.Store(0)
		after.Store(0)
		if _, err := pool.Exec(ctx, "DELETE FROM webhook_endpoints"); err != nil {
			t.Fatal(err)
		}
		addEndpoint(t, pool, box, oldURL)
		c := delivery.Created{DeliveryID: uuid.NewString(), EndpointID: "ep", AccountID: "acct", EmailID: uuid.NewString(),
			Type: "email.sent", Payload: "{}", CreatedAt: time.Now()}
		if _, _, err := svc.CreateDeliveries(ctx, []commands.NewDelivery{{Created: c}}, commands.Meta{Actor: "test"}); err != nil {
			t.Fatal(err)
		}
		st, expected := commands.Created(c)

		waiting, gate := make(chan struct{}), make(chan struct{})
		var once sync.Once
		w := &Webhooks{Pool: pool, Commands: svc, Box: box, Client: http.DefaultClient, Now: time.Now, PerAccount: 4, PerEndpoint: 2,
			Schedule: []time.Duration{time.Minute},
			Settle: func(context.Context, eventstore.Position, ...projections.Name) error {
				once.Do(func() { close(waiting) })
				<-gate
				return nil
			}}
		listed := eventstore.Position{}
		done := make(chan error, 1)
		go func() {
			done <- w.attempt(ctx, AttemptArgs{DeliveryID: c.DeliveryID, Attempt: 1, AccountID: "acct", EndpointID: "ep", Listed: &listed},
				st, expected, false, 0)
		}()
		<-waiting // the attempt waits for the read model
		if _, err := pool.Exec(ctx, change); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * rereadAfter)
		close(gate)
		if err := <-done; err != nil {
			t.Fatalf("%s: %v", change, err)
		}
		if before.Load() != 0 || after.Load() != wantMoved {
			t.Errorf("%s: %d posts as the endpoint was, %d as it is, want 0 and %d", change, before.Load(), after.Load(), wantMoved)
		}
	}
}

// An attempt whose email is erased while it waits (for the read model,
// for its place) does not post the payload it read before: the erasure,
// answered once the email has left the emails read model, drops the
// delivery. An email only missing from a read model that is behind is
// posted.
func TestAnAttemptOfAnEmailErasedMeanwhileIsNotPosted(t *testing.T) {
	ctx := context.Background()
	pool, box := attemptWorld(t)
	url, posts := countingReceiver(t)
	addEndpoint(t, pool, box, url)
	keyring := datakeys.New(pool, box)
	inner := memory.New()
	defer inner.Close()
	svc := commands.New(commands.Deps{Store: sealed.New(inner, keyring), Now: time.Now, Box: box, DataKeys: keyring})
	for _, erase := range []bool{true, false} {
		posts.Store(0)
		c := delivery.Created{DeliveryID: uuid.NewString(), EndpointID: "ep", AccountID: "acct", EmailID: uuid.NewString(),
			Type: "email.sent", Payload: `{"data":{"to":"ann@example.org"}}`, CreatedAt: time.Now()}
		if _, _, err := svc.CreateDeliveries(ctx, []commands.NewDelivery{{Created: c}}, commands.Meta{Actor: "test"}); err != nil {
			t.Fatal(err)
		}
		st, expected, err := svc.Delivery(ctx, c.DeliveryID)
		if err != nil || st.Created == nil || st.Created.Erased {
			t.Fatalf("delivery before the erasure: %+v, %v", st.Created, err)
		}
		w := &Webhooks{Pool: pool, Commands: svc, Box: box, Client: http.DefaultClient, Now: time.Now, PerAccount: 4, PerEndpoint: 2,
			Schedule: []time.Duration{time.Minute},
			Settle: func(ctx context.Context, _ eventstore.Position, _ ...projections.Name) error {
				if erase {
					return keyring.Destroy(ctx, codec.KeyID(c.EmailID), "acct")
				}
				return nil
			}}
		listed := eventstore.Position{}
		if err := w.attempt(ctx, AttemptArgs{DeliveryID: c.DeliveryID, Attempt: 1, AccountID: "acct", EndpointID: "ep", Listed: &listed},
			st, expected, false, 0); err != nil {
			t.Fatalf("erase %v: %v", erase, err)
		}
		after, _, err := svc.Delivery(ctx, c.DeliveryID)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case erase && (posts.Load() != 0 || after.Status != delivery.Failed || after.Attempts != 0):
			t.Errorf("erased meanwhile: %d posts, delivery %s after %d attempts; want none, dropped", posts.Load(), after.Status, after.Attempts)
		case !erase && (posts.Load() != 1 || after.Status != delivery.Delivered):
			t.Errorf("not erased: %d posts, delivery %s; want one, delivered", posts.Load(), after.Status)
		}
	}
}
