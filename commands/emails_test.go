package commands_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	dnslib "github.com/miekg/dns"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/domain/webhook"
	"github.com/mailroom/mailroom/internal/blob"
	"github.com/mailroom/mailroom/internal/datakeys"
	"github.com/mailroom/mailroom/internal/dnscheck"
	"github.com/mailroom/mailroom/internal/dnscheck/dnstest"
	"github.com/mailroom/mailroom/internal/egress"
	"github.com/mailroom/mailroom/projections"
)

// sendRequest is a valid request from example.com and its body as sent.
func sendRequest(t *testing.T) (commands.SendEmail, []byte) {
	t.Helper()
	req := commands.SendEmail{
		From:    "Acme <news@Example.com>",
		To:      []string{"ann@example.org"},
		Cc:      []string{"Bob <bob@example.org>"},
		Bcc:     []string{"audit@example.net"},
		ReplyTo: []string{"help@example.com"},
		Subject: "Your receipt",
		HTML:    "<p>Thanks</p>",
		Text:    "Thanks",
		Tags:    map[string]string{"kind": "receipt"},
		Attachments: []commands.SendAttachment{
			{Filename: "receipt.pdf", Content: base64.StdEncoding.EncodeToString([]byte("%PDF-1.7"))},
		},
	}
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return req, body
}

func TestSendEmailQueuesTheRequestedEmail(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct := h.newAccount(t)
	domainID := h.verifiedDomain(t, acct, "example.com")
	h.appended(t)
	h.waitedFor()
	req, body := sendRequest(t) // from Example.com: domains match whatever the case

	got, err := h.svc.SendEmail(ctx, acct, req, "", body, meta)
	if err != nil {
		t.Fatal(err)
	}
	want := commands.Accepted{ID: got.ID, CreatedAt: start, Recipients: 3, Attachments: 1}
	if got != want {
		t.Fatalf("accepted %+v, want %+v", got, want)
	}
	if n := h.appended(t); n != 1 {
		t.Fatalf("a send appended %d events, want 1", n)
	}
	recs, _ := h.stream(t, email.Stream(got.ID))
	if m := recs[0].Metadata; m.Actor != meta.Actor || m.RequestID != meta.RequestID || m.ClientRequestID != meta.ClientRequestID {
		t.Fatalf("metadata %+v, want the command's %+v", m, meta)
	}
	q := only[*email.Queued](t, h, email.Stream(got.ID))
	// A send without an Idempotency-Key is never repeated: it keeps no
	// fingerprint of its request.
	if q.EmailID != got.ID || q.AccountID != acct || q.DomainID != domainID || q.From != req.From ||
		q.FromEmail != "news@Example.com" || q.Subject != req.Subject || !q.QueuedAt.Equal(start) ||
		q.RequestHash != "" {
		t.Fatalf("queued %+v", q)
	}
	for _, l := range []struct {
		name      string
		got, want []string
	}{{"to", q.To, req.To}, {"cc", q.Cc, req.Cc}, {"bcc", q.Bcc, req.Bcc}, {"reply_to", q.ReplyTo, req.ReplyTo}} {
		if !slices.Equal(l.got, l.want) {
			t.Errorf("%s %q, want %q", l.name, l.got, l.want)
		}
	}
	if q.Tags["kind"] != "receipt" || len(q.Tags) != 1 {
		t.Errorf("tags %v", q.Tags)
	}
	// The bytes are in blob storage, sealed for the email; the event names
	// them by digest.
	for _, c := range []struct{ digest, content string }{
		{q.HTMLDigest, req.HTML}, {q.TextDigest, req.Text}, {q.Attachments[0].Digest, "%PDF-1.7"},
	} {
		if b, err := h.content().Get(ctx, got.ID, blob.Digest(c.digest)); err != nil || string(b) != c.content {
			t.Errorf("blob %s: %q, %v; want %q", c.digest, b, err, c.content)
		}
		if b, err := h.blobs.Get(ctx, blob.Digest(c.digest)); err != nil || bytes.Contains(b, []byte(c.content)) {
			t.Errorf("stored blob %s: %q, %v; want %q sealed", c.digest, b, err, c.content)
		}
	}
	if a := q.Attachments[0]; a.Filename != "receipt.pdf" || a.ContentType != "application/pdf" || a.SizeBytes != 8 {
		t.Errorf("attachment %+v", a)
	}
	if w := h.waitedFor(); !slices.Equal(w, []projections.Name{projections.EmailsName}) {
		t.Errorf("waited for %q, want the emails projection", w)
	}
}

