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
	h := sha256.New()
	for _, part := range [][]byte{
		[]byte(prev),
		[]byte(stream),
		[]byte(strconv.FormatUint(revision, 10)),
		[]byte(ev.ID.String()),
		[]byte(ev.Type),
		[]byte(strconv.Itoa(ev.SchemaVersion)),
		ev.Data,
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
