package app_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/internal/app/apptest"
	"github.com/mailroom/mailroom/internal/config"
)

func TestSendValidation(t *testing.T) {
	w := newSendWorld(t, func(c *config.Config) { c.EgressAllowCIDRs = ""; c.WebhookAllowHTTP = false })
	base := func() map[string]any {
		return map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "hello", "text": "t"}
	}
	with := func(k string, v any) map[string]any {
		b := base()
		if v == nil {
			delete(b, k)
		} else {
			b[k] = v
		}
		return b
	}
	att := func(a map[string]any) []map[string]any { return []map[string]any{a} }
	content := base64.StdEncoding.EncodeToString([]byte("hello"))
	many := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("r%d@example.org", i)
		}
		return out
	}
	big := strings.Repeat("A", 21*1024*1024)
	tags := func(n int) map[string]string {
		out := map[string]string{}
		for i := range n {
			out[fmt.Sprint("t", i)] = "v"
		}
		return out
	}
	longURL := "https://files.example.com/" + strings.Repeat("p", 2049-len("https://files.example.com/"))
	// raw is a body with bytes json.Marshal would not send: invalid UTF-8.
	raw := func(field, value string) string {
		return `{"from":"a@acme.test","to":"x@example.org","subject":"hello","text":"t",` + field + `:` + value + `}`
	}
	cases := []struct {
		name  string
		body  any // a map, or a raw JSON string
		field string
	}{
		// NUL and other control characters, which the read side cannot store.
		{"NUL in from", with("from", "a\u0000@acme.test"), "from"},
		{"NUL in to", with("to", []string{"x\u0000@example.org"}), "to.0"},
		{"NUL in cc", with("cc", []string{"ok@example.org", "y@example.org\u0000"}), "cc.1"},
		{"NUL in bcc", with("bcc", "z\u0000@example.org"), "bcc.0"},
		{"NUL in reply_to", with("reply_to", "r\u0000@acme.test"), "reply_to.0"},
		{"NUL in subject", with("subject", "a\u0000b"), "subject"},
		{"NUL in text", with("text", "hello\u0000"), "text"},
		{"NUL in html", with("html", "<p>\u0000</p>"), "html"},
		{"NUL in a tag name", with("tags", map[string]string{"a\u0000": "v"}), "tags"},
		{"NUL in a tag value", with("tags", map[string]string{"ok": "v\u0000"}), "tags.ok"},
		{"NUL in a filename", with("attachments", att(map[string]any{"filename": "a\u0000.txt", "content": content})), "attachments.0.filename"},
		{"NUL in a content_type", with("attachments", att(map[string]any{"filename": "a.txt", "content": content, "content_type": "text/plain\u0000"})), "attachments.0.content_type"},
		{"NUL in a content_id", with("attachments", att(map[string]any{"filename": "a.txt", "content": content, "content_id": "c\u0000"})), "attachments.0.content_id"},
		{"NUL in a path", with("attachments", att(map[string]any{"path": "https://example.com/a\u0000.txt"})), "attachments.0.path"},
		{"escape in subject", with("subject", "red \u001b[31m"), "subject"},
		{"DEL in subject", with("subject", "a\u007f"), "subject"},
		{"C1 control in subject", with("subject", "next\u0085line"), "subject"},
		{"line separator in subject", with("subject", "one\u2028two"), "subject"},
		{"bell in text", with("text", "ding\u0007"), "text"},
		{"tab in a filename", with("attachments", att(map[string]any{"filename": "a\tb.txt", "content": content})), "attachments.0.filename"},
		// Bytes that are not UTF-8, which encoding/json would quietly replace.
		{"invalid UTF-8 in subject", raw(`"subject"`, "\"caf\xe9\""), "subject"},
		{"invalid UTF-8 in to", raw(`"to"`, "[\"\xff@example.org\"]"), "to.0"}, // the later "to" wins
		{"invalid UTF-8 in cc", raw(`"cc"`, "[\"ok@example.org\",\"\xff@example.org\"]"), "cc.1"},
		{"invalid UTF-8 in a tag", raw(`"tags"`, "{\"k\":\"\xc3\"}"), "tags.k"},
		{"invalid UTF-8 in a filename", raw(`"attachments"`, "[{\"filename\":\"\xed\xa0\x80.txt\",\"content\":\"aGk=\"}]"), "attachments.0.filename"},
		// Bounds on what reaches the event.
		{"50 tags", with("tags", tags(50)), "tags"},
		{"the reserved tag name", with("tags", map[string]string{"mailroom_email_id": "x"}), "tags"},
		{"tag value of 257", with("tags", map[string]string{"k": strings.Repeat("v", 257)}), "tags.k"},
		{"51 reply_to", with("reply_to", many(51)), "reply_to"},
		{"2,049-byte path", with("attachments", att(map[string]any{"path": longURL})), "attachments.0.path"},
		// A file name taken from the path meets the filename's rules.
		{"NUL in a path's file name", with("attachments", att(map[string]any{"path": "https://example.com/d%00.txt"})), "attachments.0.path"},
		{"CR LF in a path's file name", with("attachments", att(map[string]any{"path": "https://example.com/a%0d%0aX-Inj:%201.txt"})), "attachments.0.path"},
		{"U+2028 in a path's file name", with("attachments", att(map[string]any{"path": "https://example.com/%E2%80%A8c.txt"})), "attachments.0.path"},
		{"invalid UTF-8 in a path's file name", with("attachments", att(map[string]any{"path": "https://example.com/%FF.txt"})), "attachments.0.path"},
		{"backslash in a path's file name", with("attachments", att(map[string]any{"path": "https://example.com/a%5Cb.txt"})), "attachments.0.path"},
		{"256-character file name in a path", with("attachments", att(map[string]any{"path": "https://example.com/" + strings.Repeat("a", 252) + ".pdf"})), "attachments.0.path"},
		{"256-character filename", with("attachments", att(map[string]any{"filename": strings.Repeat("é", 252) + ".pdf", "content": content})), "attachments.0.filename"},
		{"256-byte content_type", with("attachments", att(map[string]any{"filename": "a.txt", "content": content, "content_type": "text/" + strings.Repeat("x", 251)})), "attachments.0.content_type"},
		{"256-byte content_id", with("attachments", att(map[string]any{"filename": "a.txt", "content": content, "content_id": strings.Repeat("c", 256)})), "attachments.0.content_id"},
		{"display name of 999", with("to", `"`+strings.Repeat("n", 999)+`" <x@example.org>`), "to.0"},
		// What the message builder refuses is refused here, not after the 202.
		{"content_id that is not atext", with("attachments", att(map[string]any{"filename": "a.png", "content": content, "content_id": "logo(1)"})), "attachments.0.content_id"},
		{"content_id of angle brackets only", with("attachments", att(map[string]any{"filename": "a.png", "content": content, "content_id": "<>"})), "attachments.0.content_id"},
		{"content_id used twice", with("attachments", []map[string]any{
			{"filename": "a.png", "content": content, "content_id": "logo"},
			{"filename": "b.png", "content": content, "content_id": "<Logo>"}}), "attachments.1.content_id"},
		{"content_type parameter name of 70", with("attachments", att(map[string]any{"filename": "a.txt", "content": content,
			"content_type": "text/plain; " + strings.Repeat("p", 70) + "=1"})), "attachments.0.content_type"},
		{"missing from", with("from", nil), "from"},
		{"missing to", with("to", nil), "to"},
		{"missing subject", with("subject", nil), "subject"},
		// Ignored, it would send at once what was meant for later.
		{"scheduled_at", with("scheduled_at", "2030-01-01T09:00:00Z"), "scheduled_at"},
		{"subject of 999", with("subject", strings.Repeat("s", 999)), "subject"},
		{"21 attachments", with("attachments", func() []map[string]any {
			var out []map[string]any
			for i := range 21 {
				out = append(out, map[string]any{"filename": fmt.Sprint(i, ".txt"), "content": content})
			}
			return out
		}()), "attachments"},
		{"over 40 MB of base64", with("attachments", []map[string]any{{"filename": "a.bin", "content": big}, {"filename": "b.bin", "content": big}}), "attachments"},
		{"content and path", with("attachments", att(map[string]any{"filename": "a.txt", "content": content, "path": "https://example.com/a.txt"})), "attachments.0.content"},
		{"path over http", with("attachments", att(map[string]any{"path": "http://example.com/a.txt"})), "attachments.0.path"},
		{"path to a private address", with("attachments", att(map[string]any{"path": "https://10.0.0.1/a.txt"})), "attachments.0.path"},
		{"path to loopback", with("attachments", att(map[string]any{"path": "https://127.0.0.1/a.txt"})), "attachments.0.path"},
		{"malformed to", with("to", "not-an-address"), "to.0"},
		{"malformed cc", with("cc", []string{"ok@example.org", "bad@"}), "cc.1"},
		{"malformed from", with("from", "acme.test"), "from"},
		{"51 recipients", with("to", many(51)), "to"},
		{"neither html nor text", with("text", nil), "html"},
		{"bad tag value", with("tags", map[string]string{"ok": "has space"}), "tags.ok"},
		{"bad tag name", with("tags", map[string]string{"no/slash": "v"}), "tags"},
		{"content not base64", with("attachments", att(map[string]any{"filename": "a.txt", "content": "***"})), "attachments.0.content"},
		{"content without filename", with("attachments", att(map[string]any{"content": content})), "attachments.0.filename"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := w.Do("POST", "/v1/emails/send", w.key, tc.body)
			wantProblem(t, r, 422, "validation_failed")
			if !strings.Contains(string(r.Body), fmt.Sprintf(`"field":%q`, tc.field)) {
				t.Fatalf("error does not name %s: %s", tc.field, r.Body)
			}
		})
	}
	// A path that is no URL to read says why in words, without the URL.
	for path, want := range map[string]string{
		"https://":           "must be an https URL with a host, like https://files.example.com/report.pdf",
		"https://[zz]/a.pdf": "is not a valid URL",
		"https://a.test:0/x": "invalid port (1 to 65535)",
		"ftp://a.test/x.pdf": "must use https",
	} {
		r := w.Do("POST", "/v1/emails/send", w.key, with("attachments", att(map[string]any{"path": path})))
		if !strings.Contains(string(r.Body), `{"field":"attachments.0.path","message":"`+want+`"}`) {
			t.Errorf("%s: %s", path, r.Body)
		}
	}
	// A path the egress policy refuses is named with the other fields'
	// refusals, not only once they are fixed.
	twoWrong := with("subject", nil)
	twoWrong["attachments"] = []map[string]any{{"path": "https://127.0.0.1/a.pdf"}, {"filename": "b.txt", "content": content}}
	r0 := w.Do("POST", "/v1/emails/send", w.key, twoWrong)
	wantProblem(t, r0, 422, "validation_failed")
	for _, field := range []string{"subject", "attachments.0.path"} {
		if !strings.Contains(string(r0.Body), fmt.Sprintf(`"field":%q`, field)) {
			t.Errorf("a send wrong in its subject and a path's address does not name %s: %s", field, r0.Body)
		}
	}
	// A path too long to take is reported once, not again for the file
	// name it would give.
	r := w.Do("POST", "/v1/emails/send", w.key, with("attachments", att(map[string]any{"path": longURL + strings.Repeat("b", 1000)})))
	if n := strings.Count(string(r.Body), `"field":"attachments.0.path"`); n != 1 {
		t.Fatalf("a long path is reported %d times: %s", n, r.Body)
	}
	// A scheduled_at of nothing is no schedule.
	for _, none := range []any{"", json.RawMessage("null")} {
		if r := w.Do("POST", "/v1/emails/send", w.key, with("scheduled_at", none)); r.Status != 202 {
			t.Fatalf("scheduled_at %v: %d %s", none, r.Status, r.Body)
		}
	}
	// 50 recipients in all are fine, and so is every limit reached exactly.
	b := base()
	b["to"], b["cc"], b["bcc"] = many(30), many(10), many(10)
	if r := w.Do("POST", "/v1/emails/send", w.key, b); r.Status != 202 {
		t.Fatalf("50 recipients: %d %s", r.Status, r.Body)
	}
	b = base()
	b["tags"], b["reply_to"] = tags(49), many(50)
	b["subject"], b["text"], b["html"] = "Ümlaut — 日本 🎉 \uFFFD", "lines\r\nand\ttabs\n", "<p>\n\t</p>"
	b["attachments"] = att(map[string]any{"filename": strings.Repeat("é", 251) + ".pdf", "content": content,
		"content_type": "text/" + strings.Repeat("x", 250), "content_id": strings.Repeat("c", 255)})
	r = w.DoHeader("POST", "/v1/emails/send", w.key, http.Header{"Idempotency-Key": {strings.Repeat("k", 256)}}, b)
	if r.Status != 202 {
		t.Fatalf("every limit reached exactly: %d %s", r.Status, r.Body)
	}
	// ...and such an email is sent: the message builder takes what the API took.
	w.waitFor(t, r.JSON(t)["id"].(string), status("delivered"))
	// The Idempotency-Key header is bounded, printable and not empty too.
	for _, key := range []string{strings.Repeat("k", 257), "a\tb", "k\u0085", "k\xff", ""} {
		r := w.DoHeader("POST", "/v1/emails/send", w.key, http.Header{"Idempotency-Key": {key}}, base())
		wantProblem(t, r, 422, "validation_failed")
		if !strings.Contains(string(r.Body), `"field":"Idempotency-Key"`) {
			t.Fatalf("key %q: error does not name the header: %s", key, r.Body)
		}
	}

	// Wrong JSON types are 400.
	wantProblem(t, w.Do("POST", "/v1/emails/send", w.key, `{"from": "a@acme.test", "to": 5}`), 400, "")
	wantProblem(t, w.Do("POST", "/v1/emails/send", w.key, `{"from": `), 400, "invalid_json")

	// Unverified domains, another account's domain, unknown domains: 403.
	ctx := context.Background()
	if _, err := w.Commands.AddDomain(ctx, w.account, "pending.test", commands.Meta{Actor: "operator"}); err != nil {
		t.Fatal(err)
	}
	w.Sender("other.test") // another account's verified domain
	for _, from := range []string{"a@pending.test", "a@other.test", "a@nowhere.test", "a@sub.acme.test"} {
		wantProblem(t, w.Do("POST", "/v1/emails/send", w.key, with("from", from)), 403, "domain_not_verified")
	}
	// A key without emails:send.
	reader := w.Do("POST", "/api/auth/api-keys", w.admin, map[string]any{"name": "r", "permissions": []string{"emails:read"}}).JSON(t)["key"].(string)
	wantProblem(t, w.Do("POST", "/v1/emails/send", reader, base()), 403, "permission_denied")
	// A body over 45 MiB.
	huge := `{"from":"a@acme.test","to":"x@example.org","subject":"s","text":"` + strings.Repeat("x", 46*1024*1024) + `"}`
	wantProblem(t, w.Do("POST", "/v1/emails/send", w.key, huge), 413, "payload_too_large")
}