func TestSendEmailSealsAnAttachmentURL(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct := h.newAccount(t)
	h.verifiedDomain(t, acct, "example.com")
	req, body := sendRequest(t)
	const url = "https://192.0.2.7/files/invoice.pdf?X-Amz-Signature=secret"
	req.Attachments = []commands.SendAttachment{{Path: url}}

	got, err := h.svc.SendEmail(ctx, acct, req, "", body, meta)
	if err != nil {
		t.Fatal(err)
	}
	a := only[*email.Queued](t, h, email.Stream(got.ID)).Attachments[0]
	if a.Path != "https://192.0.2.7/files/invoice.pdf" || a.Filename != "invoice.pdf" || a.Digest != "" {
		t.Fatalf("attachment %+v: want the URL without its query, named after it, not downloaded", a)
	}
	if strings.Contains(a.SealedPath, "secret") {
		t.Fatalf("sealed path %q shows the signature", a.SealedPath)
	}
	if u, err := h.svc.AttachmentURL(got.ID, a); err != nil || u != url {
		t.Fatalf("attachment URL %q, %v; want %q", u, err, url)
	}
}

func TestSendEmailRefusesInvalidRequests(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct := h.newAccount(t)
	h.verifiedDomain(t, acct, "example.com")
	h.appended(t)
	for _, c := range []struct {
		name   string
		change func(*commands.SendEmail)
		key    string
		want   []string
	}{
		{"nothing", func(r *commands.SendEmail) { *r = commands.SendEmail{} }, "", []string{"from", "to", "subject", "html"}},
		{"bad addresses", func(r *commands.SendEmail) {
			r.From, r.Cc = "news at example.com", []string{"ok@example.org", "not an address"}
		}, "", []string{"from", "cc.1"}},
		{"bad addresses in every list", func(r *commands.SendEmail) {
			r.To, r.Bcc, r.ReplyTo = []string{"to at example.org"}, []string{"ok@example.org", "bcc@"}, []string{"reply to"}
		}, "", []string{"to.0", "bcc.1", "reply_to.0"}},
		{"bad addresses at the limits", func(r *commands.SendEmail) {
			r.To = append(slices.Repeat([]string{"x@example.org"}, commands.MaxRecipients-3), "to at example.org")
			r.Cc, r.Bcc = []string{"cc@"}, []string{"bcc@"}
			r.ReplyTo = append(slices.Repeat([]string{"help@example.com"}, commands.MaxReplyTo-1), "reply to")
		}, "", []string{fmt.Sprintf("to.%d", commands.MaxRecipients-3), "cc.0", "bcc.0", fmt.Sprintf("reply_to.%d", commands.MaxReplyTo-1)}},
		{"too many recipients", func(r *commands.SendEmail) {
			r.To = make([]string, commands.MaxRecipients)
			for i := range r.To {
				r.To[i] = "x@example.org"
			}
		}, "", []string{"to"}},
		{"subject with a line break", func(r *commands.SendEmail) { r.Subject = "Hi\r\nBcc: all@example.org" }, "", []string{"subject"}},
		{"bad tag value", func(r *commands.SendEmail) { r.Tags = map[string]string{"kind": "not ok"} }, "", []string{"tags.kind"}},
		{"content and path", func(r *commands.SendEmail) { r.Attachments[0].Path = "https://192.0.2.7/a.pdf" }, "", []string{"attachments.0.content"}},
		{"content not base64", func(r *commands.SendEmail) { r.Attachments[0].Content = "%%%" }, "", []string{"attachments.0.content"}},
		{"private path", func(r *commands.SendEmail) {
			r.Attachments = []commands.SendAttachment{{Path: "https://10.1.2.3/a.pdf"}}
		}, "", []string{"attachments.0.path"}},
		{"plain http path", func(r *commands.SendEmail) {
			r.Attachments = []commands.SendAttachment{{Path: "http://192.0.2.7/a.pdf"}}
		}, "", []string{"attachments.0.path"}},
		{"long idempotency key", func(*commands.SendEmail) {}, strings.Repeat("k", commands.MaxIdempotencyKey+1), []string{commands.IdempotencyKeyField}},
		{"too many reply_to addresses", func(r *commands.SendEmail) {
			r.ReplyTo = slices.Repeat([]string{"help@example.com"}, commands.MaxReplyTo+1)
		}, "", []string{"reply_to"}},
		{"long subject", func(r *commands.SendEmail) { r.Subject = strings.Repeat("é", commands.MaxSubjectLength+1) }, "", []string{"subject"}},
		{"too many tags", func(r *commands.SendEmail) {
			for i := range commands.MaxTags {
				r.Tags[fmt.Sprintf("tag%d", i)] = "x"
			}
		}, "", []string{"tags"}},
		{"the email id's tag", func(r *commands.SendEmail) { r.Tags = map[string]string{email.IDTag: "x"} }, "", []string{"tags"}},
		{"too many attachments", func(r *commands.SendEmail) {
			r.Attachments = slices.Repeat(r.Attachments, commands.MaxAttachments+1)
		}, "", []string{"attachments"}},
		{"attachments too large together", func(r *commands.SendEmail) {
			big := strings.Repeat("AAAA", commands.MaxAttachmentBytes/8+1)
			r.Attachments = []commands.SendAttachment{{Filename: "a.bin", Content: big}, {Filename: "b.bin", Content: big}}
		}, "", []string{"attachments"}},
		{"content without a filename", func(r *commands.SendEmail) { r.Attachments[0].Filename = " " }, "", []string{"attachments.0.filename"}},
		{"a filename of dots", func(r *commands.SendEmail) { r.Attachments[0].Filename = ".." }, "", []string{"attachments.0.filename"}},
		{"long filename", func(r *commands.SendEmail) {
			r.Attachments[0].Filename = strings.Repeat("ü", commands.MaxFilenameLength+1)
		}, "", []string{"attachments.0.filename"}},
		{"a content_id twice", func(r *commands.SendEmail) {
			r.Attachments[0].ContentID = "logo@example.com"
			r.Attachments = append(r.Attachments, r.Attachments[0])
			r.Attachments[1].ContentID = "<LOGO@example.com>"
		}, "", []string{"attachments.1.content_id"}},
		{"long content_id", func(r *commands.SendEmail) {
			r.Attachments[0].ContentID = strings.Repeat("i", commands.MaxContentID+1)
		}, "", []string{"attachments.0.content_id"}},
		{"multipart content_type", func(r *commands.SendEmail) { r.Attachments[0].ContentType = "multipart/mixed; boundary=x" }, "", []string{"attachments.0.content_type"}},
		{"long content_type", func(r *commands.SendEmail) {
			r.Attachments[0].ContentType = "application/pdf; x=" + strings.Repeat("a", commands.MaxContentType)
		}, "", []string{"attachments.0.content_type"}},
		{"path without a host", func(r *commands.SendEmail) {
			r.Attachments = []commands.SendAttachment{{Path: "https:///a.pdf"}}
		}, "", []string{"attachments.0.path"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, body := sendRequest(t)
			c.change(&req)
			_, err := h.svc.SendEmail(ctx, acct, req, c.key, body, meta)
			if got := fields(t, err); !slices.Equal(got, c.want) {
				t.Fatalf("fields %q, want %q (%v)", got, c.want, err)
			}
			h.nothingAppended(t, "a refused send")
		})
	}
}

