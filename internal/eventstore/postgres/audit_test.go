package postgres

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/pglock"
	"github.com/mailroom/mailroom/internal/pgtest"
)

func TestVerifyDetectsTampering(t *testing.T) {
	pool := pgtest.NewPool(t)
	s := newStore(t, pool)
	ctx := context.Background()
	streams := []string{"email-a", "email-b", "domain-c"}
	ids := map[string][]uuid.UUID{}
	for i := 0; i < 4; i++ {
		for _, st := range streams {
			e := testEvent("E")
			ids[st] = append(ids[st], e.ID)
			mustAppend(t, s, st, eventstore.Any, e)
		}
	}
	waitVisible(t, s, 12)
	// Each verification runs in a process of its own (mailroom events
	// verify), which reads what is stored, not what an earlier read of the
	// same process keeps of the log's head.
	verify := func(wantChecked int) []eventstore.Break {
		t.Helper()
		var breaks []eventstore.Break
		n, _, err := eventstore.Verify(ctx, newStore(t, pool), func(b eventstore.Break) { breaks = append(breaks, b) })
		if err != nil {
			t.Fatal(err)
		}
		if n != wantChecked {
			t.Fatalf("checked %d events, want %d", n, wantChecked)
		}
		return breaks
	}
	exec := func(sql string) {
		t.Helper()
		tag, err := pool.Exec(ctx, sql)
		if err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("%s: %v, %d rows", sql, err, tag.RowsAffected())
		}
	}
	if b := verify(12); len(b) != 0 {
		t.Fatalf("intact log reported breaks: %v", b)
	}

	// Changed data, hash left alone: that event breaks, the next one still
	// chains from the stored hash.
	exec(`UPDATE events SET data = '{"type":"E","to":"mallory@example.com"}' WHERE stream_id = 'email-b' AND stream_revision = 1`)
	b := verify(12)
	if len(b) != 1 || b[0].Stream != "email-b" || b[0].Revision != 1 || b[0].EventID != ids["email-b"][1] || !strings.Contains(b[0].Reason, "hash") {
		t.Fatalf("after changing email-b@1 data: breaks %v", b)
	}

	// Changed metadata is caught too.
	exec(`UPDATE events SET metadata = '{"actor":"operator"}' WHERE stream_id = 'email-a' AND stream_revision = 0`)
	// A removed event: a revision gap and a broken chain at the next one.
	exec(`DELETE FROM events WHERE stream_id = 'domain-c' AND stream_revision = 2`)
	b = verify(11)
	found := map[string]bool{}
	for _, br := range b {
		switch {
		case br.Stream == "email-a" && br.Revision == 0 && strings.Contains(br.Reason, "hash"):
			found["meta"] = true
		case br.Stream == "email-b" && br.Revision == 1:
			found["data"] = true
		case br.Stream == "domain-c" && br.Revision == 3 && strings.Contains(br.Reason, "revision"):
			found["gap"] = true
		case br.Stream == "domain-c" && br.Revision == 3 && strings.Contains(br.Reason, "hash"):
			found["chain"] = true
		default:
			t.Errorf("unexpected break %v", br)
		}
	}
	if len(found) != 4 || len(b) != 4 {
		t.Fatalf("breaks %v, want one each for metadata, data, gap and chain", b)
	}

	// The last event of a stream removed, and a whole stream: the chains
	// cannot show it, the recorded heads do.
	exec(`DELETE FROM events WHERE stream_id = 'email-a' AND stream_revision = 3`)
	mustAppend(t, s, "apikey-d", eventstore.NoStream, testEvent("E"))
	exec(`DELETE FROM events WHERE stream_id = 'apikey-d'`)
	b = verify(10)
	truncated := map[string]bool{}
	for _, br := range b {
		if strings.Contains(br.Reason, "events removed from its end") && br.Revision == map[string]uint64{"email-a": 3, "apikey-d": 0}[br.Stream] {
			truncated[br.Stream] = true
		}
	}
	if len(b) != 6 || !truncated["email-a"] || !truncated["apikey-d"] {
		t.Fatalf("breaks %v, want the four above and one for each stream cut short", b)
	}
	// A stream's recorded head whose hash differs from its last event.
	exec(`UPDATE streams SET last_hash = 'forged' WHERE stream_id = 'email-b'`)
	b = verify(10)
	forged := slices.ContainsFunc(b, func(br eventstore.Break) bool {
		return br.Stream == "email-b" && br.Revision == 3 && strings.Contains(br.Reason, "differs from the stream's recorded head")
	})
	if len(b) != 7 || !forged {
		t.Fatalf("breaks %v, want the six above and one for email-b's recorded head", b)
	}
	// A recorded head no append could write stops the audit with its name,
	// not as a revision read as a huge number.
	exec(`UPDATE streams SET last_revision = -1 WHERE stream_id = 'email-b'`)
	_, _, err := eventstore.Verify(ctx, newStore(t, pool), func(eventstore.Break) {})
	if err == nil || !strings.Contains(err.Error(), "stream email-b has recorded head revision -1, which is no revision") {
		t.Fatalf("verify with a negative recorded head: %v", err)
	}
}

