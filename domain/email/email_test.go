package email_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/email"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func fold(s email.State, evs []domain.Event) email.State {
	for _, e := range evs {
		s = email.Evolve(s, e)
	}
	return s
}

func queued() email.State {
	evs, err := email.Queue(email.State{}, email.Queued{EmailID: "e1", To: []string{"a@x.org"}, Cc: []string{"b@x.org"}, Bcc: []string{"c@x.org"}, QueuedAt: t0})
	if err != nil {
		panic(err)
	}
	return fold(email.State{}, evs)
}

func TestLifecycle(t *testing.T) {
	s := queued()
	if got := s.Recipients(); len(got) != 3 {
		t.Fatalf("recipients %v", got)
	}
	if evs := email.MarkSent(s, "p1", t0); len(evs) != 0 {
		t.Fatal("sent before the gateway passed it")
	}
	s = fold(s, email.MarkScanned(s, nil, t0))
	if evs := email.MarkScanned(s, nil, t0); len(evs) != 0 {
		t.Fatal("scanned twice")
	}
	s = fold(s, email.MarkSent(s, "p1", t0))
	if evs := email.Fail(s, email.ReasonSuppressed, "", t0); len(evs) != 0 {
		t.Fatal("a sent email cannot fail")
	}
	d := &email.Delivered{EmailID: "e1", FeedbackID: "f1", OccurredAt: t0}
	evs := email.RecordFeedback(s, d)
	if len(evs) != 1 {
		t.Fatal("feedback not recorded")
	}
	s = fold(s, evs)
	if again := email.RecordFeedback(s, d); len(again) != 0 {
		t.Fatal("the same feedback recorded twice")
	}
}

func TestFailedStaysFailed(t *testing.T) {
	s := queued()
	s = fold(s, email.Fail(s, email.ReasonBlockedAttachment, "x.exe", t0))
	if evs := email.Fail(s, email.ReasonMalware, "", t0); len(evs) != 0 {
		t.Fatal("failed twice")
	}
	if evs := email.MarkScanned(s, nil, t0); len(evs) != 0 {
		t.Fatal("a failed email was scanned")
	}
	if evs := email.RecordFeedback(s, &email.Delivered{FeedbackID: "f"}); len(evs) != 0 {
		t.Fatal("feedback for an email never sent")
	}
	if _, err := email.Queue(s, email.Queued{EmailID: "e1"}); err == nil {
		t.Fatal("queued twice")
	}
}

func TestHoldAndRelease(t *testing.T) {
	s := queued()
	if evs := email.Release(s, t0); len(evs) != 0 {
		t.Fatalf("releasing an email never held: %v", evs)
	}
	held := email.Hold(s, t0)
	if len(held) != 1 || held[0].(*email.Held).EmailID != "e1" {
		t.Fatalf("hold: %v", held)
	}
	s = fold(s, held)
	if !s.Held || len(email.Hold(s, t0)) != 0 {
		t.Fatalf("a held email is held once: %+v", s)
	}
	if !s.GoingSince.Equal(t0) {
		t.Fatalf("a queued email is on its way since its queueing: %s", s.GoingSince)
	}
	later := t0.Add(48 * time.Hour)
	released := email.Release(s, later)
	if len(released) != 1 {
		t.Fatalf("release: %v", released)
	}
	s = fold(s, released)
	if s.Held || len(email.Release(s, t0)) != 0 {
		t.Fatalf("released once: %+v", s)
	}
	if !s.GoingSince.Equal(later) {
		t.Fatalf("a released email is on its way since its release, not %s", s.GoingSince)
	}
	// A held email can still go on to be sent once released, and an email
	// that has left is never held.
	s = fold(s, email.MarkScanned(s, nil, t0))
	s = fold(s, email.MarkSent(s, "m1", t0))
	if s.Sent == nil || len(email.Hold(s, t0)) != 0 {
		t.Fatalf("sent email held: %+v", s)
	}
}

