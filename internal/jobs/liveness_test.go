package jobs_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/mailroom/mailroom/internal/jobs"
	"github.com/mailroom/mailroom/internal/pgtest"
)

// runningJob inserts a job as if the client called by had claimed it.
func runningJob(t *testing.T, pool *pgxpool.Pool, by string) int64 {
	t.Helper()
	c, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Insert(context.Background(), noteArgs{EventID: uuid.NewString()}, &river.InsertOpts{Queue: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(context.Background(), `UPDATE river_job SET state = 'running', attempt = 1,
		attempted_at = now(), attempted_by = ARRAY[$2] WHERE id = $1`, res.Job.ID, by); err != nil {
		t.Fatal(err)
	}
	return res.Job.ID
}

func stateOf(t *testing.T, pool *pgxpool.Pool, id int64) string {
	t.Helper()
	var s string
	if err := pool.QueryRow(context.Background(), `SELECT state::text FROM river_job WHERE id = $1`, id).Scan(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// The running jobs of a process whose liveness lock stays free are handed
// back, once a later pass finds it still free after DeadAfter; a live
// process keeps its own, and so does one whose lock was free for a moment
// (its connection dropped) and is held again.
func TestRescueDeadClientsJobs(t *testing.T) {
	pool := pgtest.NewPool(t)
	live, dead, back := jobs.NewClientID(), jobs.NewClientID(), jobs.NewClientID()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	held := make(chan struct{})
	go jobs.KeepAlive(ctx, pool, live, nil, slog.New(slog.DiscardHandler), held)
	<-held

	liveJob, deadJob, backJob := runningJob(t, pool, live), runningJob(t, pool, dead), runningJob(t, pool, back)
	r := &jobs.Rescuer{Pool: pool, Self: jobs.NewClientID(), DeadAfter: 300 * time.Millisecond}
	if n, err := r.Pass(ctx); err != nil || n != 0 {
		t.Fatalf("first pass moved %d (%v): a lock free once is no proof of death", n, err)
	}
	backCtx, backGone := context.WithCancel(ctx)
	defer backGone()
	backHeld := make(chan struct{})
	go jobs.KeepAlive(backCtx, pool, back, nil, slog.New(slog.DiscardHandler), backHeld)
	<-backHeld
	time.Sleep(400 * time.Millisecond)
	n, err := r.Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 || stateOf(t, pool, deadJob) != "available" || stateOf(t, pool, liveJob) != "running" || stateOf(t, pool, backJob) != "running" {
		t.Fatalf("moved %d; dead's job %s, live's job %s, the job of the one back %s",
			n, stateOf(t, pool, deadJob), stateOf(t, pool, liveJob), stateOf(t, pool, backJob))
	}
}

// The migrated queue keeps River's indexes for its own statements but not
// the two for searching jobs by hand, which every job write would pay for;
// migrating again changes nothing.
func TestMigrateDropsSearchIndexes(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	if err := jobs.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	var search, kept int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE indexname IN ('river_job_args_index', 'river_job_metadata_index')),
		count(*) FILTER (WHERE indexname = 'river_job_prioritized_fetching_index')
		FROM pg_indexes WHERE tablename = 'river_job'`).Scan(&search, &kept); err != nil {
		t.Fatal(err)
	}
	if search != 0 || kept != 1 {
		t.Fatalf("%d search indexes left, fetching index present %d times", search, kept)
	}
}
