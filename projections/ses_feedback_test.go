package projections_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/provider/ses"
	"github.com/mailroom/mailroom/projections"
)

// Text in SES feedback is the network's: a NUL in an open's user agent or
// a click's link (JSON \u0000) still lands on the email's timeline,
// rather than poisoning the email's record, which PostgreSQL (jsonb)
// cannot store it in.
func TestSESFeedbackWithANULIsProjected(t *testing.T) {
	pool, store := setup(t)
	ctx := context.Background()
	id := uuid.NewString()
	evs := []domain.Event{
		&email.Queued{EmailID: id, AccountID: "acct", From: "a@acme.test", FromEmail: "a@acme.test", To: []string{"x@example.org"}, Subject: "s", QueuedAt: time.Now()},
		&email.Sent{EmailID: id, ProviderMessageID: "p-" + id, SentAt: time.Now()},
	}
	for _, doc := range []string{
		`{"eventType":"Open","mail":{"messageId":"p-` + id + `","tags":{"mailroom_email_id":["` + id + `"]}},"open":{"timestamp":"2025-01-02T03:04:05Z","userAgent":"Mozilla\u0000/5.0","ipAddress":"192.0.2.1"}}`,
		`{"eventType":"Click","mail":{"messageId":"p-` + id + `","tags":{"mailroom_email_id":["` + id + `"]}},"click":{"timestamp":"2025-01-02T03:04:06Z","link":"https://x.example/\u0000","ipAddress":"192.0.2.1"}}`,
	} {
		fbs, err := ses.ParseFeedback([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		evs = append(evs, fbs[0].Event)
	}
	data, err := codec.EncodeAll(evs, eventstore.Metadata{Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := store.Append(ctx, email.Stream(id), eventstore.NoStream, data...)
	if err != nil {
		t.Fatal(err)
	}
	p := projections.Emails{}
	r := projections.NewRunner(pool, store, nil, quiet, p)
	if err := r.Prepare(ctx); err != nil {
		t.Fatal(err)
	}
	catchUpTo(t, r, p, res.Position)
	st, err := r.Status(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if q := st[0].Quarantined; len(q) != 0 {
		t.Fatalf("quarantined %+v", q)
	}
	var ua, link string
	if err := pool.QueryRow(ctx, `SELECT
		(SELECT metadata->>'user_agent' FROM email_events WHERE email_id = $1 AND event_type = 'opened'),
		(SELECT metadata->>'link' FROM email_events WHERE email_id = $1 AND event_type = 'clicked')`, id).Scan(&ua, &link); err != nil {
		t.Fatal(err)
	}
	if ua != "Mozilla\uFFFD/5.0" || link != "https://x.example/\uFFFD" {
		t.Errorf("timeline shows user agent %q and link %q", ua, link)
	}
}
