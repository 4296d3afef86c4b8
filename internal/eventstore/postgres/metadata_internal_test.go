package postgres

import (
	"encoding/json"
	"testing"

	"github.com/mailroom/mailroom/internal/eventstore"
)

// What Mailroom writes is read without encoding/json, and reads as it
// would.
func TestWrittenMetadataIsReadDirectly(t *testing.T) {
	for _, m := range []eventstore.Metadata{
		{},
		{Actor: "operator"},
		{CorrelationID: "req_6XD467WSPGCNVBHY6TQGKF6DL7", CausationID: "01a220df-22e4-7312-86d7-119cf304ec69",
			Actor: "apikey:bc3072b4-a973-482f-956b-c0c9eae6f7ff", RequestID: "req_6XD467WSPGCNVBHY6TQGKF6DL7", ClientRequestID: "checkout-42 ünïcode"},
	} {
		written, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := plainMetadata(written)
		if !ok || got != m {
			t.Errorf("plainMetadata(%s) = %+v, %v; want %+v read directly", written, got, ok, m)
		}
	}
	// Anything else is left to encoding/json, and reads as it would.
	for _, other := range []string{
		`{ "actor":"a"}`,           // spaced
		`{"actor":"a\"b"}`,         // escaped
		`{"actor":"a","hash":"h"}`, // another member
		`{"Actor":"a"}`,            // another spelling
		`{"actor":null}`,           // not a string
		`{"actor":"a",}`,           // not JSON
		`{"actor":"a"}}`,           // not JSON
		"{\"actor\":\"\xff\"}",     // not UTF-8
		"{\"actor\":\"a\tb\"}",     // a control character
	} {
		if _, ok := plainMetadata([]byte(other)); ok {
			t.Errorf("plainMetadata(%s) read it; want it left to encoding/json", other)
		}
		got, gotErr := decodeMetadata([]byte(other))
		var want eventstore.Metadata
		wantErr := json.Unmarshal([]byte(other), &want)
		if got != want || (gotErr == nil) != (wantErr == nil) {
			t.Errorf("decodeMetadata(%s) = %+v, %v; encoding/json reads %+v, %v", other, got, gotErr, want, wantErr)
		}
	}
}

// A member given twice: both readings take the last.
func TestRepeatedMetadataMemberReadsTheLast(t *testing.T) {
	if m, ok := plainMetadata([]byte(`{"actor":"a","actor":"b"}`)); !ok || m.Actor != "b" {
		t.Fatalf("read %+v, %v; want actor b", m, ok)
	}
}

// Whatever the direct reading accepts, encoding/json reads the same.
func FuzzMetadataReadsAsJSONWould(f *testing.F) {
	f.Add([]byte(`{"correlation_id":"c","causation_id":"e","actor":"a","request_id":"r","client_request_id":"x"}`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"actor":"a","actor":"b"}`))
	f.Add([]byte(`{"actor":"\u00e9"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := plainMetadata(b)
		if !ok {
			return
		}
		var want eventstore.Metadata
		if err := json.Unmarshal(b, &want); err != nil || got != want {
			t.Fatalf("plainMetadata(%q) = %+v; encoding/json reads %+v, %v", b, got, want, err)
		}
	})
}
