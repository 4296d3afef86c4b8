package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/internal/app"
	"github.com/mailroom/mailroom/internal/app/apptest"
	"github.com/mailroom/mailroom/internal/config"
	"github.com/mailroom/mailroom/internal/dnscheck/dnstest"
	"github.com/mailroom/mailroom/internal/pgtest"
	"github.com/mailroom/mailroom/internal/provider/ses/sesemulator"
	"github.com/mailroom/mailroom/internal/provider/ses/sesfake"
)

// sesEvent loads an SES developer-guide event document, tagged with the
// email it is about, wrapped in SNS as SQS receives it.
func sesEvent(t *testing.T, name, emailID string) string {
	return sesEventEdited(t, name, emailID, nil)
}

// sesEventEdited is sesEvent with a change to the document.
func sesEventEdited(t *testing.T, name, emailID string, edit func(map[string]any)) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "provider", "ses", "testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	doc["mail"].(map[string]any)["tags"].(map[string]any)["mailroom_email_id"] = []string{emailID}
	// The guide's examples are from 2016; these events happen now.
	now := time.Now().UTC().Format("2006-01-02T15:04:05.000Z")
	for _, v := range doc {
		if obj, ok := v.(map[string]any); ok {
			if _, has := obj["timestamp"]; has {
				obj["timestamp"] = now
			}
		}
	}
	if edit != nil {
		edit(doc)
	}
	inner, _ := json.Marshal(doc)
	outer, _ := json.Marshal(map[string]string{"Type": "Notification", "MessageId": "n-" + name, "Message": string(inner)})
	return string(outer)
}

