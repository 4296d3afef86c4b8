package codec

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/internal/eventstore"
)

// Registry knows a set of event types: for each name, its Go type, the
// schema version its records are written in and how to read records of
// older versions.
type Registry struct {
	types map[string]*schema
}

type schema struct {
	typ       reflect.Type // the struct; events are pointers to it
	version   int
	upcasters map[int]Upcaster
}

// Upcaster rewrites the JSON of a record of the version it is declared for
// into the shape of the next version.
type Upcaster func(data json.RawMessage) (json.RawMessage, error)

// Schema is how an event type's JSON changed shape: its current version,
// and for each older version the upcaster that rewrites a record of that
// version into the next.
type Schema struct {
	Version   int
	Upcasters map[int]Upcaster
}

// UnknownTypeError is an event type the registry does not know.
type UnknownTypeError struct {
	Type string
}

func (e *UnknownTypeError) Error() string {
	return fmt.Sprintf("event type %q is not registered", e.Type)
}

// NewerVersionError is a record written in a schema version newer than the
// registry knows for its type.
type NewerVersionError struct {
	Type           string
	Version, Known int
}

func (e *NewerVersionError) Error() string {
	return fmt.Sprintf("event type %q: schema version %d is newer than the known %d", e.Type, e.Version, e.Known)
}

// NewRegistry registers every event of lists at schema version 1. Each
// event must be a pointer to a struct and each name may be registered once.
func NewRegistry(lists ...[]domain.Event) (*Registry, error) {
	r := &Registry{types: map[string]*schema{}}
	for _, list := range lists {
		for _, e := range list {
			if err := r.register(e); err != nil {
				return nil, err
			}
		}
	}
	return r, nil
}

func (r *Registry) register(e domain.Event) error {
	t := reflect.TypeOf(e)
	if t == nil {
		return errors.New("codec: a nil event cannot be registered")
	}
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("codec: event %s is a %s; events are pointers to structs", t, t.Kind())
	}
	name := e.EventType()
	if name == "" {
		return fmt.Errorf("codec: event %s has no type name", t)
	}
	if prev, ok := r.types[name]; ok {
		return fmt.Errorf("codec: event type %q is registered twice, by %s and %s", name, reflect.PointerTo(prev.typ), t)
	}
	r.types[name] = &schema{typ: t.Elem(), version: 1}
	return nil
}

// Evolve declares that eventType's records are now written in s.Version,
// with an upcaster for every version from 1 up to the one before it.
func (r *Registry) Evolve(eventType string, s Schema) error {
	sc, ok := r.types[eventType]
	if !ok {
		return &UnknownTypeError{Type: eventType}
	}
	if s.Version < 1 {
		return fmt.Errorf("codec: event type %q: schema version %d is below 1", eventType, s.Version)
	}
	for v := 1; v < s.Version; v++ {
		if s.Upcasters[v] == nil {
			return fmt.Errorf("codec: event type %q: no upcaster from version %d to %d", eventType, v, v+1)
		}
	}
	if len(s.Upcasters) != s.Version-1 {
		return fmt.Errorf("codec: event type %q: upcasters for versions outside 1 to %d", eventType, s.Version-1)
	}
	sc.version, sc.upcasters = s.Version, s.Upcasters
	return nil
}

// Types lists the registered event type names in order.
func (r *Registry) Types() []string {
	names := make([]string, 0, len(r.types))
	for name := range r.types {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// New returns a fresh event of a registered type.
func (r *Registry) New(eventType string) (domain.Event, error) {
	sc, ok := r.types[eventType]
	if !ok {
		return nil, &UnknownTypeError{Type: eventType}
	}
	return reflect.New(sc.typ).Interface().(domain.Event), nil
}

// Version is the schema version records of eventType are written in.
func (r *Registry) Version(eventType string) (int, error) {
	sc, ok := r.types[eventType]
	if !ok {
		return 0, &UnknownTypeError{Type: eventType}
	}
	return sc.version, nil
}

// Encode prepares e for appending, in its type's current schema version.
// An event whose type is not registered, or is registered for another Go
// type, is refused: it could not be read back.
func (r *Registry) Encode(e domain.Event, meta eventstore.Metadata) (eventstore.EventData, error) {
	if e == nil {
		return eventstore.EventData{}, errors.New("encode: nil event")
	}
	name := e.EventType()
	sc, ok := r.types[name]
	if !ok {
		return eventstore.EventData{}, fmt.Errorf("encode %T: %w", e, &UnknownTypeError{Type: name})
	}
	if t := reflect.TypeOf(e); t != reflect.PointerTo(sc.typ) {
		return eventstore.EventData{}, fmt.Errorf("encode %s: %s is registered for %s", name, t, reflect.PointerTo(sc.typ))
	}
	data, err := json.Marshal(e)
	if err != nil {
		return eventstore.EventData{}, fmt.Errorf("encode %s: %w", name, err)
	}
	return eventstore.EventData{
		ID:            uuid.Must(uuid.NewV7()),
		Type:          name,
		SchemaVersion: sc.version,
		Data:          data,
		Metadata:      meta,
	}, nil
}

// EncodeAll encodes a decision's events with shared metadata.
func (r *Registry) EncodeAll(evs []domain.Event, meta eventstore.Metadata) ([]eventstore.EventData, error) {
	out := make([]eventstore.EventData, len(evs))
	for i, e := range evs {
		d, err := r.Encode(e, meta)
		if err != nil {
			return nil, err
		}
		out[i] = d
	}
	return out, nil
}

// Decode returns the domain event a record holds, upcast to its type's
// current shape. A type it does not know (*UnknownTypeError) or a version
// newer than it knows (*NewerVersionError) is an error: a decision must
// not be made on a stream read in part.
func (r *Registry) Decode(ev eventstore.RecordedEvent) (domain.Event, error) {
	sc, ok := r.types[ev.Type]
	if !ok {
		return nil, fmt.Errorf("decode %s: %w", ev.ID, &UnknownTypeError{Type: ev.Type})
	}
	version := max(ev.SchemaVersion, 1) // a record without a version is of the first
	if version > sc.version {
		return nil, fmt.Errorf("decode %s: %w", ev.ID, &NewerVersionError{Type: ev.Type, Version: version, Known: sc.version})
	}
	data := ev.Data
	for ; version < sc.version; version++ {
		up, err := sc.upcasters[version](data)
		if err != nil {
			return nil, fmt.Errorf("decode %s %s: upcast from version %d: %w", ev.Type, ev.ID, version, err)
		}
		data = up
	}
	v := reflect.New(sc.typ).Interface().(domain.Event)
	if err := json.Unmarshal(data, v); err != nil {
		return nil, fmt.Errorf("decode %s %s: %w", ev.Type, ev.ID, err)
	}
	return v, nil
}

// DecodeKnown is Decode for readers of the whole log, which meet events
// newer than themselves: a type or version it does not know is reported as
// not known (false) and no error, for the reader to skip.
func (r *Registry) DecodeKnown(ev eventstore.RecordedEvent) (domain.Event, bool, error) {
	sc, ok := r.types[ev.Type]
	if !ok || ev.SchemaVersion > sc.version {
		return nil, false, nil
	}
	e, err := r.Decode(ev)
	if err != nil {
		return nil, false, err
	}
	return e, true, nil
}
