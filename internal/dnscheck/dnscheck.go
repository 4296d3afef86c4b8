// Package dnscheck verifies that DNS records a sending domain must publish
// (DKIM, MAIL FROM MX/SPF, DMARC) are visible at a set of resolvers.
//
// Every configured resolver is asked directly, so a domain only counts as
// verified once each of them (e.g. 1.1.1.1 and 8.8.8.8) returns the records,
// not merely the first one that happens to have fresh data.
package dnscheck

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/miekg/dns"

	"github.com/mailroom/mailroom/domain"
)

// DefaultTimeout is used when a Checker has no positive Timeout.
const DefaultTimeout = 3 * time.Second

// maxParallel bounds the number of queries in flight during one Check.
const maxParallel = 16

// ednsUDPSize is the UDP payload size advertised in queries (the DNS Flag
// Day 2020 value); larger answers come back truncated and are re-asked over TCP.
const ednsUDPSize = 1232

// Record is one DNS record a domain is expected to publish.
type Record struct {
	// Type is "TXT", "MX" or "CNAME".
	Type string
	// Name is the owner host name; case and a trailing dot do not matter.
	Name string
	// Value is the full TXT text (chunks joined), the MX exchange host or
	// the CNAME target.
	Value string
	// Priority is the MX preference; ignored for other types.
	Priority int
	// Zone is the domain the owner manages. When Name does not exist, the
	// record is also looked for at Name followed by Zone, where a DNS
	// provider puts a host entered in full (it appends its zone), to say so.
	Zone string
	// Inherit is where a DMARC record's policy comes from when Name has no
	// DMARC record: _dmarc of the organisational domain, as receivers look
	// it up (RFC 7489 6.6.3). Empty for a domain that is its own.
	Inherit string
}

// Checker asks each resolver for each record.
type Checker struct {
	// Resolvers are "host:port" addresses, queried in this order.
	Resolvers []string
	// Timeout bounds each exchange with a resolver (the UDP query, the TCP
	// retry of a truncated answer and the query without EDNS to a server
	// that does not implement it each get this much).
	Timeout time.Duration
}

// New returns a Checker for resolvers; timeout <= 0 means DefaultTimeout.
func New(resolvers []string, timeout time.Duration) *Checker {
	return &Checker{Resolvers: append([]string(nil), resolvers...), Timeout: timeout}
}

// Result holds one ServerResult per resolver, in the Checker's order.
type Result struct {
	Servers []ServerResult
}

// ServerResult is what one resolver returned for every record.
type ServerResult struct {
	Server  string
	Records []RecordResult
}

// RecordResult says whether a resolver returned Record and, if not, why.
type RecordResult struct {
	// Record is the record exactly as passed to Check.
	Record Record
	Seen   bool
	// Reason is a short explanation when Seen is false, e.g. "timeout",
	// "NXDOMAIN", "no TXT record", "value differs"; when Seen is true it is
	// empty, unless the record counts from elsewhere (a DMARC policy of the
	// organisational domain) and says so.
	Reason string
}

// SeenByAll reports whether every resolver saw every record selected by
// match (nil selects all). It is false when there are no resolvers or no
// record is selected, so an empty check never counts as verified.
func (r Result) SeenByAll(match func(Record) bool) bool {
	if len(r.Servers) == 0 {
		return false
	}
	for _, s := range r.Servers {
		if !s.SeenAll(match) {
			return false
		}
	}
	return true
}

// SeenAll reports whether this resolver saw every record selected by match
// (nil selects all); false when no record is selected.
func (s ServerResult) SeenAll(match func(Record) bool) bool {
	selected := 0
	for _, rr := range s.Records {
		if match != nil && !match(rr.Record) {
			continue
		}
		selected++
		if !rr.Seen {
			return false
		}
	}
	return selected > 0
}

