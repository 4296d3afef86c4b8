package postgres

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/pglock"
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
	rows, err := conn.Query(ctx, `EXPLAIN EXECUTE lag('7000', 19000, 9223372036854775807)`)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	plan = strings.Join(lines, "\n")
	if !strings.Contains(plan, "Index Only Scan using events_position_idx on events") || strings.Contains(plan, "Seq Scan on events") {
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
	// An append under way: its stream's lock, then a transaction id.
	if _, err := blocker.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext('thing-2'))`, pglock.StreamClass); err != nil {
		t.Fatal(err)
	}
	if _, err := blocker.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "thing-1", eventstore.Any, testEvent("Happened")); err != nil {
		t.Fatal(err)
	}
	if n, err := s.HeldBack(ctx, 100); err != nil || n != 1 {
		t.Fatalf("held back while an append is under way: %d %v", n, err)
	}
	if evs, err := s.ReadAll(ctx, eventstore.Start, 10); err != nil || len(evs) != 0 {
		t.Fatalf("read while an append is under way: %d events, %v", len(evs), err)
	}
	if err := blocker.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// Other tests' transactions on the same server hold it back too, for
	// a moment.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
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

// A transaction open in another database of the same server holds back
// no reader: it cannot write this log. (An append under way in this one
// does; see above.)
func TestATransactionInAnotherDatabaseHoldsNothingBack(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	s := newStore(t, pool)
	stillOpen := pgtest.TransactionElsewhere(t)
	if _, err := s.Append(ctx, "thing-1", eventstore.Any, testEvent("Happened")); err != nil {
		t.Fatal(err)
	}
	waitReadable(t, s, "with a transaction open in another database")
	if !stillOpen() {
		t.Fatal("the other database's transaction ended early")
	}
}

// waitReadable waits until the one event appended is read, counted in the
// lag and held back no more. Other tests' appends on the same server hold
// it back too, for a moment.
func waitReadable(t *testing.T, s *Store, while string) {
	t.Helper()
	ctx := context.Background()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		evs, err := s.ReadAll(ctx, eventstore.Start, 10)
		if err != nil {
			t.Fatal(err)
		}
		held, err := s.HeldBack(ctx, 100)
		if err != nil {
			t.Fatal(err)
		}
		lag, err := s.CountAfter(ctx, eventstore.Start, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 1 && held == 0 && lag == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d events read, %d held back, lag %d; want 1, 0, 1", while, len(evs), held, lag)
		}
	}
}

// A transaction of this database that appends no event (the job queue's
// maintenance, a projector's batch, an operator's session) holds back no
// reader, however long it stays open.
func TestATransactionThatAppendsNothingHoldsNothingBack(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	s := newStore(t, pool)
	if _, err := pool.Exec(ctx, `CREATE TABLE chores (n int)`); err != nil {
		t.Fatal(err)
	}
	other, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback(ctx)
	var xid string
	if err := other.QueryRow(ctx, `INSERT INTO chores VALUES (1) RETURNING pg_current_xact_id()::text`).Scan(&xid); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, "thing-1", eventstore.Any, testEvent("Happened")); err != nil {
		t.Fatal(err)
	}
	waitReadable(t, s, "with transaction "+xid+" open, appending nothing")
	var running bool
	if err := pool.QueryRow(ctx, `SELECT pg_xact_status($1::xid8) = 'in progress'`, xid).Scan(&running); err != nil || !running {
		t.Fatalf("the other transaction ended early: %v %v", running, err)
	}
}

// The horizon names the stream locks' class by number.
func TestHorizonNamesTheStreamLockClass(t *testing.T) {
	if want := "s.classid = " + strconv.FormatUint(uint64(uint32(pglock.StreamClass)), 10) + " "; !strings.Contains(horizon, want) {
		t.Fatalf("horizon does not contain %q", want)
	}
}

// An append under way that another session waits for (a row it updated)
// still holds readers back: the waiter's share lock on its transaction id
// does not make it look like a transaction that appends nothing.
func TestAnAppendSomeoneWaitsForStillHoldsBack(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	s := newStore(t, pool)
	if _, err := pool.Exec(ctx, `CREATE TABLE chores (n int); INSERT INTO chores VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	appending, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer appending.Rollback(ctx)
	if _, err := appending.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext('thing-2'))`, pglock.StreamClass); err != nil {
		t.Fatal(err)
	}
	if _, err := appending.Exec(ctx, `UPDATE chores SET n = 2`); err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() {
		_, err := pool.Exec(ctx, `UPDATE chores SET n = 3`) // waits for the append to end
		waiting <- err
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second update never waited")
		}
	}
	if _, err := s.Append(ctx, "thing-1", eventstore.Any, testEvent("Happened")); err != nil {
		t.Fatal(err)
	}
	if n, err := s.HeldBack(ctx, 100); err != nil || n != 1 {
		t.Fatalf("held back while a waited-for append is under way: %d %v", n, err)
	}
	if evs, err := s.ReadAll(ctx, eventstore.Start, 10); err != nil || len(evs) != 0 {
		t.Fatalf("read while a waited-for append is under way: %d events, %v", len(evs), err)
	}
	if err := appending.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-waiting; err != nil {
		t.Fatal(err)
	}
}
