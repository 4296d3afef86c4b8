package app_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net/http"
	"net/http/httptest"
	"net/mail"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/app/apptest"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/config"
	"github.com/mailroom/mailroom/internal/dnscheck"
	"github.com/mailroom/mailroom/internal/dnscheck/dnstest"
	"github.com/mailroom/mailroom/internal/eventstore"
)

const eicar = `X5O!P%@AP[4\PZX54(P^)7CC)7}$EICAR-STANDARD-ANTIVIRUS-TEST-FILE!$H+H*`

type sendWorld struct {
	*apptest.Server
	account, admin, key string
}

func newSendWorld(t *testing.T, configure ...func(*config.Config)) *sendWorld {
	s := apptest.Start(t, append([]func(*config.Config){func(c *config.Config) {
		c.EgressAllowCIDRs = "127.0.0.0/8,::1/128"
		c.WebhookAllowHTTP = true
	}}, configure...)...)
	acct, admin, key := s.Sender("acme.test")
	return &sendWorld{Server: s, account: acct, admin: admin, key: key}
}

func (w *sendWorld) send(t *testing.T, body map[string]any) map[string]any {
	t.Helper()
	r := w.Do("POST", "/v1/emails/send", w.key, body)
	if r.Status != http.StatusAccepted {
		t.Fatalf("send: %d %s", r.Status, r.Body)
	}
	return r.JSON(t)
}

