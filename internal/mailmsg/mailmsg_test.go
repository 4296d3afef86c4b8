package mailmsg

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net/mail"
	"net/textproto"
	"slices"
	"strings"
	"testing"
	"time"
)

// node is a parsed MIME entity, decoded the way a mail client would.
type node struct {
	header      textproto.MIMEHeader
	mediaType   string
	params      map[string]string
	disposition string
	dispParams  map[string]string
	body        []byte // decoded; leaves only
	parts       []*node
}

// shape renders the tree's media types, e.g. "multipart/mixed[text/plain,application/pdf]".
func (n *node) shape() string {
	if n.parts == nil {
		return n.mediaType
	}
	s := make([]string, len(n.parts))
	for i, p := range n.parts {
		s[i] = p.shape()
	}
	return n.mediaType + "[" + strings.Join(s, ",") + "]"
}

// walk calls f for every node, depth first.
func (n *node) walk(f func(*node)) {
	f(n)
	for _, p := range n.parts {
		p.walk(f)
	}
}

// leaves returns the leaves with the given media type.
func (n *node) leaves(mediaType string) []*node {
	var out []*node
	n.walk(func(c *node) {
		if c.parts == nil && c.mediaType == mediaType {
			out = append(out, c)
		}
	})
	return out
}

// checkLines asserts the RFC 5322 line rules: CRLF everywhere, no line
// longer than 998 bytes.
func checkLines(raw []byte) error {
	if !bytes.HasSuffix(raw, []byte("\r\n")) {
		return errors.New("message does not end with CRLF")
	}
	for i, line := range bytes.Split(raw[:len(raw)-2], []byte("\r\n")) {
		if bytes.ContainsAny(line, "\r\n") {
			return fmt.Errorf("line %d has a bare CR or LF: %q", i+1, line)
		}
		if len(line) > maxLineLen {
			return fmt.Errorf("line %d is %d bytes long", i+1, len(line))
		}
	}
	return nil
}

// parseMessage reads raw back with net/mail and mime/multipart.
func parseMessage(raw []byte) (*mail.Message, *node, error) {
	if err := checkLines(raw); err != nil {
		return nil, nil, err
	}
	msg, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		return nil, nil, fmt.Errorf("net/mail: %w", err)
	}
	if v := msg.Header.Get("MIME-Version"); v != "1.0" {
		return nil, nil, fmt.Errorf("MIME-Version = %q", v)
	}
	root, err := parseEntity(textproto.MIMEHeader(msg.Header), msg.Body)
	return msg, root, err
}

func parseEntity(h textproto.MIMEHeader, body io.Reader) (*node, error) {
	mt, params, err := mime.ParseMediaType(h.Get("Content-Type"))
	if err != nil {
		return nil, fmt.Errorf("Content-Type %q: %w", h.Get("Content-Type"), err)
	}
	if strings.Contains(h.Get("Content-Type"), `name="=?`) {
		// A non-ASCII file name's legacy form: encoded-words in a
		// quoted-string, read as the clients that use it read it.
		if params["name"], err = new(mime.WordDecoder).DecodeHeader(params["name"]); err != nil {
			return nil, fmt.Errorf("Content-Type name %q: %w", params["name"], err)
		}
	}
	n := &node{header: h, mediaType: mt, params: params}
	if cd := h.Get("Content-Disposition"); cd != "" {
		if n.disposition, n.dispParams, err = mime.ParseMediaType(cd); err != nil {
			return nil, fmt.Errorf("Content-Disposition %q: %w", cd, err)
		}
	}
	if strings.HasPrefix(mt, "multipart/") {
		n.parts = []*node{}
		mr := multipart.NewReader(body, params["boundary"])
		for {
			p, err := mr.NextRawPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("%s: %w", mt, err)
			}
			child, err := parseEntity(p.Header, p)
			if err != nil {
				return nil, err
			}
			n.parts = append(n.parts, child)
		}
		if len(n.parts) == 0 {
			return nil, fmt.Errorf("%s has no parts", mt)
		}
		return n, nil
	}
	switch cte := strings.ToLower(h.Get("Content-Transfer-Encoding")); cte {
	case "quoted-printable":
		body = quotedprintable.NewReader(body)
	case "base64":
		body = base64.NewDecoder(base64.StdEncoding, body)
	default:
		return nil, fmt.Errorf("%s: unexpected Content-Transfer-Encoding %q", mt, cte)
	}
	if n.body, err = io.ReadAll(body); err != nil {
		return nil, fmt.Errorf("%s body: %w", mt, err)
	}
	return n, nil
}

var dec = new(mime.WordDecoder)

func decodeHeader(t testing.TB, v string) string {
	t.Helper()
	s, err := dec.DecodeHeader(v)
	if err != nil {
		t.Fatalf("DecodeHeader(%q): %v", v, err)
	}
	return s
}

// mustParse builds m and parses it back, failing the test on any error.
func mustParse(t *testing.T, m Message) ([]byte, *mail.Message, *node) {
	t.Helper()
	raw, err := Build(m)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	msg, root, err := parseMessage(raw)
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, raw)
	}
	return raw, msg, root
}

func baseMessage() Message {
	return Message{
		From:      Address{Name: "Acme", Email: "hello@acme.com"},
		To:        []Address{{Email: "bob@example.com"}},
		Subject:   "Your receipt",
		Text:      "Thanks for your order.",
		MessageID: "0190f1a2-7b3c@acme.com",
		Date:      time.Date(2025, 3, 14, 9, 26, 53, 0, time.FixedZone("CET", 3600)),
	}
}

