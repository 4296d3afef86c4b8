package mailmsg

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"
)

const (
	// preferredLineLen is where headers are folded when they can be.
	preferredLineLen = 78
	// maxLineLen is RFC 5322's hard limit, CRLF excluded.
	maxLineLen = 998
	// maxRawWordLen is the longest unbroken run of text written as is;
	// longer runs are RFC 2047-encoded so they can be split.
	maxRawWordLen = 900
	// maxEncodedWordLen keeps "Reply-To: " plus one encoded-word within 78
	// columns (RFC 2047 allows 75).
	maxEncodedWordLen = 66
	// maxParamSegment bounds an RFC 2231 continuation segment.
	maxParamSegment = 60
)

var errLineTooLong = errors.New("cannot be folded into lines of at most 998 characters")

// writeHeader writes "Name: t1 t2 ...CRLF", folding between tokens (the
// only places where a space may become CRLF+space without changing what a
// reader unfolds). Tokens should not begin or end with whitespace.
func writeHeader(b *bytes.Buffer, name string, tokens []string) error {
	b.WriteString(name)
	b.WriteByte(':')
	line := len(name) + 1
	for i, t := range tokens {
		if i > 0 && line+1+len(t) > preferredLineLen {
			b.WriteString("\r\n")
			line = 0
		}
		b.WriteByte(' ')
		b.WriteString(t)
		line += 1 + len(t)
		if line > maxLineLen {
			return fmt.Errorf("header %s %w", name, errLineTooLong)
		}
	}
	b.WriteString("\r\n")
	return nil
}

func isWSP(b byte) bool { return b == ' ' || b == '\t' }

// splitFoldable cuts s at every single space that has non-whitespace on both
// sides. Folding only there is lossless even for readers (Go's textproto
// among them) that trim and collapse whitespace around a fold.
func splitFoldable(s string) []string {
	var out []string
	start := 0
	for i := 1; i < len(s)-1; i++ {
		if s[i] == ' ' && !isWSP(s[i-1]) && !isWSP(s[i+1]) {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// isPrintableASCII reports whether s has only bytes 0x20..0x7e.
func isPrintableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// canWriteRaw reports whether unstructured text can go into a header as is
// and come back identical: printable ASCII, nothing a decoder would take for
// an encoded-word, no whitespace a reader would trim, and no run too long to
// fit on a line.
func canWriteRaw(s string) bool {
	if s == "" || !isPrintableASCII(s) || strings.Contains(s, "=?") {
		return false
	}
	if isWSP(s[0]) || isWSP(s[len(s)-1]) {
		return false
	}
	for _, t := range splitFoldable(s) {
		if len(t) > maxRawWordLen {
			return false
		}
	}
	return true
}

// subjectTokens renders the subject: as is when canWriteRaw, otherwise
// wholly as RFC 2047 encoded-words (which also preserves odd whitespace).
func subjectTokens(s string) []string {
	if s == "" {
		return nil
	}
	if canWriteRaw(s) {
		return splitFoldable(s)
	}
	return encodeWords(s)
}

// phraseTokens renders a display name: bare atoms when it is a plain
// sequence of words, a quoted-string when it is other printable ASCII, and
// encoded-words otherwise.
func phraseTokens(s string) []string {
	if !canWriteRaw(s) {
		return encodeWords(s)
	}
	if isAtomPhrase(s) {
		return strings.Split(s, " ")
	}
	var q strings.Builder
	q.WriteByte('"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			q.WriteByte('\\')
		}
		q.WriteByte(s[i])
	}
	q.WriteByte('"')
	tokens := splitFoldable(q.String())
	for _, t := range tokens {
		if len(t) > maxRawWordLen { // escaping can double a long run
			return encodeWords(s)
		}
	}
	return tokens
}

// isAtomPhrase reports whether s is atext words separated by single spaces.
func isAtomPhrase(s string) bool {
	for w := range strings.SplitSeq(s, " ") {
		if w == "" {
			return false
		}
		for i := 0; i < len(w); i++ {
			if !isAtext(w[i]) {
				return false
			}
		}
	}
	return true
}

// isQSafe reports whether b may appear literally in a Q-encoded word in any
// header position (RFC 2047 section 5, rule 3, the strictest).
func isQSafe(b byte) bool {
	return isASCIILetter(b) || isDigit(b) || b == '!' || b == '*' || b == '+' || b == '-' || b == '/'
}

// encodeWords encodes s (valid UTF-8) as RFC 2047 encoded-words in UTF-8,
// each at most maxEncodedWordLen long and never splitting a character, so
// that they can be placed on separate lines. Q encoding is used for mostly
// ASCII text (it stays readable), B when that is much shorter.
func encodeWords(s string) []string {
	qLen := 0
	for i := 0; i < len(s); i++ {
		if isQSafe(s[i]) || s[i] == ' ' {
			qLen++
		} else {
			qLen += 3
		}
	}
	bLen := (len(s) + 2) / 3 * 4
	if qLen <= bLen+bLen/2 {
		return encodeQ(s)
	}
	return encodeB(s)
}

const hexDigits = "0123456789ABCDEF"

func encodeQ(s string) []string {
	const prefix, suffix = "=?utf-8?q?", "?="
	budget := maxEncodedWordLen - len(prefix) - len(suffix)
	var words []string
	var cur strings.Builder
	var enc []byte
	for len(s) > 0 {
		_, n := utf8.DecodeRuneInString(s)
		enc = enc[:0]
		for i := 0; i < n; i++ {
			c := s[i]
			switch {
			case c == ' ':
				enc = append(enc, '_')
			case isQSafe(c):
				enc = append(enc, c)
			default:
				enc = append(enc, '=', hexDigits[c>>4], hexDigits[c&15])
			}
		}
		if cur.Len() > 0 && cur.Len()+len(enc) > budget {
			words = append(words, prefix+cur.String()+suffix)
			cur.Reset()
		}
		cur.Write(enc)
		s = s[n:]
	}
	if cur.Len() > 0 {
		words = append(words, prefix+cur.String()+suffix)
	}
	return words
}

func encodeB(s string) []string {
	const prefix, suffix = "=?utf-8?b?", "?="
	// Bytes per word: base64 of n bytes is 4*ceil(n/3) characters.
	budget := (maxEncodedWordLen - len(prefix) - len(suffix)) / 4 * 3
	var words []string
	for len(s) > 0 {
		n := 0
		for n < len(s) {
			_, size := utf8.DecodeRuneInString(s[n:])
			if n > 0 && n+size > budget {
				break
			}
			n += size
		}
		words = append(words, prefix+b64.EncodeToString([]byte(s[:n]))+suffix)
		s = s[n:]
	}
	return words
}

// isTSpecial reports whether b is an RFC 2045 tspecial.
func isTSpecial(b byte) bool { return strings.IndexByte(`()<>@,;:\"/[]?=`, b) >= 0 }

// isToken reports whether s is a non-empty RFC 2045 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= 0x20 || s[i] >= 0x7f || isTSpecial(s[i]) {
			return false
		}
	}
	return true
}

