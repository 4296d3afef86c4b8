package processmanagers_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/blob"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/datakeys"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/eventstore/memory"
	"github.com/mailroom/mailroom/internal/outcomes"
	"github.com/mailroom/mailroom/internal/pgtest"
	"github.com/mailroom/mailroom/internal/provider"
	"github.com/mailroom/mailroom/internal/provider/sandbox"
	"github.com/mailroom/mailroom/internal/scan"
	"github.com/mailroom/mailroom/internal/secretbox"
	"github.com/mailroom/mailroom/processmanagers"
	"github.com/mailroom/mailroom/projections"
)

// These tests run the email pipeline's decisions on the in-memory event
// store, with emails' data keys in a test database: what the read models
// say of an email comes from pipelineRig's checks, and the provider is the sandbox outbox or a stand-in. Process
// runs on the test's goroutine, so tests change the rig between calls.

var queuedAt = time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC)

// eicar is the anti-virus test string, in two halves so that this file does
// not look like it to a scanner.
var eicar = `X5O!P%@AP[4\PZX54(P^)7CC)7}$` + `EICAR-STANDARD-ANTIVIRUS-TEST-FILE!$H+H*`

type pipelineRig struct {
	pipeline *processmanagers.Pipeline
	store    *memory.Store
	blobs    *blob.FS
	keys     *datakeys.Keyring
	content  *datakeys.Blobs
	outbox   *sandbox.Outbox
	pool     *pgxpool.Pool // the data keys' database, which also has River's tables

	checks   processmanagers.Checks
	sender   provider.Sender // nil: the outbox
	now      time.Time
	logs     bytes.Buffer
	outcomes *outcomes.Recorder
}

