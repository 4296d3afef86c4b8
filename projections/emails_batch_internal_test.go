package projections

import (
	"encoding/json"
	"reflect"
	"testing"
)

// Timeline metadata written directly decodes to what json.Marshal of the
// row path's map gives, whatever the strings hold (no list is null).
func TestJSONObjectMatchesMarshal(t *testing.T) {
	for _, s := range []string{"", "plain", `q"uote`, `back\slash`, "ctl\x00\x01\x1f\n\t", "<a&b>", "é ✓ 𝄞", "bad\xff\xfeutf8", "\u2028\u2029"} {
		got := object().str("s", s).strs("list", []string{s, "x"}).strs("none", nil).strs("empty", []string{}).end()
		want, _ := json.Marshal(map[string]any{"s": s, "list": []string{s, "x"}, "none": listed(nil), "empty": []string{}})
		var g, w any
		if err := json.Unmarshal([]byte(got), &g); err != nil {
			t.Fatalf("%q: %s is not JSON: %v", s, got, err)
		}
		json.Unmarshal(want, &w)
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("%q: %s, want %s", s, got, want)
		}
	}
	if got := object().end(); got != "{}" {
		t.Fatalf("empty object %s", got)
	}
}

// FuzzJSONObject is TestJSONObjectMatchesMarshal for any string: a
// recipient, user agent or link from provider feedback.
func FuzzJSONObject(f *testing.F) {
	for _, s := range []string{"", "plain", `q"uote`, `back\slash`, "ctl\x00\x01\x1f\n\t\x7f", "<a&b>", "é ✓ 𝄞", "bad\xff\xfeutf8", "\u2028\u2029", "\xed\xa0\x80 surrogate", "\xef\xbf\xbd real U+FFFD"} {
		f.Add(s, "x")
	}
	f.Fuzz(func(t *testing.T, s, k string) {
		got := object().str(k, s).strs("list", []string{s, k}).end()
		want, err := json.Marshal(map[string]any{k: s, "list": []string{s, k}})
		if err != nil {
			t.Fatal(err)
		}
		var g, w any
		if err := json.Unmarshal([]byte(got), &g); err != nil {
			t.Fatalf("%q: %s is not JSON: %v", s, got, err)
		}
		if err := json.Unmarshal(want, &w); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("%q: %s, want %s", s, got, want)
		}
	})
}
