// Package mailmsg renders the one RFC 5322 / MIME message that every provider
// sends (sandbox .eml, SES raw content, SMTP), and parses the addresses a send
// request carries.
//
// The builder is deliberately strict: anything that could smuggle a header or
// break the MIME structure (line breaks in a subject or name, unusual header
// names, multipart content types on attachments) is refused with an error
// rather than escaped in some clever way.
package mailmsg

import (
	"errors"
	"fmt"
	"net/mail"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/idna"
	"golang.org/x/text/unicode/norm"

	"github.com/mailroom/mailroom/domain"
)

// Address is one mailbox: an optional display name and an addr-spec.
type Address struct {
	Name  string
	Email string
}

// String renders the address in RFC 5322 form, on one line: a bare addr-spec
// when there is no name, else `Name <a@b.com>` with the name quoted when it
// needs to be and RFC 2047-encoded when it is not plain printable ASCII.
func (a Address) String() string {
	return strings.Join(addressTokens(a), " ")
}

// addressTokens returns the address as pieces that, joined with single
// spaces, give String(); a header may be folded between any two of them.
func addressTokens(a Address) []string {
	if a.Name == "" {
		return []string{WireAddress(a.Email)}
	}
	return append(phraseTokens(a.Name), "<"+WireAddress(a.Email)+">")
}

// WireAddress is an addr-spec as it travels: an internationalised domain
// in punycode (A-labels), which every relay and SES take, where the UTF-8
// form needs SMTPUTF8 at every hop. Addresses with an ASCII domain, and
// any the conversion refuses, are returned as given.
func WireAddress(email string) string {
	at := strings.LastIndexByte(email, '@')
	if at < 0 || isASCII(email[at+1:]) {
		return email
	}
	ascii, err := idna.Lookup.ToASCII(email[at+1:])
	if err != nil {
		return email
	}
	return email[:at+1] + ascii
}

// Spellings is a recipient ("Name <addr>" or a bare address) as it may be
// searched for: as given, in Unicode's composed form (NFC), followed by its
// address alone with its domain in each other way of writing it, A-labels
// and U-labels, so that a search written either way finds it.
func Spellings(recipient string) []string {
	given := norm.NFC.String(recipient)
	out := []string{given}
	a, err := ParseAddress(recipient)
	if err != nil {
		return out
	}
	at := strings.LastIndexByte(a.Email, '@')
	if at < 0 {
		return out
	}
	local, domain := a.Email[:at+1], a.Email[at+1:]
	for _, convert := range []func(string) (string, error){idna.Lookup.ToASCII, idna.Lookup.ToUnicode} {
		other, err := convert(domain)
		if err != nil {
			continue
		}
		spelled := strings.ToLower(local + other)
		if !slices.ContainsFunc(out, func(s string) bool { return strings.Contains(strings.ToLower(s), spelled) }) {
			out = append(out, local+other)
		}
	}
	return out
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// ErrInvalidAddress is matched (errors.Is) by every error ParseAddress and
// the address checks of Build return.
var ErrInvalidAddress = errors.New("is not a valid email address")

// AddressError says why an address was refused. Its message is meant to
// follow a field name in a 422 response: "to is not a valid email address
// (the domain needs a dot)".
type AddressError struct {
	Reason string
	// Several: the string is a list of addresses, which a field that takes
	// a list accepts item by item.
	Several bool
}

func (e *AddressError) Error() string {
	if e.Reason == "" {
		return ErrInvalidAddress.Error()
	}
	return ErrInvalidAddress.Error() + " (" + e.Reason + ")"
}

// Is makes errors.Is(err, ErrInvalidAddress) true.
func (e *AddressError) Is(target error) bool { return target == ErrInvalidAddress }

func addrErr(reason string) error { return &AddressError{Reason: reason} }

// MaxAddressLength is the longest address (addr-spec) in bytes.
const MaxAddressLength = maxEmailLen

const (
	maxLocalLen  = 64
	maxEmailLen  = 254
	maxDomainLen = 253
	maxLabelLen  = 63
)

// ParseAddress parses exactly one address, either "a@b.com", "<a@b.com>" or
// "Name <a@b.com>" (the name may be quoted or RFC 2047-encoded). It is
// stricter than net/mail: the local part must be an ASCII dot-atom of at
// most 64 bytes, the domain must have at least two labels of letters, digits
// and hyphens (internationalised labels are kept as given, and must have a
// punycode form: WireAddress gives it), the top-level label must not be
// numeric, and the whole addr-spec must fit in 254 bytes. Comments, quoted local parts, IP literals and lists
// are refused. The error is an *AddressError.
func ParseAddress(s string) (Address, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Address{}, addrErr("it is empty")
	}
	if strings.ContainsAny(s, "\r\n") {
		return Address{}, addrErr("it contains a line break")
	}
	// "a@example.org, b@example.org" is a list, which other mail APIs take
	// in one string: say so rather than blame a character.
	if strings.Contains(s, ",") {
		if list, err := mail.ParseAddressList(s); err == nil && len(list) > 1 {
			return Address{}, &AddressError{Reason: "it holds more than one address", Several: true}
		}
	}
	raw, namePart := s, ""
	if strings.HasSuffix(s, ">") {
		i := strings.LastIndexByte(s, '<')
		if i < 0 {
			return Address{}, addrErr("unbalanced angle brackets")
		}
		raw, namePart = s[i+1:len(s)-1], strings.TrimSpace(s[:i])
	} else if strings.ContainsAny(s, "<>") {
		// "Acme <hello@acme.com" would otherwise be blamed on its space.
		return Address{}, addrErr("unbalanced angle brackets")
	} else if strings.HasPrefix(s, `"`) && strings.Contains(s, `"@`) {
		// "\"ann smith\"@example.org": a quoted local part.
		return Address{}, addrErr("a quoted local part is not taken: the part before @ must be letters, digits and . ! # $ % & ' * + - / = ? ^ _ ` { | } ~")
	} else if i := strings.LastIndexFunc(s, unicode.IsSpace); i >= 0 && strings.IndexByte(s[i+1:], '@') > 0 && !strings.Contains(s[:i], "@") {
		// "Acme hello@acme.com": a display name without its brackets.
		return Address{}, addrErr("it contains a space; to give a display name, write Name <address>")
	} else if j := strings.IndexByte(s, '('); j > 0 && strings.HasSuffix(s, ")") && strings.Contains(s[:j], "@") {
		// "ann@example.org (Ann)": the old form of a name, as a comment.
		return Address{}, addrErr("comments are not taken; to give a display name, write Name <address>")
	}
	if err := checkEmail(raw); err != nil {
		return Address{}, err
	}
	if namePart == "" {
		return Address{Email: raw}, nil
	}
	// net/mail knows quoted strings and encoded-words; the addr-spec it
	// finds must be the one checked above.
	parsed, err := mail.ParseAddress(s)
	if err != nil && strings.Contains(err.Error(), "charset not supported") {
		return Address{}, addrErr("the display name is an encoded-word in a charset other than UTF-8, US-ASCII or ISO-8859-1; write the name itself in UTF-8")
	}
	if err != nil || parsed.Address != raw {
		return Address{}, addrErr("the display name is malformed; put it in double quotes")
	}
	name := strings.TrimSpace(parsed.Name)
	if err := checkName(name); err != nil {
		return Address{}, addrErr("the display name " + err.Error())
	}
	return Address{Name: name, Email: raw}, nil
}

