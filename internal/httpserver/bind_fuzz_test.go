package httpserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/labstack/echo/v4"
)

// FuzzReadJSON checks ReadJSON on any request body: it answers a problem a
// client can act on (400, 413 or 422), never a panic or a 500; what it
// accepts is what encoding/json decodes, from valid UTF-8; and a field it
// names exists in the body and holds what the problem says.
func FuzzReadJSON(f *testing.F) {
	for _, s := range []string{
		`{"from":"a@b.co","to":["c@d.co"],"count":3,"tracking":true,"send_at":"2025-01-02T03:04:05Z"}`,
		`{"to":"c@d.co","attachments":[{"filename":"a.pdf","content":"QQ=="}],"headers":{"X-A":"1"}}`,
		`{"count":"3"}`, `{"count":99999999999999999999}`, `{"count":-1e400}`, `{"to":[1]}`, `{"to":["a",null]}`,
		`{"attachments":[{},{"filename":7}]}`, `{"headers":{"a.b":{"c":1}}}`, `{"permissions":null}`, `{"permissions":[null]}`,
		`{"send_at":"yesterday"}`, `{"tracking":"yes"}`, `{"FROM":1}`, `{"a\u002eb":[],"from":[]}`,
		"{\"from\":\"\xff\"}", "{\"\xfe\":1}", "{\"to\":[\"ok\",\"caf\xc3\"]}",
		`[]`, `null`, ` `, `"x"`, `{"from":"a"} {}`, `{"from":"a",}`, `{"from":"\ud800"}`,
		"\xef\xbb\xbf{}", "\xff\xfe{\x00}\x00", `from=a&to=b`, `{"to":` + strings.Repeat("[", 100),
		`{"attachments":[` + strings.Repeat(`{},`, 1000) + `{}]}`,
	} {
		f.Add([]byte(s))
	}
	e := echo.New()
	f.Fuzz(func(t *testing.T, body []byte) {
		c := e.NewContext(httptest.NewRequest("POST", "/", bytes.NewReader(body)), httptest.NewRecorder())
		var got sendRequest
		data, err := ReadJSON(c, &got)
		var tree any
		syntaxOK := json.Unmarshal(body, &tree) == nil
		if err == nil {
			var want sendRequest
			if werr := json.Unmarshal(body, &want); werr != nil || !reflect.DeepEqual(got, want) || !bytes.Equal(data, body) {
				t.Fatalf("ReadJSON took %q as %+v; encoding/json gives %+v, %v", body, got, want, werr)
			}
			if !utf8.Valid(body) {
				t.Fatalf("ReadJSON took %q, which is not UTF-8", body)
			}
			return
		}
		var p *Problem
		if !errors.As(err, &p) {
			t.Fatalf("ReadJSON(%q): %v is no problem (a 500)", body, err)
		}
		switch p.Status {
		case 400, 413, 422:
		default:
			t.Fatalf("ReadJSON(%q): status %d", body, p.Status)
		}
		if !syntaxOK && p.Code != "invalid_json" && p.Code != "invalid_type" && p.Status != 422 {
			t.Fatalf("ReadJSON(%q) of invalid JSON: %v", body, p)
		}
		if !syntaxOK {
			return
		}
		for _, fe := range p.Errors {
			if fe.Field == "body" || fe.Field == "" {
				continue
			}
			v, ok := resolve(tree, fe.Field)
			if !ok {
				if hasDottedKey(tree) {
					continue // a key with a dot reads as two segments
				}
				t.Fatalf("ReadJSON(%q) names %q, which the body does not have: %v", body, fe.Field, p)
			}
			switch {
			case fe.Message == "must be valid UTF-8":
				// The string, or the object with the key, holding the
				// bad byte (decoded as U+FFFD).
				s, isString := v.(string)
				m, isObject := v.(map[string]any)
				bad := isString && strings.ContainsRune(s, utf8.RuneError)
				for k := range m {
					bad = bad || (isObject && strings.ContainsRune(k, utf8.RuneError))
				}
				if !bad {
					t.Fatalf("ReadJSON(%q) blames %q (%v) for bytes that are not UTF-8", body, fe.Field, v)
				}
			case strings.HasPrefix(fe.Message, "has more than"):
				if n := items(v); n <= MaxItems {
					t.Fatalf("ReadJSON(%q) says %q has too many items; it has %d", body, fe.Field, n)
				}
			}
		}
	})
}

