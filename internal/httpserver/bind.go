package httpserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"
)

// MaxBodyBytes caps every request body (45 MiB; 40 MB of base64 attachments plus the rest).
const MaxBodyBytes = 45 << 20

// BodyLimit answers 413 when the declared Content-Length exceeds max, and
// wraps the body so reading past max fails too (chunked bodies included).
func BodyLimit(max int64) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			req := c.Request()
			if req.ContentLength > max {
				return tooLargeProblem(max)
			}
			if req.Body != nil && req.Body != http.NoBody {
				req.Body = http.MaxBytesReader(c.Response().Writer, req.Body, max)
			}
			return next(c)
		}
	}
}

func tooLargeProblem(limit int64) *Problem {
	return TooLarge("the request body exceeds the limit of " + formatBytes(limit))
}

func formatBytes(n int64) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return strconv.FormatInt(n>>20, 10) + " MiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// BindJSON decodes the request body into v with encoding/json, ignoring the
// Content-Type and unknown fields. A compressed body (Content-Encoding) is a
// 415 "unsupported_encoding". Malformed JSON is a 400 "invalid_json"; a
// value of the wrong JSON type is a 400 "invalid_type" naming the field path
// (e.g. "attachments.0.filename"); a string holding bytes that are not UTF-8
// is a 422 naming its field; a body over the limit is a 413.
func BindJSON(c echo.Context, v any) error {
	_, err := ReadJSON(c, v)
	return err
}

// ReadJSON is BindJSON that also returns the body as received, for a
// handler that fingerprints requests.
func ReadJSON(c echo.Context, v any) ([]byte, error) {
	// A compressed body would otherwise be blamed on its JSON.
	for _, enc := range c.Request().Header.Values("Content-Encoding") {
		for _, coding := range strings.Split(enc, ",") {
			if coding = strings.TrimSpace(coding); coding != "" && !strings.EqualFold(coding, "identity") {
				// RFC 9110 15.5.16: the answer names the codings taken.
				c.Response().Header().Set("Accept-Encoding", "identity")
				return nil, NewProblem(http.StatusUnsupportedMediaType, "unsupported_encoding",
					fmt.Sprintf("Content-Encoding %q is not supported; send the body uncompressed", coding))
			}
		}
	}
	body := c.Request().Body
	if body == nil {
		return nil, BadRequest("invalid_json", "the request body is empty; expected a JSON document")
	}
	began := time.Now()
	data, err := readBody(body, c.Request().ContentLength)
	if err != nil {
		var mbe *http.MaxBytesError
		var refused *Problem // no room left for a streamed body
		switch {
		case errors.As(err, &mbe):
			return nil, tooLargeProblem(mbe.Limit)
		case errors.As(err, &refused):
			return nil, refused
		case errors.Is(err, os.ErrDeadlineExceeded) && heldBeforeReading(c.Request(), began):
			return nil, heldTooLong()
		}
		return nil, BadRequest("invalid_body", "the request body could not be read")
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, BadRequest("invalid_json", "the request body is empty; expected a JSON document")
	}
	if string(bytes.TrimSpace(data)) == "null" {
		// encoding/json takes a root null as "nothing to do"; every body
		// of the API is an object, so it is the wrong type like [] is.
		return nil, BadRequest("invalid_type", "the request body must be an object")
	}
	if err := takeTurn(c, len(data)); err != nil {
		return nil, err
	}
	if p := checkItems(data); p != nil {
		return nil, p
	}
	// json.Unmarshal validates the whole input first, so syntax errors and
	// trailing garbage are reported before any type mismatch.
	err = json.Unmarshal(data, v)
	if err == nil {
		// encoding/json quietly turns invalid UTF-8 into U+FFFD: refuse
		// it instead, so what is stored is what was sent.
		if !utf8.Valid(data) {
			return nil, utf8Problem(data)
		}
		// It does the same to a \u escape of half a surrogate pair.
		if at := loneSurrogate(data); at >= 0 {
			return nil, utf8ProblemAt(data, at)
		}
		return data, nil
	}
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	var p *Problem
	var ie *json.InvalidUnmarshalError
	switch {
	case errors.As(err, &se):
		return nil, BadRequest("invalid_json", syntaxDetail(data, se))
	case errors.As(err, &te):
		return nil, typeProblem(data, te)
	case errors.As(err, &p):
		return nil, p
	case errors.As(err, &ie):
		return nil, err // programming error: a 500
	default:
		// An UnmarshalJSON method rejected a value; encoding/json gives no
		// field for such errors, so the detail carries the method's message.
		return nil, BadRequest("invalid_value", "the request body has an invalid value: "+err.Error())
	}
}

