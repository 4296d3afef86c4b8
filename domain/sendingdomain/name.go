package sendingdomain

import (
	"net/netip"
	"strings"

	"golang.org/x/net/idna"
)

// NormalizeName validates a domain name and returns its canonical form:
// lower case, no trailing dot, internationalised labels in punycode. It
// refuses IP literals, single labels, labels over 63 and names over 253
// characters.
func NormalizeName(raw string) (string, string) {
	name := strings.TrimSuffix(strings.TrimSpace(raw), ".")
	if name == "" {
		return "", "is required"
	}
	if _, err := netip.ParseAddr(strings.Trim(name, "[]")); err == nil {
		return "", "must be a domain name, not an IP address"
	}
	ascii, err := idna.Lookup.ToASCII(name)
	if err != nil {
		return "", "is not a valid domain name"
	}
	ascii = strings.ToLower(ascii)
	if len(ascii) > 253 {
		return "", "must be at most 253 characters"
	}
	labels := strings.Split(ascii, ".")
	if len(labels) < 2 {
		return "", "must have at least two labels, like example.com"
	}
	for _, l := range labels {
		switch {
		case l == "":
			return "", "has an empty label"
		case len(l) > 63:
			return "", "has a label over 63 characters"
		case l[0] == '-' || l[len(l)-1] == '-':
			return "", "has a label starting or ending with a hyphen"
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return "", "may only hold letters, digits and hyphens"
			}
		}
	}
	if tld := labels[len(labels)-1]; strings.Trim(tld, "0123456789") == "" {
		return "", "must end in a top-level domain, not a number"
	}
	return ascii, ""
}
