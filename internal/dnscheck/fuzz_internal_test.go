package dnscheck

import (
	"bytes"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/emersion/go-msgauth/dkim"
	"github.com/miekg/dns"
)

// fuzzDKIM is one signing key and a message signed with it, made once:
// key generation is too slow for every input.
var fuzzDKIM = sync.OnceValues(func() (string, []byte) {
	priv, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		panic(err)
	}
	der, err := x509.MarshalPKIXPublicKey(&priv.PublicKey)
	if err != nil {
		panic(err)
	}
	var signed bytes.Buffer
	msg := "From: a@example.com\r\nTo: b@example.org\r\nSubject: hi\r\n\r\nHello.\r\n"
	if err := dkim.Sign(&signed, strings.NewReader(msg), &dkim.SignOptions{
		Domain: "example.com", Selector: "mrabc123", Signer: priv, Hash: crypto.SHA256,
		HeaderCanonicalization: dkim.CanonicalizationRelaxed, BodyCanonicalization: dkim.CanonicalizationRelaxed,
	}); err != nil {
		panic(err)
	}
	return base64.StdEncoding.EncodeToString(der), signed.Bytes()
})

// FuzzDKIMRecord checks that a DKIM key record the domain owner publishes
// counts only when go-msgauth, which Mailroom signs with, verifies
// Mailroom's signatures against it: a domain is not told its DKIM is set
// up when receivers would fail every message.
// The record is pre + the key (with fold inserted at byte at) + post.
func FuzzDKIMRecord(f *testing.F) {
	for _, s := range []struct {
		pre, post, fold string
		at              uint16
	}{
		{"v=DKIM1; k=rsa; p=", "", "", 0},
		{"p=", "", "", 0},
		{"k=rsa; p=", "; v=DKIM1", "", 0},
		{"v=DKIM1; k=rsa; t=y; p=", "", "", 0},
		{"t=y:s; p=", "", "", 0},
		{"v=DKIM1; h=sha1:sha256; p=", "", "", 0},
		{"v=DKIM1; h= sha1 : sha256 ; p=", "", "", 0},
		{"v=DKIM1; s=other:email; p=", "", "", 0},
		{"v=DKIM1; s=*; p=", "", "", 0},
		{" v = DKIM1 ; k = rsa ; p = ", " ; ", "", 0},
		{"v=DKIM1; k=rsa; p=", "", " ", 100},
		{"v=DKIM1; k=rsa; p=", "", "\r\n\t", 64},
		{"v=DKIM1; n=rotated in May; p=", "", "", 0},
		{"v=DKIM1; K=ed25519; p=", "", "", 0},
		{"v=DKIM1; k=rsa; P=", "", "", 0},
		{"v=dkim1; k=rsa; p=", "", "", 0},
		{"v=DKIM1; k=RSA; p=", "", "", 0},
		{"v=DKIM1; k=rsa; h=SHA256; p=", "", "", 0},
		{"v=DKIM1; k=rsa; s=EMAIL; p=", "", "", 0},
		{"v=DKIM1; rsa; p=", "", "", 0},
		{"v=DKIM1; p=", "; p=x", "", 0},
		{"v=DKIM1; p=", "\t\r\n", "\t", 1},
		{"v=DKIM1;; p=", ";;", "", 0},
		{"v=DKIM1; g=*; p=", "", "", 0},
		{"v=DKIM1; p=", "==", "", 0},
		{"v=DKIM1; k=rsa; p=", "; x", "", 0},
		{"=; p=", "", "", 0},
	} {
		f.Add(s.pre, s.post, s.fold, s.at)
	}
	f.Fuzz(func(t *testing.T, pre, post, fold string, at uint16) {
		key, signed := fuzzDKIM()
		published := key
		if int(at) < len(key) {
			published = key[:at] + fold + key[at:]
		}
		record := pre + published + post
		seen, reason := txtMatches("v=DKIM1; k=rsa; p="+key, record)

		// RFC 6376 folds a key with FWS, tabs and line breaks too;
		// go-msgauth drops only spaces from p=, so it is asked with FWS
		// as spaces, which receivers that follow the RFC read the same.
		fws := strings.NewReplacer("\t", " ", "\r", " ", "\n", " ").Replace(record)
		vs, err := dkim.VerifyWithOptions(bytes.NewReader(signed), &dkim.VerifyOptions{
			LookupTXT: func(string) ([]string, error) { return []string{fws}, nil },
		})
		if err != nil || len(vs) != 1 {
			t.Fatalf("verifying: %v (%d signatures)", err, len(vs))
		}
		// Only one way: go-msgauth is laxer than RFC 6376 in places (an
		// empty k= reads as rsa), and a record dnscheck refuses the owner
		// can fix; one it counts must work.
		if accepted := vs[0].Err == nil; seen && !accepted {
			t.Fatalf("record %q: dnscheck seen=%v (%s), go-msgauth verifies=%v (%v)", record, seen, reason, accepted, vs[0].Err)
		}
	})
}

