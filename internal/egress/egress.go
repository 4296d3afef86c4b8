// Package egress is the one way Mailroom reaches out to customer-supplied
// URLs: webhook deliveries and attachment `path` downloads.
//
// Destinations must be public. The rule is applied twice: once when a URL is
// accepted (CheckURL, for 422 messages on create/PATCH and before a
// download), and again for every connection, from a net.Dialer Control hook
// that sees the address actually dialled — so a host name that resolved to a
// public address when it was checked but points somewhere private now (DNS
// rebinding) is still refused. "Public" is judged with the IANA
// special-purpose registries shipped by code.dny.dev/ssrf; the Policy's
// AllowCIDRs punch holes for local development and tests.
package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"code.dny.dev/ssrf"
	"golang.org/x/net/idna"
)

// Policy says which destinations are acceptable. The zero value is the
// production policy: https only, public addresses only, system resolver.
type Policy struct {
	// AllowCIDRs are addresses accepted even though they are not public.
	// Development and tests only (MAILROOM_EGRESS_ALLOW_CIDRS, e.g.
	// "127.0.0.0/8,::1/128").
	AllowCIDRs []netip.Prefix
	// AllowHTTP accepts plain http URLs. Development and tests only
	// (MAILROOM_WEBHOOK_ALLOW_HTTP).
	AllowHTTP bool
	// Resolver looks up host names, both in CheckURL and when the client
	// dials; nil means net.DefaultResolver.
	Resolver *net.Resolver
	// Log, when set, records what a refusal keeps from the customer: the
	// address a host name resolved to.
	Log *slog.Logger
}

// ErrRefused is wrapped by every refusal of a destination on policy grounds,
// whether at URL-check time or at connection time, so callers can report
// "destination not allowed" without parsing messages.
var ErrRefused = errors.New("destination not allowed")

// RefusedError is a policy refusal. Its message is short and meant for
// people (it ends up in 422 responses and delivery records), so it never
// quotes what a resolver answered: that goes to Detail, for operators. It
// wraps ErrRefused.
type RefusedError struct {
	Reason string
	Detail string // the resolved address judged, when Reason does not say it
}

func (e *RefusedError) Error() string { return e.Reason }
func (e *RefusedError) Unwrap() error { return ErrRefused }

func refused(format string, args ...any) error {
	return &RefusedError{Reason: fmt.Sprintf(format, args...)}
}

// ErrLookupUnavailable is a host-name lookup that did not get an answer (the
// resolver timed out or failed), as opposed to one answered "no such host":
// it says nothing of the URL, and asking again later may succeed.
var ErrLookupUnavailable = errors.New("host lookup unavailable")

// lookupError is a host-name resolution failure in CheckURL: a short message
// for people, wrapping the resolver's error for Describe.
type lookupError struct {
	msg       string
	err       error
	temporary bool // no answer: ErrLookupUnavailable
}

func (e *lookupError) Error() string { return e.msg }
func (e *lookupError) Unwrap() error { return e.err }

func (e *lookupError) Is(target error) bool { return e.temporary && target == ErrLookupUnavailable }

// guardian holds the deny lists. Only SafeAddr is used (ports and networks
// are not restricted: webhook receivers may listen on any port), and
// AllowCIDRs are applied before it, see Policy.judge.
var guardian = ssrf.New(ssrf.WithAnyPort(), ssrf.WithAnyNetwork())

