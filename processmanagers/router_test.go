package processmanagers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/eventstore/postgres"
	"github.com/mailroom/mailroom/internal/pglock"
	"github.com/mailroom/mailroom/internal/pgtest"
)

// testOpts make retries, redelivery, failover and checkpoints fast.
var testOpts = []Option{
	WithRetry(2, 5*time.Millisecond, 20*time.Millisecond),
	WithRedeliveryBackoff(10*time.Millisecond, 100*time.Millisecond),
	WithLockPollInterval(100 * time.Millisecond),
	WithCheckpointInterval(50 * time.Millisecond),
	WithCloseTimeout(5 * time.Second),
}

const waitLimit = 60 * time.Second // a failure bound: a slow machine only waits longer

type env struct {
	pool  *pgxpool.Pool
	store *postgres.Store
}

func newEnv(t *testing.T) *env {
	t.Helper()
	pool := pgtest.NewPool(t)
	store := postgres.New(pool)
	t.Cleanup(func() { store.Close() })
	return &env{pool: pool, store: store}
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.DiscardHandler)
}

// appendN appends n single-event appends spread over streams streams and
// returns their ids in append order.
func (e *env) appendN(t *testing.T, n, streams int, prefix string) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, n)
	for i := range n {
		ids[i] = uuid.New()
		_, err := e.store.Append(context.Background(), fmt.Sprintf("test-%s%d", prefix, i%streams), eventstore.Any, eventstore.EventData{
			ID: ids[i], Type: "TestHappened", SchemaVersion: 1,
			Data:     json.RawMessage(fmt.Sprintf(`{"n":%d,"prefix":%q}`, i, prefix)),
			Metadata: eventstore.Metadata{Actor: "system:test", CorrelationID: "corr-" + prefix, CausationID: ids[i].String(), RequestID: "req"},
		})
		if err != nil {
			t.Errorf("append: %v", err)
			return nil
		}
	}
	return ids
}

// all returns the whole log, waiting until it has want events.
func (e *env) all(t *testing.T, want int) []eventstore.RecordedEvent {
	t.Helper()
	var evs []eventstore.RecordedEvent
	waitFor(t, "log visible", func() bool {
		var err error
		evs, err = e.store.ReadAll(context.Background(), eventstore.Start, want+1)
		if err != nil {
			t.Fatal(err)
		}
		return len(evs) >= want
	})
	return evs
}

// start runs a router with handlers until the returned stop is called (or
// the test ends); stop waits for Run to return and checks its error.
func (e *env) start(t *testing.T, store eventstore.Store, handlers map[string]Handler, opts ...Option) (stop func()) {
	t.Helper()
	if store == nil {
		store = e.store
	}
	r, err := NewRouter(e.pool, store, testLogger(t), append(append([]Option(nil), testOpts...), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	for name, h := range handlers {
		r.Handle(name, h)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	select {
	case <-r.Running():
	case err := <-done:
		t.Fatalf("Run returned early: %v", err)
	case <-time.After(waitLimit):
		t.Fatal("router did not start")
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("Run: %v", err)
				}
			case <-time.After(waitLimit):
				t.Error("Run did not return after cancel")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// recorder keeps every call of a handler and the events it finished.
type recorder struct {
	mu    sync.Mutex
	calls []uuid.UUID
	done  []eventstore.RecordedEvent
}

// handler records each call and finishes the event when fail returns nil.
func (r *recorder) handler(fail func(ctx context.Context, ev eventstore.RecordedEvent, attempt int) error) Handler {
	attempts := map[uuid.UUID]int{}
	return func(ctx context.Context, ev eventstore.RecordedEvent) error {
		r.mu.Lock()
		r.calls = append(r.calls, ev.ID)
		attempts[ev.ID]++
		n := attempts[ev.ID]
		r.mu.Unlock()
		if fail != nil {
			if err := fail(ctx, ev, n); err != nil {
				return err
			}
		}
		r.mu.Lock()
		r.done = append(r.done, ev)
		r.mu.Unlock()
		return nil
	}
}

func (r *recorder) doneIDs() []uuid.UUID {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]uuid.UUID, len(r.done))
	for i, ev := range r.done {
		ids[i] = ev.ID
	}
	return ids
}

func (r *recorder) callIDs() []uuid.UUID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]uuid.UUID(nil), r.calls...)
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.done)
}

