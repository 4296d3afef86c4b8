package commands

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"
)

// Attachment content is standard base64, padded or not, and may be broken
// into lines (as MIME writes it) or hold spaces and tabs.
func TestDecodeBase64(t *testing.T) {
	want := bytes.Repeat([]byte("attachment bytes \x00\xff"), 40)
	padded := base64.StdEncoding.EncodeToString(want)
	var lines strings.Builder
	for s := padded; len(s) > 0; s = s[min(76, len(s)):] {
		lines.WriteString(s[:min(76, len(s))] + "\r\n")
	}
	for name, in := range map[string]string{
		"padded":            padded,
		"unpadded":          strings.TrimRight(padded, "="),
		"CRLF lines":        lines.String(),
		"LF lines":          strings.ReplaceAll(lines.String(), "\r", ""),
		"spaces and tabs":   " " + padded[:10] + "\t" + padded[10:30] + "  " + padded[30:],
		"unpadded in lines": strings.TrimRight(strings.TrimSpace(lines.String()), "="),
	} {
		got, err := decodeBase64(in)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: %v (%d bytes, want %d)", name, err, len(got), len(want))
		}
	}
	for _, bad := range []string{"not base64!", padded[:len(padded)-3] + "*=="} {
		if _, err := decodeBase64(bad); err == nil {
			t.Errorf("%q decoded", bad)
		}
	}
}