// ParseNewAddress is ParseAddress for an address coming in with a request:
// its display name is also bounded by MaxNameLength. Addresses already
// recorded are read with ParseAddress, so an email queued before the bound
// still goes out and keeps its recipients.
func ParseNewAddress(s string) (Address, error) {
	a, err := ParseAddress(s)
	if err != nil {
		return Address{}, err
	}
	if n := utf8.RuneCountInString(a.Name); n > MaxNameLength {
		return Address{}, addrErr(fmt.Sprintf("the display name must be at most %d characters; got %d", MaxNameLength, n))
	}
	// A name given as RFC 2047 encoded-words is checked as decoded too, by
	// the rule of every one-line field of a request (the raw string was
	// checked before decoding).
	if p := domain.TextProblem(a.Name, false); p != "" {
		return Address{}, addrErr("the display name " + p)
	}
	return a, nil
}

// checkEmail applies ParseAddress's rules to a bare addr-spec.
func checkEmail(email string) error {
	if email == "" {
		return addrErr("it is empty")
	}
	if !utf8.ValidString(email) {
		return addrErr("it is not valid UTF-8")
	}
	if strings.IndexFunc(email, unicode.IsSpace) >= 0 {
		return addrErr("it contains a space")
	}
	at := strings.LastIndexByte(email, '@')
	if at < 0 {
		return addrErr("it has no @")
	}
	local, domain := email[:at], email[at+1:]
	if local == "" {
		return addrErr("the part before @ is missing")
	}
	if domain == "" {
		return addrErr("the domain is missing")
	}
	if len(email) > maxEmailLen {
		return addrErr("it is longer than 254 bytes")
	}
	if len(local) > maxLocalLen {
		return addrErr("the part before @ is longer than 64 characters")
	}
	if !isASCII(local) {
		// Such an address needs SMTPUTF8 at every hop, which not every
		// relay or provider offers.
		return addrErr("the part before @ must be ASCII: addresses that need SMTPUTF8 are not supported")
	}
	if !isDotAtom(local) {
		return addrErr("the part before @ has characters that are not allowed")
	}
	if err := checkDomain(domain); err != nil {
		return err
	}
	// An internationalised domain travels in punycode (WireAddress), which
	// is longer, and from which the IDNA mapping drops some characters:
	// the address as it travels must keep the limits too.
	if wire := WireAddress(email); wire != email && len(wire) > maxEmailLen {
		return addrErr("it is longer than 254 characters as it travels (in punycode)")
	}
	return nil
}

