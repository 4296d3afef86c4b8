package email_test

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/fuzztape"
)

// Commands of the email model, one per decision.
const (
	opQueue = iota
	opHold
	opRelease
	opScan
	opFail
	opSend
	opDelivered
	opBounced
	opComplained
	opOpened
	opClicked
	opReject
	opErase
	opClock
	modelOps
)

var modelBounceTypes = []string{"Permanent", "Transient", "Undetermined", "", "permanent"}

// emailModel is what the documentation says an email's decisions allow,
// kept apart from email.State.
type emailModel struct {
	queued, scanned, sent, failed, erased, held bool
	feedback                                    map[string]bool
	engaged                                     int
	goingSince                                  time.Time
}

func (m emailModel) pending() bool { return m.queued && !m.sent && !m.failed && !m.erased }

// FuzzEmailLifecycle runs any sequence of the email's decisions, each at a
// time that may move forward, stay or move back, and checks after each one
// what docs/decisions.md ("Sending email", "Personal data") and
// docs/events.md ("Email stream") promise: which decisions record what
// (and that refused ones record nothing), that nothing is queued, sent or
// failed twice nor recorded after the erasure, that a feedback id is
// recorded once and only after the send, and that the status is the one
// the precedence rules give, whatever the order the events arrive in, and
// never leaves the top rank once there. Replaying the log from nothing
// passes through every state the live decisions left, so no decision or
// later event changed an earlier state. (The cap of MaxEngagement opens
// and clicks has its own test: a thousand events in a run would slow the
// search a hundredfold.)
func FuzzEmailLifecycle(f *testing.F) {
	seq := func(ops ...int) []byte {
		b := make([]byte, 0, len(ops)*3)
		for _, op := range ops {
			b = append(b, byte(op), 0, 0)
		}
		return b
	}
	f.Add([]byte{})
	f.Add(seq(opQueue, opScan, opSend, opDelivered, opOpened, opClicked, opDelivered))
	f.Add(seq(opQueue, opHold, opRelease, opScan, opSend, opBounced, opComplained, opErase, opDelivered))
	f.Add(seq(opQueue, opFail, opScan, opSend, opErase, opErase))
	f.Add(seq(opQueue, opScan, opSend, opReject, opDelivered, opReject))
	f.Add([]byte{opQueue, 0, 0, opScan, 0, 0, opSend, 3, 0, opBounced, 1, 1, 5, opDelivered, 2, 2, 6, opBounced, 3, 1, 6, opOpened, 4, 0, 4})
	f.Add(seq(opQueue, opScan, opSend, opOpened, opClicked, opComplained, opBounced, opOpened))
	f.Add(seq(opQueue, opHold, opScan, opSend, opRelease, opHold))
	f.Fuzz(func(t *testing.T, data []byte) {
		tape := fuzztape.New(data)
		now := t0
		var (
			s       email.State
			m       = emailModel{feedback: map[string]bool{}}
			log     []domain.Event
			history []email.State // the state after each recorded write
			writes  []int         // how many events the log held then
			topRank = -1
		)
		step := 0
		for tape.More() && step < 200 {
			step++
			op := tape.Pick(modelOps)
			var (
				evs  []domain.Event
				err  error
				want []string // the event types the model expects
			)
			// Feedback happens at its own time, near the clock and often
			// at the very same instant as other feedback.
			occurred := now.Add(time.Duration(tape.Pick(7)-3) * time.Minute)
			fbID := fmt.Sprintf("fb%d", tape.Pick(6))
			switch op {
			case opQueue:
				evs, err = email.Queue(s, email.Queued{EmailID: "e1", AccountID: "a1", To: []string{"ann@example.org"}, QueuedAt: now})
				if m.queued {
					var c *domain.ConflictError
					if !errors.As(err, &c) {
						t.Fatalf("step %d: queued twice: %v %v", step, evs, err)
					}
				} else {
					want = []string{"EmailQueued"}
				}
			case opHold:
				evs = email.Hold(s, now)
				if m.pending() && !m.held {
					want = []string{"EmailHeld"}
				}
			case opRelease:
				evs = email.Release(s, now)
				if m.pending() && m.held {
					want = []string{"EmailReleased"}
				}
			case opScan:
				evs = email.MarkScanned(s, []email.Attachment{{Filename: "a.pdf", SizeBytes: 3}}, now)
				if m.pending() && !m.scanned {
					want = []string{"EmailScanned"}
				}
			case opFail:
				evs = email.Fail(s, email.Reasons[tape.Pick(len(email.Reasons))], "detail", now)
				if m.pending() {
					want = []string{"EmailFailed"}
				}
			case opSend:
				// Held or not: a message that left is recorded whatever
				// the checks would say by then.
				evs = email.MarkSent(s, "pm1", now)
				if m.pending() && m.scanned {
					want = []string{"EmailSent"}
				}
			case opDelivered, opBounced, opComplained, opOpened, opClicked:
				var fb domain.Event
				switch op {
				case opDelivered:
					fb = &email.Delivered{EmailID: "e1", FeedbackID: fbID, OccurredAt: occurred}
				case opBounced:
					fb = &email.Bounced{EmailID: "e1", FeedbackID: fbID, BounceType: modelBounceTypes[tape.Pick(len(modelBounceTypes))], OccurredAt: occurred}
				case opComplained:
					fb = &email.Complained{EmailID: "e1", FeedbackID: fbID, OccurredAt: occurred}
				case opOpened:
					fb = &email.Opened{EmailID: "e1", FeedbackID: fbID, OccurredAt: occurred}
				case opClicked:
					fb = &email.Clicked{EmailID: "e1", FeedbackID: fbID, OccurredAt: occurred}
				}
				evs = email.RecordFeedback(s, fb)
				engagement := op == opOpened || op == opClicked
				if m.sent && !m.erased && !m.feedback[fbID] && (!engagement || m.engaged < email.MaxEngagement) {
					want = []string{fb.EventType()}
					if len(evs) == 1 && evs[0] != fb {
						t.Fatalf("step %d: feedback recorded as %+v, not as given", step, evs[0])
					}
				}
			case opReject:
				evs = email.RejectAfterSend(s, "Bad content", now)
				if m.sent && !m.failed && !m.erased && len(m.feedback) == 0 {
					want = []string{"EmailFailed"}
				}
			case opErase:
				evs, err = email.Erase(s, email.ErasedOnRequest, "er1", now)
				switch {
				case !m.queued:
					if !errors.Is(err, domain.ErrNotFound) {
						t.Fatalf("step %d: erased an email never queued: %v %v", step, evs, err)
					}
				case !m.erased:
					want = []string{"EmailErased"}
				}
			case opClock:
				now = now.Add(time.Duration(tape.Pick(9)-2) * time.Hour)
				continue
			}
			if err != nil && len(evs) > 0 {
				t.Fatalf("step %d: an error with events: %v %v", step, evs, err)
			}
			if err != nil && want != nil {
				t.Fatalf("step %d: op %d refused: %v", step, op, err)
			}
			var got []string
			for _, e := range evs {
				got = append(got, e.EventType())
			}
			if !slices.Equal(got, want) {
				t.Fatalf("step %d: op %d with model %+v decided %v, want %v", step, op, m, got, want)
			}
			if len(evs) == 0 {
				continue
			}
			for _, e := range evs {
				s = email.Evolve(s, e)
				log = append(log, e)
				m.apply(e)
			}
			history, writes = append(history, s), append(writes, len(log))
			topRank = emailModelCheck(t, step, s, m, log, topRank)
		}
		// Replay: the log folded from nothing passes through every state
		// the live decisions left, and no later write changed an earlier
		// state's maps.
		var replay email.State
		from := 0
		for i, n := range writes {
			for _, e := range log[from:n] {
				replay = email.Evolve(replay, e)
			}
			from = n
			if !reflect.DeepEqual(replay, history[i]) {
				t.Fatalf("write %d: replay\n%+v\nlive\n%+v", i, replay, history[i])
			}
		}
	})
}

