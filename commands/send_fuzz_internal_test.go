package commands

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/idna"

	"github.com/mailroom/mailroom/domain/sendingdomain"
	"github.com/mailroom/mailroom/internal/mailmsg"
)

// Flags of FuzzValidateSend's last argument: which fields the fuzzed
// strings go into, beside the ones every request has.
const (
	fuzzSendContent    = 1 << iota // an attachment with content (else a path)
	fuzzSendCc                     // cc: the to string again, upper-cased
	fuzzSendReplyTo                // reply_to: from
	fuzzSendTag                    // tags: {name: value}
	fuzzSendHTML                   // the text goes as html too
	fuzzSendNoText                 // no text body
	fuzzSendAttachment             // an attachment at all
)

// FuzzValidateSend checks that a send request the API accepts (202) is one
// the pipeline can render: validation must refuse, with a 422 the client
// can act on, anything that would make the email fail later.
func FuzzValidateSend(f *testing.F) {
	type seed struct {
		from, to, subject, text, tagName, tagValue, filename, content, path, contentType, contentID, key string
		flags                                                                                            uint8
	}
	all := uint8(fuzzSendContent | fuzzSendCc | fuzzSendReplyTo | fuzzSendTag | fuzzSendHTML | fuzzSendAttachment)
	for _, s := range []seed{
		{"Acme <billing@acme.com>", "bob@example.org", "Your receipt", "Thanks!", "campaign", "spring-2025", "invoice.pdf", "JVBERi0xLjcK", "", "", "", "order-42", all},
		{"Jörg <joerg@bücher.de>", "山田 <taro@例え.テスト>", "Grüße — ✓", "Zeile 1\nZeile 2\r\n", "a", "b", "Rechnung März.pdf", "AAEC/w==", "", "application/pdf", "logo", "", all},
		{"a@b.co", "c@d.co", "s", "t", "", "", "", "", "https://files.example.com/report%20Q1.pdf", "", "", "", fuzzSendAttachment},
		{"a@b.co", "c@d.co", "s", "t", "", "", "", "", "https://files.example.com/", "", "", "", fuzzSendAttachment},
		{"a@b.co", "c@d.co", "s", "t", "", "", "", "", "https://files.example.com/a%2Fb%00c", "", "", "", fuzzSendAttachment},
		{"a@b.co", "c@d.co", "s", "", "", "", "logo.png", "iVBORw0KGgo", "", "image/png; name=x", "<logo@acme>", "", fuzzSendContent | fuzzSendAttachment | fuzzSendHTML},
		{"a@b.co", "c@d.co", "s", "t", "", "", "data.bin", "QQ\r\n==", "", "text/plain; charset=\"utf-8\"; format=flowed", "<<a>>", "k", fuzzSendContent | fuzzSendAttachment},
		{"a@b.co", "c@d.co", "s", "t", "", "", "x.txt", "QQ", "", "text/plain; x*=utf-8''%0D%0ABcc%3A%20v", "", "", fuzzSendContent | fuzzSendAttachment},
		{"a@b.co", "c@d.co", "s", "t", "", "", "x.txt", "QQ", "", "multipart/mixed; boundary=x", "", "", fuzzSendContent | fuzzSendAttachment},
		{"a@b.co", "c@d.co", strings.Repeat("é", 998), strings.Repeat("x", 2000), strings.Repeat("n", 256), strings.Repeat("v", 256), strings.Repeat("ü", 255), "", "", "", strings.Repeat("i", 255), strings.Repeat("k", 256), all},
		{"=?utf-8?q?=0D=0ABcc:_x@evil.com?= <a@b.co>", "\"Doe, John\" <john@example.org>", "=?utf-8?q?x?=", "t", "mailroom_email_id", "x", "a\tb", "@@", "", "", "a b", "line\nbreak", all},
		{"a@b.co", "c@d.co", " ", "\x00", "ok", "", ".", "", "", "", "", "\u2028", all},
	} {
		f.Add(s.from, s.to, s.subject, s.text, s.tagName, s.tagValue, s.filename, s.content, s.path, s.contentType, s.contentID, s.key, s.flags)
	}
	date := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	f.Fuzz(func(t *testing.T, from, to, subject, text, tagName, tagValue, filename, content, path, contentType, contentID, key string, flags uint8) {
		req := SendEmail{From: from, To: []string{to}, Subject: subject, Text: text}
		if flags&fuzzSendNoText != 0 {
			req.Text = ""
		}
		if flags&fuzzSendHTML != 0 {
			req.HTML = text
		}
		if flags&fuzzSendCc != 0 {
			req.Cc = []string{strings.ToUpper(to)}
		}
		if flags&fuzzSendReplyTo != 0 {
			req.ReplyTo = []string{from}
		}
		if flags&fuzzSendTag != 0 {
			req.Tags = map[string]string{tagName: tagValue}
		}
		if flags&fuzzSendAttachment != 0 {
			a := SendAttachment{Filename: filename, ContentType: contentType, ContentID: contentID}
			if flags&fuzzSendContent != 0 {
				a.Content = content
			} else {
				a.Path = path
			}
			req.Attachments = []SendAttachment{a}
		}
		decoded, err := validateRequest(req, key)
		if err != nil {
			return
		}
		// windowID tells keys apart by a NUL between account and key.
		if len(key) > MaxIdempotencyKey || strings.IndexByte(key, 0) >= 0 {
			t.Fatalf("Idempotency-Key %q accepted", key)
		}
		if len(decoded) != len(req.Attachments) {
			t.Fatalf("%d attachments decoded for %d", len(decoded), len(req.Attachments))
		}

		// The request as the pipeline renders it (stage, then render).
		fromAddr, err := mailmsg.ParseAddress(strings.TrimSpace(req.From))
		if err != nil {
			t.Fatalf("accepted from %q does not parse when rendered: %v", req.From, err)
		}
		_, fromDomain, _ := strings.Cut(mailmsg.WireAddress(fromAddr.Email), "@")
		m := mailmsg.Message{
			From: fromAddr, Subject: req.Subject, Date: date, Text: req.Text, HTML: req.HTML,
			MessageID: "0190a5a4-9c1e-7000-8000-000000000000@" + strings.ToLower(fromDomain),
			Headers:   []mailmsg.Header{{Name: "X-Mailroom-Email-Id", Value: "0190a5a4-9c1e-7000-8000-000000000000"}},
		}
		for _, l := range []struct {
			dst *[]mailmsg.Address
			src []string
		}{{&m.To, req.To}, {&m.Cc, req.Cc}, {&m.Bcc, req.Bcc}, {&m.ReplyTo, req.ReplyTo}} {
			for _, s := range l.src {
				a, err := mailmsg.ParseAddress(s)
				if err != nil {
					t.Fatalf("accepted recipient %q does not parse when rendered: %v", s, err)
				}
				*l.dst = append(*l.dst, a)
			}
		}
		for i, a := range req.Attachments {
			att := mailmsg.Attachment{Filename: a.Filename, ContentType: a.ContentType, ContentID: strings.Trim(a.ContentID, "<>"), Content: decoded[i]}
			if att.Filename == "" {
				att.Filename = filenameOf(a.Path)
			}
			if att.ContentType == "" {
				att.ContentType = mailmsg.ContentTypeFor(att.Filename)
			}
			if a.Path != "" {
				att.Content = []byte("downloaded")
			} else if enc := base64.StdEncoding.EncodeToString(decoded[i]); !bytes.Equal(mustDecode(t, enc), decoded[i]) {
				t.Fatalf("content %q decodes unstably", a.Content)
			}
			m.Attachments = append(m.Attachments, att)
		}
		if _, err := mailmsg.Build(m); err != nil {
			t.Fatalf("the API accepts this request but the pipeline cannot render it: %v\n%+v", err, req)
		}
	})
}

