package jobs_test

import (
	"context"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/mailroom/mailroom/internal/jobs"
	"github.com/mailroom/mailroom/internal/pgtest"
)

// The backlog counts each queue's jobs by state, each count stopping at
// its limit.
func TestBacklogsCountWaitingJobsByQueueAndState(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	inserter, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour)
	insert := func(queue string, n int, at time.Time) {
		for i := range n {
			args := noteArgs{EventID: queue + at.String() + string(rune('a'+i))}
			if _, err := inserter.Insert(ctx, args, &river.InsertOpts{Queue: queue, ScheduledAt: at}); err != nil {
				t.Fatal(err)
			}
		}
	}
	insert(jobs.EmailQueue, 3, time.Time{}) // due now
	insert(jobs.EmailQueue, 4, later)
	insert(jobs.WebhookQueue, 2, later)
	got, err := jobs.Backlogs(ctx, pool, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := map[[2]string]int64{
		{jobs.EmailQueue, "available"}: 3, {jobs.EmailQueue, "scheduled"}: 3, // 4, counted up to 3
		{jobs.WebhookQueue, "scheduled"}: 2,
	}
	if len(got) != len(jobs.Queues)*len(jobs.BacklogStates) {
		t.Fatalf("%d counts, want one per queue and state: %v", len(got), got)
	}
	for _, b := range got {
		if w := want[[2]string{b.Queue, b.State}]; b.Jobs != w {
			t.Errorf("%s %s: %d jobs, want %d", b.Queue, b.State, b.Jobs, w)
		}
	}
}
