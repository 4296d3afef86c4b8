package mailmsg

import (
	"strings"
	"testing"
)

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

// The envelope names each address once, whatever the case or display name
// it was given with, in the order first given.
func TestAddressesNameEachOnce(t *testing.T) {
	got := Addresses([]string{"dup@example.org", "Ann <ann@example.org>", "dup@example.org", "DUP@Example.org", "not an address", "Dup <dup@example.org>"})
	if want := "dup@example.org,ann@example.org"; strings.Join(got, ",") != want {
		t.Errorf("Addresses = %q, want %s", got, want)
	}
}
