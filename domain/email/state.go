package email

import (
	"time"

	"github.com/mailroom/mailroom/domain"
)

// State is the email as its events left it.
type State struct {
	Queued  *Queued
	Scanned *Scanned
	Sent    *Sent
	Failed  *Failed
	Held    bool // waiting for its account's reinstatement
	// GoingSince is when the email last started on its way: queued, or
	// released after a hold. A hold is not time spent trying to send.
	GoingSince time.Time
	Erased     *Erased // its personal data is destroyed
	Engaged    int     // opens and clicks recorded
	// feedback are the feedback ids already recorded, newest first. A list
	// that states share, each adding to its front, keeps Evolve free of
	// copies: a map copied for each event made loading an email opened a
	// thousand times cost half a million copied entries.
	feedback *seen
}

type seen struct {
	id   string
	next *seen
}

// sawFeedback reports whether feedback id was recorded.
func (s State) sawFeedback(id string) bool {
	for f := s.feedback; f != nil; f = f.next {
		if f.id == id {
			return true
		}
	}
	return false
}

// MaxEngagement is how many opens and clicks an email records; later ones
// are not recorded. Recipients open and click without end (a message
// forwarded to a list, a pixel reloaded in a loop), and every later command
// on the email and every read of its timeline would carry them all. The
// first open and click set opened_at and clicked_at; a thousand is far
// more than a timeline is read for.
const MaxEngagement = 1000

// Exists reports whether the email was queued.
func (s State) Exists() bool { return s.Queued != nil }

// Recipients are every address the message goes to.
func (s State) Recipients() []string {
	if s.Queued == nil {
		return nil
	}
	out := append([]string(nil), s.Queued.To...)
	out = append(out, s.Queued.Cc...)
	return append(out, s.Queued.Bcc...)
}

// Attachments are the latest attachment metadata: downloaded ones once
// scanned.
func (s State) Attachments() []Attachment {
	if s.Scanned != nil {
		return s.Scanned.Attachments
	}
	if s.Queued != nil {
		return s.Queued.Attachments
	}
	return nil
}

// Evolve applies one event.
func Evolve(s State, e domain.Event) State {
	switch e := e.(type) {
	case *Queued:
		s.Queued = e
		s.GoingSince = e.QueuedAt
	case *Held:
		s.Held = true
	case *Released:
		s.Held = false
		s.GoingSince = e.ReleasedAt
	case *Scanned:
		s.Scanned = e
	case *Sent:
		s.Sent = e
	case *Failed:
		s.Failed = e
	case *Delivered:
		s = s.withFeedback(e.FeedbackID)
	case *Bounced:
		s = s.withFeedback(e.FeedbackID)
	case *Complained:
		s = s.withFeedback(e.FeedbackID)
	case *Opened:
		s = s.withFeedback(e.FeedbackID)
		s.Engaged++
	case *Clicked:
		s = s.withFeedback(e.FeedbackID)
		s.Engaged++
	case *Erased:
		s.Erased = e
	}
	return s
}

func (s State) withFeedback(id string) State {
	s.feedback = &seen{id: id, next: s.feedback}
	return s
}

// Queue decides accepting an email. The caller has validated the request.
func Queue(s State, q Queued) ([]domain.Event, error) {
	if s.Exists() {
		return nil, &domain.ConflictError{Code: "email_exists", Detail: "email already exists"}
	}
	return []domain.Event{&q}, nil
}

// pending reports whether the email is still inside the service.
func (s State) pending() bool {
	return s.Exists() && s.Erased == nil && s.Sent == nil && s.Failed == nil
}

// Hold decides that a pending email waits while its account is suspended;
// holding a held email decides nothing.
func Hold(s State, now time.Time) []domain.Event {
	if !s.pending() || s.Held {
		return nil
	}
	return []domain.Event{&Held{EmailID: s.Queued.EmailID, AccountID: s.Queued.AccountID, HeldAt: now}}
}

// Release decides that a held email goes on.
func Release(s State, now time.Time) []domain.Event {
	if !s.pending() || !s.Held {
		return nil
	}
	return []domain.Event{&Released{EmailID: s.Queued.EmailID, ReleasedAt: now}}
}

// MarkScanned decides that the content gateway passed the email.
func MarkScanned(s State, attachments []Attachment, now time.Time) []domain.Event {
	if !s.pending() || s.Scanned != nil {
		return nil
	}
	return []domain.Event{&Scanned{EmailID: s.Queued.EmailID, Attachments: attachments, ScannedAt: now}}
}

// Fail decides that the email never leaves the service.
func Fail(s State, reason, detail string, now time.Time) []domain.Event {
	if !s.pending() {
		return nil
	}
	return []domain.Event{&Failed{EmailID: s.Queued.EmailID, Reason: reason, Detail: detail, FailedAt: now}}
}

// MarkSent decides that the provider accepted the email.
func MarkSent(s State, providerMessageID string, now time.Time) []domain.Event {
	if !s.pending() || s.Scanned == nil {
		return nil
	}
	return []domain.Event{&Sent{EmailID: s.Queued.EmailID, ProviderMessageID: providerMessageID, SentAt: now}}
}

// FeedbackID returns the feedback id of a provider feedback event.
func FeedbackID(e domain.Event) (string, bool) {
	switch e := e.(type) {
	case *Delivered:
		return e.FeedbackID, true
	case *Bounced:
		return e.FeedbackID, true
	case *Complained:
		return e.FeedbackID, true
	case *Opened:
		return e.FeedbackID, true
	case *Clicked:
		return e.FeedbackID, true
	}
	return "", false
}

// RecordFeedback decides recording provider feedback: only for an email
// that was sent, once per feedback id (providers redeliver), and opens and
// clicks up to MaxEngagement.
func RecordFeedback(s State, fb domain.Event) []domain.Event {
	id, ok := FeedbackID(fb)
	if !ok || s.Sent == nil || s.Erased != nil || s.sawFeedback(id) {
		return nil
	}
	switch fb.(type) {
	case *Opened, *Clicked:
		if s.Engaged >= MaxEngagement {
			return nil
		}
	}
	return []domain.Event{fb}
}

// RejectAfterSend decides a provider's late refusal of an email it had
// accepted (SES Reject, Rendering Failure): the email fails, unless the
// provider has reported anything else about it already.
func RejectAfterSend(s State, reason string, now time.Time) []domain.Event {
	if s.Sent == nil || s.Failed != nil || s.Erased != nil || s.feedback != nil {
		return nil
	}
	return []domain.Event{&Failed{EmailID: s.Queued.EmailID, Reason: ReasonProviderRejected, Detail: reason, FailedAt: now}}
}

// Erase decides destroying the email's personal data, for reason (and the
// erasure request erasureID, when on request). An email erased already
// decides nothing; an email never queued is not found.
func Erase(s State, reason, erasureID string, now time.Time) ([]domain.Event, error) {
	if !s.Exists() {
		return nil, domain.ErrNotFound
	}
	if s.Erased != nil {
		return nil, nil
	}
	return []domain.Event{&Erased{EmailID: s.Queued.EmailID, AccountID: s.Queued.AccountID, Reason: reason, ErasureID: erasureID, ErasedAt: now}}, nil
}
