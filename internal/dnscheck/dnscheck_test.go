package dnscheck_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/mailroom/mailroom/internal/dnscheck"
	"github.com/mailroom/mailroom/internal/dnscheck/dnstest"
)

// dkimKey is shaped like an RSA-2048 public key: long enough (>255 bytes)
// that the TXT value travels as several character-strings.
var dkimKey = strings.Repeat("MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA", 9)[:392]

// domainRecords are the records a domain is asked to publish.
func domainRecords() []dnscheck.Record {
	return []dnscheck.Record{
		{Type: "TXT", Name: "mrabc123._domainkey.example.com", Value: "v=DKIM1; k=rsa; p=" + dkimKey},
		{Type: "MX", Name: "send.example.com", Value: "feedback-smtp.us-east-1.amazonses.com", Priority: 10},
		{Type: "TXT", Name: "send.example.com", Value: "v=spf1 include:amazonses.com ~all"},
		{Type: "TXT", Name: "_dmarc.example.com", Value: "v=DMARC1; p=none;"},
	}
}

func isDMARC(r dnscheck.Record) bool  { return strings.HasPrefix(r.Name, "_dmarc.") }
func required(r dnscheck.Record) bool { return !isDMARC(r) }

func startPair(t *testing.T) (a, b *dnstest.Server, c *dnscheck.Checker) {
	t.Helper()
	a, b = dnstest.Start(t), dnstest.Start(t)
	return a, b, dnscheck.New([]string{a.Addr(), b.Addr()}, 2*time.Second)
}

// reasons maps "TYPE name" to each record's reason for one server.
func reasons(s dnscheck.ServerResult) map[string]string {
	m := map[string]string{}
	for _, r := range s.Records {
		m[r.Record.Type+" "+r.Record.Name] = r.Reason
	}
	return m
}

func requireShape(t *testing.T, res dnscheck.Result, servers []string, n int) {
	t.Helper()
	if len(res.Servers) != len(servers) {
		t.Fatalf("got %d server results, want %d", len(res.Servers), len(servers))
	}
	for i, s := range res.Servers {
		if s.Server != servers[i] {
			t.Fatalf("server %d = %q, want %q (order must follow Resolvers)", i, s.Server, servers[i])
		}
		if len(s.Records) != n {
			t.Fatalf("server %s: %d record results, want %d", s.Server, len(s.Records), n)
		}
	}
}

func TestNothingPublished(t *testing.T) {
	_, _, c := startPair(t)
	recs := domainRecords()
	res := c.Check(context.Background(), recs)
	requireShape(t, res, c.Resolvers, len(recs))
	for _, s := range res.Servers {
		for i, r := range s.Records {
			if r.Record != recs[i] {
				t.Errorf("record %d = %+v, want input order and value %+v", i, r.Record, recs[i])
			}
			if r.Seen || r.Reason != "NXDOMAIN" {
				t.Errorf("%s %s %s: seen=%v reason=%q, want unseen NXDOMAIN", s.Server, r.Record.Type, r.Record.Name, r.Seen, r.Reason)
			}
		}
		if s.SeenAll(nil) {
			t.Errorf("%s: SeenAll true with nothing published", s.Server)
		}
	}
	if res.SeenByAll(nil) || res.SeenByAll(required) {
		t.Error("SeenByAll true with nothing published")
	}
}

func TestPublishedOnOneResolver(t *testing.T) {
	a, _, c := startPair(t)
	recs := domainRecords()
	a.Set(recs...)
	res := c.Check(context.Background(), recs)
	requireShape(t, res, c.Resolvers, len(recs))
	for _, r := range res.Servers[0].Records {
		if !r.Seen || r.Reason != "" {
			t.Errorf("resolver A: %s %s seen=%v reason=%q, want seen", r.Record.Type, r.Record.Name, r.Seen, r.Reason)
		}
	}
	for _, r := range res.Servers[1].Records {
		if r.Seen {
			t.Errorf("resolver B: %s %s seen, but B has nothing", r.Record.Type, r.Record.Name)
		}
	}
	if !res.Servers[0].SeenAll(nil) || res.Servers[1].SeenAll(nil) {
		t.Error("SeenAll: want true for A, false for B")
	}
	if res.SeenByAll(nil) || res.SeenByAll(required) {
		t.Error("SeenByAll true although resolver B saw nothing")
	}
}

func TestPublishedOnBothResolvers(t *testing.T) {
	a, b, c := startPair(t)
	recs := domainRecords()
	a.Set(recs...)
	// B lacks DMARC, which is reported but not required.
	b.Set(recs[:3]...)
	// Names and hosts differ in case and trailing dots from what is published.
	query := domainRecords()
	query[0].Name = "MRabc123._DomainKey.Example.COM."
	query[1].Value = "Feedback-SMTP.us-east-1.AmazonSES.com."
	res := c.Check(context.Background(), query)
	if !res.SeenByAll(required) {
		t.Fatalf("SeenByAll(required) false: %+v", res)
	}
	if res.SeenByAll(nil) {
		t.Error("SeenByAll(all) true although B has no DMARC record")
	}
	if got := reasons(res.Servers[1])["TXT _dmarc.example.com"]; got != "NXDOMAIN" {
		t.Errorf("B DMARC reason = %q, want NXDOMAIN", got)
	}
	if res.SeenByAll(func(dnscheck.Record) bool { return false }) {
		t.Error("SeenByAll true when match selects no record")
	}
}

