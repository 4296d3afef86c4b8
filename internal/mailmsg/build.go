package mailmsg

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"mime"
	"mime/quotedprintable"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Attachment is a file carried by the message. With a ContentID it is an
// inline part (referenced from the HTML as cid:ContentID) inside
// multipart/related; without one it is a regular attachment inside
// multipart/mixed.
type Attachment struct {
	// Filename is the name the recipient sees; required for a regular
	// attachment, optional for an inline one.
	Filename string
	// ContentType is the MIME type; empty means ContentTypeFor(Filename).
	ContentType string
	// ContentID is the bare id ("logo", "logo@acme"); surrounding angle
	// brackets are tolerated and removed.
	ContentID string
	Content   []byte
}

// Header is an extra message header, e.g. X-Mailroom-Email-Id.
type Header struct {
	Name, Value string
}

// Message is everything needed to render one email.
type Message struct {
	From        Address
	To, Cc, Bcc []Address // Bcc is validated but never written
	ReplyTo     []Address
	Subject     string
	// HTML and Text are the bodies; at least one must be non-empty. Line
	// endings are normalised to CRLF.
	HTML, Text  string
	Attachments []Attachment
	// MessageID is "local@domain" without angle brackets; Build writes
	// "<local@domain>". Empty means a random id on the From domain.
	MessageID string
	// Date is the Date header; zero means now.
	Date time.Time
	// Headers are written after the standard ones, in order.
	Headers []Header
}

// reservedHeaders are written by Build itself (or, for Bcc, never) and may
// not be supplied as extra headers; neither may any Content-* header.
var reservedHeaders = map[string]bool{
	"from": true, "to": true, "cc": true, "bcc": true, "reply-to": true,
	"subject": true, "date": true, "message-id": true, "mime-version": true,
	"sender": true,
}

const (
	maxContentIDLen  = 255 // its header line is then 270 octets, well inside 998
	maxHeaderNameLen = 76
	maxMediaTypeLen  = 255 // RFC 6838: type and subtype of at most 127 each
	maxParamNameLen  = 64
)

// Validate reports the first reason Build would refuse m, without rendering
// anything. Errors start with "mailmsg: " and name the offending field.
func (m Message) Validate() error {
	if m.From.Email == "" {
		return errors.New("mailmsg: from is required")
	}
	if err := checkAddress("from", m.From); err != nil {
		return err
	}
	if len(m.To)+len(m.Cc)+len(m.Bcc) == 0 {
		return errors.New("mailmsg: at least one recipient (to, cc or bcc) is required")
	}
	for _, l := range []struct {
		field string
		addrs []Address
	}{{"to", m.To}, {"cc", m.Cc}, {"bcc", m.Bcc}, {"reply_to", m.ReplyTo}} {
		for i, a := range l.addrs {
			if err := checkAddress(fmt.Sprintf("%s[%d]", l.field, i), a); err != nil {
				return err
			}
		}
	}
	if err := checkText(m.Subject); err != nil {
		return fmt.Errorf("mailmsg: subject %w", err)
	}
	if m.HTML == "" && m.Text == "" {
		return errors.New("mailmsg: html or text is required")
	}
	if !utf8.ValidString(m.HTML) {
		return errors.New("mailmsg: html is not valid UTF-8")
	}
	if !utf8.ValidString(m.Text) {
		return errors.New("mailmsg: text is not valid UTF-8")
	}
	if m.MessageID != "" {
		if _, err := messageID(m.MessageID); err != nil {
			return err
		}
	}
	for i, h := range m.Headers {
		if err := checkHeader(h); err != nil {
			return fmt.Errorf("mailmsg: headers[%d]: %w", i, err)
		}
	}
	cids := map[string]bool{}
	for i, a := range m.Attachments {
		if err := checkAttachment(a); err != nil {
			return fmt.Errorf("mailmsg: attachments[%d]: %w", i, err)
		}
		if a.ContentID != "" {
			id := ContentIDKey(a.ContentID)
			if cids[id] {
				return fmt.Errorf("mailmsg: attachments[%d]: content_id %q is used twice", i, a.ContentID)
			}
			cids[id] = true
		}
	}
	return nil
}

func checkAddress(field string, a Address) error {
	if err := checkEmail(a.Email); err != nil {
		return fmt.Errorf("mailmsg: %s %w", field, err)
	}
	if err := checkName(a.Name); err != nil {
		return fmt.Errorf("mailmsg: %s display name %w", field, err)
	}
	return nil
}

