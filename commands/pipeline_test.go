package commands_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/email"
)

// queuedEmail sends a valid email and returns its id.
func (h *harness) queuedEmail(t *testing.T) string {
	t.Helper()
	if h.sender == "" {
		h.sender = h.newAccount(t)
		h.verifiedDomain(t, h.sender, "example.com")
	}
	req, body := sendRequest(t)
	got, err := h.svc.SendEmail(context.Background(), h.sender, req, "", body, meta)
	if err != nil {
		t.Fatal(err)
	}
	return got.ID
}

func TestRecordEmailSentOnce(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	id := h.queuedEmail(t)
	atts := []email.Attachment{{Filename: "receipt.pdf", ContentType: "application/pdf", SizeBytes: 8}}
	delivered := func(st email.State, at time.Time) []domain.Event {
		return []domain.Event{&email.Delivered{EmailID: st.Queued.EmailID, FeedbackID: "fb-1", Recipients: st.Recipients(), OccurredAt: at}}
	}
	before, version, err := h.svc.EmailAt(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	h.appended(t)

	// Recorded a while after the provider took it: the send is dated at
	// the acceptance, as is the feedback the provider gave then.
	accepted := start.Add(-3 * time.Second)
	if err := h.svc.RecordEmailSent(ctx, id, commands.Acceptance{MessageID: "ses-1", At: accepted, Attachments: atts, Feedback: delivered}, meta); err != nil {
		t.Fatal(err)
	}
	_, evs := h.stream(t, email.Stream(id))
	want := []string{"EmailQueued", "EmailScanned", "EmailSent", "EmailDelivered"}
	if got := h.types(t, email.Stream(id)); !slices.Equal(got, want) {
		t.Fatalf("email stream %q, want %q", got, want)
	}
	if s := evs[2].(*email.Sent); s.ProviderMessageID != "ses-1" || !s.SentAt.Equal(accepted) {
		t.Fatalf("sent %+v", s)
	}
	if sc := evs[1].(*email.Scanned); !slices.Equal(sc.Attachments, atts) {
		t.Fatalf("scanned %+v", sc)
	}
	if d := evs[3].(*email.Delivered); len(d.Recipients) != 3 || !d.OccurredAt.Equal(accepted) {
		t.Fatalf("delivered %+v", d)
	}

	// A redelivered job, or one holding an old version, records nothing more.
	if err := h.svc.RecordEmailSent(ctx, id, commands.Acceptance{MessageID: "ses-2", At: start, Attachments: atts, Feedback: delivered}, meta); err != nil {
		t.Fatal(err)
	}
	if err := h.svc.RecordEmailSentAt(ctx, before, version, commands.Acceptance{MessageID: "ses-3", At: start, Attachments: atts, Feedback: delivered}, meta); err != nil {
		t.Fatal(err)
	}
	if n := h.appended(t); n != 3 {
		t.Fatalf("recording a send three times appended %d events, want 3", n)
	}
}

func TestRecordEmailSentAtAnOldVersionDecidesAgain(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	id := h.queuedEmail(t)
	st, version, err := h.svc.EmailAt(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.svc.FailEmail(ctx, id, email.ReasonMalware, "", meta); err != nil {
		t.Fatal(err)
	}
	if err := h.svc.RecordEmailSentAt(ctx, st, version, commands.Acceptance{MessageID: "ses-1", At: start}, meta); err != nil {
		t.Fatal(err)
	}
	if got := h.types(t, email.Stream(id)); !slices.Equal(got, []string{"EmailQueued", "EmailFailed"}) {
		t.Fatalf("email stream %q: a failed email must not be sent", got)
	}
}

func TestRecordEmailFeedback(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	id := h.queuedEmail(t)
	bounce := &email.Bounced{EmailID: id, FeedbackID: "fb-1", BounceType: "Permanent", OccurredAt: start}
	reject := "rendering failed"

	err := h.svc.RecordEmailFeedback(ctx, id, []domain.Event{bounce}, nil, meta)
	if !errors.Is(err, commands.ErrNotSentYet) {
		t.Fatalf("feedback before the send is recorded: %v, want ErrNotSentYet", err)
	}
	if err := h.svc.RecordEmailSent(ctx, id, commands.Acceptance{MessageID: "ses-1", At: start}, meta); err != nil {
		t.Fatal(err)
	}
	for range 2 { // providers redeliver
		if err := h.svc.RecordEmailFeedback(ctx, id, []domain.Event{bounce}, nil, meta); err != nil {
			t.Fatal(err)
		}
	}
	// A late reject fails the email only when nothing else was heard of it.
	if err := h.svc.RecordEmailFeedback(ctx, id, nil, &reject, meta); err != nil {
		t.Fatal(err)
	}
	want := []string{"EmailQueued", "EmailScanned", "EmailSent", "EmailBounced"}
	if got := h.types(t, email.Stream(id)); !slices.Equal(got, want) {
		t.Fatalf("email stream %q, want %q", got, want)
	}

	other := h.queuedEmail(t)
	if err := h.svc.RecordEmailSent(ctx, other, commands.Acceptance{MessageID: "ses-2", At: start}, meta); err != nil {
		t.Fatal(err)
	}
	if err := h.svc.RecordEmailFeedback(ctx, other, nil, &reject, meta); err != nil {
		t.Fatal(err)
	}
	_, evs := h.stream(t, email.Stream(other))
	if f, ok := evs[len(evs)-1].(*email.Failed); !ok || f.Reason != email.ReasonProviderRejected || f.Detail != reject {
		t.Fatalf("after a reject the email ends with %+v, want a provider_rejected failure", evs[len(evs)-1])
	}

	// Feedback about an email the log does not hold (accepted after the
	// backup it was restored from) is told apart, so it can be dropped.
	unknown := "01a21c11-6758-7164-84f3-30fbdd58713f"
	if err := h.svc.RecordEmailFeedback(ctx, unknown, []domain.Event{&email.Bounced{EmailID: unknown, FeedbackID: "fb-9", BounceType: "Permanent", OccurredAt: start}}, nil, meta); !errors.Is(err, commands.ErrUnknownEmail) {
		t.Fatalf("feedback for an unknown email: %v", err)
	}
}

func TestHoldAndReleaseAnEmail(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	id := h.queuedEmail(t)
	for _, step := range []func(context.Context, string, commands.Meta) error{
		h.svc.HoldEmail, h.svc.HoldEmail, h.svc.ReleaseEmail, h.svc.ReleaseEmail,
	} {
		if err := step(ctx, id, meta); err != nil {
			t.Fatal(err)
		}
	}
	if got := h.types(t, email.Stream(id)); !slices.Equal(got, []string{"EmailQueued", "EmailHeld", "EmailReleased"}) {
		t.Fatalf("email stream %q: each of hold and release once", got)
	}
	if err := h.svc.FailEmail(ctx, id, email.ReasonSuppressed, "", meta); err != nil {
		t.Fatal(err)
	}
	if err := h.svc.HoldEmail(ctx, id, meta); err != nil {
		t.Fatal(err)
	}
	if st, err := h.svc.Email(ctx, id); err != nil || st.Held || st.Failed == nil {
		t.Fatalf("a failed email is held: %+v, %v", st, err)
	}
}

// A released email keeps its own story: the release names the
// reinstatement as its cause, but the send's request id still finds it.
func TestReleaseKeepsTheEmailsStory(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	id := h.queuedEmail(t)
	if err := h.svc.HoldEmail(ctx, id, commands.Meta{Actor: "system:email-pipeline"}.Following("queued-event", "req_send")); err != nil {
		t.Fatal(err)
	}
	reinstated := commands.Meta{Actor: "system:email-release"}.Following("reinstated-event", "run_reinstate")
	if err := h.svc.ReleaseEmail(ctx, id, reinstated); err != nil {
		t.Fatal(err)
	}
	recs, _ := h.stream(t, email.Stream(id))
	queued, released := recs[0].Metadata, recs[len(recs)-1].Metadata
	if recs[len(recs)-1].Type != "EmailReleased" || released.CorrelationID != queued.CorrelationID || released.RequestID != queued.CorrelationID ||
		released.CausationID != "reinstated-event" || released.Actor != "system:email-release" {
		t.Fatalf("release %s %+v, want the story %q caused by the reinstatement", recs[len(recs)-1].Type, released, queued.CorrelationID)
	}
}

// Feedback that arrives on its own (SES's notifications) continues its
// email's story: the send request's correlation id, caused by EmailSent.
func TestFeedbackOnItsOwnContinuesTheEmailsStory(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	id := h.queuedEmail(t)
	if err := h.svc.RecordEmailSent(ctx, id, commands.Acceptance{MessageID: "ses-1", At: start}, commands.Meta{Actor: "system:email-pipeline", RequestID: "run-pipeline"}); err != nil {
		t.Fatal(err)
	}
	bounce := &email.Bounced{EmailID: id, FeedbackID: "fb-1", BounceType: "Permanent", OccurredAt: start}
	if err := h.svc.RecordEmailFeedback(ctx, id, []domain.Event{bounce}, nil, commands.Meta{Actor: "system:ses-feedback"}); err != nil {
		t.Fatal(err)
	}
	recs, _ := h.stream(t, email.Stream(id))
	queued, sent, bounced := recs[0], recs[len(recs)-2], recs[len(recs)-1]
	if sent.Type != "EmailSent" || bounced.Type != "EmailBounced" {
		t.Fatalf("stream %q", h.types(t, email.Stream(id)))
	}
	if m := bounced.Metadata; m.CorrelationID != queued.Metadata.CorrelationID || m.CausationID != sent.ID.String() || m.Actor != "system:ses-feedback" {
		t.Errorf("bounce metadata %+v; want correlation %s (the send request's), cause %s (EmailSent)", m, queued.Metadata.CorrelationID, sent.ID)
	}
}

// The pipeline records a send at the version it read the email at: the
// send is recorded once, under the worker's request and cause, and a repeat
// at that version records nothing more.
func TestRecordEmailSentAtTheVersionReadRecordsTheSend(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	id := h.queuedEmail(t)
	st, version, err := h.svc.EmailAt(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	h.appended(t)
	worker := commands.Meta{Actor: "system:email-pipeline", RequestID: "req-send", CausationID: "ev-queued"}
	a := commands.Acceptance{MessageID: "ses-1", At: start}
	if err := h.svc.RecordEmailSentAt(ctx, st, version, a, worker); err != nil {
		t.Fatal(err)
	}
	recs, evs := h.stream(t, email.Stream(id))
	if got := h.types(t, email.Stream(id)); !slices.Equal(got, []string{"EmailQueued", "EmailScanned", "EmailSent"}) {
		t.Fatalf("email stream %q, want the send recorded", got)
	}
	if s := evs[2].(*email.Sent); s.ProviderMessageID != "ses-1" || !s.SentAt.Equal(start) {
		t.Fatalf("sent %+v", s)
	}
	if m := recs[2].Metadata; m.Actor != worker.Actor || m.RequestID != worker.RequestID || m.CausationID != worker.CausationID {
		t.Errorf("the send was recorded with %+v, want the worker's meta", m)
	}
	if err := h.svc.RecordEmailSentAt(ctx, st, version, a, worker); err != nil {
		t.Fatal(err)
	}
	if n := h.appended(t); n != 2 {
		t.Fatalf("recording a send twice appended %d events, want 2", n)
	}
}

// An email whose stream runs past one read's page (a thousand opens and
// clicks) is decided on all of it: its last open within MaxEngagement is
// recorded, the next one is not.
func TestAnEmailsOpensAreCountedAcrossItsWholeStream(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	id := h.queuedEmail(t)
	if err := h.svc.RecordEmailSent(ctx, id, commands.Acceptance{MessageID: "ses-1", At: start}, meta); err != nil {
		t.Fatal(err)
	}
	open := func(n int) *email.Opened {
		return &email.Opened{EmailID: id, FeedbackID: fmt.Sprintf("open-%d", n), OccurredAt: start}
	}
	for n := range email.MaxEngagement - 1 {
		h.appendEvent(t, email.Stream(id), open(n))
	}
	h.appended(t)
	for n := email.MaxEngagement - 1; n <= email.MaxEngagement; n++ {
		if err := h.svc.RecordEmailFeedback(ctx, id, []domain.Event{open(n)}, nil, meta); err != nil {
			t.Fatalf("open %d: %v", n+1, err)
		}
	}
	if n := h.appended(t); n != 1 {
		t.Fatalf("opens %d and %d appended %d events, want the first only", email.MaxEngagement, email.MaxEngagement+1, n)
	}
	st, err := h.svc.Email(ctx, id)
	if err != nil || st.Engaged != email.MaxEngagement {
		t.Fatalf("the email counts %d opens, %v; want %d", st.Engaged, err, email.MaxEngagement)
	}
	recs, _ := h.stream(t, email.Stream(id))
	if _, since, err := h.svc.EmailSince(ctx, id); err != nil || since != recs[0].Position {
		t.Errorf("the email was queued at %v, %v; want its first event's position %v", since, err, recs[0].Position)
	}
}

// A job reads the email's event it was queued for from the email's stream,
// however far down the stream the event is, whether the job names its
// revision or not (jobs queued before they did); an event the stream does
// not hold is an error.
func TestEmailEventFindsTheEventAnywhereInItsStream(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	id := h.queuedEmail(t)
	if err := h.svc.RecordEmailSent(ctx, id, commands.Acceptance{MessageID: "ses-1", At: start}, meta); err != nil {
		t.Fatal(err)
	}
	for n := range 600 {
		h.appendEvent(t, email.Stream(id), &email.Opened{EmailID: id, FeedbackID: fmt.Sprintf("open-%d", n), OccurredAt: start})
	}
	recs, _ := h.stream(t, email.Stream(id))
	for _, i := range []int{0, 257, len(recs) - 1} {
		for _, revision := range []uint64{0, recs[i].StreamRevision} {
			e, err := h.svc.EmailEvent(ctx, id, recs[i].ID.String(), revision)
			if err != nil || e.EventType() != recs[i].Type {
				t.Errorf("event %d named at revision %d: %v, %v; want its %s", i, revision, e, err, recs[i].Type)
			}
			if o, ok := e.(*email.Opened); i == len(recs)-1 && (!ok || o.FeedbackID != "open-599") {
				t.Errorf("the last event read as %+v, want the last open", e)
			}
		}
	}
	for _, revision := range []uint64{0, 5} {
		if e, err := h.svc.EmailEvent(ctx, id, "01a21fce-bb69-789f-85d1-2e06083d9161", revision); err == nil {
			t.Errorf("an event the stream does not hold, named at revision %d, read as %+v", revision, e)
		}
	}
}

// A job queued without a story (by a release that kept none) continues
// the email's: its work goes under the send request's id, caused by the
// job's event. An email the log does not hold gives a run of its own.
func TestEmailStoryIsTheSendRequests(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t)
	id := h.queuedEmail(t)
	worker := commands.Meta{Actor: "system:webhooks"}
	if m := h.svc.EmailStory(ctx, id, "ev-1", worker); m.RequestID != meta.RequestID || m.CausationID != "ev-1" || m.Actor != worker.Actor {
		t.Errorf("story %+v, want the send's request %q caused by ev-1", m, meta.RequestID)
	}
	if m := h.svc.EmailStory(ctx, "01a21fce-bb69-789f-85d1-2e06083d9161", "ev-2", worker); !strings.HasPrefix(m.RequestID, "run_") || m.CausationID != "ev-2" {
		t.Errorf("story of an unknown email %+v, want a run of its own caused by ev-2", m)
	}
}