func mustDecode(t *testing.T, s string) []byte {
	t.Helper()
	b, err := decodeBase64(s)
	if err != nil {
		t.Fatalf("decodeBase64(%q): %v", s, err)
	}
	return b
}

// FuzzDecodeBase64 checks that attachment content is read as documented:
// standard base64, padded or not, with line breaks, spaces and tabs
// anywhere, gives back the bytes that were encoded.
func FuzzDecodeBase64(f *testing.F) {
	f.Add([]byte("attachment bytes \x00\xff"), uint8(0), uint16(0))
	f.Add([]byte("a"), uint8(1), uint16(0x0101))
	f.Add([]byte("ab"), uint8(2), uint16(0xffff))
	f.Add([]byte{}, uint8(3), uint16(7))
	f.Add(bytes.Repeat([]byte{0xfb, 0xff}, 100), uint8(0), uint16(0x3a3a))
	f.Fuzz(func(t *testing.T, data []byte, mode uint8, spacing uint16) {
		enc := base64.StdEncoding.EncodeToString(data)
		if mode&1 != 0 {
			enc = strings.TrimRight(enc, "=")
		}
		// Whitespace after every (spacing&0xff)'th character, chosen by
		// the high byte.
		if every := int(spacing & 0xff); every > 0 {
			ws := []string{"\r\n", "\n", " ", "\t"}[int(spacing>>8)%4]
			var b strings.Builder
			for i := 0; i < len(enc); i++ {
				b.WriteByte(enc[i])
				if (i+1)%every == 0 {
					b.WriteString(ws)
				}
			}
			enc = b.String()
		}
		if mode&2 != 0 {
			enc = " \r\n" + enc + "\r\n\t"
		}
		got, err := decodeBase64(enc)
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("decodeBase64(%q) = %x, %v; want %x", enc, got, err, data)
		}
	})
}

