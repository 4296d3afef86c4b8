package jobs_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/eventstore/postgres"
	"github.com/mailroom/mailroom/internal/jobs"
	"github.com/mailroom/mailroom/internal/pglock"
	"github.com/mailroom/mailroom/internal/pgtest"
)

// noteArgs is a job per "noted" event; its id is the event's.
type noteArgs struct {
	EventID string `json:"event_id" river:"unique"`
}

func (noteArgs) Kind() string { return "test_note" }

func planNotes(_ context.Context, ev eventstore.RecordedEvent) ([]river.InsertManyParams, error) {
	if ev.Type != "noted" {
		return nil, nil
	}
	return []river.InsertManyParams{{Args: noteArgs{EventID: ev.ID.String()},
		InsertOpts: &river.InsertOpts{Queue: "test", UniqueOpts: river.UniqueOpts{ByArgs: true}}}}, nil
}

func appendEvents(t *testing.T, store eventstore.Store, typ string, n int) []string {
	t.Helper()
	var ids []string
	for i := range n {
		id := uuid.New()
		ids = append(ids, id.String())
		if _, err := store.Append(context.Background(), fmt.Sprintf("test-%d", i%7), eventstore.Any,
			eventstore.EventData{ID: id, Type: typ, SchemaVersion: 1, Data: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	return ids
}

// jobCount is how many jobs exist per event id.
func jobCount(t *testing.T, pool *pgxpool.Pool) map[string]int {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT args->>'event_id', count(*) FROM river_job WHERE kind = 'test_note' GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	got := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		got[id] = n
	}
	return got
}

// waitJobs waits until every id has a job.
func waitJobs(t *testing.T, pool *pgxpool.Pool, ids []string) map[string]int {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		got := jobCount(t, pool)
		missing := 0
		for _, id := range ids {
			if got[id] == 0 {
				missing++
			}
		}
		if missing == 0 {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events have no job", missing, len(ids))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// readAll returns the log once its n events are readable (an event becomes
// readable when older transactions, of any database, have ended).
func readAll(t *testing.T, store eventstore.Store, n int) []eventstore.RecordedEvent {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		evs, err := store.ReadAll(context.Background(), eventstore.Start, n+1)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) >= n {
			return evs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events readable", len(evs), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func checkpointOf(t *testing.T, pool *pgxpool.Pool, name string) eventstore.Position {
	t.Helper()
	var c, p int64
	if err := pool.QueryRow(context.Background(), `SELECT commit_position, prepare_position FROM processmanager_checkpoints WHERE name = $1`, name).Scan(&c, &p); err != nil {
		t.Fatal(err)
	}
	return eventstore.Position{Commit: uint64(c), Prepare: uint64(p)}
}

// run starts r and returns a stop function that waits for it.
func run(r *jobs.Reader) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { r.Run(ctx) })
	return func() { cancel(); wg.Wait() }
}

// Every event becomes its jobs once, across a restart of the reader: the
// second reader resumes at the checkpoint the first committed with them.
func TestReaderPlansEachEventOnceAcrossRestart(t *testing.T) {
	pool := pgtest.NewPool(t)
	store := postgres.New(pool)
	first := appendEvents(t, store, "noted", 300)
	appendEvents(t, store, "other", 50)

	stop := run(jobs.NewReader("notes", pool, store, planNotes, nil))
	waitJobs(t, pool, first)
	stop()
	at := checkpointOf(t, pool, "notes")

	second := appendEvents(t, store, "noted", 300)
	stop = run(jobs.NewReader("notes", pool, store, planNotes, nil))
	got := waitJobs(t, pool, append(first, second...))
	stop()
	for id, n := range got {
		if n != 1 {
			t.Errorf("event %s has %d jobs, want 1", id, n)
		}
	}
	if len(got) != 600 {
		t.Errorf("%d events have jobs, want 600", len(got))
	}
	if after := checkpointOf(t, pool, "notes"); !at.Less(after) {
		t.Errorf("checkpoint did not move on: %s then %s", at, after)
	}
}

// A reader starts after its checkpoint: events below it are not planned
// again.
func TestReaderResumesFromCheckpoint(t *testing.T) {
	pool := pgtest.NewPool(t)
	store := postgres.New(pool)
	old := appendEvents(t, store, "noted", 20)
	evs := readAll(t, store, 20)
	last := evs[len(evs)-1].Position
	if _, err := pool.Exec(context.Background(), `INSERT INTO processmanager_checkpoints (name, commit_position, prepare_position)
		VALUES ('notes', $1, $2)`, int64(last.Commit), int64(last.Prepare)); err != nil {
		t.Fatal(err)
	}
	fresh := appendEvents(t, store, "noted", 5)
	stop := run(jobs.NewReader("notes", pool, store, planNotes, nil))
	got := waitJobs(t, pool, fresh)
	stop()
	for _, id := range old {
		if got[id] != 0 {
			t.Fatalf("event %s below the checkpoint was planned", id)
		}
	}
}

// With no checkpoint of its own, a reader replacing older handlers starts
// at the lowest of their checkpoints and removes them once it saved its own.
func TestReaderInheritsLowestCheckpoint(t *testing.T) {
	pool := pgtest.NewPool(t)
	store := postgres.New(pool)
	ids := appendEvents(t, store, "noted", 30)
	evs := readAll(t, store, 30)
	for i, at := range []int{19, 9, 24} { // the lowest is after the 10th event
		p := evs[at].Position
		if _, err := pool.Exec(context.Background(), `INSERT INTO processmanager_checkpoints (name, commit_position, prepare_position)
			VALUES ($1, $2, $3)`, fmt.Sprintf("old-%d-of-3", i), int64(p.Commit), int64(p.Prepare)); err != nil {
			t.Fatal(err)
		}
	}
	r := jobs.NewReader("notes", pool, store, planNotes, nil)
	r.Inherit = "old-%-of-%"
	stop := run(r)
	got := waitJobs(t, pool, ids[10:])
	stop()
	for _, id := range ids[:10] {
		if got[id] != 0 {
			t.Fatalf("event %s below every older checkpoint was planned", id)
		}
	}
	var left int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM processmanager_checkpoints WHERE name LIKE 'old-%'`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if left != 0 {
		t.Errorf("%d older checkpoints left", left)
	}
}

// Two readers of one name on one database: one reads, the other stands by
// and takes over when the first stops; no event is planned twice.
func TestTwoReadersOneReads(t *testing.T) {
	pool := pgtest.NewPool(t)
	store := postgres.New(pool)
	var mu sync.Mutex
	seen := map[string]int{} // planned events per reader
	counting := func(who string) jobs.Plan {
		return func(ctx context.Context, ev eventstore.RecordedEvent) ([]river.InsertManyParams, error) {
			mu.Lock()
			seen[who]++
			mu.Unlock()
			return planNotes(ctx, ev)
		}
	}
	a := jobs.NewReader("notes", pool, store, counting("a"), nil)
	b := jobs.NewReader("notes", pool, store, counting("b"), nil)
	a.LockPoll, b.LockPoll = 50*time.Millisecond, 50*time.Millisecond
	stopA := run(a)
	first := appendEvents(t, store, "noted", 100)
	waitJobs(t, pool, first)
	stopB := run(b)
	second := appendEvents(t, store, "noted", 100)
	waitJobs(t, pool, second)
	mu.Lock()
	if seen["a"] == 0 || seen["b"] != 0 {
		t.Errorf("planned by a: %d, by b: %d; want only a", seen["a"], seen["b"])
	}
	mu.Unlock()

	stopA()
	third := appendEvents(t, store, "noted", 100)
	got := waitJobs(t, pool, third)
	stopB()
	mu.Lock()
	if seen["b"] == 0 {
		t.Error("the standby never took over")
	}
	mu.Unlock()
	for id, n := range got {
		if n != 1 {
			t.Errorf("event %s has %d jobs", id, n)
		}
	}
}

// An event its plan calls malformed is passed over; the events after it
// still become jobs, and a plan error that may pass is retried instead.
func TestReaderPassesOverMalformedEvents(t *testing.T) {
	pool := pgtest.NewPool(t)
	store := postgres.New(pool)
	before := appendEvents(t, store, "noted", 5)
	appendEvents(t, store, "broken", 1)
	after := appendEvents(t, store, "noted", 5)
	var mu sync.Mutex
	flaky := 3
	plan := func(ctx context.Context, ev eventstore.RecordedEvent) ([]river.InsertManyParams, error) {
		switch ev.Type {
		case "broken":
			return nil, jobs.Malformed(fmt.Errorf("no id"))
		case "noted":
			mu.Lock()
			defer mu.Unlock()
			if flaky > 0 {
				flaky--
				return nil, fmt.Errorf("database hiccup")
			}
		}
		return planNotes(ctx, ev)
	}
	stop := run(jobs.NewReader("notes", pool, store, plan, nil))
	got := waitJobs(t, pool, append(before, after...))
	stop()
	if len(got) != 10 {
		t.Errorf("%d events have jobs, want 10", len(got))
	}
	for id, n := range got {
		if n != 1 {
			t.Errorf("event %s has %d jobs, want 1", id, n)
		}
	}
}

// Prepare sees each batch before any of its events is planned, once, and
// its error makes the reader read the batch again, unplanned.
func TestReaderPreparesEachBatch(t *testing.T) {
	pool := pgtest.NewPool(t)
	store := postgres.New(pool)
	ids := appendEvents(t, store, "noted", 200)
	readAll(t, store, 200)
	var mu sync.Mutex
	var problems []string
	var current []string // the batch prepared last
	planned, prepared, failedFirst, retriedFirst := 0, 0, "", ""
	plan := func(ctx context.Context, ev eventstore.RecordedEvent) ([]river.InsertManyParams, error) {
		mu.Lock()
		if planned >= len(current) || current[planned] != ev.ID.String() {
			problems = append(problems, fmt.Sprintf("event %s planned outside its prepared batch", ev.ID))
		}
		planned++
		mu.Unlock()
		return planNotes(ctx, ev)
	}
	r := jobs.NewReader("notes", pool, store, plan, nil)
	r.BatchSize = 50
	r.Prepare = func(ctx context.Context, batch []eventstore.RecordedEvent) error {
		mu.Lock()
		defer mu.Unlock()
		if planned != len(current) {
			problems = append(problems, fmt.Sprintf("a batch prepared after %d of the last one's %d events", planned, len(current)))
		}
		prepared++
		if failedFirst != "" && retriedFirst == "" {
			retriedFirst = batch[0].ID.String()
		}
		if prepared == 2 {
			failedFirst = batch[0].ID.String()
			current, planned = nil, 0
			return fmt.Errorf("database hiccup")
		}
		current, planned = nil, 0
		for _, ev := range batch {
			current = append(current, ev.ID.String())
		}
		return nil
	}
	stop := run(r)
	got := waitJobs(t, pool, ids)
	stop()
	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		t.Error(p)
	}
	if failedFirst == "" || retriedFirst != failedFirst {
		t.Errorf("the failed batch began at %q, the next one at %q", failedFirst, retriedFirst)
	}
	if prepared < 3 {
		t.Errorf("%d batches prepared", prepared)
	}
	for id, n := range got {
		if n != 1 {
			t.Errorf("event %s has %d jobs, want 1", id, n)
		}
	}
}

// A passing error of reading (the pool refused a connection for a while)
// is retried within the tenure: the reader keeps its lock on the same
// session, says it is failing meanwhile, and reads on from its checkpoint,
// each event still becoming its jobs once.
func TestReaderKeepsItsLockThroughPassingErrors(t *testing.T) {
	pool := pgtest.NewPool(t)
	store := postgres.New(pool)
	ids := appendEvents(t, store, "noted", 120)
	readAll(t, store, 120)
	hiccup := errors.New("no connection slot left")
	holder := func() int {
		var pid int
		if err := pool.QueryRow(context.Background(), `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
			AND (classid::bigint << 32 | objid::bigint) = $1`, int64(pglock.ProcessManager("notes"))).Scan(&pid); err != nil {
			t.Error(err)
		}
		return pid
	}
	var mu sync.Mutex
	prepared, failed := 0, 0
	var pids []int
	tenures := &pglock.Tenures{}
	r := jobs.NewReader("notes", pool, store, planNotes, nil)
	r.BatchSize, r.Tenures = 40, tenures
	r.Passing = func(err error) bool { return errors.Is(err, hiccup) }
	r.Prepare = func(ctx context.Context, batch []eventstore.RecordedEvent) error {
		mu.Lock()
		defer mu.Unlock()
		prepared++
		pids = append(pids, holder())
		if prepared == 2 || prepared == 3 {
			failed++
			return fmt.Errorf("prepare: %w", hiccup)
		}
		return nil
	}
	// The tenure's states as they change: it waits 100 ms, then 200 ms,
	// before reading again.
	var states []pglock.State
	watching, watched := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(watched)
		for {
			if v := tenures.List(); len(v) == 1 && (len(states) == 0 || states[len(states)-1] != v[0].State) {
				states = append(states, v[0].State)
			}
			select {
			case <-watching:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	stop := run(r)
	got := waitJobs(t, pool, ids)
	stop()
	close(watching)
	<-watched
	mu.Lock()
	defer mu.Unlock()
	if failed != 2 {
		t.Fatalf("%d batches failed, want 2", failed)
	}
	for _, pid := range pids {
		if pid != pids[0] {
			t.Errorf("the lock moved to another session while reading again: %v", pids)
			break
		}
	}
	// Failing while it read again, active once it read on.
	// (Between the two failures it is active for a moment, which the
	// watch may not see.)
	if len(states) < 3 || states[0] != pglock.Active || !slices.Contains(states, pglock.Failing) ||
		states[len(states)-1] != pglock.Active || slices.Contains(states, pglock.Standby) {
		t.Errorf("the tenure went %v, want active, failing, active", states)
	}
	for id, n := range got {
		if n != 1 {
			t.Errorf("event %s has %d jobs, want 1", id, n)
		}
	}
}