// A tag name that cannot be one is quoted short, and its value's refusal
// does not make it a field name.
func TestLongTagNameIsQuotedShort(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct := h.newAccount(t)
	h.verifiedDomain(t, acct, "example.com")
	req, body := sendRequest(t)
	name := strings.Repeat("k", 257)
	req.Tags = map[string]string{name: "not ok"}
	_, err := h.svc.SendEmail(ctx, acct, req, "", body, meta)
	var v *domain.ValidationError
	if !errors.As(err, &v) {
		t.Fatalf("%v", err)
	}
	short := `"` + strings.Repeat("k", 40) + `"… (257 characters)`
	want := []domain.FieldError{
		{Field: "tags", Message: "tag name " + short + " must be 1 to 256 ASCII letters, digits, _ or -"},
		{Field: "tags", Message: "the value of tag " + short + " must be 1 to 256 ASCII letters, digits, _ or -"},
	}
	if !slices.Equal(v.Errors, want) {
		t.Fatalf("errors %q, want %q", v.Errors, want)
	}
}

func TestSendEmailOnlyFromAVerifiedDomain(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct, other := h.newAccount(t), h.newAccount(t)
	if _, err := h.svc.ImportLegacyDomain(ctx, acct, "example.com", meta); err != nil { // pending
		t.Fatal(err)
	}
	h.verifiedDomain(t, other, "example.net")
	h.appended(t)
	for _, from := range []string{"news@example.com", "news@example.net", "news@unknown.example"} {
		req, body := sendRequest(t)
		req.From = from
		_, err := h.svc.SendEmail(ctx, acct, req, "", body, meta)
		var f *domain.ForbiddenError
		if !errors.As(err, &f) || f.Code != "domain_not_verified" {
			t.Errorf("send from %s: %v, want domain_not_verified", from, err)
		}
	}
	h.nothingAppended(t, "refused sends")
}

