// Package esdb is the EventStoreDB / KurrentDB adapter of the event store
// port, on EventStore-Client-Go v4.
//
// Each event is written with content type JSON; our metadata (correlation,
// causation, actor, request id, client request id, schema version and the
// hash chaining the event to the previous one of its stream) travels as the
// event's custom metadata, a JSON object. System events (types or streams starting with
// "$") are never returned by ReadAll or SubscribeAll.
//
// To compute an event's hash the adapter reads the stream's last event first
// and then appends with that exact revision, so the chain cannot fork: an
// Any or StreamExists append that loses the race re-reads and tries again;
// a NoStream or Exact append that loses it is the caller's conflict.
package esdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/connstr"
	"github.com/mailroom/mailroom/internal/eventstore"
)

// ErrClosed is returned after the store or a subscription was closed.
var ErrClosed = errors.New("eventstore/esdb: closed")

// maxAttempts bounds how often an Any or StreamExists append re-reads the
// stream head after losing a race, so a stream the server refuses in some
// other way (a soft-deleted one) cannot loop for ever.
const maxAttempts = 64

// readPage bounds how many events one ReadAll call asks the server for.
const readPage = 1024

// Store is the EventStoreDB event store. It is safe for concurrent use.
type Store struct {
	cfg *esdb.Configuration
	log *slog.Logger

	mu     sync.Mutex
	cur    *client // the client new calls use
	closed bool
	subs   map[*subscription]struct{}
}

var _ eventstore.Store = (*Store)(nil)

// client is one esdb.Client with the calls in flight on it. The library's
// client gives up for good when node discovery fails (and a call racing that
// can block in it forever), so a dead client is replaced and closed once no
// call of ours is inside it.
type client struct {
	c        *esdb.Client
	inflight int
	retired  bool
	shut     bool
}

// New returns a store for an esdb:// (or esdb+discover://) connection
// string, e.g. "esdb://127.0.0.1:2113?tls=false". It does not connect:
// the first call does, and Ping checks the server is there.
func New(connectionString string) (*Store, error) {
	cfg, err := parse(connectionString)
	if err != nil {
		return nil, fmt.Errorf("eventstore/esdb: %w", err)
	}
	s := &Store{log: slog.Default().With("component", "eventstore/esdb"), subs: map[*subscription]struct{}{}}
	cfg.Logger = clientLogger(s.log)
	s.cfg = cfg
	c, err := esdb.NewClient(cfg)
	if err != nil {
		return nil, fmt.Errorf("eventstore/esdb: %w", err)
	}
	s.cur = &client{c: c}
	return s, nil
}

// CheckConnectionString reports whether New can use connectionString,
// without connecting.
func CheckConnectionString(connectionString string) error {
	_, err := parse(connectionString)
	return err
}

// parse reads a connection string; its errors never quote it, as
// url.Error does, credentials included.
func parse(connectionString string) (*esdb.Configuration, error) {
	// Checked first: the client would quote the password's rest as a path
	// or log it as an unknown setting.
	if connstr.MisplacedCredentials(connectionString, "/?#") {
		return nil, fmt.Errorf("connection string: %w", connstr.ErrMisplacedCredentials)
	}
	cfg, err := esdb.ParseConnectionString(connectionString)
	if err != nil {
		var ee url.EscapeError
		if errors.As(err, &ee) {
			return nil, errors.New(`connection string: a "%" is not followed by two hex digits (write "%" as %25)`)
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, fmt.Errorf("connection string: %v", err)
	}
	return cfg, nil
}

// clientLogger routes the library's log lines to slog at debug level: it
// logs routine things (a subscription we closed) as errors, and every
// failure it logs also reaches the adapter, which reports what matters.
func clientLogger(l *slog.Logger) esdb.LoggingFunc {
	return func(level esdb.LogLevel, format string, args ...interface{}) {
		l.Debug("client: "+fmt.Sprintf(format, args...), "level", level)
	}
}

// Close closes every open subscription and the connection (once the calls in
// flight have returned). Calls after Close fail with ErrClosed.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	subs := make([]*subscription, 0, len(s.subs))
	for sub := range s.subs {
		subs = append(subs, sub)
	}
	s.mu.Unlock()
	for _, sub := range subs {
		sub.Close()
	}
	s.mu.Lock()
	s.cur.retired = true
	s.shutIfIdle(s.cur)
	s.mu.Unlock()
	return nil
}

