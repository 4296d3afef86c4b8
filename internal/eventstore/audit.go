package eventstore

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/google/uuid"
)

// auditBatch is how many events Verify and Export read per call.
const auditBatch = 1000

// Break is one problem Verify found in a stream's hash chain.
type Break struct {
	Stream   string
	Revision uint64
	EventID  uuid.UUID
	Reason   string
}

func (b Break) String() string {
	return fmt.Sprintf("%s@%d (%s): %s", b.Stream, b.Revision, b.EventID, b.Reason)
}

// Verify reads the whole global log and checks, per stream, that revisions
// run contiguously from 0 and that every event's hash is the one recomputed
// from its content and the stored hash of the previous event. Each problem
// is passed to report (which may be nil); checked counts the events read.
//
// A change to an event breaks its own hash; an insertion or removal breaks
// the revision sequence and the next event's hash. Removing the last events
// of a stream, or adding events past them, leaves no trace in the chain; a
// store that records each stream's head apart (HeadRecorder) shows it,
// unless that record was changed too. The heads are read before the log,
// so a stream appended to meanwhile is judged at the head it had then; one
// whose log ends elsewhere is judged again at the head it has after the
// scan. Verify sees the log as
// ReadAll does, so events committed while it runs may or may not be
// included; give it a store of its own (as `mailroom events verify` does),
// since a store may serve the head of the log from what it read before.
// Other applications' events on a shared store (Foreign) have no chain to
// check: foreign counts those skipped. One in a stream that holds
// Mailroom's events before it is checked, and breaks the chain.
func Verify(ctx context.Context, s Store, report func(Break)) (checked, foreign int, err error) {
	type head struct {
		next uint64
		hash string
		// atRecorded: the event at next-1 is the stream's recorded head
		// (read before the scan), whose hash has been compared.
		atRecorded bool
	}
	heads := map[string]*head{}
	if report == nil {
		report = func(Break) {}
	}
	hr, _ := s.(HeadRecorder)
	var recorded map[string]StreamHead
	if hr != nil {
		if recorded, err = hr.RecordedHeads(ctx); err != nil {
			return 0, 0, err
		}
	}
	pos := Start
	for {
		evs, err := s.ReadAll(ctx, pos, auditBatch)
		if err != nil {
			return checked, foreign, err
		}
		if len(evs) == 0 {
			// A head the scan did not reach may be an append the global
			// order does not show yet (an older transaction still open):
			// the stream itself says whether the event is there.
			for stream, r := range recorded {
				if err := reachHead(ctx, s, stream, r, report); err != nil {
					return checked, foreign, err
				}
			}
			if hr == nil {
				return checked, foreign, nil
			}
			// A stream whose log ends elsewhere than its recorded head was
			// appended to during the scan, or had events added outside an
			// append: its head as recorded now tells which.
			var past []string
			last := map[string]StreamHead{}
			for stream, h := range heads {
				if _, unreached := recorded[stream]; !h.atRecorded && !unreached { // those are judged above
					past = append(past, stream)
					last[stream] = StreamHead{Revision: h.next - 1, Hash: h.hash}
				}
			}
			for len(past) > 0 {
				chunk := past[:min(len(past), auditBatch)]
				past = past[len(chunk):]
				now, err := hr.RecordedHeads(ctx, chunk...)
				if err != nil {
					return checked, foreign, err
				}
				for _, stream := range chunk {
					l := last[stream]
					r, ok := now[stream]
					switch {
					case !ok:
						if err := added(ctx, s, stream, 0, report,
							fmt.Sprintf("the log holds the stream up to revision %d, but it has no recorded head: events added outside an append", l.Revision)); err != nil {
							return checked, foreign, err
						}
					case r.Revision < l.Revision:
						if err := added(ctx, s, stream, r.Revision+1, report,
							fmt.Sprintf("the log holds the stream up to revision %d, past its recorded head, revision %d: events added outside an append", l.Revision, r.Revision)); err != nil {
							return checked, foreign, err
						}
					case r.Revision == l.Revision && r.Hash != l.Hash:
						report(Break{stream, l.Revision, uuid.Nil,
							fmt.Sprintf("hash %s differs from the stream's recorded head %s", l.Hash, r.Hash)})
					case r.Revision > l.Revision: // appended to after the scan passed it
						if err := reachHead(ctx, s, stream, r, report); err != nil {
							return checked, foreign, err
						}
					}
				}
			}
			return checked, foreign, nil
		}
		for _, e := range evs {
			pos = e.Position
			if e.Foreign && heads[e.StreamID] == nil { // in a stream of Mailroom's, a break
				foreign++
				continue
			}
			h := heads[e.StreamID]
			if h == nil {
				h = &head{}
				heads[e.StreamID] = h
			}
			h.atRecorded = false
			if r, ok := recorded[e.StreamID]; ok && r.Revision == e.StreamRevision {
				if r.Hash != e.Hash {
					report(Break{e.StreamID, e.StreamRevision, e.ID,
						fmt.Sprintf("hash %s differs from the stream's recorded head %s", e.Hash, r.Hash)})
				}
				delete(recorded, e.StreamID)
				h.atRecorded = true
			}
			if e.StreamRevision != h.next {
				report(Break{e.StreamID, e.StreamRevision, e.ID,
					fmt.Sprintf("revision %d where %d was expected: events missing, inserted or reordered", e.StreamRevision, h.next)})
			}
			if want := e.Recomputed(h.hash); want != e.Hash {
				report(Break{e.StreamID, e.StreamRevision, e.ID,
					fmt.Sprintf("hash mismatch: stored %s, recomputed %s", e.Hash, want)})
			}
			h.next, h.hash = e.StreamRevision+1, e.Hash
			checked++
		}
	}
}

