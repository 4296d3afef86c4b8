// Package contract is the event store contract suite. Every adapter of
// eventstore.Store runs it unchanged from its own tests:
//
//	contract.Run(t, func(t *testing.T) eventstore.Store { ... })
//
// The suite does not assume an empty log: each subtest writes to streams of
// its own random category and ignores other events, so newStore may return
// stores sharing one database or server (as an EventStoreDB adapter would).
// newStore is responsible for closing what it creates (t.Cleanup).
package contract

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/internal/eventstore"
)

// waitFor bounds every wait for something that must happen. It is generous:
// the suite never passes or fails on timing, it only gives up.
const waitFor = 60 * time.Second

// Run runs the whole contract.
func Run(t *testing.T, newStore func(t *testing.T) eventstore.Store) {
	t.Run("ExpectedVersion", func(t *testing.T) { testExpectedVersion(t, newStore(t)) })
	t.Run("ReadStream", func(t *testing.T) { testReadStream(t, newStore(t)) })
	t.Run("ReadStreamNotFound", func(t *testing.T) { testReadStreamNotFound(t, newStore(t)) })
	t.Run("RoundTrip", func(t *testing.T) { testRoundTrip(t, newStore(t)) })
	t.Run("ReadAllOrderAndPaging", func(t *testing.T) { testReadAllPaging(t, newStore(t)) })
	t.Run("HashChain", func(t *testing.T) { testHashChain(t, newStore(t)) })
	t.Run("SubscribeCatchUpThenLive", func(t *testing.T) { testSubscribeCatchUpLive(t, newStore(t)) })
	t.Run("SubscribeFromPosition", func(t *testing.T) { testSubscribeFromPosition(t, newStore(t)) })
	t.Run("SubscriptionClose", func(t *testing.T) { testSubscriptionClose(t, newStore(t)) })
	t.Run("ConcurrentExactAppendsOneWins", func(t *testing.T) { testConcurrentExact(t, newStore(t)) })
	t.Run("ConcurrentAppendsWithSubscriber", func(t *testing.T) { testConcurrentSubscriber(t, newStore(t)) })
	t.Run("AppendMany", func(t *testing.T) { testAppendMany(t, newStore(t)) })
	t.Run("AppendManyConflict", func(t *testing.T) { testAppendManyConflict(t, newStore(t)) })
	t.Run("AppendManyRefusesBadParts", func(t *testing.T) { testAppendManyRefusesBadParts(t, newStore(t)) })
	t.Run("CountAfterUpToABound", func(t *testing.T) { testCountAfter(t, newStore(t)) })
}

// ---- helpers ----

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	t.Cleanup(cancel)
	return ctx
}

// category returns a fresh stream category; streams are category+"-"+id.
func category(t *testing.T) string {
	b := make([]byte, 5)
	rand.Read(b)
	return "ct" + hex.EncodeToString(b)
}

func own(cat string, e eventstore.RecordedEvent) bool {
	return strings.HasPrefix(e.StreamID, cat+"-")
}

func event(typ string, data string) eventstore.EventData {
	return eventstore.EventData{
		ID:            uuid.New(),
		Type:          typ,
		SchemaVersion: 1,
		Data:          json.RawMessage(data),
		Metadata:      eventstore.Metadata{CorrelationID: "corr", Actor: "system:contract"},
	}
}

func mustAppend(t *testing.T, s eventstore.Store, stream string, exp eventstore.ExpectedVersion, evs ...eventstore.EventData) eventstore.AppendResult {
	t.Helper()
	res, err := s.Append(testContext(t), stream, exp, evs...)
	if err != nil {
		t.Fatalf("append to %s (%s): %v", stream, exp, err)
	}
	return res
}

func mustReadStream(t *testing.T, s eventstore.Store, stream string) []eventstore.RecordedEvent {
	t.Helper()
	evs, err := s.ReadStream(testContext(t), stream, 0, 10000)
	if err != nil {
		t.Fatalf("read %s: %v", stream, err)
	}
	return evs
}

func wantConflict(t *testing.T, err error, stream string, exp eventstore.ExpectedVersion, actual uint64, exists bool) {
	t.Helper()
	var c *eventstore.ConflictError
	if !errors.As(err, &c) {
		t.Fatalf("append to %s (%s): want *ConflictError, got %v", stream, exp, err)
	}
	if !eventstore.IsConflict(err) {
		t.Fatalf("IsConflict(%v) = false", err)
	}
	if c.Stream != stream || c.Expected != exp || c.ActualExists != exists || (exists && c.Actual != actual) {
		t.Fatalf("conflict = %+v, want stream %s expected %s actual %d exists %v", *c, stream, exp, actual, exists)
	}
}