type exportLine struct {
	Position      string              `json:"position"`
	Stream        string              `json:"stream"`
	Revision      uint64              `json:"revision"`
	EventID       string              `json:"event_id"`
	Type          string              `json:"type"`
	SchemaVersion int                 `json:"schema_version"`
	Data          json.RawMessage     `json:"data"`
	Metadata      eventstore.Metadata `json:"metadata"`
	RecordedAt    string              `json:"recorded_at"`
	Hash          string              `json:"hash"`
}

func parseExport(t *testing.T, out []byte) []exportLine {
	t.Helper()
	var lines []exportLine
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		var l exportLine
		if err := dec.Decode(&l); err != nil {
			t.Fatalf("line %d %q: %v", len(lines)+1, sc.Text(), err)
		}
		lines = append(lines, l)
	}
	return lines
}

func TestExport(t *testing.T) {
	pool := pgtest.NewPool(t)
	s := newStore(t, pool)
	ctx := context.Background()
	data := []string{
		`{"to":"a@example.com","html":"<p>&amp;</p>"}`,
		`{"n": 2,  "spaced" : true}`,
		"{\"multi\":\n  \"line\"}", // raw line break: compacted in the export
		`[1,2,3]`,
		`"just a string"`,
	}
	streams := []string{"email-1", "email-2", "email-1", "email-1", "email-2"}
	var evs []eventstore.EventData
	for i, d := range data {
		e := eventstore.EventData{ID: uuid.New(), Type: "T", SchemaVersion: 2, Data: json.RawMessage(d),
			Metadata: eventstore.Metadata{CorrelationID: "c", CausationID: "k", Actor: "apikey:1", RequestID: "r"}}
		evs = append(evs, e)
		mustAppend(t, s, streams[i], eventstore.Any, e)
	}
	waitVisible(t, s, len(data))

	var buf bytes.Buffer
	n, _, err := eventstore.Export(ctx, s, eventstore.Start, "", &buf)
	if err != nil || n != len(data) {
		t.Fatalf("export: %d events, err %v", n, err)
	}
	lines := parseExport(t, buf.Bytes())
	if len(lines) != len(data) {
		t.Fatalf("%d lines for %d events", len(lines), len(data))
	}
	stamp := regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`)
	prevHash := map[string]string{}
	last := eventstore.Start
	for i, l := range lines {
		pos, err := eventstore.ParsePosition(l.Position)
		if err != nil || !last.Less(pos) {
			t.Fatalf("line %d: position %q after %s (%v)", i, l.Position, last, err)
		}
		last = pos
		if l.EventID != evs[i].ID.String() || l.Stream != streams[i] || l.Type != "T" || l.SchemaVersion != 2 || l.Metadata != evs[i].Metadata {
			t.Fatalf("line %d: %+v", i, l)
		}
		if !stamp.MatchString(l.RecordedAt) {
			t.Fatalf("line %d: recorded_at %q", i, l.RecordedAt)
		}
		if i == 2 { // compacted; same JSON value
			if string(l.Data) != `{"multi":"line"}` {
				t.Fatalf("line %d: data %s", i, l.Data)
			}
		} else {
			if string(l.Data) != data[i] {
				t.Fatalf("line %d: data %s, want %s byte for byte", i, l.Data, data[i])
			}
			// An auditor can recompute the chain from the export alone.
			want := eventstore.ChainHash(prevHash[l.Stream], l.Stream, l.Revision, eventstore.EventData{
				ID: uuid.MustParse(l.EventID), Type: l.Type, SchemaVersion: l.SchemaVersion, Data: l.Data, Metadata: l.Metadata})
			if want != l.Hash {
				t.Fatalf("line %d: hash %s, recomputed from export %s", i, l.Hash, want)
			}
		}
		prevHash[l.Stream] = l.Hash
	}

	// One stream only, in revision order.
	buf.Reset()
	if n, _, err := eventstore.Export(ctx, s, eventstore.Start, "email-2", &buf); err != nil || n != 2 {
		t.Fatalf("export email-2: %d events, err %v", n, err)
	}
	for i, l := range parseExport(t, buf.Bytes()) {
		if l.Stream != "email-2" || l.Revision != uint64(i) {
			t.Fatalf("email-2 export line %d: %s@%d", i, l.Stream, l.Revision)
		}
	}
	// From a position: only later events.
	from, _ := eventstore.ParsePosition(lines[2].Position)
	buf.Reset()
	if n, _, err := eventstore.Export(ctx, s, from, "", &buf); err != nil || n != 2 {
		t.Fatalf("export from %s: %d events, err %v", from, n, err)
	}
	if got := parseExport(t, buf.Bytes()); got[0].EventID != lines[3].EventID {
		t.Fatalf("export from %s starts at %s", from, got[0].EventID)
	}
	buf.Reset()
	if n, _, err := eventstore.Export(ctx, s, from, "email-1", &buf); err != nil || n != 1 {
		t.Fatalf("export email-1 from %s: %d events, err %v", from, n, err)
	}
	if _, _, err := eventstore.Export(ctx, s, eventstore.Start, "email-missing", &buf); !errors.Is(err, eventstore.ErrStreamNotFound) {
		t.Fatalf("export of a missing stream: %v", err)
	}
}

// An append the global order does not show yet, behind a transaction still
// open, is no break: its stream's recorded head is found on the stream.
func TestVerifyBesideAnOpenTransaction(t *testing.T) {
	pool := pgtest.NewPool(t)
	s := newStore(t, pool)
	ctx := context.Background()
	mustAppend(t, s, "email-a", eventstore.NoStream, testEvent("E"))
	waitVisible(t, s, 1)

	open, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Rollback(ctx)
	// An append under way (its stream's lock, then an id) holds back the
	// global order.
	if _, err := open.Exec(ctx, "SELECT pg_advisory_xact_lock($1, hashtext('email-c'))", pglock.StreamClass); err != nil {
		t.Fatal(err)
	}
	if _, err := open.Exec(ctx, "SELECT pg_current_xact_id()"); err != nil {
		t.Fatal(err)
	}
	mustAppend(t, s, "email-a", eventstore.Exact(0), testEvent("E"))
	mustAppend(t, s, "email-b", eventstore.NoStream, testEvent("E"))

	var breaks []eventstore.Break
	n, _, err := eventstore.Verify(ctx, newStore(t, pool), func(b eventstore.Break) { breaks = append(breaks, b) })
	if err != nil || n != 1 || len(breaks) != 0 {
		t.Fatalf("verify beside an open transaction: %d events, breaks %v, err %v; want the one visible event and no break", n, breaks, err)
	}
}

// Events written into the log by hand, past a stream's recorded head or in
// a stream without one, chain as an append would chain them: only the
// recorded heads show them. Streams appended to while verify runs are no
// break.
func TestVerifyFindsEventsAddedOutsideAnAppend(t *testing.T) {
	pool := pgtest.NewPool(t)
	s := newStore(t, pool)
	ctx := context.Background()
	mustAppend(t, s, "apikey-a", eventstore.NoStream, testEvent("E"))
	mustAppend(t, s, "apikey-b", eventstore.NoStream, testEvent("E"))
	mustAppend(t, s, "apikey-c", eventstore.NoStream, testEvent("E"))
	waitVisible(t, s, 3)

	// An event chained after apikey-a's head, and a whole stream, inserted
	// as an append would write them, without the streams table.
	forge := func(stream string, rev uint64, prev string) uuid.UUID {
		t.Helper()
		e := testEvent("Revoked")
		_, err := pool.Exec(ctx, `INSERT INTO events (event_id, stream_id, stream_revision, event_type, schema_version, data, metadata, hash)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`, e.ID, stream, int64(rev), e.Type, e.SchemaVersion, string(e.Data),
			`{"actor":"system:test"}`, eventstore.ChainHash(prev, stream, rev, e))
		if err != nil {
			t.Fatal(err)
		}
		return e.ID
	}
	var headHash string
	if err := pool.QueryRow(ctx, "SELECT last_hash FROM streams WHERE stream_id = 'apikey-a'").Scan(&headHash); err != nil {
		t.Fatal(err)
	}
	past := forge("apikey-a", 1, headHash)
	unrecorded := forge("apikey-forged", 0, "")
	// And a stream whose recorded head was deleted.
	if _, err := pool.Exec(ctx, "DELETE FROM streams WHERE stream_id = 'apikey-b'"); err != nil {
		t.Fatal(err)
	}
	var bID uuid.UUID
	if err := pool.QueryRow(ctx, "SELECT event_id FROM events WHERE stream_id = 'apikey-b'").Scan(&bID); err != nil {
		t.Fatal(err)
	}
	waitVisible(t, s, 5)

	// apikey-c and a new stream are appended to after the heads are read,
	// before the log is: no break.
	v := &appendingAfterHeads{Store: newStore(t, pool), then: func() {
		mustAppend(t, s, "apikey-c", eventstore.Exact(0), testEvent("E"))
		mustAppend(t, s, "apikey-new", eventstore.NoStream, testEvent("E"))
		waitVisible(t, s, 7)
	}}
	var breaks []eventstore.Break
	n, _, err := eventstore.Verify(ctx, v, func(b eventstore.Break) { breaks = append(breaks, b) })
	if err != nil {
		t.Fatal(err)
	}
	if n != 7 {
		t.Fatalf("checked %d events, want 7", n)
	}
	want := map[string]eventstore.Break{
		"apikey-a":      {Stream: "apikey-a", Revision: 1, EventID: past},
		"apikey-forged": {Stream: "apikey-forged", Revision: 0, EventID: unrecorded},
		"apikey-b":      {Stream: "apikey-b", Revision: 0, EventID: bID},
	}
	for _, b := range breaks {
		w, ok := want[b.Stream]
		if !ok || b.Revision != w.Revision || b.EventID != w.EventID || !strings.Contains(b.Reason, "added outside an append") {
			t.Errorf("unexpected break %v", b)
		}
		delete(want, b.Stream)
	}
	if len(want) != 0 {
		t.Fatalf("breaks %v; none for %v", breaks, want)
	}
}

// appendingAfterHeads runs then once the recorded heads are read, as an
// append made while verify runs would be.
type appendingAfterHeads struct {
	*Store
	then func()
}

func (a *appendingAfterHeads) RecordedHeads(ctx context.Context, streams ...string) (map[string]eventstore.StreamHead, error) {
	heads, err := a.Store.RecordedHeads(ctx, streams...)
	if a.then != nil {
		a.then()
		a.then = nil
	}
	return heads, err
}