func TestSendEmailWithAnIdempotencyKey(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct, other := h.newAccount(t), h.newAccount(t)
	h.verifiedDomain(t, acct, "example.com")
	h.verifiedDomain(t, other, "example.net")
	req, body := sendRequest(t)
	send := func(account string, req commands.SendEmail, body []byte) (commands.Accepted, error) {
		return h.svc.SendEmail(ctx, account, req, "order-42", body, meta)
	}
	h.appended(t)

	first, err := send(acct, req, body)
	if err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(time.Hour)
	again, err := send(acct, req, body)
	if err != nil {
		t.Fatal(err)
	}
	if again != first {
		t.Fatalf("a repeat answered %+v, the first send %+v", again, first)
	}
	if n := h.appended(t); n != 1 {
		t.Fatalf("a send and its repeat appended %d events, want 1", n)
	}
	// The fingerprint that tells a repeat from another request is the
	// SHA-256 of the body as received.
	sum := sha256.Sum256(body)
	if q := only[*email.Queued](t, h, email.Stream(first.ID)); q.RequestHash != hex.EncodeToString(sum[:]) {
		t.Fatalf("fingerprint %q, want the body's SHA-256", q.RequestHash)
	}

	changed := req
	changed.Subject = "Another receipt"
	changedBody, _ := json.Marshal(changed)
	_, err = send(acct, changed, changedBody)
	wantConflict(t, err, "idempotency_key_reused")

	// Keys are the account's own.
	req2 := req
	req2.From = "news@example.net"
	body2, _ := json.Marshal(req2)
	theirs, err := send(other, req2, body2)
	if err != nil {
		t.Fatal(err)
	}
	if theirs.ID == first.ID {
		t.Fatal("two accounts' sends under one key share an email")
	}

	// Once the first email is over 24 hours old, the key is free again.
	h.clock.Advance(commands.IdempotencyWindow)
	later, err := send(acct, changed, changedBody)
	if err != nil {
		t.Fatal(err)
	}
	if later.ID == first.ID || !later.CreatedAt.Equal(start.Add(time.Hour+commands.IdempotencyWindow)) {
		t.Fatalf("a send after the window answered %+v; the first was %+v", later, first)
	}
	if q := only[*email.Queued](t, h, email.Stream(first.ID)); q.Subject != req.Subject {
		t.Fatalf("the first email changed: %+v", q)
	}
	if repeat, err := send(acct, changed, changedBody); err != nil || repeat != later {
		t.Fatalf("a repeat in the second window answered %+v, %v; want %+v", repeat, err, later)
	}
}