func TestAnErasedEmailDecidesNothingMore(t *testing.T) {
	if _, err := email.Erase(email.State{}, email.ErasedByRetention, "", t0); err == nil {
		t.Fatal("erased an email never queued")
	}
	s := queued()
	s = fold(s, email.MarkScanned(s, nil, t0))
	s = fold(s, email.MarkSent(s, "m1", t0))
	evs, err := email.Erase(s, email.ErasedOnRequest, "er1", t0)
	if err != nil || len(evs) != 1 {
		t.Fatalf("erase: %v %v", evs, err)
	}
	if e := evs[0].(*email.Erased); e.EmailID != "e1" || e.Reason != email.ErasedOnRequest || e.ErasureID != "er1" {
		t.Fatalf("erased event %+v", e)
	}
	s = fold(s, evs)
	if again, err := email.Erase(s, email.ErasedByRetention, "", t0); err != nil || len(again) != 0 {
		t.Fatalf("erased twice: %v %v", again, err)
	}
	if evs := email.RecordFeedback(s, &email.Delivered{EmailID: "e1", FeedbackID: "late"}); len(evs) != 0 {
		t.Fatal("feedback recorded for an erased email")
	}
	if evs := email.RejectAfterSend(s, "late reject", t0); len(evs) != 0 {
		t.Fatal("an erased email failed afterwards")
	}
	// Erased before it left: it is never sent.
	q := fold(queued(), mustErase(t, queued()))
	if evs := email.MarkScanned(q, nil, t0); len(evs) != 0 {
		t.Fatal("an erased email was scanned")
	}
	if evs := email.Fail(q, email.ReasonSuppressed, "", t0); len(evs) != 0 {
		t.Fatal("an erased email failed")
	}
}

