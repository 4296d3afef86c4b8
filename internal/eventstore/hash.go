package eventstore

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
)

// ChainHash computes the tamper-evidence hash of an event: SHA-256 over the
// previous event's hash in the same stream ("" for the first event) and the
// event's identity, revision, type, schema version, data and metadata. An
// auditor who recomputes the chain from the first event detects any change,
// insertion or removal inside a stream.
func ChainHash(prev, stream string, revision uint64, ev EventData) string {
	meta, _ := json.Marshal(ev.Metadata) // a struct of strings always marshals
	return chainHash(prev, stream, revision, ev.ID.String(), ev.Type, ev.SchemaVersion, ev.Data, meta)
}

// chainHash is ChainHash of an event's parts as an export holds them:
// each part is hashed as its length in bytes (decimal), a colon and its
// bytes, so no two different events hash the same parts.
func chainHash(prev, stream string, revision uint64, id, typ string, schemaVersion int, data, meta []byte) string {
	h := sha256.New()
	for _, part := range [][]byte{
		[]byte(prev),
		[]byte(stream),
		[]byte(strconv.FormatUint(revision, 10)),
		[]byte(id),
		[]byte(typ),
		[]byte(strconv.Itoa(schemaVersion)),
		data,
		meta,
	} {
		h.Write([]byte(strconv.Itoa(len(part))))
		h.Write([]byte{':'})
		h.Write(part)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Recomputed returns the hash the recorded event should carry given the
// previous event's hash.
func (e RecordedEvent) Recomputed(prev string) string {
	return ChainHash(prev, e.StreamID, e.StreamRevision, EventData{
		ID: e.ID, Type: e.Type, SchemaVersion: e.SchemaVersion, Data: e.Data, Metadata: e.Metadata,
	})
}
