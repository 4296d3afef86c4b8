package sendingdomain

import (
	"fmt"
	"net/netip"
	"strings"
	"unicode"

	"golang.org/x/net/idna"
	"golang.org/x/net/publicsuffix"
)

// MaxNameLength is the longest domain name Mailroom takes: every record it
// asks the owner to publish must have a name DNS allows (253 characters),
// and the longest of them, the DKIM key's "<selector>._domainkey.<domain>"
// with an 8-character selector, adds 20.
const MaxNameLength = 253 - len("mr000000._domainkey.")

// MaxLegacyNameLength is the longest name a legacy (Easy DKIM) domain may
// have: its CNAME records are named after 32-character tokens.
const MaxLegacyNameLength = 253 - len("abcdefghijklmnopqrstuvwxyz234567._domainkey.")

// NormalizeName validates a domain name and returns its canonical form:
// lower case, no trailing dot, internationalised labels in punycode. It
// refuses IP literals, single labels, labels over 63 and names over
// MaxNameLength characters.
func NormalizeName(raw string) (string, string) {
	name := strings.TrimSuffix(strings.TrimSpace(raw), ".")
	switch {
	case name == "":
		return "", "is required"
	case strings.Contains(name, "://"):
		return "", "must be a domain name, not a URL: example.com, not https://example.com/"
	case strings.Contains(name, "@"):
		return "", "must be a domain name, not an address: the part after the @"
	case strings.ContainsAny(name, "/?#"):
		return "", "must be a domain name alone, without a path"
	}
	if _, err := netip.ParseAddr(strings.Trim(name, "[]")); err == nil {
		return "", "must be a domain name, not an IP address"
	}
	// An ASCII name is told what is wrong with it; the IDNA mapping, which
	// would refuse most of the same names first, says only that it failed.
	if lower := strings.ToLower(name); isASCII(lower) {
		if p := checkShape(lower); p != "" {
			return "", p
		}
	}
	ascii, err := idna.Lookup.ToASCII(name)
	if err != nil {
		return "", "is not a valid domain name"
	}
	ascii = strings.ToLower(ascii)
	if p := checkShape(ascii); p != "" {
		return "", p
	}
	return ascii, ""
}

// CheckRegistrable refuses a normalised name whose internationalised
// labels hold anything but letters, digits, marks, hyphens and the joiners
// IDNA2008 allows (ZWNJ, ZWJ), whichever form they were given in: the IDNA
// mapping lets symbols through (☃, xn--n3h), which no registry registers
// under IDNA2008 and which the address check of a send refuses. It applies
// to names being added; a domain added before the rule keeps its name.
func CheckRegistrable(ascii string) string {
	for l := range strings.SplitSeq(ascii, ".") {
		if !strings.HasPrefix(l, "xn--") {
			continue
		}
		u, err := idna.Lookup.ToUnicode(l)
		if err != nil {
			return "is not a valid domain name"
		}
		for _, r := range u {
			if r != '-' && r != '\u200c' && r != '\u200d' && !unicode.IsLetter(r) && !unicode.IsDigit(r) && !unicode.IsMark(r) {
				return fmt.Sprintf("may only hold letters, digits, combining marks and hyphens; %q is not one", r)
			}
		}
	}
	return ""
}

// CheckOwnable refuses a normalised name no one can own as a sending
// domain: a public suffix under which names are registered (co.uk, com.br,
// uk). Added, it would hold the name for 72 hours from every account,
// with no DNS record anyone could publish to verify it. Suffixes that
// companies run for their customers (github.io) stay: their owner may
// verify them.
func CheckOwnable(name string) string {
	if suffix, icann := publicsuffix.PublicSuffix(name); icann && suffix == name {
		return "is a public suffix, under which others register their domains: add the domain you registered under it"
	}
	return ""
}

// checkShape checks an ASCII name's length, labels and characters.
func checkShape(ascii string) string {
	if len(ascii) > MaxNameLength {
		return fmt.Sprintf("must be at most %d characters, so that its DKIM record's name (selector._domainkey.<domain>) fits in DNS's 253", MaxNameLength)
	}
	labels := strings.Split(ascii, ".")
	if len(labels) < 2 {
		return "must have at least two labels, like example.com"
	}
	for _, l := range labels {
		switch {
		case l == "":
			return "has an empty label"
		case len(l) > 63:
			return "has a label over 63 characters"
		case l[0] == '-' || l[len(l)-1] == '-':
			return "has a label starting or ending with a hyphen"
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return "may only hold letters, digits and hyphens"
			}
		}
	}
	if tld := labels[len(labels)-1]; strings.Trim(tld, "0123456789") == "" {
		return "must end in a top-level domain, not a number"
	}
	return ""
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
