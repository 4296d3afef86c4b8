// Package memory is an event store held in memory, for tests and local
// experiments: it keeps nothing across restarts and is not for production.
// It passes the same contract suite as the PostgreSQL and EventStoreDB
// adapters, so code tested on it sees the semantics of the real stores:
// expected versions, multi-stream appends that are all or nothing, one
// global order, hash chains, and subscriptions that catch up then go live.
package memory

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/internal/eventstore"
)

// ErrClosed is returned by every call after the store, or a subscription,
// was closed.
var ErrClosed = errors.New("eventstore/memory: closed")

// Store is an in-memory event store. It is safe for concurrent use. An
// event's position is its place in the global log, counted from 1, as both
// Commit and Prepare: appends are serialised, so the order positions are
// handed out in is the order events become readable in.
type Store struct {
	mu      sync.Mutex
	log     []eventstore.RecordedEvent // the global log, in position order
	streams map[string][]int           // each stream's events, as indexes into log
	changed chan struct{}              // closed and replaced by every append
	done    chan struct{}              // closed by Close
	closed  bool
}

var (
	_ eventstore.Store   = (*Store)(nil)
	_ eventstore.Counter = (*Store)(nil)
)

// New returns an empty store.
func New() *Store {
	return &Store{streams: map[string][]int{}, changed: make(chan struct{}), done: make(chan struct{})}
}

// Close ends the store's subscriptions; every call after it fails with
// ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.done)
	}
	return nil
}

// Append writes events at the end of stream if expected holds. An event
// with a nil ID gets a random one. Appending no events only checks
// expected; its result carries the stream's last revision and a zero
// Position.
func (s *Store) Append(ctx context.Context, stream string, expected eventstore.ExpectedVersion, events ...eventstore.EventData) (eventstore.AppendResult, error) {
	if stream == "" {
		return eventstore.AppendResult{}, errors.New("eventstore/memory: empty stream name")
	}
	if len(events) == 0 {
		return s.check(ctx, stream, expected)
	}
	res, err := s.AppendMany(ctx, eventstore.StreamAppend{Stream: stream, Expected: expected, Events: events})
	if err != nil {
		return eventstore.AppendResult{}, err
	}
	return res[0], nil
}