// call runs op on the current client. It returns when op does or when ctx
// ends, whichever is first (the library does not always honour ctx). A call
// that found the client dead never reached the server, so it is tried once
// more on the replacement.
func call[T any](ctx context.Context, s *Store, op func(ctx context.Context, c *esdb.Client) (T, error)) (T, error) {
	v, err := callOnce(ctx, s, op)
	if err != nil && ctx.Err() == nil && clientDead(err) {
		v, err = callOnce(ctx, s, op)
	}
	return v, err
}

func callOnce[T any](ctx context.Context, s *Store, op func(ctx context.Context, c *esdb.Client) (T, error)) (T, error) {
	var zero T
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return zero, ErrClosed
	}
	c := s.cur
	c.inflight++
	s.mu.Unlock()

	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := op(ctx, c.c)
		s.release(c, err)
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		return zero, ctx.Err()
	}
}

// release ends a call on c, replacing c if the call found it dead.
func (s *Store) release(c *client, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c.inflight--
	if err != nil && c == s.cur && !s.closed && clientDead(err) {
		if nc, nerr := esdb.NewClient(s.cfg); nerr == nil {
			s.log.Info("reconnecting: the client gave up on the server", "err", err)
			c.retired = true
			s.cur = &client{c: nc}
		}
	}
	s.shutIfIdle(c)
}

// shutIfIdle closes a retired client with no call in flight. Caller holds s.mu.
func (s *Store) shutIfIdle(c *client) {
	if c.retired && c.inflight == 0 && !c.shut {
		c.shut = true
		go c.c.Close()
	}
}

// clientDead reports an error after which the library's client refuses
// every call: it closed itself when node discovery failed.
func clientDead(err error) bool {
	var e *esdb.Error
	if errors.As(err, &e) && e.Code() == esdb.ErrorCodeConnectionClosed {
		return true
	}
	return strings.Contains(err.Error(), "maximum discovery attempt count reached")
}

// Ping checks that the server answers a read of $all.
func (s *Store) Ping(ctx context.Context) error {
	_, err := call(ctx, s, func(ctx context.Context, c *esdb.Client) (struct{}, error) {
		rs, err := c.ReadAll(ctx, esdb.ReadAllOptions{From: esdb.End{}, Direction: esdb.Backwards}, 1)
		if err != nil {
			return struct{}{}, err
		}
		defer rs.Close()
		if _, err := rs.Recv(); err != nil && !errors.Is(err, io.EOF) {
			return struct{}{}, err
		}
		return struct{}{}, nil
	})
	if err != nil {
		return fmt.Errorf("eventstore/esdb: ping: %w", err)
	}
	return nil
}

// ---- events on the wire ----

// meta is the custom metadata of every event the adapter writes.
type meta struct {
	CorrelationID   string `json:"correlation_id,omitempty"`
	CausationID     string `json:"causation_id,omitempty"`
	Actor           string `json:"actor,omitempty"`
	RequestID       string `json:"request_id,omitempty"`
	ClientRequestID string `json:"client_request_id,omitempty"`
	SchemaVersion   int    `json:"schema_version"`
	Hash            string `json:"hash"`
}

// unknownPosition is what older servers report as the commit position of an
// event read from a stream rather than from $all.
const unknownPosition = math.MaxUint64

// position converts a server position. Since 20.x every event the gRPC API
// writes has commit == prepare, so a half the server left unknown (stream
// reads on older servers) is filled from the other; a commit below the
// prepare cannot be real either.
func position(p esdb.Position) eventstore.Position {
	switch {
	case p.Commit == unknownPosition && p.Prepare != unknownPosition:
		p.Commit = p.Prepare
	case p.Prepare == unknownPosition && p.Commit != unknownPosition:
		p.Prepare = p.Commit
	case p.Commit < p.Prepare:
		p.Commit = p.Prepare
	}
	return eventstore.Position{Commit: p.Commit, Prepare: p.Prepare}
}

