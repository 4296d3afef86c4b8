// Package codec turns domain events into event-store records and back. It is
// the one place that knows every event type name, the schema version each
// is written in, and how records of older versions are read.
//
// Two ways read a record. Decode is for decisions: an event type or schema
// version it does not know is an error, since folding a stream without one
// of its events would decide on a wrong state. DecodeKnown is for readers
// of the whole log (projections, process managers), which meet events
// written by newer code and skip what they do not know.
package codec

import (
	"encoding/json"
	"strings"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/account"
	"github.com/mailroom/mailroom/domain/apikey"
	"github.com/mailroom/mailroom/domain/delivery"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/domain/sendingdomain"
	"github.com/mailroom/mailroom/domain/webhook"
	"github.com/mailroom/mailroom/internal/eventstore"
)

// registry holds every event type of the domain; a mistake in it stops the
// program at start-up rather than at the first event of the faulty type.
var registry = mustRegistry()

func mustRegistry() *Registry {
	r, err := NewRegistry(account.Events(), apikey.Events(), sendingdomain.Events(), email.Events(), webhook.Events(), delivery.Events())
	if err != nil {
		panic(err)
	}
	// Version 2: reply_to is a list of addresses, no longer one string.
	if err := r.Evolve((&email.Queued{}).EventType(), Schema{Version: 2, Upcasters: map[int]Upcaster{1: replyToAsList}}); err != nil {
		panic(err)
	}
	return r
}

// Ours reports whether an event of eventType in stream could be one of
// Mailroom's: one of its types, in a stream named as Mailroom names its
// streams. Another application sharing the store may well use a type name
// such as AccountCreated, in streams of its own.
func Ours(stream, eventType string) bool {
	if _, err := registry.Version(eventType); err != nil {
		return false
	}
	for _, prefix := range streamPrefixes {
		if strings.HasPrefix(stream, prefix) {
			return true
		}
	}
	return false
}

// streamPrefixes start the names of Mailroom's streams.
var streamPrefixes = []string{
	account.Stream(""), strings.TrimSuffix(account.ErasureStream("", ""), "-"), apikey.Stream(""),
	sendingdomain.Stream(""), sendingdomain.NameStream(""), email.Stream(""),
	webhook.Stream(""), webhook.SlotsStream(""), delivery.Stream(""),
}

// Encode prepares e for appending; its type must be registered.
func Encode(e domain.Event, meta eventstore.Metadata) (eventstore.EventData, error) {
	return registry.Encode(e, meta)
}

// EncodeAll encodes a decision's events with shared metadata.
func EncodeAll(evs []domain.Event, meta eventstore.Metadata) ([]eventstore.EventData, error) {
	return registry.EncodeAll(evs, meta)
}

// Decode returns the domain event a record holds, for a decision: an
// unknown type or a newer version is an error.
func Decode(ev eventstore.RecordedEvent) (domain.Event, error) {
	return registry.Decode(ev)
}

// DecodeKnown returns the domain event a record holds, for a reader of the
// whole log: an unknown type or a newer version is reported as not known.
func DecodeKnown(ev eventstore.RecordedEvent) (domain.Event, bool, error) {
	return registry.DecodeKnown(ev)
}

// replyToAsList upcasts EmailQueued from version 1, which held reply_to as
// one string joined with ", " (later version 1 records already hold a
// list). The string is split the same way, which is what it meant when it
// was written.
func replyToAsList(data json.RawMessage) (json.RawMessage, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return nil, err
	}
	var joined string
	if err := json.Unmarshal(fields["reply_to"], &joined); err != nil {
		return data, nil // absent, or already a list
	}
	if joined == "" {
		delete(fields, "reply_to")
	} else {
		list, err := json.Marshal(strings.Split(joined, ", "))
		if err != nil {
			return nil, err
		}
		fields["reply_to"] = list
	}
	return json.Marshal(fields)
}