// waitFor polls GET /v1/emails/:id until done says so.
func (w *sendWorld) waitFor(t *testing.T, id string, done func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		r := w.Do("GET", "/v1/emails/"+id, w.key, nil)
		if r.Status != 200 {
			t.Fatalf("GET email: %d %s", r.Status, r.Body)
		}
		e := r.JSON(t)
		if done(e) {
			return e
		}
		if time.Now().After(deadline) {
			t.Fatalf("email %s never reached the expected state; last: %s", id, r.Body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func status(want string) func(map[string]any) bool {
	return func(e map[string]any) bool { return e["status"] == want }
}

func timelineOf(e map[string]any) []string {
	var out []string
	for _, ev := range e["events"].([]any) {
		out = append(out, ev.(map[string]any)["event_type"].(string))
	}
	return out
}

func (w *sendWorld) outbox(id string) string { return filepath.Join(w.Config.SandboxOutbox, id+".eml") }

func TestSendEndToEnd(t *testing.T) {
	w := newSendWorld(t)
	logo := bytes.Repeat([]byte{0x89, 'P', 'N', 'G', 0, 1, 2}, 300)
	report := []byte("%PDF-1.4 quarterly numbers\n")
	resp := w.send(t, map[string]any{
		"from":     "Acme Billing <billing@acme.test>",
		"to":       []string{"Ann <ann@example.org>", "bob@example.org"},
		"cc":       "carol@example.org",
		"bcc":      []string{"secret-dave@example.org"},
		"reply_to": "support@acme.test",
		"subject":  "Your invoice — Ümlaut edition",
		"html":     `<p>Hello <img src="cid:logo"></p>`,
		"text":     "Hello in plain text",
		"tags":     map[string]string{"category": "invoice", "customer_id": "c-42"},
		"attachments": []map[string]any{
			// Written as the body names it; stored and sent as "logo".
			{"filename": "logo.png", "content": base64.StdEncoding.EncodeToString(logo), "content_id": "cid:logo"},
			{"filename": "report.pdf", "content": base64.StdEncoding.EncodeToString(report)},
		},
	})
	id := resp["id"].(string)
	if resp["status"] != "queued" || resp["recipients"] != 4.0 || resp["attachments"] != 2.0 || !timestamp.MatchString(resp["created_at"].(string)) {
		t.Fatalf("202 body: %v", resp)
	}
	// Read-your-writes: the very next GET finds it.
	if r := w.Do("GET", "/v1/emails/"+id, w.key, nil); r.Status != 200 {
		t.Fatalf("immediate GET: %d %s", r.Status, r.Body)
	}
	e := w.waitFor(t, id, status("delivered"))
	if got := timelineOf(e); fmt.Sprint(got) != "[sent delivered]" {
		t.Fatalf("timeline %v", got)
	}
	sent := e["events"].([]any)[0].(map[string]any)
	if sent["metadata"].(map[string]any)["provider_message_id"] != e["provider_message_id"] || e["provider_message_id"] == nil {
		t.Fatalf("provider_message_id: %v / %v", e["provider_message_id"], sent)
	}
	for _, f := range []string{"created_at", "sent_at", "delivered_at"} {
		if s, _ := e[f].(string); !timestamp.MatchString(s) {
			t.Errorf("%s = %v", f, e[f])
		}
	}
	for _, f := range []string{"opened_at", "clicked_at", "bounced_at"} {
		if e[f] != nil {
			t.Errorf("%s = %v, want null", f, e[f])
		}
	}
	if e["from_email"] != "Acme Billing <billing@acme.test>" || e["to_email"] != "Ann <ann@example.org>, bob@example.org" {
		t.Fatalf("from/to: %v %v", e["from_email"], e["to_email"])
	}
	atts := e["attachments"].([]any)
	if len(atts) != 2 {
		t.Fatalf("attachments %v", atts)
	}
	a0, a1 := atts[0].(map[string]any), atts[1].(map[string]any)
	if a0["filename"] != "logo.png" || a0["content_type"] != "image/png" || a0["content_id"] != "logo" || a0["size_bytes"] != float64(len(logo)) {
		t.Fatalf("inline attachment metadata %v", a0)
	}
	if a1["filename"] != "report.pdf" || a1["content_type"] != "application/pdf" || a1["content_id"] != nil || a1["size_bytes"] != float64(len(report)) {
		t.Fatalf("attachment metadata %v", a1)
	}

	// The .eml parses into the expected parts and headers.
	raw, err := os.ReadFile(w.outbox(id))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte("secret-dave")) || bytes.Contains(bytes.ToLower(raw), []byte("\nbcc:")) {
		t.Fatal("the message carries the Bcc recipient")
	}
	msg, err := mail.ReadMessage(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	dec := new(mime.WordDecoder)
	subject, _ := dec.DecodeHeader(msg.Header.Get("Subject"))
	if subject != "Your invoice — Ümlaut edition" || msg.Header.Get("Cc") == "" || !strings.Contains(msg.Header.Get("Reply-To"), "support@acme.test") {
		t.Fatalf("headers: %v", msg.Header)
	}
	if !strings.HasSuffix(msg.Header.Get("Message-Id"), "@acme.test>") {
		t.Fatalf("Message-ID %q not on the sending domain", msg.Header.Get("Message-Id"))
	}
	parts := map[string][]byte{}
	var inlineCID string
	var walk func(ct string, body io.Reader)
	walk = func(ct string, body io.Reader) {
		mt, params, _ := mime.ParseMediaType(ct)
		if strings.HasPrefix(mt, "multipart/") {
			parts[mt] = nil
			mr := multipart.NewReader(body, params["boundary"])
			for {
				p, err := mr.NextRawPart()
				if err == io.EOF {
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				var r io.Reader = p
				switch p.Header.Get("Content-Transfer-Encoding") {
				case "base64":
					r = base64.NewDecoder(base64.StdEncoding, p)
				case "quoted-printable":
					r = quotedprintable.NewReader(p)
				}
				if cid := p.Header.Get("Content-Id"); cid != "" {
					inlineCID = cid
				}
				walk(p.Header.Get("Content-Type"), r)
			}
		}
		b, _ := io.ReadAll(body)
		parts[mt] = b
	}
	walk(msg.Header.Get("Content-Type"), msg.Body)
	for _, mt := range []string{"multipart/mixed", "multipart/related", "multipart/alternative"} {
		if _, ok := parts[mt]; !ok {
			t.Errorf("no %s part", mt)
		}
	}
	if string(parts["text/plain"]) != "Hello in plain text" || !strings.Contains(string(parts["text/html"]), `cid:logo`) {
		t.Fatalf("bodies: %q %q", parts["text/plain"], parts["text/html"])
	}
	if !bytes.Equal(parts["image/png"], logo) || !bytes.Equal(parts["application/pdf"], report) {
		t.Fatal("attachment bytes differ")
	}
	if inlineCID != "<logo>" {
		t.Fatalf("inline Content-ID %q", inlineCID)
	}
	w.noBlobHolds(t, []byte("Hello in plain text"), []byte("Hello <img"), logo[:100], report)
}

// noBlobHolds fails when a file of blob storage holds one of contents in
// the clear: emails' content is stored sealed.
func (w *sendWorld) noBlobHolds(t *testing.T, contents ...[]byte) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(w.App.Config.BlobDir, func(p string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		n++
		b, err := os.ReadFile(p)
		for _, c := range contents {
			if bytes.Contains(b, c) {
				t.Errorf("blob %s holds %q in the clear", p, c)
			}
		}
		return err
	})
	if err != nil || n == 0 {
		t.Fatalf("blob storage: %d files, %v", n, err)
	}
}

func TestSimulatorAndSuppression(t *testing.T) {
	w := newSendWorld(t)
	send := func(to string) string {
		return w.send(t, map[string]any{"from": "a@acme.test", "to": to, "subject": "s", "text": "t"})["id"].(string)
	}
	bounced := w.waitFor(t, send("bounce@simulator.amazonses.com"), status("bounced"))
	if got := timelineOf(bounced); fmt.Sprint(got) != "[sent bounced]" {
		t.Fatalf("bounce timeline %v", got)
	}
	meta := bounced["events"].([]any)[1].(map[string]any)["metadata"].(map[string]any)
	if meta["bounce_type"] != "Permanent" || meta["bounce_subtype"] != "General" || bounced["bounced_at"] == nil {
		t.Fatalf("bounce: %v", bounced)
	}
	complained := w.waitFor(t, send("complaint@simulator.amazonses.com"), status("complained"))
	if got := timelineOf(complained); fmt.Sprint(got) != "[sent delivered complained]" {
		t.Fatalf("complaint timeline %v", got)
	}
	listed := w.waitFor(t, send("suppressionlist@simulator.amazonses.com"), status("bounced"))
	if m := listed["events"].([]any)[1].(map[string]any)["metadata"].(map[string]any); m["bounce_subtype"] != "OnAccountSuppressionList" {
		t.Fatalf("suppression list bounce: %v", m)
	}
	for _, ok := range []string{"success@simulator.amazonses.com", "ooto@simulator.amazonses.com"} {
		w.waitFor(t, send(ok), status("delivered"))
	}

	// A second send to the hard-bounced address fails without leaving.
	again := w.waitFor(t, send("bounce@simulator.amazonses.com"), status("failed"))
	if got := timelineOf(again); fmt.Sprint(got) != "[failed]" {
		t.Fatalf("suppressed timeline %v", got)
	}
	if r := again["events"].([]any)[0].(map[string]any)["metadata"].(map[string]any)["reason"]; r != "suppressed" {
		t.Fatalf("reason %v", r)
	}
	if _, err := os.Stat(w.outbox(again["id"].(string))); !os.IsNotExist(err) {
		t.Fatal("a suppressed email reached the outbox")
	}
	// The complaint suppressed its recipient too.
	c2 := w.waitFor(t, send("complaint@simulator.amazonses.com"), status("failed"))
	if r := c2["events"].([]any)[0].(map[string]any)["metadata"].(map[string]any)["reason"]; r != "suppressed" {
		t.Fatalf("after complaint: %v", r)
	}
}

func TestContentGateway(t *testing.T) {
	w := newSendWorld(t)
	cases := []struct {
		name       string
		attachment map[string]any
		html       string
		reason     string
	}{
		{"exe attachment", map[string]any{"filename": "setup.EXE", "content": base64.StdEncoding.EncodeToString([]byte("MZ..."))}, "", "blocked_attachment_type"},
		{"eicar attachment", map[string]any{"filename": "readme.txt", "content": base64.StdEncoding.EncodeToString([]byte(eicar))}, "", "malware_detected"},
		{"eicar body", nil, "<p>" + eicar + "</p>", "malware_detected"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			body := map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "s", "text": "t"}
			if tc.attachment != nil {
				body["attachments"] = []map[string]any{tc.attachment}
			}
			if tc.html != "" {
				body["html"] = tc.html
			}
			e := w.waitFor(t, w.send(t, body)["id"].(string), status("failed"))
			if got := timelineOf(e); fmt.Sprint(got) != "[failed]" {
				t.Fatalf("timeline %v", got)
			}
			if r := e["events"].([]any)[0].(map[string]any)["metadata"].(map[string]any)["reason"]; r != tc.reason {
				t.Fatalf("reason %v, want %s", r, tc.reason)
			}
			if _, err := os.Stat(w.outbox(e["id"].(string))); !os.IsNotExist(err) {
				t.Fatal("a blocked email reached the outbox")
			}
		})
	}
}

func TestPathAttachment(t *testing.T) {
	w := newSendWorld(t)
	pdf := []byte("%PDF-1.7 downloaded")
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/missing.pdf" {
			http.NotFound(rw, r)
			return
		}
		rw.Header().Set("Content-Type", "application/pdf")
		rw.Write(pdf)
	}))
	defer srv.Close()
	// Plain http is allowed here only because the test configures it. The
	// URL is presigned: its query is a credential.
	e := w.waitFor(t, w.send(t, map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "s", "text": "t",
		"attachments": []map[string]any{{"path": srv.URL + "/files/terms.pdf?X-Amz-Signature=s3cr3t-1"}}})["id"].(string), status("delivered"))
	a := e["attachments"].([]any)[0].(map[string]any)
	if a["filename"] != "terms.pdf" || a["size_bytes"] != float64(len(pdf)) || a["content_type"] != "application/pdf" {
		t.Fatalf("downloaded attachment %v", a)
	}
	raw, _ := os.ReadFile(w.outbox(e["id"].(string)))
	if !bytes.Contains(raw, []byte(base64.StdEncoding.EncodeToString(pdf)[:20])) {
		t.Fatal("downloaded bytes not in the message")
	}
	w.noBlobHolds(t, pdf)
	failed := w.waitFor(t, w.send(t, map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "s", "text": "t",
		"attachments": []map[string]any{{"path": srv.URL + "/missing.pdf?X-Amz-Signature=s3cr3t-2"}}})["id"].(string), status("failed"))
	meta := failed["events"].([]any)[0].(map[string]any)["metadata"].(map[string]any)
	if meta["reason"] != "attachment_download_failed" || meta["detail"] != "attachment 0 (missing.pdf): server returned 404" {
		t.Fatalf("failure metadata %v", meta)
	}
	// No event holds the presigned queries, not even sealed; opened, the
	// path is there without its query.
	var leaked int
	if err := w.Pool.QueryRow(context.Background(), `SELECT count(*) FROM events WHERE data::text LIKE '%s3cr3t%'`).Scan(&leaked); err != nil {
		t.Fatal(err)
	}
	st, err := w.Commands.Email(context.Background(), failed["id"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if leaked != 0 || len(st.Queued.Attachments) != 1 || st.Queued.Attachments[0].Path != srv.URL+"/missing.pdf" {
		t.Fatalf("events holding a presigned query: %d; queued attachments %+v", leaked, st.Queued.Attachments)
	}
	// An email that fails after some downloads keeps none of them: no blob
	// is left that no event names.
	before := blobFiles(t, w.Config.BlobDir)
	w.waitFor(t, w.send(t, map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "s", "text": "t",
		"attachments": []map[string]any{{"path": srv.URL + "/files/a.pdf"}, {"path": srv.URL + "/files/b.pdf"}, {"path": srv.URL + "/missing.pdf"}}})["id"].(string), status("failed"))
	if after := blobFiles(t, w.Config.BlobDir); after != before+1 { // the text body
		t.Fatalf("a failed email left %d blobs, want its body's alone", after-before)
	}
}