func newPipelineRig(t *testing.T) *pipelineRig {
	t.Helper()
	r := &pipelineRig{store: memory.New(), checks: processmanagers.Checks{CanSend: true}, now: queuedAt.Add(time.Second)}
	t.Cleanup(func() { r.store.Close() })
	box, err := secretbox.New(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	if r.blobs, err = blob.NewFS(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	r.pool = pgtest.NewPool(t)
	r.keys = datakeys.New(r.pool, box)
	r.content = datakeys.NewBlobs(r.blobs, r.keys)
	if r.outbox, err = sandbox.NewOutbox(t.TempDir(), 0); err != nil {
		t.Fatal(err)
	}
	now := func() time.Time { return r.now }
	r.outcomes = outcomes.New(prometheus.NewRegistry())
	r.pipeline = &processmanagers.Pipeline{
		Log:      slog.New(slog.NewJSONHandler(&r.logs, nil)),
		Outcomes: r.outcomes,
		Commands: commands.New(commands.Deps{Store: r.store, Now: now, Box: box, Content: r.content}),
		Content:  r.content,
		Scanner:  scan.New("", 0),
		Sender:   r,
		Checks: func(context.Context, string, string, string, string, []string) (processmanagers.Checks, error) {
			return r.checks, nil
		},
		Settle:   func(context.Context, eventstore.Position, ...projections.Name) error { return nil },
		MaxAge:   time.Hour,
		Now:      now,
		Feedback: sandbox.Feedback,
	}
	return r
}

// Send hands the message to the rig's sender.
func (r *pipelineRig) Send(ctx context.Context, m provider.Outbound) (string, error) {
	if r.sender == nil {
		return r.outbox.Send(ctx, m)
	}
	return r.sender.Send(ctx, m)
}

type sendFunc func(context.Context, provider.Outbound) (string, error)

func (f sendFunc) Send(ctx context.Context, m provider.Outbound) (string, error) { return f(ctx, m) }

// queue records a queued email to the given recipients with an HTML body
// and attachments named as given, and returns its id.
func (r *pipelineRig) queue(t *testing.T, html string, to []string, attachments ...string) string {
	t.Helper()
	return r.queueAs(t, eventstore.Metadata{Actor: "apikey:k_test"}, html, to, attachments...)
}

// queueAs is queue with the EmailQueued's metadata as given.
func (r *pipelineRig) queueAs(t *testing.T, md eventstore.Metadata, html string, to []string, attachments ...string) string {
	t.Helper()
	ctx := context.Background()
	id := uuid.NewString()
	d, err := r.content.Put(ctx, id, "acct-1", []byte(html))
	if err != nil {
		t.Fatal(err)
	}
	q := &email.Queued{EmailID: id, AccountID: "acct-1", DomainID: "dom-1", From: "Acme <news@example.com>",
		FromEmail: "news@example.com", To: to, Subject: "Your receipt", HTMLDigest: string(d[0]), QueuedAt: queuedAt}
	for _, name := range attachments {
		content := []byte("content of " + name)
		ad, err := r.content.Put(ctx, id, "acct-1", content)
		if err != nil {
			t.Fatal(err)
		}
		q.Attachments = append(q.Attachments, email.Attachment{Filename: name, ContentType: "application/octet-stream",
			SizeBytes: int64(len(content)), Digest: string(ad[0])})
	}
	data, err := codec.Encode(q, md)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.store.Append(ctx, email.Stream(id), eventstore.NoStream, data); err != nil {
		t.Fatal(err)
	}
	return id
}

// process runs the pipeline on the email as its queued event would.
func (r *pipelineRig) process(id string) error {
	return r.pipeline.Process(context.Background(), id, eventstore.Start)
}

// events returns the email's stream.
func (r *pipelineRig) events(t *testing.T, id string) []domain.Event {
	t.Helper()
	recs, err := r.store.ReadStream(context.Background(), email.Stream(id), 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]domain.Event, len(recs))
	for i, rec := range recs {
		if out[i], err = codec.Decode(rec); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func (r *pipelineRig) types(t *testing.T, id string) []string {
	t.Helper()
	var out []string
	for _, e := range r.events(t, id) {
		out = append(out, e.EventType())
	}
	return out
}

// failure returns the email's failure, if it has one.
func (r *pipelineRig) failure(t *testing.T, id string) *email.Failed {
	t.Helper()
	for _, e := range r.events(t, id) {
		if f, ok := e.(*email.Failed); ok {
			return f
		}
	}
	return nil
}

func TestPipelineSendsAQueuedEmailOnce(t *testing.T) {
	r := newPipelineRig(t)
	id := r.queue(t, "<p>Thanks</p>", []string{"success@simulator.amazonses.com", "bounce@simulator.amazonses.com"}, "receipt.pdf")

	for range 2 { // the second time, as after a redelivery
		if err := r.process(id); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{"EmailQueued", "EmailScanned", "EmailSent", "EmailDelivered", "EmailBounced"}
	if got := r.types(t, id); !slices.Equal(got, want) {
		t.Fatalf("email stream %q, want %q", got, want)
	}
	evs := r.events(t, id)
	if s := evs[2].(*email.Sent); s.ProviderMessageID != sandbox.MessageID(id) {
		t.Fatalf("sent %+v", s)
	}
	if sc := evs[1].(*email.Scanned); len(sc.Attachments) != 1 || sc.Attachments[0].Filename != "receipt.pdf" {
		t.Fatalf("scanned %+v", sc)
	}
	if b := evs[4].(*email.Bounced); !slices.Equal(b.Recipients, []string{"bounce@simulator.amazonses.com"}) || b.BounceType != "Permanent" {
		t.Fatalf("bounced %+v", b)
	}
	msg, err := os.ReadFile(r.outbox.Path(id))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(msg), "Subject: Your receipt") || !strings.Contains(string(msg), "X-Mailroom-Email-Id: "+id) ||
		!strings.Contains(string(msg), "<p>Thanks</p>") {
		t.Fatalf("message written:\n%s", msg)
	}
}

func TestPipelineLeavesAnErasedEmailAlone(t *testing.T) {
	r := newPipelineRig(t)
	id := r.queue(t, "<p>Thanks</p>", []string{"ann@example.org"}, "receipt.pdf")
	if err := r.keys.Destroy(context.Background(), codec.KeyID(id), "acct-1"); err != nil {
		t.Fatal(err)
	}
	if err := r.process(id); err != nil {
		t.Fatalf("processing an erased email: %v, want done", err)
	}
	if got := r.types(t, id); !slices.Equal(got, []string{"EmailQueued"}) {
		t.Fatalf("email stream %q: nothing more happens to an erased email", got)
	}
	if _, err := os.Stat(r.outbox.Path(id)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("an erased email reached the provider: %v", err)
	}
}

func TestPipelineHoldsTheEmailOfASuspendedAccount(t *testing.T) {
	r := newPipelineRig(t)
	id := r.queue(t, "<p>Hi</p>", []string{"ann@example.org"})
	r.checks.Suspended = true
	for range 2 {
		if err := r.process(id); err != nil {
			t.Fatal(err)
		}
	}
	if got := r.types(t, id); !slices.Equal(got, []string{"EmailQueued", "EmailHeld"}) {
		t.Fatalf("email stream %q: held once, not sent", got)
	}
	// Released, it goes on from where it stopped.
	r.checks.Suspended = false
	if err := r.pipeline.Commands.ReleaseEmail(context.Background(), id, commands.Meta{Actor: "operator"}); err != nil {
		t.Fatal(err)
	}
	if err := r.process(id); err != nil {
		t.Fatal(err)
	}
	want := []string{"EmailQueued", "EmailHeld", "EmailReleased", "EmailScanned", "EmailSent", "EmailDelivered"}
	if got := r.types(t, id); !slices.Equal(got, want) {
		t.Fatalf("email stream %q, want %q", got, want)
	}
}

// The time an email was held is not time spent retrying: released long
// after MaxAge, it still gets MaxAge of retries from its release.
func TestPipelineRetriesAReleasedEmailForMaxAgeFromItsRelease(t *testing.T) {
	r := newPipelineRig(t)
	id := r.queue(t, "<p>Hi</p>", []string{"ann@example.org"})
	r.checks.Suspended = true
	if err := r.process(id); err != nil {
		t.Fatal(err)
	}
	r.checks.Suspended = false
	released := queuedAt.Add(3 * r.pipeline.MaxAge)
	r.now = released
	if err := r.pipeline.Commands.ReleaseEmail(context.Background(), id, commands.Meta{Actor: "operator"}); err != nil {
		t.Fatal(err)
	}
	down := errors.New("connection refused")
	r.sender = sendFunc(func(context.Context, provider.Outbound) (string, error) { return "", down })
	r.now = released.Add(time.Second)
	if err := r.process(id); !processmanagers.IsTransient(err) {
		t.Fatalf("provider down right after the release: %v, want a transient error", err)
	}
	if f := r.failure(t, id); f != nil {
		t.Fatalf("failed at its first try after the release: %+v", f)
	}
	r.now = released.Add(r.pipeline.MaxAge + time.Second)
	if err := r.process(id); err != nil {
		t.Fatal(err)
	}
	if f := r.failure(t, id); f == nil || f.Reason != email.ReasonProviderUnavailable {
		t.Fatalf("email stream %q MaxAge after the release, failure %+v", r.types(t, id), f)
	}
}

// A domain removed while its email waits for the provider's rate (or its
// attachments) stops the email: it fails as domain_removed and never
// reaches the provider, as the removal's answer promised.
func TestPipelineStopsAnEmailWhoseDomainGoesWhileItWaits(t *testing.T) {
	r := newPipelineRig(t)
	var sent atomic.Int32
	r.sender = sendFunc(func(context.Context, provider.Outbound) (string, error) {
		sent.Add(1)
		return "msg-1", nil
	})
	r.pipeline.Pace = func(context.Context, int) error {
		r.checks.CanSend = false // removed while the email waits its turn
		return nil
	}
	id := r.queue(t, "<p>Hi</p>", []string{"ann@example.org"})
	if err := r.process(id); err != nil {
		t.Fatal(err)
	}
	if f := r.failure(t, id); f == nil || f.Reason != email.ReasonDomainRemoved {
		t.Fatalf("email stream %q, failure %+v; want failed for %s", r.types(t, id), f, email.ReasonDomainRemoved)
	}
	if n := sent.Load(); n != 0 {
		t.Fatalf("the provider got the message %d times after its domain was removed", n)
	}

	// A domain still there lets it go after the same wait, a turn of as
	// many tokens as the message has recipients (SES counts its rate so).
	r.checks.CanSend = true
	var asked []int
	r.pipeline.Pace = func(_ context.Context, recipients int) error { asked = append(asked, recipients); return nil }
	id = r.queue(t, "<p>Hi</p>", []string{"ann@example.org", "Bob <bob@example.org>", "carl@example.org"})
	if err := r.process(id); err != nil {
		t.Fatal(err)
	}
	if n := sent.Load(); n != 1 || !slices.Equal(asked, []int{3}) {
		t.Fatalf("the provider got the message %d times after turns of %v tokens, want once after one of 3; stream %q", n, asked, r.types(t, id))
	}
}

// A suspension or a suppression answered while the email waits for its
// turn holds for it too: the checks come right before the provider call.
func TestPipelineChecksRightBeforeTheProvider(t *testing.T) {
	for _, c := range []struct {
		name   string
		change func(*processmanagers.Checks)
		want   []string
	}{
		{"suspended", func(c *processmanagers.Checks) { c.Suspended = true }, []string{"EmailQueued", "EmailHeld"}},
		{"suppressed", func(c *processmanagers.Checks) { c.Suppressed = []string{"ann@example.org"} }, []string{"EmailQueued", "EmailFailed"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newPipelineRig(t)
			var sent atomic.Int32
			r.sender = sendFunc(func(context.Context, provider.Outbound) (string, error) { sent.Add(1); return "msg-1", nil })
			r.pipeline.Pace = func(context.Context, int) error { c.change(&r.checks); return nil }
			id := r.queue(t, "<p>Hi</p>", []string{"ann@example.org"})
			if err := r.process(id); err != nil {
				t.Fatal(err)
			}
			if got := r.types(t, id); !slices.Equal(got, c.want) || sent.Load() != 0 {
				t.Fatalf("email stream %q, provider calls %d; want %q and none", got, sent.Load(), c.want)
			}
		})
	}
}

// An email erased while it waits for its turn of the provider's rate (its
// message already rendered) does not leave once its turn comes: the
// erasure was answered, its row gone from the read model, before the
// provider call. A row missing only because the read model is behind
// holds nothing up.
func TestPipelineChecksForAnErasureRightBeforeTheProvider(t *testing.T) {
	for _, erase := range []bool{true, false} {
		r := newPipelineRig(t)
		id := r.queue(t, "<p>Hi</p>", []string{"ann@example.org"})
		box, err := secretbox.New(make([]byte, 32))
		if err != nil {
			t.Fatal(err)
		}
		eraser := commands.New(commands.Deps{Store: r.store, Now: func() time.Time { return r.now }, Box: box, DataKeys: r.keys, Content: r.content})
		r.pipeline.Pace = func(ctx context.Context, _ int) error {
			r.checks.Unlisted = true
			if erase {
				_, err := eraser.EraseEmail(ctx, id, email.ErasedOnRequest, "er-1", commands.Started("operator"))
				return err
			}
			return nil
		}
		var sent atomic.Int32
		r.sender = sendFunc(func(context.Context, provider.Outbound) (string, error) { sent.Add(1); return "msg-1", nil })
		if err := r.process(id); err != nil {
			t.Fatalf("process: %v", err)
		}
		switch got := r.types(t, id); {
		case erase && (sent.Load() != 0 || !slices.Equal(got, []string{"EmailQueued", "EmailErased"})):
			t.Errorf("an email erased before its provider call: %d provider calls, stream %q", sent.Load(), got)
		case !erase && (sent.Load() != 1 || !slices.Contains(got, "EmailSent")):
			t.Errorf("an email a read model has not reached yet: %d provider calls, stream %q", sent.Load(), got)
		}
	}
}

// A removed domain has no signing key to read (SMTP): its email fails as
// removed, not waiting for a key that will not come.
func TestPipelineFailsARemovedDomainsEmailBeforeItsKey(t *testing.T) {
	r := newPipelineRig(t)
	r.checks.CanSend = false
	r.pipeline.SigningKey = func(context.Context, string, string) (*provider.DKIMKey, error) {
		return nil, errors.New("no such domain")
	}
	id := r.queue(t, "<p>Hi</p>", []string{"ann@example.org"})
	if err := r.process(id); err != nil {
		t.Fatalf("processing: %v", err)
	}
	if f := r.failure(t, id); f == nil || f.Reason != email.ReasonDomainRemoved {
		t.Fatalf("email stream %q, failure %+v; want failed for %s", r.types(t, id), f, email.ReasonDomainRemoved)
	}
}

func TestPipelineFailsWhatMustNotLeave(t *testing.T) {
	for _, c := range []struct {
		name        string
		checks      processmanagers.Checks
		html        string
		attachments []string
		reason      string
	}{
		{"domain no longer sends", processmanagers.Checks{}, "<p>Hi</p>", nil, email.ReasonDomainRemoved},
		{"suppressed recipient", processmanagers.Checks{CanSend: true, Suppressed: []string{"ann@example.org"}}, "<p>Hi</p>", nil, email.ReasonSuppressed},
		{"blocked attachment type", processmanagers.Checks{CanSend: true}, "<p>Hi</p>", []string{"setup.exe"}, email.ReasonBlockedAttachment},
		{"malware in the body", processmanagers.Checks{CanSend: true}, eicar, nil, email.ReasonMalware},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newPipelineRig(t)
			r.checks = c.checks
			id := r.queue(t, c.html, []string{"ann@example.org"}, c.attachments...)
			if err := r.process(id); err != nil {
				t.Fatal(err)
			}
			if f := r.failure(t, id); f == nil || f.Reason != c.reason {
				t.Fatalf("email stream %q, failure %+v; want failed for %s", r.types(t, id), f, c.reason)
			}
			if n := testutil.ToFloat64(r.outcomes.Failures.WithLabelValues(c.reason)); n != 1 {
				t.Errorf("mailroom_emails_failed_total{reason=%q} = %v, want 1", c.reason, n)
			}
			if _, err := os.Stat(r.outbox.Path(id)); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a failed email reached the provider: %v", err)
			}
		})
	}
}

