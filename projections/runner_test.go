package projections_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/eventstore/postgres"
	"github.com/mailroom/mailroom/internal/pglock"
	"github.com/mailroom/mailroom/internal/pgtest"
	"github.com/mailroom/mailroom/projections"
)

// tally counts events with a statement that is not idempotent on purpose:
// applying any event twice shows in the total.
type tally struct {
	version int
	failOn  string // event type that makes Apply fail
}

func (tally) Name() projections.Name { return "tally" }
func (t tally) Version() int         { return t.version }
func (tally) Tables() []string       { return []string{"tally_total", "tally_seen"} }
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

// catchUpTo catches p up until it has passed pos: an event becomes readable
// only once every older transaction on the server has ended, and other
// tests' transactions may hold it back for a moment.
func catchUpTo(t *testing.T, r *projections.Runner, p projections.Projector, pos eventstore.Position) eventstore.Position {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		at, err := r.CatchUp(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		if !at.Less(pos) {
			return at
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s stayed at %v, short of %v", p.Name(), at, pos)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestCatchUpAppliesEachEventOnce(t *testing.T) {
	pool, store := setup(t)
	last := appendN(t, store, "s-1", "Counted", 1234)
	r := projections.NewRunner(pool, store, nil, quiet, tally{version: 1})
	if err := r.Prepare(context.Background()); err != nil {
		t.Fatal(err)
	}
	if pos := catchUpTo(t, r, tally{version: 1}, last); pos != last {
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

// A projector's own error on one event (here: one it cannot handle)
// quarantines that event's stream; every other event is applied exactly
// once, even though the batch holding the poison is applied twice (whole,
// then event by event).
func TestProjectorErrorQuarantinesItsStream(t *testing.T) {
	pool, store := setup(t)
	ctx := context.Background()
	appendN(t, store, "s-1", "Counted", 700)
	broken := tally{version: 1, failOn: "Poison"}
	r := projections.NewRunner(pool, store, nil, quiet, broken)
	if err := r.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	appendN(t, store, "s-2", "Counted", 10)
	appendN(t, store, "s-3", "Poison", 1)
	appendN(t, store, "s-3", "Counted", 2)
	last := appendN(t, store, "s-4", "Counted", 5)
	if pos := catchUpTo(t, r, broken, last); pos != last {
		t.Fatalf("checkpoint %v, want %v past the poison", pos, last)
	}
	if total, seen := counts(t, pool); total != 715 || seen != 715 {
		t.Fatalf("total %d seen %d, want 715 (s-3 skipped)", total, seen)
	}
	st, err := r.Status(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	q := st[0].Quarantined
	if len(q) != 1 || q[0].Stream != "s-3" || q[0].EventType != "Poison" || q[0].Revision != 0 || !strings.Contains(q[0].Error, "projector bug") || st[0].Failing != nil {
		t.Fatalf("status %+v", st[0])
	}
	// With the bug fixed, retry applies s-3's three events, once.
	fixed := tally{version: 1}
	res, err := r.Retry(ctx, fixed)
	if err != nil || len(res) != 1 || res[0].Stream != "s-3" || res[0].Applied != 3 || res[0].Error != "" {
		t.Fatalf("retry: %+v %v", res, err)
	}
	if total, seen := counts(t, pool); total != 718 || seen != 718 {
		t.Fatalf("after retry: total %d seen %d, want 718", total, seen)
	}
}

// notes stores each event's "note", so PostgreSQL decides what it refuses:
// a NUL, or whatever a constraint an operator adds forbids. txnotes is the
// same as a TxProjector.
type notes struct{ name string }

func (n notes) Name() projections.Name { return projections.Name(n.name) }
func (notes) Version() int             { return 1 }
func (n notes) Tables() []string       { return []string{n.name} }
func (n notes) Schema() string {
	return `CREATE TABLE IF NOT EXISTS ` + n.name + ` (event_id uuid PRIMARY KEY, stream text NOT NULL, revision bigint NOT NULL, note text NOT NULL)`
}
func (n notes) insert(ev eventstore.RecordedEvent) (string, []any, error) {
	var d struct{ Note string }
	if err := json.Unmarshal(ev.Data, &d); err != nil {
		return "", nil, err
	}
	return `INSERT INTO ` + n.name + ` (event_id, stream, revision, note) VALUES ($1, $2, $3, $4)`,
		[]any{ev.ID, ev.StreamID, int64(ev.StreamRevision), d.Note}, nil
}
func (n notes) Apply(ev eventstore.RecordedEvent, b *pgx.Batch) error {
	sql, args, err := n.insert(ev)
	if err == nil {
		b.Queue(sql, args...)
	}
	return err
}

type txnotes struct{ notes }

func (n txnotes) ApplyTx(ctx context.Context, tx pgx.Tx, ev eventstore.RecordedEvent) error {
	sql, args, err := n.insert(ev)
	if err == nil {
		_, err = tx.Exec(ctx, sql, args...)
	}
	return err
}

func note(t *testing.T, s eventstore.Store, stream, text string) eventstore.Position {
	t.Helper()
	data, _ := json.Marshal(map[string]string{"note": text})
	res, err := s.Append(context.Background(), stream, eventstore.Any, eventstore.EventData{
		ID: uuid.New(), Type: "Noted", SchemaVersion: 1, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	return res.Position
}

// noted lists the notes a projector stored for stream, in stream order.
func noted(t *testing.T, pool *pgxpool.Pool, table, stream string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT note FROM "+table+" WHERE stream = $1 ORDER BY revision", stream)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// A value the read model refuses quarantines its stream for that projector
// only: the other streams, later events included, are applied and the
// checkpoint passes it; the stream's later events are skipped; retry after
// the cause is removed applies them and lifts the quarantine, while a cause
// that remains (a NUL) stays quarantined with the new error.
func TestDataErrorQuarantinesItsStream(t *testing.T) {
	for _, p := range []projections.Projector{notes{"notes"}, txnotes{notes{"txnotes"}}} {
		t.Run(string(p.Name()), func(t *testing.T) {
			pool, store := setup(t)
			ctx := context.Background()
			counter := tally{version: 1}
			r := projections.NewRunner(pool, store, nil, quiet, p, counter)
			if err := r.Prepare(ctx); err != nil {
				t.Fatal(err)
			}
			// An operator-made cause, removable later.
			if _, err := pool.Exec(ctx, "ALTER TABLE "+string(p.Name())+" ADD CONSTRAINT no_poison CHECK (note <> 'poison')"); err != nil {
				t.Fatal(err)
			}
			note(t, store, "s-1", "a")
			note(t, store, "s-2", "fine")
			note(t, store, "s-2", "poison")
			note(t, store, "s-1", "b")
			note(t, store, "s-3", "x\x00y")
			note(t, store, "s-2", "after")
			last := note(t, store, "s-4", "c")
			if pos := catchUpTo(t, r, p, last); pos != last {
				t.Fatalf("checkpoint %v, want %v", pos, last)
			}
			for stream, want := range map[string]string{"s-1": "a b", "s-2": "fine", "s-3": "", "s-4": "c"} {
				if got := strings.Join(noted(t, pool, string(p.Name()), stream), " "); got != want {
					t.Errorf("%s: notes %q, want %q", stream, got, want)
				}
			}
			// Quarantine is per projector: the other one applied all seven.
			catchUpTo(t, r, counter, last)
			if total, _ := counts(t, pool); total != 7 {
				t.Fatalf("tally applied %d events, want 7", total)
			}
			st, err := r.Status(ctx, 0)
			if err != nil {
				t.Fatal(err)
			}
			q := st[0].Quarantined
			if len(q) != 2 || q[0].Stream != "s-2" || q[0].Revision != 1 || q[0].EventType != "Noted" || !strings.Contains(q[0].Error, "no_poison") ||
				q[1].Stream != "s-3" || !strings.Contains(q[1].Error, "0x00") || st[0].Failing != nil || st[0].Lag != 0 || len(st[1].Quarantined) != 0 {
				t.Fatalf("status %+v", st)
			}

			// Later events of a quarantined stream are skipped, others applied.
			note(t, store, "s-2", "later")
			catchUpTo(t, r, p, note(t, store, "s-1", "d"))
			if got := strings.Join(noted(t, pool, string(p.Name()), "s-2"), " "); got != "fine" {
				t.Fatalf("s-2 while quarantined: %q", got)
			}
			if got := strings.Join(noted(t, pool, string(p.Name()), "s-1"), " "); got != "a b d" {
				t.Fatalf("s-1: %q", got)
			}

			// The operator removes the cause and retries.
			if _, err := pool.Exec(ctx, "ALTER TABLE "+string(p.Name())+" DROP CONSTRAINT no_poison"); err != nil {
				t.Fatal(err)
			}
			res, err := r.Retry(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if len(res) != 2 || res[0].Stream != "s-2" || res[0].Applied != 3 || res[0].Error != "" ||
				res[1].Stream != "s-3" || !strings.Contains(res[1].Error, "0x00") {
				t.Fatalf("retry: %+v", res)
			}
			if got := strings.Join(noted(t, pool, string(p.Name()), "s-2"), " "); got != "fine poison after later" {
				t.Fatalf("s-2 after retry: %q", got)
			}
			st, _ = r.Status(ctx, 0)
			if q := st[0].Quarantined; len(q) != 1 || q[0].Stream != "s-3" || q[0].Attempts != 2 {
				t.Fatalf("after retry: %+v", q)
			}
			// A lifted stream's new events apply as usual.
			catchUpTo(t, r, p, note(t, store, "s-2", "newest"))
			if got := strings.Join(noted(t, pool, string(p.Name()), "s-2"), " "); got != "fine poison after later newest" {
				t.Fatalf("s-2 after retry and a new event: %q", got)
			}
		})
	}
}

// waitVisible waits until pos can be read from the log.
func waitVisible(t *testing.T, s eventstore.Store, pos eventstore.Position) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		evs, err := s.ReadAll(context.Background(), eventstore.Start, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) > 0 && !evs[len(evs)-1].Position.Less(pos) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v never became readable", pos)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A failure that is not one event's data (here the table is gone) stops
// the projector, which quarantines nothing and records the failure for
// status; a rebuild recreates the tables, clears the failure and records
// its own quarantines in place of the live ones.
func TestFailingProjectorAndRebuild(t *testing.T) {
	pool, store := setup(t)
	ctx := context.Background()
	p := notes{"notes"}
	r := projections.NewRunner(pool, store, nil, quiet, p)
	if err := r.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "ALTER TABLE notes ADD CONSTRAINT no_poison CHECK (note <> 'poison')"); err != nil {
		t.Fatal(err)
	}
	note(t, store, "s-1", "poison")
	catchUpTo(t, r, p, note(t, store, "s-2", "x\x00y"))
	if _, err := pool.Exec(ctx, "DROP TABLE notes"); err != nil {
		t.Fatal(err)
	}
	last := note(t, store, "s-3", "a")
	waitVisible(t, store, last)
	for range 2 {
		if _, err := r.CatchUp(ctx, p); err == nil || !strings.Contains(err.Error(), "does not exist") {
			t.Fatalf("catch-up without its table: %v", err)
		}
	}
	st, err := r.Status(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if f := st[0].Failing; f == nil || f.Attempts != 2 || !strings.Contains(f.Error, `"notes" does not exist`) || f.Since.IsZero() || st[0].Lag != 1 || len(st[0].Quarantined) != 2 {
		t.Fatalf("status of a failing projector: %+v %+v", st[0], st[0].Failing)
	}

	// The rebuild's tables have no constraint: only the NUL stays refused.
	if err := r.Rebuild(ctx, p, nil); err != nil {
		t.Fatal(err)
	}
	st, _ = r.Status(ctx, 0)
	if q := st[0].Quarantined; st[0].Failing != nil || eventstore.Position(st[0].Position) != last || len(q) != 1 || q[0].Stream != "s-2" || q[0].Projection != "notes" {
		t.Fatalf("after rebuild: %+v", st[0])
	}
	var leftover int
	pool.QueryRow(ctx, "SELECT count(*) FROM projection_quarantine WHERE projection <> 'notes'").Scan(&leftover)
	if leftover != 0 {
		t.Fatalf("%d quarantine rows of the rebuild left behind", leftover)
	}
	for stream, want := range map[string]string{"s-1": "poison", "s-2": "", "s-3": "a"} {
		if got := strings.Join(noted(t, pool, "notes", stream), " "); got != want {
			t.Errorf("%s after rebuild: %q, want %q", stream, got, want)
		}
	}
	// A failure cleared with nothing new to apply is cleared too.
	if _, err := pool.Exec(ctx, "UPDATE projection_checkpoints SET last_error = 'x', failures = 5, failing_since = now() WHERE name = 'notes'"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.CatchUp(ctx, p); err != nil {
		t.Fatal(err)
	}
	if st, _ = r.Status(ctx, 0); st[0].Failing != nil {
		t.Fatalf("failure not cleared by a successful idle step: %+v", st[0].Failing)
	}
}

// thirtyTallied is a tally projection (version 1) caught up over 30 events.
func thirtyTallied(t *testing.T) (*pgxpool.Pool, *postgres.Store, eventstore.Position) {
	t.Helper()
	pool, store := setup(t)
	last := appendN(t, store, "s-1", "Counted", 30)
	r := projections.NewRunner(pool, store, nil, quiet, tally{version: 1})
	if err := r.Prepare(context.Background()); err != nil {
		t.Fatal(err)
	}
	catchUpTo(t, r, tally{version: 1}, last)
	return pool, store, last
}

// startAgain prepares a runner of tally at version as a start does, catches
// it up, and checks the read model holds the 30 events once each.
func startAgain(t *testing.T, pool *pgxpool.Pool, store *postgres.Store, version int, last eventstore.Position) *projections.Runner {
	t.Helper()
	r := projections.NewRunner(pool, store, nil, quiet, tally{version: version})
	if err := r.Prepare(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The rebuild replays what is readable; events that other databases'
	// open transactions still hold back follow in the next catch-up.
	catchUpTo(t, r, tally{version: version}, last)
	if total, seen := counts(t, pool); total != 30 || seen != 30 {
		t.Fatalf("after the start: total %d seen %d, want 30 each", total, seen)
	}
	return r
}

func TestVersionChangeRebuilds(t *testing.T) {
	pool, store, last := thirtyTallied(t)
	// Damage the read model: a rebuild must restore it from the events.
	pool.Exec(context.Background(), "UPDATE tally_total SET n = 999")
	r := startAgain(t, pool, store, 2, last)
	st, err := r.Status(context.Background(), 0)
	if err != nil || st[0].Version != 2 || st[0].Lag != 0 {
		t.Fatalf("status %+v %v", st, err)
	}
}

// A read-model table dropped by hand is rebuilt from the events at the
// next start (or operator command), not created empty behind a checkpoint
// that says everything is applied.
func TestDroppedTableIsRebuilt(t *testing.T) {
	pool, store, last := thirtyTallied(t)
	if _, err := pool.Exec(context.Background(), "DROP TABLE tally_seen"); err != nil {
		t.Fatal(err)
	}
	startAgain(t, pool, store, 1, last)
}

// A projection a newer release rebuilt is left alone by an older one: its
// start is refused rather than rebuild it back, and an older process
// still running stops projecting into the newer tables without marking the
// projection failed.
func TestNewerVersionIsLeftToItsRelease(t *testing.T) {
	pool, store := setup(t)
	ctx := context.Background()
	last := appendN(t, store, "s-1", "Counted", 10)
	older := projections.NewRunner(pool, store, nil, quiet, tally{version: 1})
	if err := older.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	catchUpTo(t, older, tally{version: 1}, last)
	newer := projections.NewRunner(pool, store, nil, quiet, tally{version: 2})
	if err := newer.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	catchUpTo(t, newer, tally{version: 2}, last)

	waitVisible(t, store, appendN(t, store, "s-2", "Counted", 5))
	if _, err := older.CatchUp(ctx, tally{version: 1}); !errors.Is(err, projections.ErrNewerRelease) {
		t.Fatalf("the older runner's catch-up: %v, want ErrNewerRelease", err)
	}
	if err := projections.NewRunner(pool, store, nil, quiet, tally{version: 1}).Prepare(ctx); !errors.Is(err, projections.ErrNewerRelease) {
		t.Fatalf("an older start: %v, want ErrNewerRelease", err)
	}
	st, err := newer.Status(ctx, 0)
	if err != nil || st[0].Version != 2 || st[0].Failing != nil {
		t.Fatalf("status after the older runner tried: %+v %v", st, err)
	}
	if total, seen := counts(t, pool); total != 10 || seen != 10 {
		t.Fatalf("the older runner wrote into the newer tables: total %d seen %d, want 10", total, seen)
	}
}

// A process that does not project leaves a changed projection's rebuild
// to the projections processes of its release, and waits for it: the
// older release's projector keeps the read model until one of those takes
// over.
func TestOnlyProjectionsProcessesRebuild(t *testing.T) {
	pool, store := setup(t)
	ctx := context.Background()
	last := appendN(t, store, "s-1", "Counted", 10)
	older := projections.NewRunner(pool, store, nil, quiet, tally{version: 1})
	if err := older.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	catchUpTo(t, older, tally{version: 1}, last)

	api := projections.NewRunner(pool, store, nil, quiet, tally{version: 2})
	waited := make(chan error, 1)
	go func() { waited <- api.AwaitRebuilds(ctx, 10*time.Millisecond) }()
	// Meanwhile the older projector goes on.
	last = appendN(t, store, "s-2", "Counted", 5)
	waitVisible(t, store, last)
	catchUpTo(t, older, tally{version: 1}, last)
	select {
	case err := <-waited:
		t.Fatalf("the waiting process went on before any rebuild: %v", err)
	default:
	}
	if total, _ := counts(t, pool); total != 15 {
		t.Fatalf("the older projector stopped while the new release only waited: %d events counted, want 15", total)
	}

	newer := projections.NewRunner(pool, store, nil, quiet, tally{version: 2})
	if err := newer.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-waited; err != nil {
		t.Fatalf("waiting for the rebuild: %v", err)
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
	if err := waiter.WaitFor(ctx, last, "tally"); err != nil {
		t.Fatalf("live runner did not pass the last event after the swap: %v", err)
	}
	if total, seen := counts(t, pool); total != 3200 || seen != 3200 {
		t.Fatalf("after rebuild: total %d seen %d, want 3200", total, seen)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// underLock is tally noting, for each event it applies, whether its
// transaction holds the live table: only the swap's does.
type underLock struct{ tally }

func (underLock) Schema() string {
	return tally{}.Schema() + `
		CREATE TABLE IF NOT EXISTS public.tally_under_lock (event_id uuid PRIMARY KEY, locked bool NOT NULL);`
}

func (u underLock) Apply(ev eventstore.RecordedEvent, b *pgx.Batch) error {
	b.Queue(`INSERT INTO public.tally_under_lock (event_id, locked) SELECT $1, EXISTS (SELECT 1 FROM pg_locks
		WHERE pid = pg_backend_pid() AND relation = to_regclass('public.tally_total') AND mode = 'AccessExclusiveLock')
		ON CONFLICT (event_id) DO UPDATE SET locked = excluded.locked`, ev.ID)
	return u.tally.Apply(ev, b)
}

// Events recorded after a rebuild's replay, while it builds indexes, are
// applied before its swap: readers of the live tables wait only for the
// swap, and the swap applies only what came after that.
func TestRebuildAppliesWhatCameMeanwhileBeforeItsSwap(t *testing.T) {
	pool, store := setup(t)
	ctx := context.Background()
	last := appendN(t, store, "s-1", "Counted", 50)
	p := underLock{tally{version: 1}}
	r := projections.NewRunner(pool, store, nil, quiet, p)
	if err := r.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	catchUpTo(t, r, p, last)
	calls := 0
	if err := r.Rebuild(ctx, p, func(int64) {
		if calls++; calls == 1 { // the replay is done
			last = appendN(t, store, "s-2", "Counted", 300)
			waitVisible(t, store, last)
		}
	}); err != nil {
		t.Fatal(err)
	}
	var locked, all int
	if err := pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE locked), count(*) FROM tally_under_lock").Scan(&locked, &all); err != nil {
		t.Fatal(err)
	}
	if all != 350 || locked != 0 {
		t.Fatalf("%d of %d events were applied holding the live tables, want none of 350", locked, all)
	}
	if total, seen := counts(t, pool); total != 350 || seen != 350 {
		t.Fatalf("after the rebuild: total %d seen %d, want 350", total, seen)
	}
}

// The swap's own share, the events that came after the last replay, is
// applied before the live tables are locked: readers wait for the moves
// alone, never for a read of the log.
func TestTheSwapLocksTheLiveTablesOnlyToMoveThem(t *testing.T) {
	pool, store := setup(t)
	ctx := context.Background()
	last := appendN(t, store, "w-1", "Counted", 20)
	p := underLock{tally{version: 1}}
	r := projections.NewRunner(pool, store, nil, quiet, p)
	if err := r.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	catchUpTo(t, r, p, last)
	// Holding the projector's lock stops the swap before it reads the log.
	holder, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Release()
	key := int64(pglock.Projection(string(p.Name())))
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
		t.Fatal(err)
	}
	rebuilt := make(chan error, 1)
	go func() { rebuilt <- r.Rebuild(ctx, p, nil) }()
	waitForLockWait(t, pool, "%pg_advisory_xact_lock%", "the swap never waited for the projector's lock")
	last = appendN(t, store, "w-2", "Counted", 30)
	waitVisible(t, store, last)
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_unlock($1)", key); err != nil {
		t.Fatal(err)
	}
	if err := <-rebuilt; err != nil {
		t.Fatal(err)
	}
	var locked, all int
	if err := pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE locked), count(*) FROM tally_under_lock").Scan(&locked, &all); err != nil {
		t.Fatal(err)
	}
	if all != 50 || locked != 0 {
		t.Fatalf("%d of %d events were applied holding the live tables, want none of 50", locked, all)
	}
	if total, seen := counts(t, pool); total != 50 || seen != 50 {
		t.Fatalf("after the rebuild: total %d seen %d, want 50", total, seen)
	}
}

// underSwap is tally noting, for each event it applies, whether its
// transaction holds the projector's lock: a swap's does, a replay's not.
type underSwap struct{ tally }

func (underSwap) Schema() string {
	return tally{}.Schema() + `
		CREATE TABLE IF NOT EXISTS public.tally_in_swap (event_id uuid PRIMARY KEY, in_swap bool NOT NULL);`
}

func (u underSwap) Apply(ev eventstore.RecordedEvent, b *pgx.Batch) error {
	b.Queue(`INSERT INTO public.tally_in_swap (event_id, in_swap) SELECT $1, EXISTS (SELECT 1 FROM pg_locks
		WHERE pid = pg_backend_pid() AND locktype = 'advisory' AND ((classid::bigint << 32) | objid::bigint) = $2)
		ON CONFLICT (event_id) DO UPDATE SET in_swap = excluded.in_swap`, ev.ID, int64(pglock.Projection(string(u.Name()))))
	return u.tally.Apply(ev, b)
}

// A swap that gives way to readers of the live tables applies what came
// meanwhile before it tries again, without the projector's lock: however
// long readers hold it off, the live projector waits for a few events at
// each try, not for all that came since the first.
func TestASwapGivingWayReplaysWhatCameMeanwhile(t *testing.T) {
	pool, store := setup(t)
	ctx := context.Background()
	last := appendN(t, store, "r-1", "Counted", 20)
	p := underSwap{tally{version: 1}}
	r := projections.NewRunner(pool, store, nil, quiet, p)
	if err := r.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	catchUpTo(t, r, p, last)
	reader, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Rollback(ctx)
	if _, err := reader.Exec(ctx, "SELECT count(*) FROM tally_total"); err != nil {
		t.Fatal(err)
	}
	rebuilt := make(chan error, 1)
	go func() { rebuilt <- r.Rebuild(ctx, p, nil) }()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var blocked bool
		if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND query ILIKE 'LOCK TABLE%')`).Scan(&blocked); err != nil {
			t.Fatal(err)
		}
		if blocked {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the swap never met the reader")
		}
	}
	last = appendN(t, store, "r-2", "Counted", 30)
	waitVisible(t, store, last)
	time.Sleep(time.Second) // a few more tries
	reader.Rollback(ctx)
	if err := <-rebuilt; err != nil {
		t.Fatal(err)
	}
	var inSwap, all int
	if err := pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE in_swap), count(*) FROM tally_in_swap").Scan(&inSwap, &all); err != nil {
		t.Fatal(err)
	}
	if all != 50 || inSwap != 0 {
		t.Fatalf("%d of %d events were applied holding the projector's lock, want none of 50", inSwap, all)
	}
	if total, seen := counts(t, pool); total != 50 || seen != 50 {
		t.Fatalf("after the rebuild: total %d seen %d, want 50", total, seen)
	}
}

// A rebuild on a pool of one connection would wait for ever on itself,
// holding the projector's lock: it is refused before it starts.
func TestARebuildNeedsTwoConnections(t *testing.T) {
	cfg, err := pgxpool.ParseConfig(pgtest.NewURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	one, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	r := projections.NewRunner(one, postgres.New(one), nil, quiet, tally{version: 1})
	err = r.Rebuild(context.Background(), tally{version: 1}, nil)
	if err == nil || !strings.Contains(err.Error(), "a rebuild needs at least 2") || !strings.Contains(err.Error(), "pool_max_conns") {
		t.Fatalf("rebuild on one connection: %v", err)
	}
}

// Processes of a new release starting together rebuild a changed
// projection once: the others wait for that rebuild and use it.
func TestProcessesStartingTogetherRebuildOnce(t *testing.T) {
	pool, store, last := thirtyTallied(t)
	ctx := context.Background()
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	// The rebuild lock is held while the processes start, so that all of
	// them find the projection stale before any rebuilds it.
	release, holder := holdingRebuild(t, pool, "tally")
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			if err := projections.NewRunner(pool, store, nil, log, tally{version: 2}).Prepare(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	release(3)
	wg.Wait()
	if err := <-holder; err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "projection rebuilt"); n != 1 {
		t.Fatalf("the log was replayed %d times for one version change:\n%s", n, logs.String())
	}
	r := projections.NewRunner(pool, store, nil, quiet, tally{version: 2})
	catchUpTo(t, r, tally{version: 2}, last)
	if total, seen := counts(t, pool); total != 30 || seen != 30 {
		t.Fatalf("after the rebuild: total %d seen %d, want 30", total, seen)
	}
}

// holdingRebuild holds the named projector's rebuild lock until release(n)
// is called, which lets it go once n other sessions are asking for it; the
// holder's result comes on the channel.
func holdingRebuild(t *testing.T, pool *pgxpool.Pool, name string) (release func(n int), holder <-chan error) {
	t.Helper()
	pids, let := make(chan uint32), make(chan struct{})
	result := make(chan error, 1)
	go func() {
		result <- pglock.Hold(context.Background(), pool.Config().ConnConfig, pglock.Rebuild(name), pglock.Options{},
			func(_ context.Context, c *pglock.Conn) error {
				c.Do(func(conn *pgx.Conn) error { pids <- conn.PgConn().PID(); return nil })
				<-let
				return nil
			})
	}()
	pid := <-pids
	return func(n int) {
		t.Helper()
		// A session asking for an advisory lock, whether it waits in the
		// statement or tries it again and again, shows it as its query.
		for asking := 0; asking < n; time.Sleep(10 * time.Millisecond) {
			if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND pid NOT IN ($1, pg_backend_pid()) AND query LIKE '%advisory_lock($1)%'`, int64(pid)).Scan(&asking); err != nil {
				t.Fatal(err)
			}
		}
		close(let)
	}, result
}

// Processes starting together on a fresh database (a first deployment:
// every projection to build) all start. The one that builds a projection
// runs its index statements CONCURRENTLY, and such a statement waits for
// every statement older than it in the database: the others must not wait
// for the rebuild lock inside a statement, or the build waits for them
// while they wait for it, for good.
func TestStartsTogetherOnAFreshDatabaseAllFinish(t *testing.T) {
	pool, store := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	release, holder := holdingRebuild(t, pool, "emails")
	done := make(chan error, 2)
	for range 2 {
		go func() { done <- projections.NewRunner(pool, store, nil, quiet, projections.Emails{}).Prepare(ctx) }()
	}
	release(2)
	for range 2 {
		if err := <-done; err != nil {
			t.Errorf("a start did not finish: %v", err)
		}
	}
	if err := <-holder; err != nil {
		t.Fatal(err)
	}
	var indexed bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass('emails_account_created_idx') IS NOT NULL").Scan(&indexed); err != nil || !indexed {
		t.Fatalf("the emails projection was not built with its indexes (%v)", err)
	}
}

// syncBuffer is a bytes.Buffer several goroutines may log into.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestWaiterTimesOutWithoutRunner(t *testing.T) {
	pool, store := setup(t)
	r := projections.NewRunner(pool, store, nil, quiet, tally{version: 1})
	if err := r.Prepare(context.Background()); err != nil {
		t.Fatal(err)
	}
	pos := appendN(t, store, "s-1", "Counted", 1)
	w := projections.NewWaiter(pool, 200*time.Millisecond)
	var lag *projections.LagError
	if err := w.WaitFor(context.Background(), pos, "tally"); !errors.As(err, &lag) || len(lag.Behind) != 1 || lag.Behind[0] != "tally" {
		t.Fatalf("waiter on a position no projector reached: %v", err)
	}
	// Another process catching up is seen through the checkpoint table.
	catchUpTo(t, r, tally{version: 1}, pos)
	if err := w.WaitFor(context.Background(), pos, "tally"); err != nil {
		t.Fatalf("waiter missed a checkpoint written by another runner: %v", err)
	}
}

// picky counts only "Counted" events: the others project to nothing. An
// event applied twice shows in the total, and fails nothing.
type picky struct{ tally }

func (p picky) Apply(ev eventstore.RecordedEvent, b *pgx.Batch) error {
	if ev.Type != "Counted" {
		return nil
	}
	b.Queue(`UPDATE tally_total SET n = n + 1 WHERE id = 1`)
	b.Queue(`INSERT INTO tally_seen (event_id, stream) VALUES ($1, $2) ON CONFLICT DO NOTHING`, ev.ID, ev.StreamID)
	return nil
}

// pickyTx is picky applying in its transaction, telling the runner which
// events it reads.
type pickyTx struct{ picky }

func (p pickyTx) Reads(ev eventstore.RecordedEvent) bool { return ev.Type == "Counted" }
func (p pickyTx) ApplyTx(ctx context.Context, tx pgx.Tx, ev eventstore.RecordedEvent) error {
	b := &pgx.Batch{}
	if err := p.picky.Apply(ev, b); err != nil {
		return err
	}
	return tx.SendBatch(ctx, b).Close()
}

// Two instances follow the log at once while it grows, most of it events
// the projector ignores: every counted event is applied exactly once, and
// the checkpoint ends past the last event, ignored ones included; whether
// the projector queues statements or applies in its transaction.
func TestInstancesApplyEachEventOnceAndPassIgnoredOnes(t *testing.T) {
	for _, p := range []projections.Projector{picky{tally{version: 1}}, pickyTx{picky{tally{version: 1}}}} {
		t.Run(fmt.Sprintf("%T", p), func(t *testing.T) { instancesApplyOnce(t, p) })
	}
}

func instancesApplyOnce(t *testing.T, p projections.Projector) {
	pool, store := setup(t)
	a := projections.NewRunner(pool, store, nil, quiet, p)
	b := projections.NewRunner(pool, store, nil, quiet, p)
	if err := a.Prepare(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 2)
	for _, r := range []*projections.Runner{a, b} {
		go func() {
			for ctx.Err() == nil {
				if _, err := r.CatchUp(ctx, p); err != nil && ctx.Err() == nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
	}
	var last eventstore.Position
	for i := range 60 {
		appendN(t, store, fmt.Sprintf("c-%d", i), "Counted", 3)
		last = appendN(t, store, fmt.Sprintf("o-%d", i), "Other", 5)
	}
	catchUpTo(t, a, p, last)
	cancel()
	for range 2 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if total, seen := counts(t, pool); total != 180 || seen != 180 {
		t.Fatalf("total %d seen %d, want 180", total, seen)
	}
	var c, pr int64
	var quarantined int
	if err := pool.QueryRow(context.Background(), `SELECT commit_position, prepare_position,
		(SELECT count(*) FROM projection_quarantine) FROM projection_checkpoints WHERE name = 'tally'`).Scan(&c, &pr, &quarantined); err != nil {
		t.Fatal(err)
	}
	if got := (eventstore.Position{Commit: uint64(c), Prepare: uint64(pr)}); got != last || quarantined != 0 {
		t.Fatalf("checkpoint %v with %d streams quarantined, want %v and none", got, quarantined, last)
	}
}

// lostOnce is a store whose first subscription fails at its first Next, as
// one whose database connection dropped.
type lostOnce struct {
	eventstore.Store
	subs atomic.Int32
}

func (s *lostOnce) SubscribeAll(ctx context.Context, from eventstore.Position) (eventstore.Subscription, error) {
	sub, err := s.Store.SubscribeAll(ctx, from)
	if s.subs.Add(1) == 1 && err == nil {
		return lostSubscription{sub}, nil
	}
	return sub, err
}

type lostSubscription struct{ eventstore.Subscription }

func (lostSubscription) Next(context.Context) (eventstore.RecordedEvent, error) {
	return eventstore.RecordedEvent{}, errors.New("connection reset by peer")
}

// A runner whose wake-up subscription is lost subscribes again and goes on
// projecting, rather than fall back for good on its poll.
func TestRunnerSubscribesAgainAfterALostSubscription(t *testing.T) {
	pool, store := setup(t)
	flaky := &lostOnce{Store: store}
	r := projections.NewRunner(pool, flaky, nil, quiet, tally{version: 1})
	ctx, cancel := context.WithCancel(context.Background())
	if err := r.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	for deadline := time.Now().Add(60 * time.Second); flaky.subs.Load() < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the runner never subscribed again")
		}
	}
	last := appendN(t, store, "s-1", "Counted", 5)
	waitVisible(t, store, last)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if total, _ := counts(t, pool); total == 5 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("events after the lost subscription were never projected")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// Processes starting together on a read model that lacks an index their
// release adds (an upgrade) all start: one builds the index while the
// others wait for it, rather than building it too and failing on its name.
func TestStartsTogetherBuildANewIndexOnce(t *testing.T) {
	ctx := context.Background()
	pool, store := setup(t)
	p := projections.Emails{}
	if err := projections.NewRunner(pool, store, nil, quiet, p).Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	// Enough emails for the index to take a moment to build.
	if _, err := pool.Exec(ctx, `INSERT INTO emails (id, account_id, from_email, to_email, to_addresses, subject,
			status, top_status, top_rank, top_at, created_at)
		SELECT 'e' || i, 'acct', 'a@acme.test', 'user' || i || '@example.org', ARRAY['user' || i || '@example.org'], 's',
			'queued', 'queued', 0, now(), now()
		FROM generate_series(1, 20000) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "DROP INDEX emails_account_status_idx"); err != nil {
		t.Fatal(err)
	}

	// A writer holds the table, so that both starts come to its indexes
	// together once it is done.
	writer, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Rollback(ctx)
	if _, err := writer.Exec(ctx, "LOCK TABLE emails IN ROW EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	started := make(chan error, 2)
	for range 2 {
		go func() { started <- projections.NewRunner(pool, store, nil, quiet, p).Prepare(ctx) }()
	}
	for waiting := 0; waiting < 2; {
		// Not in the writer's transaction: it would see the same figures
		// every time.
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := writer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-started; err != nil {
			t.Errorf("a start failed: %v", err)
		}
	}
	var indexed bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass('emails_account_status_idx') IS NOT NULL").Scan(&indexed); err != nil || !indexed {
		t.Fatalf("index not built (%v)", err)
	}
}

// A rebuild that stops part way (here interrupted after its first batch)
// leaves no shadow tables behind: they would keep opened personal data
// that erasures of the live tables do not reach.
func TestAnInterruptedRebuildLeavesNothingBehind(t *testing.T) {
	pool, store, _ := thirtyTallied(t)
	r := projections.NewRunner(pool, store, nil, quiet, tally{version: 1})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := r.Rebuild(ctx, tally{version: 1}, func(int64) { cancel() })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted rebuild: %v", err)
	}
	var schemas, checkpoints int
	if err := pool.QueryRow(context.Background(),
		"SELECT (SELECT count(*) FROM information_schema.schemata WHERE schema_name LIKE 'projection_rebuild_%'), "+
			"(SELECT count(*) FROM projection_checkpoints WHERE name LIKE 'rebuild:%')").Scan(&schemas, &checkpoints); err != nil {
		t.Fatal(err)
	}
	if schemas != 0 || checkpoints != 0 {
		t.Fatalf("left behind: %d shadow schema(s), %d rebuild checkpoint(s)", schemas, checkpoints)
	}
	if total, seen := counts(t, pool); total != 30 || seen != 30 {
		t.Fatalf("live read model after the interrupted rebuild: total %d seen %d, want 30 each", total, seen)
	}
}