// A download's own Content-Type is taken only if a request could have
// given it: a long or multipart one from the file's server is not the
// attachment's type, and the email goes out with the type of its name.
func TestPathAttachmentServerTypeIsChecked(t *testing.T) {
	w := newSendWorld(t)
	types := map[string]string{
		"/long":      "application/x-" + strings.Repeat("a", 4000),
		"/multipart": `multipart/mixed; boundary="x"`,
		"/fine":      "image/png",
	}
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		rw.Header().Set("Content-Type", types[r.URL.Path])
		rw.Write([]byte("bytes of " + r.URL.Path))
	}))
	defer srv.Close()
	want := map[string]string{"long": "application/octet-stream", "multipart": "application/octet-stream",
		"fine": "image/png"}
	for name, ct := range want {
		e := w.waitFor(t, w.send(t, map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "s", "text": "t",
			"attachments": []map[string]any{{"path": srv.URL + "/" + name}}})["id"].(string), status("delivered"))
		if got := e["attachments"].([]any)[0].(map[string]any)["content_type"]; got != ct {
			t.Errorf("server type %q: attachment content_type %q, want %q", types["/"+name], got, ct)
		}
	}
}

func TestPathAttachmentQueuedInTheClear(t *testing.T) {
	w := newSendWorld(t)
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("sig") != "old" {
			http.Error(rw, "unsigned", http.StatusForbidden)
			return
		}
		rw.Write([]byte("old bytes"))
	}))
	defer srv.Close()
	id := w.queueAsBefore(t, email.Queued{Attachments: []email.Attachment{{Filename: "old.txt", ContentType: "text/plain", Path: srv.URL + "/old.txt?sig=old"}}}, nil)
	e := w.waitFor(t, id, status("delivered"))
	if a := e["attachments"].([]any)[0].(map[string]any); a["size_bytes"] != float64(len("old bytes")) {
		t.Fatalf("attachment %v", a)
	}
}

