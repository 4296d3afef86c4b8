package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailroom/mailroom/internal/database"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/eventstore/contract"
	"github.com/mailroom/mailroom/internal/pglock"
	"github.com/mailroom/mailroom/internal/pgtest"
)

func newStore(t testing.TB, pool *pgxpool.Pool) *Store {
	s := New(pool)
	t.Cleanup(func() { s.Close() })
	return s
}

// TestContract runs the shared suite; all subtests share one database, as
// they would share one EventStoreDB server.
func TestContract(t *testing.T) {
	pool := pgtest.NewPool(t)
	contract.Run(t, func(t *testing.T) eventstore.Store { return newStore(t, pool) })
}

func testEvent(typ string) eventstore.EventData {
	return eventstore.EventData{
		ID: uuid.New(), Type: typ, SchemaVersion: 1,
		Data:     json.RawMessage(`{"type":"` + typ + `"}`),
		Metadata: eventstore.Metadata{Actor: "system:test"},
	}
}

func mustAppend(t testing.TB, s *Store, stream string, exp eventstore.ExpectedVersion, evs ...eventstore.EventData) eventstore.AppendResult {
	t.Helper()
	res, err := s.Append(context.Background(), stream, exp, evs...)
	if err != nil {
		t.Fatalf("append to %s: %v", stream, err)
	}
	return res
}