// readAllOwn pages through $all after from, page events at a time, until it
// has seen want events of category cat. It checks every page is ordered,
// bounded by page, and strictly after the previous one.
func readAllOwn(t *testing.T, s eventstore.Store, from eventstore.Position, cat string, want, page int) []eventstore.RecordedEvent {
	t.Helper()
	ctx := testContext(t)
	var got []eventstore.RecordedEvent
	pos := from
	for len(got) < want {
		evs, err := s.ReadAll(ctx, pos, page)
		if err != nil {
			t.Fatalf("read $all from %s: %v (have %d of %d events)", pos, err, len(got), want)
		}
		if len(evs) > page {
			t.Fatalf("read $all max %d returned %d events", page, len(evs))
		}
		if len(evs) == 0 {
			// The tail may not be readable yet (e.g. behind a transaction
			// horizon); wait a little and ask again.
			select {
			case <-ctx.Done():
				t.Fatalf("read $all: saw %d of %d events before giving up", len(got), want)
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		for _, e := range evs {
			if !pos.Less(e.Position) {
				t.Fatalf("read $all from %s: event at %s is not after it", pos, e.Position)
			}
			pos = e.Position
			if own(cat, e) {
				got = append(got, e)
			}
		}
	}
	return got
}

// nextOwn returns the next event of category cat from sub, checking that
// every event (own or not) comes strictly after *last.
func nextOwn(t *testing.T, ctx context.Context, sub eventstore.Subscription, cat string, last *eventstore.Position) eventstore.RecordedEvent {
	t.Helper()
	for {
		e, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("subscription next: %v", err)
		}
		if !last.Less(e.Position) {
			t.Fatalf("subscription delivered %s after %s", e.Position, *last)
		}
		*last = e.Position
		if own(cat, e) {
			return e
		}
	}
}

func ids(evs []eventstore.RecordedEvent) []uuid.UUID {
	out := make([]uuid.UUID, len(evs))
	for i, e := range evs {
		out[i] = e.ID
	}
	return out
}

func sameIDs(t *testing.T, what string, got []eventstore.RecordedEvent, want []uuid.UUID) {
	t.Helper()
	g := ids(got)
	if fmt.Sprint(g) != fmt.Sprint(want) {
		t.Fatalf("%s: got ids %v, want %v", what, g, want)
	}
}

// ---- subtests ----

func testExpectedVersion(t *testing.T, s eventstore.Store) {
	cat := category(t)
	ctx := testContext(t)
	n := 0
	fresh := func() string { n++; return fmt.Sprintf("%s-%d", cat, n) }
	existing := func() string { // a stream with exactly one event (revision 0)
		st := fresh()
		mustAppend(t, s, st, eventstore.NoStream, event("Created", `{}`))
		return st
	}

	t.Run("AnyOnNew", func(t *testing.T) {
		if res := mustAppend(t, s, fresh(), eventstore.Any, event("E", `{}`)); res.NextRevision != 0 {
			t.Fatalf("next revision %d, want 0", res.NextRevision)
		}
	})
	t.Run("AnyOnExisting", func(t *testing.T) {
		if res := mustAppend(t, s, existing(), eventstore.Any, event("E", `{}`)); res.NextRevision != 1 {
			t.Fatalf("next revision %d, want 1", res.NextRevision)
		}
	})
	t.Run("NoStreamOnNew", func(t *testing.T) {
		if res := mustAppend(t, s, fresh(), eventstore.NoStream, event("E", `{}`)); res.NextRevision != 0 {
			t.Fatalf("next revision %d, want 0", res.NextRevision)
		}
	})
	t.Run("NoStreamOnExisting", func(t *testing.T) {
		st := existing()
		_, err := s.Append(ctx, st, eventstore.NoStream, event("E", `{}`))
		wantConflict(t, err, st, eventstore.NoStream, 0, true)
		if evs := mustReadStream(t, s, st); len(evs) != 1 {
			t.Fatalf("a rejected append wrote: stream has %d events", len(evs))
		}
	})
	t.Run("ExistsOnNew", func(t *testing.T) {
		st := fresh()
		_, err := s.Append(ctx, st, eventstore.StreamExists, event("E", `{}`))
		wantConflict(t, err, st, eventstore.StreamExists, 0, false)
		if _, err := s.ReadStream(ctx, st, 0, 10); !errors.Is(err, eventstore.ErrStreamNotFound) {
			t.Fatalf("a rejected append created the stream: read err %v", err)
		}
	})
	t.Run("ExistsOnExisting", func(t *testing.T) {
		if res := mustAppend(t, s, existing(), eventstore.StreamExists, event("E", `{}`)); res.NextRevision != 1 {
			t.Fatalf("next revision %d, want 1", res.NextRevision)
		}
	})
	t.Run("ExactRight", func(t *testing.T) {
		st := existing()
		res := mustAppend(t, s, st, eventstore.Exact(0), event("E", `{}`), event("E", `{}`))
		if res.NextRevision != 2 {
			t.Fatalf("next revision %d, want 2", res.NextRevision)
		}
		if res := mustAppend(t, s, st, eventstore.Exact(2), event("E", `{}`)); res.NextRevision != 3 {
			t.Fatalf("next revision %d, want 3", res.NextRevision)
		}
	})
	t.Run("ExactWrong", func(t *testing.T) {
		st := existing()
		for _, rev := range []uint64{1, 5} {
			_, err := s.Append(ctx, st, eventstore.Exact(rev), event("E", `{}`))
			wantConflict(t, err, st, eventstore.Exact(rev), 0, true)
		}
		mustAppend(t, s, st, eventstore.Any, event("E", `{}`))
		_, err := s.Append(ctx, st, eventstore.Exact(0), event("E", `{}`))
		wantConflict(t, err, st, eventstore.Exact(0), 1, true)
		if evs := mustReadStream(t, s, st); len(evs) != 2 {
			t.Fatalf("stream has %d events, want 2", len(evs))
		}
	})
	t.Run("ExactOnNew", func(t *testing.T) {
		st := fresh()
		_, err := s.Append(ctx, st, eventstore.Exact(0), event("E", `{}`))
		wantConflict(t, err, st, eventstore.Exact(0), 0, false)
	})
	t.Run("NoEventsOnlyChecks", func(t *testing.T) {
		st := existing()
		if _, err := s.Append(ctx, st, eventstore.Exact(0)); err != nil {
			t.Fatalf("empty append with a holding expectation: %v", err)
		}
		_, err := s.Append(ctx, st, eventstore.NoStream)
		wantConflict(t, err, st, eventstore.NoStream, 0, true)
		if evs := mustReadStream(t, s, st); len(evs) != 1 {
			t.Fatalf("empty appends wrote: stream has %d events", len(evs))
		}
	})
	t.Run("MultipleEventsOneAppend", func(t *testing.T) {
		st := fresh()
		res := mustAppend(t, s, st, eventstore.NoStream, event("A", `1`), event("B", `2`), event("C", `3`))
		evs := mustReadStream(t, s, st)
		if res.NextRevision != 2 || len(evs) != 3 {
			t.Fatalf("next revision %d, %d events; want 2, 3", res.NextRevision, len(evs))
		}
		for i := 1; i < len(evs); i++ {
			if !evs[i-1].Position.Less(evs[i].Position) {
				t.Fatalf("positions not increasing within an append: %s then %s", evs[i-1].Position, evs[i].Position)
			}
		}
		if res.Position != evs[2].Position {
			t.Fatalf("append result position %s, last event at %s", res.Position, evs[2].Position)
		}
	})
}

func testReadStream(t *testing.T, s eventstore.Store) {
	ctx := testContext(t)
	st := category(t) + "-1"
	first := []eventstore.EventData{event("A", `{"n":0}`), event("B", `{"n":1}`)}
	second := []eventstore.EventData{event("C", `{"n":2}`), event("D", `{"n":3}`), event("E", `{"n":4}`)}
	mustAppend(t, s, st, eventstore.NoStream, first...)
	mustAppend(t, s, st, eventstore.Exact(1), second...)
	var want []uuid.UUID
	for _, e := range append(first, second...) {
		want = append(want, e.ID)
	}

	all := mustReadStream(t, s, st)
	sameIDs(t, "read from 0", all, want)
	for i, e := range all {
		if e.StreamRevision != uint64(i) || e.StreamID != st {
			t.Fatalf("event %d: stream %s revision %d", i, e.StreamID, e.StreamRevision)
		}
	}
	part, err := s.ReadStream(ctx, st, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	sameIDs(t, "read from 2 max 2", part, want[2:4])
	for _, from := range []uint64{5, 1000} {
		evs, err := s.ReadStream(ctx, st, from, 10)
		if err != nil || len(evs) != 0 {
			t.Fatalf("read past the end (from %d): %d events, err %v; want none, no error", from, len(evs), err)
		}
	}
}

func testReadStreamNotFound(t *testing.T, s eventstore.Store) {
	_, err := s.ReadStream(testContext(t), category(t)+"-missing", 0, 10)
	if !errors.Is(err, eventstore.ErrStreamNotFound) {
		t.Fatalf("read missing stream: err %v, want ErrStreamNotFound", err)
	}
}

func testRoundTrip(t *testing.T, s eventstore.Store) {
	ctx := testContext(t)
	cat := category(t)
	st := cat + "-1"
	// Insignificant whitespace, key order, duplicate keys, escapes and
	// non-ASCII text must all survive byte for byte: the bytes are hashed.
	data := "{\"b\": 1,  \"a\" : [1, 2.50, 1e3],\n \"s\": \"h\u00e9llo \\u00e9 <&> \\\"q\\\"\", \"dup\": 1, \"dup\": 2}"
	ev := eventstore.EventData{
		ID:            uuid.New(),
		Type:          "EmailQueued",
		SchemaVersion: 7,
		Data:          json.RawMessage(data),
		Metadata: eventstore.Metadata{
			CorrelationID: "corr-1", CausationID: "cause-1", Actor: "apikey:k_123", RequestID: "req-9",
			ClientRequestID: "client-chosen-9",
		},
	}
	before := time.Now()
	res := mustAppend(t, s, st, eventstore.NoStream, ev)
	if res.NextRevision != 0 || res.Position == eventstore.Start {
		t.Fatalf("append result %+v", res)
	}
	check := func(where string, e eventstore.RecordedEvent) {
		t.Helper()
		if e.ID != ev.ID || e.StreamID != st || e.StreamRevision != 0 || e.Type != ev.Type || e.SchemaVersion != 7 {
			t.Fatalf("%s: got id %s stream %s rev %d type %s schema %d", where, e.ID, e.StreamID, e.StreamRevision, e.Type, e.SchemaVersion)
		}
		if !bytes.Equal(e.Data, ev.Data) {
			t.Fatalf("%s: data %q, want %q", where, e.Data, ev.Data)
		}
		if e.Metadata != ev.Metadata {
			t.Fatalf("%s: metadata %+v, want %+v", where, e.Metadata, ev.Metadata)
		}
		if e.RecordedAt.IsZero() || e.RecordedAt.Before(before.Add(-time.Hour)) || e.RecordedAt.After(time.Now().Add(time.Hour)) {
			t.Fatalf("%s: recorded at %v, appended at %v", where, e.RecordedAt, before)
		}
		if e.Hash == "" || e.Hash != e.Recomputed("") {
			t.Fatalf("%s: hash %q, want %q", where, e.Hash, e.Recomputed(""))
		}
		if e.Position != res.Position {
			t.Fatalf("%s: position %s, append returned %s", where, e.Position, res.Position)
		}
	}
	check("read stream", mustReadStream(t, s, st)[0])
	check("read $all", readAllOwn(t, s, eventstore.Start, cat, 1, 1000)[0])
	sub, err := s.SubscribeAll(ctx, eventstore.Start)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	last := eventstore.Start
	check("subscription", nextOwn(t, ctx, sub, cat, &last))
}

func testReadAllPaging(t *testing.T, s eventstore.Store) {
	cat := category(t)
	marker := mustAppend(t, s, cat+"-marker", eventstore.Any, event("Marker", `{}`))
	streams := []string{cat + "-1", cat + "-2", cat + "-3"}
	var want []uuid.UUID
	for i := 0; i < 7; i++ { // 1+2+1+2+1+2+1 = 10 events, appended one after the other
		var evs []eventstore.EventData
		for j := 0; j <= i%2; j++ {
			e := event("Paged", fmt.Sprintf(`{"i":%d,"j":%d}`, i, j))
			evs = append(evs, e)
			want = append(want, e.ID)
		}
		mustAppend(t, s, streams[i%3], eventstore.Any, evs...)
	}

	full := readAllOwn(t, s, marker.Position, cat, 10, 1000)
	sameIDs(t, "read $all after marker", full, want)
	paged := readAllOwn(t, s, marker.Position, cat, 10, 3)
	sameIDs(t, "read $all in pages of 3", paged, want)
	one := readAllOwn(t, s, marker.Position, cat, 10, 1)
	sameIDs(t, "read $all in pages of 1", one, want)
	mid := readAllOwn(t, s, full[4].Position, cat, 5, 1000)
	sameIDs(t, "read $all from the 5th event", mid, want[5:])

	// Stream reads and $all agree on positions.
	byID := map[uuid.UUID]eventstore.Position{}
	for _, e := range full {
		byID[e.ID] = e.Position
	}
	for _, st := range streams {
		for _, e := range mustReadStream(t, s, st) {
			if byID[e.ID] != e.Position {
				t.Fatalf("%s@%d: stream read position %s, $all position %s", st, e.StreamRevision, e.Position, byID[e.ID])
			}
		}
	}
}

// testCountAfter holds for a shared log: other writers only add events.
func testCountAfter(t *testing.T, s eventstore.Store) {
	c, ok := s.(eventstore.Counter)
	if !ok {
		t.Fatalf("%T cannot count events: projection lag and readiness need it", s)
	}
	ctx := testContext(t)
	cat := category(t)
	marker := mustAppend(t, s, cat+"-marker", eventstore.Any, event("Marker", `{}`))
	for i := range 10 {
		mustAppend(t, s, fmt.Sprintf("%s-%d", cat, i%3), eventstore.Any, event("Counted", fmt.Sprintf(`{"i":%d}`, i)))
	}
	own := readAllOwn(t, s, marker.Position, cat, 10, 1000)
	count := func(from eventstore.Position, limit int64) int64 {
		t.Helper()
		n, err := c.CountAfter(ctx, from, limit)
		if err != nil {
			t.Fatalf("CountAfter(%s, %d): %v", from, limit, err)
		}
		return n
	}
	if n := count(marker.Position, 10); n != 10 {
		t.Errorf("after the marker, bound 10: %d", n)
	}
	if n := count(own[4].Position, 3); n != 3 {
		t.Errorf("after the 5th event, bound 3: %d", n)
	}
	if n := count(marker.Position, 1000); n < 10 {
		t.Errorf("after the marker: %d, want at least the 10 written", n)
	}
	last := count(own[9].Position, 1000)
	if before := count(own[8].Position, 1000); before < last+1 {
		t.Errorf("after the last event %d, after the one before it %d", last, before)
	}
	switch n, err := c.CountAfter(ctx, marker.Position, 0); {
	case errors.Is(err, errors.ErrUnsupported): // a store that must read what it counts needs a bound
	case err != nil:
		t.Fatal(err)
	case n < 10:
		t.Errorf("unbounded count after the marker: %d", n)
	}
}

func testHashChain(t *testing.T, s eventstore.Store) {
	cat := category(t)
	a, b := cat+"-a", cat+"-b"
	mustAppend(t, s, a, eventstore.NoStream, event("E", `{"n":1}`), event("E", `{"n":2}`))
	mustAppend(t, s, b, eventstore.NoStream, event("E", `{"n":1}`))
	mustAppend(t, s, a, eventstore.Exact(1), event("E", `{"n":3}`))
	mustAppend(t, s, b, eventstore.Exact(0), event("E", `{"n":2}`))
	mustAppend(t, s, a, eventstore.Exact(2), event("E", `{"n":4}`), event("E", `{"n":5}`))

	for _, st := range []string{a, b} {
		evs := mustReadStream(t, s, st)
		prev := ""
		seen := map[string]bool{}
		for _, e := range evs {
			if e.Hash == "" || seen[e.Hash] {
				t.Fatalf("%s@%d: empty or repeated hash %q", st, e.StreamRevision, e.Hash)
			}
			seen[e.Hash] = true
			if want := e.Recomputed(prev); e.Hash != want {
				t.Fatalf("%s@%d: hash %s, recomputed from previous %s", st, e.StreamRevision, e.Hash, want)
			}
			// The check is not vacuous: changed data no longer matches.
			tampered := e
			tampered.Data = json.RawMessage(`{"n":0}`)
			if tampered.Recomputed(prev) == e.Hash {
				t.Fatalf("%s@%d: hash ignores data", st, e.StreamRevision)
			}
			prev = e.Hash
		}
	}
}

func testSubscribeCatchUpLive(t *testing.T, s eventstore.Store) {
	ctx := testContext(t)
	cat := category(t)
	history := []eventstore.EventData{event("H", `1`), event("H", `2`), event("H", `3`)}
	mustAppend(t, s, cat+"-1", eventstore.NoStream, history[0])
	mustAppend(t, s, cat+"-2", eventstore.NoStream, history[1])
	mustAppend(t, s, cat+"-1", eventstore.Exact(0), history[2])

	sub, err := s.SubscribeAll(ctx, eventstore.Start)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	last := eventstore.Start
	for i, want := range history {
		if e := nextOwn(t, ctx, sub, cat, &last); e.ID != want.ID {
			t.Fatalf("catch-up event %d: got %s (%s), want %s", i, e.ID, e.StreamID, want.ID)
		}
	}
	// Appended after the subscriber caught up: must arrive live.
	live := []eventstore.EventData{event("L", `4`), event("L", `5`)}
	mustAppend(t, s, cat+"-1", eventstore.Exact(1), live[0])
	mustAppend(t, s, cat+"-3", eventstore.NoStream, live[1])
	for i, want := range live {
		if e := nextOwn(t, ctx, sub, cat, &last); e.ID != want.ID {
			t.Fatalf("live event %d: got %s (%s), want %s", i, e.ID, e.StreamID, want.ID)
		}
	}
}

func testSubscribeFromPosition(t *testing.T, s eventstore.Store) {
	ctx := testContext(t)
	cat := category(t)
	st := cat + "-1"
	var evs []eventstore.EventData
	var res []eventstore.AppendResult
	for i := 0; i < 5; i++ {
		e := event("P", fmt.Sprintf(`%d`, i))
		evs = append(evs, e)
		res = append(res, mustAppend(t, s, st, eventstore.Any, e))
	}
	sub, err := s.SubscribeAll(ctx, res[1].Position)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	last := res[1].Position
	for i := 2; i < 5; i++ {
		e := nextOwn(t, ctx, sub, cat, &last)
		if e.ID != evs[i].ID || e.Position != res[i].Position {
			t.Fatalf("from position of event 1: got %s at %s, want event %d (%s at %s)", e.ID, e.Position, i, evs[i].ID, res[i].Position)
		}
	}
	more := event("P", `5`)
	mustAppend(t, s, st, eventstore.Exact(4), more)
	if e := nextOwn(t, ctx, sub, cat, &last); e.ID != more.ID {
		t.Fatalf("live event: got %s, want %s", e.ID, more.ID)
	}
}

func testSubscriptionClose(t *testing.T, s eventstore.Store) {
	ctx := testContext(t)
	marker := mustAppend(t, s, category(t)+"-1", eventstore.NoStream, event("M", `{}`))
	sub, err := s.SubscribeAll(ctx, marker.Position)
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		for {
			if _, err := sub.Next(ctx); err != nil {
				errc <- err
				return
			}
		}
	}()
	if err := sub.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	select {
	case <-errc:
		if ctx.Err() != nil {
			t.Fatal("Next returned only when the test context ended, not on Close")
		}
	case <-ctx.Done():
		t.Fatal("Next still blocked after Close")
	}
	if _, err := sub.Next(ctx); err == nil {
		t.Fatal("Next after Close returned an event")
	}
	if err := sub.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

func testConcurrentExact(t *testing.T, s eventstore.Store) {
	ctx := testContext(t)
	cat := category(t)
	const racers = 16
	race := func(stream string, exp eventstore.ExpectedVersion) []error {
		errs := make([]error, racers)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, errs[i] = s.Append(ctx, stream, exp, event("Race", fmt.Sprintf(`%d`, i)))
			}()
		}
		close(start)
		wg.Wait()
		return errs
	}
	oneWins := func(stream string, exp eventstore.ExpectedVersion, actual uint64) {
		t.Helper()
		wins := 0
		for _, err := range race(stream, exp) {
			if err == nil {
				wins++
				continue
			}
			wantConflict(t, err, stream, exp, actual, true)
		}
		if wins != 1 {
			t.Fatalf("%s with %s: %d appends won, want exactly 1", stream, exp, wins)
		}
	}

	st := cat + "-1"
	oneWins(st, eventstore.NoStream, 0) // the losers see the winner's event 0
	for rev := uint64(0); rev < 5; rev++ {
		oneWins(st, eventstore.Exact(rev), rev+1)
	}
	evs := mustReadStream(t, s, st)
	if len(evs) != 6 {
		t.Fatalf("stream has %d events, want 6", len(evs))
	}
	for i, e := range evs {
		if e.StreamRevision != uint64(i) {
			t.Fatalf("event %d has revision %d", i, e.StreamRevision)
		}
	}
}