func mustErase(t *testing.T, s email.State) []domain.Event {
	t.Helper()
	evs, err := email.Erase(s, email.ErasedByRetention, "", t0)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// Providers redeliver old notifications after newer ones: every feedback
// id seen is remembered, not just the latest.
func TestAnEarlierNotificationRedeliveredIsNotRecordedAgain(t *testing.T) {
	s := queued()
	s = fold(s, email.MarkScanned(s, nil, t0))
	s = fold(s, email.MarkSent(s, "p1", t0))
	d := &email.Delivered{EmailID: "e1", FeedbackID: "f1", OccurredAt: at(1)}
	o := &email.Opened{EmailID: "e1", FeedbackID: "f2", OccurredAt: at(2)}
	s = fold(s, email.RecordFeedback(s, d))
	s = fold(s, email.RecordFeedback(s, o))
	if evs := email.RecordFeedback(s, d); len(evs) != 0 {
		t.Fatalf("redelivered f1 recorded again: %v", evs)
	}
}

// Opens and clicks are recorded up to MaxEngagement, together; a bounce or
// a complaint after them still is.
func TestOpensAndClicksAreRecordedUpToTheCap(t *testing.T) {
	s := queued()
	s = fold(s, email.MarkScanned(s, nil, t0))
	s = fold(s, email.MarkSent(s, "p1", t0))
	for i := range email.MaxEngagement {
		var fb domain.Event = &email.Opened{EmailID: "e1", FeedbackID: fmt.Sprintf("o%d", i), OccurredAt: t0}
		if i%2 == 1 {
			fb = &email.Clicked{EmailID: "e1", FeedbackID: fmt.Sprintf("c%d", i), OccurredAt: t0}
		}
		evs := email.RecordFeedback(s, fb)
		if len(evs) != 1 {
			t.Fatalf("engagement %d not recorded", i+1)
		}
		s = fold(s, evs)
	}
	for _, fb := range []domain.Event{&email.Opened{EmailID: "e1", FeedbackID: "one more"}, &email.Clicked{EmailID: "e1", FeedbackID: "and one"}} {
		if evs := email.RecordFeedback(s, fb); len(evs) != 0 {
			t.Fatalf("%T past the cap recorded", fb)
		}
	}
	if evs := email.RecordFeedback(s, &email.Complained{EmailID: "e1", FeedbackID: "complaint"}); len(evs) != 1 {
		t.Fatal("a complaint past the cap was not recorded")
	}
}

// A Reject or Rendering Failure received after the provider accepted the
// email fails it with provider_rejected and the provider's reason, once;
// not before it was sent, and not after the provider said anything else of
// it (a delivery, a bounce).
func TestALateRejectionFailsASentEmail(t *testing.T) {
	s := queued()
	if evs := email.RejectAfterSend(s, "Bad content", t0); len(evs) != 0 {
		t.Fatalf("an email never sent was rejected: %v", evs)
	}
	s = fold(s, email.MarkScanned(s, nil, t0))
	s = fold(s, email.MarkSent(s, "p1", t0))
	evs := email.RejectAfterSend(s, "Bad content", at(1))
	if len(evs) != 1 {
		t.Fatalf("late rejection: %v", evs)
	}
	f := evs[0].(*email.Failed)
	if f.EmailID != "e1" || f.Reason != email.ReasonProviderRejected || f.Detail != "Bad content" || !f.FailedAt.Equal(at(1)) {
		t.Fatalf("late rejection recorded %+v", f)
	}
	if again := email.RejectAfterSend(fold(s, evs), "Bad content", at(2)); len(again) != 0 {
		t.Fatalf("rejected twice: %v", again)
	}
	delivered := fold(s, email.RecordFeedback(s, &email.Delivered{EmailID: "e1", FeedbackID: "f1", OccurredAt: at(1)}))
	if evs := email.RejectAfterSend(delivered, "Bad content", at(2)); len(evs) != 0 {
		t.Fatalf("a delivered email failed afterwards: %v", evs)
	}
}

// Once the gateway has scanned the email, its attachments are the ones it
// downloaded; before, the ones the send gave.
func TestAttachmentsAreTheScannedOnesOnceScanned(t *testing.T) {
	if got := (email.State{}).Attachments(); got != nil {
		t.Fatalf("attachments of no email: %v", got)
	}
	given := []email.Attachment{{Filename: "a.pdf", Path: "https://files.example.com/a.pdf"}}
	evs, _ := email.Queue(email.State{}, email.Queued{EmailID: "e1", To: []string{"a@x.org"}, Attachments: given, QueuedAt: t0})
	s := fold(email.State{}, evs)
	if got := s.Attachments(); len(got) != 1 || got[0].Digest != "" {
		t.Fatalf("attachments of a queued email: %+v", got)
	}
	downloaded := []email.Attachment{{Filename: "a.pdf", SizeBytes: 3, Digest: "sha256:abc"}}
	s = fold(s, email.MarkScanned(s, downloaded, t0))
	if got := s.Attachments(); len(got) != 1 || got[0].Digest != "sha256:abc" {
		t.Fatalf("attachments of a scanned email: %+v", got)
	}
}

// The attachment budget counts bytes as padded base64: every started
// three bytes take four characters.
func TestBase64SizeIsThePaddedLength(t *testing.T) {
	for n, want := range map[int64]int64{0: 0, 1: 4, 2: 4, 3: 4, 4: 8, 30 << 20: 40 << 20} {
		if got := email.Base64Size(n); got != want {
			t.Errorf("Base64Size(%d) = %d, want %d", n, got, want)
		}
	}
}

// BenchmarkLoadingAnEmailOpenedToTheCap folds the stream of an email opened
// and clicked as often as it records, as every later command on it does:
// each event must cost about the same, not more for each one before it.
func BenchmarkLoadingAnEmailOpenedToTheCap(b *testing.B) {
	s := queued()
	evs := email.MarkScanned(s, nil, t0)
	evs = append(evs, email.MarkSent(fold(s, evs), "p1", t0)...)
	for i := range email.MaxEngagement {
		evs = append(evs, &email.Opened{EmailID: "e1", FeedbackID: fmt.Sprintf("o%d", i), OccurredAt: t0})
	}
	b.ReportAllocs()
	for b.Loop() {
		fold(s, evs)
	}
}
