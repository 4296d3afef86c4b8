package postgres

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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
	// Without the window every call would be a query. With it, readers at
	// the head wait for one shared query, and pages behind the head come
	// from memory. Calls are counted rather than events, as a slow machine
	// makes more empty polls at the head while the writers lag.
	if q, c := queries.Load(), calls.Load(); q*2 >= c {
		t.Errorf("%d queries for %d calls of %d readers: the readers did not share them", q, c, readers)
	}
}

// TestReaderBehindTheWindowReadsTheStore: a reader older than the window
// (a rebuild, a lagging projector) gets its events from the database.
func TestReaderBehindTheWindowReadsTheStore(t *testing.T) {
	pool := pgtest.NewPool(t)
	s := newStore(t, pool)
	s.recent = newRecentLog(5)
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