func TestWrongDKIMValue(t *testing.T) {
	a, b, c := startPair(t)
	recs := domainRecords()
	dkim := recs[0]
	a.Set(recs...)
	b.Set(recs...)
	// B holds an old key.
	old := dnscheck.Record{Type: "TXT", Name: dkim.Name, Value: "v=DKIM1; k=rsa; p=" + strings.Repeat("Q", len(dkimKey))}
	b.Set(old)
	res := c.Check(context.Background(), []dnscheck.Record{dkim})
	if r := res.Servers[0].Records[0]; !r.Seen {
		t.Errorf("A: DKIM unseen (%q)", r.Reason)
	}
	if r := res.Servers[1].Records[0]; r.Seen || r.Reason != "value differs" {
		t.Errorf("B: seen=%v reason=%q, want unseen \"value differs\"", r.Seen, r.Reason)
	}
	if res.SeenByAll(nil) {
		t.Error("SeenByAll true with a wrong DKIM value on B")
	}

	// The right key beside another TXT record at its name, old key or
	// anything else, fails at receivers (go-msgauth: "multiple TXT records
	// found for key"), so it is not seen either.
	for _, other := range []dnscheck.Record{old, {Type: "TXT", Name: dkim.Name, Value: "unrelated"}} {
		b.Set(dkim, other)
		res = c.Check(context.Background(), []dnscheck.Record{dkim})
		if r := res.Servers[1].Records[0]; r.Seen || r.Reason != "more than one TXT record at the DKIM key's name" {
			t.Errorf("DKIM beside %q: seen=%v reason=%q", other.Value, r.Seen, r.Reason)
		}
	}
	b.Set(dkim)
	if res = c.Check(context.Background(), []dnscheck.Record{dkim}); !res.SeenByAll(nil) {
		t.Errorf("DKIM alone unseen: %+v", res.Servers[1].Records[0])
	}
}

// Two DMARC records at _dmarc are no policy at all (RFC 7489 6.6.3); a
// TXT record there that is no DMARC record is ignored, as receivers do.
func TestTwoDMARCRecordsAreNone(t *testing.T) {
	a, b, c := startPair(t)
	var dmarc dnscheck.Record
	for _, r := range domainRecords() {
		if strings.HasPrefix(r.Name, "_dmarc.") {
			dmarc = r
		}
	}
	a.Set(dmarc, dnscheck.Record{Type: "TXT", Name: dmarc.Name, Value: "v=DMARC1; p=reject"})
	b.Set(dmarc, dnscheck.Record{Type: "TXT", Name: dmarc.Name, Value: "google-site-verification=abc"})
	res := c.Check(context.Background(), []dnscheck.Record{dmarc})
	if r := res.Servers[0].Records[0]; r.Seen || r.Reason != "more than one DMARC record" {
		t.Errorf("two DMARC records: seen=%v reason=%q", r.Seen, r.Reason)
	}
	if r := res.Servers[1].Records[0]; !r.Seen {
		t.Errorf("DMARC beside another TXT record unseen: %q", r.Reason)
	}
}

func TestLongTXTIsJoinedFromChunks(t *testing.T) {
	a, b, c := startPair(t)
	dkim := domainRecords()[0]
	if len(dkim.Value) != 410 {
		t.Fatalf("test DKIM value is %d bytes, want 410", len(dkim.Value))
	}
	a.Set(dkim)
	b.Set(dkim)

	// The wire answer really is split, so the join is what makes it match.
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(dkim.Name), dns.TypeTXT)
	q.SetEdns0(4096, false)
	in, _, err := new(dns.Client).Exchange(q, a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	txt, ok := in.Answer[0].(*dns.TXT)
	if len(in.Answer) != 1 || !ok || len(txt.Txt) != 2 || len(txt.Txt[0]) != 255 {
		t.Fatalf("server answer not split into 255-byte strings: %v", in.Answer)
	}

	res := c.Check(context.Background(), []dnscheck.Record{dkim})
	if !res.SeenByAll(nil) {
		t.Fatalf("chunked DKIM TXT not matched: %+v", res)
	}

	// Joining must not insert separators: a plain TXT value (not a DKIM
	// key, whose base64 may hold spaces) with a space at the 255-byte
	// boundary is a different value.
	long := dnscheck.Record{Type: "TXT", Name: "long.example.com", Value: "token=" + dkimKey}
	a.Set(long)
	spaced := long
	spaced.Value = long.Value[:255] + " " + long.Value[255:]
	res = c.Check(context.Background(), []dnscheck.Record{long, spaced})
	if r := res.Servers[0].Records; !r[0].Seen || r[1].Seen || r[1].Reason != "value differs" {
		t.Errorf("long TXT: %+v, want the value seen and the spaced one not", r)
	}
}

// A DKIM key or an SPF policy written as DNS providers' forms write them is
// seen: other spacing, tag order, extra tags, default tags left out, the
// key's base64 folded, SPF in other case, other includes, another all. A
// different key, key type or version, DKIM tag names in upper case, or an
// SPF record without the include, is not; nor is the right SPF record
// beside a second one, which makes SPF fail.
func TestDKIMAndSPFAreReadForWhatTheyMean(t *testing.T) {
	a, _, c := startPair(t)
	c = dnscheck.New([]string{a.Addr()}, 2*time.Second)
	dkim, spf := domainRecords()[0], domainRecords()[2]
	check := func(name string, published []dnscheck.Record, want dnscheck.Record, seen bool, reason string) {
		t.Helper()
		a.Clear()
		a.Set(published...)
		r := c.Check(context.Background(), []dnscheck.Record{want}).Servers[0].Records[0]
		if r.Seen != seen || (!seen && reason != "" && r.Reason != reason) {
			t.Errorf("%s: seen=%v reason=%q, want seen=%v %s", name, r.Seen, r.Reason, seen, reason)
		}
	}
	txt := func(name, value string) dnscheck.Record {
		return dnscheck.Record{Type: "TXT", Name: name, Value: value}
	}
	for name, value := range map[string]string{
		"no spaces":      "v=DKIM1;k=rsa;p=" + dkimKey,
		"extra tags":     "v=DKIM1; k=rsa; t=s; h=sha256; p=" + dkimKey + ";",
		"no k":           "v=DKIM1; p=" + dkimKey,
		"no v":           "k=rsa; p=" + dkimKey,
		"tags reordered": "p=" + dkimKey + "; k=rsa; v=DKIM1",
		"folded base64":  "v=DKIM1; k=rsa; p=" + dkimKey[:100] + " " + dkimKey[100:200] + "\t" + dkimKey[200:],
	} {
		check("DKIM "+name, []dnscheck.Record{txt(dkim.Name, value)}, dkim, true, "")
	}
	for name, c := range map[string]struct{ value, reason string }{
		"another key":      {"v=DKIM1; k=rsa; p=" + strings.Repeat("Q", len(dkimKey)), "value differs"},
		"revoked":          {"v=DKIM1; k=rsa; p=", "value differs"},
		"another type":     {"v=DKIM1; k=ed25519; p=" + dkimKey, "k= is not rsa"},
		"another version":  {"v=DKIM2; k=rsa; p=" + dkimKey, "v= is not DKIM1"},
		"a tag twice":      {"v=DKIM1; k=rsa; p=" + strings.Repeat("Q", len(dkimKey)) + "; p=" + dkimKey, "DKIM tag given twice"},
		"upper-case names": {"V=DKIM1; K=rsa; P=" + dkimKey, "no p= tag"},
	} {
		check("DKIM "+name, []dnscheck.Record{txt(dkim.Name, c.value)}, dkim, false, c.reason)
	}
	for name, value := range map[string]string{
		"-all":           "v=spf1 include:amazonses.com -all",
		"other includes": "v=spf1 include:_spf.google.com include:amazonses.com ~all",
		"upper case":     "V=SPF1 INCLUDE:AMAZONSES.COM ~ALL",
		"double spaces":  "v=spf1  include:amazonses.com  ~all",
		"root dot":       "v=spf1 include:amazonses.com. ~all",
	} {
		check("SPF "+name, []dnscheck.Record{txt(spf.Name, value)}, spf, true, "")
	}
	check("SPF without the include", []dnscheck.Record{txt(spf.Name, "v=spf1 include:_spf.google.com ~all")}, spf, false, "value differs")
	for _, end := range []string{"-all", "~all", "all", "?all"} { // nothing after all is read
		check("SPF with the include after "+end, []dnscheck.Record{txt(spf.Name, "v=spf1 "+end+" include:amazonses.com")}, spf, false,
			`include:amazonses.com comes after "all", where receivers stop reading`)
	}
	// RFC 7208 4.5: a record not beginning with exactly "v=spf1" ended by a
	// space is no SPF record to receivers.
	ignored := `receivers ignore this record: it must begin with "v=spf1" and a space`
	check("SPF with a leading space", []dnscheck.Record{txt(spf.Name, " v=spf1 include:amazonses.com ~all")}, spf, false, ignored)
	check("SPF with a tab after the version", []dnscheck.Record{txt(spf.Name, "v=spf1\tinclude:amazonses.com ~all")}, spf, false, ignored)
	check("SPF of another service", []dnscheck.Record{txt(spf.Name, "v=spf1 include:_spf.google.com ~all")}, spf, false, "value differs")
	check("two SPF records", []dnscheck.Record{spf, txt(spf.Name, "v=spf1 include:_spf.google.com ~all")}, spf, false, "more than one SPF record")
	check("SPF beside another TXT", []dnscheck.Record{spf, txt(spf.Name, "google-site-verification=abc")}, spf, true, "")
}