// isAttrChar reports whether b may appear unescaped in an RFC 2231
// extended value.
func isAttrChar(b byte) bool {
	return b > 0x20 && b < 0x7f && !isTSpecial(b) && b != '*' && b != '\'' && b != '%'
}

// paramTokens renders one MIME parameter. Short printable-ASCII values are
// written as a token or quoted-string; anything else uses RFC 2231
// (attr*=utf-8”%XX...), split into numbered continuations when long so no
// header line has to exceed the preferred length by much.
func paramTokens(attr, value string) []string {
	// A value that reads as an encoded-word is decoded as one by common
	// parsers and clients, though RFC 2047 does not apply to parameters:
	// RFC 2231 keeps it literal.
	if len(value) <= maxRawWordLen/4 && !strings.Contains(value, "=?") {
		// A bare token holds no RFC 2231 syntax characters (' * %), which
		// some parsers take for it.
		if isToken(value) && strings.IndexFunc(value, func(r rune) bool { return r >= utf8.RuneSelf || !isAttrChar(byte(r)) }) < 0 {
			return []string{attr + "=" + value}
		}
		if isPrintableASCII(value) {
			var q strings.Builder
			q.WriteString(attr + `="`)
			for i := 0; i < len(value); i++ {
				if value[i] == '"' || value[i] == '\\' {
					q.WriteByte('\\')
				}
				q.WriteByte(value[i])
			}
			q.WriteByte('"')
			return []string{q.String()}
		}
	}
	// Percent-encode character by character so segments never split one.
	var segs []string
	var cur strings.Builder
	for len(value) > 0 {
		_, n := utf8.DecodeRuneInString(value)
		var enc strings.Builder
		for i := 0; i < n; i++ {
			c := value[i]
			if isAttrChar(c) {
				enc.WriteByte(c)
			} else {
				enc.WriteByte('%')
				enc.WriteByte(hexDigits[c>>4])
				enc.WriteByte(hexDigits[c&15])
			}
		}
		if cur.Len() > 0 && cur.Len()+enc.Len() > maxParamSegment {
			segs = append(segs, cur.String())
			cur.Reset()
		}
		cur.WriteString(enc.String())
		value = value[n:]
	}
	segs = append(segs, cur.String())
	if len(segs) == 1 {
		return []string{attr + "*=utf-8''" + segs[0]}
	}
	out := make([]string, len(segs))
	for i, s := range segs {
		if i == 0 {
			out[i] = fmt.Sprintf("%s*0*=utf-8''%s", attr, s)
		} else {
			out[i] = fmt.Sprintf("%s*%d*=%s", attr, i, s)
		}
	}
	return out
}

// param is one MIME header parameter; order is kept as given.
type param struct {
	attr, value string
	// legacy writes a value that is not printable ASCII as RFC 2047
	// encoded-words in a quoted-string instead of RFC 2231. RFC 2047 does
	// not allow that, but mail clients that never learned RFC 2231 read a
	// file name only in that form (see attachmentPart).
	legacy bool
}

// writeParamHeader writes e.g. Content-Type with its parameters, folding
// between parameters (and between the encoded-words of a legacy one).
func writeParamHeader(b *bytes.Buffer, name, base string, params []param) error {
	tokens := []string{base}
	add := func(ts ...string) {
		tokens[len(tokens)-1] += ";"
		tokens = append(tokens, ts...)
	}
	for _, p := range params {
		if p.legacy && !isPrintableASCII(p.value) {
			words := encodeWords(p.value)
			words[0] = p.attr + `="` + words[0]
			words[len(words)-1] += `"`
			add(words...)
			continue
		}
		for _, t := range paramTokens(p.attr, p.value) {
			add(t)
		}
	}
	return writeHeader(b, name, tokens)
}