// checkDomain checks a host name: dot-separated labels of letters, digits
// and inner hyphens; non-ASCII letters are allowed (IDN, kept as given).
func checkDomain(domain string) error {
	if len(domain) > maxDomainLen {
		return addrErr("the domain is too long")
	}
	if !strings.Contains(domain, ".") {
		return addrErr("the domain needs a dot")
	}
	labels := strings.Split(domain, ".")
	for _, l := range labels {
		if l == "" {
			return addrErr("the domain has an empty label")
		}
		if utf8.RuneCountInString(l) > maxLabelLen {
			return addrErr("a domain label is longer than 63 characters")
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return addrErr("a domain label starts or ends with a hyphen")
		}
		if len(l) > 4 && strings.EqualFold(l[:4], "xn--") {
			// A label in punycode must decode to a valid one (RFC 5890).
			if _, err := idna.Lookup.ToUnicode(l); err != nil {
				return addrErr("a domain label is not valid punycode")
			}
		}
		for _, r := range l {
			switch {
			case r == '-', r < utf8.RuneSelf && (isASCIILetter(byte(r)) || isDigit(byte(r))):
			case r >= utf8.RuneSelf && (unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r)):
			default:
				return addrErr("the domain has characters that are not allowed")
			}
		}
	}
	tld := labels[len(labels)-1]
	if strings.IndexFunc(tld, func(r rune) bool { return r < '0' || r > '9' }) < 0 {
		return addrErr("the domain ends in a number")
	}
	if !isASCII(domain) {
		ascii, err := idna.Lookup.ToASCII(domain)
		if err != nil {
			return addrErr("the domain is not a valid internationalised domain name")
		}
		if err := checkDomain(ascii); err != nil {
			var ae *AddressError
			errors.As(err, &ae)
			return addrErr(ae.Reason + " in punycode (" + ascii + "), as it travels")
		}
	}
	return nil
}

// MaxNameLength bounds a display name, in characters: one header line's
// worth (RFC 5322). Without a bound one name could make an email's record
// larger than an event store takes in one append (1 MiB by default on
// EventStoreDB).
const MaxNameLength = 998

// checkName refuses display names that cannot be rendered safely: invalid
// UTF-8, line breaks and control characters other than tab.
func checkName(s string) error {
	return checkText(s)
}

// checkText is the rule shared by subjects and display names.
func checkText(s string) error {
	if !utf8.ValidString(s) {
		return errors.New("is not valid UTF-8")
	}
	if strings.ContainsAny(s, "\r\n") {
		return errors.New("must not contain line breaks")
	}
	for _, r := range s {
		if (r < 0x20 && r != '\t') || r == 0x7f {
			return errors.New("must not contain control characters")
		}
	}
	return nil
}

func isASCIILetter(b byte) bool { return b|0x20 >= 'a' && b|0x20 <= 'z' }
func isDigit(b byte) bool       { return b >= '0' && b <= '9' }

// isAtext reports whether b is an RFC 5322 atext character.
func isAtext(b byte) bool {
	return isASCIILetter(b) || isDigit(b) || strings.IndexByte("!#$%&'*+-/=?^_`{|}~", b) >= 0
}

// isDotAtom reports whether s is an ASCII RFC 5322 dot-atom-text.
func isDotAtom(s string) bool {
	if s == "" || s[0] == '.' || s[len(s)-1] == '.' || strings.Contains(s, "..") {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] != '.' && !isAtext(s[i]) {
			return false
		}
	}
	return true
}

// AddressOf is a recipient ("Name <addr>" or a bare address) reduced to its
// address alone, in its wire form (WireAddress) and lower case, so that
// both ways of writing an internationalised domain are one address; one
// that does not parse is taken as given, trimmed and lower case.
func AddressOf(recipient string) string {
	if a, err := ParseAddress(recipient); err == nil {
		return strings.ToLower(WireAddress(a.Email))
	}
	return strings.ToLower(strings.TrimSpace(recipient))
}

// Addresses reduces recipients (each "Name <addr>" or a bare address) to
// their envelope addresses, each once, in their first order, leaving out
// any that does not parse: an envelope that names an address twice makes a
// relay deliver (and bill) it twice. The domain is in its wire form
// (WireAddress) and lower case; the local part stays as given, since only
// the receiving host may read its case (RFC 5321 2.4). Two addresses that
// differ in case alone count as one.
func Addresses(recipients []string) []string {
	out := make([]string, 0, len(recipients))
	seen := make(map[string]bool, len(recipients))
	for _, r := range recipients {
		if a, err := ParseAddress(r); err == nil {
			wire := WireAddress(a.Email)
			if key := strings.ToLower(wire); !seen[key] {
				seen[key] = true
				at := strings.LastIndexByte(wire, '@')
				out = append(out, wire[:at+1]+strings.ToLower(wire[at+1:]))
			}
		}
	}
	return out
}