func TestIdempotencyKey(t *testing.T) {
	w := newSendWorld(t)
	body := map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "once", "text": "t"}
	do := func(key string, b map[string]any) apptest.Response {
		return w.DoHeader("POST", "/v1/emails/send", w.key, http.Header{"Idempotency-Key": {key}}, b)
	}
	first := do("order-7", body)
	second := do("order-7", body)
	if first.Status != 202 || second.Status != 202 {
		t.Fatalf("statuses %d %d", first.Status, second.Status)
	}
	if string(first.Body) != string(second.Body) {
		t.Fatalf("a repeat answered differently:\n%s\n%s", first.Body, second.Body)
	}
	// Repeats and refused requests store nothing: the one email's content
	// is all there is.
	blobs := blobFiles(t, w.Config.BlobDir)
	for range 3 {
		if r := do("order-7", body); r.Status != 202 {
			t.Fatalf("a repeat: %d %s", r.Status, r.Body)
		}
	}
	other := map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "different", "text": "t", "html": "<p>new</p>"}
	wantProblem(t, do("order-7", other), 409, "idempotency_key_reused")
	// Two keys in one request are refused, not read as the first: a
	// proxy that joined them would send another key.
	two := w.DoHeader("POST", "/v1/emails/send", w.key, http.Header{"Idempotency-Key": {"order-7", "order-9"}}, body)
	wantProblem(t, two, 422, "validation_failed")
	if f := two.JSON(t)["errors"].([]any)[0].(map[string]any); f["field"] != "Idempotency-Key" {
		t.Fatalf("two keys: %s", two.Body)
	}
	if after := blobFiles(t, w.Config.BlobDir); after != blobs {
		t.Fatalf("repeats and a refused request left %d blobs, want %d", after, blobs)
	}
	// Only one email exists.
	w.waitFor(t, first.JSON(t)["id"].(string), status("delivered"))
	list := w.Do("GET", "/v1/emails", w.key, nil).JSON(t)
	if list["pagination"].(map[string]any)["total"] != 1.0 {
		t.Fatalf("emails after a repeated send: %v", list["pagination"])
	}
	// Another key is another email.
	if r := do("order-8", map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "once", "text": "t"}); r.Status != 202 || r.JSON(t)["id"] == first.JSON(t)["id"] {
		t.Fatalf("another key: %d %s", r.Status, r.Body)
	}
	// After 24 hours the key is free again.
	w.Clock.Advance(25 * time.Hour)
	if r := do("order-7", other); r.Status != 202 || r.JSON(t)["id"] == first.JSON(t)["id"] {
		t.Fatalf("key after 24 hours: %d %s", r.Status, r.Body)
	}
}

