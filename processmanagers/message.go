package processmanagers

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/mailroom/mailroom/internal/eventstore"
)

// Metadata keys of the watermill messages that carry events. The message
// UUID is the event id and the payload is the event's JSON data; together
// with these keys a message holds the whole RecordedEvent, so EventOf also
// works on messages read back from the poison queue.
const (
	MetaType          = "type"
	MetaSchemaVersion = "schema_version"
	MetaStream        = "stream"
	MetaRevision      = "revision"
	MetaPosition      = "position" // "commit/prepare"
	MetaActor         = "actor"
	MetaCorrelationID = "correlation_id"
	MetaCausationID   = "causation_id"
	MetaRequestID     = "request_id"
	MetaClientReqID   = "client_request_id"
	MetaRecordedAt    = "recorded_at" // RFC 3339 with nanoseconds, UTC
	MetaHash          = "hash"
)

// eventKey keeps the RecordedEvent in a message's context, so the handler
// gets it without re-parsing the metadata.
type eventKey struct{}

// newMessage turns ev into a message whose context (child of ctx) carries ev.
func newMessage(ctx context.Context, ev eventstore.RecordedEvent) *message.Message {
	msg := message.NewMessageWithContext(context.WithValue(ctx, eventKey{}, ev), ev.ID.String(), message.Payload(ev.Data))
	md := msg.Metadata
	md.Set(MetaType, ev.Type)
	md.Set(MetaSchemaVersion, strconv.Itoa(ev.SchemaVersion))
	md.Set(MetaStream, ev.StreamID)
	md.Set(MetaRevision, strconv.FormatUint(ev.StreamRevision, 10))
	md.Set(MetaPosition, ev.Position.String())
	md.Set(MetaActor, ev.Metadata.Actor)
	md.Set(MetaCorrelationID, ev.Metadata.CorrelationID)
	md.Set(MetaCausationID, ev.Metadata.CausationID)
	md.Set(MetaRequestID, ev.Metadata.RequestID)
	if ev.Metadata.ClientRequestID != "" {
		md.Set(MetaClientReqID, ev.Metadata.ClientRequestID)
	}
	md.Set(MetaRecordedAt, ev.RecordedAt.UTC().Format(time.RFC3339Nano))
	md.Set(MetaHash, ev.Hash)
	return msg
}

// EventOf returns the event a message carries: from the message's context
// when the message came from a Router's subscriber, else rebuilt from its
// UUID, payload and metadata (for example a message read from the poison
// queue).
func EventOf(msg *message.Message) (eventstore.RecordedEvent, error) {
	if ev, ok := msg.Context().Value(eventKey{}).(eventstore.RecordedEvent); ok && ev.ID.String() == msg.UUID {
		return ev, nil
	}
	id, err := uuid.Parse(msg.UUID)
	if err != nil {
		return eventstore.RecordedEvent{}, fmt.Errorf("processmanagers: message %q: event id: %w", msg.UUID, err)
	}
	md := msg.Metadata
	ev := eventstore.RecordedEvent{
		ID:       id,
		StreamID: md.Get(MetaStream),
		Type:     md.Get(MetaType),
		Data:     json.RawMessage(append([]byte(nil), msg.Payload...)),
		Metadata: eventstore.Metadata{
			CorrelationID:   md.Get(MetaCorrelationID),
			CausationID:     md.Get(MetaCausationID),
			Actor:           md.Get(MetaActor),
			RequestID:       md.Get(MetaRequestID),
			ClientRequestID: md.Get(MetaClientReqID),
		},
		Hash: md.Get(MetaHash),
	}
	if ev.Type == "" || ev.StreamID == "" {
		return eventstore.RecordedEvent{}, fmt.Errorf("processmanagers: message %s carries no event (type or stream missing)", msg.UUID)
	}
	fail := func(key string, err error) (eventstore.RecordedEvent, error) {
		return eventstore.RecordedEvent{}, fmt.Errorf("processmanagers: message %s: %s: %w", msg.UUID, key, err)
	}
	if ev.StreamRevision, err = strconv.ParseUint(md.Get(MetaRevision), 10, 64); err != nil {
		return fail(MetaRevision, err)
	}
	if ev.Position, err = eventstore.ParsePosition(md.Get(MetaPosition)); err != nil {
		return fail(MetaPosition, err)
	}
	if v := md.Get(MetaSchemaVersion); v != "" {
		if ev.SchemaVersion, err = strconv.Atoi(v); err != nil {
			return fail(MetaSchemaVersion, err)
		}
	}
	if v := md.Get(MetaRecordedAt); v != "" {
		if ev.RecordedAt, err = time.Parse(time.RFC3339Nano, v); err != nil {
			return fail(MetaRecordedAt, err)
		}
	}
	return ev, nil
}
