package contract

import (
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/internal/eventstore"
)

func appendMany(t *testing.T, s eventstore.Store, parts ...eventstore.StreamAppend) []eventstore.AppendResult {
	t.Helper()
	res, err := s.AppendMany(testContext(t), parts...)
	if err != nil {
		t.Fatalf("append many: %v", err)
	}
	if len(res) != len(parts) {
		t.Fatalf("append many of %d parts: %d results", len(parts), len(res))
	}
	return res
}

// testAppendMany appends to new and existing streams at once, in an order
// that is not sorted: each result belongs to the part at the same index and
// names its stream's last revision and the last event's position, as
// reading the stream and $all back shows; each stream's hash chain runs on
// from the events it had.
func testAppendMany(t *testing.T, s eventstore.Store) {
	cat := category(t)
	a, b, c := cat+"-a", cat+"-b", cat+"-c"
	mustAppend(t, s, b, eventstore.NoStream, event("E", `{"n":0}`), event("E", `{"n":1}`))
	mustAppend(t, s, c, eventstore.NoStream, event("E", `{"n":0}`))
	marker := mustAppend(t, s, cat+"-marker", eventstore.Any, event("Marker", `{}`))

	parts := []eventstore.StreamAppend{
		{Stream: c, Expected: eventstore.Any, Events: []eventstore.EventData{event("E", `{"n":1}`)}},
		{Stream: a, Expected: eventstore.NoStream, Events: []eventstore.EventData{event("E", `{"n":0}`), event("E", `{"n":1}`)}},
		{Stream: b, Expected: eventstore.Exact(1), Events: []eventstore.EventData{event("E", `{"n":2}`), event("E", `{"n":3}`), event("E", `{"n":4}`)}},
	}
	res := appendMany(t, s, parts...)
	wantRev := []uint64{1, 1, 4}
	for i, p := range parts {
		if res[i].NextRevision != wantRev[i] {
			t.Fatalf("part %d (%s): next revision %d, want %d", i, p.Stream, res[i].NextRevision, wantRev[i])
		}
		evs := mustReadStream(t, s, p.Stream)
		if uint64(len(evs)) != wantRev[i]+1 {
			t.Fatalf("%s has %d events, want %d", p.Stream, len(evs), wantRev[i]+1)
		}
		tail := evs[len(evs)-len(p.Events):]
		for j, e := range tail {
			if e.ID != p.Events[j].ID {
				t.Fatalf("%s@%d is %s, want %s", p.Stream, e.StreamRevision, e.ID, p.Events[j].ID)
			}
		}
		if last := tail[len(tail)-1]; last.Position != res[i].Position {
			t.Fatalf("part %d (%s): result position %s, last event at %s", i, p.Stream, res[i].Position, last.Position)
		}
		prev := ""
		for _, e := range evs {
			if e.Hash != e.Recomputed(prev) {
				t.Fatalf("%s@%d: hash chain broken", p.Stream, e.StreamRevision)
			}
			prev = e.Hash
		}
	}

	// $all holds the six events, each stream's in revision order, at the
	// positions the stream reads give.
	all := readAllOwn(t, s, marker.Position, cat, 6, 1000)
	next := map[string]uint64{a: 0, b: 2, c: 1}
	for _, e := range all {
		if e.StreamRevision != next[e.StreamID] {
			t.Fatalf("$all has %s@%d, want revision %d next", e.StreamID, e.StreamRevision, next[e.StreamID])
		}
		next[e.StreamID]++
	}
	byID := map[uuid.UUID]eventstore.Position{}
	for _, e := range all {
		byID[e.ID] = e.Position
	}
	for _, p := range parts {
		for _, e := range mustReadStream(t, s, p.Stream) {
			if pos, ok := byID[e.ID]; ok && pos != e.Position {
				t.Fatalf("%s@%d: stream read position %s, $all position %s", p.Stream, e.StreamRevision, e.Position, pos)
			}
		}
	}
}

// testAppendManyConflict: a part whose expected version does not hold fails
// the append with a *ConflictError naming that part's stream, whichever
// part it is.
func testAppendManyConflict(t *testing.T, s eventstore.Store) {
	cat := category(t)
	a, b := cat+"-a", cat+"-b"
	mustAppend(t, s, b, eventstore.NoStream, event("E", `{"n":0}`))
	one := func() []eventstore.EventData { return []eventstore.EventData{event("E", `{}`)} }

	_, err := s.AppendMany(testContext(t),
		eventstore.StreamAppend{Stream: a, Expected: eventstore.NoStream, Events: one()},
		eventstore.StreamAppend{Stream: b, Expected: eventstore.Exact(5), Events: one()})
	wantConflict(t, err, b, eventstore.Exact(5), 0, true)

	_, err = s.AppendMany(testContext(t),
		eventstore.StreamAppend{Stream: b, Expected: eventstore.NoStream, Events: one()},
		eventstore.StreamAppend{Stream: cat + "-c", Expected: eventstore.Any, Events: one()})
	wantConflict(t, err, b, eventstore.NoStream, 0, true)

	_, err = s.AppendMany(testContext(t),
		eventstore.StreamAppend{Stream: cat + "-d", Expected: eventstore.StreamExists, Events: one()})
	var c *eventstore.ConflictError
	if !errors.As(err, &c) || c.Stream != cat+"-d" || c.ActualExists {
		t.Fatalf("append many to a missing stream expecting it to exist: %v", err)
	}

	// b took none of the refused events.
	if evs := mustReadStream(t, s, b); len(evs) != 1 {
		t.Fatalf("%s has %d events after refused appends, want 1", b, len(evs))
	}
}

// testAppendManyRefusesBadParts: a part no store could write (no events,
// a stream named twice, data that is not JSON) refuses the whole append
// before any part is written, also where appends of several streams are
// not atomic.
func testAppendManyRefusesBadParts(t *testing.T, s eventstore.Store) {
	cat := category(t)
	good := eventstore.StreamAppend{Stream: cat + "-good", Expected: eventstore.NoStream,
		Events: []eventstore.EventData{event("E", `{}`)}}
	for name, bad := range map[string]eventstore.StreamAppend{
		"no events":    {Stream: cat + "-empty", Expected: eventstore.Any},
		"named twice":  {Stream: good.Stream, Expected: eventstore.Any, Events: []eventstore.EventData{event("E", `{}`)}},
		"not JSON":     {Stream: cat + "-bad", Expected: eventstore.Any, Events: []eventstore.EventData{event("E", `{`)}},
		"without type": {Stream: cat + "-untyped", Expected: eventstore.Any, Events: []eventstore.EventData{event("", `{}`)}},
	} {
		if _, err := s.AppendMany(testContext(t), good, bad); err == nil {
			t.Fatalf("%s: append many succeeded", name)
		}
		if _, err := s.ReadStream(testContext(t), good.Stream, 0, 10); !errors.Is(err, eventstore.ErrStreamNotFound) {
			t.Fatalf("%s: the good part was written before the bad one was refused (read: %v)", name, err)
		}
	}
}