func TestBuildTextOnlyHeaders(t *testing.T) {
	m := baseMessage()
	m.Cc = []Address{{Name: "Carol C", Email: "carol@example.com"}}
	m.ReplyTo = []Address{{Email: "support@acme.com"}}
	m.Headers = []Header{{"X-Mailroom-Email-Id", "em_123"}, {"X-SES-MESSAGE-TAGS", "email_id=em_123, account=acc_1"}}
	raw, msg, root := mustParse(t, m)

	for _, line := range strings.Split(string(raw), "\r\n") {
		if len(line) > preferredLineLen {
			t.Errorf("line longer than %d: %q", preferredLineLen, line)
		}
	}
	h := msg.Header
	want := map[string]string{
		"From":                "Acme <hello@acme.com>",
		"To":                  "bob@example.com",
		"Cc":                  "Carol C <carol@example.com>",
		"Reply-To":            "support@acme.com",
		"Subject":             "Your receipt",
		"Message-Id":          "<0190f1a2-7b3c@acme.com>",
		"Mime-Version":        "1.0",
		"X-Mailroom-Email-Id": "em_123",
		"X-Ses-Message-Tags":  "email_id=em_123, account=acc_1",
	}
	for k, v := range want {
		if got := h.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if d, err := h.Date(); err != nil || !d.Equal(m.Date) {
		t.Errorf("Date = %v, %v; want %v", d, err, m.Date)
	}
	if root.shape() != "text/plain" || root.params["charset"] != "utf-8" {
		t.Errorf("root = %s %v", root.shape(), root.params)
	}
	if got := root.header.Get("Content-Transfer-Encoding"); got != "quoted-printable" {
		t.Errorf("Content-Transfer-Encoding = %q", got)
	}
	if string(root.body) != m.Text {
		t.Errorf("body = %q", root.body)
	}
	// Standard headers come first, in the documented order.
	var names []string
	for _, line := range strings.Split(string(raw[:bytes.Index(raw, []byte("\r\n\r\n"))]), "\r\n") {
		if name, _, ok := strings.Cut(line, ":"); ok && line[0] != ' ' {
			names = append(names, name)
		}
	}
	wantOrder := "From To Cc Reply-To Subject Date Message-ID MIME-Version X-Mailroom-Email-Id X-SES-MESSAGE-TAGS Content-Type Content-Transfer-Encoding"
	if got := strings.Join(names, " "); got != wantOrder {
		t.Errorf("header order\n got %s\nwant %s", got, wantOrder)
	}
}

func TestBuildStructure(t *testing.T) {
	png := []byte("\x89PNG\r\n\x1a\nfake image")
	pdf := []byte("%PDF-1.7 fake")
	for _, tc := range []struct {
		text, html      bool
		inline, regular bool
		want            string
	}{
		{text: true, want: "text/plain"},
		{html: true, want: "text/html"},
		{text: true, html: true, want: "multipart/alternative[text/plain,text/html]"},
		{html: true, inline: true, want: "multipart/related[text/html,image/png]"},
		{text: true, html: true, inline: true, want: "multipart/related[multipart/alternative[text/plain,text/html],image/png]"},
		{text: true, regular: true, want: "multipart/mixed[text/plain,application/pdf]"},
		{html: true, regular: true, want: "multipart/mixed[text/html,application/pdf]"},
		{text: true, html: true, regular: true, want: "multipart/mixed[multipart/alternative[text/plain,text/html],application/pdf]"},
		{html: true, inline: true, regular: true, want: "multipart/mixed[multipart/related[text/html,image/png],application/pdf]"},
		{text: true, html: true, inline: true, regular: true, want: "multipart/mixed[multipart/related[multipart/alternative[text/plain,text/html],image/png],application/pdf]"},
		{text: true, inline: true, want: "multipart/related[text/plain,image/png]"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			m := baseMessage()
			m.Text, m.HTML = "", ""
			if tc.text {
				m.Text = "plain body"
			}
			if tc.html {
				m.HTML = `<p>html body <img src="cid:logo"></p>`
			}
			if tc.regular {
				m.Attachments = append(m.Attachments, Attachment{Filename: "invoice.pdf", Content: pdf})
			}
			if tc.inline {
				m.Attachments = append(m.Attachments, Attachment{Filename: "logo.png", ContentID: "logo", Content: png})
			}
			_, _, root := mustParse(t, m)
			if got := root.shape(); got != tc.want {
				t.Fatalf("shape = %s, want %s", got, tc.want)
			}
			if tc.text && string(root.leaves("text/plain")[0].body) != m.Text {
				t.Errorf("text body differs")
			}
			if tc.html && string(root.leaves("text/html")[0].body) != m.HTML {
				t.Errorf("html body differs")
			}
			root.walk(func(n *node) {
				switch n.mediaType {
				case "multipart/related":
					if want := n.parts[0].mediaType; n.params["type"] != want {
						t.Errorf("related type = %q, want %q", n.params["type"], want)
					}
				case "image/png":
					if got := n.header.Get("Content-ID"); got != "<logo>" {
						t.Errorf("Content-ID = %q", got)
					}
					if n.disposition != "inline" || n.dispParams["filename"] != "logo.png" {
						t.Errorf("inline disposition = %q %v", n.disposition, n.dispParams)
					}
					if !bytes.Equal(n.body, png) {
						t.Errorf("inline bytes differ")
					}
				case "application/pdf":
					if n.header.Get("Content-ID") != "" {
						t.Errorf("regular attachment has a Content-ID")
					}
					if n.disposition != "attachment" || n.dispParams["filename"] != "invoice.pdf" || n.params["name"] != "invoice.pdf" {
						t.Errorf("attachment disposition = %q %v %v", n.disposition, n.dispParams, n.params)
					}
					if !bytes.Equal(n.body, pdf) {
						t.Errorf("attachment bytes differ")
					}
				}
			})
		})
	}
}

func TestBccNeverWritten(t *testing.T) {
	m := baseMessage()
	m.Bcc = []Address{{Name: "Secret Sam", Email: "sam.hidden@bcc-only.example"}}
	raw, msg, _ := mustParse(t, m)
	for _, s := range []string{"Bcc", "bcc", "sam.hidden", "bcc-only.example", "Secret Sam"} {
		if bytes.Contains(raw, []byte(s)) {
			t.Errorf("output contains %q:\n%s", s, raw)
		}
	}
	if _, ok := msg.Header["Bcc"]; ok {
		t.Error("Bcc header present")
	}

	// Bcc alone is enough of a recipient; To is then omitted.
	m.To = nil
	raw, msg, _ = mustParse(t, m)
	if bytes.Contains(raw, []byte("sam.hidden")) || msg.Header.Get("To") != "" {
		t.Errorf("bcc-only message leaks or has To:\n%s", raw)
	}
}

func TestNonASCIISubjectAndNames(t *testing.T) {
	m := baseMessage()
	m.Subject = "Grüße aus Köln — Ihre Bestellung ✓"
	m.From = Address{Name: "Jörg Müller", Email: "joerg@acme.com"}
	m.To = []Address{
		{Name: "山田 太郎", Email: "taro@example.jp"},
		{Name: `Doe, John "JD"`, Email: "john@example.com"},
		{Name: "O'Brien (Sales)", Email: "ob@example.com"},
		{Name: "=?utf-8?q?not_an_encoded_word?=", Email: "tricky@example.com"},
		{Name: "  spaced   out  ", Email: "spaces@example.com"},
		{Name: "tab\there", Email: "tab@example.com"},
		{Email: "plain@bücher.de"},
	}
	m.ReplyTo = []Address{{Name: "Soporte Técnico", Email: "soporte@acme.com"}}
	raw, msg, _ := mustParse(t, m)

	header := raw[:bytes.Index(raw, []byte("\r\n\r\n"))]
	if strings.Contains(string(header), "Grüße") || strings.Contains(string(header), "Jörg") {
		t.Errorf("non-ASCII text left unencoded in headers:\n%s", header)
	}
	if got := decodeHeader(t, msg.Header.Get("Subject")); got != m.Subject {
		t.Errorf("subject = %q", got)
	}
	check := func(field string, want []Address) {
		t.Helper()
		got, err := msg.Header.AddressList(field)
		if err != nil {
			t.Fatalf("%s: %v (%q)", field, err, msg.Header.Get(field))
		}
		if len(got) != len(want) {
			t.Fatalf("%s has %d addresses, want %d", field, len(got), len(want))
		}
		for i := range want {
			if got[i].Name != want[i].Name || got[i].Address != want[i].Email {
				t.Errorf("%s[%d] = %q <%s>, want %q <%s>", field, i, got[i].Name, got[i].Address, want[i].Name, want[i].Email)
			}
		}
	}
	check("From", []Address{m.From})
	// An internationalised domain travels in punycode: headers stay ASCII.
	wantTo := slices.Clone(m.To)
	wantTo[6].Email = "plain@xn--bcher-kva.de"
	check("To", wantTo)
	check("Reply-To", m.ReplyTo)
	if strings.Contains(string(header), "bücher") {
		t.Errorf("an internationalised domain left unencoded in headers:\n%s", header)
	}
}

