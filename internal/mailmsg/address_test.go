package mailmsg

import "testing"

func TestAddressOf(t *testing.T) {
	for in, want := range map[string]string{
		"Ann Example <Ann@Example.org>": "ann@example.org",
		"BOB@example.org":               "bob@example.org",
		"  not an address  ":            "not an address",
	} {
		if got := AddressOf(in); got != want {
			t.Errorf("AddressOf(%q) = %q, want %q", in, got, want)
		}
	}
}