func TestPipelineOnProviderErrors(t *testing.T) {
	t.Run("rejected", func(t *testing.T) {
		r := newPipelineRig(t)
		r.sender = sendFunc(func(context.Context, provider.Outbound) (string, error) {
			return "", &provider.RejectedError{Reason: "MessageRejected: RCPT TO:<ann@example.org>: 550 5.1.1 <ann@example.org>: User unknown", Code: "MessageRejected"}
		})
		id := r.queue(t, "<p>Hi</p>", []string{"ann@example.org"})
		if err := r.process(id); err != nil {
			t.Fatal(err)
		}
		f := r.failure(t, id)
		if f == nil || f.Reason != email.ReasonProviderRejected || f.Detail != "the provider rejected the message (MessageRejected)" {
			t.Fatalf("failure %+v", f)
		}
		// The log keeps what the provider said for operators, but not
		// the address, which an erasure could not remove from it.
		logged := r.logs.String()
		if !strings.Contains(logged, "provider rejected the message") || !strings.Contains(logged, "User unknown") ||
			!strings.Contains(logged, id) || strings.Contains(logged, "ann@example.org") {
			t.Errorf("log:\n%s", logged)
		}
	})
	t.Run("unavailable", func(t *testing.T) {
		r := newPipelineRig(t)
		down := errors.New("connection refused")
		r.sender = sendFunc(func(context.Context, provider.Outbound) (string, error) { return "", down })
		id := r.queue(t, "<p>Hi</p>", []string{"ann@example.org"})
		// Within MaxAge it is tried again.
		if err := r.process(id); !processmanagers.IsTransient(err) || !errors.Is(err, down) {
			t.Fatalf("provider down: %v, want a transient error", err)
		}
		if f := r.failure(t, id); f != nil {
			t.Fatalf("failed at the first outage: %+v", f)
		}
		r.now = queuedAt.Add(r.pipeline.MaxAge + time.Second)
		if err := r.process(id); err != nil {
			t.Fatal(err)
		}
		if f := r.failure(t, id); f == nil || f.Reason != email.ReasonProviderUnavailable {
			t.Fatalf("email stream %q after MaxAge, failure %+v", r.types(t, id), f)
		}
	})
}