func idsOf(evs []eventstore.RecordedEvent) []uuid.UUID {
	ids := make([]uuid.UUID, len(evs))
	for i, ev := range evs {
		ids[i] = ev.ID
	}
	return ids
}

func equalIDs(t *testing.T, what string, got, want []uuid.UUID) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d events, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: event %d is %s, want %s", what, i, got[i], want[i])
		}
	}
}

func sameEvent(t *testing.T, got, want eventstore.RecordedEvent) {
	t.Helper()
	if got.ID != want.ID || got.StreamID != want.StreamID || got.StreamRevision != want.StreamRevision ||
		got.Position != want.Position || got.Type != want.Type || got.SchemaVersion != want.SchemaVersion ||
		!bytes.Equal(got.Data, want.Data) || got.Metadata != want.Metadata || got.Hash != want.Hash ||
		!got.RecordedAt.Equal(want.RecordedAt) {
		t.Fatalf("event differs:\n got %+v\nwant %+v", got, want)
	}
}

func (e *env) checkpoint(t *testing.T, name string) eventstore.Position {
	t.Helper()
	var c, p int64
	err := e.pool.QueryRow(context.Background(),
		"SELECT commit_position, prepare_position FROM processmanager_checkpoints WHERE name = $1", name).Scan(&c, &p)
	if err != nil {
		t.Fatalf("checkpoint %s: %v", name, err)
	}
	return eventstore.Position{Commit: uint64(c), Prepare: uint64(p)}
}

func (e *env) poisonCount(t *testing.T) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(context.Background(), "SELECT count(*) FROM processmanager_poison").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestDeliversEveryEventOnceInOrder: history and live events, appended
// concurrently to many streams, reach the handler once each in $all order,
// as full RecordedEvents; the checkpoint ends at the last one.
func TestDeliversEveryEventOnceInOrder(t *testing.T) {
	e := newEnv(t)
	e.appendN(t, 150, 7, "a")
	var rec recorder
	stop := e.start(t, nil, map[string]Handler{"orderly": rec.handler(nil)})
	waitFor(t, "history delivered", func() bool { return rec.count() >= 150 })

	var wg sync.WaitGroup
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.appendN(t, 50, 4, fmt.Sprintf("live%d-", g))
		}()
	}
	wg.Wait()
	waitFor(t, "live events delivered", func() bool { return rec.count() >= 300 })
	stop()

	all := e.all(t, 300)
	if len(all) != 300 {
		t.Fatalf("log has %d events, want 300", len(all))
	}
	equalIDs(t, "handled", rec.doneIDs(), idsOf(all))
	rec.mu.Lock()
	for i := range all {
		sameEvent(t, rec.done[i], all[i])
	}
	rec.mu.Unlock()
	if got := e.checkpoint(t, "orderly"); got != all[299].Position {
		t.Fatalf("checkpoint %v, want %v", got, all[299].Position)
	}
}