// Check queries every resolver for every record, in parallel, and reports
// which resolver returned which record. It never fails as a whole: per-query
// errors become reasons. Cancelling ctx ends outstanding queries early.
func (c *Checker) Check(ctx context.Context, records []Record) Result {
	res := Result{Servers: make([]ServerResult, len(c.Resolvers))}
	sem := make(chan struct{}, maxParallel)
	var wg sync.WaitGroup
	for i, server := range c.Resolvers {
		res.Servers[i] = ServerResult{Server: server, Records: make([]RecordResult, len(records))}
		for j, rec := range records {
			out := &res.Servers[i].Records[j]
			out.Record = rec
			wg.Go(func() {
				select {
				case sem <- struct{}{}:
				case <-ctx.Done():
					out.Reason = ctxReason(ctx.Err())
					return
				}
				defer func() { <-sem }()
				out.Seen, out.Reason = c.checkOne(ctx, server, rec)
			})
		}
	}
	wg.Wait()
	return res
}

// expected is a Record normalised for querying and comparison.
type expected struct {
	qtype    uint16
	typ      string
	name     string // lower-case FQDN
	value    string // TXT: trimmed text; MX/CNAME: lower-case FQDN
	priority int
}

func normalise(r Record) (expected, string) {
	e := expected{typ: strings.ToUpper(strings.TrimSpace(r.Type)), priority: r.Priority}
	switch e.typ {
	case "TXT":
		e.qtype = dns.TypeTXT
		e.value = strings.TrimSpace(r.Value)
	case "MX":
		e.qtype = dns.TypeMX
		e.value = canonicalName(r.Value)
	case "CNAME":
		e.qtype = dns.TypeCNAME
		e.value = canonicalName(r.Value)
	default:
		return e, "unsupported type"
	}
	e.name = canonicalName(r.Name)
	if e.name == "." {
		return e, "invalid name"
	}
	if _, ok := dns.IsDomainName(e.name); !ok || strings.ContainsAny(e.name, " \t\r\n") {
		return e, "invalid name"
	}
	return e, ""
}

// canonicalName lower-cases a host name and makes it fully qualified.
func canonicalName(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	return dns.Fqdn(strings.TrimSuffix(s, "."))
}

// checkOne asks server for one record and judges its answer. When the
// name has none, it says where the owner may have put it instead, and a
// DMARC record may come from the organisational domain.
func (c *Checker) checkOne(ctx context.Context, server string, rec Record) (bool, string) {
	want, bad := normalise(rec)
	if bad != "" {
		return false, bad
	}
	resp, reason := c.lookup(ctx, server, want)
	if reason != "" {
		return false, reason
	}
	seen, why := judge(want, resp)
	if seen {
		return true, ""
	}
	if rec.Inherit != "" && isDMARC(want.value) && !holdsDMARC(resp) {
		org := want
		org.name = canonicalName(rec.Inherit)
		if resp, reason := c.lookup(ctx, server, org); reason == "" {
			if ok, _ := judge(org, resp); ok {
				return true, "none at this name; the policy at " + strings.TrimSuffix(org.name, ".") + " applies to it"
			}
		}
	}
	if why == "NXDOMAIN" && rec.Zone != "" {
		doubled := want
		doubled.name = want.name + canonicalName(rec.Zone)
		if resp, reason := c.lookup(ctx, server, doubled); reason == "" {
			if ok, _ := judge(doubled, resp); ok {
				return false, "NXDOMAIN; the record is at " + strings.TrimSuffix(doubled.name, ".") +
					": the DNS provider adds the domain to the host, so enter the host without it"
			}
		}
	}
	return false, why
}

// lookup asks server the question of want. A server that does not
// implement EDNS (it answers a query with OPT by FORMERR or NOTIMP and no
// OPT of its own, RFC 6891 7) is asked again without it.
func (c *Checker) lookup(ctx context.Context, server string, want expected) (*dns.Msg, string) {
	resp, reason := c.ask(ctx, server, query(want, true))
	if reason == "" && lacksEDNS(resp) {
		resp, reason = c.ask(ctx, server, query(want, false))
	}
	return resp, reason
}

// holdsDMARC reports whether an answer that exists or not (NOERROR or
// NXDOMAIN) has a DMARC record: receivers go to the organisational domain
// only when it has none, not when the resolver failed.
func holdsDMARC(resp *dns.Msg) bool {
	if resp.Rcode != dns.RcodeSuccess && resp.Rcode != dns.RcodeNameError {
		return true
	}
	for _, rr := range resp.Answer {
		if v, ok := rr.(*dns.TXT); ok && startsAsDMARC(joinTXT(v.Txt)) {
			return true
		}
	}
	return false
}

