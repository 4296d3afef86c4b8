// Package eventstore defines the port through which Mailroom appends and reads
// events. The semantics mirror EventStoreDB so that the PostgreSQL adapter
// (the embedded default) and the EventStoreDB adapter pass one contract suite.
package eventstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
)

// Store is the event store port.
type Store interface {
	// Append writes events to the end of a stream if the stream's current
	// version satisfies expected. A mismatch returns a *ConflictError.
	Append(ctx context.Context, stream string, expected ExpectedVersion, events ...EventData) (AppendResult, error)

	// AppendMany appends to several streams at once, one result per part in
	// the caller's order. On PostgreSQL it is one transaction: every part is
	// written or none is, and a *ConflictError names the first part whose
	// expectation failed. An EventStoreDB has no multi-stream transaction, so
	// there the parts are appended one after the other and an error may
	// leave earlier parts written: callers must be able to repeat it (each
	// part idempotent, as every process manager's work is).
	AppendMany(ctx context.Context, parts ...StreamAppend) ([]AppendResult, error)

	// ReadStream returns up to max events of stream, starting at revision from
	// (inclusive), in revision order. A stream that does not exist yields
	// ErrStreamNotFound.
	ReadStream(ctx context.Context, stream string, from uint64, max int) ([]RecordedEvent, error)

	// ReadAll returns up to max events of the global log positioned strictly
	// after from, in global order. Start is before the first event.
	ReadAll(ctx context.Context, from Position, max int) ([]RecordedEvent, error)

	// SubscribeAll delivers every event positioned strictly after from: first
	// the history (catch-up), then new events as they are committed. It never
	// skips an event, even when transactions commit out of order.
	SubscribeAll(ctx context.Context, from Position) (Subscription, error)

	// Close releases the store's resources.
	Close() error
}

// Subscription is a live feed of the global log.
type Subscription interface {
	// Next blocks until the next event is available, ctx is done, or the
	// subscription fails.
	Next(ctx context.Context) (RecordedEvent, error)
	Close() error
}

// Position is a point in the global log. It mirrors EventStoreDB's
// commit/prepare pair; the PostgreSQL adapter stores the committing
// transaction id in Commit and a sequence number in Prepare. Positions are
// ordered by Commit, then Prepare.
type Position struct {
	Commit  uint64 `json:"commit"`
	Prepare uint64 `json:"prepare"`
}

// Start is the position before the first event.
var Start = Position{}

// Less reports whether p comes before q in the global log.
func (p Position) Less(q Position) bool {
	if p.Commit != q.Commit {
		return p.Commit < q.Commit
	}
	return p.Prepare < q.Prepare
}

// String renders the position as "commit/prepare".
func (p Position) String() string { return fmt.Sprintf("%d/%d", p.Commit, p.Prepare) }

// ParsePosition reads the "commit/prepare" form written by String, and
// nothing else: an export from a mistyped position would start elsewhere.
func ParsePosition(s string) (Position, error) {
	commit, prepare, ok := strings.Cut(s, "/")
	c, cerr := strconv.ParseUint(commit, 10, 64)
	p, perr := strconv.ParseUint(prepare, 10, 64)
	if !ok || cerr != nil || perr != nil {
		return Position{}, fmt.Errorf("position %q: want COMMIT/PREPARE, two whole numbers", s)
	}
	return Position{Commit: c, Prepare: p}, nil
}

// ExpectedVersion is the optimistic-concurrency condition of an append.
type ExpectedVersion struct {
	kind     expectedKind
	revision uint64
}

type expectedKind int

const (
	anyVersion expectedKind = iota
	noStream
	streamExists
	exactRevision
)

var (
	// Any appends whatever the stream's state.
	Any = ExpectedVersion{kind: anyVersion}
	// NoStream appends only if the stream has no events.
	NoStream = ExpectedVersion{kind: noStream}
	// StreamExists appends only if the stream has at least one event.
	StreamExists = ExpectedVersion{kind: streamExists}
)

// Exact appends only if the stream's last event has revision rev (revisions
// start at 0).
func Exact(rev uint64) ExpectedVersion { return ExpectedVersion{kind: exactRevision, revision: rev} }

// IsAny, IsNoStream, IsStreamExists and Revision let adapters translate the
// condition into their own terms.
func (e ExpectedVersion) IsAny() bool          { return e.kind == anyVersion }
func (e ExpectedVersion) IsNoStream() bool     { return e.kind == noStream }
func (e ExpectedVersion) IsStreamExists() bool { return e.kind == streamExists }

// Revision returns the exact revision expected and whether one is expected.
func (e ExpectedVersion) Revision() (uint64, bool) { return e.revision, e.kind == exactRevision }

func (e ExpectedVersion) String() string {
	switch e.kind {
	case noStream:
		return "no-stream"
	case streamExists:
		return "stream-exists"
	case exactRevision:
		return fmt.Sprintf("revision %d", e.revision)
	default:
		return "any"
	}
}

// Satisfied reports whether a stream whose last revision is current (exists
// false when the stream has no events) meets the expectation.
func (e ExpectedVersion) Satisfied(current uint64, exists bool) bool {
	switch e.kind {
	case noStream:
		return !exists
	case streamExists:
		return exists
	case exactRevision:
		return exists && current == e.revision
	default:
		return true
	}
}