// heldBeforeReading reports whether a body read that ran into the read
// timeout at began did so because the server held the request first
// (authentication on a database that did not answer), not because the
// client was slow: the server kept it a second or more before reading, and
// the deadline came within a second of the read.
func heldBeforeReading(r *http.Request, began time.Time) bool {
	since, ok := servedSince(r)
	return ok && began.Sub(since) >= time.Second && time.Since(began) < time.Second
}

// syntaxDetail says what is wrong with a body that is not valid JSON. One
// that does not even start like an object is most likely a form or a
// multipart body, and the decoder's wording ("invalid character 'r' in
// literal false") would only puzzle its sender.
func syntaxDetail(data []byte, se *json.SyntaxError) string {
	start := bytes.TrimLeft(data, " \t\r\n")
	switch {
	case bytes.HasPrefix(start, []byte("\xef\xbb\xbf")):
		return "the request body starts with a byte order mark (U+FEFF); send the JSON without one"
	case bytes.HasPrefix(start, []byte("\xff\xfe")), bytes.HasPrefix(start, []byte("\xfe\xff")),
		len(start) > 1 && (start[0] == 0 || start[1] == 0):
		return "the request body is not UTF-8 (UTF-16 or UTF-32, it seems); send the JSON in UTF-8"
	case len(start) > 0 && start[0] != '{':
		return "the request body is not a JSON object; send one, with Content-Type: application/json"
	}
	return fmt.Sprintf("the request body is not valid JSON: %s (at byte %d)", se.Error(), se.Offset)
}

// readBody reads a body into one buffer of its size: the declared size
// (BodyLimit has checked it), or, for a body of undeclared length, pieces
// copied once into a buffer of the size read. Growing one buffer to the
// largest body would leave as much again as garbage.
func readBody(body io.Reader, declared int64) ([]byte, error) {
	if declared >= 0 {
		buf := bytes.NewBuffer(make([]byte, 0, min(declared, 64<<20)+1))
		_, err := buf.ReadFrom(body)
		return buf.Bytes(), err
	}
	var pieces [][]byte
	next := 4 << 10
	for {
		piece := make([]byte, next)
		n, err := io.ReadFull(body, piece)
		pieces = append(pieces, piece[:n])
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return nil, err
		}
		next = min(next*2, 1<<20)
	}
	if len(pieces) == 1 {
		return pieces[0], nil
	}
	return bytes.Join(pieces, nil), nil
}

// utf8Problem is the 422 for a valid JSON document whose strings hold bytes
// that are not UTF-8 (JSON allows them nowhere else). It names the field
// of the first such string; a bad byte in an object key names the object.
func utf8Problem(data []byte) *Problem {
	at := 0
	for at < len(data) {
		r, size := utf8.DecodeRune(data[at:])
		if r == utf8.RuneError && size == 1 {
			break
		}
		at += size
	}
	return utf8ProblemAt(data, at)
}

// utf8ProblemAt is utf8Problem for the string holding the byte at offset at.
func utf8ProblemAt(data []byte, at int) *Problem {
	const msg = "must be valid UTF-8"
	path, ok := jsonPathAt(data, int64(at)+1)
	if !ok || path == "" {
		return Validation(FieldError{Field: "body", Message: msg})
	}
	return Validation(FieldError{Field: path, Message: msg})
}