// checkHeader accepts RFC 5322 field names (printable ASCII without colon)
// that Build does not write itself, and values of printable ASCII and tabs.
func checkHeader(h Header) error {
	if h.Name == "" || len(h.Name) > maxHeaderNameLen {
		return errors.New("header name is empty or too long")
	}
	for i := 0; i < len(h.Name); i++ {
		if c := h.Name[i]; c <= 0x20 || c >= 0x7f || c == ':' {
			return fmt.Errorf("header name %q has characters that are not allowed", h.Name)
		}
	}
	lower := strings.ToLower(h.Name)
	if reservedHeaders[lower] || strings.HasPrefix(lower, "content-") {
		return fmt.Errorf("header %s is set by the builder and cannot be overridden", h.Name)
	}
	if strings.ContainsAny(h.Value, "\r\n") {
		return fmt.Errorf("header %s value must not contain line breaks", h.Name)
	}
	for i := 0; i < len(h.Value); i++ {
		if c := h.Value[i]; (c < 0x20 && c != '\t') || c >= 0x7f {
			return fmt.Errorf("header %s value must be printable ASCII", h.Name)
		}
	}
	for _, t := range splitFoldable(h.Value) {
		if len(t) > maxRawWordLen {
			return fmt.Errorf("header %s value has more than %d characters without a space", h.Name, maxRawWordLen)
		}
	}
	return nil
}

func checkAttachment(a Attachment) error {
	if a.ContentID == "" && a.Filename == "" {
		return errors.New("filename is required")
	}
	if err := checkText(a.Filename); err != nil {
		return fmt.Errorf("filename %w", err)
	}
	if strings.Contains(a.Filename, "\t") {
		return errors.New("filename must not contain control characters")
	}
	if a.ContentID != "" {
		if err := CheckContentID(a.ContentID); err != nil {
			return fmt.Errorf("content_id %q %w", a.ContentID, err)
		}
	}
	_, _, err := attachmentType(a)
	return err
}

// CheckContentID says why id (angle brackets optional) cannot name an
// inline attachment, or nil: the API refuses what Build would.
func CheckContentID(id string) error {
	id = trimAngles(id)
	if id == "" || len(id) > maxContentIDLen {
		return fmt.Errorf("must be 1 to %d characters", maxContentIDLen)
	}
	for i := 0; i < len(id); i++ {
		if !isAtext(id[i]) && id[i] != '.' && id[i] != '@' {
			return errors.New("may hold only letters, digits, '.', '@' and !#$%&'*+-/=?^_`{|}~")
		}
	}
	return nil
}

// ContentIDKey is what makes two content ids the same one: they compare
// without angle brackets and without regard to case.
func ContentIDKey(id string) string { return strings.ToLower(trimAngles(id)) }

// CheckContentType says why ct cannot be an attachment's media type, or
// nil: the API refuses what Build would.
func CheckContentType(ct string) error {
	_, _, err := attachmentType(Attachment{ContentType: ct})
	return err
}

// attachmentType resolves and checks an attachment's media type, returning
// it with its parameters (sorted, "name" dropped: Build sets it).
func attachmentType(a Attachment) (string, []param, error) {
	ct := a.ContentType
	if ct == "" {
		ct = ContentTypeFor(a.Filename)
	}
	invalid := fmt.Errorf("content_type %q is not a valid attachment type", a.ContentType)
	mt, ps, err := mime.ParseMediaType(ct)
	if err != nil || !attachableType(mt) || len(mt) > maxMediaTypeLen {
		return "", nil, invalid
	}
	var params []param
	for _, k := range slices.Sorted(maps.Keys(ps)) {
		// Names are tokens (ParseMediaType checked); refuse ones that
		// could read as RFC 2231 syntax or not fit on a line.
		if len(k) > maxParamNameLen || strings.Contains(k, "*") {
			return "", nil, invalid
		}
		if k != "name" {
			params = append(params, param{attr: k, value: ps[k]})
		}
	}
	return mt, params, nil
}

func trimAngles(s string) string {
	if len(s) >= 2 && s[0] == '<' && s[len(s)-1] == '>' {
		return s[1 : len(s)-1]
	}
	return s
}

// messageID checks "local@domain" (angle brackets tolerated) and returns
// the bracketed form.
func messageID(id string) (string, error) {
	id = trimAngles(id)
	left, right, ok := strings.Cut(id, "@")
	if !ok || len(id) > maxRawWordLen || !isDotAtom(left) || !isDotAtom(right) {
		return "", fmt.Errorf("mailmsg: message ID %q must look like local@domain", id)
	}
	return "<" + id + ">", nil
}