// A repeat is answered from the first request's email, whatever changed
// since: once the domain is removed, a retry of an accepted send still
// gets its first answer, while a new send is refused.
func TestIdempotentRepeatAfterTheDomainGoes(t *testing.T) {
	w := newSendWorld(t)
	body := map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "once", "text": "t"}
	do := func(key string) apptest.Response {
		return w.DoHeader("POST", "/v1/emails/send", w.key, http.Header{"Idempotency-Key": {key}}, body)
	}
	first := do("order-9")
	if first.Status != 202 {
		t.Fatalf("first: %d %s", first.Status, first.Body)
	}
	for _, d := range w.Do("GET", "/api/domains", w.admin, nil).JSON(t)["data"].([]any) {
		if r := w.Do("DELETE", "/api/domains/"+d.(map[string]any)["id"].(string), w.admin, nil); r.Status != 204 {
			t.Fatalf("delete domain: %d", r.Status)
		}
	}
	if again := do("order-9"); again.Status != 202 || string(again.Body) != string(first.Body) {
		t.Fatalf("a retry after the domain went: %d %s, want %s", again.Status, again.Body, first.Body)
	}
	wantProblem(t, do("order-10"), 403, "domain_not_verified")
}

// An internationalised domain sends however it is written, and travels in
// punycode: relays and SES take only ASCII without SMTPUTF8.
func TestInternationalisedDomains(t *testing.T) {
	s := apptest.Start(t)
	_, admin, key := s.Sender("bücher.test")
	w := &sendWorld{Server: s, key: key}
	for _, from := range []string{"hello@bücher.test", "Bücher <hello@BÜCHER.test>", "hello@xn--bcher-kva.test"} {
		e := w.send(t, map[string]any{"from": from, "to": "Ann <ann@münchen.example>", "subject": "idn", "text": "t"})
		w.waitFor(t, e["id"].(string), status("delivered"))
		raw, err := os.ReadFile(w.outbox(e["id"].(string)))
		if err != nil {
			t.Fatal(err)
		}
		header := string(raw[:bytes.Index(raw, []byte("\r\n\r\n"))])
		for _, want := range []string{"hello@xn--bcher-kva.test", "<ann@xn--mnchen-3ya.example>"} {
			if !strings.Contains(header, want) {
				t.Errorf("from %q: the header lacks %s:\n%s", from, want, header)
			}
		}
		if strings.ContainsAny(header, "üÜ") {
			t.Errorf("from %q: an internationalised domain left unencoded:\n%s", from, header)
		}
	}
	// The recipient in the other spelling is the same address: erasing it
	// erases every email sent to it.
	w.send(t, map[string]any{"from": "hello@bücher.test", "to": "ann@xn--mnchen-3ya.example", "subject": "idn", "text": "t"})
	r := s.Do("POST", "/api/erasures", admin, map[string]any{"email": "ann@MÜNCHEN.example"})
	if r.Status != 201 || r.JSON(t)["erased"] != 4.0 {
		t.Fatalf("erasing the Unicode spelling: %d %s, want 4 erased", r.Status, r.Body)
	}
}