// goneAfterStoring is content whose client goes away once it is stored,
// before its email is queued.
type goneAfterStoring struct {
	commands.Content
	leave context.CancelFunc
}

func (g goneAfterStoring) Put(ctx context.Context, emailID, accountID string, parts ...[]byte) ([]blob.Digest, error) {
	d, err := g.Content.Put(ctx, emailID, accountID, parts...)
	g.leave()
	return d, err
}

// A send whose client went away while its content was stored queues
// nothing, and so keeps none of its content: no event would name it.
func TestASendItsClientLeftBeforeItWasQueuedLeavesNothingInBlobStorage(t *testing.T) {
	ctx, leave := context.WithCancel(context.Background())
	defer leave()
	var h *harness
	h = newHarness(t, func(d *commands.Deps) {
		d.Content = goneAfterStoring{Content: contentOnUse(func() *datakeys.Blobs { return h.content() }), leave: leave}
	})
	acct := h.newAccount(t)
	h.verifiedDomain(t, acct, "example.com")
	h.appended(t)
	req, body := sendRequest(t)

	if _, err := h.svc.SendEmail(ctx, acct, req, "", body, meta); !errors.Is(err, context.Canceled) {
		t.Fatalf("a send whose client left: %v, want context.Canceled", err)
	}
	h.nothingAppended(t, "a send whose client left")
	if left := storedBlobs(t, h); len(left) != 0 {
		t.Fatalf("a send that queued nothing left %d blobs stored: %q", len(left), left)
	}
}

// storedBlobs lists the blobs in the harness's blob storage.
func storedBlobs(t *testing.T, h *harness) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(h.blobDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			out = append(out, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A key used day after day, as a daily job's would be: each send opens a
// new window once the last window's email is over 24 hours old, and a
// repeat inside a window, however many came before it, answers that
// window's send, up to 24 hours after it.
func TestAnIdempotencyKeyUsedDayAfterDay(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct := h.newAccount(t)
	h.verifiedDomain(t, acct, "example.com")
	h.appended(t)
	var sent []string
	for day := range 6 {
		req, _ := sendRequest(t)
		req.Subject = fmt.Sprintf("Report of day %d", day)
		body, err := json.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		first, err := h.svc.SendEmail(ctx, acct, req, "daily-report", body, meta)
		if err != nil {
			t.Fatalf("day %d: %v", day, err)
		}
		if slices.Contains(sent, first.ID) {
			t.Fatalf("day %d's send answered an earlier day's email %s", day, first.ID)
		}
		h.clock.Advance(commands.IdempotencyWindow)
		if again, err := h.svc.SendEmail(ctx, acct, req, "daily-report", body, meta); err != nil || again != first {
			t.Fatalf("day %d: a repeat 24 hours later answered %+v, %v; want the day's send %+v", day, again, err, first)
		}
		if n := h.appended(t); n != 1 {
			t.Fatalf("day %d: a send and its repeat appended %d events, want 1", day, n)
		}
		sent = append(sent, first.ID)
		h.clock.Advance(time.Hour)
	}
}

// A request at every limit of a send at once is accepted: each limit is
// the most a request may hold, not the first value refused.
func TestSendEmailAcceptsARequestAtEveryLimit(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct := h.newAccount(t)
	h.verifiedDomain(t, acct, "example.com")
	h.appended(t)
	req, _ := sendRequest(t)
	addresses := func(n int, name string) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("%s%d@example.org", name, i)
		}
		return out
	}
	req.To, req.Cc, req.Bcc = addresses(commands.MaxRecipients-2, "to"), addresses(1, "cc"), addresses(1, "bcc")
	req.ReplyTo = addresses(commands.MaxReplyTo, "reply")
	req.Subject = strings.Repeat("é", commands.MaxSubjectLength)
	req.Tags = map[string]string{strings.Repeat("n", commands.MaxTagLength): strings.Repeat("v", commands.MaxTagLength)}
	for i := len(req.Tags); i < commands.MaxTags; i++ {
		req.Tags[fmt.Sprintf("tag%d", i)] = "x"
	}
	contentType := "application/pdf; x="
	contentType += strings.Repeat("a", commands.MaxContentType-len(contentType))
	req.Attachments = nil
	for i := range commands.MaxAttachments {
		req.Attachments = append(req.Attachments, commands.SendAttachment{
			Filename: fmt.Sprintf("%0*d", commands.MaxFilenameLength, i), Content: base64.StdEncoding.EncodeToString([]byte("%PDF-1.7")),
			ContentType: contentType, ContentID: fmt.Sprintf("%0*d@example.com", commands.MaxContentID-len("@example.com"), i),
		})
	}
	body, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := h.svc.SendEmail(ctx, acct, req, strings.Repeat("k", commands.MaxIdempotencyKey), body, meta)
	if err != nil {
		t.Fatalf("a send at every limit: %v", err)
	}
	if got.Recipients != commands.MaxRecipients || got.Attachments != commands.MaxAttachments {
		t.Fatalf("accepted %+v", got)
	}
	if n := h.appended(t); n != 1 {
		t.Fatalf("the send appended %d events, want 1", n)
	}
}

