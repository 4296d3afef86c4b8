package postgres

import (
	"context"
	"errors"
	"testing"

	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/pgtest"
)

// Two stores (two processes) append to one stream: an append at a head
// one of them remembers but the other moved on writes nothing and is a
// conflict naming the real head; appends at the remembered head of a
// stream just read go through, and the hash chain stays whole.
func TestAppendAtARememberedHead(t *testing.T) {
	pool := pgtest.NewPool(t)
	a, b := newStore(t, pool), newStore(t, pool)
	ctx := context.Background()

	mustAppend(t, a, "email-x", eventstore.NoStream, testEvent("E0"))
	mustAppend(t, b, "email-x", eventstore.Exact(0), testEvent("E1"))
	_, err := a.Append(ctx, "email-x", eventstore.Exact(0), testEvent("Stale"))
	var conflict *eventstore.ConflictError
	if !errors.As(err, &conflict) || conflict.Actual != 1 {
		t.Fatalf("append at a head another store moved: %v, want a conflict at revision 1", err)
	}
	mustAppend(t, a, "email-x", eventstore.Exact(1), testEvent("E2"))

	// Load, decide, append: the head read is the one appended at.
	evs, err := a.ReadStream(ctx, "email-x", 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 3 {
		t.Fatalf("stream has %d events, want 3 (the stale append wrote nothing)", len(evs))
	}
	if h, ok := a.heads.get("email-x"); !ok || h.revision != 2 || h.hash != evs[2].Hash {
		t.Fatalf("remembered head %+v (%v), want revision 2 with the last event's hash", h, ok)
	}
	res := mustAppend(t, a, "email-x", eventstore.Exact(2), testEvent("E3"), testEvent("E4"))
	if res.NextRevision != 4 {
		t.Fatalf("next revision %d, want 4", res.NextRevision)
	}
	var rev int64
	var hash string
	if err := pool.QueryRow(ctx, `SELECT last_revision, last_hash FROM streams WHERE stream_id = 'email-x'`).Scan(&rev, &hash); err != nil {
		t.Fatal(err)
	}
	if h, _ := a.heads.get("email-x"); rev != 4 || h.revision != 4 || h.hash != hash {
		t.Fatalf("stream head %d %s, remembered %+v", rev, hash, h)
	}
	waitVisible(t, a, 5)
	var breaks []eventstore.Break
	if _, _, err := eventstore.Verify(ctx, newStore(t, pool), func(br eventstore.Break) { breaks = append(breaks, br) }); err != nil {
		t.Fatal(err)
	}
	if len(breaks) != 0 {
		t.Fatalf("hash chain breaks: %v", breaks)
	}
	// The same append again is a conflict, and writes nothing.
	if _, err := a.Append(ctx, "email-x", eventstore.Exact(2), testEvent("Again")); !errors.As(err, &conflict) || conflict.Actual != 4 {
		t.Fatalf("repeated append: %v, want a conflict at revision 4", err)
	}
}
