package esdbfake

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/protos/shared"
	"github.com/EventStore/EventStore-Client-Go/v4/protos/streams"
	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Metadata keys every recorded event carries; the client calls log.Fatalf
// when "created" does not parse.
const (
	metaType        = "type"
	metaContentType = "content-type"
	metaCreated     = "created"
)

// streamsService implements Streams.Read and Streams.Append. Delete,
// Tombstone and BatchAppend answer UNIMPLEMENTED.
type streamsService struct {
	streams.UnimplementedStreamsServer
	s *Server
}

// ---- Append ----

// MaxAppendSize is the most one append may carry, the default of
// EventStoreDB 24.10 and KurrentDB 25.0: the strictest a Mailroom in
// production may meet.
const MaxAppendSize = 1 << 20

// Append takes the options message, then the proposed events, and writes
// them atomically if the expected revision holds.
func (a *streamsService) Append(srv streams.Streams_AppendServer) error {
	first, err := srv.Recv()
	if err != nil {
		return err
	}
	opts := first.GetOptions()
	if opts == nil {
		return status.Error(codes.InvalidArgument, "esdbfake: append must start with options")
	}
	name := string(opts.GetStreamIdentifier().GetStreamName())
	if name == "" {
		return status.Error(codes.InvalidArgument, "esdbfake: empty stream name")
	}
	var recs []*record
	size := 0
	for {
		m, err := srv.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		p := m.GetProposedMessage()
		if p == nil {
			return status.Error(codes.InvalidArgument, "esdbfake: expected a proposed message")
		}
		// As the server does, up to its default limit (EventStoreDB 24.10
		// and KurrentDB 25.0; later releases allow more).
		if size += proto.Size(p); size > MaxAppendSize {
			return status.Errorf(codes.InvalidArgument, "Maximum Append Size of %d Exceeded.", MaxAppendSize)
		}
		id, err := fromProtoUUID(p.GetId())
		if err != nil {
			return status.Errorf(codes.InvalidArgument, "esdbfake: event id: %v", err)
		}
		typ := p.GetMetadata()[metaType]
		if typ == "" {
			return status.Error(codes.InvalidArgument, "esdbfake: event without type")
		}
		ct := p.GetMetadata()[metaContentType]
		if ct == "" {
			return status.Error(codes.InvalidArgument, "esdbfake: event without content-type")
		}
		recs = append(recs, &record{
			id:             id,
			stream:         name,
			metadata:       map[string]string{metaType: typ, metaContentType: ct},
			customMetadata: append([]byte(nil), p.GetCustomMetadata()...),
			data:           append([]byte(nil), p.GetData()...),
		})
	}

	s := a.s
	s.mu.Lock()
	existing := s.streams[name]
	exists := len(existing) > 0
	var current uint64
	if exists {
		current = existing[len(existing)-1].revision
	}
	if !expectedHolds(opts, current, exists) {
		s.mu.Unlock()
		return srv.SendAndClose(wrongExpectedVersion(opts, current, exists))
	}
	if len(recs) == 0 {
		s.mu.Unlock()
		ok := &streams.AppendResp_Success{PositionOption: &streams.AppendResp_Success_NoPosition{NoPosition: &shared.Empty{}}}
		if exists {
			ok.CurrentRevisionOption = &streams.AppendResp_Success_CurrentRevision{CurrentRevision: current}
		} else {
			ok.CurrentRevisionOption = &streams.AppendResp_Success_NoStream{NoStream: &shared.Empty{}}
		}
		return srv.SendAndClose(&streams.AppendResp{Result: &streams.AppendResp_Success_{Success: ok}})
	}
	next := uint64(0)
	if exists {
		next = current + 1
	}
	created := strconv.FormatInt(time.Now().UnixNano()/100, 10) // .NET ticks since the Unix epoch
	for i, r := range recs {
		r.revision = next + uint64(i)
		r.position = uint64(len(s.log)) + 1
		r.metadata[metaCreated] = created
		s.log = append(s.log, r)
	}
	s.streams[name] = append(existing, recs...)
	last := recs[len(recs)-1]
	close(s.wake)
	s.wake = make(chan struct{})
	s.mu.Unlock()

	return srv.SendAndClose(&streams.AppendResp{Result: &streams.AppendResp_Success_{Success: &streams.AppendResp_Success{
		CurrentRevisionOption: &streams.AppendResp_Success_CurrentRevision{CurrentRevision: last.revision},
		PositionOption: &streams.AppendResp_Success_Position{Position: &streams.AppendResp_Position{
			CommitPosition: last.position, PreparePosition: last.position,
		}},
	}}})
}