// query builds the question for want, with an OPT record when edns.
func query(want expected, edns bool) *dns.Msg {
	q := new(dns.Msg)
	q.SetQuestion(want.name, want.qtype)
	q.RecursionDesired = true
	if edns {
		q.SetEdns0(ednsUDPSize, false)
	}
	return q
}

// lacksEDNS reports whether resp is how a server that does not implement
// EDNS answers a query carrying OPT.
func lacksEDNS(resp *dns.Msg) bool {
	return (resp.Rcode == dns.RcodeFormatError || resp.Rcode == dns.RcodeNotImplemented) && resp.IsEdns0() == nil
}

// ask sends q over UDP, and over TCP when the UDP answer is truncated. An
// answer is whole or none: when the TCP retry fails, the truncated part is
// not one (RFC 2181 9), as it may lack the very record that makes another
// not count (a second SPF record, an old DKIM key), and the reason says
// the resolver could not be asked.
func (c *Checker) ask(ctx context.Context, server string, q *dns.Msg) (*dns.Msg, string) {
	resp, err := c.exchange(ctx, "udp", server, q)
	if err != nil {
		return nil, errReason(err)
	}
	if !resp.Truncated {
		return resp, ""
	}
	resp, err = c.exchange(ctx, "tcp", server, q)
	if err != nil {
		return nil, "truncated, TCP retry failed: " + errReason(err)
	}
	return resp, ""
}

func (c *Checker) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return DefaultTimeout
}

// exchange performs one query over network. Closing the connection when ctx
// ends makes cancellation (not only deadlines) interrupt the read.
func (c *Checker) exchange(ctx context.Context, network, server string, q *dns.Msg) (*dns.Msg, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout())
	defer cancel()
	cl := &dns.Client{Net: network, Timeout: c.timeout()}
	conn, err := cl.DialContext(ctx, server)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	resp, _, err := cl.ExchangeWithConnContext(ctx, q, conn)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, err
	}
	return resp, nil
}

// judge decides whether resp contains want.
func judge(want expected, resp *dns.Msg) (bool, string) {
	// Owners whose records answer the question: the name itself plus, for
	// non-CNAME questions, any CNAME targets the resolver followed.
	owners := map[string]bool{want.name: true}
	end := want.name // where the chain of CNAMEs ends
	if want.qtype != dns.TypeCNAME {
		for changed := true; changed; {
			changed = false
			for _, rr := range resp.Answer {
				if cn, ok := rr.(*dns.CNAME); ok && owners[strings.ToLower(cn.Hdr.Name)] {
					t := strings.ToLower(cn.Target)
					if !owners[t] {
						owners[t], end = true, t
						changed = true
					}
				}
			}
		}
	}
	// The name exists when it is a CNAME: what is missing is its target.
	target := ""
	if end != want.name {
		target = " at " + strings.TrimSuffix(end, ".") + ", the CNAME's target"
	}

	switch resp.Rcode {
	case dns.RcodeSuccess:
	case dns.RcodeNameError:
		return false, "NXDOMAIN" + target
	default:
		if s, ok := dns.RcodeToString[resp.Rcode]; ok {
			return false, s
		}
		return false, "rcode " + strconv.Itoa(resp.Rcode)
	}

	spf := isSPF(want.value)
	if spf && want.qtype == dns.TypeTXT {
		// RFC 7208 4.5: two SPF records are a permanent error, so the
		// right one beside another does not make SPF pass.
		// (The same record twice is one: DNS keeps a set of records.)
		records := map[string]bool{}
		for _, rr := range resp.Answer {
			if v, ok := rr.(*dns.TXT); ok && owners[strings.ToLower(rr.Header().Name)] && isSPF(joinTXT(v.Txt)) {
				records[joinTXT(v.Txt)] = true
			}
		}
		if len(records) > 1 {
			return false, "more than one SPF record"
		}
	}
	if n, what := rivals(want, resp, owners); n > 1 {
		return false, "more than one " + what
	}
	found, priorityOnly, why := 0, false, ""
	for _, rr := range resp.Answer {
		if rr.Header().Rrtype != want.qtype || !owners[strings.ToLower(rr.Header().Name)] {
			continue
		}
		found++
		switch v := rr.(type) {
		case *dns.TXT:
			ok, reason := txtMatches(want.value, joinTXT(v.Txt))
			if ok {
				return true, ""
			}
			if why == "" {
				why = reason
			}
		case *dns.MX:
			if appended(v.Mx, want.value) {
				why = "the MX target has a name added after it (" + strings.TrimSuffix(canonicalName(v.Mx), ".") +
					"): end the target with a dot"
			}
			if canonicalName(v.Mx) == want.value {
				if int(v.Preference) == want.priority {
					if preferredOver(resp, owners, v) {
						// Mail to the name (bounces) goes there first, or
						// half of it, at the same preference (RFC 5321 5.1).
						return false, "another MX is preferred"
					}
					return true, ""
				}
				priorityOnly = true
			}
		case *dns.CNAME:
			if canonicalName(v.Target) == want.value {
				return true, ""
			}
			if appended(v.Target, want.value) {
				why = "the CNAME target has a name added after it (" + strings.TrimSuffix(canonicalName(v.Target), ".") +
					"): end the target with a dot"
			}
		}
	}
	switch {
	case found == 0:
		return false, "no " + want.typ + " record" + target
	case priorityOnly:
		return false, "priority differs"
	case why != "":
		return false, why
	default:
		return false, "value differs"
	}
}

