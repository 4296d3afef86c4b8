package sealed

import (
	"bytes"
	"encoding/json"
	"testing"
)

// The envelope's fast reading must agree with JSON's on what seal writes,
// and leave every other form to JSON.
func TestEnvelopeReadsAsJSONWould(t *testing.T) {
	written, err := json.Marshal(envelope{Key: "email:6f0c", Sealed: []byte("\x00\xffsealed+/bytes\"\\")})
	if err != nil {
		t.Fatal(err)
	}
	var want envelope
	if err := json.Unmarshal(written, &want); err != nil {
		t.Fatal(err)
	}
	got, ok := parseEnvelope(written)
	if !ok || got.Key != want.Key || !bytes.Equal(got.Sealed, want.Sealed) {
		t.Fatalf("parseEnvelope(%s) = %q, %v; want %q", written, got, ok, want)
	}
	for _, other := range []string{
		`{ "key":"k","sealed":"AAAA"}`,   // spaced
		`{"sealed":"AAAA","key":"k"}`,    // reordered
		`{"key":"k\"x","sealed":"AAAA"}`, // escaped key
		`{"key":"k","sealed":"AA=A"}`,    // not base64
		`{"key":"k","sealed":"AAAA"`,     // cut short
	} {
		if env, ok := parseEnvelope([]byte(other)); ok {
			t.Errorf("parseEnvelope(%s) = %q, read; want it left to JSON", other, env)
		}
	}
	// A reordered envelope still opens, through JSON.
	data := []byte(`{"email_id":"e","personal":{"sealed":"AAAA","key":"k"}}`)
	clear, env, ok, err := split(data)
	if err != nil || !ok || string(clear) != `{"email_id":"e"` || env.Key != "k" || !bytes.Equal(env.Sealed, []byte{0, 0, 0}) {
		t.Fatalf("split(%s) = %s, %q, %v, %v", data, clear, env, ok, err)
	}
}