// Downloads share the 40 MB budget (of base64) with the inline
// attachments: twenty files of 3 MB pass it, so the email fails once the
// budget is spent, without downloading the rest.
func TestPathAttachmentsShareTheBudget(t *testing.T) {
	w := newSendWorld(t)
	srv, downloads := attachmentServer(3_000_000)
	defer srv.Close()
	e := w.waitFor(t, w.send(t, budgetBody(srv.URL))["id"].(string), status("failed"))
	meta := e["events"].([]any)[0].(map[string]any)["metadata"].(map[string]any)
	detail, _ := meta["detail"].(string)
	if meta["reason"] != "attachments_too_large" || !strings.Contains(detail, "40 MB limit") {
		t.Fatalf("failure metadata %v", meta)
	}
	if _, err := os.Stat(w.outbox(e["id"].(string))); !os.IsNotExist(err) {
		t.Fatal("an email over the budget reached the outbox")
	}
	// Ten files are 40 MB of base64: the budget, exactly. The eleventh
	// has no room left and is not fetched.
	if n := downloads.Load(); n >= 20 || n != 10 {
		t.Fatalf("the server saw %d downloads", n)
	}
}

// attachmentServer serves files of size bytes without a Content-Length,
// so a download must stop reading at its cap, and counts the requests.
func attachmentServer(size int) (*httptest.Server, *atomic.Int32) {
	var n atomic.Int32
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096)
	return httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		n.Add(1)
		rw.Header().Set("Content-Type", "application/octet-stream")
		for sent := 0; sent < size; sent += len(chunk) {
			if _, err := rw.Write(chunk[:min(len(chunk), size-sent)]); err != nil {
				return
			}
			rw.(http.Flusher).Flush()
		}
	})), &n
}

