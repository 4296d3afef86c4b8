package httpserver

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/labstack/echo/v4"
)

type attachment struct {
	Filename string `json:"filename"`
	Content  string `json:"content"`
}

type sendRequest struct {
	From        string            `json:"from"`
	To          StringOrList      `json:"to"`
	Permissions Strings           `json:"permissions"`
	Attachments []attachment      `json:"attachments"`
	Headers     map[string]string `json:"headers"`
	Count       int               `json:"count"`
	Tracking    *bool             `json:"tracking"`
	SendAt      *time.Time        `json:"send_at"`
}

func bindServer(t *testing.T) *testServer {
	return newServer(t, func(e *echo.Echo) {
		e.POST("/bind", func(c echo.Context) error {
			var req sendRequest
			if err := BindJSON(c, &req); err != nil {
				return err
			}
			return c.JSON(http.StatusOK, req)
		})
	})
}

func TestBindJSONInvalidJSON(t *testing.T) {
	s := bindServer(t)
	for _, body := range []string{
		``,
		`   `,
		`{"from":`,
		`{"from":"a"} trailing`,
		`{"from":"a"}{"from":"b"}`,
		`not json`,
		`{'from':'a'}`,
	} {
		res := s.post(t, "/bind", body)
		p := res.problem(t)
		if res.status != 400 || p.Code != "invalid_json" || p.Detail == "" || len(p.Errors) != 0 {
			t.Errorf("%q: %d %s", body, res.status, res.body)
		}
	}
}

// A body that is not even an object is told so in words its sender can use,
// not in the decoder's.
func TestBindJSONBodiesThatAreNotObjects(t *testing.T) {
	s := bindServer(t)
	for body, want := range map[string]string{
		"from=a%40example.test&to=b%40example.org":     "the request body is not a JSON object; send one, with Content-Type: application/json",
		"--boundary\r\nContent-Disposition: form-data": "the request body is not a JSON object; send one, with Content-Type: application/json",
		"\ufeff{\"from\":\"a\"}":                       "the request body starts with a byte order mark (U+FEFF); send the JSON without one",
		"\xff\xfe{\x00}\x00":                           "the request body is not UTF-8 (UTF-16 or UTF-32, it seems); send the JSON in UTF-8",
		"{\x00\"\x00}\x00":                             "the request body is not UTF-8 (UTF-16 or UTF-32, it seems); send the JSON in UTF-8",
		"\x00{\x00}":                                   "the request body is not UTF-8 (UTF-16 or UTF-32, it seems); send the JSON in UTF-8",
		`{"from":"a",}`:                                "the request body is not valid JSON: invalid character '}' looking for beginning of object key string (at byte 13)",
	} {
		res := s.post(t, "/bind", body)
		if p := res.problem(t); res.status != 400 || p.Code != "invalid_json" || p.Detail != want {
			t.Errorf("%q: %d %s", body, res.status, res.body)
		}
	}
}

// A compressed body is refused as such, not as malformed JSON; "identity"
// is no compression.
func TestBindJSONCompressedBody(t *testing.T) {
	s := bindServer(t)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte(`{"from":"a"}`))
	zw.Close()
	res := s.do(t, http.MethodPost, "/bind", &gz, map[string]string{"Content-Encoding": "gzip"})
	if p := res.problem(t); res.status != 415 || p.Code != "unsupported_encoding" || !strings.Contains(p.Detail, "gzip") {
		t.Errorf("gzip: %d %s", res.status, res.body)
	}
	if got := res.header.Get("Accept-Encoding"); got != "identity" {
		t.Errorf("gzip: Accept-Encoding %q, want identity (RFC 9110 15.5.16)", got)
	}
	// Every coding listed counts, in one header or several.
	req, _ := http.NewRequest(http.MethodPost, s.URL+"/bind", strings.NewReader(`{"from":"a"}`))
	req.Header.Add("Content-Encoding", "identity")
	req.Header.Add("Content-Encoding", "gzip")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 415 {
		t.Errorf("identity, then gzip: %v %v", resp, err)
	}
	res = s.do(t, http.MethodPost, "/bind", strings.NewReader(`{"from":"a"}`), map[string]string{"Content-Encoding": "identity"})
	if res.status != 200 {
		t.Errorf("identity: %d %s", res.status, res.body)
	}
}

