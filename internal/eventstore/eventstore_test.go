package eventstore

import "testing"

// A position reads back exactly as String writes it, and anything else is
// refused: an export from a mistyped position would quietly start elsewhere.
func TestParsePositionTakesOnlyWhatStringWrites(t *testing.T) {
	for _, p := range []Position{Start, {Commit: 1303, Prepare: 30}, {Commit: ^uint64(0), Prepare: 1}} {
		if got, err := ParsePosition(p.String()); err != nil || got != p {
			t.Errorf("ParsePosition(%q) = %v, %v; want %v", p.String(), got, err, p)
		}
	}
	for _, s := range []string{"", "1303", "1303/", "/30", "1303/30abc", "1303/30x", "1303/30/1", "1303/30 junk",
		" 1303/30", "1303 /30", "+1303/30", "-1/30", "0x10/30", "1303/1e3", "18446744073709551616/0"} {
		if p, err := ParsePosition(s); err == nil {
			t.Errorf("ParsePosition(%q) = %v, want an error", s, p)
		}
	}
}