// appended reports whether a published host name is want with a name added
// after it: typed without its final dot in a zone file or a DNS provider's
// form, which then appends the zone.
func appended(got, want string) bool {
	return strings.HasPrefix(canonicalName(got), want) && canonicalName(got) != want
}

// rivals counts the distinct records at want's name that receivers read
// together with the one want asks for, and names them: every TXT record at
// a DKIM key's name (RFC 6376 3.6.2.2 leaves several undefined; go-msgauth,
// which Mailroom signs with, fails the signature), and the DMARC records
// at _dmarc (RFC 7489 6.6.3: with several, no policy applies). DNS keeps
// a set, so the same record twice is one.
func rivals(want expected, resp *dns.Msg, owners map[string]bool) (int, string) {
	if want.qtype != dns.TypeTXT {
		return 0, ""
	}
	var counts func(string) bool
	var what string
	switch {
	case isDKIM(want.value):
		counts, what = func(string) bool { return true }, "TXT record at the DKIM key's name"
	case isDMARC(want.value):
		counts, what = startsAsDMARC, "DMARC record"
	default:
		return 0, ""
	}
	records := map[string]bool{}
	for _, rr := range resp.Answer {
		if v, ok := rr.(*dns.TXT); ok && owners[strings.ToLower(rr.Header().Name)] && counts(joinTXT(v.Txt)) {
			records[joinTXT(v.Txt)] = true
		}
	}
	return len(records), what
}

// preferredOver reports whether another host's MX of the same owners has
// a preference value as low as mx's or lower, so that mail goes there
// first or shares the load with it.
func preferredOver(resp *dns.Msg, owners map[string]bool, mx *dns.MX) bool {
	for _, rr := range resp.Answer {
		if o, ok := rr.(*dns.MX); ok && owners[strings.ToLower(o.Hdr.Name)] &&
			o.Preference <= mx.Preference && canonicalName(o.Mx) != canonicalName(mx.Mx) {
			return true
		}
	}
	return false
}

// txtMatches reports whether a published TXT value does what want asks,
// and when it does not, possibly why (empty: it just differs). DKIM keys,
// SPF and DMARC policies are read as what they mean, as receivers read
// them, since DNS providers' forms rewrite spacing and tag order; anything
// else must match as written (spaces around it aside).
func txtMatches(want, got string) (bool, string) {
	switch {
	case isDKIM(want):
		return dkimMatches(want, got)
	case isSPF(want):
		return spfMatches(want, got)
	case isDMARC(want):
		if isDMARC(got) {
			return true, ""
		}
		return false, "not a DMARC policy (v=DMARC1; p=none, quarantine or reject)"
	}
	return strings.TrimSpace(got) == want, ""
}