func TestBindJSONInvalidType(t *testing.T) {
	s := bindServer(t)
	cases := []struct {
		body, field, message string
	}{
		{`{"permissions":"emails:send"}`, "permissions", "must be an array"},
		{`{"permissions":["a",7]}`, "permissions.1", "must be a string"},
		{`{"from":42}`, "from", "must be a string"},
		{`{"count":"3"}`, "count", "must be an integer"},
		{`{"count":1.5}`, "count", "must be an integer"},
		{`{"count":1e3}`, "count", "must be an integer"},
		{`{"count":99999999999999999999}`, "count", "is too large"},
		{`{"count":-99999999999999999999}`, "count", "is too small"},
		{`{"tracking":"yes"}`, "tracking", "must be a boolean"},
		{`{"headers":[]}`, "headers", "must be an object"},
		{`{"headers":{"X-A":1}}`, "headers.X-A", "must be a string"},
		{`{"attachments":{}}`, "attachments", "must be an array"},
		{`{"attachments":[{"filename":"a.txt"},{"filename":1}]}`, "attachments.1.filename", "must be a string"},
		{`{"attachments":[{}, {"content":"x"}, {"filename":{"x":[1]}}]}`, "attachments.2.filename", "must be a string"},
		{`{"attachments":[[], {"filename":"a"}]}`, "attachments.0", "must be an object"},
		{`{"to":5}`, "to", "must be a string or an array of strings"},
		{`{"to":{"a":"b"}}`, "to", "must be a string or an array of strings"},
		{`{"to":["a@x.dev",5]}`, "to.1", "must be a string"},
		{`{"to":["a@x.dev","b@x.dev",{"x":1}]}`, "to.2", "must be a string"},
		{`{"to":[["a@x.dev"]]}`, "to.0", "must be a string"},
		{`{"to":true}`, "to", "must be a string or an array of strings"},
		// A null item is no string: decoded, it would be "".
		{`{"to":["a@x.dev",null]}`, "to.1", "must be a string"},
		{`{"permissions":[null]}`, "permissions.0", "must be a string"},
		{`{"permissions":["a",7]}`, "permissions.1", "must be a string"},
		{`{"permissions":"emails:send"}`, "permissions", "must be an array"},
	}
	for _, tc := range cases {
		res := s.post(t, "/bind", tc.body)
		p := res.problem(t)
		if res.status != 400 || p.Code != "invalid_type" {
			t.Errorf("%s: %d %s", tc.body, res.status, res.body)
			continue
		}
		if len(p.Errors) != 1 || p.Errors[0] != (FieldError{tc.field, tc.message}) {
			t.Errorf("%s: errors = %+v, want %s %q", tc.body, p.Errors, tc.field, tc.message)
		}
		// The detail reads as a 422's does for its one field.
		if want := tc.field + ": " + tc.message; p.Detail != want {
			t.Errorf("%s: detail %q, want %q", tc.body, p.Detail, want)
		}
	}

	// Plain errors from an UnmarshalJSON method carry no field.
	res := s.post(t, "/bind", `{"send_at":"yesterday"}`)
	if p := res.problem(t); res.status != 400 || p.Code != "invalid_value" || !strings.Contains(p.Detail, "yesterday") {
		t.Errorf("invalid value: %d %s", res.status, res.body)
	}

	// A root of the wrong type has no field path.
	for _, body := range []string{`["a"]`, ` null `} {
		res = s.post(t, "/bind", body)
		if p := res.problem(t); res.status != 400 || p.Code != "invalid_type" || p.Detail != "the request body must be an object" {
			t.Errorf("root %s: %d %s", body, res.status, res.body)
		}
	}
}