// Several addresses in one string are refused; only a field that takes a
// list says to send them as its items.
func TestSeveralAddressesInOneStringAreNamedAsSuch(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct := h.newAccount(t)
	h.verifiedDomain(t, acct, "example.com")
	req, body := sendRequest(t)
	req.From = "a@example.com, b@example.com"
	req.Cc = []string{"c@example.org, d@example.org"}
	_, err := h.svc.SendEmail(ctx, acct, req, "", body, meta)
	var v *domain.ValidationError
	if !errors.As(err, &v) || len(v.Errors) != 2 {
		t.Fatalf("want errors on from and cc.0, got %v", err)
	}
	for _, f := range v.Errors {
		several := strings.Contains(f.Message, "more than one address")
		hint := strings.Contains(f.Message, "item of the list")
		if !several || hint != (f.Field == "cc.0") {
			t.Errorf("%s: %q", f.Field, f.Message)
		}
	}
}

// The attachments' limit is 40 MB of base64, as the contract writes it:
// 40,000,000 bytes, not 40 MiB.
func TestTheAttachmentsMayTakeFortyMillionBytesOfBase64(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct := h.newAccount(t)
	h.verifiedDomain(t, acct, "example.com")
	h.appended(t)
	half := base64.StdEncoding.EncodeToString(make([]byte, 15_000_000)) // 20,000,000 bytes of base64
	req, body := sendRequest(t)
	req.Attachments = []commands.SendAttachment{{Filename: "a.bin", Content: half}, {Filename: "b.bin", Content: half}}
	if _, err := h.svc.SendEmail(ctx, acct, req, "", body, meta); err != nil {
		t.Fatalf("attachments of 40,000,000 bytes of base64: %v", err)
	}
	h.appended(t)
	req.Attachments = append(req.Attachments, commands.SendAttachment{Filename: "c.bin", Content: "AAAA"})
	_, err := h.svc.SendEmail(ctx, acct, req, "", body, meta)
	if got := fields(t, err); !slices.Equal(got, []string{"attachments"}) {
		t.Fatalf("attachments of 40,000,004 bytes of base64: fields %q (%v)", got, err)
	}
	h.nothingAppended(t, "a send past the limit")
}