// reachHead reports a break unless stream holds its recorded head r.
func reachHead(ctx context.Context, s Store, stream string, r StreamHead, report func(Break)) error {
	got, err := s.ReadStream(ctx, stream, r.Revision, 1)
	if err != nil && !errors.Is(err, ErrStreamNotFound) {
		return err
	}
	if len(got) == 1 && got[0].StreamRevision == r.Revision && got[0].Hash == r.Hash {
		return nil
	}
	report(Break{stream, r.Revision, uuid.Nil,
		fmt.Sprintf("the stream's recorded head is revision %d, which the log does not reach: events removed from its end", r.Revision)})
	return nil
}

// added reports the event at revision rev of stream, the first of those
// added outside an append, with why.
func added(ctx context.Context, s Store, stream string, rev uint64, report func(Break), why string) error {
	got, err := s.ReadStream(ctx, stream, rev, 1)
	if err != nil && !errors.Is(err, ErrStreamNotFound) {
		return err
	}
	id := uuid.Nil
	if len(got) == 1 {
		id = got[0].ID
	}
	report(Break{stream, rev, id, why})
	return nil
}

// VerifyExport checks the hash chains of an export (Export's NDJSON) as
// Verify checks the log's, from the file alone: revisions contiguous, and
// each event's hash recomputed from its line and the previous event's. A
// stream must start at revision 0, unless partial says the export was made
// from a position: then a stream whose first line is past revision 0 takes
// that line's hash as given and is checked from there (anchored counts
// such streams). Each problem goes to report.
func VerifyExport(r io.Reader, partial bool, report func(Break)) (checked, anchored int, err error) {
	type head struct {
		next uint64
		hash string
	}
	heads := map[string]*head{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20) // an event is at most a few MiB
	for line := 1; sc.Scan(); line++ {
		var e struct {
			exportHead
			Data     json.RawMessage `json:"data"`
			Metadata json.RawMessage `json:"metadata"`
			Hash     string          `json:"hash"`
		}
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return checked, anchored, fmt.Errorf("line %d: not an export line: %w", line, err)
		}
		id, _ := uuid.Parse(e.EventID)
		broken := func(format string, args ...any) {
			report(Break{e.Stream, e.Revision, id, fmt.Sprintf(format, args...)})
		}
		if !isHash(e.Hash) {
			broken("hash %q is not a SHA-256 in lower-case hex", e.Hash)
		}
		h := heads[e.Stream]
		switch {
		case h == nil && e.Revision > 0:
			// Its first events are not in the export: this line's hash is
			// where the chain is taken up.
			if partial {
				anchored++
			} else {
				broken("revision %d where 0 was expected: the export lacks the stream's first events (an export from a position is verified with --partial)", e.Revision)
			}
			h = &head{}
			heads[e.Stream] = h
		case h == nil:
			h = &head{}
			heads[e.Stream] = h
			fallthrough
		default:
			if e.Revision != h.next {
				broken("revision %d where %d was expected: events missing, inserted or reordered", e.Revision, h.next)
			} else if want := chainHash(h.hash, e.Stream, e.Revision, e.EventID, e.Type, e.SchemaVersion, e.Data, e.Metadata); want != e.Hash {
				broken("hash mismatch: exported %s, recomputed %s", e.Hash, want)
			}
		}
		h.next, h.hash = e.Revision+1, e.Hash
		checked++
	}
	return checked, anchored, sc.Err()
}

