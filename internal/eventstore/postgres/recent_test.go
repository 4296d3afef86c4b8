package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/pgtest"
)

// TestReadersFollowingTheHeadSeeTheWholeLog: readers that follow $all in
// small pages while writers append concurrently (transactions committing
// out of order) each see every event once, in the order a single read of
// the finished log gives, though most pages come from the shared window.
func TestReadersFollowingTheHeadSeeTheWholeLog(t *testing.T) {
	pool := pgtest.NewPool(t)
	s := newStore(t, pool)
	ctx := context.Background()
	const writers, perWriter, readers = 6, 60, 8

	var calls, queries atomic.Int64
	query := s.readAll
	read := func(ctx context.Context, from eventstore.Position, max int) ([]eventstore.RecordedEvent, error) {
		calls.Add(1)
		return s.recent.read(ctx, from, max, func(ctx context.Context, from eventstore.Position, max int) ([]eventstore.RecordedEvent, error) {
			queries.Add(1)
			return query(ctx, from, max)
		})
	}

	got := make([][]eventstore.RecordedEvent, readers)
	var rg sync.WaitGroup
	for r := range readers {
		rg.Add(1)
		go func() {
			defer rg.Done()
			pos := eventstore.Start
			deadline := time.Now().Add(60 * time.Second)
			for len(got[r]) < writers*perWriter && time.Now().Before(deadline) {
				evs, err := read(ctx, pos, 1+r%4) // pages of 1 to 4 events
				if err != nil {
					t.Error(err)
					return
				}
				if len(evs) == 0 {
					time.Sleep(time.Millisecond)
					continue
				}
				got[r] = append(got[r], evs...)
				pos = evs[len(evs)-1].Position
			}
		}()
	}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWriter {
				if _, err := s.Append(ctx, fmt.Sprintf("email-w%d-%d", w, i), eventstore.NoStream, testEvent("E")); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	rg.Wait()
	if t.Failed() {
		return
	}

	want, err := s.readAll(ctx, eventstore.Start, writers*perWriter+1)
	if err != nil {
		t.Fatal(err)
	}
	if len(want) != writers*perWriter {
		t.Fatalf("the log has %d events, want %d", len(want), writers*perWriter)
	}
	for r, evs := range got {
		if len(evs) != len(want) {
			t.Fatalf("reader %d saw %d events, want %d", r, len(evs), len(want))
		}
		for i := range want {
			if evs[i].ID != want[i].ID || evs[i].Position != want[i].Position {
				t.Fatalf("reader %d: event %d is %s at %s, want %s at %s", r, i, evs[i].ID, evs[i].Position, want[i].ID, want[i].Position)
			}
		}
	}
	// How many of the calls the window answered from memory is not checked
	// here: it depends on how the readers, the writers and the database
	// interleave (readers that reach the head one at a time each need a
	// query of their own), which a loaded machine changes. The sharing is
	// checked without timing by TestReadersAtTheHeadShareOneQuery.
	t.Logf("%d queries for %d calls of %d readers", queries.Load(), calls.Load(), readers)
}

// TestReadersAtTheHeadShareOneQuery: readers that ask for news while a
// query from the window's end is in flight all wait for one next query,
// rather than each running its own; readers behind the head are answered
// from memory. The store is a fake log inside a synctest bubble, so the test
// knows when every reader is waiting, however slow the machine.
func TestReadersAtTheHeadShareOneQuery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		var (
			mu      sync.Mutex
			log     []eventstore.RecordedEvent
			queries int
		)
		hold := make(chan struct{}) // holds the query that is numbered held
		held := -1
		query := func(ctx context.Context, from eventstore.Position, max int) ([]eventstore.RecordedEvent, error) {
			mu.Lock()
			queries++
			n := queries
			mu.Unlock()
			if n == held {
				<-hold
			}
			mu.Lock()
			defer mu.Unlock()
			var out []eventstore.RecordedEvent
			for _, e := range log {
				if from.Less(e.Position) && len(out) < max {
					out = append(out, e)
				}
			}
			return out, nil
		}
		appendFake := func(n int) {
			mu.Lock()
			defer mu.Unlock()
			for range n {
				log = append(log, eventstore.RecordedEvent{ID: uuid.New(), Type: "E", Position: eventstore.Position{Commit: uint64(len(log) + 1)}})
			}
		}
		count := func() int { mu.Lock(); defer mu.Unlock(); return queries }

		w := newRecentLog(recentEvents, recentBytes)
		if _, err := w.read(ctx, eventstore.Start, 10, query); err != nil { // a reader at the head opens the window
			t.Fatal(err)
		}
		appendFake(3)

		// The first reader's query is held; seven more readers ask while it
		// is in flight.
		const readers = 8
		got := make([][]eventstore.RecordedEvent, readers)
		read := func(r int) {
			evs, err := w.read(ctx, eventstore.Start, 10, query)
			if err != nil {
				t.Error(err)
			}
			got[r] = evs
		}
		held = count() + 1
		var wg sync.WaitGroup
		wg.Go(func() { read(0) })
		synctest.Wait()
		for r := 1; r < readers; r++ {
			wg.Go(func() { read(r) })
		}
		synctest.Wait() // every reader waits, the first for its query
		before := count()
		close(hold)
		wg.Wait()
		if q := count() - before; q != 1 {
			t.Errorf("%d readers that asked while a query was in flight ran %d queries after it, want 1", readers-1, q)
		}
		for r, evs := range got {
			if len(evs) != 3 {
				t.Errorf("reader %d read %d events, want 3", r, len(evs))
			}
		}

		// Readers behind the head are answered from memory.
		appendFake(20)
		if _, err := w.read(ctx, eventstore.Start, 100, query); err != nil { // one reader brings the news
			t.Fatal(err)
		}
		before = count()
		for r := range readers {
			pos := eventstore.Start
			for range 23 / (1 + r%4) {
				evs, err := w.read(ctx, pos, 1+r%4, query)
				if err != nil {
					t.Fatal(err)
				}
				pos = evs[len(evs)-1].Position
			}
		}
		if q := count() - before; q != 0 {
			t.Errorf("readers behind the head ran %d queries, want none", q)
		}
	})
}