// ParseCIDRs parses a comma-separated list of prefixes such as
// "127.0.0.0/8, ::1/128". Spaces around entries and empty entries are
// ignored; a bare address counts as a single-address prefix. An empty string
// gives no prefixes.
func ParseCIDRs(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if !strings.Contains(part, "/") {
			a, err := netip.ParseAddr(part)
			if err != nil {
				return nil, fmt.Errorf("egress: invalid CIDR %q", part)
			}
			out = append(out, netip.PrefixFrom(a.WithZone(""), a.BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(part)
		if err != nil {
			return nil, fmt.Errorf("egress: invalid CIDR %q", part)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

func (p Policy) resolver() *net.Resolver {
	if p.Resolver != nil {
		return p.Resolver
	}
	return net.DefaultResolver
}

// judge refuses a non-public address unless AllowCIDRs contains it.
// IPv4-mapped IPv6 addresses are judged as the IPv4 address they reach;
// the other embeddings (compat, NAT64, 6to4, Teredo) and everything else
// outside the IPv6 global-unicast range are refused by the deny lists.
func (p Policy) judge(a netip.Addr) error {
	a = a.WithZone("")
	u := a.Unmap()
	for _, pf := range p.AllowCIDRs {
		if pf.Contains(u) || pf.Contains(a) {
			return nil
		}
	}
	if !u.IsValid() {
		return refused("invalid address")
	}
	if err := guardian.SafeAddr(u); err != nil || u == azureWireServer {
		return refused("%s address (%s)", kind(u), a)
	}
	return nil
}

var (
	metadataV4 = netip.MustParseAddr("169.254.169.254")
	metadataV6 = netip.MustParseAddr("fd00:ec2::254")
	// azureWireServer is Azure's platform endpoint (metadata, agent
	// configuration): a public address in no special-purpose registry,
	// reachable from every Azure VM.
	azureWireServer = netip.MustParseAddr("168.63.129.16")
	cgnat           = netip.MustParsePrefix("100.64.0.0/10")
	broadcast       = netip.MustParseAddr("255.255.255.255")
)

// kind names why a (refused) address is not public, with its article, for
// messages such as "host resolves to a private address (10.0.0.1)".
func kind(a netip.Addr) string {
	switch {
	case a.IsUnspecified():
		return "an unspecified"
	case a.IsLoopback():
		return "a loopback"
	case a == metadataV4 || a == metadataV6 || a == azureWireServer:
		return "a cloud metadata"
	case a.IsLinkLocalUnicast():
		return "a link-local"
	case a.IsMulticast():
		return "a multicast"
	case a.IsPrivate():
		return "a private"
	case cgnat.Contains(a):
		return "a shared (CGNAT)"
	case a == broadcast:
		return "a broadcast"
	default:
		return "a non-public"
	}
}

// CheckURL decides whether raw is an acceptable destination. The error, if
// any, is short and meant for people ("must use https", "localhost is not
// allowed", "host does not resolve to a public address"); policy refusals
// wrap ErrRefused, resolution failures wrap the resolver's error, and lookups
// that got no answer are also ErrLookupUnavailable.
//
// Host names are resolved (A and AAAA) with the policy's resolver and every
// address must be acceptable. No connection is made.
func (p Policy) CheckURL(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return refused("%s", Unreadable(err))
	}
	host, ip, err := p.checkStatic(u)
	if err != nil {
		return err
	}
	if ip.IsValid() {
		return nil
	}
	addrs, err := p.resolver().LookupNetIP(ctx, "ip", host)
	if err != nil {
		var de *net.DNSError
		switch {
		case errors.As(err, &de) && de.IsNotFound:
			return &lookupError{msg: unusableHost, err: err}
		case errors.As(err, &de) && de.IsTimeout, errors.Is(err, context.DeadlineExceeded):
			return &lookupError{msg: "host lookup timed out", err: err, temporary: true}
		default:
			return &lookupError{msg: "host lookup failed", err: err, temporary: true}
		}
	}
	if len(addrs) == 0 {
		return &lookupError{msg: unusableHost, err: &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}}
	}
	for _, a := range addrs {
		if err := p.judge(a); err != nil {
			return p.refusedResolved(unusableHost, host, "host resolves to "+err.Error())
		}
	}
	return nil
}

// unusableHost is the one answer for a host name that does not resolve,
// resolves to no address, or resolves to an address that is not public:
// telling these apart would let a customer map the names the server's
// resolver knows inside its network (split-horizon DNS) by creating
// webhooks or sending attachment paths. What the resolver answered goes to
// the log (refusedResolved) and to the wrapped error, never to the client.
const unusableHost = "host does not resolve to a public address"

// Unreadable says why url.Parse refused a URL, in words rather than the
// parser's, and without quoting the URL, which its field already shows.
func Unreadable(err error) string {
	var esc url.EscapeError
	var host url.InvalidHostError
	switch {
	case errors.As(err, &esc):
		return fmt.Sprintf("is not a valid URL: %q is not a valid %%-escape", string(esc))
	case errors.As(err, &host):
		return fmt.Sprintf("is not a valid URL: its host has %q, which a host cannot", string(host))
	}
	return "is not a valid URL"
}

// refusedResolved is the refusal of a host for an address it resolved to:
// the address is logged, not told.
func (p Policy) refusedResolved(reason, target, detail string) error {
	if p.Log != nil {
		p.Log.Info("egress refused", "target", target, "reason", detail)
	}
	return &RefusedError{Reason: reason, Detail: detail}
}

// checkStatic applies every rule that needs no DNS: scheme, credentials,
// port, reserved names and IP literals (judged here). It returns the
// normalised host and, for IP literals, the address. The client runs it on
// every request too, so a URL that never went through CheckURL is still held
// to the same rules.
func (p Policy) checkStatic(u *url.URL) (string, netip.Addr, error) {
	var none netip.Addr
	switch u.Scheme {
	case "https":
	case "http":
		if !p.AllowHTTP {
			return "", none, refused("must use https")
		}
	default:
		return "", none, refused("must use https")
	}
	if u.Opaque != "" {
		return "", none, refused("invalid URL")
	}
	if u.User != nil {
		return "", none, refused("must not contain credentials")
	}
	host := strings.ToLower(u.Hostname())
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return "", none, refused("invalid port (1 to 65535)")
		}
	}
	if strings.HasPrefix(u.Host, "[") {
		a, err := netip.ParseAddr(host)
		if err != nil {
			return "", none, refused("host is not a valid IP address")
		}
		if err := p.judge(a); err != nil {
			return "", none, refused("host is %s", err.Error())
		}
		return host, a, nil
	}
	// A Unicode (IDN) host is looked up, and dialled by net/http, by its
	// punycode name: the resolver refuses non-ASCII names outright. It is
	// converted before any rule reads it: the conversion maps full-width
	// letters and dots ("localhost。" is "localhost."), so the rules below
	// must see what the resolver will be asked.
	if !isASCII(host) {
		ascii, err := idna.Lookup.ToASCII(host)
		if err != nil {
			return "", none, refused("host is not a valid domain name")
		}
		host = strings.ToLower(ascii)
	}
	host = strings.TrimSuffix(host, ".")
	if host == "" {
		return "", none, refused("host is required")
	}
	if a, ok := parseIPv4Host(host); ok {
		if !a.IsValid() {
			return "", none, refused("host is not a valid IP address")
		}
		if err := p.judge(a); err != nil {
			return "", none, refused("host is %s", err.Error())
		}
		return host, a, nil
	}
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return "", none, refused("localhost is not allowed")
	}
	for _, suffix := range reservedSuffixes {
		if strings.HasSuffix(host, suffix) {
			return "", none, refused("%s names are not allowed", suffix)
		}
	}
	if !strings.Contains(host, ".") {
		return "", none, refused("host must be a fully qualified domain name")
	}
	return host, none, nil
}

