package dnstest_test

import (
	"testing"

	"github.com/miekg/dns"

	"github.com/mailroom/mailroom/internal/dnscheck"
	"github.com/mailroom/mailroom/internal/dnscheck/dnstest"
)

func query(t *testing.T, net, addr, name string, qtype uint16) *dns.Msg {
	t.Helper()
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), qtype)
	in, _, err := (&dns.Client{Net: net}).Exchange(q, addr)
	if err != nil {
		t.Fatalf("%s query %s: %v", net, name, err)
	}
	return in
}

func TestAnswers(t *testing.T) {
	s := dnstest.Start(t)
	s.Set(
		dnscheck.Record{Type: "txt", Name: "A.Example.com.", Value: "one"},
		dnscheck.Record{Type: "TXT", Name: "a.example.com", Value: "two"},
	)
	for _, net := range []string{"udp", "tcp"} {
		in := query(t, net, s.Addr(), "a.example.com", dns.TypeTXT)
		if in.Rcode != dns.RcodeSuccess || len(in.Answer) != 2 {
			t.Fatalf("%s TXT: rcode %d, %d answers, want NOERROR with 2", net, in.Rcode, len(in.Answer))
		}
	}
	if in := query(t, "udp", s.Addr(), "a.example.com", dns.TypeMX); in.Rcode != dns.RcodeSuccess || len(in.Answer) != 0 {
		t.Errorf("known name, other type: rcode %d, %d answers; want NOERROR, empty", in.Rcode, len(in.Answer))
	}
	if in := query(t, "udp", s.Addr(), "example.com", dns.TypeTXT); in.Rcode != dns.RcodeSuccess {
		t.Errorf("empty non-terminal: rcode %d, want NOERROR", in.Rcode)
	}
	if in := query(t, "udp", s.Addr(), "b.example.com", dns.TypeTXT); in.Rcode != dns.RcodeNameError {
		t.Errorf("unknown name: rcode %d, want NXDOMAIN", in.Rcode)
	}

	// Set replaces the pair; Add appends; Remove and Clear delete.
	s.Set(dnscheck.Record{Type: "TXT", Name: "a.example.com", Value: "three"})
	if n := len(query(t, "udp", s.Addr(), "a.example.com", dns.TypeTXT).Answer); n != 1 {
		t.Errorf("after Set: %d answers, want 1", n)
	}
	s.Add(dnscheck.Record{Type: "TXT", Name: "a.example.com", Value: "four"})
	if n := len(query(t, "udp", s.Addr(), "a.example.com", dns.TypeTXT).Answer); n != 2 {
		t.Errorf("after Add: %d answers, want 2", n)
	}
	s.Add(dnscheck.Record{Type: "MX", Name: "a.example.com", Value: "mx.example.net", Priority: 5})
	s.Remove("a.example.com.", "txt")
	if in := query(t, "udp", s.Addr(), "a.example.com", dns.TypeTXT); in.Rcode != dns.RcodeSuccess || len(in.Answer) != 0 {
		t.Errorf("after Remove: rcode %d, %d answers; want NOERROR, empty", in.Rcode, len(in.Answer))
	}
	mx, ok := query(t, "udp", s.Addr(), "a.example.com", dns.TypeMX).Answer[0].(*dns.MX)
	if !ok || mx.Mx != "mx.example.net." || mx.Preference != 5 {
		t.Errorf("MX answer = %v", mx)
	}
	s.Clear()
	if in := query(t, "udp", s.Addr(), "a.example.com", dns.TypeMX); in.Rcode != dns.RcodeNameError {
		t.Errorf("after Clear: rcode %d, want NXDOMAIN", in.Rcode)
	}
}

func TestStandalone(t *testing.T) {
	s, err := dnstest.StartStandalone("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Set(dnscheck.Record{Type: "A", Name: "host.test", Value: "192.0.2.1"})
	in := query(t, "tcp", s.Addr(), "host.test", dns.TypeA)
	if a, ok := in.Answer[0].(*dns.A); !ok || a.A.String() != "192.0.2.1" {
		t.Errorf("A answer = %v", in.Answer)
	}
	s.Close()
	s.Close() // idempotent
	if _, _, err := (&dns.Client{Net: "tcp"}).Exchange(new(dns.Msg).SetQuestion("host.test.", dns.TypeA), s.Addr()); err == nil {
		t.Error("server still answers after Close")
	}
}

// RejectEDNS and DropTCP stand in for an old server without EDNS and for a
// resolver whose TCP port is blocked.
func TestOldServersAndBlockedTCP(t *testing.T) {
	s := dnstest.Start(t)
	s.Set(dnscheck.Record{Type: "TXT", Name: "a.example.com", Value: "one"})
	s.RejectEDNS(dns.RcodeFormatError)
	q := new(dns.Msg).SetQuestion("a.example.com.", dns.TypeTXT)
	q.SetEdns0(1232, false)
	in, _, err := new(dns.Client).Exchange(q, s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if in.Rcode != dns.RcodeFormatError || in.IsEdns0() != nil || len(in.Answer) != 0 {
		t.Errorf("query with OPT: rcode %d, OPT %v, %d answers; want FORMERR, no OPT, empty", in.Rcode, in.IsEdns0(), len(in.Answer))
	}
	if in := query(t, "udp", s.Addr(), "a.example.com", dns.TypeTXT); in.Rcode != dns.RcodeSuccess || len(in.Answer) != 1 {
		t.Errorf("query without OPT: rcode %d, %d answers; want NOERROR with 1", in.Rcode, len(in.Answer))
	}

	s.DropTCP(true)
	if _, _, err := (&dns.Client{Net: "tcp"}).Exchange(new(dns.Msg).SetQuestion("a.example.com.", dns.TypeTXT), s.Addr()); err == nil {
		t.Error("TCP query answered with TCP dropped")
	}
	query(t, "udp", s.Addr(), "a.example.com", dns.TypeTXT)
	s.DropTCP(false)
	query(t, "tcp", s.Addr(), "a.example.com", dns.TypeTXT)
}