// A domain with an internationalised name is kept as punycode; a send from
// it, its name written in Unicode or in punycode, is a send from that
// verified domain.
func TestSendEmailFromAnInternationalisedDomain(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct := h.newAccount(t)
	domainID := h.verifiedDomain(t, acct, "bücher.example")
	for _, from := range []string{"Jörg <joerg@Bücher.example>", "joerg@xn--bcher-kva.example"} {
		req, body := sendRequest(t)
		req.From = from
		got, err := h.svc.SendEmail(ctx, acct, req, "", body, meta)
		if err != nil {
			t.Fatalf("send from %s: %v", from, err)
		}
		if q := only[*email.Queued](t, h, email.Stream(got.ID)); q.DomainID != domainID {
			t.Errorf("send from %s: queued from domain %s, want %s", from, q.DomainID, domainID)
		}
	}
}

// A repeat under an Idempotency-Key is answered from the first send's email
// before anything that could have changed since is checked: the sender's
// domain removed meanwhile does not turn it into a refusal. Once that email
// is erased, there is nothing to answer with: a repeat is a conflict.
func TestARepeatOutlivesItsDomainButNotItsErasure(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct := h.newAccount(t)
	domainID := h.verifiedDomain(t, acct, "example.com")
	req, body := sendRequest(t)
	first, err := h.svc.SendEmail(ctx, acct, req, "order-42", body, meta)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.svc.RemoveDomain(ctx, acct, domainID, meta); err != nil {
		t.Fatal(err)
	}
	h.appended(t)
	if again, err := h.svc.SendEmail(ctx, acct, req, "order-42", body, meta); err != nil || again != first {
		t.Fatalf("a repeat after the domain's removal: %+v, %v; want the first answer %+v", again, err, first)
	}
	h.nothingAppended(t, "a repeat")

	if _, err := h.svc.EraseEmail(ctx, first.ID, email.ErasedByRetention, "", meta); err != nil {
		t.Fatal(err)
	}
	h.appended(t)
	_, err = h.svc.SendEmail(ctx, acct, req, "order-42", body, meta)
	wantConflict(t, err, "email_erased")
	h.nothingAppended(t, "a repeat of an erased email")
}

// The first window of a key keeps the email id keys had before windows
// were kept, derived from the account and the key alone, so that a repeat
// finds an email a release before windows queued under the key.
func TestAKeysFirstWindowKeepsTheIdKeysHadBeforeWindows(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	acct := h.newAccount(t)
	h.verifiedDomain(t, acct, "example.com")
	req, body := sendRequest(t)
	got, err := h.svc.SendEmail(ctx, acct, req, "order-42", body, meta)
	if err != nil {
		t.Fatal(err)
	}
	namespace := uuid.MustParse("6f1c2a52-8d0e-4f4e-9d7c-1b2b9e6f3a10")
	if want := uuid.NewSHA1(namespace, []byte(acct+"\x00order-42")).String(); got.ID != want {
		t.Fatalf("the first email under a key is %s, want %s as before windows", got.ID, want)
	}
}

// resolverFor looks host names up on srv alone.
func resolverFor(srv *dnstest.Server) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, srv.Addr())
	}}
}