// recorded converts an event read from the server. Custom metadata that is
// not ours (an event written by another application) leaves our fields
// empty, and an event without a hash that could not be Mailroom's
// (codec.Ours) is marked Foreign: every event the adapter writes carries a
// hash.
func recorded(e *esdb.RecordedEvent) eventstore.RecordedEvent {
	var m meta
	_ = json.Unmarshal(e.UserMetadata, &m)
	return eventstore.RecordedEvent{
		ID:             e.EventID,
		StreamID:       e.StreamID,
		StreamRevision: e.EventNumber,
		Position:       position(e.Position),
		Type:           e.EventType,
		SchemaVersion:  m.SchemaVersion,
		Data:           json.RawMessage(e.Data),
		Metadata: eventstore.Metadata{
			CorrelationID:   m.CorrelationID,
			CausationID:     m.CausationID,
			Actor:           m.Actor,
			RequestID:       m.RequestID,
			ClientRequestID: m.ClientRequestID,
		},
		RecordedAt: e.CreatedDate,
		Hash:       m.Hash,
		// Mailroom writes a hash with every event; one that could be
		// Mailroom's without one is a break for the audit to report, not
		// another application's event.
		Foreign: m.Hash == "" && !codec.Ours(e.StreamID, e.EventType),
	}
}

// isSystem reports an EventStoreDB system event: its type or stream starts
// with "$" (stream metadata, links, projection state, statistics).
func isSystem(e *esdb.RecordedEvent) bool {
	return strings.HasPrefix(e.EventType, "$") || strings.HasPrefix(e.StreamID, "$")
}

// ---- Append ----

// Append writes events at the end of stream in one write. An event with a
// nil ID gets a random one. Appending no events only checks expected
// (returning a *ConflictError on mismatch); its result carries the stream's
// last revision and a zero Position.
func (s *Store) Append(ctx context.Context, stream string, expected eventstore.ExpectedVersion, events ...eventstore.EventData) (eventstore.AppendResult, error) {
	if stream == "" {
		return eventstore.AppendResult{}, errors.New("eventstore/esdb: empty stream name")
	}
	events = append([]eventstore.EventData(nil), events...) // do not touch the caller's slice
	for i := range events {
		ev := &events[i]
		if ev.ID == uuid.Nil {
			ev.ID = uuid.New()
		}
		if ev.Type == "" {
			return eventstore.AppendResult{}, fmt.Errorf("eventstore/esdb: append to %s: event %d has no type", stream, i)
		}
		if !json.Valid(ev.Data) {
			return eventstore.AppendResult{}, fmt.Errorf("eventstore/esdb: append to %s: event %d data is not valid JSON", stream, i)
		}
	}
	for attempt := 1; ; attempt++ {
		h, err := s.head(ctx, stream)
		if err != nil {
			return eventstore.AppendResult{}, err
		}
		if !expected.Satisfied(h.revision, h.exists) {
			return eventstore.AppendResult{}, h.conflict(stream, expected)
		}
		if len(events) == 0 {
			return eventstore.AppendResult{NextRevision: h.revision}, nil
		}
		res, err := s.appendAt(ctx, stream, h, events)
		var c *eventstore.ConflictError
		if errors.As(err, &c) {
			retry := expected.IsAny() || (expected.IsStreamExists() && c.ActualExists)
			if retry && attempt < maxAttempts {
				continue // the stream moved since we read its head; the condition still holds
			}
			c.Expected = expected
		}
		return res, err
	}
}

// AppendMany appends the parts one after the other: EventStoreDB has no
// transaction across streams, so an error may leave earlier parts written.
func (s *Store) AppendMany(ctx context.Context, parts ...eventstore.StreamAppend) ([]eventstore.AppendResult, error) {
	if err := eventstore.CheckParts(parts); err != nil {
		return nil, err
	}
	res := make([]eventstore.AppendResult, 0, len(parts))
	for _, p := range parts {
		r, err := s.Append(ctx, p.Stream, p.Expected, p.Events...)
		if err != nil {
			return nil, err
		}
		res = append(res, r)
	}
	return res, nil
}

// head is a stream's last event as far as appends care.
type head struct {
	exists   bool
	revision uint64
	hash     string
}

func (h head) conflict(stream string, expected eventstore.ExpectedVersion) *eventstore.ConflictError {
	return &eventstore.ConflictError{Stream: stream, Expected: expected, Actual: h.revision, ActualExists: h.exists}
}

// head reads the last event of stream (backwards from the end, one event).
func (s *Store) head(ctx context.Context, stream string) (head, error) {
	h, err := call(ctx, s, func(ctx context.Context, c *esdb.Client) (head, error) {
		rs, err := c.ReadStream(ctx, stream, esdb.ReadStreamOptions{From: esdb.End{}, Direction: esdb.Backwards}, 1)
		if err != nil {
			return head{}, err
		}
		defer rs.Close()
		ev, err := rs.Recv()
		if errors.Is(err, io.EOF) || isNotFound(err) {
			return head{}, nil
		}
		if err != nil {
			return head{}, err
		}
		e := recorded(ev.OriginalEvent())
		return head{exists: true, revision: e.StreamRevision, hash: e.Hash}, nil
	})
	if err != nil {
		return head{}, fmt.Errorf("eventstore/esdb: read head of %s: %w", stream, err)
	}
	return h, nil
}

