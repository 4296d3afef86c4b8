package processmanagers

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/jobs"
	"github.com/mailroom/mailroom/internal/pgtest"
	"github.com/mailroom/mailroom/projections"
)

// A release that queues an attempt whose job is still running hears of it,
// so it can queue the attempt again once that job has ended; a scheduled
// one is made available, and a new one is queued.
func TestInsertDueReportsRunningAttempts(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if err := jobs.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	held := AttemptArgs{DeliveryID: "held", Attempt: 1, AccountID: "acct", EndpointID: "ep"}
	res, err := client.Insert(ctx, held, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Claimed by a worker that is about to find its endpoint paused.
	if _, err := pool.Exec(ctx, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now() WHERE id = $1`, res.Job.ID); err != nil {
		t.Fatal(err)
	}
	fresh := AttemptArgs{DeliveryID: "fresh", Attempt: 1, AccountID: "acct", EndpointID: "ep"}
	running, err := insertDue(ctx, client, []river.InsertManyParams{{Args: held}, {Args: fresh}})
	if err != nil {
		t.Fatal(err)
	}
	if !running {
		t.Fatal("insertDue did not report the running attempt it could not queue")
	}
	count := func(delivery, state string) (n int) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = $1 AND args->>'delivery_id' = $2 AND state::text = $3`,
			AttemptArgs{}.Kind(), delivery, state).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if count("fresh", "available") != 1 || count("held", "available") != 0 {
		t.Fatalf("after the first release: fresh %d available, held %d available", count("fresh", "available"), count("held", "available"))
	}

	// The worker ends without attempting; the release's next look queues it.
	if _, err := pool.Exec(ctx, `UPDATE river_job SET state = 'completed', finalized_at = now() WHERE id = $1`, res.Job.ID); err != nil {
		t.Fatal(err)
	}
	running, err = insertDue(ctx, client, []river.InsertManyParams{{Args: held}, {Args: fresh}})
	if err != nil {
		t.Fatal(err)
	}
	if running {
		t.Fatal("insertDue reported a running attempt when none was")
	}
	if count("held", "available") != 1 || count("fresh", "available") != 1 {
		t.Fatalf("after the second look: held %d available, fresh %d available; want one each", count("held", "available"), count("fresh", "available"))
	}
}

// A resume or a reinstatement whose attempts keep running (a busy
// receiver working off its backlog) looks again at most releaseLooks
// times, and then leaves what is left to the sweep: it does not page
// through every pending delivery of the endpoint twice a second for as
// long as the receiver is busy. River does not count a snooze as an
// attempt, so the release counts its looks itself. (The job starts with
// all but two of its looks taken, so the test waits about a second.)
func TestAReleaseBehindABusyReceiverStopsLookingAgain(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if err := jobs.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	for _, ddl := range []string{projections.Accounts{}.Schema(), projections.Webhooks{}.Schema()} {
		if _, err := pool.Exec(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_endpoints (id, account_id, url, description, event_types, sealed_secret, is_active, created_at, updated_at)
		VALUES ('ep', 'acct', 'https://example.invalid/', '', '{email.sent}', 'x', true, now(), now())`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_deliveries (id, endpoint_id, account_id, email_id, event_type, status, attempts, created_at, next_attempt_at)
		VALUES ('d1', 'ep', 'acct', 'e1', 'email.sent', 'pending', 0, now(), now())`); err != nil {
		t.Fatal(err)
	}
	w := &Webhooks{Pool: pool, Now: time.Now,
		Settle: func(context.Context, eventstore.Position, ...projections.Name) error { return nil }}
	workers := river.NewWorkers()
	river.AddWorker(workers, &releaseWorker{w: w})
	river.AddWorker(workers, river.WorkFunc(func(context.Context, *river.Job[AttemptArgs]) error { return nil }))
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:  map[string]river.QueueConfig{WebhookQueue: {MaxWorkers: 2}},
		Workers: workers, FetchCooldown: 5 * time.Millisecond, FetchPollInterval: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	// The delivery's attempt is running, and stays so.
	res, err := client.Insert(ctx, AttemptArgs{DeliveryID: "d1", Attempt: 1, AccountID: "acct", EndpointID: "ep"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now() WHERE id = $1`, res.Job.ID); err != nil {
		t.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer client.Stop(context.Background())
	rel, err := client.Insert(ctx, ReleaseArgs{EndpointID: "ep"},
		&river.InsertOpts{Metadata: []byte(fmt.Sprintf(`{"release_looks": %d}`, releaseLooks-2))})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var state rivertype.JobState
		var looks int
		if err := pool.QueryRow(ctx, `SELECT state, coalesce((metadata->>'release_looks')::int, 0) FROM river_job WHERE id = $1`,
			rel.Job.ID).Scan(&state, &looks); err != nil {
			t.Fatal(err)
		}
		if state == rivertype.JobStateCompleted {
			if looks != releaseLooks {
				t.Fatalf("the release ended after %d looks again, want %d", looks, releaseLooks)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the release still looks again (state %s, %d looks counted), its attempt still running", state, looks)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A delivery whose job was lost is queued again by the sweep even behind
// a backlog of more than a sweep's batch of overdue deliveries (a slow
// receiver's, waiting for their share): each sweep goes on from where
// the last stopped, rather than looking at the most overdue batch again.
func TestTheSweepFindsALostJobBehindABusyEndpointsBacklog(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if err := jobs.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	for _, ddl := range []string{projections.Accounts{}.Schema(), projections.Webhooks{}.Schema()} {
		if _, err := pool.Exec(ctx, ddl); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_endpoints (id, account_id, url, description, event_types, sealed_secret, is_active, created_at, updated_at)
		VALUES ('busy', 'acct', 'https://slow.example/', '', '{email.sent}', 'x', true, now(), now()),
		       ('other', 'acct2', 'https://fine.example/', '', '{email.sent}', 'x', true, now(), now())`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_deliveries (id, endpoint_id, account_id, email_id, event_type, status, attempts, created_at, next_attempt_at)
		SELECT 'backlog-' || i, 'busy', 'acct', 'e' || i, 'email.sent', 'pending', 0, now() - interval '10 minutes', now() - interval '10 minutes'
		FROM generate_series(1, $1::int) AS i`, sweepBatch); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO webhook_deliveries (id, endpoint_id, account_id, email_id, event_type, status, attempts, created_at, next_attempt_at)
		VALUES ('lost', 'other', 'acct2', 'e-lost', 'email.sent', 'pending', 2, now() - interval '1 hour', now() - interval '2 minutes')`); err != nil {
		t.Fatal(err)
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	w := &Webhooks{Pool: pool, Now: time.Now}
	for range 2 {
		if err := w.requeue(ctx, client); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = $1 AND args->>'delivery_id' = 'lost'`,
		AttemptArgs{}.Kind()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("after two sweeps the lost delivery has %d attempt jobs, want 1", n)
	}
}