// isDMARC reports whether v is a DMARC policy record (RFC 7489 6.3): v=DMARC1
// first, then a p= of none, quarantine or reject. Which policy, and what
// else it says (rua=, pct=), is the owner's: a stricter one than the
// p=none Mailroom asks for does the job as well.
func isDMARC(v string) bool {
	if !startsAsDMARC(v) {
		return false
	}
	tags := strings.Split(v, ";")
	for _, t := range tags[1:] {
		k, val, _ := strings.Cut(t, "=")
		if strings.EqualFold(strings.TrimSpace(k), "p") {
			switch strings.ToLower(strings.TrimSpace(val)) {
			case "none", "quarantine", "reject":
				return true
			}
			return false
		}
	}
	return false
}

// startsAsDMARC reports whether v is a DMARC record at all: its first tag
// is v=DMARC1 (records that are not are ignored by receivers).
func startsAsDMARC(v string) bool {
	k, val, ok := strings.Cut(strings.Split(v, ";")[0], "=")
	// The tag name is case-insensitive (RFC 7489 6.4's ABNF "v"), the
	// value DMARC1 is not (%x44 %x4d ...).
	return ok && strings.EqualFold(strings.TrimSpace(k), "v") && strings.TrimSpace(val) == "DMARC1"
}

func isDKIM(v string) bool {
	t, bad := dkimTags(v)
	return bad == "" && t["v"] == "DKIM1" && dkimKey(t) != ""
}

// dkimTags reads a DKIM key record's tag=value list (RFC 6376 3.2) as
// receivers do, go-msgauth (which Mailroom signs with) among them: names
// and values are case-sensitive and trimmed of surrounding whitespace. A
// tag given twice, or text that is no tag, makes the record invalid; bad
// then says why.
func dkimTags(v string) (tags map[string]string, bad string) {
	tags = map[string]string{}
	for _, part := range strings.Split(v, ";") {
		k, val, ok := strings.Cut(part, "=")
		if !ok {
			if strings.TrimSpace(part) == "" {
				continue // a trailing or doubled ;
			}
			return tags, "DKIM tag list malformed"
		}
		k = strings.TrimSpace(k)
		if _, twice := tags[k]; twice {
			return tags, "DKIM tag given twice"
		}
		tags[k] = strings.TrimSpace(val)
	}
	return tags, ""
}

// dkimKey is the p= base64 without the whitespace it may be folded with:
// RFC 6376's FWS (spaces, tabs, line breaks) and no other, since receivers
// read a key with a no-break space or a form feed in it as no key.
func dkimKey(tags map[string]string) string {
	return fws.Replace(tags["p"])
}

var fws = strings.NewReplacer(" ", "", "\t", "", "\r", "", "\n", "")

// dkimTagList splits a colon-separated tag value (h=, s=), dropping
// whitespace around and inside each item.
func dkimTagList(v string) []string {
	items := strings.Split(v, ":")
	for i, it := range items {
		items[i] = strings.Join(strings.Fields(it), "")
	}
	return items
}

// dkimMatches reports whether got publishes want's key in a record that
// receivers use to check Mailroom's signatures (rsa-sha256, for email).
// v= and k= may be left out (DKIM1, rsa) and v= need not come first, as
// receivers accept; t= and n= change nothing. When the record carries the
// key but a receiver would discard it, reason says why; a record of
// another key (or none) just differs.
func dkimMatches(want, got string) (ok bool, reason string) {
	w, _ := dkimTags(want)
	key := dkimKey(w)
	g, bad := dkimTags(got)
	if !carriesKey(got, key) {
		return false, misPasted(got, key)
	}
	switch {
	case bad != "":
		return false, bad
	case hasTag(g, "v") && g["v"] != "DKIM1":
		return false, "v= is not DKIM1"
	case !hasTag(g, "p"):
		return false, "no p= tag"
	case dkimKey(g) != key:
		if strings.Join(strings.Fields(g["p"]), "") == key {
			return false, "p= holds characters other than base64 and spaces"
		}
		return false, ""
	case hasTag(g, "k") && g["k"] != "rsa":
		return false, "k= is not rsa"
	case hasTag(g, "h") && !slices.Contains(dkimTagList(g["h"]), "sha256"):
		return false, "h= lacks sha256"
	case hasTag(g, "s") && !slices.Contains(dkimTagList(g["s"]), "email") && !slices.Contains(dkimTagList(g["s"]), "*"):
		return false, "s= lacks email"
	}
	return true, ""
}