func expectedHolds(opts *streams.AppendReq_Options, current uint64, exists bool) bool {
	switch e := opts.GetExpectedStreamRevision().(type) {
	case *streams.AppendReq_Options_NoStream:
		return !exists
	case *streams.AppendReq_Options_StreamExists:
		return exists
	case *streams.AppendReq_Options_Revision:
		return exists && current == e.Revision
	default: // Any, or unset
		return true
	}
}

// wrongExpectedVersion fills both the current fields and the 20.6.0 ones, as
// the real server does.
func wrongExpectedVersion(opts *streams.AppendReq_Options, current uint64, exists bool) *streams.AppendResp {
	w := &streams.AppendResp_WrongExpectedVersion{}
	if exists {
		w.CurrentRevisionOption = &streams.AppendResp_WrongExpectedVersion_CurrentRevision{CurrentRevision: current}
		w.CurrentRevisionOption_20_6_0 = &streams.AppendResp_WrongExpectedVersion_CurrentRevision_20_6_0{CurrentRevision_20_6_0: current}
	} else {
		w.CurrentRevisionOption = &streams.AppendResp_WrongExpectedVersion_CurrentNoStream{CurrentNoStream: &shared.Empty{}}
		w.CurrentRevisionOption_20_6_0 = &streams.AppendResp_WrongExpectedVersion_NoStream_20_6_0{NoStream_20_6_0: &shared.Empty{}}
	}
	switch e := opts.GetExpectedStreamRevision().(type) {
	case *streams.AppendReq_Options_NoStream:
		w.ExpectedRevisionOption = &streams.AppendResp_WrongExpectedVersion_ExpectedNoStream{ExpectedNoStream: &shared.Empty{}}
	case *streams.AppendReq_Options_StreamExists:
		w.ExpectedRevisionOption = &streams.AppendResp_WrongExpectedVersion_ExpectedStreamExists{ExpectedStreamExists: &shared.Empty{}}
		w.ExpectedRevisionOption_20_6_0 = &streams.AppendResp_WrongExpectedVersion_StreamExists_20_6_0{StreamExists_20_6_0: &shared.Empty{}}
	case *streams.AppendReq_Options_Revision:
		w.ExpectedRevisionOption = &streams.AppendResp_WrongExpectedVersion_ExpectedRevision{ExpectedRevision: e.Revision}
		w.ExpectedRevisionOption_20_6_0 = &streams.AppendResp_WrongExpectedVersion_ExpectedRevision_20_6_0{ExpectedRevision_20_6_0: e.Revision}
	}
	return &streams.AppendResp{Result: &streams.AppendResp_WrongExpectedVersion_{WrongExpectedVersion: w}}
}

// ---- Read ----

// Read serves a read of a stream or of $all, forwards or backwards, with an
// optional filter; or, when the count option is a subscription, a catch-up
// subscription.
func (a *streamsService) Read(req *streams.ReadReq, srv streams.Streams_ReadServer) error {
	opts := req.GetOptions()
	if opts == nil {
		return status.Error(codes.InvalidArgument, "esdbfake: read without options")
	}
	match, err := newFilter(opts.GetFilter())
	if err != nil {
		return status.Errorf(codes.InvalidArgument, "esdbfake: filter: %v", err)
	}
	structured := opts.GetUuidOption().GetString_() == nil
	if opts.GetStream() == nil && opts.GetAll() == nil {
		return status.Error(codes.InvalidArgument, "esdbfake: read needs a stream or $all")
	}
	if opts.GetSubscription() != nil {
		return a.s.subscribe(opts, match, structured, srv)
	}
	backwards := opts.GetReadDirection() == streams.ReadReq_Options_Backwards
	count := opts.GetCount()

	s := a.s
	var out []*record
	s.mu.Lock()
	if st := opts.GetStream(); st != nil {
		name := string(st.GetStreamIdentifier().GetStreamName())
		recs, ok := s.streams[name]
		if !ok {
			s.mu.Unlock()
			return srv.Send(&streams.ReadResp{Content: &streams.ReadResp_StreamNotFound_{StreamNotFound: &streams.ReadResp_StreamNotFound{
				StreamIdentifier: &shared.StreamIdentifier{StreamName: []byte(name)},
			}}})
		}
		// Revisions are 0..len-1, so a revision is its index.
		switch r := st.GetRevisionOption().(type) {
		case *streams.ReadReq_Options_StreamOptions_Revision:
			out = window(recs, r.Revision, backwards)
		case *streams.ReadReq_Options_StreamOptions_End:
			if backwards {
				out = window(recs, uint64(len(recs)-1), true)
			}
		default: // start
			if backwards {
				out = window(recs, 0, true)
			} else {
				out = recs
			}
		}
	} else {
		all := opts.GetAll()
		switch p := all.GetAllOption().(type) {
		case *streams.ReadReq_Options_AllOptions_Position:
			// Forwards includes the event at the position; backwards starts
			// before it, as the real server does.
			i := s.firstAtOrAfter(p.Position.GetCommitPosition())
			if backwards {
				out = reversed(s.log[:i])
			} else {
				out = s.log[i:]
			}
		case *streams.ReadReq_Options_AllOptions_End:
			if backwards {
				out = reversed(s.log)
			}
		default: // start
			if !backwards {
				out = s.log
			}
		}
	}
	var page []*record
	for _, r := range out {
		if uint64(len(page)) >= count {
			break
		}
		if match(r) {
			page = append(page, r)
		}
	}
	s.mu.Unlock()

	for _, r := range page {
		if err := srv.Send(readEvent(r, structured)); err != nil {
			return err
		}
	}
	return nil
}