// blobFiles counts the files of filesystem blob storage.
func blobFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Each 24-hour window of an Idempotency-Key has an id of its own: retries
// inside a later window meet on one email, as they do in the first.
func TestIdempotencyWindows(t *testing.T) {
	w := newSendWorld(t, func(c *config.Config) { c.Roles = []string{"api", "projections"} })
	body := map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "daily", "text": "t"}
	do := func(b map[string]any) apptest.Response {
		return w.DoHeader("POST", "/v1/emails/send", w.key, http.Header{"Idempotency-Key": {"daily-report"}}, b)
	}
	total := func() any {
		return w.Do("GET", "/v1/emails", w.key, nil).JSON(t)["pagination"].(map[string]any)["total"]
	}
	first := do(body)
	if first.Status != 202 {
		t.Fatalf("first send: %d %s", first.Status, first.Body)
	}
	seen := map[string]bool{first.JSON(t)["id"].(string): true}
	for window := 1; window <= 5; window++ {
		w.Clock.Advance(25 * time.Hour)
		// Concurrent retries of one request in the new window: one email,
		// whose content alone stays stored (the racers that lost delete
		// what they staged).
		blobs := blobFiles(t, w.Config.BlobDir)
		resps := make([]apptest.Response, 4)
		var wg sync.WaitGroup
		for i := range resps {
			wg.Go(func() { resps[i] = do(body) })
		}
		wg.Wait()
		id, _ := resps[0].JSON(t)["id"].(string)
		for i, r := range resps {
			if r.Status != 202 || string(r.Body) != string(resps[0].Body) {
				t.Fatalf("window %d, request %d: %d %s (first answer %s)", window, i, r.Status, r.Body, resps[0].Body)
			}
		}
		if seen[id] {
			t.Fatalf("window %d reuses the id %s of an earlier window", window, id)
		}
		if n := blobFiles(t, w.Config.BlobDir) - blobs; n != 1 {
			t.Fatalf("window %d: concurrent first requests left %d blobs, want the one email's text", window, n)
		}
		seen[id] = true
		// Minutes later, still inside the window: the same answer, and a
		// different request under the key is refused.
		w.Clock.Advance(10 * time.Minute)
		if r := do(body); r.Status != 202 || string(r.Body) != string(resps[0].Body) {
			t.Fatalf("window %d, a retry later: %d %s, want %s", window, r.Status, r.Body, resps[0].Body)
		}
		other := map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "not daily", "text": "t"}
		wantProblem(t, do(other), 409, "idempotency_key_reused")
		if n := total(); n != float64(window+1) {
			t.Fatalf("after window %d: %v emails, want %d", window, n, window+1)
		}
	}
}