// Build validates m (see Validate) and renders it as an RFC 5322 message
// with CRLF line endings and no line longer than 998 bytes.
//
// Layout, from the outside in: multipart/mixed when there are regular
// attachments; multipart/related when there are inline parts (its root is
// the body below); then the body: text/plain, text/html, or
// multipart/alternative with text before HTML. Text parts are UTF-8 and
// quoted-printable, attachments base64. Boundaries are random and contain
// "=_", which neither encoding can produce, so they cannot clash with
// content.
func Build(m Message) ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	size := 4096 + 2*len(m.HTML) + 2*len(m.Text)
	for _, a := range m.Attachments {
		size += 1024 + len(a.Content)*4/3*78/76
	}
	var b bytes.Buffer
	b.Grow(size)

	if err := writeHeader(&b, "From", addressTokens(m.From)); err != nil {
		return nil, err
	}
	for _, h := range []struct {
		name  string
		addrs []Address
	}{{"To", m.To}, {"Cc", m.Cc}, {"Reply-To", m.ReplyTo}} {
		if len(h.addrs) == 0 {
			continue
		}
		if err := writeHeader(&b, h.name, listTokens(h.addrs)); err != nil {
			return nil, err
		}
	}
	if err := writeHeader(&b, "Subject", subjectTokens(m.Subject)); err != nil {
		return nil, err
	}
	date := m.Date
	if date.IsZero() {
		date = time.Now()
	}
	_ = writeHeader(&b, "Date", []string{date.Format(time.RFC1123Z)})
	id := m.MessageID
	if id == "" {
		id = rand.Text() + "@" + idDomain(m.From.Email)
	}
	mid, err := messageID(id)
	if err != nil {
		return nil, err
	}
	_ = writeHeader(&b, "Message-ID", []string{mid})
	b.WriteString("MIME-Version: 1.0\r\n")
	for _, h := range m.Headers {
		if err := writeHeader(&b, h.Name, splitFoldable(h.Value)); err != nil {
			return nil, err
		}
	}

	root, err := bodyTree(m)
	if err != nil {
		return nil, err
	}
	if err := writeEntity(&b, root); err != nil {
		return nil, err
	}
	if !bytes.HasSuffix(b.Bytes(), []byte("\r\n")) {
		if root.parts == nil {
			// A quoted-printable soft line break: the message ends with
			// CRLF and the decoded body stays exactly as given.
			b.WriteString("=\r\n")
		} else {
			b.WriteString("\r\n")
		}
	}
	return b.Bytes(), nil
}

// idDomain is the right-hand side for a generated Message-ID.
func idDomain(email string) string {
	email = WireAddress(email)
	d := email[strings.LastIndexByte(email, '@')+1:]
	if isDotAtom(d) {
		return d
	}
	return "mailroom.invalid"
}

// listTokens renders an address list as foldable tokens.
func listTokens(addrs []Address) []string {
	var out []string
	for i, a := range addrs {
		t := addressTokens(a)
		if i < len(addrs)-1 {
			t[len(t)-1] += ","
		}
		out = append(out, t...)
	}
	return out
}

// entity is one MIME part: a leaf with an already encoded body, or a
// multipart with children.
type entity struct {
	mediaType   string
	params      []param
	encoding    string
	disposition string
	dispParams  []param
	contentID   string
	body        []byte
	boundary    string
	parts       []*entity
}

func bodyTree(m Message) (*entity, error) {
	var body *entity
	switch {
	case m.Text != "" && m.HTML != "":
		body = newMultipart("alternative", nil, textPart("plain", m.Text), textPart("html", m.HTML))
	case m.HTML != "":
		body = textPart("html", m.HTML)
	default:
		body = textPart("plain", m.Text)
	}
	var inline, regular []*entity
	for _, a := range m.Attachments {
		e, err := attachmentPart(a)
		if err != nil {
			return nil, err
		}
		if a.ContentID != "" {
			inline = append(inline, e)
		} else {
			regular = append(regular, e)
		}
	}
	if len(inline) > 0 {
		// RFC 2387: "type" names the root part's media type.
		body = newMultipart("related", []param{{attr: "type", value: body.mediaType}}, append([]*entity{body}, inline...)...)
	}
	if len(regular) > 0 {
		body = newMultipart("mixed", nil, append([]*entity{body}, regular...)...)
	}
	return body, nil
}

func newMultipart(sub string, extra []param, parts ...*entity) *entity {
	boundary := "=_mr" + rand.Text()
	return &entity{
		mediaType: "multipart/" + sub,
		params:    append([]param{{attr: "boundary", value: boundary}}, extra...),
		boundary:  boundary,
		parts:     parts,
	}
}