func TestLongNamesFolded(t *testing.T) {
	m := baseMessage()
	m.From.Name = strings.Repeat(`"\`, 300) // quoting doubles it past a line
	m.To = []Address{
		{Name: strings.Repeat("Very Long Name ", 80), Email: "a@example.com"},
		{Name: strings.Repeat("N", 950), Email: "b@example.com"},
		{Name: strings.Repeat("名前", 200), Email: "c@example.com"},
	}
	_, msg, _ := mustParse(t, m)
	for field, want := range map[string][]Address{"From": {m.From}, "To": m.To} {
		got, err := msg.Header.AddressList(field)
		if err != nil || len(got) != len(want) {
			t.Fatalf("%s: %v, %v", field, got, err)
		}
		for i := range want {
			if got[i].Name != want[i].Name || got[i].Address != want[i].Email {
				t.Errorf("%s[%d] = %q <%s>", field, i, got[i].Name, got[i].Address)
			}
		}
	}
}

func TestLongSubjectFolded(t *testing.T) {
	for name, subject := range map[string]string{
		"ascii words":         strings.Repeat("lorem ipsum dolor ", 55)[:990],
		"one long word":       strings.Repeat("x", 998),
		"non-ascii":           strings.Repeat("Größenänderung ", 66),
		"cjk":                 strings.Repeat("注文確認", 250),
		"double spaces":       strings.Repeat("a  b   ", 140),
		"inner double spaces": strings.Repeat("a  b c ", 100) + "end",
		"encoded lookalike":   "=?utf-8?b?aGVsbG8=?= " + strings.Repeat("y", 50),
	} {
		t.Run(name, func(t *testing.T) {
			m := baseMessage()
			m.Subject = subject
			raw, msg, _ := mustParse(t, m)
			if got := decodeHeader(t, msg.Header.Get("Subject")); got != subject {
				t.Errorf("subject round trip:\n got %q\nwant %q", got, subject)
			}
			if name != "one long word" {
				for _, line := range strings.Split(string(raw), "\r\n") {
					if len(line) > preferredLineLen {
						t.Errorf("line longer than %d: %q", preferredLineLen, line)
					}
				}
			}
		})
	}
}

func TestHeaderInjectionRefused(t *testing.T) {
	for name, mut := range map[string]func(*Message){
		"subject CRLF":        func(m *Message) { m.Subject = "hi\r\nBcc: victim@example.com" },
		"subject LF":          func(m *Message) { m.Subject = "hi\nX-Evil: 1" },
		"subject CR":          func(m *Message) { m.Subject = "hi\rX-Evil: 1" },
		"subject NUL":         func(m *Message) { m.Subject = "hi\x00" },
		"from name CRLF":      func(m *Message) { m.From.Name = "Acme\r\nBcc: victim@example.com" },
		"to name LF":          func(m *Message) { m.To[0].Name = "Bob\nBcc: victim@example.com" },
		"reply-to email CRLF": func(m *Message) { m.ReplyTo = []Address{{Email: "a@b.com\r\nBcc: v@example.com"}} },
		"to email with >":     func(m *Message) { m.To[0].Email = "bob@example.com>, victim@example.com" },
		"header value CRLF":   func(m *Message) { m.Headers = []Header{{"X-Tag", "a\r\nBcc: victim@example.com"}} },
		"header value LF":     func(m *Message) { m.Headers = []Header{{"X-Tag", "a\nb"}} },
		"header value ctrl":   func(m *Message) { m.Headers = []Header{{"X-Tag", "a\x01b"}} },
		"header value 8bit":   func(m *Message) { m.Headers = []Header{{"X-Tag", "café"}} },
		"header name CRLF":    func(m *Message) { m.Headers = []Header{{"X-Tag\r\nBcc", "v@example.com"}} },
		"header name colon":   func(m *Message) { m.Headers = []Header{{"X-Tag: x", "y"}} },
		"header name space":   func(m *Message) { m.Headers = []Header{{"X Tag", "y"}} },
		"header name empty":   func(m *Message) { m.Headers = []Header{{"", "y"}} },
		"header Bcc":          func(m *Message) { m.Headers = []Header{{"bcc", "victim@example.com"}} },
		"header Subject":      func(m *Message) { m.Headers = []Header{{"Subject", "again"}} },
		"header Content-Type": func(m *Message) { m.Headers = []Header{{"Content-Type", "text/html"}} },
		"filename CRLF": func(m *Message) {
			m.Attachments = []Attachment{{Filename: "a.txt\r\nBcc: v@example.com", Content: []byte("x")}}
		},
		"content type CRLF": func(m *Message) {
			m.Attachments = []Attachment{{Filename: "a.txt", ContentType: "text/plain\r\nBcc: v@example.com", Content: []byte("x")}}
		},
		"content id CRLF": func(m *Message) {
			m.Attachments = []Attachment{{Filename: "a.png", ContentID: "logo>\r\nBcc: v@example.com", Content: []byte("x")}}
		},
		"message id CRLF": func(m *Message) { m.MessageID = "a@b.com>\r\nBcc: v@example.com" },
	} {
		t.Run(name, func(t *testing.T) {
			m := baseMessage()
			mut(&m)
			raw, err := Build(m)
			if err == nil {
				t.Fatalf("Build accepted it:\n%s", raw)
			}
			if raw != nil {
				t.Errorf("Build returned output with an error")
			}
			if m.Validate() == nil {
				t.Errorf("Validate accepted what Build refused")
			}
		})
	}
}

func TestValidate(t *testing.T) {
	for name, tc := range map[string]struct {
		mut  func(*Message)
		want string
	}{
		"no from":        {func(m *Message) { m.From = Address{} }, "from is required"},
		"bad from":       {func(m *Message) { m.From.Email = "acme.com" }, "from is not a valid email address"},
		"no recipients":  {func(m *Message) { m.To = nil }, "at least one recipient"},
		"bad cc":         {func(m *Message) { m.Cc = []Address{{Email: "x@y"}} }, "cc[0] is not a valid email address"},
		"no body":        {func(m *Message) { m.Text = "" }, "html or text is required"},
		"invalid utf8":   {func(m *Message) { m.HTML = "\xff" }, "html is not valid UTF-8"},
		"bad message id": {func(m *Message) { m.MessageID = "no-at-sign" }, "message ID"},
		"no filename":    {func(m *Message) { m.Attachments = []Attachment{{Content: []byte("x")}} }, "filename is required"},
		"multipart type": {func(m *Message) { m.Attachments = []Attachment{{Filename: "a", ContentType: "multipart/mixed"}} }, "not a valid attachment type"},
		"message type":   {func(m *Message) { m.Attachments = []Attachment{{Filename: "a", ContentType: "message/rfc822"}} }, "not a valid attachment type"},
		"no subtype":     {func(m *Message) { m.Attachments = []Attachment{{Filename: "a", ContentType: "image"}} }, "not a valid attachment type"},
		"bad cid":        {func(m *Message) { m.Attachments = []Attachment{{ContentID: "a b", Content: []byte("x")}} }, "content_id"},
		"duplicate cid": {func(m *Message) {
			m.Attachments = []Attachment{{ContentID: "logo"}, {ContentID: "<LOGO>"}}
		}, "used twice"},
	} {
		t.Run(name, func(t *testing.T) {
			m := baseMessage()
			tc.mut(&m)
			err := m.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want %q", err, tc.want)
			}
			if _, berr := Build(m); berr == nil || berr.Error() != err.Error() {
				t.Errorf("Build = %v, want %v", berr, err)
			}
		})
	}
	if err := baseMessage().Validate(); err != nil {
		t.Fatalf("base message: %v", err)
	}
}

func TestAttachments(t *testing.T) {
	blob := make([]byte, 10_000)
	_, _ = rand.Read(blob)
	longName := strings.Repeat("Übersicht der Bestellungen ", 12) + ".xlsx"
	m := baseMessage()
	m.HTML = `<img src="cid:chart@acme">`
	m.Attachments = []Attachment{
		{Filename: "Rechnung März.pdf", Content: blob},
		{Filename: longName, Content: []byte("sheet")},
		{Filename: `quote "this"; and that.csv`, Content: []byte("a,b\r\n1,2\n")},
		{Filename: "empty.bin", ContentType: "Application/X-Custom; Name=ignored; foo=bar", Content: nil},
		{ContentID: "<chart@acme>", Content: []byte("GIF89a")},
	}
	raw, _, root := mustParse(t, m)

	// base64 bodies use 76-character lines.
	enc := base64.StdEncoding.EncodeToString(blob)
	if !bytes.Contains(raw, []byte(enc[:76]+"\r\n"+enc[76:152]+"\r\n")) {
		t.Errorf("attachment is not base64 in 76-character lines")
	}
	byName := map[string]*node{}
	root.walk(func(n *node) {
		if n.parts == nil && n.disposition != "" {
			byName[n.dispParams["filename"]] = n
		}
	})
	for _, a := range m.Attachments {
		n := byName[a.Filename]
		if n == nil {
			t.Errorf("attachment %q not found (have %v)", a.Filename, byName)
			continue
		}
		if !bytes.Equal(n.body, a.Content) {
			t.Errorf("%q: bytes differ", a.Filename)
		}
		if a.Filename != "" && n.params["name"] != a.Filename {
			t.Errorf("%q: Content-Type name = %q", a.Filename, n.params["name"])
		}
	}
	if n := byName["Rechnung März.pdf"]; n != nil && n.mediaType != "application/pdf" {
		t.Errorf("inferred type = %q", n.mediaType)
	}
	if n := byName[longName]; n != nil && n.mediaType != "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet" {
		t.Errorf("inferred xlsx type = %q", n.mediaType)
	}
	if n := byName["empty.bin"]; n != nil && (n.mediaType != "application/x-custom" || n.params["foo"] != "bar" || n.params["name"] != "empty.bin") {
		t.Errorf("explicit type = %q %v", n.mediaType, n.params)
	}
	if n := byName["empty.bin"]; n != nil && n.disposition != "attachment" {
		t.Errorf("disposition = %q", n.disposition)
	}
	if n := byName[""]; n == nil || n.disposition != "inline" || n.header.Get("Content-ID") != "<chart@acme>" || n.mediaType != "application/octet-stream" {
		t.Errorf("inline part without filename: %+v", n)
	}
}

func TestContentTypeParameters(t *testing.T) {
	m := baseMessage()
	// A parameter that decodes to a line break must stay encoded.
	m.Attachments = []Attachment{{Filename: "a.txt", ContentType: "text/plain; charset=us-ascii; x*=utf-8''%0D%0ABcc%3A%20v%40example.com", Content: []byte("a")}}
	raw, _, root := mustParse(t, m)
	if bytes.Contains(raw, []byte("\r\nBcc")) {
		t.Fatalf("parameter injected a header:\n%s", raw)
	}
	n := root.parts[1]
	if n.mediaType != "text/plain" || n.params["x"] != "\r\nBcc: v@example.com" || n.params["charset"] != "us-ascii" {
		t.Errorf("params = %s %q", n.mediaType, n.params)
	}

	for _, ct := range []string{
		"text/plain; " + strings.Repeat("p", 100) + "=1",
		"text/" + strings.Repeat("x", 300),
		"text/plain; charset",
		"text/plain\r\nBcc: v@example.com",
	} {
		m.Attachments[0].ContentType = ct
		if _, err := Build(m); err == nil {
			t.Errorf("content type %q accepted", ct)
		}
	}
}

// File names with RFC 2231's syntax characters, or that read as an
// encoded-word, are written so that every parser reads them as given:
// quoted or RFC 2231-encoded, never as a bare token or a quoted "=?...?=".
func TestFilenamesReadAsGiven(t *testing.T) {
	for _, name := range []string{"O'Brien.pdf", "report*final.pdf", "percent%20and*star.txt", "=?utf-8?b?SGk=?=", "=?utf-8?q?looks_encoded?=.txt", "plain.txt"} {
		m := baseMessage()
		m.Attachments = []Attachment{{Filename: name, Content: []byte("a")}}
		raw, _, root := mustParse(t, m)
		n := root.parts[1]
		if n.dispParams["filename"] != name || n.params["name"] != name {
			t.Errorf("%q read back as filename %q, name %q", name, n.dispParams["filename"], n.params["name"])
		}
		for _, bad := range []string{"filename=" + name, `filename="=?`} {
			if name != "plain.txt" && bytes.Contains(raw, []byte(bad)) {
				t.Errorf("%q written as %s", name, bad)
			}
		}
	}
}