// appendAt appends events right after h, expecting exactly h.
func (s *Store) appendAt(ctx context.Context, stream string, h head, events []eventstore.EventData) (eventstore.AppendResult, error) {
	var exp esdb.ExpectedRevision = esdb.NoStream{}
	next := uint64(0)
	if h.exists {
		exp = esdb.Revision(h.revision)
		next = h.revision + 1
	}
	prev := h.hash
	data := make([]esdb.EventData, len(events))
	for i, ev := range events {
		prev = eventstore.ChainHash(prev, stream, next+uint64(i), ev)
		m, err := json.Marshal(meta{
			CorrelationID:   ev.Metadata.CorrelationID,
			CausationID:     ev.Metadata.CausationID,
			Actor:           ev.Metadata.Actor,
			RequestID:       ev.Metadata.RequestID,
			ClientRequestID: ev.Metadata.ClientRequestID,
			SchemaVersion:   ev.SchemaVersion,
			Hash:            prev,
		})
		if err != nil {
			return eventstore.AppendResult{}, err
		}
		data[i] = esdb.EventData{
			EventID:     ev.ID,
			EventType:   ev.Type,
			ContentType: esdb.ContentTypeJson,
			Data:        ev.Data,
			Metadata:    m,
		}
	}
	wr, err := call(ctx, s, func(ctx context.Context, c *esdb.Client) (*esdb.WriteResult, error) {
		return c.AppendToStream(ctx, stream, esdb.AppendToStreamOptions{ExpectedRevision: exp}, data...)
	})
	if err != nil {
		var e *esdb.Error
		if errors.As(err, &e) && e.Code() == esdb.ErrorCodeWrongExpectedVersion {
			c := &eventstore.ConflictError{Stream: stream}
			if rev, exists, ok := actualRevision(e); ok {
				c.Actual, c.ActualExists = rev, exists
			} else if h2, herr := s.head(ctx, stream); herr == nil {
				c.Actual, c.ActualExists = h2.revision, h2.exists
			} else {
				return eventstore.AppendResult{}, fmt.Errorf("eventstore/esdb: append to %s: %w (and %v)", stream, err, herr)
			}
			return eventstore.AppendResult{}, c
		}
		if strings.Contains(err.Error(), "Maximum Append Size") {
			return eventstore.AppendResult{}, fmt.Errorf("eventstore/esdb: append to %s: %w (%v)", stream, eventstore.ErrTooLarge, err)
		}
		return eventstore.AppendResult{}, fmt.Errorf("eventstore/esdb: append to %s: %w", stream, err)
	}
	return eventstore.AppendResult{
		NextRevision: next + uint64(len(events)) - 1,
		Position:     position(esdb.Position{Commit: wr.CommitPosition, Prepare: wr.PreparePosition}),
	}, nil
}

// wrongVersion matches the client's wrong-expected-version message, the
// only place it reports the stream's actual revision.
var wrongVersion = regexp.MustCompile(`but got '([^']*)'`)

func actualRevision(e *esdb.Error) (rev uint64, exists, ok bool) {
	if e.Err() == nil {
		return 0, false, false
	}
	m := wrongVersion.FindStringSubmatch(e.Err().Error())
	if m == nil {
		return 0, false, false
	}
	if m[1] == "no_stream" {
		return 0, false, true
	}
	n, err := strconv.ParseUint(m[1], 10, 64)
	if err != nil {
		return 0, false, false
	}
	return n, true, true
}

func isNotFound(err error) bool {
	var e *esdb.Error
	return errors.As(err, &e) && (e.Code() == esdb.ErrorCodeResourceNotFound || e.Code() == esdb.ErrorCodeStreamDeleted)
}

// ---- reads ----

