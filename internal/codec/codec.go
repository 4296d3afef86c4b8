// Package codec turns domain events into event-store records and back. It is
// the one place that knows every event type name.
package codec

import (
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/account"
	"github.com/mailroom/mailroom/domain/apikey"
	"github.com/mailroom/mailroom/domain/delivery"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/domain/sendingdomain"
	"github.com/mailroom/mailroom/domain/webhook"
	"github.com/mailroom/mailroom/internal/eventstore"
)

// SchemaVersion is written with every event; decoders upcast older versions.
const SchemaVersion = 1

var types = map[string]reflect.Type{}

func init() {
	for _, list := range [][]domain.Event{account.Events(), apikey.Events(), sendingdomain.Events(), email.Events(), webhook.Events(), delivery.Events()} {
		for _, e := range list {
			types[e.EventType()] = reflect.TypeOf(e).Elem()
		}
	}
}

// Encode prepares e for appending.
func Encode(e domain.Event, meta eventstore.Metadata) (eventstore.EventData, error) {
	data, err := json.Marshal(e)
	if err != nil {
		return eventstore.EventData{}, fmt.Errorf("encode %s: %w", e.EventType(), err)
	}
	return eventstore.EventData{
		ID:            uuid.Must(uuid.NewV7()),
		Type:          e.EventType(),
		SchemaVersion: SchemaVersion,
		Data:          data,
		Metadata:      meta,
	}, nil
}

// EncodeAll encodes a decision's events with shared metadata.
func EncodeAll(evs []domain.Event, meta eventstore.Metadata) ([]eventstore.EventData, error) {
	out := make([]eventstore.EventData, len(evs))
	for i, e := range evs {
		d, err := Encode(e, meta)
		if err != nil {
			return nil, err
		}
		out[i] = d
	}
	return out, nil
}

// Decode returns the domain event a record holds. Unknown types yield
// (nil, nil) so that readers skip events newer than themselves.
func Decode(ev eventstore.RecordedEvent) (domain.Event, error) {
	t, ok := types[ev.Type]
	if !ok {
		return nil, nil
	}
	v := reflect.New(t).Interface().(domain.Event)
	if err := json.Unmarshal(ev.Data, v); err != nil {
		return nil, fmt.Errorf("decode %s %s: %w", ev.Type, ev.ID, err)
	}
	return v, nil
}
