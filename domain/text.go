package domain

import (
	"fmt"
	"unicode/utf8"
)

// MaxURLBytes bounds every URL a client gives (attachment paths, webhook
// URLs): the length browsers, CDNs and presigned-URL issuers stay within.
const MaxURLBytes = 2048

// TextProblem says why s cannot be stored and shown as text, or "" when it
// can. Text must be valid UTF-8 without control characters: C0 (NUL
// included, which PostgreSQL cannot store), DEL and C1. Bodies (html, text)
// may hold line breaks and tabs; every other field is one line, so U+2028
// and U+2029 (line and paragraph separators) are refused there too.
func TextProblem(s string, body bool) string {
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !validAt(s, i):
			return "must be valid UTF-8"
		case body && (r == '\n' || r == '\r' || r == '\t'):
		case !body && (r == '\n' || r == '\r'):
			return fmt.Sprintf("must not contain line breaks (found U+%04X)", r)
		case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f:
			return fmt.Sprintf("must not contain control characters (found U+%04X)", r)
		case !body && (r == '\u2028' || r == '\u2029'):
			return fmt.Sprintf("must not contain line breaks (found U+%04X)", r)
		}
	}
	return ""
}

// validAt reports whether the U+FFFD at byte i of s is really there rather
// than the decoding of an invalid byte.
func validAt(s string, i int) bool {
	_, size := utf8.DecodeRuneInString(s[i:])
	return size == 3
}

// QuoteShort quotes s for a message, cut to its first 40 characters and
// its length when longer, so a refusal does not repeat a long input whole.
func QuoteShort(s string) string {
	if n := utf8.RuneCountInString(s); n > 40 {
		return fmt.Sprintf("%q… (%d characters)", string([]rune(s)[:40]), n)
	}
	return fmt.Sprintf("%q", s)
}

// URLProblem says why s cannot be taken as a URL to store, or "" when it
// can; whether Mailroom may fetch it is the egress policy's decision.
func URLProblem(s string) string {
	if len(s) > MaxURLBytes {
		return fmt.Sprintf("must be at most %d bytes; got %d", MaxURLBytes, len(s))
	}
	return TextProblem(s, false)
}

// CheckLine records a problem with a one-line text field.
func (e *ValidationError) CheckLine(field, s string) {
	if p := TextProblem(s, false); p != "" {
		e.Add(field, "%s", p)
	}
}

// CheckBody records a problem with a body, where line breaks and tabs are
// allowed.
func (e *ValidationError) CheckBody(field, s string) {
	if p := TextProblem(s, true); p != "" {
		e.Add(field, "%s", p)
	}
}