func TestEmailList(t *testing.T) {
	w := newSendWorld(t, func(c *config.Config) { c.Roles = []string{"api", "projections"} }) // stay queued
	for i := range 45 {
		to := fmt.Sprintf("user%02d@example.org", i)
		if i%5 == 0 {
			to = fmt.Sprintf("Special.Person%02d@Partner.example", i)
		}
		w.send(t, map[string]any{"from": "a@acme.test", "to": to, "subject": fmt.Sprint("n", i), "text": "t"})
	}
	page := func(q string) (map[string]any, []any) {
		r := w.Do("GET", "/v1/emails"+q, w.key, nil)
		if r.Status != 200 {
			t.Fatalf("GET /v1/emails%s: %d %s", q, r.Status, r.Body)
		}
		b := r.JSON(t)
		return b["pagination"].(map[string]any), b["data"].([]any)
	}
	pg, data := page("")
	if fmt.Sprint(pg) != "map[page:1 per_page:20 total:45 total_pages:3]" || len(data) != 20 {
		t.Fatalf("first page %v, %d items", pg, len(data))
	}
	item := data[0].(map[string]any)
	if item["subject"] != "n44" || item["status"] != "queued" || item["attachment_count"] != 0.0 || !timestamp.MatchString(item["created_at"].(string)) {
		t.Fatalf("newest first: %v", item)
	}
	for _, k := range []string{"id", "from_email", "to_email", "subject", "status", "attachment_count", "created_at"} {
		if _, ok := item[k]; !ok {
			t.Errorf("list item lacks %s", k)
		}
	}
	if _, data := page("?page=3"); len(data) != 5 {
		t.Fatalf("page 3 has %d items", len(data))
	}
	if pg, data := page("?page=4"); len(data) != 0 || pg["total"] != 45.0 {
		t.Fatalf("page 4: %v %d", pg, len(data))
	}
	if pg, data := page("?per_page=500"); pg["per_page"] != 100.0 || len(data) != 45 || pg["total_pages"] != 1.0 {
		t.Fatalf("per_page clamp: %v %d", pg, len(data))
	}
	if pg, _ := page("?per_page=7"); pg["total_pages"] != 7.0 {
		t.Fatalf("per_page=7: %v", pg)
	}
	if pg, _ := page("?to=partner.EXAMPLE"); pg["total"] != 9.0 {
		t.Fatalf("to filter: %v", pg)
	}
	if pg, _ := page("?status=queued"); pg["total"] != 45.0 {
		t.Fatalf("status filter: %v", pg)
	}
	if pg, data := page("?status=delivered"); pg["total"] != 0.0 || len(data) != 0 || pg["total_pages"] != 0.0 {
		t.Fatalf("status=delivered: %v", pg)
	}
	// The status filter is a free string: a value no email has matches
	// none, and is no error. It is matched as written.
	for _, q := range []string{"nonsense", "Queued", "queued%20", "%20", url.QueryEscape(strings.Repeat("é", 300))} {
		if pg, data := page("?status=" + q); pg["total"] != 0.0 || len(data) != 0 {
			t.Fatalf("status=%s: %v", q, pg)
		}
	}
	today := w.Clock.Now().UTC().Format("2006-01-02")
	tomorrow := w.Clock.Now().UTC().AddDate(0, 0, 1).Format("2006-01-02")
	yesterday := w.Clock.Now().UTC().AddDate(0, 0, -1).Format("2006-01-02")
	if pg, _ := page("?date_from=" + today + "&date_to=" + today); pg["total"] != 45.0 {
		t.Fatalf("today: %v", pg)
	}
	if pg, _ := page("?date_from=" + tomorrow); pg["total"] != 0.0 {
		t.Fatalf("from tomorrow: %v", pg)
	}
	if pg, _ := page("?date_to=" + yesterday); pg["total"] != 0.0 {
		t.Fatalf("to yesterday: %v", pg)
	}
	// A page far past the end is answered as asked, empty, with the totals.
	if pg, data := page("?page=9007199254740991&per_page=100"); len(data) != 0 || pg["total"] != 45.0 || pg["page"] != 9007199254740991.0 {
		t.Fatalf("a page past any end: %v %d", pg, len(data))
	}
	// One a JSON reader could not echo exactly is refused, not lowered.
	for _, q := range []string{"page=9007199254740992", "page=99999999999999999999"} {
		r := w.Do("GET", "/v1/emails?"+q, w.key, nil)
		wantProblem(t, r, 422, "validation_failed")
		if errs := r.JSON(t)["errors"].([]any); len(errs) != 1 || errs[0].(map[string]any)["message"] != "must be at most 9007199254740991" {
			t.Fatalf("%s: %s", q, r.Body)
		}
	}
	for _, q := range []string{"page=0", "page=-2", "per_page=0", "per_page=x", "date_to=13/01/2026",
		"date_from=" + today + "&date_to=" + yesterday, "status=%00", "status=%FF", "to=%FF"} {
		wantProblem(t, w.Do("GET", "/v1/emails?"+q, w.key, nil), 422, "validation_failed")
	}
	// A parameter given twice is not combined, nor is either taken: 422
	// naming it. A `to` longer than any address is refused before it
	// costs a scan of every recipient.
	for q, field := range map[string]string{
		"status=failed&status=delivered":                 "status",
		"per_page=5&per_page=500":                        "per_page",
		"to=a&to=b":                                      "to",
		"date_from=" + today + "&date_from=" + yesterday: "date_from",
		"to=" + strings.Repeat("a", 255):                 "to",
	} {
		r := w.Do("GET", "/v1/emails?"+q, w.key, nil)
		wantProblem(t, r, 422, "validation_failed")
		if errs := r.JSON(t)["errors"].([]any); len(errs) != 1 || errs[0].(map[string]any)["field"] != field {
			t.Errorf("%.40s: %s", q, r.Body)
		}
	}
	if pg, _ := page("?to=" + strings.Repeat("é", 254)); pg["total"] != 0.0 {
		t.Fatalf("a to of 254 characters: %v", pg)
	}
	// A query that does not parse would lose its filters: refused, not ignored.
	for _, q := range []string{"to=50%", "status=%zz", "date_from=" + today + ";x=1"} {
		wantProblem(t, w.Do("GET", "/v1/emails?"+q, w.key, nil), 400, "invalid_query")
	}
}