func TestTXTSpecialCharactersAndWhitespace(t *testing.T) {
	a, b, c := startPair(t)
	want := dnscheck.Record{Type: "TXT", Name: "x.example.com", Value: `a "quoted" \ value`}
	a.Set(want)
	b.Set(dnscheck.Record{Type: "TXT", Name: "x.example.com", Value: "  " + want.Value + " "})
	res := c.Check(context.Background(), []dnscheck.Record{want})
	if !res.SeenByAll(nil) {
		t.Fatalf("TXT with quotes/backslash (or surrounding spaces) not matched: %+v", res)
	}
}

func TestMX(t *testing.T) {
	a, b, c := startPair(t)
	mx := domainRecords()[1]
	a.Set(mx)
	wrongPrio := mx
	wrongPrio.Priority = 20
	b.Set(wrongPrio)
	res := c.Check(context.Background(), []dnscheck.Record{mx})
	if r := res.Servers[0].Records[0]; !r.Seen {
		t.Errorf("A: MX unseen (%q)", r.Reason)
	}
	if r := res.Servers[1].Records[0]; r.Seen || r.Reason != "priority differs" {
		t.Errorf("B: seen=%v reason=%q, want unseen \"priority differs\"", r.Seen, r.Reason)
	}

	wrongHost := mx
	wrongHost.Value = "feedback-smtp.eu-west-1.amazonses.com"
	b.Set(wrongHost)
	res = c.Check(context.Background(), []dnscheck.Record{mx})
	if r := res.Servers[1].Records[0]; r.Seen || r.Reason != "value differs" {
		t.Errorf("B wrong host: seen=%v reason=%q, want unseen \"value differs\"", r.Seen, r.Reason)
	}

	// Another host's MX preferred over it takes the bounces: not seen.
	b.Set(mx, dnscheck.Record{Type: "MX", Name: mx.Name, Value: "mx.example.net", Priority: 5})
	res = c.Check(context.Background(), []dnscheck.Record{mx})
	if r := res.Servers[1].Records[0]; r.Seen || r.Reason != "another MX is preferred" {
		t.Errorf("B with a preferred MX: seen=%v reason=%q", r.Seen, r.Reason)
	}
	// One as preferred takes half the bounces: not seen either.
	b.Set(mx, dnscheck.Record{Type: "MX", Name: mx.Name, Value: "mx.example.net", Priority: mx.Priority})
	if r := c.Check(context.Background(), []dnscheck.Record{mx}).Servers[1].Records[0]; r.Seen || r.Reason != "another MX is preferred" {
		t.Errorf("B with an MX as preferred: seen=%v reason=%q", r.Seen, r.Reason)
	}
	// One less preferred (a backup) changes nothing.
	b.Set(mx, dnscheck.Record{Type: "MX", Name: mx.Name, Value: "mx.example.net", Priority: 20})
	if r := c.Check(context.Background(), []dnscheck.Record{mx}).Servers[1].Records[0]; !r.Seen {
		t.Errorf("B with a backup MX: unseen (%q)", r.Reason)
	}

	// The name exists (it has TXT) but has no MX: NOERROR, empty answer.
	b.Remove(mx.Name, "MX")
	b.Set(dnscheck.Record{Type: "TXT", Name: mx.Name, Value: "v=spf1 -all"})
	res = c.Check(context.Background(), []dnscheck.Record{mx})
	if r := res.Servers[1].Records[0]; r.Seen || r.Reason != "no MX record" {
		t.Errorf("B no MX: seen=%v reason=%q, want \"no MX record\"", r.Seen, r.Reason)
	}
}

