package processmanagers

import (
	"context"
	"testing"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/mailroom/mailroom/internal/jobs"
	"github.com/mailroom/mailroom/internal/pgtest"
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