// window returns recs from index from on (forwards) or from index from down
// to 0 (backwards).
func window(recs []*record, from uint64, backwards bool) []*record {
	if backwards {
		if from >= uint64(len(recs)) {
			from = uint64(len(recs)) - 1
		}
		return reversed(recs[:from+1])
	}
	if from >= uint64(len(recs)) {
		return nil
	}
	return recs[from:]
}

func reversed(recs []*record) []*record {
	out := make([]*record, len(recs))
	for i, r := range recs {
		out[len(recs)-1-i] = r
	}
	return out
}

// firstAtOrAfter is the index of the first event at or after position pos.
// Caller holds s.mu.
func (s *Server) firstAtOrAfter(pos uint64) int {
	return sort.Search(len(s.log), func(i int) bool { return s.log[i].position >= pos })
}

// subscribe confirms the subscription, sends the history after the start
// point, a caught-up marker, then new events as they are appended, until the
// client goes away, the server stops, or DropSubscriptions.
func (s *Server) subscribe(opts *streams.ReadReq_Options, match func(*record) bool, structured bool, srv streams.Streams_ReadServer) error {
	s.mu.Lock()
	s.subs++
	id := fmt.Sprintf("esdbfake-%d", s.subs)
	drop := s.drop
	var next int // index in s.log of the next event to look at
	if st := opts.GetStream(); st != nil {
		// A stream subscription is a subscription to $all that keeps only
		// that stream's events after the start revision.
		name := string(st.GetStreamIdentifier().GetStreamName())
		after := int64(-1)
		switch r := st.GetRevisionOption().(type) {
		case *streams.ReadReq_Options_StreamOptions_Revision:
			after = int64(r.Revision)
		case *streams.ReadReq_Options_StreamOptions_End:
			next = len(s.log)
		}
		inner := match
		match = func(r *record) bool { return r.stream == name && int64(r.revision) > after && inner(r) }
	} else {
		switch p := opts.GetAll().GetAllOption().(type) {
		case *streams.ReadReq_Options_AllOptions_Position:
			// Subscriptions start strictly after the position.
			next = s.firstAtOrAfter(p.Position.GetCommitPosition() + 1)
		case *streams.ReadReq_Options_AllOptions_End:
			next = len(s.log)
		}
	}
	s.mu.Unlock()

	if err := srv.Send(&streams.ReadResp{Content: &streams.ReadResp_Confirmation{Confirmation: &streams.ReadResp_SubscriptionConfirmation{SubscriptionId: id}}}); err != nil {
		return err
	}

	// With a filter the server sends a checkpoint every window×multiplier
	// events it looked at, so that clients can save progress over long runs
	// of events they do not receive.
	every := 0
	if f := opts.GetFilter(); f != nil {
		w := int(f.GetMax())
		if w <= 0 {
			w = 32
		}
		m := int(f.GetCheckpointIntervalMultiplier())
		if m <= 0 {
			m = 1
		}
		every = w * m
	}
	scanned := 0
	caughtUp := false
	ctx := srv.Context()
	for {
		s.mu.Lock()
		batch := s.log[next:len(s.log):len(s.log)]
		wake := s.wake
		s.mu.Unlock()
		for _, r := range batch {
			next++
			scanned++
			if match(r) {
				if err := srv.Send(readEvent(r, structured)); err != nil {
					return err
				}
			}
			if every > 0 && scanned%every == 0 {
				if err := srv.Send(&streams.ReadResp{Content: &streams.ReadResp_Checkpoint_{Checkpoint: &streams.ReadResp_Checkpoint{
					CommitPosition: r.position, PreparePosition: r.position,
				}}}); err != nil {
					return err
				}
			}
		}
		if len(batch) > 0 {
			continue
		}
		if !caughtUp {
			caughtUp = true
			if err := srv.Send(&streams.ReadResp{Content: &streams.ReadResp_CaughtUp_{CaughtUp: &streams.ReadResp_CaughtUp{}}}); err != nil {
				return err
			}
		}
		select {
		case <-wake:
		case <-drop:
			return status.Error(codes.Unavailable, "esdbfake: subscription dropped")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// newFilter compiles a read filter: on the event type or the stream name, by
// prefixes or by a regular expression (searched, not anchored, as .NET's
// Regex.IsMatch does).
func newFilter(f *streams.ReadReq_Options_FilterOptions) (func(*record) bool, error) {
	if f == nil {
		return func(*record) bool { return true }, nil
	}
	var expr *streams.ReadReq_Options_FilterOptions_Expression
	var field func(*record) string
	switch {
	case f.GetEventType() != nil:
		expr, field = f.GetEventType(), func(r *record) string { return r.metadata[metaType] }
	case f.GetStreamIdentifier() != nil:
		expr, field = f.GetStreamIdentifier(), func(r *record) string { return r.stream }
	default:
		return nil, errors.New("filter on neither event type nor stream")
	}
	if re := expr.GetRegex(); re != "" {
		rx, err := regexp.Compile(re)
		if err != nil {
			return nil, err
		}
		return func(r *record) bool { return rx.MatchString(field(r)) }, nil
	}
	prefixes := expr.GetPrefix()
	if len(prefixes) == 0 {
		return nil, errors.New("filter without regex or prefixes")
	}
	return func(r *record) bool {
		v := field(r)
		for _, p := range prefixes {
			if strings.HasPrefix(v, p) {
				return true
			}
		}
		return false
	}, nil
}

func readEvent(r *record, structured bool) *streams.ReadResp {
	meta := make(map[string]string, len(r.metadata))
	for k, v := range r.metadata {
		meta[k] = v
	}
	return &streams.ReadResp{Content: &streams.ReadResp_Event{Event: &streams.ReadResp_ReadEvent{
		Event: &streams.ReadResp_ReadEvent_RecordedEvent{
			Id:               toProtoUUID(r.id, structured),
			StreamIdentifier: &shared.StreamIdentifier{StreamName: []byte(r.stream)},
			StreamRevision:   r.revision,
			PreparePosition:  r.position,
			CommitPosition:   r.position,
			Metadata:         meta,
			CustomMetadata:   r.customMetadata,
			Data:             r.data,
		},
		Position: &streams.ReadResp_ReadEvent_CommitPosition{CommitPosition: r.position},
	}}}
}

// toProtoUUID encodes id as the client expects: two big-endian halves, or a
// string when the read asked for strings.
func toProtoUUID(id uuid.UUID, structured bool) *shared.UUID {
	if !structured {
		return &shared.UUID{Value: &shared.UUID_String_{String_: id.String()}}
	}
	return &shared.UUID{Value: &shared.UUID_Structured_{Structured: &shared.UUID_Structured{
		MostSignificantBits:  int64(binary.BigEndian.Uint64(id[:8])),
		LeastSignificantBits: int64(binary.BigEndian.Uint64(id[8:])),
	}}}
}

func fromProtoUUID(u *shared.UUID) (uuid.UUID, error) {
	if st := u.GetStructured(); st != nil {
		var id uuid.UUID
		binary.BigEndian.PutUint64(id[:8], uint64(st.GetMostSignificantBits()))
		binary.BigEndian.PutUint64(id[8:], uint64(st.GetLeastSignificantBits()))
		return id, nil
	}
	if s := u.GetString_(); s != "" {
		return uuid.Parse(s)
	}
	return uuid.New(), nil
}
