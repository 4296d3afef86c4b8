package mailmsg

import (
	"bytes"
	"maps"
	"mime"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// Flags of FuzzBuild's last argument, choosing which parts of the message
// the fuzzed strings go into.
const (
	fuzzFirstAttachment  = 1 << iota // Attachment{filename, cid, content}
	fuzzSecondAttachment             // a regular attachment filename+".txt"
	fuzzCcNamedSubject               // a Cc whose display name is the subject
	fuzzExtraHeader                  // X-Fuzz: toName
	fuzzReplyTo                      // Reply-To named fromName+toName
	fuzzContentType                  // the first attachment's ContentType is toName
)

// acceptableText mirrors the documented rule for subjects and names: valid
// UTF-8 without control characters other than tab.
func acceptableText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if (r < 0x20 && r != '\t') || r == 0x7f {
			return false
		}
	}
	return true
}

func acceptableCID(cid string) bool {
	cid = trimAngles(cid)
	if cid == "" || len(cid) > maxContentIDLen {
		return false
	}
	for i := 0; i < len(cid); i++ {
		if !isAtext(cid[i]) && cid[i] != '.' && cid[i] != '@' {
			return false
		}
	}
	return true
}

func acceptableHeaderValue(v string) bool {
	for i := 0; i < len(v); i++ {
		if (v[i] < 0x20 && v[i] != '\t') || v[i] >= 0x7f {
			return false
		}
	}
	for _, t := range splitFoldable(v) {
		if len(t) > maxRawWordLen {
			return false
		}
	}
	return true
}

