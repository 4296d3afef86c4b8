package app_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/internal/app/apptest"
	"github.com/mailroom/mailroom/internal/config"
	"github.com/mailroom/mailroom/internal/provider/ses/sesfake"
)

// sesEvent loads an SES developer-guide event document, tagged with the
// email it is about, wrapped in SNS as SQS receives it.
func sesEvent(t *testing.T, name, emailID string) string {
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
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDFAKE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "fake-secret")
	t.Setenv("AWS_SESSION_TOKEN", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_CA_BUNDLE", "")
	// An identity call fails once: the domain is unaffected and the call is retried.
	fake.FailNext("POST /v2/email/identities", sesfake.Error{Status: 500, Code: "InternalFailure", Msg: "try again"})
	w := &hookWorld{newSendWorld(t, func(c *config.Config) {
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

	// A hard bounce from SES bounces and suppresses.
	id2 := w.send(t, map[string]any{"from": "a@acme.test", "to": "bounce@example.com", "subject": "b", "text": "t"})["id"].(string)
	w.waitFor(t, id2, status("sent"))
	fake.Enqueue(sesEvent(t, "bounce.json", id2))
	b := w.waitFor(t, id2, status("bounced"))
	if m := b["events"].([]any)[1].(map[string]any)["metadata"].(map[string]any); m["bounce_type"] != "Permanent" {
		t.Fatalf("bounce metadata %v", m)
	}

	// Removing the domain deletes the identity.
	var domainID string
	w.Pool.QueryRow(context.Background(), "SELECT id FROM domains WHERE name = 'acme.test'").Scan(&domainID)
	if err := w.Commands.RemoveDomain(context.Background(), w.account, domainID, commands.Meta{Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	waitRecorded(t, fake, "DeleteEmailIdentity", func(r sesfake.Request) bool {
		return r.Method == "DELETE" && r.Path == "/v2/email/identities/acme.test"
	})
	_ = apptest.Config
}