// waitRecorded waits until the SES fake has seen a request matching ok.
func waitRecorded(t *testing.T, fake *sesfake.Server, what string, ok func(sesfake.Request) bool) sesfake.Request {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		for _, r := range fake.Recorded() {
			if ok(r) {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("SES never got %s; requests: %v", what, fake.Log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSESProvider runs Mailroom with MAILROOM_PROVIDER=ses against the
// protocol-level SES/SQS fake: identities follow the domain, sends carry the
// raw message and the email id tag, and SES feedback from the queue lands
// on the timeline and as webhooks once, even when SQS delivers it twice.
func TestSESProvider(t *testing.T) {
	fake := sesfake.Start(t)
	fakeAWSEnv(t)
	// An identity call fails once: the domain is unaffected and the call is retried.
	fake.FailNext("POST /v2/email/identities", sesfake.Error{Status: 500, Code: "InternalFailure", Msg: "try again"})
	dns := dnstest.Start(t)
	w := &hookWorld{newSendWorld(t, func(c *config.Config) {
		c.DNSResolvers = dns.Addr()
		c.Provider = "ses"
		c.SESEndpoint = fake.URL()
		c.SESConfigSet = "mailroom"
		c.SESEventsQueueURL = fake.URL() + "/123456789012/mailroom-events"
		c.WebhookRetries = "50ms"
	})}

	create := waitRecorded(t, fake, "a successful CreateEmailIdentity", func(r sesfake.Request) bool {
		return r.Method == "POST" && r.Path == "/v2/email/identities" && r.Body["EmailIdentity"] == "acme.test" && len(fake.Recorded()) > 1
	})
	dkim, _ := create.Body["DkimSigningAttributes"].(map[string]any)
	if dkim["DomainSigningSelector"] == nil || dkim["DomainSigningPrivateKey"] == nil {
		t.Fatalf("identity created without the BYODKIM key: %v", create.Body)
	}
	waitRecorded(t, fake, "the MAIL FROM setting", func(r sesfake.Request) bool {
		return r.Method == "PUT" && strings.Contains(r.Path, "/mail-from") && r.Body["MailFromDomain"] == "send.acme.test"
	})
	creates := 0
	for _, r := range fake.Recorded() {
		if r.Method == "POST" && r.Path == "/v2/email/identities" {
			creates++
		}
	}
	if creates < 2 {
		t.Fatalf("the failed identity call was not retried (%d calls)", creates)
	}

	rcv := newReceiver(t, always(204))
	w.endpoint(t, map[string]any{"url": rcv.URL})
	id := w.send(t, map[string]any{"from": "a@acme.test", "to": "recipient@example.com", "subject": "via SES", "text": "t", "tags": map[string]string{"campaign": "c1"}})["id"].(string)
	sent := w.waitFor(t, id, status("sent"))
	if sent["provider_message_id"] == nil {
		t.Fatalf("no provider message id: %v", sent)
	}
	send := waitRecorded(t, fake, "SendEmail", func(r sesfake.Request) bool { return r.Path == "/v2/email/outbound-emails" })
	if send.Body["ConfigurationSetName"] != "mailroom" || !strings.Contains(fmt.Sprint(send.Body["EmailTags"]), id) ||
		!strings.Contains(fmt.Sprint(send.Body["EmailTags"]), "campaign") {
		t.Fatalf("SendEmail request: %v", send.Body)
	}
	if raw := fmt.Sprint(send.Body["Content"]); !strings.Contains(raw, "Raw") {
		t.Fatalf("not a raw send: %v", send.Body["Content"])
	}

	// Feedback: a delivery, delivered twice by SQS, then a click.
	delivery := sesEvent(t, "delivery.json", id)
	fake.Enqueue(delivery)
	fake.Enqueue(delivery)
	fake.Enqueue(sesEvent(t, "click.json", id))
	e := w.waitFor(t, id, status("clicked"))
	if got := timelineOf(e); fmt.Sprint(got) != "[sent delivered clicked]" {
		t.Fatalf("timeline %v", got)
	}
	var link any
	for _, ev := range e["events"].([]any) {
		if m := ev.(map[string]any); m["event_type"] == "clicked" {
			link = m["metadata"].(map[string]any)["link"]
		}
	}
	if link == nil || link == "" {
		t.Fatalf("click without its link: %v", e["events"])
	}
	// Each event reached the webhook once.
	got := rcv.waitFor(t, 3)
	time.Sleep(300 * time.Millisecond)
	if n := len(rcv.requests()); n != 3 {
		t.Fatalf("receiver got %d requests, want 3 (sent, delivered, clicked)", n)
	}
	_ = got

	// Feedback that names no Mailroom email (identity notifications carry
	// no tags; a tag that is no email id) is dropped from the queue, not
	// redelivered for ever, and changes nothing.
	foreign := fake.Enqueue(sesEvent(t, "delivery.json", "../../x\u0000y"))
	untagged := fake.Enqueue(sesEventEdited(t, "bounce.json", id, func(d map[string]any) {
		delete(d["mail"].(map[string]any), "tags")
	}))
	for _, m := range []string{foreign, untagged} {
		deadline := time.Now().Add(60 * time.Second)
		for !slices.Contains(fake.Log(), "delete "+m) {
			if time.Now().After(deadline) {
				t.Fatalf("feedback %s was never deleted from the queue: %v", m, fake.Log())
			}
			fake.ExpireVisibility()
			time.Sleep(50 * time.Millisecond)
		}
	}
	if e := w.waitFor(t, id, func(map[string]any) bool { return true }); e["status"] != "clicked" || len(timelineOf(e)) != 3 {
		t.Fatalf("untagged feedback changed the email: %v %v", e["status"], timelineOf(e))
	}

	// A hard bounce from SES bounces and suppresses.
	id2 := w.send(t, map[string]any{"from": "a@acme.test", "to": "bounce@example.com", "subject": "b", "text": "t"})["id"].(string)
	w.waitFor(t, id2, status("sent"))
	fake.Enqueue(sesEvent(t, "bounce.json", id2))
	b := w.waitFor(t, id2, status("bounced"))
	if m := b["events"].([]any)[1].(map[string]any)["metadata"].(map[string]any); m["bounce_type"] != "Permanent" {
		t.Fatalf("bounce metadata %v", m)
	}

	// The other documents: each lands once on the timeline and as a webhook.
	cases := []struct {
		doc, status, last string
		edit              func(map[string]any)
	}{
		{"complaint.json", "complained", "complained", nil},
		{"open.json", "opened", "opened", nil},
		{"reject.json", "failed", "failed", nil},
		{"bounce.json", "bounced", "bounced", func(d map[string]any) { // a soft bounce
			b := d["bounce"].(map[string]any)
			b["bounceType"], b["bounceSubType"] = "Transient", "MailboxFull"
		}},
	}
	for i, tc := range cases {
		eid := w.send(t, map[string]any{"from": "a@acme.test", "to": fmt.Sprintf("r%d@example.com", i), "subject": tc.doc, "text": "t"})["id"].(string)
		w.waitFor(t, eid, status("sent"))
		before := len(rcv.requests())
		doc := sesEventEdited(t, tc.doc, eid, tc.edit)
		fake.Enqueue(doc)
		fake.Enqueue(doc)
		e := w.waitFor(t, eid, status(tc.status))
		tl := timelineOf(e)
		if tl[len(tl)-1] != tc.last || len(tl) != 2 {
			t.Fatalf("%s: timeline %v", tc.doc, tl)
		}
		count := func() int {
			n := 0
			for _, r := range rcv.requests()[before:] {
				var ev struct {
					Type string
					Data struct {
						EmailID string `json:"email_id"`
					}
				}
				json.Unmarshal(r.body, &ev)
				if ev.Type == "email."+tc.last && ev.Data.EmailID == eid {
					n++
				}
			}
			return n
		}
		deadline := time.Now().Add(60 * time.Second)
		for count() == 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		time.Sleep(200 * time.Millisecond) // room for a duplicate to show
		if n := count(); n != 1 {
			t.Fatalf("%s: %d email.%s webhooks, want 1", tc.doc, n, tc.last)
		}
	}

	// An endpoint created after SES's delivery but before Mailroom learns of
	// it hears of it: the delivery is news from then on.
	late := w.send(t, map[string]any{"from": "a@acme.test", "to": "late@example.com", "subject": "late", "text": "t"})["id"].(string)
	w.waitFor(t, late, status("sent"))
	deliveredAt := time.Now().UTC()
	time.Sleep(20 * time.Millisecond)
	rcv2 := newReceiver(t, always(204))
	w.endpoint(t, map[string]any{"url": rcv2.URL, "event_types": []string{"email.delivered"}})
	fake.Enqueue(sesEventEdited(t, "delivery.json", late, func(d map[string]any) {
		d["delivery"].(map[string]any)["timestamp"] = deliveredAt.Format("2006-01-02T15:04:05.000Z")
	}))
	w.waitFor(t, late, status("delivered"))
	if got := rcv2.waitFor(t, 1); !strings.Contains(string(got[0].body), late) {
		t.Fatalf("the new endpoint got %s", got[0].body)
	}

	// Verification also asks SES: the fake reports DKIM verified but MAIL FROM
	// pending, so with every record in DNS the domain stays pending.
	nd := w.Do("POST", "/api/domains", w.admin, map[string]any{"domain": "checked.example"})
	if nd.Status != 201 {
		t.Fatalf("add domain: %d %s", nd.Status, nd.Body)
	}
	waitIdentity(t, fake, "checked.example")
	publish(t, nd.JSON(t), dns)
	v := w.Do("POST", "/api/domains/"+nd.JSON(t)["id"].(string)+"/verify", w.admin, nil).JSON(t)
	if v["dns_check"].(map[string]any)["ok"] != true || v["dkim_status"] != "success" || v["mail_from_status"] != "pending" || v["status"] != "pending" {
		t.Fatalf("verify with SES's own check: %s %v", statuses(v), v["dns_check"])
	}
	waitRecorded(t, fake, "GetEmailIdentity", func(r sesfake.Request) bool {
		return r.Method == "GET" && r.Path == "/v2/email/identities/checked.example"
	})

	// A DKIM rotation's cutover hands SES the new key.
	var domainID string
	w.Pool.QueryRow(context.Background(), "SELECT id FROM domains WHERE name = 'acme.test'").Scan(&domainID)
	rot := w.Do("POST", "/api/domains/"+domainID+"/rotate", w.admin, nil)
	if rot.Status != 200 {
		t.Fatalf("rotate: %d %s", rot.Status, rot.Body)
	}
	newSel := rot.JSON(t)["dkim_transition"].(map[string]any)["selector"].(string)
	publish(t, rot.JSON(t), dns)
	pollDomains(t, w.Server)
	swap := waitRecorded(t, fake, "the signing-key swap", func(r sesfake.Request) bool {
		return r.Method == "PUT" && strings.HasSuffix(r.Path, "/dkim/signing")
	})
	if attrs, _ := swap.Body["SigningAttributes"].(map[string]any); attrs["DomainSigningSelector"] != newSel {
		t.Fatalf("signing-key swap %v, want selector %s", swap.Body, newSel)
	}

	// Removing the domain deletes the identity.
	if err := w.Commands.RemoveDomain(context.Background(), w.account, domainID, commands.Meta{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	waitRecorded(t, fake, "DeleteEmailIdentity", func(r sesfake.Request) bool {
		return r.Method == "DELETE" && r.Path == "/v2/email/identities/acme.test"
	})
}

// TestSESEmulator sends through the API with MAILROOM_PROVIDER=ses pointed
// at aws-ses-v2-local: the message lands in the emulator's store with its
// headers and parts, and the timeline reaches sent. (The emulator keeps no
// message tags; the tag is checked against the fake in TestSESProvider.)
func TestSESEmulator(t *testing.T) {
	base := sesemulator.Start(t)
	if base == "" {
		return // not installed; sesemulator said so
	}
	fakeAWSEnv(t)
	w := newSendWorld(t, func(c *config.Config) { c.Provider = "ses"; c.SESEndpoint = base; c.SESConfigSet = "mailroom" })
	id := w.send(t, map[string]any{"from": "Acme <hello@acme.test>", "to": "ann@example.org", "subject": "Through the emulator",
		"html": "<p>Hello HTML</p>", "text": "Hello text"})["id"].(string)
	e := w.waitFor(t, id, status("sent"))
	m := sesemulator.Stored(t, base, e["provider_message_id"].(string))
	if !strings.Contains(m.From, "hello@acme.test") || m.Subject != "Through the emulator" ||
		!strings.Contains(m.Body.Text, "Hello text") || !strings.Contains(m.Body.HTML, "Hello HTML") {
		t.Fatalf("stored message %+v", m)
	}
}

// fakeAWSEnv gives the AWS SDK static credentials and no profile or CA
// bundle from the machine, for tests against fakes and emulators.
func fakeAWSEnv(t *testing.T) {
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDFAKE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "fake-secret")
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_CA_BUNDLE", "")
}

// SES without a configuration set or without an events queue sends, but
// no delivery, bounce or complaint ever comes back: a worker says so when
// it starts, naming both settings, rather than leave emails sent for ever
// without a word.
func TestSESWithoutFeedbackSaysSoAtStart(t *testing.T) {
	fake := sesfake.Start(t)
	fakeAWSEnv(t)
	url := pgtest.NewURL(t)
	for _, c := range []struct {
		name             string
		configSet, queue string
		warned           bool
	}{
		{"neither", "", "", true},
		{"no queue", "mailroom", "", true},
		{"no configuration set", "", fake.URL() + "/123456789012/mailroom-events", true},
		{"both", "mailroom", fake.URL() + "/123456789012/mailroom-events", false},
	} {
		cfg := apptest.Config(t, url)
		cfg.Provider, cfg.SESEndpoint, cfg.SESConfigSet, cfg.SESEventsQueueURL = "ses", fake.URL(), c.configSet, c.queue
		var logs bytes.Buffer
		a, err := app.Open(context.Background(), cfg, slog.New(slog.NewTextHandler(&logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		a.Close()
		said := strings.Contains(logs.String(), "MAILROOM_SES_CONFIGURATION_SET and MAILROOM_SES_EVENTS_QUEUE_URL")
		if said != c.warned {
			t.Errorf("%s: warned %t, want %t; logs:\n%s", c.name, said, c.warned, logs.String())
		}
	}
}

// An SES account that cannot send to everyone (in the sandbox, sending
// paused, under review) is named when the workers start: otherwise an
// operator would learn of it only from emails that fail or never arrive.
func TestSESAccountThatCannotSendToEveryoneIsNamedAtStart(t *testing.T) {
	fake := sesfake.Start(t)
	fakeAWSEnv(t)
	url := pgtest.NewURL(t)
	warnings := []string{"SES account is in the sandbox", "SES sending is paused", "SES account under review"}
	for _, c := range []struct {
		name   string
		status sesfake.AccountStatus
		warned []bool
	}{
		{"healthy production account", sesfake.AccountStatus{}, []bool{false, false, false}},
		{"sandbox", sesfake.AccountStatus{Sandbox: true}, []bool{true, false, false}},
		{"paused on probation", sesfake.AccountStatus{SendingPaused: true, Enforcement: "PROBATION"}, []bool{false, true, true}},
	} {
		fake.SetAccountStatus(c.status)
		cfg := apptest.Config(t, url)
		cfg.Provider, cfg.SESEndpoint = "ses", fake.URL()
		cfg.Roles = []string{"workers"}
		logs := &lockedLog{}
		a, err := app.Open(context.Background(), cfg, slog.New(slog.NewTextHandler(logs, nil)))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.RunWorkers(ctx) }()
		// The account is read before the rate is set, which is said once known.
		deadline := time.Now().Add(60 * time.Second)
		for !strings.Contains(logs.String(), "provider send rate limited") {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the workers never set the send rate; logs:\n%s", c.name, logs)
			}
			time.Sleep(20 * time.Millisecond)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: workers: %v", c.name, err)
		}
		a.Close()
		for i, w := range warnings {
			if said := strings.Contains(logs.String(), w); said != c.warned[i] {
				t.Errorf("%s: %q said %t, want %t; logs:\n%s", c.name, w, said, c.warned[i], logs)
			}
		}
	}
}

// lockedLog is a log destination the workers write to while the test reads.
type lockedLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// An SES events queue the workers cannot read (IAM denies it, a wrong
// URL) records no bounce or complaint: readiness and the worker's state
// say so after three failures in a row, and clear once it is read again.
func TestAnSESEventsQueueThatCannotBeReadIsNotReady(t *testing.T) {
	fake := sesfake.Start(t)
	fakeAWSEnv(t)
	for range 4 {
		fake.FailNext("AmazonSQS.ReceiveMessage", sesfake.Error{Status: 400, Code: "AccessDenied", Msg: "not authorized to sqs:ReceiveMessage"})
	}
	s := apptest.Start(t, func(c *config.Config) {
		c.Provider, c.SESEndpoint, c.SESConfigSet = "ses", fake.URL(), "mailroom"
		c.SESEventsQueueURL = fake.URL() + "/123456789012/mailroom-events"
	})
	ctx := context.Background()
	eventually(t, "not ready", func() (bool, string) {
		_, err := s.App.Ready(ctx)
		why := fmt.Sprint(err)
		return strings.Contains(why, "worker ses-feedback is failing since") && strings.Contains(why, "AccessDenied"), why
	})
	eventually(t, "ready again", func() (bool, string) {
		_, err := s.App.Ready(ctx)
		return err == nil, fmt.Sprint(err)
	})
}