func FuzzBuild(f *testing.F) {
	f.Add("Your receipt", "Acme", "Bob", "Thanks!", "<p>Thanks!</p>", "invoice.pdf", "", []byte("%PDF-1.7"), uint8(fuzzFirstAttachment))
	f.Add("Grüße — ✓", "Jörg Müller", "山田 太郎", "Zeile 1\nZeile 2\r\n", "", "Rechnung März.pdf", "", []byte{0, 1, 2, 255}, uint8(fuzzFirstAttachment|fuzzCcNamedSubject))
	f.Add("=?utf-8?q?x?=  two  spaces ", `Doe, "JD"`, " padded ", "", "<img src=cid:logo>", "logo.png", "logo", []byte("\x89PNG"), uint8(fuzzFirstAttachment|fuzzSecondAttachment|fuzzReplyTo))
	f.Add(strings.Repeat("long subject ", 90), strings.Repeat("n", 300), "tab\tname", strings.Repeat("x", 200)+" \n", strings.Repeat("é", 500), strings.Repeat("ü", 120)+".csv", "<a@b>", []byte(strings.Repeat("z", 100)), uint8(0xff))
	f.Add("", "", "", "=", "=\r\n", "", "c.d@e", []byte{}, uint8(fuzzFirstAttachment|fuzzExtraHeader))
	f.Add("q", strings.Repeat(`"\`, 300), "text/plain; charset=utf-8; x*=utf-8''%0D%0ABcc%3A%20v", "t", "", "a.txt", "", []byte("a"), uint8(fuzzFirstAttachment|fuzzContentType))

	date := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	f.Fuzz(func(t *testing.T, subject, fromName, toName, text, html, filename, cid string, content []byte, flags uint8) {
		m := Message{
			From:      Address{Name: fromName, Email: "from@acme.com"},
			To:        []Address{{Name: toName, Email: "to@example.com"}},
			Bcc:       []Address{{Name: "Hidden", Email: "zq9-bcc@hidden.example"}},
			Subject:   subject,
			Text:      text,
			HTML:      html,
			MessageID: "fuzz@acme.com",
			Date:      date,
		}
		ok := acceptableText(subject) && acceptableText(fromName) && acceptableText(toName) &&
			utf8.ValidString(text) && utf8.ValidString(html) && (text != "" || html != "")
		var inline, regular []Attachment
		if flags&fuzzFirstAttachment != 0 {
			a := Attachment{Filename: filename, ContentID: cid, Content: content}
			m.Attachments = append(m.Attachments, a)
			ok = ok && acceptableText(filename) && !strings.Contains(filename, "\t")
			if cid != "" {
				inline = append(inline, a)
				ok = ok && acceptableCID(cid)
			} else {
				regular = append(regular, a)
				ok = ok && filename != ""
			}
		}
		if flags&fuzzSecondAttachment != 0 {
			a := Attachment{Filename: filename + ".txt", Content: content[len(content)/2:]}
			m.Attachments = append(m.Attachments, a)
			regular = append(regular, a)
			ok = ok && acceptableText(filename) && !strings.Contains(filename, "\t")
		}
		if flags&fuzzCcNamedSubject != 0 {
			m.Cc = []Address{{Name: subject, Email: "cc@example.com"}}
		}
		if flags&fuzzExtraHeader != 0 {
			m.Headers = []Header{{Name: "X-Fuzz", Value: toName}}
			ok = ok && acceptableHeaderValue(toName)
		}
		if flags&fuzzReplyTo != 0 {
			m.ReplyTo = []Address{{Name: fromName + toName, Email: "reply@acme.com"}}
		}
		// Whether a free-form content type is acceptable is ParseMediaType's
		// call; then only the round trip of its parameters is checked.
		var wantType string
		var wantParams map[string]string
		judged := true
		if flags&fuzzContentType != 0 && len(m.Attachments) > 0 && flags&fuzzFirstAttachment != 0 {
			m.Attachments[0].ContentType = toName
			if toName != "" {
				judged = false
				wantType, wantParams, _ = mime.ParseMediaType(toName)
				if wantParams != nil {
					delete(wantParams, "name")
					if filename != "" {
						wantParams["name"] = filename
					}
				}
			}
		}

		raw, err := Build(m)
		if err != nil {
			if ok && judged {
				t.Fatalf("Build refused acceptable input: %v", err)
			}
			return
		}
		if !ok {
			t.Fatalf("Build accepted input the documented rules refuse")
		}
		msg, root, err := parseMessage(raw)
		if err != nil {
			t.Fatalf("output does not parse back: %v\n%s", err, raw)
		}
		for i, c := range raw {
			if c >= 0x80 {
				t.Fatalf("8-bit byte at %d in a message with ASCII addresses", i)
			}
		}
		if !strings.Contains(subject+fromName+toName+filename+cid+string(content), "hidden.example") &&
			bytes.Contains(raw, []byte("hidden.example")) {
			t.Fatalf("Bcc leaked")
		}
		if got, err := dec.DecodeHeader(msg.Header.Get("Subject")); err != nil || got != subject {
			t.Fatalf("subject: got %q (%v), want %q", got, err, subject)
		}
		checkAddrName := func(field, want string) {
			t.Helper()
			l, err := msg.Header.AddressList(field)
			if err != nil || len(l) != 1 || l[0].Name != want {
				t.Fatalf("%s name: got %v (%v), want %q; header %q", field, l, err, want, msg.Header.Get(field))
			}
		}
		checkAddrName("From", fromName)
		checkAddrName("To", toName)
		if m.Cc != nil {
			checkAddrName("Cc", subject)
		}
		if m.ReplyTo != nil {
			checkAddrName("Reply-To", fromName+toName)
		}
		if m.Headers != nil && msg.Header.Get("X-Fuzz") != strings.Trim(toName, " \t") {
			t.Fatalf("X-Fuzz: got %q, want %q", msg.Header.Get("X-Fuzz"), toName)
		}

		// Bodies are the leaves without a Content-Disposition.
		var bodies []*node
		root.walk(func(n *node) {
			if n.parts == nil && n.disposition == "" {
				bodies = append(bodies, n)
			}
		})
		var wantBodies []string
		var wantTypes []string
		if text != "" {
			wantBodies, wantTypes = append(wantBodies, normalizeNewlines(text)), append(wantTypes, "text/plain")
		}
		if html != "" {
			wantBodies, wantTypes = append(wantBodies, normalizeNewlines(html)), append(wantTypes, "text/html")
		}
		if len(bodies) != len(wantBodies) {
			t.Fatalf("found %d body parts, want %d (%s)", len(bodies), len(wantBodies), root.shape())
		}
		for i, b := range bodies {
			if b.mediaType != wantTypes[i] || string(b.body) != wantBodies[i] {
				t.Fatalf("body %d: got %s %q, want %s %q", i, b.mediaType, b.body, wantTypes[i], wantBodies[i])
			}
		}

		// Attachments, in order: inline ones inside related, regular ones in mixed.
		var gotInline, gotRegular []*node
		root.walk(func(n *node) {
			switch {
			case n.parts != nil || n.disposition == "":
			case n.disposition == "inline":
				gotInline = append(gotInline, n)
			default:
				gotRegular = append(gotRegular, n)
			}
		})
		if len(gotInline) != len(inline) || len(gotRegular) != len(regular) {
			t.Fatalf("attachments: got %d inline, %d regular; want %d, %d", len(gotInline), len(gotRegular), len(inline), len(regular))
		}
		check := func(n *node, a Attachment) {
			t.Helper()
			if n.dispParams["filename"] != a.Filename {
				t.Fatalf("filename: got %q, want %q", n.dispParams["filename"], a.Filename)
			}
			if a.ContentID != "" && n.header.Get("Content-ID") != "<"+trimAngles(a.ContentID)+">" {
				t.Fatalf("Content-ID: got %q, want <%s>", n.header.Get("Content-ID"), trimAngles(a.ContentID))
			}
			if !bytes.Equal(n.body, a.Content) {
				t.Fatalf("attachment %q bytes differ", a.Filename)
			}
		}
		if wantType != "" {
			n := gotRegular
			if cid != "" {
				n = gotInline
			}
			if n[0].mediaType != wantType || !maps.Equal(n[0].params, wantParams) {
				t.Fatalf("content type: got %s %v, want %s %v", n[0].mediaType, n[0].params, wantType, wantParams)
			}
		}
		for i := range inline {
			check(gotInline[i], inline[i])
		}
		for i := range regular {
			check(gotRegular[i], regular[i])
		}

		// Nesting: mixed around related around the body.
		shape := root.shape()
		if len(regular) > 0 != strings.HasPrefix(shape, "multipart/mixed[") {
			t.Fatalf("shape %s with %d regular attachments", shape, len(regular))
		}
		if len(inline) > 0 != strings.Contains(shape, "multipart/related[") {
			t.Fatalf("shape %s with %d inline parts", shape, len(inline))
		}
		if (text != "" && html != "") != strings.Contains(shape, "multipart/alternative[text/plain,text/html]") {
			t.Fatalf("shape %s for text %t html %t", shape, text != "", html != "")
		}
	})
}