// TestRetries: a handler that fails twice, one that panics once and one that
// reports a transient failure more often than the in-place retries allow all
// get the event again, then move on in order; nothing is poisoned.
func TestRetries(t *testing.T) {
	e := newEnv(t)
	ids := e.appendN(t, 20, 3, "r")
	var flaky, panicky, transient recorder
	stop := e.start(t, nil, map[string]Handler{
		"flaky": flaky.handler(func(_ context.Context, ev eventstore.RecordedEvent, n int) error {
			if ev.ID == ids[7] && n <= 2 {
				return errors.New("flaky failure")
			}
			return nil
		}),
		"panicky": panicky.handler(func(_ context.Context, ev eventstore.RecordedEvent, n int) error {
			if ev.ID == ids[4] && n == 1 {
				panic("panicky handler")
			}
			return nil
		}),
		"transient": transient.handler(func(_ context.Context, ev eventstore.RecordedEvent, n int) error {
			if ev.ID == ids[3] && n <= 5 { // 3 attempts per delivery: redelivered once
				return Transient(errors.New("provider unavailable"))
			}
			return nil
		}),
	})
	for _, r := range []*recorder{&flaky, &panicky, &transient} {
		waitFor(t, "all events handled", func() bool { return r.count() >= 20 })
	}
	stop()

	for name, c := range map[string]struct {
		r     *recorder
		at    int
		calls int
	}{"flaky": {&flaky, 7, 3}, "panicky": {&panicky, 4, 2}, "transient": {&transient, 3, 6}} {
		equalIDs(t, name+" finished", c.r.doneIDs(), ids)
		var want []uuid.UUID
		for i, id := range ids {
			n := 1
			if i == c.at {
				n = c.calls
			}
			for range n {
				want = append(want, id)
			}
		}
		equalIDs(t, name+" calls", c.r.callIDs(), want)
	}
	if n := e.poisonCount(t); n != 0 {
		t.Fatalf("%d poisoned events, want 0", n)
	}
}

// TestPoison: an event a handler always fails on (by error or by panic)
// goes to the poison queue after the retries; the handler goes on with the
// next events, and the poisoned message still carries the whole event.
func TestPoison(t *testing.T) {
	e := newEnv(t)
	ids := e.appendN(t, 10, 2, "p")
	var failing, panicking recorder
	stop := e.start(t, nil, map[string]Handler{
		"failing": failing.handler(func(_ context.Context, ev eventstore.RecordedEvent, _ int) error {
			if ev.ID == ids[3] {
				return errors.New("boom: cannot handle")
			}
			return nil
		}),
		"panicking": panicking.handler(func(_ context.Context, ev eventstore.RecordedEvent, _ int) error {
			if ev.ID == ids[5] {
				panic("kaboom")
			}
			return nil
		}),
	})
	waitFor(t, "other events handled", func() bool { return failing.count() >= 9 && panicking.count() >= 9 })
	waitFor(t, "poison rows", func() bool { return e.poisonCount(t) >= 2 })
	stop()

	all := e.all(t, 10)
	without := func(skip int) []uuid.UUID {
		var out []uuid.UUID
		for i, id := range ids {
			if i != skip {
				out = append(out, id)
			}
		}
		return out
	}
	equalIDs(t, "failing finished", failing.doneIDs(), without(3))
	equalIDs(t, "panicking finished", panicking.doneIDs(), without(5))
	if n := len(failing.callIDs()); n != 9+3 { // 1 try + 2 retries on the poisoned event
		t.Fatalf("failing handler called %d times, want 12", n)
	}

	rows, err := e.pool.Query(context.Background(), `SELECT v.handler, v.event_id, v.stream, v.type, v.error, v.failed_at, q.payload, q.metadata
		FROM processmanager_poison v JOIN watermill_processmanager_poison q USING ("offset") ORDER BY v.handler`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	type row struct {
		handler, eventID, stream, typ, reason string
		failedAt                              time.Time
		payload, metadata                     []byte
	}
	var got []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.handler, &r.eventID, &r.stream, &r.typ, &r.reason, &r.failedAt, &r.payload, &r.metadata); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d poison rows, want 2", len(got))
	}
	for i, want := range []struct {
		handler, reason string
		ev              eventstore.RecordedEvent
	}{{"failing", "boom: cannot handle", all[3]}, {"panicking", "kaboom", all[5]}} {
		r := got[i]
		if r.handler != want.handler || r.eventID != want.ev.ID.String() || r.stream != want.ev.StreamID ||
			r.typ != want.ev.Type || !strings.Contains(r.reason, want.reason) || r.failedAt.IsZero() {
			t.Fatalf("poison row %d = %+v, want handler %s, event %s, reason containing %q", i, r, want.handler, want.ev.ID, want.reason)
		}
		// The stored message is enough to rebuild the event (re-drive).
		msg := message.NewMessage(r.eventID, r.payload)
		if err := json.Unmarshal(r.metadata, &msg.Metadata); err != nil {
			t.Fatal(err)
		}
		ev, err := EventOf(msg)
		if err != nil {
			t.Fatal(err)
		}
		if !json.Valid(ev.Data) {
			t.Fatalf("poisoned payload is not the event data: %s", ev.Data)
		}
		ev.Data = want.ev.Data // json column may re-space; compare the rest exactly
		sameEvent(t, ev, want.ev)
	}
	for _, name := range []string{"failing", "panicking"} {
		if got := e.checkpoint(t, name); got != all[9].Position {
			t.Fatalf("%s checkpoint %v, want %v", name, got, all[9].Position)
		}
	}
}