// reservedSuffixes are name spaces that only make sense inside a network.
var reservedSuffixes = []string{".local", ".internal", ".localdomain", ".home.arpa"}

// parseIPv4Host recognises hosts that are attempts at an IPv4 address,
// following the WHATWG URL rule: a host whose last label is a number
// (decimal, or 0x-prefixed hex) is an IPv4 address, parsed the way
// inet_aton does (decimal 2130706433, octal 0177.0.0.1, hex 0x7f.0.0.1,
// short forms 127.1). ok reports that host is such an attempt; the address
// is invalid when it does not parse, which callers must refuse.
func parseIPv4Host(host string) (addr netip.Addr, ok bool) {
	labels := strings.Split(host, ".")
	if !isNumberLabel(labels[len(labels)-1]) {
		return netip.Addr{}, false
	}
	if len(labels) > 4 {
		return netip.Addr{}, true
	}
	nums := make([]uint64, len(labels))
	for i, l := range labels {
		n, ok := parseAtonPart(l)
		if !ok {
			return netip.Addr{}, true
		}
		nums[i] = n
	}
	var v uint64
	for i, n := range nums[:len(nums)-1] {
		if n > 255 {
			return netip.Addr{}, true
		}
		v |= n << (8 * (3 - i))
	}
	last := nums[len(nums)-1]
	if last >= 1<<(8*(5-len(nums))) {
		return netip.Addr{}, true
	}
	v |= last
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)}), true
}

// isNumberLabel is WHATWG's "ends in a number" test for one label.
func isNumberLabel(l string) bool {
	if l == "" {
		return false
	}
	if strings.HasPrefix(l, "0x") || strings.HasPrefix(l, "0X") {
		return strings.Trim(l[2:], "0123456789abcdefABCDEF") == ""
	}
	return strings.Trim(l, "0123456789") == ""
}

// parseAtonPart parses one inet_aton component: 0x-prefixed hex, 0-prefixed
// octal or decimal.
func parseAtonPart(s string) (uint64, bool) {
	base := 10
	switch {
	case strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X"):
		base, s = 16, s[2:]
		if s == "" {
			return 0, true
		}
	case len(s) > 1 && s[0] == '0':
		base, s = 8, s[1:]
	}
	if s == "" {
		return 0, false
	}
	n, err := strconv.ParseUint(s, base, 64)
	return n, err == nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}