// loneSurrogate returns the offset of the first \u escape in data's strings
// that is half a surrogate pair without its other half, or -1. data is
// valid JSON.
func loneSurrogate(data []byte) int {
	if !bytes.Contains(data, []byte(`\u`)) {
		return -1
	}
	inString, high := false, -1 // high: a high half waiting for its low half
	for i := 0; i < len(data); i++ {
		c := data[i]
		if !inString {
			inString = c == '"'
			continue
		}
		if c == '\\' && data[i+1] == 'u' {
			r, _ := strconv.ParseUint(string(data[i+2:i+6]), 16, 16)
			switch {
			case r >= 0xD800 && r < 0xDC00:
				if high >= 0 {
					return high
				}
				high, i = i, i+5
				continue
			case r >= 0xDC00 && r < 0xE000:
				if high < 0 {
					return i
				}
				high, i = -1, i+5
				continue
			}
		}
		if high >= 0 {
			return high
		}
		switch {
		case c == '"':
			inString = false
		case c == '\\' && data[i+1] == 'u':
			i += 5
		case c == '\\':
			i++ // the escaped character
		}
	}
	return -1
}

// typeProblem builds the 400 invalid_type problem for a type mismatch.
func typeProblem(data []byte, te *json.UnmarshalTypeError) *Problem {
	msg := "must be " + expectedJSON(te.Type)
	// An integer is refused for its size only: saying "must be an integer"
	// of 99999999999999999999 would puzzle.
	if n, ok := strings.CutPrefix(te.Value, "number "); ok && !strings.ContainsAny(n, ".eE") && strings.HasSuffix(expectedJSON(te.Type), "integer") {
		msg = "is too large"
		if strings.HasPrefix(n, "-") {
			msg = "is too small"
		}
	}
	path := te.Field
	if te.Offset > 0 {
		if p, ok := jsonPathAt(data, te.Offset); ok && extendsField(p, te.Field) {
			path = p
		}
	}
	if path == "" {
		return BadRequest("invalid_type", "the request body "+msg)
	}
	p := BadRequest("invalid_type", path+": "+msg)
	p.Errors = []FieldError{{Field: path, Message: msg}}
	return p
}

var (
	timeType         = reflect.TypeOf(time.Time{})
	stringOrListType = reflect.TypeOf(StringOrList(nil))
)

