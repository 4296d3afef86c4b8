package projections_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/eventstore/postgres"
	"github.com/mailroom/mailroom/internal/pgtest"
	"github.com/mailroom/mailroom/projections"
)

// tally counts events with a statement that is not idempotent on purpose:
// applying any event twice shows in the total.
type tally struct {
	version int
	failOn  string // event type that makes Apply fail
}

func (tally) Name() string     { return "tally" }
func (t tally) Version() int   { return t.version }
func (tally) Tables() []string { return []string{"tally_total", "tally_seen"} }
func (tally) Schema() string {
	return `CREATE TABLE IF NOT EXISTS tally_total (id int PRIMARY KEY, n bigint NOT NULL);
		INSERT INTO tally_total VALUES (1, 0) ON CONFLICT DO NOTHING;
		CREATE TABLE IF NOT EXISTS tally_seen (event_id uuid PRIMARY KEY, stream text NOT NULL);`
}
func (t tally) Apply(ev eventstore.RecordedEvent, b *pgx.Batch) error {
	if ev.Type == t.failOn {
		return errors.New("projector bug")
	}
	b.Queue(`UPDATE tally_total SET n = n + 1 WHERE id = 1`)
	b.Queue(`INSERT INTO tally_seen (event_id, stream) VALUES ($1, $2)`, ev.ID, ev.StreamID)
	return nil
}

func setup(t *testing.T) (*pgxpool.Pool, *postgres.Store) {
	pool := pgtest.NewPool(t)
	return pool, postgres.New(pool)
}