// normalizeNewlines turns CR LF, lone CR and lone LF into CR LF.
func normalizeNewlines(s string) string {
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	return strings.ReplaceAll(s, "\n", "\r\n")
}

func textPart(sub, s string) *entity {
	var buf bytes.Buffer
	w := quotedprintable.NewWriter(&buf)
	_, _ = w.Write([]byte(normalizeNewlines(s))) // writes to a bytes.Buffer cannot fail
	_ = w.Close()
	return &entity{
		mediaType: "text/" + sub,
		params:    []param{{attr: "charset", value: "utf-8"}},
		encoding:  "quoted-printable",
		body:      protectLines(buf.Bytes()),
	}
}

// protectLines encodes what RFC 2049 section 3 (8) says transports corrupt:
// a line starting "From " (mbox ">From " quoting, which breaks a DKIM body
// hash) becomes "=46rom ", and a "." alone on a line becomes "=2E". A line
// that "=46" would take past 76 characters is cut after it (a soft break).
func protectLines(qp []byte) []byte {
	// Most bodies have neither: they are returned without a copy.
	if !bytes.HasPrefix(qp, []byte("From ")) && !bytes.Contains(qp, []byte("\r\nFrom ")) &&
		!bytes.HasPrefix(qp, []byte(".\r\n")) && !bytes.Contains(qp, []byte("\r\n.\r\n")) &&
		!bytes.HasSuffix(qp, []byte("\r\n.")) && string(qp) != "." {
		return qp
	}
	lines := bytes.Split(qp, []byte("\r\n"))
	for i, l := range lines {
		switch {
		case bytes.HasPrefix(l, []byte("From ")):
			if len(l)+2 <= 76 {
				lines[i] = append([]byte("=46"), l[1:]...)
			} else {
				lines[i] = append([]byte("=46=\r\n"), l[1:]...)
			}
		case len(l) == 1 && l[0] == '.':
			lines[i] = []byte("=2E")
		}
	}
	return bytes.Join(lines, []byte("\r\n"))
}

var b64 = base64.StdEncoding

func attachmentPart(a Attachment) (*entity, error) {
	mt, params, err := attachmentType(a)
	if err != nil {
		return nil, err
	}
	e := &entity{mediaType: mt, params: params, encoding: "base64", disposition: "attachment"}
	if a.Filename != "" {
		// A non-ASCII name goes as RFC 2231 in the disposition, which is
		// the standard and what current clients read first, and as
		// encoded-words in Content-Type's name, which older clients and
		// some webmail read instead (as Thunderbird and Nodemailer write it).
		e.params = append(e.params, param{attr: "name", value: a.Filename, legacy: true})
		e.dispParams = []param{{attr: "filename", value: a.Filename}}
	}
	if a.ContentID != "" {
		e.disposition = "inline"
		e.contentID = trimAngles(a.ContentID)
	}
	enc := make([]byte, b64.EncodedLen(len(a.Content)))
	b64.Encode(enc, a.Content)
	body := make([]byte, 0, len(enc)+len(enc)/76*2)
	for len(enc) > 76 {
		body = append(body, enc[:76]...)
		body = append(body, '\r', '\n')
		enc = enc[76:]
	}
	e.body = append(body, enc...)
	return e, nil
}

// writeEntity writes e's Content-* headers, the blank line and its body. A
// multipart body ends with the close delimiter and no CRLF: the caller's
// next delimiter (or Build) supplies it.
func writeEntity(b *bytes.Buffer, e *entity) error {
	if err := writeParamHeader(b, "Content-Type", e.mediaType, e.params); err != nil {
		return err
	}
	if e.encoding != "" {
		_ = writeHeader(b, "Content-Transfer-Encoding", []string{e.encoding})
	}
	if e.disposition != "" {
		if err := writeParamHeader(b, "Content-Disposition", e.disposition, e.dispParams); err != nil {
			return err
		}
	}
	if e.contentID != "" {
		_ = writeHeader(b, "Content-ID", []string{"<" + e.contentID + ">"})
	}
	b.WriteString("\r\n")
	if e.parts == nil {
		b.Write(e.body)
		return nil
	}
	for _, p := range e.parts {
		b.WriteString("--" + e.boundary + "\r\n")
		if err := writeEntity(b, p); err != nil {
			return err
		}
		b.WriteString("\r\n")
	}
	b.WriteString("--" + e.boundary + "--")
	return nil
}