// apply is the model's reading of an event.
func (m *emailModel) apply(e domain.Event) {
	switch e := e.(type) {
	case *email.Queued:
		m.queued, m.goingSince = true, e.QueuedAt
	case *email.Held:
		m.held = true
	case *email.Released:
		m.held, m.goingSince = false, e.ReleasedAt
	case *email.Scanned:
		m.scanned = true
	case *email.Sent:
		m.sent = true
	case *email.Failed:
		m.failed = true
	case *email.Erased:
		m.erased = true
	case *email.Opened, *email.Clicked:
		m.engaged++
	}
	if id, ok := email.FeedbackID(e); ok {
		m.feedback[id] = true
	}
}

// emailModelCheck checks the invariants of the log and the state after a
// write, and returns the rank of the status's top mark.
func emailModelCheck(t *testing.T, step int, s email.State, m emailModel, log []domain.Event, topRank int) int {
	t.Helper()
	count := map[string]int{}
	seen := map[string]bool{}
	sentAt, erasedAt := -1, -1
	engaged := 0
	for i, e := range log {
		count[e.EventType()]++
		if erasedAt >= 0 {
			t.Fatalf("step %d: %s recorded after EmailErased", step, e.EventType())
		}
		switch e.(type) {
		case *email.Sent:
			sentAt = i
		case *email.Erased:
			erasedAt = i
		case *email.Opened, *email.Clicked:
			engaged++
		}
		if id, ok := email.FeedbackID(e); ok {
			if seen[id] {
				t.Fatalf("step %d: feedback %s recorded twice", step, id)
			}
			seen[id] = true
			if sentAt < 0 {
				t.Fatalf("step %d: feedback %s recorded before EmailSent", step, id)
			}
		}
	}
	for _, once := range []string{"EmailQueued", "EmailScanned", "EmailSent", "EmailFailed", "EmailErased"} {
		if count[once] > 1 {
			t.Fatalf("step %d: %s recorded %d times", step, once, count[once])
		}
	}
	if count["EmailSent"] == 1 && count["EmailScanned"] == 0 {
		t.Fatalf("step %d: sent without the gateway's pass", step)
	}
	if engaged > email.MaxEngagement || s.Engaged != engaged {
		t.Fatalf("step %d: %d opens and clicks recorded, state counts %d", step, engaged, s.Engaged)
	}
	if s.Held != m.held || !s.GoingSince.Equal(m.goingSince) {
		t.Fatalf("step %d: held %v since %s, model held %v since %s", step, s.Held, s.GoingSince, m.held, m.goingSince)
	}
	if (s.Sent != nil) != m.sent || (s.Failed != nil) != m.failed || (s.Erased != nil) != m.erased || (s.Scanned != nil) != m.scanned {
		t.Fatalf("step %d: state %+v, model %+v", step, s, m)
	}

	// The status: the same Progress in any order and any grouping, and
	// the one the documented precedence gives.
	var inOrder, reversed, grouped, left, right email.Progress
	for i, e := range log {
		inOrder = inOrder.Add(e)
		reversed = reversed.Add(log[len(log)-1-i])
		if i%2 == 0 {
			left = left.Add(e)
		} else {
			right = right.Add(e)
		}
	}
	grouped = right.With(left.Effect())
	status := inOrder.Status()
	for name, p := range map[string]email.Progress{"reversed": reversed, "grouped": grouped} {
		if got := p.Status(); got.Status != status.Status || !got.At.Equal(status.At) {
			t.Fatalf("step %d: status %v in order, %v %s", step, status, got, name)
		}
	}
	if want := emailDocumentedStatus(log); want.Status != status.Status || !want.At.Equal(status.At) {
		t.Fatalf("step %d: status %v, the rules give %v, log %s", step, status, want, emailModelLog(log))
	}
	rank := email.Rank(inOrder.Top.Status)
	if rank < topRank {
		t.Fatalf("step %d: the top mark fell from rank %d to %v", step, topRank, inOrder.Top)
	}
	if topRank == email.Rank(email.StatusFailed) && email.Rank(status.Status) != topRank {
		t.Fatalf("step %d: an ended email left the top rank: %v", step, status)
	}
	return rank
}