// ReadStream returns up to max events of stream from revision from on.
func (s *Store) ReadStream(ctx context.Context, stream string, from uint64, max int) ([]eventstore.RecordedEvent, error) {
	if max <= 0 {
		return nil, fmt.Errorf("eventstore/esdb: read %s: max must be positive, got %d", stream, max)
	}
	evs, err := call(ctx, s, func(ctx context.Context, c *esdb.Client) ([]eventstore.RecordedEvent, error) {
		rs, err := c.ReadStream(ctx, stream, esdb.ReadStreamOptions{From: esdb.Revision(from), Direction: esdb.Forwards}, uint64(max))
		if err != nil {
			return nil, err
		}
		defer rs.Close()
		var out []eventstore.RecordedEvent
		for {
			ev, err := rs.Recv()
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			if err != nil {
				return nil, err
			}
			out = append(out, recorded(ev.OriginalEvent()))
		}
	})
	if isNotFound(err) {
		return nil, fmt.Errorf("eventstore/esdb: read %s: %w", stream, eventstore.ErrStreamNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("eventstore/esdb: read %s: %w", stream, err)
	}
	return evs, nil
}

// ReadAll returns up to max non-system events positioned strictly after
// from.
func (s *Store) ReadAll(ctx context.Context, from eventstore.Position, max int) ([]eventstore.RecordedEvent, error) {
	if max <= 0 {
		return nil, fmt.Errorf("eventstore/esdb: read $all: max must be positive, got %d", max)
	}
	var out []eventstore.RecordedEvent
	err := s.walkAll(ctx, from, max, func(e *esdb.RecordedEvent) { out = append(out, recorded(e)) })
	return out, err
}

var _ eventstore.Counter = (*Store)(nil)

// CountAfter counts the non-system events positioned after from, up to
// limit. The server keeps no count, so the events are read (and dropped):
// a count costs as much as reading as many events, which is why it needs a
// bound. Lag and readiness give one; without one (limit <= 0) it is
// errors.ErrUnsupported, and a rebuild's progress has no total.
func (s *Store) CountAfter(ctx context.Context, from eventstore.Position, limit int64) (int64, error) {
	if limit <= 0 {
		return 0, fmt.Errorf("eventstore/esdb: counting the whole log means reading it: %w", errors.ErrUnsupported)
	}
	var n int64
	err := s.walkAll(ctx, from, int(min(limit, math.MaxInt32)), func(*esdb.RecordedEvent) { n++ })
	return n, err
}

// walkAll calls take for up to max non-system events positioned strictly
// after from, in order. The server reads $all inclusively and has no
// filter on plain reads, so the event at from and system events are
// skipped here.
func (s *Store) walkAll(ctx context.Context, from eventstore.Position, max int, take func(*esdb.RecordedEvent)) error {
	taken := 0
	pos, atStart := from, from == eventstore.Start
	for taken < max {
		page := min(max-taken+1, readPage) // +1: the event at pos comes back too
		var start esdb.AllPosition = esdb.Position{Commit: pos.Commit, Prepare: pos.Prepare}
		if atStart {
			start = esdb.Start{}
		}
		evs, err := call(ctx, s, func(ctx context.Context, c *esdb.Client) ([]*esdb.RecordedEvent, error) {
			rs, err := c.ReadAll(ctx, esdb.ReadAllOptions{From: start, Direction: esdb.Forwards}, uint64(page))
			if err != nil {
				return nil, err
			}
			defer rs.Close()
			var evs []*esdb.RecordedEvent
			for {
				ev, err := rs.Recv()
				if errors.Is(err, io.EOF) {
					return evs, nil
				}
				if err != nil {
					return nil, err
				}
				if e := ev.OriginalEvent(); e != nil {
					evs = append(evs, e)
				}
			}
		})
		if err != nil {
			return fmt.Errorf("eventstore/esdb: read $all from %s: %w", pos, err)
		}
		for _, e := range evs {
			p := position(e.Position)
			if !atStart && !pos.Less(p) {
				continue
			}
			pos, atStart = p, false
			if isSystem(e) {
				continue
			}
			take(e)
			if taken++; taken == max {
				break
			}
		}
		if len(evs) < page {
			break // end of the log
		}
	}
	return nil
}

// permanent reports an error that retrying will not cure.
func permanent(err error) bool {
	var e *esdb.Error
	if errors.As(err, &e) {
		switch e.Code() {
		case esdb.ErrorCodeUnauthenticated, esdb.ErrorCodeAccessDenied, esdb.ErrorCodeUnsupportedFeature:
			return true
		}
	}
	if st, ok := status.FromError(err); ok {
		switch st.Code() {
		case codes.Unauthenticated, codes.PermissionDenied, codes.Unimplemented, codes.InvalidArgument:
			return true
		}
	}
	return false
}