func TestBodiesQuotedPrintable(t *testing.T) {
	m := baseMessage()
	m.Text = "Line with trailing space \nA=B and 100% sure\r\nFrom the start\r\n.\r\n" +
		strings.Repeat("long line ", 40) + "\rnon-ASCII: 日本語 café\n\n"
	m.HTML = "<html><body style=\"color: red\">" + strings.Repeat("<p>paragraph</p>", 30) + "</body></html>"
	raw, _, root := mustParse(t, m)
	if got, want := string(root.leaves("text/plain")[0].body), normalizeNewlines(m.Text); got != want {
		t.Errorf("text:\n got %q\nwant %q", got, want)
	}
	if got := string(root.leaves("text/html")[0].body); got != m.HTML {
		t.Errorf("html:\n got %q\nwant %q", got, m.HTML)
	}
	if bytes.Contains(raw, []byte("日本語")) || bytes.Contains(raw, []byte("trailing space \r\n")) {
		t.Errorf("body not quoted-printable encoded")
	}
}

func TestSinglePartBodyIsExact(t *testing.T) {
	for _, body := range []string{"no newline at end", "ends with newline\r\n", "x", "=", " "} {
		m := baseMessage()
		m.Text = body
		_, _, root := mustParse(t, m)
		if string(root.body) != body {
			t.Errorf("body %q came back as %q", body, root.body)
		}
	}
}