// FuzzJoinTXT checks that a TXT record's text is read as published: any
// bytes, in character-strings of any length, come back joined, whatever
// escaping miekg/dns applies when it unpacks them.
func FuzzJoinTXT(f *testing.F) {
	f.Add([]byte("v=spf1 include:amazonses.com ~all"), uint8(0))
	f.Add([]byte(`v=DKIM1; n="quoted\" \\ back"; p=abc`), uint8(7))
	f.Add([]byte("\\123 \\\\999 \\"), uint8(3))
	f.Add([]byte("caf\xc3\xa9 \x00\x01\x7f\xff ;\t\r\n"), uint8(2))
	f.Add(bytes.Repeat([]byte("MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8A"), 20), uint8(0))
	f.Add([]byte{}, uint8(1))
	f.Fuzz(func(t *testing.T, text []byte, chunk uint8) {
		size := 255
		if chunk > 0 {
			size = int(chunk)
		}
		// Presentation form with every byte as \DDD, which Pack reads back.
		var parts []string
		for rest := text; len(rest) > 0 || len(parts) == 0; {
			n := min(size, len(rest))
			var b strings.Builder
			for _, c := range rest[:n] {
				fmt.Fprintf(&b, "\\%03d", c)
			}
			parts = append(parts, b.String())
			rest = rest[n:]
			if len(rest) == 0 {
				break
			}
		}
		m := new(dns.Msg)
		m.SetQuestion("x.example.", dns.TypeTXT)
		m.Answer = []dns.RR{&dns.TXT{Hdr: dns.RR_Header{Name: "x.example.", Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 60}, Txt: parts}}
		wire, err := m.Pack()
		if err != nil {
			t.Fatalf("packing %q: %v", text, err)
		}
		var got dns.Msg
		if err := got.Unpack(wire); err != nil {
			t.Fatalf("unpacking: %v", err)
		}
		txt, ok := got.Answer[0].(*dns.TXT)
		if !ok {
			t.Fatalf("answer %v is no TXT", got.Answer[0])
		}
		if joined := joinTXT(txt.Txt); joined != string(text) {
			t.Fatalf("joinTXT(%q) = %q, want %q", txt.Txt, joined, text)
		}
	})
}

// FuzzJudge checks judge on any answer a resolver may send: it never
// panics, and it never says a record is seen when no record of its type
// answers for its name.
func FuzzJudge(f *testing.F) {
	key := strings.Repeat("MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEA", 9)[:392]
	wants := []Record{
		{Type: "TXT", Name: "mrabc123._domainkey.example.com", Value: "v=DKIM1; k=rsa; p=" + key},
		{Type: "MX", Name: "send.example.com", Value: "feedback-smtp.us-east-1.amazonses.com", Priority: 10},
		{Type: "TXT", Name: "send.example.com", Value: "v=spf1 include:amazonses.com ~all"},
		{Type: "TXT", Name: "_dmarc.example.com", Value: "v=DMARC1; p=none;"},
		{Type: "CNAME", Name: "track.example.com", Value: "r.us-east-1.awstrack.me"},
	}
	for i, w := range wants {
		e, _ := normalise(w)
		m := new(dns.Msg)
		m.SetQuestion(e.name, e.qtype)
		m.Response = true
		rr, err := dns.NewRR(fmt.Sprintf("%s 60 IN %s %s", e.name, e.typ, map[string]string{
			"TXT": `"` + strings.ReplaceAll(w.Value, ";", `\;`) + `"`, "MX": "10 " + e.value, "CNAME": e.value,
		}[e.typ]))
		if err != nil {
			f.Fatal(err)
		}
		m.Answer = append(m.Answer, rr)
		if i == 2 {
			cname, _ := dns.NewRR(e.name + " 60 IN CNAME spf.example.net.")
			other, _ := dns.NewRR(`spf.example.net. 60 IN TXT "v=spf1 -all"`)
			m.Answer = append(m.Answer, cname, other)
		}
		wire, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(wire, uint8(i))
	}
	f.Fuzz(func(t *testing.T, wire []byte, which uint8) {
		var resp dns.Msg
		if resp.Unpack(wire) != nil {
			return
		}
		want, bad := normalise(wants[int(which)%len(wants)])
		if bad != "" {
			t.Fatal(bad)
		}
		ok, reason := judge(want, &resp)
		if ok && reason != "" {
			t.Fatalf("seen, with reason %q", reason)
		}
		if !ok && reason == "" {
			t.Fatal("not seen, without a reason")
		}
		if ok {
			answered := false
			for _, rr := range resp.Answer {
				answered = answered || rr.Header().Rrtype == want.qtype
			}
			if !answered || resp.Rcode != dns.RcodeSuccess {
				t.Fatalf("seen in %v", &resp)
			}
		}
	})
}
