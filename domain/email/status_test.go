package email_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/email"
)

// Events at minutes after t0, for status cases.
func at(min int) time.Time { return t0.Add(time.Duration(min) * time.Minute) }

func sent(min int) domain.Event       { return &email.Sent{EmailID: "e1", SentAt: at(min)} }
func failed(min int) domain.Event     { return &email.Failed{EmailID: "e1", FailedAt: at(min)} }
func delivered(min int) domain.Event  { return &email.Delivered{EmailID: "e1", OccurredAt: at(min)} }
func opened(min int) domain.Event     { return &email.Opened{EmailID: "e1", OccurredAt: at(min)} }
func clicked(min int) domain.Event    { return &email.Clicked{EmailID: "e1", OccurredAt: at(min)} }
func complained(min int) domain.Event { return &email.Complained{EmailID: "e1", OccurredAt: at(min)} }
func softBounce(min int) domain.Event {
	return &email.Bounced{EmailID: "e1", BounceType: "Transient", OccurredAt: at(min)}
}
func undetermined(min int) domain.Event {
	return &email.Bounced{EmailID: "e1", BounceType: "Undetermined", OccurredAt: at(min)}
}
func hardBounce(min int) domain.Event {
	return &email.Bounced{EmailID: "e1", BounceType: "Permanent", OccurredAt: at(min)}
}

// permutations calls f with every order of evs.
func permutations(evs []domain.Event, f func([]domain.Event)) {
	var walk func(k int)
	walk = func(k int) {
		if k == len(evs) {
			f(append([]domain.Event(nil), evs...))
			return
		}
		for i := k; i < len(evs); i++ {
			evs[k], evs[i] = evs[i], evs[k]
			walk(k + 1)
			evs[k], evs[i] = evs[i], evs[k]
		}
	}
	walk(0)
}

