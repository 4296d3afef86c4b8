package codec_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/account"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/eventstore"
)

// recorded turns encoded data into the record a store would give back.
func recorded(d eventstore.EventData) eventstore.RecordedEvent {
	return eventstore.RecordedEvent{ID: d.ID, StreamID: "s-1", Type: d.Type, SchemaVersion: d.SchemaVersion, Data: d.Data, Metadata: d.Metadata}
}

// fill sets every exported field of v to a value that is not its zero, so
// that a field lost on the way shows.
func fill(v reflect.Value, seed int) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(fmt.Sprintf("s%d", seed))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(int64(seed + 1))
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(uint64(seed + 1))
	case reflect.Float32, reflect.Float64:
		v.SetFloat(float64(seed) + 0.5)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), seed)
		v.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 2, 2)
		for i := range 2 {
			fill(s.Index(i), seed*10+i)
		}
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, seed)
		fill(e, seed+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(time.Date(2026, 11, 23, 10, 0, seed%60, 1000*seed, time.UTC)))
			return
		}
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), seed*7+i)
			}
		}
	}
}

func TestEveryRegisteredTypeRoundTrips(t *testing.T) {
	r := codec.Registered()
	meta := eventstore.Metadata{Actor: "test", CorrelationID: "c-1"}
	for _, name := range r.Types() {
		t.Run(name, func(t *testing.T) {
			e, err := r.New(name)
			if err != nil {
				t.Fatal(err)
			}
			fill(reflect.ValueOf(e).Elem(), 1)
			data, err := codec.Encode(e, meta)
			if err != nil {
				t.Fatal(err)
			}
			version, _ := r.Version(name)
			if data.Type != name || data.SchemaVersion != version || data.Metadata != meta || data.ID == uuid.Nil {
				t.Fatalf("encoded as %s v%d %+v %s", data.Type, data.SchemaVersion, data.Metadata, data.ID)
			}
			for _, decode := range []struct {
				path string
				fn   func(eventstore.RecordedEvent) (domain.Event, error)
			}{
				{"Decode", codec.Decode},
				{"DecodeKnown", func(ev eventstore.RecordedEvent) (domain.Event, error) {
					e, known, err := codec.DecodeKnown(ev)
					if err == nil && !known {
						err = errors.New("not known")
					}
					return e, err
				}},
			} {
				got, err := decode.fn(recorded(data))
				if err != nil {
					t.Fatalf("%s: %v", decode.path, err)
				}
				if !reflect.DeepEqual(got, e) {
					t.Fatalf("%s: got %+v, want %+v", decode.path, got, e)
				}
			}
		})
	}
}

// The pointer is the event: a value of an event type does not implement
// domain.Event, so it can neither be decided nor missed by a type switch.
func TestOnlyPointersAreEvents(t *testing.T) {
	r := codec.Registered()
	event := reflect.TypeFor[domain.Event]()
	for _, name := range r.Types() {
		e, _ := r.New(name)
		pt := reflect.TypeOf(e)
		if pt.Kind() != reflect.Pointer || !pt.Implements(event) {
			t.Errorf("%s: %s is not a pointer event", name, pt)
			continue
		}
		if pt.Elem().Implements(event) {
			t.Errorf("%s: the value type %s implements domain.Event", name, pt.Elem())
		}
	}
}

// Events of test-only types, registered in test registries alone.
type (
	noted struct {
		Text string `json:"text"`
	}
	alsoNoted   struct{}
	valueEvent  struct{}
	stringEvent string
	// renamed is at version 3: version 1 held "note", version 2 "body",
	// version 3 "text".
	renamed struct {
		Text string `json:"text"`
	}
)

func (*noted) EventType() string       { return "Noted" }
func (*alsoNoted) EventType() string   { return "Noted" }
func (valueEvent) EventType() string   { return "ValueHappened" }
func (*stringEvent) EventType() string { return "StringHappened" }
func (*renamed) EventType() string     { return "Renamed" }

