// Package sealed keeps personal data out of the event log in the clear. It
// wraps an event store: on the way in, the fields the codec marks personal
// (codec.PersonalOf) are encrypted with their email's data key into one
// "personal" member; on the way out they are decrypted back into place, or,
// once the key is destroyed, left out and the event marked "erased": true.
//
// The log, its hash chains and its exports hold only the ciphertext, so
// destroying a key erases the data without changing a byte of the log.
// Auditing reads the wrapped store, not this one.
package sealed

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/datakeys"
	"github.com/mailroom/mailroom/internal/eventstore"
)

// Keys is the keyring the store seals with.
type Keys interface {
	Ensure(ctx context.Context, id, accountID string) (datakeys.Key, error)
	Lookup(ctx context.Context, ids ...string) (map[string]datakeys.Key, error)
}

// Store seals personal data on append and opens it on read.
type Store struct {
	eventstore.Store
	keys Keys
}

// New wraps inner.
func New(inner eventstore.Store, keys Keys) *Store { return &Store{Store: inner, keys: keys} }

type envelope struct {
	Key    string `json:"key"`    // the data key's id
	Sealed []byte `json:"sealed"` // the personal fields as one JSON object, encrypted
}

// context binds a ciphertext to its event, so it cannot be moved.
func bindTo(ev string) string { return "event:" + ev }

func (s *Store) Append(ctx context.Context, stream string, expected eventstore.ExpectedVersion, events ...eventstore.EventData) (eventstore.AppendResult, error) {
	sealedEvents, err := s.sealAll(ctx, events)
	if err != nil {
		return eventstore.AppendResult{}, err
	}
	return s.Store.Append(ctx, stream, expected, sealedEvents...)
}

func (s *Store) AppendMany(ctx context.Context, parts ...eventstore.StreamAppend) ([]eventstore.AppendResult, error) {
	out := make([]eventstore.StreamAppend, len(parts))
	for i, p := range parts {
		evs, err := s.sealAll(ctx, p.Events)
		if err != nil {
			return nil, err
		}
		p.Events = evs
		out[i] = p
	}
	return s.Store.AppendMany(ctx, out...)
}

func (s *Store) ReadStream(ctx context.Context, stream string, from uint64, max int) ([]eventstore.RecordedEvent, error) {
	evs, err := s.Store.ReadStream(ctx, stream, from, max)
	if err != nil {
		return nil, err
	}
	return evs, s.openAll(ctx, evs)
}

func (s *Store) ReadAll(ctx context.Context, from eventstore.Position, max int) ([]eventstore.RecordedEvent, error) {
	evs, err := s.Store.ReadAll(ctx, from, max)
	if err != nil {
		return nil, err
	}
	return evs, s.openAll(ctx, evs)
}

func (s *Store) SubscribeAll(ctx context.Context, from eventstore.Position) (eventstore.Subscription, error) {
	sub, err := s.Store.SubscribeAll(ctx, from)
	if err != nil {
		return nil, err
	}
	return &subscription{Subscription: sub, store: s}, nil
}

// CountAfter passes counting through to a store that can count; for one
// that cannot it is errors.ErrUnsupported, which callers take as "no
// count", as if the wrapper were not there.
func (s *Store) CountAfter(ctx context.Context, from eventstore.Position, limit int64) (int64, error) {
	c, ok := s.Store.(eventstore.Counter)
	if !ok {
		return 0, fmt.Errorf("event store %T cannot count events: %w", s.Store, errors.ErrUnsupported)
	}
	return c.CountAfter(ctx, from, limit)
}

// Ping checks the wrapped store answers.
func (s *Store) Ping(ctx context.Context) error { return eventstore.Ping(ctx, s.Store) }

// Inner is the wrapped store, which holds the sealed records as they are.
func (s *Store) Inner() eventstore.Store { return s.Store }

type subscription struct {
	eventstore.Subscription
	store   *Store
	pending *eventstore.RecordedEvent // taken from the wrapped subscription, not yet opened
}

// Next returns the next event, opened. An event it could not open (its
// keys could not be looked up) has left the wrapped subscription already,
// so it is kept and comes again on the next call: as with the stores'
// own subscriptions, Next may be called again after an error.
func (s *subscription) Next(ctx context.Context) (eventstore.RecordedEvent, error) {
	if s.pending == nil {
		ev, err := s.Subscription.Next(ctx)
		if err != nil {
			return ev, err
		}
		s.pending = &ev
	}
	evs := []eventstore.RecordedEvent{*s.pending}
	if err := s.store.openAll(ctx, evs); err != nil {
		return eventstore.RecordedEvent{}, err
	}
	s.pending = nil
	return evs[0], nil
}

func (s *Store) sealAll(ctx context.Context, events []eventstore.EventData) ([]eventstore.EventData, error) {
	var out []eventstore.EventData
	for i, ev := range events {
		p, ok := codec.PersonalOf(ev.Type)
		if !ok {
			continue
		}
		if ev.ID == uuid.Nil {
			// The sealed data is bound to the event's ID, so it gets the one
			// the store would otherwise give it.
			ev.ID = uuid.New()
		}
		data, err := s.seal(ctx, ev, p)
		if err != nil {
			return nil, fmt.Errorf("seal %s %s: %w", ev.Type, ev.ID, err)
		}
		if data == nil {
			continue
		}
		if out == nil {
			out = append([]eventstore.EventData(nil), events...)
		}
		out[i].ID, out[i].Data = ev.ID, data
	}
	if out == nil {
		return events, nil
	}
	return out, nil
}

