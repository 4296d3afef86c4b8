package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/pgtest"
)

// The lag count reads the position index from where it starts, also in
// the generic plan a prepared statement ends up with and before the log
// was ever analysed (autovacuum off): a probe's cost follows the lag, not
// the log.
func TestCountAfterWalksThePositionIndex(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO events (transaction_id, event_id, stream_id, stream_revision, event_type, schema_version, data, metadata, hash)
		SELECT (1000 + g / 3)::text::xid8, gen_random_uuid(), 's-' || g, 0, 'T', 1, '{}', '{}', 'h' FROM generate_series(1, 20000) g`); err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	for _, q := range []string{`SET plan_cache_mode = force_generic_plan`, `PREPARE lag(xid8, bigint, bigint) AS ` + countAfter} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	defer conn.Exec(ctx, `DEALLOCATE lag; RESET plan_cache_mode`)
	var plan string
	if err := conn.QueryRow(ctx, `EXPLAIN (FORMAT JSON) EXECUTE lag('7000', 19000, 9223372036854775807)`).Scan(&plan); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan, "events_position_idx") || strings.Contains(plan, "Seq Scan") {
		t.Fatalf("the generic plan of the lag count does not walk the position index:\n%s", plan)
	}
}

// An event committed after a transaction elsewhere took its id is held
// back from readers until that transaction ends, and counted as such.
func TestHeldBackCountsWhatAnOpenTransactionHides(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	s := newStore(t, pool)
	blocker, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer blocker.Rollback(ctx)
	if _, err := blocker.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "thing-1", eventstore.Any, testEvent("Happened")); err != nil {
		t.Fatal(err)
	}
	if n, err := s.HeldBack(ctx, 100); err != nil || n != 1 {
		t.Fatalf("held back while a transaction is open: %d %v", n, err)
	}
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// Other tests' transactions on the same server hold it back too, for
	// a moment.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		n, err := s.HeldBack(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still %d held back once the transaction ended", n)
		}
	}
}