// isHash reports whether s is a SHA-256 as ChainHash writes it.
func isHash(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// exportHead holds the fields of an export line that come before "data".
type exportHead struct {
	Position      string `json:"position"`
	Stream        string `json:"stream"`
	Revision      uint64 `json:"revision"`
	EventID       string `json:"event_id"`
	Type          string `json:"type"`
	SchemaVersion int    `json:"schema_version"`
}

// Export writes events positioned after from as NDJSON, one object per line:
//
//	{"position":"C/P","stream":..,"revision":..,"event_id":..,"type":..,"schema_version":..,
//	 "data":<event data>,"metadata":{..},"recorded_at":"2006-01-02T15:04:05.000Z","hash":..}
//
// With stream set, only that stream's events are written, in revision order.
// Data is written byte for byte, so an auditor can recompute the hashes from
// the export, except that data containing raw line breaks is compacted to
// keep one event per line. Other applications' events on a shared store
// (Foreign) are not Mailroom's to export: foreign counts those skipped.
// It returns the number of events written, and has written them to w even
// when it fails part way.
func Export(ctx context.Context, s Store, from Position, stream string, w io.Writer) (written, foreign int, err error) {
	bw := bufio.NewWriter(w)
	defer func() {
		if ferr := bw.Flush(); err == nil {
			err = ferr
		}
	}()
	ours := map[string]bool{} // streams with Mailroom's events: all of theirs are exported
	looked := map[string]bool{}
	write := func(evs []RecordedEvent) error {
		for _, e := range evs {
			if !from.Less(e.Position) {
				continue
			}
			if e.Foreign && !ours[e.StreamID] && stream == "" && from != Start && !looked[e.StreamID] {
				// Its stream's earlier events are before from, unread: they
				// tell whether it is one of Mailroom's, as a whole export knows.
				looked[e.StreamID] = true
				held, err := holdsOurs(ctx, s, e.StreamID, e.StreamRevision)
				if err != nil {
					return err
				}
				ours[e.StreamID] = held
			}
			if e.Foreign && !ours[e.StreamID] {
				foreign++
				continue
			}
			ours[e.StreamID] = true
			if err := writeExportLine(bw, e); err != nil {
				return err
			}
			written++
		}
		return nil
	}
	if stream == "" {
		pos := from
		for {
			evs, err := s.ReadAll(ctx, pos, auditBatch)
			if err != nil {
				return written, foreign, err
			}
			if len(evs) == 0 {
				return written, foreign, nil
			}
			if err := write(evs); err != nil {
				return written, foreign, err
			}
			pos = evs[len(evs)-1].Position
		}
	}
	for rev := uint64(0); ; {
		evs, err := s.ReadStream(ctx, stream, rev, auditBatch)
		if err != nil {
			return written, foreign, err
		}
		if len(evs) == 0 {
			return written, foreign, nil
		}
		if err := write(evs); err != nil {
			return written, foreign, err
		}
		rev = evs[len(evs)-1].StreamRevision + 1
	}
}

// holdsOurs tells whether stream has one of Mailroom's events before
// revision before.
func holdsOurs(ctx context.Context, s Store, stream string, before uint64) (bool, error) {
	for rev := uint64(0); rev < before; {
		evs, err := s.ReadStream(ctx, stream, rev, auditBatch)
		if err != nil || len(evs) == 0 {
			return false, err
		}
		for _, e := range evs {
			if e.StreamRevision >= before {
				return false, nil
			}
			if !e.Foreign {
				return true, nil
			}
		}
		rev = evs[len(evs)-1].StreamRevision + 1
	}
	return false, nil
}

func writeExportLine(w *bufio.Writer, e RecordedEvent) error {
	head, err := json.Marshal(exportHead{
		Position: e.Position.String(), Stream: e.StreamID, Revision: e.StreamRevision,
		EventID: e.ID.String(), Type: e.Type, SchemaVersion: e.SchemaVersion,
	})
	if err != nil {
		return err
	}
	data := []byte(e.Data)
	if !json.Valid(data) {
		return fmt.Errorf("export %s@%d: data is not JSON", e.StreamID, e.StreamRevision)
	}
	if bytes.ContainsAny(data, "\r\n") {
		var buf bytes.Buffer
		if err := json.Compact(&buf, data); err != nil {
			return err
		}
		data = buf.Bytes()
	}
	meta, err := json.Marshal(e.Metadata) // the same bytes ChainHash hashes
	if err != nil {
		return err
	}
	tail, err := json.Marshal(struct {
		RecordedAt string `json:"recorded_at"`
		Hash       string `json:"hash"`
	}{e.RecordedAt.UTC().Format("2006-01-02T15:04:05.000Z"), e.Hash})
	if err != nil {
		return err
	}
	w.Write(head[:len(head)-1]) // drop the closing brace
	w.WriteString(`,"data":`)
	w.Write(data)
	w.WriteString(`,"metadata":`)
	w.Write(meta)
	w.WriteString(",")
	w.Write(tail[1:]) // drop the opening brace
	return w.WriteByte('\n')
}
