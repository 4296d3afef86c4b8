package email

import (
	"time"

	"github.com/mailroom/mailroom/domain"
)

// Rank orders statuses: failed, bounced and complained end an email and
// rank above the rest; then clicked, opened, delivered, sent, queued.
func Rank(s Status) int {
	switch s {
	case StatusSent:
		return 1
	case StatusDelivered:
		return 2
	case StatusOpened:
		return 3
	case StatusClicked:
		return 4
	case StatusBounced, StatusComplained, StatusFailed:
		return 5
	default:
		return 0
	}
}

// Mark is a status an event gave an email, at the event's own time.
type Mark struct {
	Status Status
	At     time.Time
}

// Above reports whether m takes precedence over o: a higher rank, else
// the later time, else (one rank at the very same instant) the name that
// sorts last, so that no tie is left to the order of arrival.
func (m Mark) Above(o Mark) bool {
	if rm, ro := Rank(m.Status), Rank(o.Status); rm != ro {
		return rm > ro
	}
	if !m.At.Equal(o.At) {
		return m.At.After(o.At)
	}
	return m.Status > o.Status
}

// Effect is what one event contributes to an email's status.
type Effect struct {
	Mark       Mark      // competes for Progress.Top when Status is set
	Reached    time.Time // a delivery, open or click: the message arrived
	SoftBounce time.Time // a bounce that is not permanent
}

// EffectOf is the effect of e on the status; false for events that have
// none.
func EffectOf(e domain.Event) (Effect, bool) {
	switch e := e.(type) {
	case *Queued:
		return Effect{Mark: Mark{StatusQueued, e.QueuedAt}}, true
	case *Sent:
		return Effect{Mark: Mark{StatusSent, e.SentAt}}, true
	case *Failed:
		return Effect{Mark: Mark{StatusFailed, e.FailedAt}}, true
	case *Delivered:
		return Effect{Mark: Mark{StatusDelivered, e.OccurredAt}, Reached: e.OccurredAt}, true
	case *Opened:
		return Effect{Mark: Mark{StatusOpened, e.OccurredAt}, Reached: e.OccurredAt}, true
	case *Clicked:
		return Effect{Mark: Mark{StatusClicked, e.OccurredAt}, Reached: e.OccurredAt}, true
	case *Complained:
		return Effect{Mark: Mark{StatusComplained, e.OccurredAt}}, true
	case *Bounced:
		if Permanent(e.BounceType) {
			return Effect{Mark: Mark{StatusBounced, e.OccurredAt}}, true
		}
		return Effect{SoftBounce: e.OccurredAt}, true
	}
	return Effect{}, false
}

// Progress is what an email's status depends on. Each field is a maximum,
// so the same events added in any order give the same Progress: the status
// is judged by when things happened, never by when the news arrived.
type Progress struct {
	Top        Mark      // the highest Mark of every event but transient bounces
	SoftBounce time.Time // the latest transient bounce
	Reached    time.Time // the latest delivery, open or click
}

// Add folds one event in.
func (p Progress) Add(e domain.Event) Progress {
	ef, ok := EffectOf(e)
	if !ok {
		return p
	}
	return p.With(ef)
}

// With folds one effect in. Each field is a maximum, so effects fold in
// any grouping: a Progress folded from some events is itself an effect
// (Progress.Effect) that gives the same result as those events one by one.
func (p Progress) With(ef Effect) Progress {
	if ef.Mark.Status != "" && ef.Mark.Above(p.Top) {
		p.Top = ef.Mark
	}
	if ef.Reached.After(p.Reached) {
		p.Reached = ef.Reached
	}
	if ef.SoftBounce.After(p.SoftBounce) {
		p.SoftBounce = ef.SoftBounce
	}
	return p
}

// Effect is p as one effect, to fold into another Progress.
func (p Progress) Effect() Effect {
	return Effect{Mark: p.Top, Reached: p.Reached, SoftBounce: p.SoftBounce}
}

// Status is the email's status. A transient bounce outranks a delivery,
// open or click, unless the message was delivered, opened or clicked after
// it (a later one proves a retry got through; earlier ones do not clear
// it). It never displaces a failure, a permanent bounce or a complaint:
// those end the email, and a soft bounce says less than any of them.
func (p Progress) Status() Mark {
	if !p.SoftBounce.IsZero() && !p.Reached.After(p.SoftBounce) && Rank(p.Top.Status) < Rank(StatusBounced) {
		return Mark{StatusBounced, p.SoftBounce}
	}
	return p.Top
}
