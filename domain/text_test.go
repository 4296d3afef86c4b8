package domain

import (
	"strings"
	"testing"
)

func TestTextProblem(t *testing.T) {
	cases := []struct {
		s          string
		line, body string // wanted problems, "" for none
	}{
		{"Hello, Ümlaut — 日本 🎉", "", ""},
		{"\uFFFD is a real character", "", ""},
		{"a\x00b", "must not contain control characters (found U+0000)", "must not contain control characters (found U+0000)"},
		{"bell\a", "must not contain control characters (found U+0007)", "must not contain control characters (found U+0007)"},
		{"escape\x1b[31m", "must not contain control characters (found U+001B)", "must not contain control characters (found U+001B)"},
		{"del\x7f", "must not contain control characters (found U+007F)", "must not contain control characters (found U+007F)"},
		{"c1\u0085", "must not contain control characters (found U+0085)", "must not contain control characters (found U+0085)"},
		{"c1\u009f", "must not contain control characters (found U+009F)", "must not contain control characters (found U+009F)"},
		{"line\nbreak", "must not contain line breaks (found U+000A)", ""},
		{"crlf\r\n\ttab", "must not contain line breaks (found U+000D)", ""},
		{"sep\u2028", "must not contain line breaks (found U+2028)", ""},
		{"para\u2029", "must not contain line breaks (found U+2029)", ""},
		{"bad \xff byte", "must be valid UTF-8", "must be valid UTF-8"},
		{"truncated \xe6\x97", "must be valid UTF-8", "must be valid UTF-8"},
		{"surrogate \xed\xa0\x80", "must be valid UTF-8", "must be valid UTF-8"},
	}
	for _, c := range cases {
		if got := TextProblem(c.s, false); got != c.line {
			t.Errorf("TextProblem(%q, line) = %q, want %q", c.s, got, c.line)
		}
		if got := TextProblem(c.s, true); got != c.body {
			t.Errorf("TextProblem(%q, body) = %q, want %q", c.s, got, c.body)
		}
	}
}

func TestURLProblem(t *testing.T) {
	ok := "https://files.example.com/" + strings.Repeat("a", MaxURLBytes-len("https://files.example.com/"))
	if p := URLProblem(ok); p != "" {
		t.Errorf("a %d-byte URL: %s", len(ok), p)
	}
	if p := URLProblem(ok + "b"); p != "must be at most 2048 bytes; got 2049" {
		t.Errorf("a 2,049-byte URL: %q", p)
	}
	if p := URLProblem("https://example.com/a\x00b"); p == "" {
		t.Error("a NUL in a URL passed")
	}
}

func TestCheckLineAndBody(t *testing.T) {
	var v ValidationError
	v.CheckLine("subject", "a\x00b")
	v.CheckBody("text", "fine\nlines")
	v.CheckBody("html", "nul\x00")
	if len(v.Errors) != 2 || v.Errors[0].Field != "subject" || v.Errors[1].Field != "html" {
		t.Fatalf("errors %+v", v.Errors)
	}
	if v.OrNil() == nil {
		t.Fatal("a validation with errors passed")
	}
	var clean ValidationError
	clean.CheckLine("subject", "Hello")
	clean.CheckBody("text", "fine\nlines")
	if err := clean.OrNil(); err != nil {
		t.Fatalf("valid fields refused: %v", err)
	}
}

// The control ranges end where they should: a no-break space (U+00A0),
// common in names and subjects, is text.
func TestControlCharacterRangeEdges(t *testing.T) {
	for s, want := range map[string]string{
		"unit\x1fsep":   "must not contain control characters (found U+001F)",
		"pad\u0080":     "must not contain control characters (found U+0080)",
		"50\u00a0€":     "",
		"space ~ tilde": "",
	} {
		if got := TextProblem(s, false); got != want {
			t.Errorf("TextProblem(%q) = %q, want %q", s, got, want)
		}
	}
}