// TestRestartResumesAfterCheckpoint: a router stopped in the middle of an
// event leaves the checkpoint just before it; the next router starts exactly
// there (nothing skipped, nothing already finished redelivered), and after a
// clean stop the following router redelivers nothing at all.
func TestRestartResumesAfterCheckpoint(t *testing.T) {
	e := newEnv(t)
	ids := e.appendN(t, 60, 5, "s")
	var first recorder
	blocked := make(chan struct{})
	stop := e.start(t, nil, map[string]Handler{"resumer": first.handler(func(ctx context.Context, ev eventstore.RecordedEvent, _ int) error {
		if ev.ID == ids[40] {
			select {
			case <-blocked:
			default:
				close(blocked)
			}
			<-ctx.Done() // a slow call interrupted by shutdown
			return ctx.Err()
		}
		return nil
	})})
	select {
	case <-blocked:
	case <-time.After(waitLimit):
		t.Fatal("handler did not reach event 40")
	}
	stop()
	equalIDs(t, "first run finished", first.doneIDs(), ids[:40])
	all := e.all(t, 60)
	if got := e.checkpoint(t, "resumer"); got != all[39].Position {
		t.Fatalf("checkpoint after stop %v, want %v (event 39)", got, all[39].Position)
	}

	var second recorder
	stop = e.start(t, nil, map[string]Handler{"resumer": second.handler(nil)})
	ids = append(ids, e.appendN(t, 20, 5, "t")...)
	waitFor(t, "second run", func() bool { return second.count() >= 40 })
	stop()
	equalIDs(t, "second run", second.doneIDs(), ids[40:80])

	var third recorder
	stop = e.start(t, nil, map[string]Handler{"resumer": third.handler(nil)})
	ids = append(ids, e.appendN(t, 1, 1, "u")...)
	waitFor(t, "third run", func() bool { return third.count() >= 1 })
	stop()
	equalIDs(t, "third run (after a clean stop)", third.callIDs(), ids[80:])
}