func TestCNAME(t *testing.T) {
	a, b, c := startPair(t)
	want := dnscheck.Record{Type: "CNAME", Name: "abc._domainkey.example.com", Value: "abc.dkim.amazonses.com"}
	a.Set(dnscheck.Record{Type: "CNAME", Name: want.Name, Value: "ABC.dkim.amazonses.com."})
	b.Set(dnscheck.Record{Type: "CNAME", Name: want.Name, Value: "other.dkim.amazonses.com"})
	res := c.Check(context.Background(), []dnscheck.Record{want})
	if r := res.Servers[0].Records[0]; !r.Seen {
		t.Errorf("A: CNAME unseen (%q)", r.Reason)
	}
	if r := res.Servers[1].Records[0]; r.Seen || r.Reason != "value differs" {
		t.Errorf("B: seen=%v reason=%q, want \"value differs\"", r.Seen, r.Reason)
	}

	// A TXT record reached through a CNAME (delegated DKIM) counts.
	txt := dnscheck.Record{Type: "TXT", Name: want.Name, Value: "v=DKIM1; p=xyz"}
	b.Set(dnscheck.Record{Type: "TXT", Name: "other.dkim.amazonses.com", Value: txt.Value})
	res = c.Check(context.Background(), []dnscheck.Record{txt})
	if r := res.Servers[1].Records[0]; !r.Seen {
		t.Errorf("B: TXT behind CNAME unseen (%q)", r.Reason)
	}
}

func TestTruncatedUDPFallsBackToTCP(t *testing.T) {
	a, b, c := startPair(t)
	a.SetMaxUDPSize(512)
	b.SetMaxUDPSize(512)
	name := "big.example.com"
	var recs []dnscheck.Record
	for _, ch := range "abcd" {
		recs = append(recs, dnscheck.Record{Type: "TXT", Name: name, Value: strings.Repeat(string(ch), 300)})
	}
	a.Set(recs...)
	b.Set(recs...)
	last := recs[len(recs)-1]

	// Small answers stay on UDP.
	small := dnscheck.Record{Type: "TXT", Name: "small.example.com", Value: "v=spf1 -all"}
	a.Set(small)
	if res := c.Check(context.Background(), []dnscheck.Record{small}); !res.Servers[0].Records[0].Seen {
		t.Fatalf("small record unseen: %+v", res.Servers[0].Records[0])
	}
	if _, tcp := a.Queries(); tcp != 0 {
		t.Fatalf("%d TCP queries for an answer that fits in UDP", tcp)
	}

	// Over UDP the answer is truncated and lacks the last record.
	q := new(dns.Msg)
	q.SetQuestion(name+".", dns.TypeTXT)
	q.SetEdns0(4096, false)
	in, _, err := new(dns.Client).Exchange(q, a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if !in.Truncated || len(in.Answer) >= len(recs) {
		t.Fatalf("UDP answer not truncated: TC=%v, %d answers", in.Truncated, len(in.Answer))
	}

	res := c.Check(context.Background(), []dnscheck.Record{last})
	if !res.SeenByAll(nil) {
		t.Fatalf("record beyond the UDP limit unseen: %+v", res)
	}
	for _, s := range []*dnstest.Server{a, b} {
		if _, tcp := s.Queries(); tcp == 0 {
			t.Errorf("%s: no TCP query after a truncated UDP answer", s.Addr())
		}
	}
}

// Receivers that get a truncated answer ask again over TCP and read every
// record. The part that fitted in UDP may lack the one that makes a record
// not count (a second SPF record, an old DKIM key beside the new one), so a
// resolver whose TCP retry fails has not answered, whatever that part holds.
func TestATruncatedAnswerThatTCPCannotCompleteIsNoAnswer(t *testing.T) {
	s := dnstest.Start(t)
	s.SetMaxUDPSize(512)
	s.DropTCP(true)
	recs := domainRecords()
	dkim, mx, spf := recs[0], recs[1], recs[2]
	s.Set(recs...)
	s.Add(
		dnscheck.Record{Type: "TXT", Name: dkim.Name, Value: "v=DKIM1; k=rsa; p=" + strings.Repeat("Q", len(dkimKey))},
		dnscheck.Record{Type: "TXT", Name: spf.Name, Value: "v=spf1 include:_spf.google.com " + strings.Repeat("a", 450) + " -all"},
	)
	c := dnscheck.New([]string{s.Addr()}, 2*time.Second)

	res := c.Check(context.Background(), []dnscheck.Record{dkim, spf, mx})
	got := res.Servers[0].Records
	for _, r := range got[:2] {
		if r.Seen || !strings.HasPrefix(r.Reason, "truncated, TCP retry failed: ") {
			t.Errorf("%s %s: seen=%v reason=%q, want unseen, truncated with the TCP retry failed", r.Record.Type, r.Record.Name, r.Seen, r.Reason)
		}
	}
	if !got[2].Seen {
		t.Errorf("MX, whose answer fits in UDP, unseen: %q", got[2].Reason)
	}
	if _, tcp := s.Queries(); tcp == 0 {
		t.Error("no TCP retry after a truncated answer")
	}

	// Once TCP answers, the whole answer shows why neither counts.
	s.DropTCP(false)
	res = c.Check(context.Background(), []dnscheck.Record{dkim, spf})
	why := reasons(res.Servers[0])
	if got := why["TXT "+dkim.Name]; got != "more than one TXT record at the DKIM key's name" {
		t.Errorf("DKIM over TCP: reason %q", got)
	}
	if got := why["TXT "+spf.Name]; got != "more than one SPF record" {
		t.Errorf("SPF over TCP: reason %q", got)
	}
}

// Servers that do not implement EDNS answer a query carrying OPT with
// FORMERR (some with NOTIMP) and no OPT; asked again without it, they answer
// (RFC 6891 7), over TCP when the answer outgrows 512 bytes.
func TestAResolverWithoutEDNSIsAskedAgainWithoutIt(t *testing.T) {
	big := dnscheck.Record{Type: "TXT", Name: "big.example.com", Value: strings.Repeat("a", 600)}
	recs := append(domainRecords(), big)
	for _, rcode := range []int{dns.RcodeFormatError, dns.RcodeNotImplemented} {
		t.Run(dns.RcodeToString[rcode], func(t *testing.T) {
			s := dnstest.Start(t)
			s.Set(recs...)
			s.RejectEDNS(rcode)
			res := dnscheck.New([]string{s.Addr()}, 2*time.Second).Check(context.Background(), recs)
			for _, r := range res.Servers[0].Records {
				if !r.Seen {
					t.Errorf("%s %s unseen: %q", r.Record.Type, r.Record.Name, r.Reason)
				}
			}
			if _, tcp := s.Queries(); tcp == 0 {
				t.Error("no TCP query for an answer over 512 bytes")
			}
		})
	}

	// A server that speaks EDNS (its FORMERR carries OPT) means what it says.
	s := dnstest.Start(t)
	s.Set(recs...)
	s.FailWith(dns.RcodeFormatError)
	res := dnscheck.New([]string{s.Addr()}, 2*time.Second).Check(context.Background(), recs[:1])
	if r := res.Servers[0].Records[0]; r.Seen || r.Reason != "FORMERR" {
		t.Errorf("seen=%v reason=%q, want unseen FORMERR", r.Seen, r.Reason)
	}
	if udp, tcp := s.Queries(); udp+tcp != 1 {
		t.Errorf("%d queries for one FORMERR from a server that speaks EDNS, want 1", udp+tcp)
	}
}

func TestSlowResolverTimesOut(t *testing.T) {
	a, b := dnstest.Start(t), dnstest.Start(t)
	recs := domainRecords()
	a.Set(recs...)
	b.Set(recs...)
	b.SetDelay(time.Minute) // released by Close at cleanup
	c := dnscheck.New([]string{a.Addr(), b.Addr()}, 300*time.Millisecond)

	res := c.Check(context.Background(), recs)
	if !res.Servers[0].SeenAll(nil) {
		t.Errorf("fast resolver: %+v", res.Servers[0].Records)
	}
	for _, r := range res.Servers[1].Records {
		if r.Seen || r.Reason != "timeout" {
			t.Errorf("slow resolver: %s %s seen=%v reason=%q, want unseen \"timeout\"", r.Record.Type, r.Record.Name, r.Seen, r.Reason)
		}
	}
	if res.SeenByAll(nil) {
		t.Error("SeenByAll true with a timed-out resolver")
	}
}

func TestQueriesRunInParallel(t *testing.T) {
	a, b, c := startPair(t)
	recs := domainRecords()
	for _, s := range []*dnstest.Server{a, b} {
		s.Set(recs...)
		s.SetDelay(500 * time.Millisecond)
	}
	res := c.Check(context.Background(), recs)
	if !res.SeenByAll(nil) {
		t.Fatalf("delayed answers unseen: %+v", res)
	}
	// Each resolver must have been asked about several records at once.
	for _, s := range []*dnstest.Server{a, b} {
		if p := s.PeakConcurrency(); p < 2 {
			t.Errorf("%s answered at most %d query at a time; records are not checked in parallel", s.Addr(), p)
		}
	}
}

func TestServfail(t *testing.T) {
	a, b, c := startPair(t)
	recs := domainRecords()
	a.Set(recs...)
	b.Set(recs...)
	b.FailWith(dns.RcodeServerFailure)
	res := c.Check(context.Background(), recs[:1])
	if r := res.Servers[1].Records[0]; r.Seen || r.Reason != "SERVFAIL" {
		t.Errorf("seen=%v reason=%q, want unseen SERVFAIL", r.Seen, r.Reason)
	}
	b.FailWith(dns.RcodeSuccess)
	if res := c.Check(context.Background(), recs[:1]); !res.SeenByAll(nil) {
		t.Errorf("after recovery: %+v", res)
	}
}

func TestCanceledContext(t *testing.T) {
	a := dnstest.Start(t)
	a.Set(domainRecords()...)
	a.SetDelay(time.Minute)
	c := dnscheck.New([]string{a.Addr()}, time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan dnscheck.Result)
	go func() { done <- c.Check(ctx, domainRecords()) }()
	// Cancel once every query is in flight, so cancellation must interrupt reads.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if udp, _ := a.Queries(); udp == len(domainRecords()) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("queries never reached the server")
		}
	}
	cancel()
	select {
	case res := <-done:
		for _, r := range res.Servers[0].Records {
			if r.Seen || r.Reason != "canceled" {
				t.Errorf("seen=%v reason=%q, want \"canceled\"", r.Seen, r.Reason)
			}
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Check ignored context cancellation")
	}
}