// An id that is not text names nothing: 404 on every route, never an error
// of the database.
func TestIDsThatAreNotText(t *testing.T) {
	w := newSendWorld(t)
	for _, c := range []struct{ method, path, cred string }{
		{"GET", "/v1/emails/%FF", w.key},
		{"GET", "/v1/emails/a%00b", w.key},
		{"GET", "/v1/webhooks/%FF", w.key},
		{"GET", "/v1/webhooks/%00/deliveries", w.key},
		{"DELETE", "/v1/webhooks/%FF", w.key},
		{"GET", "/api/domains/%00", w.admin},
		{"POST", "/api/domains/%FF/verify", w.admin},
		{"DELETE", "/api/auth/api-keys/%00", w.admin},
	} {
		wantProblem(t, w.Do(c.method, c.path, c.cred, nil), 404, "not_found")
	}
}

// Emails queued while no worker runs fail with domain_removed once their
// domain is removed.
func TestDomainRemovedWhileQueued(t *testing.T) {
	w := newSendWorld(t, func(c *config.Config) { c.Roles = []string{"api", "projections"} })
	var ids []string
	for range 3 {
		ids = append(ids, w.send(t, map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "s", "text": "t"})["id"].(string))
	}
	var domainID string
	for _, d := range w.Do("GET", "/api/domains", w.admin, nil).JSON(t)["data"].([]any) {
		domainID = d.(map[string]any)["id"].(string)
	}
	if r := w.Do("DELETE", "/api/domains/"+domainID, w.admin, nil); r.Status != 204 {
		t.Fatalf("delete domain: %d", r.Status)
	}
	wantProblem(t, w.Do("POST", "/v1/emails/send", w.key, map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "s", "text": "t"}), 403, "domain_not_verified")

	cfg, clock := w.Config, w.Clock
	cfg.Roles = []string{"api", "projections", "workers"}
	w.Stop()
	w.Server = apptest.StartWithClock(t, cfg, clock)
	for _, id := range ids {
		e := w.waitFor(t, id, status("failed"))
		if r := e["events"].([]any)[0].(map[string]any)["metadata"].(map[string]any)["reason"]; r != "domain_removed" {
			t.Fatalf("reason %v", r)
		}
	}
}