// AppendMany writes every part or none, as PostgreSQL's one transaction
// does. Each part must name a different stream and carry at least one
// event. A *ConflictError names the first part, in the caller's order,
// whose expectation fails.
func (s *Store) AppendMany(ctx context.Context, parts ...eventstore.StreamAppend) ([]eventstore.AppendResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(parts) == 0 {
		return nil, nil
	}
	prepared, err := prepare(parts)
	if err != nil {
		return nil, err
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	for _, p := range prepared {
		if last, exists := s.head(p.Stream); !p.Expected.Satisfied(last, exists) {
			return nil, &eventstore.ConflictError{Stream: p.Stream, Expected: p.Expected, Actual: last, ActualExists: exists}
		}
	}
	now := time.Now().Truncate(time.Microsecond) // as precise as PostgreSQL keeps it
	res := make([]eventstore.AppendResult, len(prepared))
	for i, p := range prepared {
		idx := s.streams[p.Stream]
		prev := ""
		if len(idx) > 0 {
			prev = s.log[idx[len(idx)-1]].Hash
		}
		for _, ev := range p.Events {
			rev := uint64(len(idx))
			n := uint64(len(s.log)) + 1
			prev = eventstore.ChainHash(prev, p.Stream, rev, ev)
			s.log = append(s.log, eventstore.RecordedEvent{
				ID: ev.ID, StreamID: p.Stream, StreamRevision: rev, Position: eventstore.Position{Commit: n, Prepare: n},
				Type: ev.Type, SchemaVersion: ev.SchemaVersion, Data: ev.Data, Metadata: ev.Metadata,
				RecordedAt: now, Hash: prev,
			})
			idx = append(idx, len(s.log)-1)
		}
		s.streams[p.Stream] = idx
		last := s.log[len(s.log)-1]
		res[i] = eventstore.AppendResult{NextRevision: last.StreamRevision, Position: last.Position}
	}
	close(s.changed)
	s.changed = make(chan struct{})
	return res, nil
}

// prepare checks parts as the PostgreSQL adapter does and copies them, so
// that the caller may reuse its slices and bytes.
func prepare(parts []eventstore.StreamAppend) ([]eventstore.StreamAppend, error) {
	if err := eventstore.CheckParts(parts); err != nil {
		return nil, err
	}
	out := make([]eventstore.StreamAppend, len(parts))
	for i, p := range parts {
		events := make([]eventstore.EventData, len(p.Events))
		for j, ev := range p.Events {
			if ev.ID == uuid.Nil {
				ev.ID = uuid.New()
			}
			ev.Data = bytes.Clone(ev.Data)
			events[j] = ev
		}
		out[i] = eventstore.StreamAppend{Stream: p.Stream, Expected: p.Expected, Events: events}
	}
	return out, nil
}

// head is a stream's last revision and whether it has events; s.mu must be
// held.
func (s *Store) head(stream string) (last uint64, exists bool) {
	idx := s.streams[stream]
	if len(idx) == 0 {
		return 0, false
	}
	return uint64(len(idx) - 1), true
}

// check serves an append of no events.
func (s *Store) check(ctx context.Context, stream string, expected eventstore.ExpectedVersion) (eventstore.AppendResult, error) {
	if err := ctx.Err(); err != nil {
		return eventstore.AppendResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return eventstore.AppendResult{}, ErrClosed
	}
	last, exists := s.head(stream)
	if !expected.Satisfied(last, exists) {
		return eventstore.AppendResult{}, &eventstore.ConflictError{Stream: stream, Expected: expected, Actual: last, ActualExists: exists}
	}
	return eventstore.AppendResult{NextRevision: last}, nil
}

// ReadStream returns up to max events of stream from revision from on.
func (s *Store) ReadStream(ctx context.Context, stream string, from uint64, max int) ([]eventstore.RecordedEvent, error) {
	if max <= 0 {
		return nil, fmt.Errorf("eventstore/memory: read %s: max must be positive, got %d", stream, max)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	idx, ok := s.streams[stream]
	if !ok {
		return nil, eventstore.ErrStreamNotFound
	}
	if from >= uint64(len(idx)) {
		return nil, nil
	}
	idx = idx[from:]
	out := make([]eventstore.RecordedEvent, min(max, len(idx)))
	for i := range out {
		out[i] = recorded(s.log[idx[i]])
	}
	return out, nil
}

// ReadAll returns up to max events positioned after from.
func (s *Store) ReadAll(ctx context.Context, from eventstore.Position, max int) ([]eventstore.RecordedEvent, error) {
	if max <= 0 {
		return nil, fmt.Errorf("eventstore/memory: read $all: max must be positive, got %d", max)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	after := s.log[s.after(from):]
	out := make([]eventstore.RecordedEvent, min(max, len(after)))
	for i := range out {
		out[i] = recorded(after[i])
	}
	return out, nil
}

// CountAfter counts the events positioned after from, up to limit when it
// is positive.
func (s *Store) CountAfter(ctx context.Context, from eventstore.Position, limit int64) (int64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return 0, ErrClosed
	}
	n := int64(len(s.log) - s.after(from))
	if limit > 0 {
		n = min(n, limit)
	}
	return n, nil
}

// after is the index in the log of the first event positioned after from;
// s.mu must be held.
func (s *Store) after(from eventstore.Position) int {
	return sort.Search(len(s.log), func(i int) bool { return from.Less(s.log[i].Position) })
}

// recorded is a copy of a stored event that its reader may change freely.
func recorded(e eventstore.RecordedEvent) eventstore.RecordedEvent {
	e.Data = bytes.Clone(e.Data)
	return e
}

// SubscribeAll delivers every event positioned after from: those in the
// log now, then each one as it is appended.
func (s *Store) SubscribeAll(ctx context.Context, from eventstore.Position) (eventstore.Subscription, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	return &subscription{store: s, pos: from, closed: make(chan struct{})}, nil
}

type subscription struct {
	store     *Store
	pos       eventstore.Position // position of the last event handed out
	closed    chan struct{}
	closeOnce sync.Once
}

// Next returns the event after the last one returned, waiting for it to be
// appended when there is none yet.
func (sub *subscription) Next(ctx context.Context) (eventstore.RecordedEvent, error) {
	for {
		select {
		case <-sub.closed:
			return eventstore.RecordedEvent{}, ErrClosed
		default:
		}
		e, ok, changed, err := sub.store.next(sub.pos)
		if err != nil {
			return eventstore.RecordedEvent{}, err
		}
		if ok {
			sub.pos = e.Position
			return e, nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return eventstore.RecordedEvent{}, ctx.Err()
		case <-sub.closed:
			return eventstore.RecordedEvent{}, ErrClosed
		case <-sub.store.done:
			return eventstore.RecordedEvent{}, ErrClosed
		}
	}
}

// next is the event after pos if there is one, else the channel the next
// append closes: taken under the same lock, so no append falls between.
func (s *Store) next(pos eventstore.Position) (e eventstore.RecordedEvent, ok bool, changed <-chan struct{}, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return e, false, nil, ErrClosed
	}
	if i := s.after(pos); i < len(s.log) {
		return recorded(s.log[i]), true, nil, nil
	}
	return e, false, s.changed, nil
}

// Close ends the subscription; a Next waiting meanwhile returns ErrClosed.
func (sub *subscription) Close() error {
	sub.closeOnce.Do(func() { close(sub.closed) })
	return nil
}