// FuzzDomainSends checks that a domain name an account may add is one it
// can send from once verified: an address at the name, written as stored
// (punycode) or in Unicode, is a valid from address, and a send from it
// finds the domain by the name it was stored under (checkSend's lookup).
func FuzzDomainSends(f *testing.F) {
	for _, s := range []string{
		"example.com", "Example.COM.", " mail.example.co.uk ", "bücher.de", "xn--bcher-kva.de", "BÜCHER.de",
		"例え.テスト", "ß.de", "faß.de", "a\u200db.example", "ﬀ.example", "ｅｘａｍｐｌｅ.com", "a\u0301.example",
		"xn--n3h.example", "☃.example", "1.2.3.4", "[::1]", "localhost", "co.uk", "github.io",
		"a-.example", "xn--a.example", "xn--ls8h.la", "a..b", "a.123", "_dmarc.example.com",
		"e\u0301xample.com", "ＥＸＡＭＰＬＥ．ＣＯＭ", "example。com", "\u00adexample.com",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		name, problem := sendingdomain.NormalizeName(raw)
		if problem == "" {
			problem = sendingdomain.CheckRegistrable(name)
		}
		if problem == "" {
			problem = sendingdomain.CheckOwnable(name)
		}
		if problem != "" {
			return
		}
		spellings := []string{name}
		if u, err := idna.Lookup.ToUnicode(name); err == nil && u != name {
			spellings = append(spellings, u)
		}
		for _, d := range spellings {
			from := "billing@" + d
			req := SendEmail{From: from, To: []string{"bob@example.org"}, Subject: "s", Text: "t"}
			if _, err := validateRequest(req, ""); err != nil {
				t.Fatalf("domain %q (added as %q) cannot send from %q: %v", raw, name, from, err)
			}
			a, _ := mailmsg.ParseAddress(from)
			_, fromDomain, _ := strings.Cut(a.Email, "@")
			if got, p := sendingdomain.NormalizeName(fromDomain); p != "" || got != name {
				t.Fatalf("a send from %q looks for domain %q (%s); it was added as %q", from, got, p, name)
			}
		}
	})
}