// TestReaderBehindTheWindowReadsTheStore: a reader older than the window
// (a rebuild, a lagging projector) gets its events from the database.
func TestReaderBehindTheWindowReadsTheStore(t *testing.T) {
	pool := pgtest.NewPool(t)
	s := newStore(t, pool)
	s.recent = newRecentLog(5, recentBytes)
	ctx := context.Background()
	for i := range 20 {
		mustAppend(t, s, fmt.Sprintf("email-%d", i), eventstore.NoStream, testEvent("E"))
	}
	waitVisible(t, s, 20)
	// Follow the head so the window holds only the last 5 events.
	pos := eventstore.Start
	for {
		evs, err := s.ReadAll(ctx, pos, 3)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			break
		}
		pos = evs[len(evs)-1].Position
	}
	all, err := s.ReadAll(ctx, eventstore.Start, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 20 {
		t.Fatalf("a read from the start got %d events, want 20", len(all))
	}
	if n := len(s.recent.evs); n > 5+5/2 {
		t.Fatalf("the window holds %d events, more than its limit of 5 and half as many again", n)
	}
}

// TestTheWindowKeepsLargeEventsWithinItsBytes: a reader following the head
// through a burst of large events (long recipient lists, sealed) leaves the
// window holding at most its byte bound and half as much again, not the
// last 20,000 events whatever their size, so every process stays within its
// memory goal. It still holds the newest events for the readers near the head.
func TestTheWindowKeepsLargeEventsWithinItsBytes(t *testing.T) {
	pool := pgtest.NewPool(t)
	s := newStore(t, pool)
	ctx := context.Background()
	if _, err := s.ReadAll(ctx, eventstore.Start, 256); err != nil { // a reader at the head opens the window
		t.Fatal(err)
	}
	const n = 600 // 37.5 MiB in all
	appendLarge(t, s, "big", n)
	pos := followTheHead(t, s, eventstore.Start, n)

	w := s.recent
	w.mu.Lock()
	defer w.mu.Unlock()
	held := 0
	for _, e := range w.evs {
		held += eventSize(e)
	}
	if held != w.bytes {
		t.Errorf("the window counts %d bytes for events of %d", w.bytes, held)
	}
	if limit := recentBytes + recentBytes/2; held > limit {
		t.Errorf("the window holds %d events of %d MiB, more than its %d MiB and half as much again", len(w.evs), held>>20, recentBytes>>20)
	}
	if !w.live || w.top() != pos || held < recentBytes/2 {
		t.Errorf("the window (live %v, %d MiB up to %s) does not hold the newest events up to %s", w.live, held>>20, w.top(), pos)
	}
}