func TestBindJSONAccepts(t *testing.T) {
	s := bindServer(t)
	cases := []struct{ body, to string }{
		{`{"to":"a@x.dev","unknown_field":{"deep":[1]}}`, `["a@x.dev"]`},
		{`{"to":["a@x.dev","b@x.dev"]}`, `["a@x.dev","b@x.dev"]`},
		{`{"to":[]}`, `[]`},
		{`{"to":null}`, `null`},
		{"\n {\"to\" : \"a@x.dev\" } \n", `["a@x.dev"]`},
	}
	for _, tc := range cases {
		res := s.post(t, "/bind", tc.body)
		if res.status != 200 {
			t.Errorf("%s: %d %s", tc.body, res.status, res.body)
			continue
		}
		var got struct{ To json.RawMessage }
		if err := json.Unmarshal(res.body, &got); err != nil || string(got.To) != tc.to {
			t.Errorf("%s: to = %s, want %s", tc.body, got.To, tc.to)
		}
	}
	// The Content-Type is not enforced.
	res := s.do(t, "POST", "/bind", strings.NewReader(`{"from":"a@x.dev"}`), map[string]string{"Content-Type": "text/plain"})
	if res.status != 200 {
		t.Errorf("text/plain: %d %s", res.status, res.body)
	}
}

// encoding/json would turn these bytes into U+FFFD; BindJSON refuses them
// with a 422 naming the field whose string holds them.
func TestBindJSONInvalidUTF8(t *testing.T) {
	s := bindServer(t)
	cases := []struct{ body, field string }{
		{"{\"from\":\"a\xffb\"}", "from"},
		{"{\"to\":[\"ok@x.dev\",\"b\xc3@x.dev\"]}", "to.1"},
		{"{\"to\":\"\xed\xa0\x80@x.dev\"}", "to"},
		{"{\"attachments\":[{},{\"filename\":\"r\xe9sum\xe9.pdf\"}]}", "attachments.1.filename"},
		{"{\"headers\":{\"X-A\":\"v\x80\"}}", "headers.X-A"},
		{"{\"headers\":{\"X-\xfe\":\"v\"}}", "headers"},
		{"{\"from\":\"ok\",\"unknown\":[\"\xff\"]}", "unknown.0"},
		// A surrogate escape outside a pair encodes no character either.
		{`{"from":"a\ud800b"}`, "from"},
		{`{"to":["ok@x.dev","\uDC00@x.dev"]}`, "to.1"},
		{`{"subject":"\ud83d"}`, "subject"},
		{`{"subject":"\ud83d\u0041"}`, "subject"},
		{`{"subject":"\\\ud83d\\ud83d"}`, "subject"},
		// A U+FFFD sent as such is a character: the bad byte after it is named.
		{"{\"from\":\"\uFFFD\",\"subject\":\"\xff\"}", "subject"},
	}
	for _, tc := range cases {
		res := s.post(t, "/bind", tc.body)
		p := res.problem(t)
		if res.status != 422 || p.Code != "validation_failed" {
			t.Errorf("%q: %d %s", tc.body, res.status, res.body)
			continue
		}
		if len(p.Errors) != 1 || p.Errors[0] != (FieldError{tc.field, "must be valid UTF-8"}) {
			t.Errorf("%q: errors = %+v, want %s", tc.body, p.Errors, tc.field)
		}
	}
	// Escapes of characters, pairs included, are for the handler to judge.
	for _, ok := range []string{`{"from":"caf\u00e9 \u0000"}`, `{"subject":"\ud83d\ude00 \uD83D\uDE00"}`, `{"subject":"\\ud800"}`,
		`{"subject":"\ud800\udc00 \udbff\udfff \ue000 \ud7ff"}`} {
		if res := s.post(t, "/bind", ok); res.status != 200 {
			t.Errorf("escapes %s: %d %s", ok, res.status, res.body)
		}
	}
	// Bad bytes outside strings are not JSON at all.
	if res := s.post(t, "/bind", "{\"from\":\"a\"}\xff"); res.status != 400 {
		t.Errorf("bad byte after the document: %d %s", res.status, res.body)
	}
}