// ErrTooLarge is returned for an append larger than the store takes in
// one write (EventStoreDB 24.10 and KurrentDB 25.0 take 1 MiB by default).
// Trying again cannot help: the request has to be smaller.
var ErrTooLarge = errors.New("eventstore: the append is larger than the store takes in one write")

// ErrStreamNotFound is returned when reading a stream that has no events.
var ErrStreamNotFound = errors.New("eventstore: stream not found")

// ConflictError reports an append whose expected version did not hold.
type ConflictError struct {
	Stream   string
	Expected ExpectedVersion
	// Actual is the stream's last revision; ActualExists is false when the
	// stream had no events.
	Actual       uint64
	ActualExists bool
}

func (e *ConflictError) Error() string {
	actual := "no stream"
	if e.ActualExists {
		actual = fmt.Sprintf("revision %d", e.Actual)
	}
	return fmt.Sprintf("eventstore: append to %s expected %s, found %s", e.Stream, e.Expected, actual)
}

// IsConflict reports whether err is a *ConflictError.
func IsConflict(err error) bool {
	var c *ConflictError
	return errors.As(err, &c)
}

// Metadata travels with every event. Actor is an API key id, a token id,
// "operator" or "system:<process>". RequestID (and the correlation and
// causation ids derived from it) is generated by the server; a client's own
// X-Request-Id is kept apart in ClientRequestID, since a client may choose
// any value. New fields go last and omitempty, so that older events hash to
// the same bytes (see ChainHash).
type Metadata struct {
	CorrelationID   string `json:"correlation_id,omitempty"`
	CausationID     string `json:"causation_id,omitempty"`
	Actor           string `json:"actor,omitempty"`
	RequestID       string `json:"request_id,omitempty"`
	ClientRequestID string `json:"client_request_id,omitempty"`
}

// EventData is an event about to be appended.
type EventData struct {
	ID            uuid.UUID
	Type          string
	SchemaVersion int
	Data          json.RawMessage
	Metadata      Metadata
}

// RecordedEvent is an event as stored.
type RecordedEvent struct {
	ID             uuid.UUID
	StreamID       string
	StreamRevision uint64
	Position       Position
	Type           string
	SchemaVersion  int
	Data           json.RawMessage
	Metadata       Metadata
	RecordedAt     time.Time
	// Hash chains the event to the previous event of its stream; see ChainHash.
	Hash string
	// Foreign marks another application's event on a shared store
	// (EventStoreDB): no hash, and not of one of Mailroom's types in a
	// stream named as Mailroom's are. Auditing
	// skips it, as readers skip types they do not know, unless its stream
	// holds Mailroom's events.
	Foreign bool
}

// CheckParts refuses an AppendMany that no store could write whole: a part
// without a stream name or events, a stream named twice, an event without
// a type or whose data is not JSON. Stores check it before writing any
// part, so a bad part never leaves the good ones before it written.
func CheckParts(parts []StreamAppend) error {
	seen := make(map[string]bool, len(parts))
	for _, p := range parts {
		if p.Stream == "" {
			return errors.New("eventstore: empty stream name")
		}
		if seen[p.Stream] {
			return fmt.Errorf("eventstore: stream %s appears twice in one append", p.Stream)
		}
		seen[p.Stream] = true
		if len(p.Events) == 0 {
			return fmt.Errorf("eventstore: append to %s has no events", p.Stream)
		}
		for j, ev := range p.Events {
			if ev.Type == "" {
				return fmt.Errorf("eventstore: append to %s: event %d has no type", p.Stream, j)
			}
			if !json.Valid(ev.Data) {
				return fmt.Errorf("eventstore: append to %s: event %d data is not valid JSON", p.Stream, j)
			}
		}
	}
	return nil
}

// StreamAppend is one stream's part of an AppendMany.
type StreamAppend struct {
	Stream   string
	Expected ExpectedVersion
	Events   []EventData
}

// AppendResult tells where the last appended event landed.
type AppendResult struct {
	NextRevision uint64   // revision of the last event written
	Position     Position // global position of the last event written
}

// HeadRecorder is implemented by stores that keep each stream's last
// revision and hash apart from its events (PostgreSQL's streams table).
// Verify checks the log against them, which shows events removed from the
// end of a stream, or added past it, where its chain alone cannot.
type HeadRecorder interface {
	// RecordedHeads returns the recorded heads of the streams named, or of
	// every stream when none is; a stream without one is left out.
	RecordedHeads(ctx context.Context, streams ...string) (map[string]StreamHead, error)
}

// StreamHead is a stream's last revision and that event's hash.
type StreamHead struct {
	Revision uint64
	Hash     string
}

// Pinger is implemented by stores with a cheaper way to tell that they
// answer than reading the start of the log (EventStoreDB's log starts
// with system events, read past one round trip at a time).
type Pinger interface {
	Ping(ctx context.Context) error
}

// Ping checks that s answers: its own Ping, or else a read of the first
// event of the log.
func Ping(ctx context.Context, s Store) error {
	if p, ok := s.(Pinger); ok {
		return p.Ping(ctx)
	}
	_, err := s.ReadAll(ctx, Start, 1)
	return err
}

// Counter is implemented by stores that can count events cheaply; it feeds
// projection lag and rebuild progress.
type Counter interface {
	// CountAfter counts the visible events positioned after from; with
	// limit > 0 it stops counting at limit, so a bound costs no more than it.
	CountAfter(ctx context.Context, from Position, limit int64) (int64, error)
}