// A request with a URL whose host name gets no answer from DNS records
// nothing and names the first such URL, so that the same request may be
// repeated shortly; once the lookups answer, the URLs refused are named.
func TestARequestWhoseURLsHostGetsNoAnswer(t *testing.T) {
	ctx := context.Background()
	dns := dnstest.Start(t)
	dns.Set(dnscheck.Record{Type: "A", Name: "files.example.com", Value: "192.0.2.7"})
	h := newHarness(t, func(d *commands.Deps) {
		allowed, err := egress.ParseCIDRs(allowedNet)
		if err != nil {
			t.Fatal(err)
		}
		d.Egress = egress.Policy{AllowCIDRs: allowed, Resolver: resolverFor(dns)}
	})
	acct := h.newAccount(t)
	h.verifiedDomain(t, acct, "example.com")
	h.appended(t)
	req, body := sendRequest(t)
	req.Attachments = []commands.SendAttachment{{Path: "https://10.1.2.3/a.pdf"}, {Path: "https://files.example.com/b.pdf"},
		{Path: "https://nowhere.example.com/c.pdf"}}

	dns.FailWith(dnslib.RcodeServerFailure)
	_, err := h.svc.SendEmail(ctx, acct, req, "", body, meta)
	var unavailable *commands.LookupUnavailableError
	if !errors.As(err, &unavailable) || unavailable.Field != "attachments.1.path" {
		t.Errorf("a send while DNS does not answer: %v, want the lookup of attachments.1.path unavailable", err)
	}
	_, _, err = h.svc.CreateWebhook(ctx, acct, webhook.Settings{URL: ptr("https://hooks.example.com/")}, meta)
	if !errors.As(err, &unavailable) || unavailable.Field != "url" {
		t.Errorf("a webhook while DNS does not answer: %v, want the lookup of url unavailable", err)
	}
	h.nothingAppended(t, "requests whose URLs could not be checked")

	dns.FailWith(dnslib.RcodeSuccess)
	_, err = h.svc.SendEmail(ctx, acct, req, "", body, meta)
	if got := fields(t, err); !slices.Equal(got, []string{"attachments.0.path", "attachments.2.path"}) {
		t.Errorf("once DNS answers, fields %q, want the private and the unknown host", got)
	}
	h.nothingAppended(t, "a refused send")
}

// sendsMeanwhile is content that, the first time it stores a send's
// content, lets another send run to its end first.
type sendsMeanwhile struct {
	commands.Content
	done      *atomic.Bool
	meanwhile func()
}

func (s sendsMeanwhile) Put(ctx context.Context, emailID, accountID string, parts ...[]byte) ([]blob.Digest, error) {
	d, err := s.Content.Put(ctx, emailID, accountID, parts...)
	if s.done.CompareAndSwap(false, true) {
		s.meanwhile()
	}
	return d, err
}

// Two first sends under one Idempotency-Key, the second recorded while the
// first stores its content, queue one email: the first is answered as a
// repeat of the second, and keeps none of the content it stored.
func TestConcurrentFirstSendsUnderOneKeyQueueOneEmail(t *testing.T) {
	ctx := context.Background()
	var h *harness
	var acct string
	var second commands.Accepted
	req, body := sendRequest(t)
	h = newHarness(t, func(d *commands.Deps) {
		d.Content = sendsMeanwhile{Content: contentOnUse(func() *datakeys.Blobs { return h.content() }), done: &atomic.Bool{},
			meanwhile: func() {
				var err error
				if second, err = h.svc.SendEmail(ctx, acct, req, "order-42", body, meta); err != nil {
					t.Errorf("the second send: %v", err)
				}
			}}
	})
	acct = h.newAccount(t)
	h.verifiedDomain(t, acct, "example.com")
	h.appended(t)

	first, err := h.svc.SendEmail(ctx, acct, req, "order-42", body, meta)
	if err != nil {
		t.Fatal(err)
	}
	if first != second || second.ID == "" {
		t.Fatalf("the first send answered %+v, the second %+v; want one email", first, second)
	}
	if n := h.appended(t); n != 1 {
		t.Fatalf("two sends under one key appended %d events, want 1", n)
	}
	if got := storedBlobs(t, h); len(got) != 3 { // html, text and an attachment
		t.Fatalf("%d blobs stored, want the queued email's 3", len(got))
	}
	q := only[*email.Queued](t, h, email.Stream(first.ID))
	for _, d := range []string{q.HTMLDigest, q.TextDigest, q.Attachments[0].Digest} {
		if _, err := h.content().Get(ctx, first.ID, blob.Digest(d)); err != nil {
			t.Errorf("the queued email's blob %s: %v", d, err)
		}
	}
}