// An email that gives up on a provider still down (provider_unavailable
// past MAILROOM_SEND_MAX_AGE) does not make /readyz report the provider
// healthy again: only a send that goes out, or a provider's rejection,
// ends the run of failures.
func TestAProviderStillDownStaysFailingWhileOldEmailsGiveUp(t *testing.T) {
	r := newPipelineRig(t)
	down := errors.New("connection refused")
	r.sender = sendFunc(func(context.Context, provider.Outbound) (string, error) { return "", down })
	old := r.queue(t, "<p>old</p>", []string{"ann@example.org"})
	for range 5 {
		if err := r.process(old); !processmanagers.IsTransient(err) {
			t.Fatalf("provider down: %v, want a transient error", err)
		}
	}
	if err := r.outcomes.ProviderFailing(r.now); err == nil {
		t.Fatal("five failed sends in a row, and the provider is not reported failing")
	}
	r.now = queuedAt.Add(r.pipeline.MaxAge + time.Second)
	if err := r.process(old); err != nil {
		t.Fatal(err)
	}
	if f := r.failure(t, old); f == nil || f.Reason != email.ReasonProviderUnavailable {
		t.Fatalf("the old email: %q", r.types(t, old))
	}
	err := r.outcomes.ProviderFailing(r.now)
	if err == nil || !strings.Contains(err.Error(), "6 sends in a row") {
		t.Fatalf("the provider is still down after an email gave up on it: %v", err)
	}

	// A rejection is an answer from a provider that works.
	r.sender = sendFunc(func(context.Context, provider.Outbound) (string, error) {
		return "", &provider.RejectedError{Reason: "MessageRejected", Code: "MessageRejected"}
	})
	if err := r.process(r.queue(t, "<p>new</p>", []string{"bob@example.org"})); err != nil {
		t.Fatal(err)
	}
	if err := r.outcomes.ProviderFailing(r.now); err != nil {
		t.Fatalf("the provider answered with a rejection, and is still reported failing: %v", err)
	}
}

