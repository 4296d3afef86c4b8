package app_test

import (
	"context"
	"testing"
	"time"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/internal/config"
)

// Recording a send at the version the pipeline read appends once; when the
// stream moved since that read, the outcome is decided again on a fresh
// read, so an email failed meanwhile is not also recorded sent.
func TestRecordEmailSentAtTheVersionRead(t *testing.T) {
	w := newSendWorld(t, func(c *config.Config) { c.Roles = []string{"api", "projections"} }) // no pipeline: the test plays it
	ctx := context.Background()
	meta := commands.Meta{Actor: "operator"}
	send := func() string {
		return w.send(t, map[string]any{"from": "a@acme.test", "to": "x@example.org", "subject": "s", "text": "t"})["id"].(string)
	}

	id := send()
	st, ver, err := w.Commands.EmailAt(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Commands.RecordEmailSentAt(ctx, st, ver, commands.Acceptance{MessageID: "pm-" + id, At: time.Now()}, meta); err != nil {
		t.Fatal(err)
	}
	if err := w.Commands.RecordEmailSentAt(ctx, st, ver, commands.Acceptance{MessageID: "pm-again-" + id, At: time.Now()}, meta); err != nil {
		t.Fatal(err) // a stale version: decided again, and already sent
	}
	after, err := w.Commands.Email(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if after.Sent == nil || after.Sent.ProviderMessageID != "pm-"+id {
		t.Fatalf("sent = %+v, want recorded once with pm-%s", after.Sent, id)
	}

	id = send()
	st, ver, err = w.Commands.EmailAt(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Commands.FailEmail(ctx, id, "domain_removed", "the sending domain was removed", meta); err != nil {
		t.Fatal(err)
	}
	if err := w.Commands.RecordEmailSentAt(ctx, st, ver, commands.Acceptance{MessageID: "pm-" + id, At: time.Now()}, meta); err != nil {
		t.Fatal(err)
	}
	if after, err = w.Commands.Email(ctx, id); err != nil {
		t.Fatal(err)
	}
	if after.Sent != nil || after.Failed == nil {
		t.Fatalf("an email failed after the read was recorded sent: sent %+v, failed %+v", after.Sent, after.Failed)
	}
}