// emailDocumentedStatus is the status as docs/decisions.md states it:
// failed, permanent bounces and complaints end the email, the latest of
// them (failed, then complained, then bounced at one instant) its status;
// otherwise a transient bounce shows unless a delivery, open or click
// happened after it; otherwise the highest of clicked, opened, delivered,
// sent and queued, the latest within one.
func emailDocumentedStatus(log []domain.Event) email.Mark {
	var end, soft, reached, best email.Mark
	endOrder := map[email.Status]int{email.StatusBounced: 1, email.StatusComplained: 2, email.StatusFailed: 3}
	order := map[email.Status]int{email.StatusQueued: 1, email.StatusSent: 2, email.StatusDelivered: 3, email.StatusOpened: 4, email.StatusClicked: 5}
	for _, e := range log {
		var m email.Mark
		switch e := e.(type) {
		case *email.Queued:
			m = email.Mark{Status: email.StatusQueued, At: e.QueuedAt}
		case *email.Sent:
			m = email.Mark{Status: email.StatusSent, At: e.SentAt}
		case *email.Failed:
			m = email.Mark{Status: email.StatusFailed, At: e.FailedAt}
		case *email.Complained:
			m = email.Mark{Status: email.StatusComplained, At: e.OccurredAt}
		case *email.Bounced:
			m = email.Mark{Status: email.StatusBounced, At: e.OccurredAt}
			if e.BounceType != "Permanent" {
				if soft.Status == "" || m.At.After(soft.At) {
					soft = m
				}
				continue
			}
		case *email.Delivered:
			m = email.Mark{Status: email.StatusDelivered, At: e.OccurredAt}
		case *email.Opened:
			m = email.Mark{Status: email.StatusOpened, At: e.OccurredAt}
		case *email.Clicked:
			m = email.Mark{Status: email.StatusClicked, At: e.OccurredAt}
		default:
			continue
		}
		if endOrder[m.Status] > 0 {
			if end.Status == "" || m.At.After(end.At) || (m.At.Equal(end.At) && endOrder[m.Status] > endOrder[end.Status]) {
				end = m
			}
			continue
		}
		if m.Status != email.StatusQueued && m.Status != email.StatusSent && (reached.Status == "" || m.At.After(reached.At)) {
			reached = m
		}
		if best.Status == "" || order[m.Status] > order[best.Status] || (order[m.Status] == order[best.Status] && m.At.After(best.At)) {
			best = m
		}
	}
	switch {
	case end.Status != "":
		return end
	case soft.Status != "" && (reached.Status == "" || !reached.At.After(soft.At)):
		return soft
	}
	return best
}

func emailModelLog(log []domain.Event) string {
	var out string
	for _, e := range log {
		out += fmt.Sprintf("\n  %T %+v", e, e)
	}
	return out
}