func TestMessageIDAndDate(t *testing.T) {
	m := baseMessage()
	m.MessageID = "<already@bracketed.com>"
	_, msg, _ := mustParse(t, m)
	if got := msg.Header.Get("Message-ID"); got != "<already@bracketed.com>" {
		t.Errorf("Message-ID = %q", got)
	}

	m.MessageID, m.Date = "", time.Time{}
	before := time.Now().Add(-time.Second)
	_, msg1, _ := mustParse(t, m)
	_, msg2, _ := mustParse(t, m)
	id1, id2 := msg1.Header.Get("Message-ID"), msg2.Header.Get("Message-ID")
	if !strings.HasPrefix(id1, "<") || !strings.HasSuffix(id1, "@acme.com>") || id1 == id2 {
		t.Errorf("generated Message-IDs %q, %q", id1, id2)
	}
	if d, err := msg1.Header.Date(); err != nil || d.Before(before) || d.After(time.Now().Add(time.Second)) {
		t.Errorf("default Date = %v, %v", d, err)
	}
}

func TestBoundariesRandomAndDistinct(t *testing.T) {
	m := baseMessage()
	m.HTML = "<p>hi</p>"
	m.Attachments = []Attachment{{Filename: "a.txt", Content: []byte("a")}, {ContentID: "c", Content: []byte("c")}}
	seen := map[string]bool{}
	for range 3 {
		_, _, root := mustParse(t, m)
		root.walk(func(n *node) {
			if b := n.params["boundary"]; b != "" {
				if seen[b] || !strings.Contains(b, "=_") {
					t.Errorf("boundary %q repeated or not QP-proof", b)
				}
				seen[b] = true
			}
		})
	}
	if len(seen) != 9 {
		t.Errorf("saw %d boundaries, want 9", len(seen))
	}
}

func TestAddressString(t *testing.T) {
	for _, tc := range []struct {
		a    Address
		want string
	}{
		{Address{Email: "a@b.com"}, "a@b.com"},
		{Address{Name: "Acme Inc", Email: "a@b.com"}, "Acme Inc <a@b.com>"},
		{Address{Name: "Acme, Inc.", Email: "a@b.com"}, `"Acme, Inc." <a@b.com>`},
		{Address{Name: `Say "hi"`, Email: "a@b.com"}, `"Say \"hi\"" <a@b.com>`},
		{Address{Name: "Jörg", Email: "a@b.com"}, "=?utf-8?q?J=C3=B6rg?= <a@b.com>"},
	} {
		if got := tc.a.String(); got != tc.want {
			t.Errorf("%#v.String() = %q, want %q", tc.a, got, tc.want)
		}
		back, err := mail.ParseAddress(tc.a.String())
		if err != nil || back.Name != tc.a.Name || back.Address != tc.a.Email {
			t.Errorf("net/mail reads %q as %+v, %v", tc.a.String(), back, err)
		}
	}
}

