package jobs

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Queues are the queues a worker process works, for counting.
var Queues = []string{EmailQueue, WebhookQueue}

// BacklogStates are the states of jobs not done yet: available (due now),
// scheduled (due later: a retry's wait, a snooze, a slot or a receiver
// asked to wait for), retryable (failed, to be tried again) and running.
var BacklogStates = []string{"available", "scheduled", "retryable", "running"}

// Backlog is how many jobs of one queue are in one state.
type Backlog struct {
	Queue, State string
	Jobs         int64
}

// Backlogs counts the jobs of every queue in every BacklogState, each
// count stopping at limit so that a large backlog costs no more than it:
// a provider or receiver in trouble shows as jobs that wait. The ORDER BY
// keeps each count on River's fetch index: without it PostgreSQL read the
// whole table for each state (50 ms for the eight at 100,000 jobs, growing
// with the table); with it they took 3 ms at a million.
func Backlogs(ctx context.Context, pool *pgxpool.Pool, limit int64) ([]Backlog, error) {
	rows, err := pool.Query(ctx, `SELECT q, s, (SELECT count(*) FROM (SELECT 1 FROM river_job
			WHERE state = s::river_job_state AND queue = q
			ORDER BY state, queue, priority, scheduled_at, id LIMIT $1) capped)
		FROM unnest($2::text[]) q CROSS JOIN unnest($3::text[]) s`, limit, Queues, BacklogStates)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Backlog, error) {
		var b Backlog
		err := row.Scan(&b.Queue, &b.State, &b.Jobs)
		return b, err
	})
}