// budgetBody is a send with twenty path attachments on srv.
func budgetBody(srv string) map[string]any {
	var atts []map[string]any
	for i := range 20 {
		atts = append(atts, map[string]any{"path": fmt.Sprintf("%s/files/part-%02d.bin?X-Amz-Signature=s%d", srv, i, i)})
	}
	return map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "big", "text": "t", "attachments": atts}
}

// Tags go to the provider beside the message, never into it: recipients
// would see them.
func TestTagsAreNotHeaders(t *testing.T) {
	w := newSendWorld(t)
	e := w.waitFor(t, w.send(t, map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "s", "text": "t",
		"tags": map[string]string{"campaign": "spring-sale"}})["id"].(string), status("delivered"))
	raw, err := os.ReadFile(w.outbox(e["id"].(string)))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "X-SES-MESSAGE-TAGS") || strings.Contains(string(raw), "spring-sale") {
		t.Fatalf("the message shows the tags:\n%s", raw)
	}
}

// A path whose host resolves to a private address is refused without the
// address the resolver gave.
func TestPathRefusalQuotesNoAddress(t *testing.T) {
	dns := dnstest.Start(t)
	dns.Set(dnscheck.Record{Type: "A", Name: "files.corp.test", Value: "10.96.0.7"})
	w := newSendWorld(t, func(c *config.Config) { c.EgressResolver = dns.Addr(); c.EgressAllowCIDRs = "" })
	r := w.Do("POST", "/v1/emails/send", w.key, map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "s", "text": "t",
		"attachments": []map[string]any{{"path": "https://files.corp.test/report.pdf"}}})
	wantProblem(t, r, 422, "validation_failed")
	if !strings.Contains(string(r.Body), `"field":"attachments.0.path"`) || !strings.Contains(string(r.Body), "host does not resolve to a public address") ||
		strings.Contains(string(r.Body), "10.96") {
		t.Fatalf("refusal: %s", r.Body)
	}
}