func TestParseAddress(t *testing.T) {
	valid := []struct {
		in   string
		want Address
	}{
		{"a@b.com", Address{Email: "a@b.com"}},
		{"  a@b.com  ", Address{Email: "a@b.com"}},
		{"<a@b.com>", Address{Email: "a@b.com"}},
		{"Acme <hello@acme.com>", Address{Name: "Acme", Email: "hello@acme.com"}},
		{"Acme<hello@acme.com>", Address{Name: "Acme", Email: "hello@acme.com"}},
		{`"Doe, John" <john@example.com>`, Address{Name: "Doe, John", Email: "john@example.com"}},
		{"Jörg Müller <j@example.de>", Address{Name: "Jörg Müller", Email: "j@example.de"}},
		{"=?utf-8?q?J=C3=B6rg?= <j@example.de>", Address{Name: "Jörg", Email: "j@example.de"}},
		{"first.last+tag@sub.example.co.uk", Address{Email: "first.last+tag@sub.example.co.uk"}},
		{"o'brien@example.ie", Address{Email: "o'brien@example.ie"}},
		{"x@my-domain.io", Address{Email: "x@my-domain.io"}},
		{"info@bücher.de", Address{Email: "info@bücher.de"}},
		{"info@xn--bcher-kva.de", Address{Email: "info@xn--bcher-kva.de"}},
		{"UPPER@Example.COM", Address{Email: "UPPER@Example.COM"}},
		{strings.Repeat("l", 64) + "@example.com", Address{Email: strings.Repeat("l", 64) + "@example.com"}},
		{"a@" + strings.Repeat("d", 63) + ".com", Address{Email: "a@" + strings.Repeat("d", 63) + ".com"}},
	}
	for _, tc := range valid {
		got, err := ParseAddress(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseAddress(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	invalid := []string{
		"",
		"   ",
		"user@x\u0660\u06f0.com", // letters and digits, but no punycode form (mixed digit sets)
		"plainaddress",
		"@example.com",
		"user@",
		"user@localhost",
		"user@example",
		"user@.example.com",
		"user@example.com.",
		"user@example..com",
		"user@-example.com",
		"user@example-.com",
		"user@exa_mple.com",
		"user@exa mple.com",
		"us er@example.com",
		"user @example.com",
		"user@ example.com",
		".user@example.com",
		"user.@example.com",
		"us..er@example.com",
		`"quoted"@example.com`,
		"user@[127.0.0.1]",
		"user@127.0.0.1",
		"user@example.com (comment)",
		"a@b.com, c@d.com",
		"Name <a@b.com>, Other <c@d.com>",
		"Doe, John <john@example.com>",
		"Name <a@b.com",
		"Name a@b.com>",
		"user@exam!ple.com",
		"jörg@example.de",
		"a@b.com\r\nBcc: c@d.com",
		"Evil\r\n <a@b.com>",
		strings.Repeat("l", 65) + "@example.com",
		"a@" + strings.Repeat("d", 64) + ".com",
		"a@" + strings.Repeat(strings.Repeat("d", 60)+".", 5) + "com",
		"a@b@c.com",
		"user@exa\x00mple.com",
		// Valid in Unicode, not as they travel in punycode: a label of 66
		// characters, an empty label or a numeric end once the IDNA
		// mapping drops a character, an address of 261 bytes.
		"bob@ü" + strings.Repeat("a", 62) + ".com",
		"bob@\u034F.com",
		"bob@example.\uFE0F",
		"bob@example.1\u034F",
		"x@xn--zz.com",
		"x@xn--a-ecp.xn--99999999999.com",
		"bob@" + strings.Repeat("ü"+strings.Repeat("a", 55)+".", 4) + "com",
	}
	for _, in := range invalid {
		got, err := ParseAddress(in)
		if err == nil {
			t.Errorf("ParseAddress(%q) = %+v, want an error", in, got)
			continue
		}
		if !errors.Is(err, ErrInvalidAddress) || !strings.HasPrefix(err.Error(), "is not a valid email address") {
			t.Errorf("ParseAddress(%q) error = %q", in, err)
		}
	}
	// Some refusals name what the sender most likely meant.
	for in, reason := range map[string]string{
		"a@b.com, c@d.com":                   "it holds more than one address",
		"a@b.com,c@d.com":                    "it holds more than one address",
		"Name <a@b.com>, Other <c@d.com>":    "it holds more than one address",
		"Doe, John <john@example.com>":       "the display name is malformed; put it in double quotes",
		"jöhn@example.com":                   "the part before @ must be ASCII: addresses that need SMTPUTF8 are not supported",
		"@example.com":                       "the part before @ is missing",
		"Ann < ann@example.org>":             "it contains a space",
		"Acme <hello@example.com":            "unbalanced angle brackets",
		"Acme hello@example.com":             "it contains a space; to give a display name, write Name <address>",
		"ann@example.org (Ann)":              "comments are not taken; to give a display name, write Name <address>",
		`"ann smith"@example.org`:            "a quoted local part is not taken: the part before @ must be letters, digits and . ! # $ % & ' * + - / = ? ^ _ ` { | } ~",
		"=?shift_jis?b?k/qWe4zq?= <a@b.com>": "the display name is an encoded-word in a charset other than UTF-8, US-ASCII or ISO-8859-1; write the name itself in UTF-8",
		"a@" + strings.Repeat("é", 63) + "." + strings.Repeat("é", 63) + ".com": "it is longer than 254 bytes",
	} {
		var ae *AddressError
		if _, err := ParseAddress(in); !errors.As(err, &ae) || ae.Reason != reason {
			t.Errorf("ParseAddress(%.30q): %v, want %q", in, err, reason)
		}
	}
}

func TestContentTypeFor(t *testing.T) {
	for in, want := range map[string]string{
		"invoice.pdf":        "application/pdf",
		"INVOICE.PDF":        "application/pdf",
		"photo.JPG":          "image/jpeg",
		"photo.jpeg":         "image/jpeg",
		"logo.png":           "image/png",
		"anim.gif":           "image/gif",
		"data.csv":           "text/csv",
		"notes.txt":          "text/plain",
		"page.html":          "text/html",
		"archive.zip":        "application/zip",
		"backup.tar.gz":      "application/gzip",
		"invite.ics":         "text/calendar",
		"report.docx":        "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
		"sheet.xlsx":         "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
		"dir/sub.v2/file":    "application/octet-stream",
		`C:\path\doc.pdf`:    "application/pdf",
		"noext":              "application/octet-stream",
		"trailingdot.":       "application/octet-stream",
		"":                   "application/octet-stream",
		"forwarded.eml":      "application/octet-stream",
		"weird.nosuchext123": "application/octet-stream",
	} {
		if got := ContentTypeFor(in); got != want {
			t.Errorf("ContentTypeFor(%q) = %q, want %q", in, got, want)
		}
	}
}

// The longest address that fits (254 bytes, a 64-byte local part, 63-byte
// labels) is taken; one byte more is refused. A sender would see a valid
// address refused, or an over-long one accepted and bounced by relays.
func TestAddressLengthLimitsAreInclusive(t *testing.T) {
	local := strings.Repeat("l", 64)
	dom := strings.Repeat("d", 63) + "." + strings.Repeat("d", 63) + "." + strings.Repeat("d", 57) + ".com"
	at254 := local + "@" + dom
	if len(at254) != 254 {
		t.Fatalf("test address is %d bytes", len(at254))
	}
	if _, err := ParseAddress(at254); err != nil {
		t.Errorf("a 254-byte address was refused: %v", err)
	}
	if _, err := ParseAddress(local + "@d" + dom); err == nil {
		t.Error("a 255-byte address was accepted")
	}
}

// An internationalised address is held to 254 bytes as it travels, in
// punycode, even when its Unicode form is shorter: exactly 254 is taken,
// more is refused (a relay would refuse it after the API said 202).
func TestInternationalAddressIsMeasuredInPunycode(t *testing.T) {
	addr := func(n int) string {
		label := "ü" + strings.Repeat("a", n)
		return strings.Repeat("l", 64) + "@" + strings.Repeat(label+".", 3) + "com"
	}
	if w := WireAddress(addr(53)); len(w) != 254 {
		t.Fatalf("test address is %d bytes in punycode, want 254", len(w))
	}
	if _, err := ParseAddress(addr(53)); err != nil {
		t.Errorf("an address of 254 bytes in punycode was refused: %v", err)
	}
	long := addr(54)
	if len(long) > 254 || len(WireAddress(long)) <= 254 {
		t.Fatalf("test address: %d bytes, %d in punycode", len(long), len(WireAddress(long)))
	}
	if _, err := ParseAddress(long); err == nil || !strings.Contains(err.Error(), "punycode") {
		t.Errorf("an address of %d bytes in punycode: %v, want refused", len(WireAddress(long)), err)
	}
}

// A display name of exactly MaxNameLength characters is taken on the way in.
func TestDisplayNameOfMaxLengthIsAccepted(t *testing.T) {
	in := `"` + strings.Repeat("n", MaxNameLength) + `" <ann@example.org>`
	if _, err := ParseNewAddress(in); err != nil {
		t.Errorf("a display name of %d characters was refused: %v", MaxNameLength, err)
	}
}

// A domain whose last label is all digits is no host name, whichever
// digits it has (0 and 9 included).
func TestNumericTopLevelDomainRefused(t *testing.T) {
	for _, in := range []string{"user@example.0", "user@example.9", "user@example.10", "user@example.90", "user@1.2.3.4"} {
		if _, err := ParseAddress(in); err == nil {
			t.Errorf("ParseAddress(%q) accepted an address with a numeric top-level label", in)
		}
	}
}

// Every RFC 5322 atext character is allowed in the local part; the sender
// would see a valid address refused otherwise.
func TestEveryAtextCharacterAllowedInLocalPart(t *testing.T) {
	for _, c := range "!#$%&'*+-/=?^_`{|}~" {
		in := "a" + string(c) + "b@example.com"
		if _, err := ParseAddress(in); err != nil {
			t.Errorf("ParseAddress(%q): %v", in, err)
		}
	}
	if _, err := ParseAddress("!#$%&'*+-/=?^_`{|}~@example.com"); err != nil {
		t.Errorf("all atext specials: %v", err)
	}
}

// The 422 says why an address was refused, after the fixed prefix.
func TestAddressErrorCarriesItsReason(t *testing.T) {
	_, err := ParseAddress("user@example")
	if err == nil || err.Error() != "is not a valid email address (the domain needs a dot)" {
		t.Errorf("error = %v, want the reason in parentheses", err)
	}
	if got := (&AddressError{}).Error(); got != "is not a valid email address" {
		t.Errorf("error without a reason = %q", got)
	}
}

// A content_id must have 1 to 255 characters once its angle brackets are
// dropped, and only the allowed characters: "<>", 256 characters or a
// stray ">" are refused by the API, not quietly altered.
func TestContentIDBounds(t *testing.T) {
	for _, ok := range []string{"c", "<c>", strings.Repeat("c", 255), "<" + strings.Repeat("c", 255) + ">", "logo@acme.example", "a!#$%&'*+-/=?^_`{|}~"} {
		if err := CheckContentID(ok); err != nil {
			t.Errorf("CheckContentID(%.20q…) = %v", ok, err)
		}
	}
	for _, bad := range []string{"<>", strings.Repeat("c", 256), "<" + strings.Repeat("c", 256) + ">", "logo>", "<logo", "a<b>"} {
		if err := CheckContentID(bad); err == nil {
			t.Errorf("CheckContentID(%.20q…) accepted", bad)
		}
	}
}

// A Message-ID whose local part is not a dot-atom (spaces, a line break
// that would start a Bcc header) or that is longer than a header word is
// refused, not written.
func TestMessageIDLocalPartAndLengthChecked(t *testing.T) {
	for name, id := range map[string]string{
		"CRLF in local part":  "x\r\nBcc: victim@acme.com",
		"space in local part": "a b@acme.com",
		"too long":            strings.Repeat("a", maxRawWordLen-8) + "@acme.com",
	} {
		m := baseMessage()
		m.MessageID = id
		if raw, err := Build(m); err == nil {
			t.Errorf("%s: Build accepted Message-ID %.40q:\n%.300s", name, id, raw)
		}
	}
	m := baseMessage()
	m.MessageID = strings.Repeat("a", maxRawWordLen-9) + "@acme.com" // exactly 900
	if _, err := Build(m); err != nil {
		t.Errorf("a 900-character Message-ID was refused: %v", err)
	}
}

// Extra header names are 1 to 76 printable ASCII characters; DEL is not
// one, nor is it allowed in a value. A value may end in a space.
func TestExtraHeaderBounds(t *testing.T) {
	m := baseMessage()
	m.Headers = []Header{{"X-" + strings.Repeat("n", maxHeaderNameLen-2), "v"}, {"X-Trailing", "v "}, {"X-Word", strings.Repeat("w", maxRawWordLen)}}
	if _, err := Build(m); err != nil {
		t.Errorf("headers at the bounds refused: %v", err)
	}
	for name, h := range map[string]Header{
		"name too long": {"X-" + strings.Repeat("n", maxHeaderNameLen-1), "v"},
		"DEL in name":   {"X-A\x7f", "v"},
		"DEL in value":  {"X-A", "a\x7fb"},
		"word too long": {"X-A", strings.Repeat("w", maxRawWordLen+1)},
	} {
		m := baseMessage()
		m.Headers = []Header{h}
		if _, err := Build(m); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// File names with MIME special characters (parentheses, brackets, '@',
// ',', ';', '=', '?') or, in non-ASCII names, RFC 2231's own '%', '*' and
// "'" are written so that the recipient's client reads them as given.
func TestFilenamesWithSpecialCharactersReadAsGiven(t *testing.T) {
	for _, name := range []string{"report(1).pdf", "a[1]<2>@b,c;d=e?.txt", `x"y\z.txt`, "naïve 100%*'s.pdf", "ü%41.txt", "ü'*'.txt"} {
		m := baseMessage()
		m.Attachments = []Attachment{{Filename: name, Content: []byte("a")}}
		_, _, root := mustParse(t, m)
		n := root.parts[1]
		if n.dispParams["filename"] != name || n.params["name"] != name {
			t.Errorf("%q read back as filename %q, name %q", name, n.dispParams["filename"], n.params["name"])
		}
	}
}

// A non-ASCII file name is also in Content-Type's name as encoded-words,
// the only form clients without RFC 2231 read; its lines stay short.
func TestNonASCIIFilenameHasALegacyName(t *testing.T) {
	for _, name := range []string{"Rechnung März.pdf", `ü"q"\.txt`, strings.Repeat("ü", 255), strings.Repeat("😀", 255)} {
		m := baseMessage()
		m.Attachments = []Attachment{{Filename: name, Content: []byte("a")}}
		raw, _, root := mustParse(t, m)
		n := root.parts[1]
		if !strings.Contains(n.header.Get("Content-Type"), `name="=?utf-8?`) {
			t.Errorf("%.20q: Content-Type = %q, no encoded-word name", name, n.header.Get("Content-Type"))
		}
		if n.params["name"] != name || n.dispParams["filename"] != name {
			t.Errorf("%.20q read back as name %q, filename %q", name, n.params["name"], n.dispParams["filename"])
		}
		if !strings.Contains(n.header.Get("Content-Disposition"), "filename*") {
			t.Errorf("%.20q: Content-Disposition = %q, not RFC 2231", name, n.header.Get("Content-Disposition"))
		}
		for _, line := range strings.Split(string(raw), "\r\n") {
			if strings.Contains(line, "=?utf-8?") && len(line) > preferredLineLen {
				t.Errorf("%.20q: header line of %d characters: %.40q", name, len(line), line)
			}
		}
	}
}

// The longest file name the API takes (255 characters), in any script, is
// split into RFC 2231 continuations and read back whole.
func TestLongNonASCIIFilenameIsSplit(t *testing.T) {
	for _, name := range []string{strings.Repeat("ü", 255), strings.Repeat("😀", 255)} {
		m := baseMessage()
		m.Attachments = []Attachment{{Filename: name, Content: []byte("a")}}
		_, _, root := mustParse(t, m)
		if got := root.parts[1].dispParams["filename"]; got != name {
			t.Errorf("a 255-character name read back as %d characters", len([]rune(got)))
		}
	}
}

// Every RFC 2047 encoded-word in the headers fits RFC 2047's 75 characters,
// past which strict clients show the raw =?utf-8?...?= text.
func TestEncodedWordsAreAtMost75Characters(t *testing.T) {
	m := baseMessage()
	m.Subject = strings.Repeat("Größenänderung ", 40)
	m.From.Name = strings.Repeat("注文確認", 60)
	m.To = []Address{{Name: strings.Repeat("Ünïcödé ", 30), Email: "u@example.com"}}
	raw, _, _ := mustParse(t, m)
	header := string(raw[:bytes.Index(raw, []byte("\r\n\r\n"))])
	words := 0
	for _, f := range strings.Fields(header) {
		for _, w := range strings.SplitAfter(f, "?=") {
			if i := strings.Index(w, "=?"); i >= 0 {
				w = w[i:]
				words++
				if len(w) > 75 {
					t.Errorf("encoded-word of %d characters: %s", len(w), w)
				}
			}
		}
	}
	if words == 0 {
		t.Fatal("no encoded-words found")
	}
}

// Short headers are written on one line, and a parameter list does not end
// in a stray ";".
func TestShortHeadersWrittenOnOneLine(t *testing.T) {
	raw, _, _ := mustParse(t, baseMessage())
	for _, want := range []string{
		"From: Acme <hello@acme.com>\r\nTo: bob@example.com\r\nSubject: Your receipt\r\n",
		"\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: quoted-printable\r\n\r\n",
	} {
		if !bytes.Contains(raw, []byte(want)) {
			t.Errorf("message lacks %q:\n%s", want, raw)
		}
	}
}

// A type known only to Go's MIME table (not the built-in one) is used.
func TestContentTypeForFallsBackToGoTable(t *testing.T) {
	if got := ContentTypeFor("module.wasm"); got != "application/wasm" {
		t.Errorf("ContentTypeFor(module.wasm) = %q", got)
	}
}

// Domains with digits, hyphens and non-ASCII letters or marks are taken;
// ASCII punctuation other than '-' is not.
func TestDomainLabelCharacters(t *testing.T) {
	for _, ok := range []string{"a@b1.com", "a@1b.com", "a@b-c.com", "a@B.COM", "a@bücher.de", "a@ñ.es", "a@x\u0301y.com"} {
		if _, err := ParseAddress(ok); err != nil {
			t.Errorf("ParseAddress(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"a@b+c.com", "a@b/c.com", "a@b*c.com", "a@b\u2603.com", "a@b\u00a7.com"} {
		if _, err := ParseAddress(bad); err == nil || !errors.Is(err, ErrInvalidAddress) {
			t.Errorf("ParseAddress(%q) = %v, want refused", bad, err)
		}
	}
}

// None of the headers Build writes itself (nor Bcc or Sender) can be
// supplied again as an extra header, in any case: a second From or Sender
// would let a message claim another sender.
func TestEveryReservedHeaderRefused(t *testing.T) {
	for _, name := range []string{"From", "to", "CC", "Bcc", "Reply-To", "Subject", "Date", "Message-ID", "MIME-Version", "Sender", "Content-Type", "content-transfer-encoding", "Content-Disposition", "Content-ID"} {
		m := baseMessage()
		m.Headers = []Header{{name, "x@example.com"}}
		if _, err := Build(m); err == nil {
			t.Errorf("extra header %s accepted", name)
		}
	}
}

// A media type of 255 characters and a parameter name of 64 are taken; one
// more character is refused.
func TestContentTypeLengthLimitsAreInclusive(t *testing.T) {
	longType := "application/" + strings.Repeat("x", 255-len("application/"))
	longParam := "text/plain; " + strings.Repeat("p", 64) + "=1"
	for _, ct := range []string{longType, longParam} {
		if err := CheckContentType(ct); err != nil {
			t.Errorf("content type %.40q…: %v", ct, err)
		}
	}
	for _, ct := range []string{longType + "x", "text/plain; " + strings.Repeat("p", 65) + "=1"} {
		if err := CheckContentType(ct); err == nil {
			t.Errorf("content type %.40q… accepted", ct)
		}
	}
}

// Headers fold only at a single space between two other characters:
// readers that trim whitespace around a fold (Go's textproto among them)
// would otherwise read a double space as one.
func TestHeadersFoldOnlyAtSingleSpaces(t *testing.T) {
	for in, want := range map[string][]string{
		"a b":      {"a", "b"},
		"a  b c":   {"a  b", "c"},
		"a b  c":   {"a", "b  c"},
		" lead x":  {" lead", "x"},
		"x trail ": {"x", "trail "},
	} {
		if got := splitFoldable(in); !slices.Equal(got, want) {
			t.Errorf("splitFoldable(%q) = %q, want %q", in, got, want)
		}
	}
}

// A multipart or message type that the system's MIME table gives an
// extension (.mht is message/rfc822 on many systems) is not used: such
// parts cannot be base64 attachments.
func TestContentTypeForNeverGuessesAContainerType(t *testing.T) {
	for ext, typ := range map[string]string{".mrtestmixed": "multipart/mixed", ".mrtestmsg": "message/rfc822"} {
		if err := mime.AddExtensionType(ext, typ); err != nil {
			t.Fatal(err)
		}
		if got := ContentTypeFor("page" + ext); got != "application/octet-stream" {
			t.Errorf("ContentTypeFor(page%s) = %q", ext, got)
		}
	}
}

func TestBodiesProtectFromAndDot(t *testing.T) {
	m := baseMessage()
	m.Text = "From the start\n.\n" + strings.Repeat("x", 70) + "From here on " + strings.Repeat("y", 80) + "\nFrom"
	m.HTML = "From <b>x</b>\r\n.\r\n"
	raw, _, root := mustParse(t, m)
	if got, want := string(root.leaves("text/plain")[0].body), normalizeNewlines(m.Text); got != want {
		t.Errorf("text:\n got %q\nwant %q", got, want)
	}
	if got := string(root.leaves("text/html")[0].body); got != normalizeNewlines(m.HTML) {
		t.Errorf("html:\n got %q", got)
	}
	for _, l := range strings.Split(string(raw), "\r\n") {
		if strings.HasPrefix(l, "From ") || l == "." || len(l) > 998 {
			t.Errorf("line %q left as is", l)
		}
	}
}

// Lines that transports corrupt are encoded wherever they fall in the
// quoted-printable text; other text is left as it is, without a copy.
func TestProtectLines(t *testing.T) {
	for in, want := range map[string]string{
		".":                "=2E",
		".\r\nx":           "=2E\r\nx",
		"x\r\n.":           "x\r\n=2E",
		"x\r\n.\r\ny":      "x\r\n=2E\r\ny",
		"From a":           "=46rom a",
		"x\r\nFrom a\r\n":  "x\r\n=46rom a\r\n",
		"x.y\r\n..\r\nFro": "x.y\r\n..\r\nFro",
	} {
		if got := string(protectLines([]byte(in))); got != want {
			t.Errorf("protectLines(%q) = %q, want %q", in, got, want)
		}
	}
	plain := []byte("a.b\r\nc. d\r\n")
	if got := protectLines(plain); &got[0] != &plain[0] {
		t.Error("text with nothing to protect was copied")
	}
}
