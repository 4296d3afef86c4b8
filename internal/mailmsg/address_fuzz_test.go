package mailmsg

import (
	"errors"
	"net/mail"
	"strings"
	"testing"
	"time"
)

// FuzzParseAddress checks ParseAddress's contract on any string a client
// may send as from, to, cc, bcc or reply_to: an address it accepts keeps
// its own rules, renders into a header that a reader parses back to the
// same name and address, and reads back the same from its own rendering.
func FuzzParseAddress(f *testing.F) {
	for _, s := range []string{
		"ann@example.org",
		"<ann@example.org>",
		"Ann Example <ann@example.org>",
		`"Doe, John" <john.doe@example.com>`,
		`"\"quoted\" \\ name" <q@example.com>`,
		"=?utf-8?q?J=C3=B6rg?= <joerg@example.de>",
		"=?iso-8859-1?q?J=F6rg?= <joerg@example.de>",
		"=?koi8-r?b?7sXU?= <x@example.ru>",
		"Jörg Müller <joerg@bücher.de>",
		"山田 太郎 <taro@例え.テスト>",
		"ann@xn--bcher-kva.de",
		"ann@XN--BCHER-KVA.de",
		"ann@xn--a.de",
		"ann@ß.de",
		"ann@ﬀ.example",
		"ann@a\u0301.example",
		"first.last+tag@sub.example.co.uk",
		"a@b.c0m",
		"a@b.123",
		"a@-b.com",
		"a@b..com",
		".a@b.com",
		"a..b@b.com",
		"a@b.com, c@d.com",
		"Ann <a@b.com>, Bob <c@d.com>",
		"Ann <<a@b.com>>",
		"Ann <a@b.com> <c@d.com>",
		"a@b.com>",
		"(comment) a@b.com",
		"Ann (comment) <a@b.com>",
		`"a b"@example.com`,
		"a@[127.0.0.1]",
		"Ann\t<a@b.com>",
		"  Ann   Example  <a@b.com>  ",
		"\"  padded  \" <a@b.com>",
		"=?utf-8?q?=0D=0ABcc:_x@evil.com?= <a@b.com>",
		"=?utf-8?b?AA==?= <a@b.com>",
		"\"=?utf-8?q?x?=\" <a@b.com>",
		"Ann\u2028Lee <a@b.com>",
		"\x00 <a@b.com>",
		"\xff <a@b.com>",
		strings.Repeat("a", 64) + "@" + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 57) + ".com",
		"a@" + strings.Repeat("ü", 30) + ".de",
		"\"" + strings.Repeat("n", 1000) + "\" <a@b.com>",
		strings.Repeat("é", 400) + " <a@b.com>",
	} {
		f.Add(s)
	}
	date := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		a, err := ParseAddress(s)
		if err != nil {
			var ae *AddressError
			if !errors.As(err, &ae) || !errors.Is(err, ErrInvalidAddress) {
				t.Fatalf("ParseAddress(%q) error %v is not an *AddressError", s, err)
			}
			if _, err := ParseNewAddress(s); err == nil {
				t.Fatalf("ParseNewAddress(%q) accepted what ParseAddress refused", s)
			}
			return
		}
		if err := checkEmail(a.Email); err != nil {
			t.Fatalf("ParseAddress(%q) gave address %q that its own rules refuse: %v", s, a.Email, err)
		}
		if err := checkName(a.Name); err != nil {
			t.Fatalf("ParseAddress(%q) gave name %q that its own rules refuse: %v", s, a.Name, err)
		}
		if a.Name != strings.TrimSpace(a.Name) {
			t.Fatalf("ParseAddress(%q) gave untrimmed name %q", s, a.Name)
		}
		wire := WireAddress(a.Email)
		if WireAddress(wire) != wire || !isASCII(wire) {
			t.Fatalf("WireAddress(%q) = %q is not a fixed point in ASCII", a.Email, wire)
		}
		if err := checkEmail(wire); err != nil {
			t.Fatalf("address %q travels as %q, which ParseAddress's rules refuse: %v", a.Email, wire, err)
		}
		if got := AddressOf(s); got != strings.ToLower(wire) {
			t.Fatalf("AddressOf(%q) = %q, want %q", s, got, strings.ToLower(wire))
		}
		if got := Addresses([]string{s, s}); len(got) != 1 || !strings.EqualFold(got[0], wire) {
			t.Fatalf("Addresses(%q twice) = %q, want one %q", s, got, wire)
		}

		// Rendered, and read back by ParseAddress: the same name, the
		// address as it travels.
		back, err := ParseAddress(a.String())
		if err != nil {
			t.Fatalf("ParseAddress(%q) refuses the rendering %q of what it accepted: %v", s, a.String(), err)
		}
		if back.Name != a.Name || back.Email != wire {
			t.Fatalf("ParseAddress(%q) = %+v; its rendering %q reads back as %+v", s, a, a.String(), back)
		}

		// In a message's headers, as a mail client reads them.
		raw, err := Build(Message{
			From: a, To: []Address{a}, ReplyTo: []Address{a, {Email: "x@example.org"}},
			Subject: "s", Text: "t", MessageID: "fuzz@example.org", Date: date,
		})
		if err != nil {
			t.Fatalf("Build refuses address %+v that ParseAddress(%q) accepted: %v", a, s, err)
		}
		msg, _, err := parseMessage(raw)
		if err != nil {
			t.Fatalf("message with %+v does not parse back: %v\n%s", a, err, raw)
		}
		for _, field := range []string{"From", "To", "Reply-To"} {
			l, err := msg.Header.AddressList(field)
			if err != nil || len(l) == 0 {
				t.Fatalf("%s header %q of %+v does not parse back: %v", field, msg.Header.Get(field), a, err)
			}
			if l[0].Name != a.Name || l[0].Address != wire {
				t.Fatalf("%s header %q reads back as %q <%s>, want %q <%s>", field, msg.Header.Get(field), l[0].Name, l[0].Address, a.Name, wire)
			}
		}
		if l, _ := mail.ParseAddressList(msg.Header.Get("Reply-To")); len(l) != 2 || l[1].Address != "x@example.org" {
			t.Fatalf("Reply-To %q does not read back as two addresses", msg.Header.Get("Reply-To"))
		}
	})
}