// testConcurrentSubscriber appends from many goroutines over shared streams
// while a subscriber, restarted once from its last position, must see every
// event exactly once, in strictly increasing position and, per stream, in
// revision order with an intact hash chain.
func testConcurrentSubscriber(t *testing.T, s eventstore.Store) {
	const writers, perWriter, streams = 16, 50, 40
	const total = writers * perWriter
	base := testContext(t)
	ctx, cancel := context.WithCancel(base)
	defer cancel()
	cat := category(t)

	sub, err := s.SubscribeAll(ctx, eventstore.Start)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { sub.Close() }()

	var (
		mu       sync.Mutex
		appended = map[uuid.UUID]string{}
		perSt    = map[string]int{}
		wg       sync.WaitGroup
	)
	defer func() { cancel(); wg.Wait() }() // no writer outlives the test
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			guess := map[string]eventstore.ExpectedVersion{}
			for j := 0; j < perWriter; j++ {
				st := fmt.Sprintf("%s-%d", cat, (w*7+j*3)%streams)
				ev := event("Concurrent", fmt.Sprintf(`{"w":%d,"j":%d}`, w, j))
				exp := eventstore.Any
				if w%2 == 1 { // optimistic writers learn the revision from conflicts
					exp = eventstore.NoStream
					if g, ok := guess[st]; ok {
						exp = g
					}
				}
				for {
					res, err := s.Append(ctx, st, exp, ev)
					var c *eventstore.ConflictError
					if errors.As(err, &c) && !exp.IsAny() {
						exp = eventstore.NoStream
						if c.ActualExists {
							exp = eventstore.Exact(c.Actual)
						}
						continue
					}
					if err != nil {
						if ctx.Err() == nil { // else the test is already over
							t.Errorf("writer %d append %d to %s: %v", w, j, st, err)
						}
						cancel()
						return
					}
					guess[st] = eventstore.Exact(res.NextRevision)
					break
				}
				mu.Lock()
				appended[ev.ID] = st
				perSt[st]++
				mu.Unlock()
			}
		}()
	}

	seen := map[uuid.UUID]bool{}
	nextRev := map[string]uint64{}
	prevHash := map[string]string{}
	last := eventstore.Start
	restarted := false
	for len(seen) < total {
		if len(seen) == total/2 && !restarted { // a projector restarting from its checkpoint
			restarted = true
			sub.Close()
			if sub, err = s.SubscribeAll(ctx, last); err != nil {
				t.Fatal(err)
			}
		}
		e, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("subscriber after %d of %d events: %v", len(seen), total, err)
		}
		if !last.Less(e.Position) {
			t.Fatalf("subscriber got %s after %s", e.Position, last)
		}
		last = e.Position
		if !own(cat, e) {
			continue
		}
		if seen[e.ID] {
			t.Fatalf("event %s delivered twice", e.ID)
		}
		seen[e.ID] = true
		if e.StreamRevision != nextRev[e.StreamID] {
			t.Fatalf("%s: got revision %d, want %d (skipped or out of order)", e.StreamID, e.StreamRevision, nextRev[e.StreamID])
		}
		nextRev[e.StreamID]++
		if e.Hash != e.Recomputed(prevHash[e.StreamID]) {
			t.Fatalf("%s@%d: hash chain broken", e.StreamID, e.StreamRevision)
		}
		prevHash[e.StreamID] = e.Hash
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	mu.Lock()
	defer mu.Unlock()
	if len(appended) != total {
		t.Fatalf("appended %d events, want %d", len(appended), total)
	}
	for id, st := range appended {
		if !seen[id] {
			t.Fatalf("event %s of %s never delivered", id, st)
		}
	}
	for st, n := range perSt {
		if got := len(mustReadStream(t, s, st)); got != n {
			t.Fatalf("%s has %d events, %d were appended", st, got, n)
		}
	}
}