func TestJSONPathAt(t *testing.T) {
	// Offsets as encoding/json reports them: end of a scalar, or just past '[' / '{'.
	data := `{"a": [ {"b": 1}, {"c": [true, "x"]} ], "d": {"e.f": null}, "g": []}`
	cases := []struct {
		upTo string // prefix of data ending where the value ends / the container opens
		want string
	}{
		{`{"a": [`, "a"},
		{`{"a": [ {`, "a.0"},
		{`{"a": [ {"b": 1`, "a.0.b"},
		{`{"a": [ {"b": 1}, {"c": [true`, "a.1.c.0"},
		{`{"a": [ {"b": 1}, {"c": [true, "x"`, "a.1.c.1"},
		{`{"a": [ {"b": 1}, {"c": [true, "x"]} ], "d": {"e.f": null`, "d.e.f"},
		{`{"a": [ {"b": 1}, {"c": [true, "x"]} ], "d": {"e.f": null}, "g": [`, "g"},
	}
	for _, tc := range cases {
		if !strings.HasPrefix(data, tc.upTo) {
			t.Fatalf("bad case %q", tc.upTo)
		}
		got, ok := jsonPathAt([]byte(data), int64(len(tc.upTo)))
		if !ok || got != tc.want {
			t.Errorf("offset %d: %q %v, want %q", len(tc.upTo), got, ok, tc.want)
		}
	}
	if _, ok := jsonPathAt([]byte(`{"a":`), 100); ok {
		t.Error("truncated input must not produce a path")
	}
	// Brackets, quotes and escapes inside strings are text, and an escaped
	// key is named as decoded.
	tricky := `{"s": "[{\"]}\\", "k\u0065y": [1, {"x": -2.5e3}], "t": true}`
	for upTo, want := range map[string]string{
		`{"s": "[{\"]}\\"`:                                            "s",
		`{"s": "[{\"]}\\", "k\u0065y": [1`:                            "key.0",
		`{"s": "[{\"]}\\", "k\u0065y": [1, {"x": -2.5e3`:              "key.1.x",
		`{"s": "[{\"]}\\", "k\u0065y": [1, {"x": -2.5e3}], "t": true`: "t",
		`{"s": "[{\"]}\\", "k\u0065`:                                  "",
	} {
		if !strings.HasPrefix(tricky, upTo) {
			t.Fatalf("bad case %q", upTo)
		}
		if got, ok := jsonPathAt([]byte(tricky), int64(len(upTo))); !ok || got != want {
			t.Errorf("tricky, offset %d: %q %v, want %q", len(upTo), got, ok, want)
		}
	}
}

// A wrong type at the end of a large body: the path is found by a scan of
// its bytes.
func BenchmarkJSONPathAtEndOfLargeBody(b *testing.B) {
	data := []byte(`{"zzz":[` + strings.Repeat("0,", 1<<20) + `0],"subject":1}`)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if p, ok := jsonPathAt(data, int64(len(data)-1)); !ok || p != "subject" {
			b.Fatalf("%q %v", p, ok)
		}
	}
}

func TestBodyLimit(t *testing.T) {
	var sawChunked bool
	s := newServer(t, func(e *echo.Echo) {
		e.POST("/small", func(c echo.Context) error {
			if c.Request().ContentLength == -1 {
				sawChunked = true
			}
			var v map[string]any
			if err := BindJSON(c, &v); err != nil {
				return err
			}
			return c.NoContent(204)
		}, BodyLimit(64))
		// A handler that reads the body itself and returns the raw error.
		e.POST("/raw", func(c echo.Context) error {
			if _, err := io.ReadAll(c.Request().Body); err != nil {
				return err
			}
			return c.NoContent(204)
		}, BodyLimit(64))
	})
	big := `{"k":"` + strings.Repeat("x", 100) + `"}`
	small := `{"k":"x"}`

	if res := s.post(t, "/small", small); res.status != 204 {
		t.Errorf("small body: %d %s", res.status, res.body)
	}
	// Declared Content-Length over the limit.
	res := s.post(t, "/small", big)
	if p := res.problem(t); res.status != 413 || p.Code != "payload_too_large" || p.Detail != "the request body exceeds the limit of 64 bytes" {
		t.Errorf("content-length: %d %s", res.status, res.body)
	}
	// Chunked body (no Content-Length) caught while reading.
	res = s.do(t, "POST", "/small", io.MultiReader(strings.NewReader(big)), nil)
	if p := res.problem(t); res.status != 413 || p.Code != "payload_too_large" {
		t.Errorf("chunked: %d %s", res.status, res.body)
	}
	if !sawChunked {
		t.Error("test did not send a chunked body")
	}
	res = s.do(t, "POST", "/raw", io.MultiReader(strings.NewReader(big)), nil)
	if p := res.problem(t); res.status != 413 || p.Code != "payload_too_large" {
		t.Errorf("raw read: %d %s", res.status, res.body)
	}
	if res := s.do(t, "POST", "/small", io.MultiReader(strings.NewReader(small)), nil); res.status != 204 {
		t.Errorf("small chunked: %d %s", res.status, res.body)
	}
}