// The status of a set of events, whatever the order they arrive in:
// failed, bounced and complained rank above clicked > opened > delivered >
// sent > queued, judged by each event's own time; a transient bounce ranks
// with bounced unless a delivery, open or click happened after it, and
// never displaces a failure, a permanent bounce or a complaint.
func TestStatusPrecedence(t *testing.T) {
	queuedAt := &email.Queued{EmailID: "e1", QueuedAt: at(0)}
	for _, c := range []struct {
		name   string
		events []domain.Event
		want   email.Status
		wantAt int
	}{
		{"queued", nil, email.StatusQueued, 0},
		{"sent", []domain.Event{sent(1)}, email.StatusSent, 1},
		{"delivered", []domain.Event{sent(1), delivered(2)}, email.StatusDelivered, 2},
		{"opened before delivery news", []domain.Event{sent(1), delivered(2), opened(3)}, email.StatusOpened, 3},
		{"clicked outranks a later open", []domain.Event{sent(1), delivered(2), clicked(3), opened(4)}, email.StatusClicked, 3},
		{"transient bounce then delivery", []domain.Event{sent(1), softBounce(2), delivered(3)}, email.StatusDelivered, 3},
		{"delivery then transient bounce", []domain.Event{sent(1), delivered(2), softBounce(3)}, email.StatusBounced, 3},
		{"transient bounce at the delivery's instant", []domain.Event{sent(1), softBounce(2), delivered(2)}, email.StatusBounced, 2},
		{"an open after a transient bounce", []domain.Event{sent(1), softBounce(2), opened(3)}, email.StatusOpened, 3},
		{"a click after a transient bounce", []domain.Event{sent(1), softBounce(2), clicked(3)}, email.StatusClicked, 3},
		{"a click before a transient bounce", []domain.Event{sent(1), delivered(2), clicked(3), softBounce(4)}, email.StatusBounced, 4},
		{"second transient bounce after the delivery", []domain.Event{softBounce(2), delivered(3), softBounce(4)}, email.StatusBounced, 4},
		{"delivered again after two transient bounces", []domain.Event{softBounce(2), delivered(3), softBounce(4), delivered(5)}, email.StatusDelivered, 5},
		{"undetermined counts as transient", []domain.Event{sent(1), undetermined(2), delivered(3)}, email.StatusDelivered, 3},
		{"permanent bounce ends it", []domain.Event{sent(1), hardBounce(2), delivered(3), opened(4)}, email.StatusBounced, 2},
		{"permanent bounce after delivery", []domain.Event{sent(1), delivered(2), hardBounce(3)}, email.StatusBounced, 3},
		{"complaint after delivery", []domain.Event{sent(1), delivered(2), complained(3), clicked(4)}, email.StatusComplained, 3},
		{"complaint after a bounce", []domain.Event{sent(1), hardBounce(2), complained(3)}, email.StatusComplained, 3},
		{"bounce after a complaint", []domain.Event{sent(1), complained(2), hardBounce(3)}, email.StatusBounced, 3},
		{"transient bounce, delivery, complaint", []domain.Event{softBounce(2), delivered(3), complained(4)}, email.StatusComplained, 4},
		// A soft bounce never displaces what ended the email.
		{"complaint, then an unanswered transient bounce", []domain.Event{delivered(2), complained(3), softBounce(4)}, email.StatusComplained, 3},
		{"failure, then a transient bounce", []domain.Event{sent(1), failed(2), softBounce(3)}, email.StatusFailed, 2},
		{"permanent bounce, then a transient bounce", []domain.Event{sent(1), hardBounce(2), softBounce(3)}, email.StatusBounced, 2},
		{"complaint of one recipient, transient bounce of another", []domain.Event{sent(1), delivered(2), complained(10), softBounce(20)}, email.StatusComplained, 10},
		{"failed stays failed", []domain.Event{sent(1), failed(2), delivered(3)}, email.StatusFailed, 2},
		{"one rank at one instant", []domain.Event{hardBounce(2), complained(2)}, email.StatusComplained, 2},
		// Rank decides, not timestamps: clocks differ between reporters.
		{"delivery stamped before the send", []domain.Event{sent(3), delivered(2)}, email.StatusDelivered, 2},
		{"open stamped before the delivery", []domain.Event{sent(1), delivered(3), opened(2)}, email.StatusOpened, 2},
		{"complaint after an unanswered transient bounce", []domain.Event{sent(1), softBounce(2), complained(3)}, email.StatusComplained, 3},
	} {
		permutations(c.events, func(order []domain.Event) {
			p := email.Progress{}.Add(queuedAt)
			for _, e := range order {
				p = p.Add(e)
			}
			got := p.Status()
			if got.Status != c.want || !got.At.Equal(at(c.wantAt)) {
				t.Errorf("%s, arriving %s: %s at %s, want %s at %s", c.name, describe(order), got.Status, got.At.Format(time.TimeOnly), c.want, at(c.wantAt).Format(time.TimeOnly))
			}
		})
	}
}

func describe(evs []domain.Event) string {
	out := ""
	for _, e := range evs {
		ef, _ := email.EffectOf(e)
		switch {
		case ef.Mark.Status != "":
			out += fmt.Sprintf(" %s@%s", ef.Mark.Status, ef.Mark.At.Format("15:04"))
		default:
			out += " transient-bounce@" + ef.SoftBounce.Format("15:04")
		}
	}
	return "[" + out[min(1, len(out)):] + "]"
}

func TestEffectOfEventsWithoutStatus(t *testing.T) {
	for _, e := range []domain.Event{&email.Held{}, &email.Released{}, &email.Scanned{}} {
		if _, ok := email.EffectOf(e); ok {
			t.Errorf("%s has an effect on the status", e.EventType())
		}
		if p := (email.Progress{}).Add(e); p != (email.Progress{}) {
			t.Errorf("%s moved the progress: %+v", e.EventType(), p)
		}
	}
}
