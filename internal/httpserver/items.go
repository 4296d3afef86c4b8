package httpserver

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// MaxItems bounds every JSON array and object in a request body. No field
// of the API takes more than a few dozen items; fields check their own
// limits only once the body is decoded, and decoding a body of millions of
// tiny items (`[{},{},…]`) takes some seventy times its size in memory.
const MaxItems = 1000

// frame is an array or object being read by checkItems.
type frame struct {
	object    bool
	items     int
	key       []byte // the member being read, in an object (a slice of the body)
	expectKey bool
}

// maxDepth is the nesting past which checkItems stops and leaves the body
// to the decoder, which refuses nesting past 10,000 at once: following a
// body of nothing but "[" would take a frame per byte.
const maxDepth = 10_000

// checkItems refuses a body with an array or object of more than MaxItems
// items before it is decoded, naming the field that holds it. It reads the
// bytes once, keeping a frame per open container; malformed JSON it passes
// over is left to the decoder to report.
func checkItems(data []byte) *Problem {
	var stack []frame
	// value counts a value starting in the innermost container.
	value := func() *Problem {
		if len(stack) == 0 {
			return nil
		}
		top := &stack[len(stack)-1]
		if top.object {
			return nil // counted by its key
		}
		top.items++
		return tooMany(stack[:len(stack)-1], top.items)
	}
	for i := 0; i < len(data); i++ {
		switch c := data[i]; c {
		case '"':
			j := i + 1
			for j < len(data) && data[j] != '"' {
				if data[j] == '\\' {
					j++
				}
				j++
			}
			if n := len(stack); n > 0 && stack[n-1].object && stack[n-1].expectKey {
				top := &stack[n-1]
				top.key, top.expectKey = data[i+1:min(j, len(data), i+1+64)], false
				top.items++
				if p := tooMany(stack[:n-1], top.items); p != nil {
					return p
				}
			} else if p := value(); p != nil {
				return p
			}
			i = j
		case '{', '[':
			if p := value(); p != nil {
				return p
			}
			if len(stack) == maxDepth {
				return nil
			}
			stack = append(stack, frame{object: c == '{', expectKey: c == '{'})
		case '}', ']':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
		case ',':
			if n := len(stack); n > 0 && stack[n-1].object {
				stack[n-1].expectKey = true
			}
		case ':', ' ', '\t', '\r', '\n':
		default: // a number, true, false or null: one value to its end
			if p := value(); p != nil {
				return p
			}
			for i+1 < len(data) && !strings.ContainsRune(",]}: \t\r\n", rune(data[i+1])) {
				i++
			}
		}
	}
	return nil
}

// tooMany is the 422 for a container, inside outer, that has reached n
// items, when n is past MaxItems.
func tooMany(outer []frame, n int) *Problem {
	if n <= MaxItems {
		return nil
	}
	// Named as the decoder's errors name fields: "attachments.1.filename".
	path := make([]string, len(outer))
	for i, f := range outer {
		if f.object {
			path[i] = memberName(f.key)
		} else {
			path[i] = strconv.Itoa(f.items - 1)
		}
	}
	field := strings.Join(path, ".")
	if field == "" {
		field = "body"
	}
	return Validation(FieldError{Field: field, Message: fmt.Sprintf("has more than %d items, more than any field takes", MaxItems)})
}

// memberName is an object key as sent (a slice of the body, perhaps cut
// short), with its escapes decoded where they can be.
func memberName(raw []byte) string {
	var name string
	if json.Unmarshal([]byte(`"`+string(raw)+`"`), &name) == nil {
		return name
	}
	return strings.ToValidUTF8(string(raw), "\ufffd")
}