// resolve follows a field path ("attachments.0.filename") in a decoded
// document.
func resolve(v any, path string) (any, bool) {
	for seg := range strings.SplitSeq(path, ".") {
		switch x := v.(type) {
		case map[string]any:
			e, ok := x[seg]
			for k := range x {
				// encoding/json names a field as the struct spells it,
				// matching keys without regard to case.
				if !ok && strings.EqualFold(k, seg) {
					e, ok = x[k], true
				}
			}
			if !ok {
				return nil, false
			}
			v = e
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	return v, true
}

func hasDottedKey(v any) bool {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if strings.Contains(k, ".") || hasDottedKey(e) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if hasDottedKey(e) {
				return true
			}
		}
	}
	return false
}

func items(v any) int {
	switch x := v.(type) {
	case map[string]any:
		return len(x)
	case []any:
		return len(x)
	}
	return 0
}

// FuzzCheckItems checks checkItems against encoding/json on bodies with
// around MaxItems items: a body with a container of more is refused, one
// without is not. The body is pre, then n copies of item joined by commas
// (n near MaxItems, chosen by extra), then post.
func FuzzCheckItems(f *testing.F) {
	f.Add(`{"to":[`, `"a@b.co"`, `]}`, uint8(0))
	f.Add(`{"to":[`, `"a@b.co"`, `]}`, uint8(2))
	f.Add(`{"attachments":[`, `{"filename":"a,b]}","content":"QQ=="}`, `]}`, uint8(1))
	f.Add(`{"headers":{"x":1,`, `"k":"v"`, `}}`, uint8(3))
	f.Add(`[[`, `[]`, `],[]]`, uint8(1))
	f.Add(`{"a\"":[`, `1.5e3`, `]}`, uint8(1))
	f.Add(`{"to":[`, `"\\\""`, `]}`, uint8(1))
	f.Add(`{"t":[`, `null`, `],"u":[1,2]}`, uint8(4))
	f.Fuzz(func(t *testing.T, pre, item, post string, extra uint8) {
		n := MaxItems - 2 + int(extra%5)
		body := pre + strings.Repeat(item+",", n-1) + item + post
		most, ok := largestContainer([]byte(body))
		if !ok {
			checkItems([]byte(body)) // malformed: only must not panic
			return
		}
		p := checkItems([]byte(body))
		if (p != nil) != (most > MaxItems) {
			t.Fatalf("checkItems(%.200q…) = %v; its largest container has %d items", body, p, most)
		}
	})
}

// largestContainer is the most items (members, a key given twice counting
// twice) of any array or object in a valid JSON document.
func largestContainer(data []byte) (int, bool) {
	var tree any
	if json.Unmarshal(data, &tree) != nil {
		return 0, false
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	type open struct {
		object, expectKey bool
		n                 int
	}
	var stack []open
	most := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return most, true
		}
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			most = max(most, stack[len(stack)-1].n)
			stack = stack[:len(stack)-1]
			continue
		}
		if len(stack) > 0 {
			switch top := &stack[len(stack)-1]; {
			case !top.object:
				top.n++
			case top.expectKey:
				top.n++
				top.expectKey = false
			default:
				top.expectKey = true
			}
		}
		if d, ok := tok.(json.Delim); ok {
			stack = append(stack, open{object: d == '{', expectKey: d == '{'})
		}
	}
}