// waitVisible waits until ReadAll from Start returns n events. The horizon
// is cluster-wide, so unrelated transactions may delay visibility a little.
func waitVisible(t testing.TB, s *Store, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		evs, err := s.ReadAll(context.Background(), eventstore.Start, n+1)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == n {
			return
		}
		if len(evs) > n || time.Now().After(deadline) {
			t.Fatalf("$all has %d readable events, want %d", len(evs), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestReadAllTakesNoTransactionID guards the horizon: a reader that took a
// transaction id would hold the horizon back itself.
func TestReadAllTakesNoTransactionID(t *testing.T) {
	pool := pgtest.NewPool(t)
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	probe := func() bool {
		var xid *uint64
		if err := tx.QueryRow(ctx, "SELECT pg_current_xact_id_if_assigned()").Scan(&xid); err != nil {
			t.Fatal(err)
		}
		return xid != nil
	}
	rows, err := tx.Query(ctx, readAllSQL, uint64(0), int64(0), 10)
	if err != nil {
		t.Fatal(err)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if probe() {
		t.Fatal("the $all query assigned a transaction id")
	}
	if _, err := tx.Exec(ctx, "SELECT pg_current_xact_id()"); err != nil {
		t.Fatal(err)
	}
	if !probe() {
		t.Fatal("probe does not detect an assigned transaction id")
	}
}

// TestSubscriptionsShareOneConnection: more live subscriptions than the pool
// has connections all work, and closing them returns every connection.
func TestSubscriptionsShareOneConnection(t *testing.T) {
	pool := pgtest.NewPool(t)
	s := newStore(t, pool)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n := int(pool.Config().MaxConns) * 2
	var subs []eventstore.Subscription
	for i := 0; i < n; i++ {
		sub, err := s.SubscribeAll(ctx, eventstore.Start)
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, sub)
	}
	ev := testEvent("Live")
	mustAppend(t, s, "email-1", eventstore.NoStream, ev)
	for i, sub := range subs {
		e, err := sub.Next(ctx)
		if err != nil || e.ID != ev.ID {
			t.Fatalf("subscription %d: %v, %v", i, e.ID, err)
		}
	}
	for _, sub := range subs {
		sub.Close()
	}
	// pgxpool returns a connection whose wait was interrupted in the
	// background, so give it a moment.
	deadline := time.Now().Add(60 * time.Second)
	for pool.Stat().AcquiredConns() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := pool.Stat().AcquiredConns(); got != 0 {
		t.Fatalf("%d connections still acquired after closing every subscription", got)
	}
}

// TestAppendLocksStreamBeforeTakingTransactionID: an append waiting for its
// stream must not hold a transaction id yet, else a later append to the same
// stream could get a lower id and come before it in $all.
func TestAppendLocksStreamBeforeTakingTransactionID(t *testing.T) {
	// An append to an existing stream reads its head first; one to a new
	// stream sends the lock and the inserts at once.
	t.Run("Existing", func(t *testing.T) { testLocksFirst(t, eventstore.Exact(0)) })
	t.Run("New", func(t *testing.T) { testLocksFirst(t, eventstore.NoStream) })
}

func testLocksFirst(t *testing.T, exp eventstore.ExpectedVersion) {
	pool := pgtest.NewPool(t)
	s := newStore(t, pool)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if !exp.IsNoStream() {
		mustAppend(t, s, "email-1", eventstore.NoStream, testEvent("First"))
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, hashtext($2))", pglock.StreamClass, "email-1"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := s.Append(ctx, "email-1", exp, testEvent("Second"))
		done <- err
	}()
	for {
		var xids []*uint32
		rows, err := pool.Query(ctx, `SELECT backend_xid FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND wait_event = 'advisory'`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var x *uint32
			if err := rows.Scan(&x); err != nil {
				t.Fatal(err)
			}
			xids = append(xids, x)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if len(xids) == 1 {
			if xids[0] != nil {
				t.Fatalf("append waits for the stream lock holding transaction id %d", *xids[0])
			}
			break
		}
		select {
		case err := <-done:
			t.Fatalf("append finished while the stream lock was held: %v", err)
		case <-ctx.Done():
			t.Fatal("append never waited for the stream lock")
		case <-time.After(5 * time.Millisecond):
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("append after the lock was released: %v", err)
	}
}

// TestOutOfOrderCommit: a transaction that took its id first but commits
// last must hold back later transactions' events, then be delivered before
// them; nothing is skipped.
func TestOutOfOrderCommit(t *testing.T) {
	t.Run("SlowInsertsFirst", func(t *testing.T) { testOutOfOrder(t, false) })
	// The slow transaction's row gets a higher seq than the fast ones, yet it
	// is ordered first because its transaction id is lower.
	t.Run("SlowTakesXidFirstInsertsLast", func(t *testing.T) { testOutOfOrder(t, true) })
}

func testOutOfOrder(t *testing.T, lateInsert bool) {
	pool := pgtest.NewPool(t)
	s := newStore(t, pool)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	before := testEvent("Before")
	resBefore := mustAppend(t, s, "order-0", eventstore.NoStream, before)
	sub, err := s.SubscribeAll(ctx, eventstore.Start)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	next := func() eventstore.RecordedEvent {
		t.Helper()
		e, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("next: %v", err)
		}
		return e
	}
	if e := next(); e.ID != before.ID {
		t.Fatalf("first event %s, want %s", e.ID, before.ID)
	}

	slow, fast1, fast2 := testEvent("Slow"), testEvent("Fast1"), testEvent("Fast2")
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if lateInsert {
		if _, err := tx.Exec(ctx, "SELECT pg_current_xact_id()"); err != nil {
			t.Fatal(err)
		}
	} else if _, _, err := appendTx(ctx, tx, []eventstore.StreamAppend{{Stream: "order-slow", Expected: eventstore.NoStream, Events: []eventstore.EventData{slow}}}, false); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, "order-fast1", eventstore.NoStream, fast1)
	mustAppend(t, s, "order-fast2", eventstore.NoStream, fast2)
	if lateInsert {
		if _, _, err := appendTx(ctx, tx, []eventstore.StreamAppend{{Stream: "order-slow", Expected: eventstore.NoStream, Events: []eventstore.EventData{slow}}}, false); err != nil {
			t.Fatal(err)
		}
	}

	// The hazard is real: the fast events are committed and visible.
	var visible int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM events WHERE event_id = ANY($1)",
		[]uuid.UUID{fast1.ID, fast2.ID}).Scan(&visible); err != nil {
		t.Fatal(err)
	}
	if visible != 2 {
		t.Fatalf("%d fast events visible, want 2", visible)
	}
	// But they are behind the horizon while the slow transaction is open.
	if evs, err := s.ReadAll(ctx, resBefore.Position, 100); err != nil || len(evs) != 0 {
		t.Fatalf("ReadAll with an older transaction open: %d events, err %v; want none", len(evs), err)
	}
	wctx, wcancel := context.WithTimeout(ctx, 3*s.pollInterval)
	e, err := sub.Next(wctx)
	wcancel()
	if err == nil {
		t.Fatalf("subscriber delivered %s (%s) while an older transaction is open", e.Type, e.Position)
	}

	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got := []eventstore.RecordedEvent{next(), next(), next()}
	for i, want := range []eventstore.EventData{slow, fast1, fast2} {
		if got[i].ID != want.ID {
			t.Fatalf("after commit, event %d is %s, want %s", i, got[i].Type, want.Type)
		}
	}
	if !(got[0].Position.Commit < got[1].Position.Commit) {
		t.Fatalf("slow transaction id %d not below fast %d", got[0].Position.Commit, got[1].Position.Commit)
	}
	if lateInsert && !(got[0].Position.Prepare > got[2].Position.Prepare) {
		t.Fatalf("slow seq %d should be above fast seq %d in this case", got[0].Position.Prepare, got[2].Position.Prepare)
	}
	waitVisible(t, s, 4)
	all, err := s.ReadAll(ctx, resBefore.Position, 100)
	if err != nil {
		t.Fatal(err)
	}
	for i := range got {
		if all[i].ID != got[i].ID || all[i].Position != got[i].Position {
			t.Fatalf("ReadAll event %d is %s at %s, subscriber had %s at %s", i, all[i].Type, all[i].Position, got[i].Type, got[i].Position)
		}
	}
}

// CountAfter with a limit stops there: a readiness probe's lag check costs
// no more than its bound however far a projection is behind.
func TestCountAfterStopsAtLimit(t *testing.T) {
	s := newStore(t, pgtest.NewPool(t))
	evs := make([]eventstore.EventData, 30)
	for i := range evs {
		evs[i] = testEvent("Counted")
	}
	mustAppend(t, s, "count-1", eventstore.NoStream, evs...)
	waitVisible(t, s, 30)
	ctx := context.Background()
	for _, c := range []struct{ limit, want int64 }{{0, 30}, {10, 10}, {30, 30}, {31, 30}} {
		if n, err := s.CountAfter(ctx, eventstore.Start, c.limit); err != nil || n != c.want {
			t.Errorf("CountAfter limit %d: %d %v, want %d", c.limit, n, err, c.want)
		}
	}
	first, err := s.ReadAll(ctx, eventstore.Start, 1)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.CountAfter(ctx, first[0].Position, 100); err != nil || n != 29 {
		t.Errorf("CountAfter the first event: %d %v, want 29", n, err)
	}
}

// An append of new streams that finds one existing answers the conflict
// on the one connection it holds: with every connection of the pool held
// so (a restart's redelivered fan-outs all find their delivery streams),
// asking the pool for another would wait for ever.
func TestAppendFindingAStreamNeedsNoSecondConnection(t *testing.T) {
	ctx := context.Background()
	pool, err := database.Open(ctx, pgtest.NewURL(t)+"&pool_max_conns=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := database.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	s := newStore(t, pool)
	mustAppend(t, s, "delivery-x", eventstore.NoStream, testEvent("E"))

	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = s.AppendMany(ctx,
		eventstore.StreamAppend{Stream: "delivery-y", Expected: eventstore.NoStream, Events: []eventstore.EventData{testEvent("E")}},
		eventstore.StreamAppend{Stream: "delivery-x", Expected: eventstore.NoStream, Events: []eventstore.EventData{testEvent("E")}})
	var conflict *eventstore.ConflictError
	if !errors.As(err, &conflict) || conflict.Stream != "delivery-x" || conflict.Actual != 0 || !conflict.ActualExists {
		t.Fatalf("append finding delivery-x: %v, want its conflict", err)
	}
}