func appendN(t *testing.T, s eventstore.Store, stream, typ string, n int) eventstore.Position {
	t.Helper()
	var res eventstore.AppendResult
	for i := range n {
		var err error
		res, err = s.Append(context.Background(), stream, eventstore.Any, eventstore.EventData{
			ID: uuid.New(), Type: typ, SchemaVersion: 1, Data: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)),
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return res.Position
}

func counts(t *testing.T, pool *pgxpool.Pool) (total, seen int) {
	t.Helper()
	ctx := context.Background()
	if err := pool.QueryRow(ctx, "SELECT n FROM tally_total").Scan(&total); err != nil {
		t.Fatal(err)
	}
	pool.QueryRow(ctx, "SELECT count(*) FROM tally_seen").Scan(&seen)
	return total, seen
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestCatchUpAppliesEachEventOnce(t *testing.T) {
	pool, store := setup(t)
	last := appendN(t, store, "s-1", "Counted", 1234)
	r := projections.NewRunner(pool, store, nil, quiet, tally{version: 1})
	if err := r.Prepare(context.Background()); err != nil {
		t.Fatal(err)
	}
	pos, err := r.CatchUp(context.Background(), tally{version: 1})
	if err != nil {
		t.Fatal(err)
	}
	if pos != last {
		t.Fatalf("checkpoint %v, want %v", pos, last)
	}
	if total, seen := counts(t, pool); total != 1234 || seen != 1234 {
		t.Fatalf("total %d seen %d, want 1234", total, seen)
	}
	// A second catch-up finds nothing new and changes nothing.
	if _, err := r.CatchUp(context.Background(), tally{version: 1}); err != nil {
		t.Fatal(err)
	}
	if total, _ := counts(t, pool); total != 1234 {
		t.Fatalf("total %d after idle catch-up", total)
	}
}

// A batch that fails part-way leaves neither rows nor checkpoint behind;
// after the fix the projector resumes and applies every event exactly once.
func TestFailedBatchRollsBackAndResumes(t *testing.T) {
	pool, store := setup(t)
	ctx := context.Background()
	appendN(t, store, "s-1", "Counted", 700)
	appendN(t, store, "s-2", "Poison", 1)
	appendN(t, store, "s-3", "Counted", 50)

	broken := tally{version: 1, failOn: "Poison"}
	r := projections.NewRunner(pool, store, nil, quiet, broken)
	if err := r.Prepare(ctx); err == nil {
		t.Fatal("prepare over a poison event succeeded")
	}
	// Build tables without the poison event in reach, then fail on it.
	pool2, store2 := setup(t)
	appendN(t, store2, "s-1", "Counted", 700)
	r2 := projections.NewRunner(pool2, store2, nil, quiet, broken)
	if err := r2.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	appendN(t, store2, "s-2", "Counted", 10)
	appendN(t, store2, "s-3", "Poison", 1)
	appendN(t, store2, "s-4", "Counted", 5)
	if _, err := r2.CatchUp(ctx, broken); err == nil {
		t.Fatal("catch-up over a poison event succeeded")
	}
	// The batch holding the poison event was rolled back whole.
	if total, seen := counts(t, pool2); total != 700 || seen != 700 {
		t.Fatalf("after failure: total %d seen %d, want 700", total, seen)
	}
	// A restarted runner with the bug fixed resumes from the checkpoint.
	fixed := tally{version: 1}
	r3 := projections.NewRunner(pool2, store2, nil, quiet, fixed)
	if _, err := r3.CatchUp(ctx, fixed); err != nil {
		t.Fatal(err)
	}
	if total, seen := counts(t, pool2); total != 716 || seen != 716 {
		t.Fatalf("after resume: total %d seen %d, want 716", total, seen)
	}
}

func TestVersionChangeRebuilds(t *testing.T) {
	pool, store := setup(t)
	ctx := context.Background()
	appendN(t, store, "s-1", "Counted", 30)
	r := projections.NewRunner(pool, store, nil, quiet, tally{version: 1})
	if err := r.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	// Damage the read model: a rebuild must restore it from the events.
	pool.Exec(ctx, "UPDATE tally_total SET n = 999")
	r = projections.NewRunner(pool, store, nil, quiet, tally{version: 2})
	if err := r.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if total, seen := counts(t, pool); total != 30 || seen != 30 {
		t.Fatalf("after version change: total %d seen %d, want 30", total, seen)
	}
	st, err := r.Status(ctx)
	if err != nil || st[0].Version != 2 || st[0].Lag != 0 {
		t.Fatalf("status %+v %v", st, err)
	}
}

// A rebuild while the live runner keeps projecting new events ends with
// every event applied exactly once in the swapped-in tables.
func TestRebuildWhileLive(t *testing.T) {
	pool, store := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	appendN(t, store, "s-1", "Counted", 3000)
	waiter := projections.NewWaiter(pool, 10*time.Second)
	r := projections.NewRunner(pool, store, waiter, quiet, tally{version: 1})
	if err := r.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()

	appending := make(chan eventstore.Position)
	go func() {
		appending <- appendN(t, store, "s-2", "Counted", 200)
	}()
	var progressed int64
	if err := r.Rebuild(ctx, tally{version: 1}, func(n int64) { progressed = n }); err != nil {
		t.Fatal(err)
	}
	if progressed < 3000 {
		t.Fatalf("progress reported %d events", progressed)
	}
	last := <-appending
	if !waiter.WaitFor(ctx, last, "tally") {
		t.Fatal("live runner did not pass the last event after the swap")
	}
	if total, seen := counts(t, pool); total != 3200 || seen != 3200 {
		t.Fatalf("after rebuild: total %d seen %d, want 3200", total, seen)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestWaiterTimesOutWithoutRunner(t *testing.T) {
	pool, store := setup(t)
	r := projections.NewRunner(pool, store, nil, quiet, tally{version: 1})
	if err := r.Prepare(context.Background()); err != nil {
		t.Fatal(err)
	}
	pos := appendN(t, store, "s-1", "Counted", 1)
	w := projections.NewWaiter(pool, 200*time.Millisecond)
	if w.WaitFor(context.Background(), pos, "tally") {
		t.Fatal("waiter reported a position no projector reached")
	}
	// Another process catching up is seen through the checkpoint table.
	if _, err := r.CatchUp(context.Background(), tally{version: 1}); err != nil {
		t.Fatal(err)
	}
	if !w.WaitFor(context.Background(), pos, "tally") {
		t.Fatal("waiter missed a checkpoint written by another runner")
	}
}