// seal returns ev's data with its personal fields sealed, or nil when it
// has nothing to seal.
func (s *Store) seal(ctx context.Context, ev eventstore.EventData, p codec.Personal) (json.RawMessage, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(ev.Data, &fields); err != nil {
		return nil, err
	}
	emailID := stringField(fields, p.KeyField)
	if emailID == "" {
		return nil, nil
	}
	private := map[string]json.RawMessage{}
	for _, f := range p.Fields {
		if v, ok := fields[f]; ok {
			private[f] = v
			delete(fields, f)
		}
	}
	if len(private) == 0 {
		return nil, nil
	}
	id := codec.KeyID(emailID)
	key, err := s.keys.Ensure(ctx, id, stringField(fields, p.AccountField))
	if err != nil {
		return nil, err
	}
	plain, err := json.Marshal(private)
	if err != nil {
		return nil, err
	}
	ct, err := key.Seal(plain, bindTo(ev.ID.String()))
	if err != nil {
		return nil, err
	}
	env, err := json.Marshal(envelope{Key: id, Sealed: ct})
	if err != nil {
		return nil, err
	}
	clear, err := json.Marshal(fields)
	if err != nil {
		return nil, err
	}
	// The sealed member goes last, so that opening is a splice of bytes
	// rather than a decoding of the whole event (see split).
	out := append(clear[:len(clear)-1:len(clear)-1], ',')
	if len(fields) == 0 {
		out = out[:len(out)-1]
	}
	out = append(append(append(out, personalKey...), env...), '}')
	return out, nil
}

// personalKey starts the member that replaces the personal fields, always
// the last of an event.
var personalKey = []byte(`"personal":`)

// split cuts a sealed event's data into its clear part (without the
// closing brace or the comma before the member) and its envelope. ok is
// false for data that holds no sealed member.
func split(data []byte) (clear []byte, env envelope, ok bool, err error) {
	data = bytes.TrimRight(data, " \t\r\n")
	i := bytes.LastIndex(data, personalKey)
	if i < 1 || data[len(data)-1] != '}' {
		return nil, envelope{}, false, nil
	}
	// A key inside a string would have its quotes escaped, so the member
	// found is one of the object's, and the last.
	member := data[i+len(personalKey) : len(data)-1]
	if env, ok = parseEnvelope(member); !ok {
		if err := json.Unmarshal(member, &env); err != nil {
			return nil, envelope{}, false, err
		}
	}
	clear = bytes.TrimRight(data[:i], " \t\r\n")
	clear = bytes.TrimSuffix(clear, []byte(","))
	return clear, env, true, nil
}

// parseEnvelope reads an envelope in the exact form seal writes it,
// {"key":"…","sealed":"<base64>"}, without a JSON decoder: every event of
// every reader of the log passes here. ok is false for any other form,
// which json.Unmarshal then reads.
func parseEnvelope(b []byte) (env envelope, ok bool) {
	const keyStart, sealedStart = `{"key":"`, `","sealed":"`
	rest, found := bytes.CutPrefix(b, []byte(keyStart))
	if !found {
		return envelope{}, false
	}
	key, rest, found := bytes.Cut(rest, []byte(sealedStart))
	if !found || bytes.ContainsAny(key, `"\`) {
		return envelope{}, false
	}
	enc, found := bytes.CutSuffix(rest, []byte(`"}`))
	if !found {
		return envelope{}, false
	}
	sealed := make([]byte, base64.StdEncoding.DecodedLen(len(enc)))
	n, err := base64.StdEncoding.Decode(sealed, enc)
	if err != nil {
		return envelope{}, false
	}
	return envelope{Key: string(key), Sealed: sealed[:n]}, true
}

// openAll replaces each sealed event's data with its opened form, looking
// up every key the events need at once.
func (s *Store) openAll(ctx context.Context, evs []eventstore.RecordedEvent) error {
	type sealedEvent struct {
		i     int
		clear []byte
		env   envelope
	}
	var todo []sealedEvent
	var ids []string
	for i, ev := range evs {
		if _, ok := codec.PersonalOf(ev.Type); !ok {
			continue
		}
		clear, env, ok, err := split(ev.Data)
		if err != nil {
			return fmt.Errorf("open %s %s: %w", ev.Type, ev.ID, err)
		}
		if !ok {
			continue // recorded before sealing, or nothing personal
		}
		todo = append(todo, sealedEvent{i: i, clear: clear, env: env})
		ids = append(ids, env.Key)
	}
	if len(todo) == 0 {
		return nil
	}
	keys, err := s.keys.Lookup(ctx, ids...)
	if err != nil {
		return err
	}
	for _, t := range todo {
		ev := &evs[t.i]
		// A key that is missing was removed by hand: the data is as gone
		// as if it had been destroyed.
		key := keys[t.env.Key]
		var private []byte
		if key.Erased() {
			private = []byte(`{"erased":true}`)
		} else if private, err = key.Open(t.env.Sealed, bindTo(ev.ID.String())); err != nil {
			return fmt.Errorf("open %s %s: %w", ev.Type, ev.ID, err)
		}
		ev.Data = join(t.clear, private)
	}
	return nil
}

// join merges the members of the JSON object private into the clear
// part of an event (an object without its closing brace).
func join(clear, private []byte) json.RawMessage {
	inner := bytes.TrimSpace(private)
	inner = bytes.TrimSpace(inner[1 : len(inner)-1]) // without its braces
	out := make([]byte, 0, len(clear)+len(inner)+2)
	out = append(out, clear...)
	if len(inner) > 0 {
		if !bytes.HasSuffix(bytes.TrimSpace(clear), []byte("{")) {
			out = append(out, ',')
		}
		out = append(out, inner...)
	}
	return append(out, '}')
}

func stringField(fields map[string]json.RawMessage, name string) string {
	if name == "" {
		return ""
	}
	var s string
	_ = json.Unmarshal(fields[name], &s)
	return s
}