func decodeJSON(resp *http.Response, v any) {
	defer resp.Body.Close()
	json.NewDecoder(resp.Body).Decode(v)
}

// A provider that keeps failing is retried until MAILROOM_SEND_MAX_AGE,
// then the email fails with provider_unavailable; meanwhile /readyz says so.
func TestProviderOutage(t *testing.T) {
	w := newSendWorld(t, func(c *config.Config) { c.SendMaxAge = 4 * time.Second })
	outbox := w.Config.SandboxOutbox
	// The outbox becomes unusable: every send fails, transiently.
	if err := os.RemoveAll(outbox); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(outbox, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	id := w.send(t, map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "s", "text": "t"})["id"].(string)
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := w.Do("GET", "/readyz", "", nil)
		if r.Status == 503 && strings.Contains(string(r.Body), "provider") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz never reported the failing provider: %d %s", r.Status, r.Body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	e := w.waitFor(t, id, status("failed"))
	if r := e["events"].([]any)[0].(map[string]any)["metadata"].(map[string]any)["reason"]; r != "provider_unavailable" {
		t.Fatalf("reason %v", r)
	}
	// The provider recovers.
	os.Remove(outbox)
	os.MkdirAll(outbox, 0o755)
	w.waitFor(t, w.send(t, map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "s", "text": "t"})["id"].(string), status("delivered"))
	if r := w.Do("GET", "/readyz", "", nil); r.Status != 200 {
		t.Fatalf("/readyz after recovery: %d %s", r.Status, r.Body)
	}
}

// queueAsBefore appends an EmailQueued as an older version recorded it:
// the fields given, a text body, and edit applied to its JSON. It returns
// the email's id once the emails projection shows it.
func (w *sendWorld) queueAsBefore(t *testing.T, q email.Queued, edit func(fields map[string]any)) string {
	t.Helper()
	ctx := context.Background()
	if err := w.Pool.QueryRow(ctx, `SELECT id FROM domains WHERE account_id = $1`, w.account).Scan(&q.DomainID); err != nil {
		t.Fatal(err)
	}
	text, err := w.Blobs.Put(ctx, []byte("hello"))
	if err != nil {
		t.Fatal(err)
	}
	q.EmailID, q.AccountID, q.From, q.FromEmail = uuid.NewString(), w.account, "a@acme.test", "a@acme.test"
	q.To, q.Subject, q.TextDigest, q.QueuedAt = []string{"x@example.org"}, "old", string(text), w.Clock.Now()
	data, err := codec.Encode(&q, eventstore.Metadata{Actor: "operator"})
	if err != nil {
		t.Fatal(err)
	}
	data.SchemaVersion = 1 // the version older code wrote EmailQueued in
	if edit != nil {
		var fields map[string]any
		if err := json.Unmarshal(data.Data, &fields); err != nil {
			t.Fatal(err)
		}
		edit(fields)
		if data.Data, err = json.Marshal(fields); err != nil {
			t.Fatal(err)
		}
	}
	res, err := w.Store.Append(ctx, email.Stream(q.EmailID), eventstore.NoStream, data)
	if err != nil {
		t.Fatal(err)
	}
	w.Waiter.WaitFor(ctx, res.Position, "emails")
	return q.EmailID
}