// TestOneInstancePerHandler: two routers on one database with the same
// handler name never run it concurrently and handle each event once; when
// the active one stops, the other takes over where it left off.
func TestOneInstancePerHandler(t *testing.T) {
	e := newEnv(t)
	var inflight, overlaps atomic.Int32
	var mu sync.Mutex
	by := map[uuid.UUID][]string{}
	handler := func(router string) Handler {
		return func(ctx context.Context, ev eventstore.RecordedEvent) error {
			if inflight.Add(1) > 1 {
				overlaps.Add(1)
			}
			defer inflight.Add(-1)
			time.Sleep(200 * time.Microsecond) // widen the window for overlaps
			mu.Lock()
			by[ev.ID] = append(by[ev.ID], router)
			mu.Unlock()
			return nil
		}
	}
	handled := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(by)
	}
	stops := map[string]func(){}
	for _, name := range []string{"A", "B"} {
		store := postgres.New(e.pool) // each "process" has its own store
		t.Cleanup(func() { store.Close() })
		stops[name] = e.start(t, store, map[string]Handler{"exclusive": handler(name)})
	}
	ids := e.appendN(t, 100, 6, "x")
	waitFor(t, "first batch", func() bool { return handled() >= 100 })

	mu.Lock()
	active := by[ids[0]][0]
	mu.Unlock()
	standby := map[string]string{"A": "B", "B": "A"}[active]
	stops[active]()
	ids = append(ids, e.appendN(t, 50, 6, "y")...)
	waitFor(t, "takeover", func() bool { return handled() >= 150 })
	stops[standby]()

	if n := overlaps.Load(); n != 0 {
		t.Fatalf("handler ran concurrently %d times", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(by) != len(ids) {
		t.Fatalf("%d events handled, want %d", len(by), len(ids))
	}
	for i, id := range ids {
		want := active
		if i >= 100 {
			want = standby
		}
		if got := by[id]; len(got) != 1 || got[0] != want {
			t.Fatalf("event %d handled by %v, want once by %s", i, got, want)
		}
	}
}

// TestLockConnectionLost: when the lock connection dies (its backend is
// terminated, as when the database drops the session) delivery stops, a new
// session takes the lock again and resumes from the checkpoint: events may be
// redelivered but none is skipped, and order holds from the resume point.
func TestLockConnectionLost(t *testing.T) {
	e := newEnv(t)
	ids := e.appendN(t, 50, 4, "k")
	var rec recorder
	release := make(chan struct{})
	stop := e.start(t, nil, map[string]Handler{"survivor": rec.handler(func(ctx context.Context, ev eventstore.RecordedEvent, _ int) error {
		if ev.ID == ids[25] {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})})
	waitFor(t, "first 25", func() bool { return rec.count() >= 25 })
	key := pglock.ProcessManager("survivor")
	tag, err := e.pool.Exec(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 1
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND classid = $1 AND objid = $2`, int64(uint32(uint64(key)>>32)), int64(uint32(key)))
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("terminate lock holder: %v (%d rows)", err, tag.RowsAffected())
	}
	close(release)
	ids = append(ids, e.appendN(t, 10, 4, "l")...)
	waitFor(t, "all events after the reconnect", func() bool {
		done := rec.doneIDs()
		return len(done) > 0 && done[len(done)-1] == ids[len(ids)-1]
	})
	stop()

	done := rec.doneIDs()
	seen := map[uuid.UUID]bool{}
	for _, id := range done {
		seen[id] = true
	}
	for i, id := range ids {
		if !seen[id] {
			t.Fatalf("event %d was skipped", i)
		}
	}
	// After the last event handled before the loss, a resumed run replays a
	// suffix of the log in order: the tail of done is the tail of ids.
	tail := done[len(done)-len(ids)+25:]
	equalIDs(t, "resumed tail", tail, ids[25:])
}

// TestEventOfRoundTrip: a message built from an event, stripped of its
// context, still yields the same event.
func TestEventOfRoundTrip(t *testing.T) {
	ev := eventstore.RecordedEvent{
		ID: uuid.New(), StreamID: "email-1", StreamRevision: 7,
		Position: eventstore.Position{Commit: 812, Prepare: 9001}, Type: "EmailQueued", SchemaVersion: 2,
		Data:       json.RawMessage(`{"a":1}`),
		Metadata:   eventstore.Metadata{CorrelationID: "c", CausationID: "d", Actor: "system:test", RequestID: "r"},
		RecordedAt: time.Date(2025, 1, 2, 3, 4, 5, 678901000, time.UTC), Hash: "abc",
	}
	msg := newMessage(context.Background(), ev)
	got, err := EventOf(msg)
	if err != nil {
		t.Fatal(err)
	}
	sameEvent(t, got, ev)
	bare := msg.Copy() // no context: rebuilt from metadata
	got, err = EventOf(bare)
	if err != nil {
		t.Fatal(err)
	}
	sameEvent(t, got, ev)
	if _, err := EventOf(message.NewMessage(uuid.NewString(), nil)); err == nil {
		t.Fatal("EventOf accepted a message without an event")
	}
}