// date_to includes the millisecond it names, as answers show times, and a
// finer time exactly as given.
func TestDateToAtAndBelowTheMillisecond(t *testing.T) {
	w := newSendWorld(t)
	id := w.send(t, map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "s", "text": "t"})["id"].(string)
	var at time.Time
	if err := w.Pool.QueryRow(context.Background(), `SELECT created_at FROM emails WHERE id = $1`, id).Scan(&at); err != nil {
		t.Fatal(err)
	}
	at = at.UTC()
	total := func(dateTo string) any {
		t.Helper()
		r := w.Do("GET", "/v1/emails?date_to="+url.QueryEscape(dateTo), w.key, nil)
		if r.Status != 200 {
			t.Fatalf("date_to=%s: %d %s", dateTo, r.Status, r.Body)
		}
		return r.JSON(t)["pagination"].(map[string]any)["total"]
	}
	shown := w.Do("GET", "/v1/emails/"+id, w.key, nil).JSON(t)["created_at"].(string)
	if got := total(shown); got != 1.0 {
		t.Errorf("date_to=%s (the time shown): %v, want 1", shown, got)
	}
	if got := total(at.Format("2006-01-02T15:04:05.000000Z")); got != 1.0 {
		t.Errorf("date_to at the microsecond: %v, want 1", got)
	}
	if got := total(at.Add(-time.Microsecond).Format("2006-01-02T15:04:05.000000Z")); got != 0.0 {
		t.Errorf("date_to a microsecond before (%s): %v, want 0", at.Format(time.RFC3339Nano), got)
	}
	// Six digits are microseconds, even when they end in 000.
	if ms := at.Truncate(time.Millisecond); !ms.Equal(at) {
		if got := total(ms.Format("2006-01-02T15:04:05.000000Z")); got != 0.0 {
			t.Errorf("date_to at the millisecond written in microseconds (%s, email at %s): %v, want 0",
				ms.Format("15:04:05.000000"), at.Format("15:04:05.000000"), got)
		}
	}
	// A date_to written to the second includes that whole second, as a
	// date includes its whole day.
	if got := total(at.Truncate(time.Second).Format("2006-01-02T15:04:05Z07:00")); got != 1.0 {
		t.Errorf("date_to at the second (%s, email at %s): %v, want 1", at.Truncate(time.Second).Format(time.RFC3339), at.Format(time.RFC3339Nano), got)
	}
	if got := total(at.Truncate(time.Second).Add(-time.Second).Format("2006-01-02T15:04:05Z07:00")); got != 0.0 {
		t.Errorf("date_to the second before: %v, want 0", got)
	}
	// RFC 3339 allows its letters in lower case.
	if got := total(strings.ToLower(at.Truncate(time.Second).Format("2006-01-02T15:04:05Z07:00"))); got != 1.0 {
		t.Errorf("date_to in lower case: %v, want 1", got)
	}
	for _, zone := range []string{"+24:00", "+00:60", "-25:00"} {
		wantProblem(t, w.Do("GET", "/v1/emails?date_from="+url.QueryEscape("2026-11-27T07:35:38"+zone), w.key, nil), 422, "validation_failed")
	}
}