// refusingAppends is an event store whose appends fail while refuse is
// set, as a database does when its disk is full or it is read-only.
type refusingAppends struct {
	eventstore.Store
	refuse atomic.Bool
}

func (s *refusingAppends) Append(ctx context.Context, stream string, expected eventstore.ExpectedVersion, events ...eventstore.EventData) (eventstore.AppendResult, error) {
	if s.refuse.Load() {
		return eventstore.AppendResult{}, errors.New("could not extend file: No space left on device (SQLSTATE 53100)")
	}
	return s.Store.Append(ctx, stream, expected, events...)
}

// An email whose stored body or attachment is missing (a blob directory
// not shared between instances, an S3 lifecycle rule) is retried, as an
// erasure under way also removes the content before the email reads as
// erased, and fails once it has been going for MaxAge, the blob named in
// the log.
func TestPipelineFailsAnEmailWhoseStoredContentIsLost(t *testing.T) {
	for name, lose := range map[string]func(q *email.Queued) string{
		"body":       func(q *email.Queued) string { return q.HTMLDigest },
		"attachment": func(q *email.Queued) string { return q.Attachments[0].Digest },
	} {
		t.Run(name, func(t *testing.T) {
			r := newPipelineRig(t)
			id := r.queue(t, "<p>Hi</p>", []string{"ann@example.org"}, "report.pdf")
			lost := lose(r.events(t, id)[0].(*email.Queued))
			if err := r.blobs.Delete(context.Background(), blob.Digest(lost)); err != nil {
				t.Fatal(err)
			}
			if err := r.process(id); !processmanagers.IsTransient(err) || !strings.Contains(err.Error(), lost) {
				t.Fatalf("first try of an email whose %s is lost: %v, want a transient error naming the blob", name, err)
			}
			if f := r.failure(t, id); f != nil {
				t.Fatalf("failed at its first try: %+v", f)
			}
			r.now = queuedAt.Add(r.pipeline.MaxAge + time.Second)
			if err := r.process(id); err != nil {
				t.Fatalf("try after MaxAge: %v, want the email failed", err)
			}
			f := r.failure(t, id)
			if f == nil || f.Reason != email.ReasonInternalError {
				t.Fatalf("email stream %q, failure %+v", r.types(t, id), f)
			}
			if !strings.Contains(r.logs.String(), lost) {
				t.Errorf("the log does not name the lost blob:\n%s", r.logs.String())
			}
		})
	}
}