func hasTag(tags map[string]string, name string) bool {
	_, ok := tags[name]
	return ok
}

// misPasted says how a record meant to publish key lost it on its way into
// the DNS provider's form, where that shows: quote characters kept in the
// value, or a key cut short (a form that stops at 255 characters). Empty
// when the record is just of another key.
func misPasted(record, key string) string {
	if strings.Contains(record, `"`) && carriesKey(strings.ReplaceAll(record, `"`, ""), key) {
		return "the value holds quote characters: publish it without them"
	}
	for _, part := range strings.Split(record, ";") {
		k, val, ok := strings.Cut(part, "=")
		p := strings.Join(strings.Fields(strings.ReplaceAll(val, `"`, "")), "")
		if ok && strings.EqualFold(strings.TrimSpace(k), "p") && p != "" && len(p) < len(key) && strings.HasPrefix(key, p) {
			return fmt.Sprintf("the key is cut short (%d of its %d characters): publish the whole value", len(p), len(key))
		}
	}
	return ""
}

// carriesKey reports whether a record gives key in some p= tag, read
// loosely (any case, any copy): such a record is meant to publish it, so
// what a receiver finds wrong with it is worth saying.
func carriesKey(record, key string) bool {
	for _, part := range strings.Split(record, ";") {
		k, val, ok := strings.Cut(part, "=")
		if ok && strings.EqualFold(strings.TrimSpace(k), "p") && strings.Join(strings.Fields(val), "") == key {
			return true
		}
	}
	return false
}

// isSPF reports whether v is an SPF record as receivers select them (RFC
// 7208 4.5): it begins with exactly "v=spf1" (any case), ended by a space
// or the end of the record. A leading space or a tab after the version
// makes receivers discard it.
func isSPF(v string) bool {
	return len(v) >= 6 && strings.EqualFold(v[:6], "v=spf1") && (len(v) == 6 || v[6] == ' ')
}

// spfMatches: an SPF record holding every include the wanted one has, in
// any case, order or company; how it ends (~all, -all) is the owner's.
// Receivers stop at "all" (RFC 7208 5.1), so includes after it count for
// nothing. A record receivers cannot evaluate (a syntax error is a
// permanent error for every message) does not count either. When got does
// not match, reason may say why.
func spfMatches(want, got string) (ok bool, reason string) {
	if !isSPF(got) {
		if f := strings.Fields(got); len(f) > 0 && strings.EqualFold(f[0], "v=spf1") {
			return false, `receivers ignore this record: it must begin with "v=spf1" and a space`
		}
		return false, ""
	}
	terms := strings.Split(got, " ")[1:]
	if bad := spfSyntaxError(terms); bad != "" {
		return false, bad
	}
	have, late := map[string]bool{}, map[string]bool{}
	ended := false
	for _, term := range terms {
		t := strings.ToLower(strings.TrimLeft(term, "+-~?"))
		if t == "all" {
			ended = true
			continue
		}
		// A domain may end in its root's dot (include:amazonses.com.).
		name := strings.TrimSuffix(strings.ToLower(strings.TrimPrefix(term, "+")), ".")
		if ended {
			late[name] = true
		} else {
			have[name] = true
		}
	}
	for _, term := range strings.Fields(want)[1:] {
		if t := strings.ToLower(term); strings.HasPrefix(t, "include:") && !have[t] {
			if late[t] {
				return false, term + ` comes after "all", where receivers stop reading`
			}
			return false, ""
		}
	}
	return true, ""
}