func TestInvalidRecords(t *testing.T) {
	a := dnstest.Start(t)
	c := dnscheck.New([]string{a.Addr()}, time.Second)
	res := c.Check(context.Background(), []dnscheck.Record{
		{Type: "SRV", Name: "example.com", Value: "x"},
		{Type: "TXT", Name: "", Value: "x"},
		{Type: "TXT", Name: "bad name.example.com", Value: "x"},
	})
	want := []string{"unsupported type", "invalid name", "invalid name"}
	for i, r := range res.Servers[0].Records {
		if r.Seen || r.Reason != want[i] {
			t.Errorf("record %d: seen=%v reason=%q, want %q", i, r.Seen, r.Reason, want[i])
		}
	}
	if udp, tcp := a.Queries(); udp+tcp != 0 {
		t.Errorf("invalid records were queried (%d queries)", udp+tcp)
	}
}

func TestParseResolvers(t *testing.T) {
	ok := []struct {
		in   string
		want []string
	}{
		{"1.1.1.1:53,8.8.8.8:53", []string{"1.1.1.1:53", "8.8.8.8:53"}},
		{" 1.1.1.1:53 , 127.0.0.1:5300 ", []string{"1.1.1.1:53", "127.0.0.1:5300"}},
		{"1.1.1.1", []string{"1.1.1.1:53"}},
		{"[::1]:53", []string{"[::1]:53"}},
		{"[2606:4700:4700::1111]:5300", []string{"[2606:4700:4700::1111]:5300"}},
		{"::1", []string{"[::1]:53"}},
		{"[::1]", []string{"[::1]:53"}},
		{"coredns:53,", []string{"coredns:53"}},
	}
	for _, tc := range ok {
		got, err := dnscheck.ParseResolvers(tc.in)
		if err != nil {
			t.Errorf("ParseResolvers(%q): %v", tc.in, err)
			continue
		}
		if strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("ParseResolvers(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for _, in := range []string{
		"", " ", ",", "1.1.1.1:", "1.1.1.1:0", "1.1.1.1:65536", "1.1.1.1:dns",
		"resolver", "bad host:53", ":53", "1.1.1.1:53,1.1.1.1:53", "1.1.1.1:53,1.1.1.1",
	} {
		if got, err := dnscheck.ParseResolvers(in); err == nil {
			t.Errorf("ParseResolvers(%q) = %q, want error", in, got)
		}
	}
}

// A record left out by match (DMARC, say) in the middle of the list does not
// stop the others from counting: a domain whose MX is missing is not
// verified because an optional record came before it.
func TestSeenAllReadsPastRecordsLeftOut(t *testing.T) {
	s := dnscheck.ServerResult{Records: []dnscheck.RecordResult{
		{Record: dnscheck.Record{Type: "TXT", Name: "sel._domainkey.example.com"}, Seen: true},
		{Record: dnscheck.Record{Type: "TXT", Name: "_dmarc.example.com"}, Reason: "NXDOMAIN"},
		{Record: dnscheck.Record{Type: "MX", Name: "send.example.com"}, Reason: "NXDOMAIN"},
	}}
	if s.SeenAll(required) {
		t.Error("SeenAll(required) true although the MX record was not seen")
	}
	if (dnscheck.Result{Servers: []dnscheck.ServerResult{s}}).SeenByAll(required) {
		t.Error("SeenByAll(required) true although the MX record was not seen")
	}
	s.Records[2].Seen = true
	if !s.SeenAll(required) {
		t.Error("SeenAll(required) false with every required record seen")
	}
}

// A Checker made with no timeout (0, as the docs allow) uses
// DefaultTimeout rather than timing every query out at once.
func TestZeroTimeoutMeansDefault(t *testing.T) {
	a := dnstest.Start(t)
	recs := domainRecords()
	a.Set(recs...)
	for _, timeout := range []time.Duration{0, -time.Second} {
		c := dnscheck.New([]string{a.Addr()}, timeout)
		if res := c.Check(context.Background(), recs); !res.SeenByAll(nil) {
			t.Errorf("timeout %v: %+v", timeout, res.Servers[0].Records)
		}
	}
}

// A CNAME published where the MX record belongs, pointing at the MX host
// (a common mistake), is not an MX record: bounces would not reach it.
func TestCNAMEToTheMXHostIsNoMX(t *testing.T) {
	a := dnstest.Start(t)
	mx := domainRecords()[1]
	// The host exists, with an address and no MX of its own.
	a.Set(dnscheck.Record{Type: "CNAME", Name: mx.Name, Value: mx.Value}, dnscheck.Record{Type: "A", Name: mx.Value, Value: "192.0.2.25"})
	c := dnscheck.New([]string{a.Addr()}, 2*time.Second)
	if r := c.Check(context.Background(), []dnscheck.Record{mx}).Servers[0].Records[0]; r.Seen || r.Reason != "no MX record at "+mx.Value+", the CNAME's target" {
		t.Errorf("MX published as a CNAME: seen=%v reason=%q, want unseen, no MX record at the CNAME's target", r.Seen, r.Reason)
	}
}

// An empty TXT record beside the SPF record, or an empty value asked for,
// is judged like any other (no crash of the checker).
func TestEmptyTXTRecords(t *testing.T) {
	a := dnstest.Start(t)
	spf := domainRecords()[2]
	a.Set(spf, dnscheck.Record{Type: "TXT", Name: spf.Name, Value: ""})
	c := dnscheck.New([]string{a.Addr()}, 2*time.Second)
	if r := c.Check(context.Background(), []dnscheck.Record{spf}).Servers[0].Records[0]; !r.Seen {
		t.Errorf("SPF beside an empty TXT record unseen (%q)", r.Reason)
	}
	empty := dnscheck.Record{Type: "TXT", Name: spf.Name, Value: ""}
	if r := c.Check(context.Background(), []dnscheck.Record{empty}).Servers[0].Records[0]; !r.Seen {
		t.Errorf("an empty TXT value asked for and published: unseen (%q)", r.Reason)
	}
}

// A DKIM key record with an empty tag between others (";;") is read to its
// end, as receivers read it: the key after it counts. Text that is no tag
// makes receivers discard the record.
func TestDKIMWithAnEmptyTagIsRead(t *testing.T) {
	a := dnstest.Start(t)
	dkim := domainRecords()[0]
	c := dnscheck.New([]string{a.Addr()}, 2*time.Second)
	for _, v := range []string{"v=DKIM1;; k=rsa; p=" + dkimKey, "v=DKIM1; k=rsa; ; p=" + dkimKey} {
		a.Clear()
		a.Set(dnscheck.Record{Type: "TXT", Name: dkim.Name, Value: v})
		if r := c.Check(context.Background(), []dnscheck.Record{dkim}).Servers[0].Records[0]; !r.Seen {
			t.Errorf("%.30q…: unseen (%q)", v, r.Reason)
		}
	}
	a.Clear()
	a.Set(dnscheck.Record{Type: "TXT", Name: dkim.Name, Value: "v=DKIM1; junk; p=" + dkimKey})
	if r := c.Check(context.Background(), []dnscheck.Record{dkim}).Servers[0].Records[0]; r.Seen || r.Reason != "DKIM tag list malformed" {
		t.Errorf("a DKIM record with text that is no tag: seen=%v reason=%q", r.Seen, r.Reason)
	}
}

// A DMARC record is read as a policy: the owner's own, stricter one (with
// reports, say) is as good as the p=none Mailroom asks for; a record that
// is not a DMARC policy is not.
func TestDMARCIsReadAsAPolicy(t *testing.T) {
	a := dnstest.Start(t)
	c := dnscheck.New([]string{a.Addr()}, 2*time.Second)
	want := dnscheck.Record{Type: "TXT", Name: "_dmarc.example.com", Value: "v=DMARC1; p=none;"}
	for value, seen := range map[string]bool{
		"v=DMARC1; p=none;": true,
		"v=DMARC1;p=none":   true,
		"v=DMARC1; p=reject; rua=mailto:d@example.org": true,
		"v=DMARC1; pct=50; p=quarantine":               true,
		"v=DMARC1; p=REJECT":                           true,
		"V=DMARC1; P=none":                             true,  // tag names are case-insensitive (RFC 7489 6.4)
		"v=DMARC1; rua=mailto:d@example.org":           false, // no policy
		"v=DMARC1; p=maybe":                            false,
		"p=none; v=DMARC1":                             false, // v= must come first
		"v=dmarc1; p=none":                             false,
		"v=spf1 include:amazonses.com ~all":            false,
	} {
		a.Clear()
		a.Set(dnscheck.Record{Type: "TXT", Name: want.Name, Value: value})
		r := c.Check(context.Background(), []dnscheck.Record{want}).Servers[0].Records[0]
		if r.Seen != seen || (!seen && !strings.Contains(r.Reason, "DMARC")) {
			t.Errorf("%q: seen=%v (%q), want seen=%v", value, r.Seen, r.Reason, seen)
		}
	}
}

// Two SPF records make SPF fail, but they do not hide a verification or
// DMARC TXT value published at the same name.
func TestTwoSPFRecordsDoNotHideOtherTXT(t *testing.T) {
	a := dnstest.Start(t)
	name := "send.example.com"
	token := dnscheck.Record{Type: "TXT", Name: name, Value: "verification=abc123"}
	a.Set(token,
		dnscheck.Record{Type: "TXT", Name: name, Value: "v=spf1 include:amazonses.com ~all"},
		dnscheck.Record{Type: "TXT", Name: name, Value: "v=spf1 include:_spf.google.com ~all"})
	c := dnscheck.New([]string{a.Addr()}, 2*time.Second)
	if r := c.Check(context.Background(), []dnscheck.Record{token}).Servers[0].Records[0]; !r.Seen {
		t.Errorf("a plain TXT beside two SPF records: unseen (%q)", r.Reason)
	}
}

// A TXT value with bytes outside printable ASCII (which travel as \DDD
// escapes, from \128 to \255) is compared as published.
func TestNonASCIITXTValueIsMatched(t *testing.T) {
	a := dnstest.Start(t)
	c := dnscheck.New([]string{a.Addr()}, 2*time.Second)
	for _, v := range []string{"verification=café-ñ-ÿ", "token=\x80\xc8\xff", "tab\there"} {
		want := dnscheck.Record{Type: "TXT", Name: "v.example.com", Value: v}
		a.Clear()
		a.Set(want)
		if r := c.Check(context.Background(), []dnscheck.Record{want}).Servers[0].Records[0]; !r.Seen {
			t.Errorf("TXT %q published as asked: unseen (%q)", v, r.Reason)
		}
	}
}

// A blank entry in the middle of MAILROOM_DNS_RESOLVERS is skipped, not the
// end of the list: every resolver after it is still asked.
func TestParseResolversSkipsBlankEntriesAnywhere(t *testing.T) {
	got, err := dnscheck.ParseResolvers("1.1.1.1, ,,8.8.8.8:53")
	if err != nil || len(got) != 2 || got[1] != "8.8.8.8:53" {
		t.Errorf("ParseResolvers = %q, %v; want both resolvers", got, err)
	}
}

// Resolver host names follow the host name rules: ports 1 to 65535, labels
// of 1 to 63 letters, digits and inner hyphens, names up to 253 characters.
func TestParseResolversHostAndPortBounds(t *testing.T) {
	label63 := strings.Repeat("a", 63)
	name253 := strings.Repeat(label63+".", 3) + strings.Repeat("b", 61)
	for in, want := range map[string]string{
		"1.1.1.1:1":               "1.1.1.1:1",
		"1.1.1.1:65535":           "1.1.1.1:65535",
		"az.AZ09-x:53":            "az.az09-x:53",
		label63 + ".example:53":   label63 + ".example:53",
		name253 + ":53":           name253 + ":53",
		"resolver.internal.:5300": "resolver.internal.:5300",
	} {
		got, err := dnscheck.ParseResolvers(in)
		if err != nil || len(got) != 1 || got[0] != want {
			t.Errorf("ParseResolvers(%.40q…) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{
		"-coredns:53", "coredns-:53", "core_dns:53", "core@dns:53", "a..b:53", "core[dns:53", "core`dns:53", "core{dns:53",
		strings.Repeat("a", 64) + ".example:53", name253 + "b:53",
	} {
		if got, err := dnscheck.ParseResolvers(in); err == nil {
			t.Errorf("ParseResolvers(%.40q…) = %q, want an error", in, got)
		}
	}
}

// An SPF record that receivers cannot evaluate is a permanent error for
// every message (RFC 7208 4.6), whatever else it includes: it does not
// count, and the term at fault is named. Well-formed records of every
// mechanism and modifier count.
func TestSPFSyntaxErrorsDoNotCount(t *testing.T) {
	a := dnstest.Start(t)
	c := dnscheck.New([]string{a.Addr()}, 2*time.Second)
	spf := domainRecords()[2]
	check := func(value string) dnscheck.RecordResult {
		t.Helper()
		a.Set(dnscheck.Record{Type: "TXT", Name: spf.Name, Value: value})
		return c.Check(context.Background(), []dnscheck.Record{spf}).Servers[0].Records[0]
	}
	for _, value := range []string{
		"v=spf1 a mx ptr ip4:192.0.2.0/24 ip4:192.0.2.1 ip6:2001:db8::/32 include:amazonses.com -all",
		"v=spf1 include:amazonses.com a:mail.example.com/24//64 mx/28 mx//64 exists:%{i}._spf.%{d} ~all",
		"v=spf1 include:amazonses.com redirect=_spf.example.com",
		"v=spf1 include:amazonses.com exp=explain._spf.%{d} -all",
		"v=spf1 include:amazonses.com ptr:example.com. ?all",
		"v=spf1 include:amazonses.com unknown-mod=anything.goes%% ~all",
		"v=spf1 +include:amazonses.com ~all",
	} {
		if r := check(value); !r.Seen {
			t.Errorf("%q: unseen (%q)", value, r.Reason)
		}
	}
	for value, term := range map[string]string{
		"v=spf1 include:amazonses.com include: _spf.google.com ~all":         "include:",
		"v=spf1 include:amazonses.com _spf.google.com ~all":                  "_spf.google.com",
		"v=spf1 include:amazonses.com ip4:300.1.1.1 ~all":                    "ip4:300.1.1.1",
		"v=spf1 include:amazonses.com ip4:192.0.2.0/33 ~all":                 "ip4:192.0.2.0/33",
		"v=spf1 include:amazonses.com ip6:192.0.2.1 ~all":                    "ip6:192.0.2.1",
		"v=spf1 include:amazonses.com include:localhost ~all":                "include:localhost",
		"v=spf1 include:amazonses.com redirect=a.example redirect=b.example": "redirect=b.example",
		"v=spf1 include:amazonses.com ~-all":                                 "~-all",
		"v=spf1 include:amazonses.com all:example.com":                       "all:example.com",
		"v=spf1 include:amazonses.com\t~all":                                 "include:amazonses.com\t~all",
		"v=spf1 include:amazonses.com exists:%{x}.example.com ~all":          "exists:%{x}.example.com",
	} {
		want := fmt.Sprintf("SPF syntax error at %q: receivers fail every message (permerror)", term)
		if r := check(value); r.Seen || r.Reason != want {
			t.Errorf("%q: seen=%v reason=%q, want %q", value, r.Seen, r.Reason, want)
		}
	}
}

// The usual ways a record goes wrong in a DNS provider's form are named, so
// that its owner knows what to change: quote characters pasted with a DKIM
// key, a key cut at 255 characters, a host name typed without its final dot
// (the provider appends its zone), a host typed in full (the provider adds
// the domain again), a CNAME to a name that does not exist.
func TestCommonMistakesAreNamed(t *testing.T) {
	a := dnstest.Start(t)
	c := dnscheck.New([]string{a.Addr()}, 2*time.Second)
	dkim, mx := domainRecords()[0], domainRecords()[1]
	check := func(want dnscheck.Record, published ...dnscheck.Record) dnscheck.RecordResult {
		t.Helper()
		a.Clear()
		a.Set(published...)
		return c.Check(context.Background(), []dnscheck.Record{want}).Servers[0].Records[0]
	}
	txt := func(name, value string) dnscheck.Record {
		return dnscheck.Record{Type: "TXT", Name: name, Value: value}
	}
	for _, tc := range []struct {
		what      string
		want      dnscheck.Record
		published []dnscheck.Record
		reason    string
	}{
		{"a DKIM value in quotes", dkim, []dnscheck.Record{txt(dkim.Name, `"`+dkim.Value+`"`)},
			"the value holds quote characters: publish it without them"},
		{"a DKIM value cut at 255 characters", dkim, []dnscheck.Record{txt(dkim.Name, dkim.Value[:255])},
			fmt.Sprintf("the key is cut short (%d of its %d characters): publish the whole value", 255-len("v=DKIM1; k=rsa; p="), len(dkimKey))},
		{"another key", dkim, []dnscheck.Record{txt(dkim.Name, "v=DKIM1; k=rsa; p="+dkimKey[:100]+"QQQQ")}, "value differs"},
		{"an MX target with the zone appended", mx,
			[]dnscheck.Record{{Type: "MX", Name: mx.Name, Value: mx.Value + ".example.com", Priority: 10}},
			"the MX target has a name added after it (" + mx.Value + ".example.com): end the target with a dot"},
		{"a CNAME to nothing", dkim,
			[]dnscheck.Record{{Type: "CNAME", Name: dkim.Name, Value: "missing.example.net"}, txt("other.example.net", "x")},
			"NXDOMAIN at missing.example.net, the CNAME's target"},
		{"the domain doubled without a zone to look in", dkim,
			[]dnscheck.Record{txt(dkim.Name+".example.com", dkim.Value)}, "NXDOMAIN"},
		{"the domain doubled", withZone(dkim, "example.com"),
			[]dnscheck.Record{txt(dkim.Name+".example.com", dkim.Value)},
			"NXDOMAIN; the record is at " + dkim.Name + ".example.com: the DNS provider adds the domain to the host, so enter the host without it"},
		{"nothing anywhere", withZone(dkim, "example.com"), []dnscheck.Record{txt("example.com", "v=spf1 -all")}, "NXDOMAIN"},
	} {
		if r := check(tc.want, tc.published...); r.Seen || r.Reason != tc.reason {
			t.Errorf("%s: seen=%v reason=%q, want %q", tc.what, r.Seen, r.Reason, tc.reason)
		}
	}
}

func withZone(r dnscheck.Record, zone string) dnscheck.Record {
	r.Zone = zone
	return r
}

// A subdomain without a DMARC record of its own is covered by its
// organisational domain's (RFC 7489 6.6.3), as receivers read it; its own
// record, when it has one, is the one that counts.
func TestDMARCOfTheOrganisationalDomainCovers(t *testing.T) {
	a := dnstest.Start(t)
	c := dnscheck.New([]string{a.Addr()}, 2*time.Second)
	want := dnscheck.Record{Type: "TXT", Name: "_dmarc.mail.example.com", Value: "v=DMARC1; p=none;", Inherit: "_dmarc.example.com"}
	org := dnscheck.Record{Type: "TXT", Name: "_dmarc.example.com", Value: "v=DMARC1; p=reject; sp=reject"}
	covered := "none at this name; the policy at _dmarc.example.com applies to it"
	for _, tc := range []struct {
		what      string
		published []dnscheck.Record
		seen      bool
		reason    string
	}{
		{"the organisational domain's only", []dnscheck.Record{org}, true, covered},
		{"its own beside the organisational domain's",
			[]dnscheck.Record{org, {Type: "TXT", Name: want.Name, Value: "v=DMARC1; p=quarantine"}}, true, ""},
		{"another TXT record at its name", []dnscheck.Record{org, {Type: "TXT", Name: want.Name, Value: "hello"}}, true, covered},
		{"its own, not a policy", []dnscheck.Record{org, {Type: "TXT", Name: want.Name, Value: "v=DMARC1; p=maybe"}},
			false, "not a DMARC policy (v=DMARC1; p=none, quarantine or reject)"},
		{"none anywhere", []dnscheck.Record{{Type: "TXT", Name: "example.com", Value: "v=spf1 -all"}}, false, "NXDOMAIN"},
		{"two at the organisational domain",
			[]dnscheck.Record{org, {Type: "TXT", Name: org.Name, Value: "v=DMARC1; p=none"}}, false, "NXDOMAIN"},
	} {
		a.Clear()
		a.Set(tc.published...)
		r := c.Check(context.Background(), []dnscheck.Record{want}).Servers[0].Records[0]
		if r.Seen != tc.seen || r.Reason != tc.reason {
			t.Errorf("%s: seen=%v reason=%q, want seen=%v %q", tc.what, r.Seen, r.Reason, tc.seen, tc.reason)
		}
	}
}
