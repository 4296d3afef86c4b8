package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/pgtest"
)

func part(stream string, exp eventstore.ExpectedVersion, n int) eventstore.StreamAppend {
	p := eventstore.StreamAppend{Stream: stream, Expected: exp}
	for range n {
		p.Events = append(p.Events, testEvent("Many"))
	}
	return p
}

// A conflict in a later part leaves the earlier parts unwritten: no events,
// no stream head, and a fresh append still finds the stream new.
func TestAppendManyAllOrNothing(t *testing.T) {
	pool := pgtest.NewPool(t)
	s := newStore(t, pool)
	ctx := context.Background()
	mustAppend(t, s, "email-b", eventstore.NoStream, testEvent("First"))

	_, err := s.AppendMany(ctx, part("email-a", eventstore.NoStream, 2), part("email-b", eventstore.Exact(3), 1))
	var c *eventstore.ConflictError
	if !errors.As(err, &c) || c.Stream != "email-b" {
		t.Fatalf("append many: %v, want a conflict on email-b", err)
	}
	if _, err := s.ReadStream(ctx, "email-a", 0, 10); !errors.Is(err, eventstore.ErrStreamNotFound) {
		t.Fatalf("email-a after the refused append: %v, want not found", err)
	}
	var heads, events int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM streams WHERE stream_id = 'email-a'),
		(SELECT count(*) FROM events WHERE stream_id IN ('email-a', 'email-b'))`).Scan(&heads, &events); err != nil {
		t.Fatal(err)
	}
	if heads != 0 || events != 1 {
		t.Fatalf("after the refused append: %d heads for email-a and %d events, want 0 and 1", heads, events)
	}
	mustAppend(t, s, "email-a", eventstore.NoStream, testEvent("First"))
}

// Appends over the same streams named in opposite orders take the stream
// locks in one order, so they never deadlock: every append succeeds.
func TestAppendManyOppositeOrdersDoNotDeadlock(t *testing.T) {
	pool := pgtest.NewPool(t)
	s := newStore(t, pool)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const writers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				parts := []eventstore.StreamAppend{part("email-x", eventstore.Any, 1), part("email-y", eventstore.Any, 2)}
				if w%2 == 1 {
					parts[0], parts[1] = parts[1], parts[0]
				}
				if _, err := s.AppendMany(ctx, parts...); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("append many: %v", err)
	}
	for st, n := range map[string]int{"email-x": writers * each, "email-y": 2 * writers * each} {
		evs, err := s.ReadStream(ctx, st, 0, 10000)
		if err != nil || len(evs) != n {
			t.Fatalf("%s: %d events (%v), want %d", st, len(evs), err, n)
		}
	}
}

// Under concurrent appends to several streams at once, $all orders each
// stream's events by revision, with an intact hash chain: a stream's lock is
// taken before its transaction has an id.
func TestAppendManyAllOrderIsRevisionOrder(t *testing.T) {
	pool := pgtest.NewPool(t)
	s := newStore(t, pool)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const writers, each, streams = 8, 40, 6
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range each {
				// Two or three distinct streams, in no particular order.
				a, b, c := (w+j)%streams, (w+2*j+1)%streams, (3*w+j+2)%streams
				parts := []eventstore.StreamAppend{part(fmt.Sprintf("email-%d", a), eventstore.Any, 1+j%2)}
				if b != a {
					parts = append(parts, part(fmt.Sprintf("email-%d", b), eventstore.Any, 1))
				}
				if c != a && c != b {
					parts = append(parts, part(fmt.Sprintf("email-%d", c), eventstore.Any, 2))
				}
				if _, err := s.AppendMany(ctx, parts...); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("append many: %v", err)
	}
	var total int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM events").Scan(&total); err != nil {
		t.Fatal(err)
	}
	waitVisible(t, s, total)
	all, err := s.ReadAll(ctx, eventstore.Start, total)
	if err != nil {
		t.Fatal(err)
	}
	next := map[string]uint64{}
	prev := map[string]string{}
	for i, e := range all {
		if i > 0 && !all[i-1].Position.Less(e.Position) {
			t.Fatalf("$all: %s after %s", e.Position, all[i-1].Position)
		}
		if e.StreamRevision != next[e.StreamID] {
			t.Fatalf("$all: %s@%d where revision %d was next", e.StreamID, e.StreamRevision, next[e.StreamID])
		}
		if e.Hash != e.Recomputed(prev[e.StreamID]) {
			t.Fatalf("%s@%d: hash chain broken", e.StreamID, e.StreamRevision)
		}
		next[e.StreamID]++
		prev[e.StreamID] = e.Hash
	}
}