// deleteThen is content whose Delete, once done, runs then.
type deleteThen struct {
	commands.Content
	then func()
}

func (d deleteThen) Delete(ctx context.Context, ds ...blob.Digest) error {
	err := d.Content.Delete(ctx, ds...)
	if d.then != nil {
		d.then()
	}
	return err
}

// A send try that runs while its email is erased, between the erasure's
// removal of the content and the destruction of its key, finds the
// content gone: the email is not failed for it (no false internal_error),
// and the erasure ends it.
func TestASendRacingAnErasureDoesNotFailTheEmail(t *testing.T) {
	r := newPipelineRig(t)
	id := r.queue(t, "<p>Hi</p>", []string{"ann@example.org"}, "report.pdf")
	box, err := secretbox.New(make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	var tried error
	eraser := commands.New(commands.Deps{Store: r.store, Now: func() time.Time { return r.now }, Box: box, DataKeys: r.keys,
		Content: deleteThen{Content: r.content, then: func() { tried = r.process(id) }}})
	if _, err := eraser.EraseEmail(context.Background(), id, email.ErasedOnRequest, "er-1", commands.Started("operator")); err != nil {
		t.Fatal(err)
	}
	if !processmanagers.IsTransient(tried) {
		t.Fatalf("the try during the erasure: %v, want a transient error", tried)
	}
	if f := r.failure(t, id); f != nil {
		t.Fatalf("an email erased while its send ran failed with %s (%s)", f.Reason, f.Detail)
	}
	if got := testutil.ToFloat64(r.outcomes.Failures.WithLabelValues(email.ReasonInternalError)); got != 0 {
		t.Errorf("mailroom_emails_failed_total{reason=internal_error} = %v, want 0", got)
	}
	if err := r.process(id); err != nil {
		t.Fatalf("the next try, after the erasure: %v", err)
	}
	if types := r.types(t, id); types[len(types)-1] != "EmailErased" {
		t.Fatalf("email stream %q, want it to end erased", types)
	}
}

// Whatever keeps an email from leaving, not only the provider, is retried
// for MAILROOM_SEND_MAX_AGE and then fails the email: no email stays
// queued for ever behind a signing key that cannot be read, read models
// that keep failing or a content scanner that is down.
func TestPipelineFailsAnEmailThatCannotLeaveWithinMaxAge(t *testing.T) {
	broken := errors.New("connection refused")
	for name, breakIt := range map[string]func(r *pipelineRig){
		"signing key": func(r *pipelineRig) {
			r.pipeline.SigningKey = func(context.Context, string, string) (*provider.DKIMKey, error) { return nil, broken }
		},
		"read models": func(r *pipelineRig) {
			r.pipeline.Checks = func(context.Context, string, string, string, string, []string) (processmanagers.Checks, error) {
				return processmanagers.Checks{}, broken
			}
		},
		"content scanner": func(r *pipelineRig) {
			r.pipeline.Scanner = scan.New("unix:"+t.TempDir()+"/clamd.sock", time.Second)
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := newPipelineRig(t)
			breakIt(r)
			id := r.queue(t, "<p>Hi</p>", []string{"ann@example.org"})
			if err := r.process(id); !processmanagers.IsTransient(err) {
				t.Fatalf("first try: %v, want a transient error", err)
			}
			if f := r.failure(t, id); f != nil {
				t.Fatalf("failed at its first try: %+v", f)
			}
			r.now = queuedAt.Add(r.pipeline.MaxAge + time.Second)
			if err := r.process(id); err != nil {
				t.Fatalf("try after MaxAge: %v, want the email failed", err)
			}
			f := r.failure(t, id)
			if f == nil || f.Reason != email.ReasonInternalError || f.Detail != "the email could not be sent within 1h0m0s" {
				t.Fatalf("email stream %q after MaxAge, failure %+v", r.types(t, id), f)
			}
			if !strings.Contains(r.logs.String(), "connection refused") && name != "content scanner" {
				t.Errorf("the log does not keep the error:\n%s", r.logs.String())
			}
		})
	}
}