// A body of exactly the limit is taken, with its length declared or not;
// a byte more is refused.
func TestBodyLimitAtTheLimit(t *testing.T) {
	s := newServer(t, func(e *echo.Echo) {
		e.POST("/small", func(c echo.Context) error {
			var v map[string]any
			if err := BindJSON(c, &v); err != nil {
				return err
			}
			return c.NoContent(204)
		}, BodyLimit(64))
	})
	body := func(n int) string { return `{"k":"` + strings.Repeat("x", n-len(`{"k":""}`)) + `"}` }
	if len(body(64)) != 64 {
		t.Fatalf("body of %d bytes", len(body(64)))
	}
	if res := s.post(t, "/small", body(64)); res.status != 204 {
		t.Errorf("declared body of exactly the limit: %d %s", res.status, res.body)
	}
	if res := s.do(t, "POST", "/small", io.MultiReader(strings.NewReader(body(64))), nil); res.status != 204 {
		t.Errorf("chunked body of exactly the limit: %d %s", res.status, res.body)
	}
	if res := s.post(t, "/small", body(65)); res.status != 413 {
		t.Errorf("declared body a byte over the limit: %d %s", res.status, res.body)
	}
	if res := s.do(t, "POST", "/small", io.MultiReader(strings.NewReader(body(65))), nil); res.status != 413 {
		t.Errorf("chunked body a byte over the limit: %d %s", res.status, res.body)
	}
}

func TestBodyLimitDefault(t *testing.T) {
	if MaxBodyBytes != 45*1024*1024 {
		t.Fatalf("MaxBodyBytes = %d", MaxBodyBytes)
	}
	e := New(Options{Logger: slog.New(slog.DiscardHandler)})
	e.POST("/x", func(c echo.Context) error { return c.NoContent(204) })
	req, _ := http.NewRequest("POST", "/x", strings.NewReader("{}"))
	req.ContentLength = MaxBodyBytes + 1
	rec := newRecorder()
	e.ServeHTTP(rec, req)
	if rec.Code != 413 {
		t.Errorf("over 45 MiB declared: %d", rec.Code)
	}
	var p Problem
	if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Detail != "the request body exceeds the limit of 45 MiB" {
		t.Errorf("problem %s (%v)", rec.Body, err)
	}
}

func TestStringOrList(t *testing.T) {
	var s StringOrList
	if err := json.Unmarshal([]byte(`"a"`), &s); err != nil || len(s) != 1 || s[0] != "a" {
		t.Errorf("string: %v %v", s, err)
	}
	if err := json.Unmarshal([]byte(`["a","b"]`), &s); err != nil || len(s) != 2 {
		t.Errorf("list: %v %v", s, err)
	}
	// An empty string is the field not given; an empty item is an item.
	for _, empty := range []string{`""`, `"  "`} {
		var s StringOrList
		if err := json.Unmarshal([]byte(empty), &s); err != nil || s != nil {
			t.Errorf("%s: %q %v, want nothing given", empty, s, err)
		}
		// Like null, it leaves a value given before it ("cc" twice).
		var twice struct{ Cc StringOrList }
		if err := json.Unmarshal([]byte(`{"cc":"a@example.org","cc":`+empty+`}`), &twice); err != nil || len(twice.Cc) != 1 {
			t.Errorf("a value, then %s: %q %v, want the value kept", empty, twice.Cc, err)
		}
	}
	if err := json.Unmarshal([]byte(`[""]`), &s); err != nil || len(s) != 1 || s[0] != "" {
		t.Errorf(`[""]: %q %v`, s, err)
	}
	for _, bad := range []string{`1`, `{}`, `false`, `[1]`, `[["a"]]`} {
		var te *json.UnmarshalTypeError
		if err := json.Unmarshal([]byte(bad), &s); !errors.As(err, &te) {
			t.Errorf("%s: err = %v, want type error", bad, err)
		}
	}
}