func TestNewRegistryRefusesBadRegistrations(t *testing.T) {
	str := stringEvent("x")
	for _, c := range []struct {
		name  string
		lists [][]domain.Event
		want  string
	}{
		{"duplicate name", [][]domain.Event{{&noted{}}, {&alsoNoted{}}}, `"Noted" is registered twice`},
		{"duplicate in one list", [][]domain.Event{{&noted{}, &noted{}}}, `"Noted" is registered twice`},
		{"value", [][]domain.Event{{valueEvent{}}}, "pointers to structs"},
		{"pointer to a string", [][]domain.Event{{&str}}, "pointers to structs"},
		{"nil", [][]domain.Event{{nil}}, "nil event"},
		{"domain name twice", [][]domain.Event{account.Events(), account.Events()}, `"AccountCreated" is registered twice`},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, err := codec.NewRegistry(c.lists...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("registry %v, error %v; want one saying %s", r, err, c.want)
			}
		})
	}
}

func TestUnknownTypes(t *testing.T) {
	r, err := codec.NewRegistry([]domain.Event{&renamed{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		ev   eventstore.RecordedEvent
	}{
		{"unknown type", eventstore.RecordedEvent{ID: uuid.New(), Type: "Noted", SchemaVersion: 1, Data: json.RawMessage(`{"text":"a"}`)}},
		{"newer version", eventstore.RecordedEvent{ID: uuid.New(), Type: "Renamed", SchemaVersion: 2, Data: json.RawMessage(`{"text":"a"}`)}},
	} {
		t.Run(c.name, func(t *testing.T) {
			// A decision refuses to fold a stream it cannot read whole.
			e, err := r.Decode(c.ev)
			var unknown *codec.UnknownTypeError
			var newer *codec.NewerVersionError
			if e != nil || !(errors.As(err, &unknown) || errors.As(err, &newer)) {
				t.Fatalf("Decode: %v, %v; want a typed error", e, err)
			}
			// A reader of the whole log skips it.
			e, known, err := r.DecodeKnown(c.ev)
			if e != nil || known || err != nil {
				t.Fatalf("DecodeKnown: %v, %v, %v; want it skipped", e, known, err)
			}
		})
	}
	var unknown *codec.UnknownTypeError
	if _, err := r.Decode(eventstore.RecordedEvent{Type: "Noted"}); !errors.As(err, &unknown) || unknown.Type != "Noted" {
		t.Errorf("Decode of an unknown type: %v", err)
	}
	var newer *codec.NewerVersionError
	if _, err := r.Decode(eventstore.RecordedEvent{Type: "Renamed", SchemaVersion: 2}); !errors.As(err, &newer) || newer.Version != 2 || newer.Known != 1 {
		t.Errorf("Decode of a newer version: %v", err)
	}
	// A known type that does not decode is an error on both paths.
	bad := eventstore.RecordedEvent{Type: "Renamed", SchemaVersion: 1, Data: json.RawMessage(`{"text":7}`)}
	if _, err := r.Decode(bad); err == nil {
		t.Error("Decode of malformed JSON: no error")
	}
	if _, _, err := r.DecodeKnown(bad); err == nil {
		t.Error("DecodeKnown of malformed JSON: no error")
	}
}

func TestEncodeRefusesUnregisteredEvents(t *testing.T) {
	r, err := codec.NewRegistry([]domain.Event{&renamed{}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		e    domain.Event
	}{
		{"unregistered type", &noted{Text: "a"}},
		{"value of an unregistered type", valueEvent{}},
		{"nil", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			if d, err := r.Encode(c.e, eventstore.Metadata{}); err == nil {
				t.Fatalf("encoded as %+v", d)
			}
			if d, err := r.EncodeAll([]domain.Event{&renamed{}, c.e}, eventstore.Metadata{}); err == nil {
				t.Fatalf("encoded all as %+v", d)
			}
		})
	}
	var unknown *codec.UnknownTypeError
	if _, err := r.Encode(&noted{}, eventstore.Metadata{}); !errors.As(err, &unknown) || unknown.Type != "Noted" {
		t.Errorf("Encode of an unregistered type: %v", err)
	}
	// The package's registry knows the domain's events only.
	if _, err := codec.Encode(&noted{}, eventstore.Metadata{}); !errors.As(err, &unknown) {
		t.Errorf("codec.Encode of a test type: %v", err)
	}
	// A name registered for another Go type is refused too: it would be
	// read back as that type.
	other, err := codec.NewRegistry([]domain.Event{&alsoNoted{}})
	if err != nil {
		t.Fatal(err)
	}
	if d, err := other.Encode(&noted{}, eventstore.Metadata{}); err == nil {
		t.Errorf("a *noted encoded as the *alsoNoted name: %+v", d)
	}
}

func TestUpcastingAChainOfVersions(t *testing.T) {
	rename := func(from, to string) codec.Upcaster {
		return func(data json.RawMessage) (json.RawMessage, error) {
			var fields map[string]json.RawMessage
			if err := json.Unmarshal(data, &fields); err != nil {
				return nil, err
			}
			fields[to] = fields[from]
			delete(fields, from)
			return json.Marshal(fields)
		}
	}
	r, err := codec.NewRegistry([]domain.Event{&renamed{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Evolve("Renamed", codec.Schema{Version: 3, Upcasters: map[int]codec.Upcaster{1: rename("note", "body"), 2: rename("body", "text")}}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		version int
		data    string
	}{
		{0, `{"note":"hi"}`}, // written before versions were recorded
		{1, `{"note":"hi"}`},
		{2, `{"body":"hi"}`},
		{3, `{"text":"hi"}`},
	} {
		ev := eventstore.RecordedEvent{Type: "Renamed", SchemaVersion: c.version, Data: json.RawMessage(c.data)}
		e, err := r.Decode(ev)
		if err != nil {
			t.Fatalf("v%d: %v", c.version, err)
		}
		if got := e.(*renamed).Text; got != "hi" {
			t.Errorf("v%d %s: text %q", c.version, c.data, got)
		}
	}
	d, err := r.Encode(&renamed{Text: "hi"}, eventstore.Metadata{})
	if err != nil || d.SchemaVersion != 3 || string(d.Data) != `{"text":"hi"}` {
		t.Fatalf("encoded as v%d %s, %v", d.SchemaVersion, d.Data, err)
	}
	var newer *codec.NewerVersionError
	if _, err := r.Decode(eventstore.RecordedEvent{Type: "Renamed", SchemaVersion: 4, Data: json.RawMessage(`{}`)}); !errors.As(err, &newer) {
		t.Errorf("v4: %v", err)
	}
	failing := func(json.RawMessage) (json.RawMessage, error) { return nil, errors.New("no") }
	r2, _ := codec.NewRegistry([]domain.Event{&renamed{}})
	if err := r2.Evolve("Renamed", codec.Schema{Version: 2, Upcasters: map[int]codec.Upcaster{1: failing}}); err != nil {
		t.Fatal(err)
	}
	if _, err := r2.Decode(eventstore.RecordedEvent{Type: "Renamed", SchemaVersion: 1, Data: json.RawMessage(`{}`)}); err == nil {
		t.Error("a failing upcaster decoded")
	}
}

func TestEvolveRefusesAnIncompleteSchema(t *testing.T) {
	up := func(data json.RawMessage) (json.RawMessage, error) { return data, nil }
	for _, c := range []struct {
		name   string
		typ    string
		schema codec.Schema
	}{
		{"unknown type", "Noted", codec.Schema{Version: 1}},
		{"version 0", "Renamed", codec.Schema{Version: 0}},
		{"missing upcaster", "Renamed", codec.Schema{Version: 3, Upcasters: map[int]codec.Upcaster{1: up}}},
		{"upcaster from the current version", "Renamed", codec.Schema{Version: 2, Upcasters: map[int]codec.Upcaster{1: up, 2: up}}},
		{"nil upcaster", "Renamed", codec.Schema{Version: 2, Upcasters: map[int]codec.Upcaster{1: nil}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, _ := codec.NewRegistry([]domain.Event{&renamed{}})
			if err := r.Evolve(c.typ, c.schema); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

// EmailQueued version 1 held reply_to as one string joined with ", " until
// it became a list (later version 1 records hold a list); version 2 always
// holds a list.
func TestEmailQueuedVersion1ReplyToIsUpcastToAList(t *testing.T) {
	for _, c := range []struct {
		version    int
		data, want string
	}{
		{1, `{"reply_to":["\"Doe, Jane\" <jane@example.org>","b@x.org"]}`, `["\"Doe, Jane\" <jane@example.org>" "b@x.org"]`},
		{1, `{"reply_to":"Desk <desk@x.org>, b@x.org"}`, `["Desk <desk@x.org>" "b@x.org"]`},
		{1, `{"reply_to":"a@x.org"}`, `["a@x.org"]`},
		{1, `{"reply_to":""}`, `[]`},
		{1, `{"reply_to":null}`, `[]`},
		{1, `{}`, `[]`},
		{2, `{"reply_to":["\"Doe, Jane\" <jane@example.org>","b@x.org"]}`, `["\"Doe, Jane\" <jane@example.org>" "b@x.org"]`},
		{2, `{}`, `[]`},
	} {
		for _, decode := range []func(eventstore.RecordedEvent) (domain.Event, error){
			codec.Decode,
			func(ev eventstore.RecordedEvent) (domain.Event, error) {
				e, _, err := codec.DecodeKnown(ev)
				return e, err
			},
		} {
			e, err := decode(eventstore.RecordedEvent{Type: "EmailQueued", SchemaVersion: c.version, Data: json.RawMessage(c.data)})
			if err != nil {
				t.Fatalf("v%d %s: %v", c.version, c.data, err)
			}
			if got := fmt.Sprintf("%q", []string(e.(*email.Queued).ReplyTo)); got != c.want {
				t.Errorf("v%d %s: reply_to %s, want %s", c.version, c.data, got, c.want)
			}
		}
	}
	for _, version := range []int{1, 2} {
		ev := eventstore.RecordedEvent{Type: "EmailQueued", SchemaVersion: version, Data: json.RawMessage(`{"reply_to":7}`)}
		if _, err := codec.Decode(ev); err == nil {
			t.Errorf("v%d: a number decoded as reply_to", version)
		}
	}
	// A joined string in a version 2 record is not what version 2 writes.
	ev := eventstore.RecordedEvent{Type: "EmailQueued", SchemaVersion: 2, Data: json.RawMessage(`{"reply_to":"a@x.org"}`)}
	if _, err := codec.Decode(ev); err == nil {
		t.Error("v2: a string decoded as reply_to")
	}
	d, err := codec.Encode(&email.Queued{ReplyTo: email.Addresses{`"Doe, Jane" <jane@example.org>`}}, eventstore.Metadata{})
	if err != nil {
		t.Fatal(err)
	}
	if d.SchemaVersion != 2 || !strings.Contains(string(d.Data), `"reply_to":["\"Doe, Jane\" \u003cjane@example.org\u003e"]`) {
		t.Errorf("encoded as v%d %s", d.SchemaVersion, d.Data)
	}
}

// An event could be Mailroom's when its type is one of Mailroom's and its
// stream is named as Mailroom names its streams; another application's
// AccountCreated in a stream of its own is not.
func TestOursNeedsMailroomsTypeAndStreamName(t *testing.T) {
	for stream, want := range map[string]bool{
		account.Stream("a1"):                  true,
		account.ErasureStream("a1", "ak1:00"): true,
		email.Stream("e1"):                    true,
		"crm-7":                               false,
		"accounts":                            false,
	} {
		if got := codec.Ours(stream, (&account.Created{}).EventType()); got != want {
			t.Errorf("Ours(%q, AccountCreated) = %v, want %v", stream, got, want)
		}
	}
	if codec.Ours(account.Stream("a1"), "OrderPlaced") {
		t.Error("an unknown type in an account stream counted as Mailroom's")
	}
}
