package postgres

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/mailroom/mailroom/internal/eventstore"
)

// decodeMetadata reads an event's metadata column. What Mailroom writes, a
// flat object of plain strings, is read directly; anything else (spaces,
// escapes, other members, other spellings) is left to encoding/json, with
// the same result. Through encoding/json alone it took a third of the CPU
// of reading a stream, more than decoding the events themselves.
func decodeMetadata(b []byte) (eventstore.Metadata, error) {
	if m, ok := plainMetadata(b); ok {
		return m, nil
	}
	var m eventstore.Metadata
	err := json.Unmarshal(b, &m)
	return m, err
}

// plainMetadata reads b if it is an object whose members are all
// metadata fields, spelt as written, with plain string values.
func plainMetadata(b []byte) (m eventstore.Metadata, ok bool) {
	if len(b) < 2 || b[0] != '{' || b[len(b)-1] != '}' {
		return m, false
	}
	rest := b[1 : len(b)-1]
	if len(rest) == 0 {
		return m, true
	}
	for {
		key, r, ok := plainString(rest)
		if !ok || len(r) == 0 || r[0] != ':' {
			return eventstore.Metadata{}, false
		}
		val, r, ok := plainString(r[1:])
		if !ok {
			return eventstore.Metadata{}, false
		}
		switch string(key) {
		case "correlation_id":
			m.CorrelationID = string(val)
		case "causation_id":
			m.CausationID = string(val)
		case "actor":
			m.Actor = string(val)
		case "request_id":
			m.RequestID = string(val)
		case "client_request_id":
			m.ClientRequestID = string(val)
		default:
			return eventstore.Metadata{}, false
		}
		if len(r) == 0 {
			return m, true
		}
		if r[0] != ',' {
			return eventstore.Metadata{}, false
		}
		rest = r[1:]
	}
}

// plainString reads the JSON string that b starts with if it needs no
// decoding: no escapes, no control characters, valid UTF-8.
func plainString(b []byte) (s, rest []byte, ok bool) {
	if len(b) == 0 || b[0] != '"' {
		return nil, nil, false
	}
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			if !utf8.Valid(b[1:i]) {
				return nil, nil, false
			}
			return b[1:i], b[i+1:], true
		case c == '\\' || c < 0x20:
			return nil, nil, false
		}
	}
	return nil, nil, false
}