// A body of a million tiny items is refused before it is decoded, naming
// the field that holds them; at the bound, and with the same characters
// inside strings, it is decoded as usual.
func TestBindJSONRefusesHugeContainersBeforeDecoding(t *testing.T) {
	s := bindServer(t)
	items := func(n int, item string) string { return strings.TrimSuffix(strings.Repeat(item+",", n), ",") }
	for _, c := range []struct{ body, field string }{
		{`{"attachments":[` + items(1_000_000, `{}`) + `]}`, "attachments"},
		{`{"to":[` + items(MaxItems+1, `""`) + `]}`, "to"},
		{`{"from":"a","headers":{` + items(MaxItems+1, `"k":"v"`) + `}}`, "headers"},
		{`{"attachments":[{},{"filename":[` + items(MaxItems+1, `1`) + `]}]}`, "attachments.1.filename"},
		{`{"tags":{"a\"b":[` + items(MaxItems+1, `1`) + `]}}`, `tags.a"b`},
		{`[` + items(MaxItems+1, `null`) + `]`, "body"},
		{`{"to":` + strings.Repeat("[", 1000) + items(MaxItems+1, `1`) + strings.Repeat("]", 1000) + `}`, "to" + strings.Repeat(".0", 999)},
	} {
		res := s.post(t, "/bind", c.body)
		p := res.problem(t)
		if res.status != 422 || len(p.Errors) != 1 || p.Errors[0].Field != c.field || p.Errors[0].Message != "has more than 1000 items, more than any field takes" {
			t.Errorf("%.60q…: %d %s", c.body, res.status, res.body)
		}
	}
	// Nesting is the decoder's to refuse, at once: the count stops at its
	// depth rather than keep a frame for every byte of "[[[[…".
	if res := s.post(t, "/bind", `{"to":`+strings.Repeat("[", 5<<20)); res.status != 400 || res.problem(t).Code != "invalid_json" {
		t.Errorf("deep nesting: %d %.200s", res.status, res.body)
	}
	for _, body := range []string{
		`{"to":[` + items(MaxItems, `"a@example.org"`) + `]}`,
		`{"from":"` + items(5000, `[{}]`) + `","to":"a@example.org","headers":{"x":"{[,,,,]}\"[,]"}}`,
	} {
		if res := s.post(t, "/bind", body); res.status != 200 {
			t.Errorf("%.60q…: %d %.300s", body, res.status, res.body)
		}
	}
}

// A body of undeclared length is read whole, whatever its size and however
// the client's pieces arrive.
func TestReadBodyOfUndeclaredLength(t *testing.T) {
	for _, n := range []int{0, 1, 4 << 10, 4<<10 + 1, 3<<20 + 17} {
		want := make([]byte, n)
		for i := range want {
			want[i] = byte(i * 7)
		}
		for name, r := range map[string]io.Reader{
			"whole":  bytes.NewReader(want),
			"halves": iotest.HalfReader(bytes.NewReader(want)),
		} {
			got, err := readBody(r, -1)
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%d bytes read in %s: %d bytes, %v", n, name, len(got), err)
			}
		}
	}
	if _, err := readBody(iotest.TimeoutReader(bytes.NewReader(make([]byte, 10<<10))), -1); err == nil {
		t.Error("a failed read went unreported")
	}
}

