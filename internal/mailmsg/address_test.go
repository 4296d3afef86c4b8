package mailmsg

import (
	"slices"
	"strings"
	"testing"
)

func TestAddressOf(t *testing.T) {
	for in, want := range map[string]string{
		"Ann Example <Ann@Example.org>": "ann@example.org",
		"BOB@example.org":               "bob@example.org",
		"  not an address  ":            "not an address",
		"Ann <ann@Bücher.de>":           "ann@xn--bcher-kva.de",
		"ann@xn--bcher-kva.de":          "ann@xn--bcher-kva.de",
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
	// Both ways of writing an internationalised domain are one address,
	// named in punycode, which relays without SMTPUTF8 take.
	got = Addresses([]string{"x@bücher.de", "X@xn--bcher-kva.de", "y@BÜCHER.de"})
	if want := "x@xn--bcher-kva.de,y@xn--bcher-kva.de"; strings.Join(got, ",") != want {
		t.Errorf("Addresses = %q, want %s", got, want)
	}
	// The local part keeps its case: only the receiving host may read it
	// (RFC 5321). The domain is lower case.
	got = Addresses([]string{"Ann.Smith@Example.ORG", "ann.smith@example.org"})
	if want := "Ann.Smith@example.org"; strings.Join(got, ",") != want {
		t.Errorf("Addresses = %q, want %s", got, want)
	}
}

func TestWireAddress(t *testing.T) {
	for in, want := range map[string]string{
		"ann@bücher.de":        "ann@xn--bcher-kva.de",
		"Ann@Example.ORG":      "Ann@Example.ORG", // ASCII is left as given
		"ann@xn--bcher-kva.de": "ann@xn--bcher-kva.de",
		"no at sign":           "no at sign",
	} {
		if got := WireAddress(in); got != want {
			t.Errorf("WireAddress(%q) = %q, want %q", in, got, want)
		}
	}
}

// A display name past MaxNameLength is refused where addresses come in,
// but one already recorded is still read.
func TestLongDisplayNameIsBoundedOnlyOnTheWayIn(t *testing.T) {
	long := `"` + strings.Repeat("n", MaxNameLength+1) + `" <ann@example.org>`
	if _, err := ParseNewAddress(long); err == nil {
		t.Error("a new address with a display name past the bound was accepted")
	}
	if a, err := ParseAddress(long); err != nil || a.Email != "ann@example.org" {
		t.Errorf("a recorded address with a long display name: %v, %v", a, err)
	}
	if got := Addresses([]string{long}); len(got) != 1 {
		t.Errorf("the envelope lost a recorded recipient with a long display name: %v", got)
	}
}

// A recipient is searched as given (composed), and by its address in its
// domain's other spelling; an ASCII domain has no other.
func TestSpellingsOfARecipient(t *testing.T) {
	cases := map[string][]string{
		"Bob <bob@example.org>":           {"Bob <bob@example.org>"},
		"ann@bücher.example":              {"ann@bücher.example", "ann@xn--bcher-kva.example"},
		"Ann <ann@xn--bcher-kva.example>": {"Ann <ann@xn--bcher-kva.example>", "ann@bücher.example"},
		"Zoe\u0308 <zoe@example.org>":     {"Zoë <zoe@example.org>"},
		"not an address":                  {"not an address"},
	}
	for in, want := range cases {
		if got := Spellings(in); !slices.Equal(got, want) {
			t.Errorf("Spellings(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseNewAddressDecodedNameControls(t *testing.T) {
	for _, s := range []string{"=?utf-8?q?a=09b?= <a@example.org>", "=?utf-8?q?a=C2=85b?= <a@example.org>", "=?utf-8?q?a=E2=80=A8b?= <a@example.org>"} {
		if _, err := ParseNewAddress(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
	if _, err := ParseNewAddress("=?utf-8?q?Caf=C3=A9?= <a@example.org>"); err != nil {
		t.Error(err)
	}
}