// TestReadersAtTheHeadShareOneReadOfLargeEvents: where the window holds
// large events, the query from its end asks for no more than half its
// bytes, so a burst larger than the window does not push its events out
// before the readers waiting for them are served: the second reader at the
// head is answered from memory.
func TestReadersAtTheHeadShareOneReadOfLargeEvents(t *testing.T) {
	pool := pgtest.NewPool(t)
	s := newStore(t, pool)
	ctx := context.Background()
	if _, err := s.ReadAll(ctx, eventstore.Start, 256); err != nil { // a reader at the head opens the window
		t.Fatal(err)
	}
	appendLarge(t, s, "before", 200)
	pos := followTheHead(t, s, eventstore.Start, 200)
	appendLarge(t, s, "burst", 300) // 18.75 MiB, more than the window keeps
	for deadline := time.Now().Add(60 * time.Second); ; {
		evs, err := s.readAll(ctx, pos, 301) // the store itself, not the window
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 300 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of the burst's 300 events are readable", len(evs))
		}
	}

	var queries int
	query := func(ctx context.Context, from eventstore.Position, max int) ([]eventstore.RecordedEvent, error) {
		queries++
		return s.readAll(ctx, from, max)
	}
	first, err := s.recent.read(ctx, pos, 100, query)
	if err != nil {
		t.Fatal(err)
	}
	before := queries
	second, err := s.recent.read(ctx, pos, 100, query)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 100 || len(second) != 100 || first[0].ID != second[0].ID || first[99].ID != second[99].ID {
		t.Fatalf("two readers at the same position read %d and %d events, not the same ones", len(first), len(second))
	}
	if queries != before {
		t.Errorf("the second reader at the head queried the store (%d queries): the window had already dropped what the first one read", queries-before)
	}
}

// appendLarge appends n events of 64 KiB each, ten to a stream, as a burst
// of large emails does.
func appendLarge(t *testing.T, s *Store, prefix string, n int) {
	t.Helper()
	big := json.RawMessage(`{"pad":"` + strings.Repeat("x", 64<<10) + `"}`)
	for i := 0; i < n; i += 10 {
		evs := make([]eventstore.EventData, 10)
		for j := range evs {
			evs[j] = eventstore.EventData{ID: uuid.New(), Type: "Big", SchemaVersion: 1, Data: big}
		}
		mustAppend(t, s, fmt.Sprintf("%s-%d", prefix, i), eventstore.NoStream, evs...)
	}
}

// followTheHead reads n events after from in pages of 256, as a
// subscription does, and returns the position of the last.
func followTheHead(t *testing.T, s *Store, from eventstore.Position, n int) eventstore.Position {
	t.Helper()
	seen := 0
	for deadline := time.Now().Add(60 * time.Second); seen < n; {
		evs, err := s.ReadAll(context.Background(), from, 256)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 && time.Now().After(deadline) {
			t.Fatalf("read %d of %d events", seen, n)
		}
		if len(evs) == 0 {
			time.Sleep(time.Millisecond)
			continue
		}
		seen += len(evs)
		from = evs[len(evs)-1].Position
	}
	return from
}