// spfSyntaxError names the first term of an SPF record (after v=spf1) that
// RFC 7208's grammar (section 12) does not allow, or a modifier given twice
// (6): receivers then fail every message with a permanent error. Empty
// when the record parses. Terms are separated by spaces only.
func spfSyntaxError(terms []string) string {
	bad := func(term string) string {
		return fmt.Sprintf("SPF syntax error at %s: receivers fail every message (permerror)", domain.QuoteShort(term))
	}
	modifiers := map[string]bool{}
	for _, term := range terms {
		if term == "" {
			continue // several spaces
		}
		name, arg, sep := spfTermName(term)
		if sep == '=' {
			lower := strings.ToLower(name)
			switch {
			case !spfModifierName(name):
				return bad(term)
			case lower == "redirect" || lower == "exp":
				if modifiers[lower] || !spfDomainSpec(arg) {
					return bad(term)
				}
				modifiers[lower] = true
			case !spfMacroString(arg):
				return bad(term)
			}
			continue
		}
		mech := strings.ToLower(strings.TrimLeft(name, "+-~?"))
		if len(name)-len(strings.TrimLeft(name, "+-~?")) > 1 {
			return bad(term) // one qualifier at most
		}
		var ok bool
		switch mech {
		case "all":
			ok = sep == 0
		case "include", "exists":
			ok = sep == ':' && spfDomainSpec(arg)
		case "a", "mx":
			ok = spfDomainAndCIDR(sep, arg)
		case "ptr":
			ok = sep == 0 || sep == ':' && spfDomainSpec(arg)
		case "ip4":
			ok = sep == ':' && spfNetwork(arg, true)
		case "ip6":
			ok = sep == ':' && spfNetwork(arg, false)
		}
		if !ok {
			return bad(term)
		}
	}
	return ""
}

// spfTermName splits a term at its first ':', '/' or '=' (the separator,
// 0 when none), the name before it and what follows.
func spfTermName(term string) (name, arg string, sep byte) {
	i := strings.IndexAny(term, ":/=")
	if i < 0 {
		return term, "", 0
	}
	if term[i] == '/' {
		return term[:i], term[i:], '/'
	}
	return term[:i], term[i+1:], term[i]
}