// Malformed bodies that end inside a string, close more than they open or
// hold a comma outside any container are a 400 invalid_json, and a root
// number, boolean or string is a 400 invalid_type: never a 500 from the
// item count that runs before decoding.
func TestMalformedBodiesAre400(t *testing.T) {
	s := bindServer(t)
	for _, body := range []string{`{"from":"abc`, `"`, `{"to":["a@x.dev`, `}`, `]`, `{"from":"a"}}`, `{"to":[]]}`, `,`, `{"from":"a"},`} {
		res := s.post(t, "/bind", body)
		if p := res.problem(t); res.status != 400 || p.Code != "invalid_json" {
			t.Errorf("%q: %d %s", body, res.status, res.body)
		}
	}
	for _, body := range []string{`5`, `true`, `"x"`} {
		res := s.post(t, "/bind", body)
		if p := res.problem(t); res.status != 400 || p.Code != "invalid_type" || p.Detail != "the request body must be an object" {
			t.Errorf("root %s: %d %s", body, res.status, res.body)
		}
	}
}

// An object's members count once each, whether their values are strings or
// not: an object of exactly MaxItems string members is decoded as usual.
func TestObjectOfMaxItemsStringMembersIsAccepted(t *testing.T) {
	s := bindServer(t)
	members := make([]string, MaxItems)
	for i := range members {
		members[i] = fmt.Sprintf(`"X-H%d":"v%d"`, i, i)
	}
	body := `{"from":"a@x.dev","headers":{` + strings.Join(members, ",") + `}}`
	if res := s.post(t, "/bind", body); res.status != 200 {
		t.Errorf("headers with %d string members: %d %.300s", MaxItems, res.status, res.body)
	}
}

// A byte that is not UTF-8 in a top-level key is named as the body, not as
// an empty field.
func TestInvalidUTF8InATopLevelKeyNamesTheBody(t *testing.T) {
	s := bindServer(t)
	res := s.post(t, "/bind", "{\"\xff\":\"v\"}")
	if p := res.problem(t); res.status != 422 || len(p.Errors) != 1 || p.Errors[0] != (FieldError{"body", "must be valid UTF-8"}) {
		t.Errorf("%d %s", res.status, res.body)
	}
}

// Brackets and commas inside strings are text, also after an escaped quote
// or an empty string: a body whose strings hold "[1,1,…]" is decoded, not
// refused for having too many items.
func TestItemCountSkipsStringsWithEscapesAndEmptyStrings(t *testing.T) {
	s := bindServer(t)
	many := `[` + strings.Repeat("1,", MaxItems+200) + `1]`
	for _, body := range []string{
		`{"from":"a","headers":{"x":"\"` + many + `"}}`,
		`{"from":"","headers":{"x":"` + many + `"}}`,
	} {
		if res := s.post(t, "/bind", body); res.status != 200 {
			t.Errorf("%.50q…: %d %.200s", body, res.status, res.body)
		}
	}
}

// Whitespace and multi-character numbers, booleans and nulls count as one
// item each wherever they stand: a pretty-printed body of MaxItems values is
// decoded as usual, and MaxItems+1 objects that end in a number are refused.
func TestItemCountReadsWhitespaceAndScalarsWhole(t *testing.T) {
	s := bindServer(t)
	for _, item := range []string{`"a@example.org"`, `12345`, `true`, `null`, `-1.5e3`} {
		body := "{\r\n\t\"to\": [\r\n\t\t" + strings.TrimSuffix(strings.Repeat(item+",\r\n\t\t", MaxItems), ",\r\n\t\t") + "\r\n\t]\r\n}"
		res := s.post(t, "/bind", body)
		// The items are decoded (strings) or refused by the decoder for
		// their type (400), never by the count (422).
		if res.status == 422 {
			t.Errorf("%d items %s, pretty-printed: %d %.200s", MaxItems, item, res.status, res.body)
		}
	}
	body := `{"attachments":[` + strings.TrimSuffix(strings.Repeat(`{"size":1},`, MaxItems+1), ",") + `]}`
	res := s.post(t, "/bind", body)
	if p := res.problem(t); res.status != 422 || len(p.Errors) != 1 || p.Errors[0].Field != "attachments" {
		t.Errorf("%d objects ending in a number: %d %.200s", MaxItems+1, res.status, res.body)
	}
}