// expectedJSON describes the JSON a Go type accepts, for error messages.
func expectedJSON(t reflect.Type) string {
	if t == nil {
		return "of a different type"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t {
	case stringOrListType:
		return "a string or an array of strings"
	case timeType:
		return "a timestamp string"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return "a non-negative integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "a base64 string"
		}
		return "an array"
	case reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "of a different type"
}

// jsonPathAt finds the path ("a.0.b") of the value that ends at offset, as
// encoding/json reports it in UnmarshalTypeError.Offset: the end of a scalar
// or just past the opening bracket of an array or object; for an offset
// within an object key, the object's path. encoding/json's own Field leaves
// out array indexes.
//
// data has passed json.Unmarshal's syntax check, so a plain scan of its
// bytes suffices: a bad value at the end of a 45 MiB body costs about what
// decoding it did, not ten times as much as a token decoder would.
func jsonPathAt(data []byte, offset int64) (string, bool) {
	type frame struct {
		array bool
		index int
		key   string
	}
	var stack []frame
	// expectKey reports whether the next string in an object is a key.
	expectKey := false
	path := func() string {
		parts := make([]string, 0, len(stack))
		for _, f := range stack {
			if f.array {
				parts = append(parts, strconv.Itoa(f.index))
			} else {
				parts = append(parts, f.key)
			}
		}
		return strings.Join(parts, ".")
	}
	// afterValue advances the enclosing container past a finished value.
	afterValue := func() {
		if len(stack) == 0 {
			return
		}
		if top := &stack[len(stack)-1]; top.array {
			top.index++
		} else {
			expectKey = true
		}
	}
	for i := 0; i < len(data); {
		switch c := data[i]; c {
		case ' ', '\t', '\n', '\r', ':', ',':
			i++
		case '{', '[':
			// Entering a container: its members get their own frame.
			if int64(i+1) >= offset {
				return path(), true
			}
			stack = append(stack, frame{array: c == '['})
			expectKey = c == '{'
			i++
		case '}', ']':
			if len(stack) == 0 {
				return "", false
			}
			stack = stack[:len(stack)-1]
			expectKey = false
			afterValue()
			i++
		case '"':
			end, escaped := stringEnd(data, i)
			if end < 0 {
				return "", false
			}
			if expectKey {
				if int64(end) >= offset {
					// Within a key: the path of the object holding it.
					stack = stack[:len(stack)-1]
					return path(), true
				}
				key := string(data[i+1 : end-1])
				if escaped {
					_ = json.Unmarshal(data[i:end], &key)
				}
				stack[len(stack)-1].key = key
				expectKey = false
			} else {
				if int64(end) >= offset {
					return path(), true
				}
				afterValue()
			}
			i = end
		default: // a number, true, false or null
			end := i
			for end < len(data) && !endsScalar(data[end]) {
				end++
			}
			if int64(end) >= offset {
				return path(), true
			}
			afterValue()
			i = end
		}
	}
	return "", false
}

// endsScalar reports whether b ends a number, true, false or null.
func endsScalar(b byte) bool {
	switch b {
	case ' ', '\t', '\n', '\r', ',', ']', '}':
		return true
	}
	return false
}

// stringEnd is the offset just past the JSON string that opens at
// data[start], or -1 when it does not close; escaped says it holds a
// backslash escape.
func stringEnd(data []byte, start int) (end int, escaped bool) {
	for i := start + 1; i < len(data); i++ {
		switch data[i] {
		case '\\':
			escaped = true
			i++
		case '"':
			return i + 1, escaped
		}
	}
	return -1, escaped
}

// extendsField reports whether path agrees with encoding/json's Field, which
// has no array indexes and stops at a map: without its numeric segments, path
// must start with Field.
func extendsField(path, field string) bool {
	if field == "" {
		return true
	}
	var kept []string
	for _, seg := range strings.Split(path, ".") {
		if _, err := strconv.Atoi(seg); err == nil {
			continue
		}
		kept = append(kept, seg)
	}
	want := strings.Split(field, ".")
	if len(kept) < len(want) {
		return false
	}
	for i, seg := range want {
		if kept[i] != seg {
			return false
		}
	}
	return true
}

// StringOrList accepts a JSON string or an array of strings (e.g. an email's
// "to"); a string becomes a one-element list. null leaves it unchanged. An
// empty (or blank) string is the field not given, as templates that fill
// every field write an absent cc; an empty item of an array stays an item.
type StringOrList []string

// UnmarshalJSON implements json.Unmarshaler.
func (s *StringOrList) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	if len(data) == 0 {
		return &json.UnmarshalTypeError{Value: "empty", Type: stringOrListType}
	}
	switch data[0] {
	case 'n':
		return nil
	case '"':
		var one string
		if err := json.Unmarshal(data, &one); err != nil {
			return err
		}
		if strings.TrimSpace(one) == "" {
			return nil // not given, as null: a value given before it stays
		}
		*s = StringOrList{one}
		return nil
	case '[':
		var items []json.RawMessage
		if err := json.Unmarshal(data, &items); err != nil {
			return err
		}
		many, err := stringItems(items)
		if err != nil {
			return err
		}
		*s = StringOrList(many)
		return nil
	}
	return &json.UnmarshalTypeError{Value: jsonKind(data[0]), Type: stringOrListType}
}

// Strings is an array of strings whose items may not be null, which
// encoding/json would take as "", a value the client never sent. null for
// the whole array leaves it unchanged.
type Strings []string

// UnmarshalJSON implements json.Unmarshaler.
func (s *Strings) UnmarshalJSON(data []byte) error {
	var items []json.RawMessage
	if err := json.Unmarshal(data, &items); err != nil {
		return err
	}
	if items == nil {
		return nil
	}
	many, err := stringItems(items)
	if err != nil {
		return err
	}
	*s = many
	return nil
}

var stringType = reflect.TypeOf("")

// stringItems decodes an array's items, each a string. An error names the
// item by its index; the decoder puts the field's path before it ("to.1").
func stringItems(items []json.RawMessage) ([]string, error) {
	many := make([]string, len(items))
	for i, item := range items {
		if string(item) == "null" {
			return nil, &json.UnmarshalTypeError{Value: "null", Type: stringType, Field: strconv.Itoa(i)}
		}
		if err := json.Unmarshal(item, &many[i]); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				return nil, &json.UnmarshalTypeError{Value: te.Value, Type: te.Type, Field: strconv.Itoa(i)}
			}
			return nil, err
		}
	}
	return many, nil
}

func jsonKind(b byte) string {
	switch b {
	case '{':
		return "object"
	case 't', 'f':
		return "bool"
	}
	return "number"
}