// spfModifierName: ALPHA *( ALPHA / DIGIT / "-" / "_" / "." ).
func spfModifierName(n string) bool {
	if n == "" || !isAlpha(n[0]) {
		return false
	}
	for i := 1; i < len(n); i++ {
		if c := n[i]; !isAlpha(c) && !isDigit(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

// spfMacroString: visible ASCII, macros (%{...}, %%, %_, %-) well formed.
func spfMacroString(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x21 || c > 0x7e {
			return false
		}
		if c != '%' {
			continue
		}
		if i+1 >= len(s) {
			return false
		}
		switch s[i+1] {
		case '%', '_', '-':
			i++
		case '{':
			j := strings.IndexByte(s[i:], '}')
			if j < 3 || !strings.ContainsRune("slodiphcrtvSLODIPHCRTV", rune(s[i+2])) {
				return false
			}
			i += j
		default:
			return false
		}
	}
	return true
}

// spfDomainSpec: a macro string that ends in a top label (or a macro), so
// an empty one, or one of a single label, is not.
func spfDomainSpec(s string) bool {
	if s == "" || !spfMacroString(s) {
		return false
	}
	if strings.HasSuffix(s, "}") {
		return true // ends in a macro
	}
	labels := strings.Split(strings.TrimSuffix(s, "."), ".")
	if len(labels) < 2 {
		return false
	}
	top := labels[len(labels)-1]
	if top == "" || top[0] == '-' || top[len(top)-1] == '-' {
		return false
	}
	letter := false
	for i := 0; i < len(top); i++ {
		c := top[i]
		if !isAlpha(c) && !isDigit(c) && c != '-' {
			return false
		}
		letter = letter || isAlpha(c) || c == '-'
	}
	return letter
}

// spfDomainAndCIDR is what may follow "a" or "mx": an optional
// ":domain-spec", then an optional "/ip4-cidr" and "//ip6-cidr".
func spfDomainAndCIDR(sep byte, arg string) bool {
	switch sep {
	case 0:
		return true
	case '/':
		return spfDualCIDR(arg)
	}
	domain, cidr := arg, ""
	if i := strings.IndexByte(arg, '/'); i >= 0 {
		domain, cidr = arg[:i], arg[i:]
	}
	return spfDomainSpec(domain) && (cidr == "" || spfDualCIDR(cidr))
}

// spfDualCIDR: "/n" (0-32), "//n" (0-128) or "/n//m".
func spfDualCIDR(s string) bool {
	v4, v6, dual := strings.Cut(s, "//")
	if dual && !spfPrefixLen(v6, 128) {
		return false
	}
	if v4 == "" {
		return dual
	}
	return strings.HasPrefix(v4, "/") && spfPrefixLen(v4[1:], 32)
}

func spfPrefixLen(s string, limit int) bool {
	if s == "" || len(s) > 3 || (len(s) > 1 && s[0] == '0') {
		return false
	}
	n, err := strconv.Atoi(s)
	return err == nil && n >= 0 && n <= limit
}

// spfNetwork: an address of the family, with an optional "/prefix".
func spfNetwork(s string, v4 bool) bool {
	addr, prefix, hasPrefix := strings.Cut(s, "/")
	ip, err := netip.ParseAddr(addr)
	if err != nil || ip.Is4() != v4 || ip.Zone() != "" {
		return false
	}
	limit := 128
	if v4 {
		limit = 32
	}
	return !hasPrefix || spfPrefixLen(prefix, limit)
}

func isAlpha(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// joinTXT concatenates TXT character-strings, undoing the presentation
// escaping (\" \\ \DDD) miekg/dns applies when unpacking.
func joinTXT(parts []string) string {
	var b strings.Builder
	for _, p := range parts {
		for i := 0; i < len(p); i++ {
			if p[i] != '\\' || i+1 >= len(p) {
				b.WriteByte(p[i])
				continue
			}
			if i+3 < len(p) && isDigit(p[i+1]) && isDigit(p[i+2]) && isDigit(p[i+3]) {
				n := int(p[i+1]-'0')*100 + int(p[i+2]-'0')*10 + int(p[i+3]-'0')
				if n <= 255 {
					b.WriteByte(byte(n))
					i += 3
					continue
				}
			}
			b.WriteByte(p[i+1])
			i++
		}
	}
	return b.String()
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// ResolverTrouble reports whether a record's reason is a resolver's failure
// to answer (unreachable, timed out, refusing the query) rather than an
// answer about the domain: the operator's to fix, not the domain owner's.
func ResolverTrouble(reason string) bool {
	switch {
	case reason == "timeout", reason == "connection refused", reason == "REFUSED",
		strings.HasPrefix(reason, "truncated, TCP retry failed"), strings.HasPrefix(reason, "error: "):
		return true
	}
	return false
}

func ctxReason(err error) string {
	if errors.Is(err, context.DeadlineExceeded) {
		return "timeout"
	}
	return "canceled"
}

func errReason(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, context.Canceled):
		return "canceled"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	default:
		return "error: " + err.Error()
	}
}

// ParseResolvers parses MAILROOM_DNS_RESOLVERS: comma-separated "host:port"
// entries (IPv6 hosts in brackets, e.g. "[::1]:53"). A bare IP address gets
// port 53. Blank entries are skipped; an empty list or a duplicate is an error.
func ParseResolvers(s string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		addr, err := parseResolver(item)
		if err != nil {
			return nil, err
		}
		if seen[addr] {
			return nil, fmt.Errorf("dns resolver %q listed twice", item)
		}
		seen[addr] = true
		out = append(out, addr)
	}
	if len(out) == 0 {
		return nil, errors.New("no dns resolvers given")
	}
	return out, nil
}

func parseResolver(item string) (string, error) {
	// A bare IP ("1.1.1.1", "::1", "[::1]") means port 53.
	if ip, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(item, "["), "]")); err == nil {
		return net.JoinHostPort(ip.String(), "53"), nil
	}
	host, port, err := net.SplitHostPort(item)
	if err != nil {
		return "", fmt.Errorf("dns resolver %q: want host:port", item)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return "", fmt.Errorf("dns resolver %q: invalid port", item)
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		return net.JoinHostPort(ip.String(), strconv.Itoa(p)), nil
	}
	if !validHostname(host) {
		return "", fmt.Errorf("dns resolver %q: invalid host", item)
	}
	return net.JoinHostPort(strings.ToLower(host), strconv.Itoa(p)), nil
}

// validHostname accepts letters, digits, hyphens and dots, e.g. a container
// name such as "coredns".
func validHostname(h string) bool {
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || isDigit(c) || c == '-') {
				return false
			}
		}
	}
	return true
}
