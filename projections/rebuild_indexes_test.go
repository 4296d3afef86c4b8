package projections_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/projections"
)

// gated is a projector whose one secondary index waits, row by row, for an
// advisory lock the test holds: its build lasts as long as the test wants.
type gated struct{}

func (gated) Name() projections.Name { return "gated" }
func (gated) Version() int           { return 1 }
func (gated) Tables() []string       { return []string{"gated"} }
func (gated) Schema() string {
	return `CREATE TABLE IF NOT EXISTS gated (event_id uuid PRIMARY KEY)`
}
func (gated) Apply(ev eventstore.RecordedEvent, b *pgx.Batch) error {
	b.Queue(`INSERT INTO gated (event_id) VALUES ($1) ON CONFLICT DO NOTHING`, ev.ID)
	return nil
}
func (gated) Indexes(projections.Extensions) []string {
	return []string{`CREATE INDEX IF NOT EXISTS gated_idx ON gated ((public.gate(event_id)))`}
}

// While a rebuild builds its indexes, however long they take, the log stays
// readable: an event appended meanwhile reaches the live projectors, so
// the writes of every request go on being seen by its reads.
func TestIndexBuildsHoldNoReaderBack(t *testing.T) {
	ctx := context.Background()
	pool, store := setup(t)
	// gate waits for the lock the test holds; declared immutable, as an
	// index expression must be.
	if _, err := pool.Exec(ctx, `CREATE FUNCTION public.gate(id uuid) RETURNS uuid IMMUTABLE LANGUAGE sql
		AS $$ SELECT id FROM (SELECT pg_advisory_lock_shared(424242), pg_advisory_unlock_shared(424242)) AS waited $$`); err != nil {
		t.Fatal(err)
	}
	appendN(t, store, "g-1", "Counted", 3)
	r := projections.NewRunner(pool, store, nil, quiet, gated{}, tally{version: 1})
	if err := r.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	holder, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_lock(424242)`); err != nil {
		t.Fatal(err)
	}
	locked := true
	unlock := func() {
		if locked {
			locked = false
			holder.Exec(ctx, `SELECT pg_advisory_unlock(424242)`)
		}
	}
	defer unlock()

	rebuilt := make(chan error, 1)
	go func() { rebuilt <- r.Rebuild(ctx, gated{}, nil) }()
	// The build waits on the gate.
	waitForLockWait(t, pool, "%gated_idx%", "the index build never reached the gate")
	pos := appendN(t, store, "g-2", "Counted", 1)
	catchUpTo(t, r, tally{version: 1}, pos)
	unlock()
	if err := <-rebuilt; err != nil {
		t.Fatal(err)
	}
	var rows int
	var valid bool
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM gated), (SELECT indisvalid FROM pg_index WHERE indexrelid = 'gated_idx'::regclass)`).Scan(&rows, &valid); err != nil || rows != 4 || !valid {
		t.Fatalf("after the rebuild: %d rows, index valid %v (%v); want 4, true", rows, valid, err)
	}
}

// waitForLockWait waits until a session of the test's database waits for
// an advisory lock in a statement like query (ILIKE), failing with never
// after 20 s.
func waitForLockWait(t *testing.T, pool *pgxpool.Pool, query, never string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var waiting bool
		if err := pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event = 'advisory' AND query ILIKE $1)`, query).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(never)
		}
	}
}
