package webhook_test

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/delivery"
	"github.com/mailroom/mailroom/domain/webhook"
	"github.com/mailroom/mailroom/internal/fuzztape"
)

// Commands of the endpoint model: the API's, the fan-out's, the
// dispatcher's and its sweep's.
const (
	wopCreate = iota
	wopPause
	wopResume
	wopRetype
	wopRotate
	wopDelete
	wopFanout
	wopAttempt
	wopRepeat
	wopExpire
	wopDropErased
	wopDropUnsubscribed
	wopExhaust
	wopClock
	wopOps
)

// A short schedule, so that runs reach the last attempt often.
var modelSchedule = []time.Duration{30 * time.Second, 2 * time.Minute, 10 * time.Minute}

var modelClock = []time.Duration{10 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute,
	time.Hour, 24 * time.Hour, delivery.HoldCap, -time.Minute}

var modelStatuses = []int{0, 200, 204, 302, 404, 429, 500, 503}

// modelEndpoint is one endpoint and its deliveries, driven the way
// commands/webhooks.go and the dispatcher drive them.
type modelEndpoint struct {
	t     *testing.T
	step  int
	now   time.Time
	ep    webhook.State
	epLog []domain.Event
	epHis []webhook.State
	epAt  []int

	ds    map[string]delivery.State
	dLogs map[string][]domain.Event
	dHis  map[string][]delivery.State
	dAt   map[string][]int

	// What the documentation says the endpoint's count is: exhausted
	// deliveries since the last success or resume, each counted once.
	run map[string]bool
	// The endpoint's part of the last attempt, which a store appending
	// stream by stream may write again.
	lastID        string
	lastSucceeded bool
	lastDecided   bool
	exhaustions   int
}

func (m *modelEndpoint) fatalf(format string, args ...any) {
	m.t.Helper()
	m.t.Fatalf("step %d: "+format, append([]any{m.step}, args...)...)
}

func (m *modelEndpoint) recordEndpoint(evs []domain.Event) {
	m.t.Helper()
	if len(evs) == 0 {
		return
	}
	if m.ep.Deleted {
		m.fatalf("%v recorded for a deleted endpoint", evs)
	}
	for _, e := range evs {
		m.ep = webhook.Evolve(m.ep, e)
		m.epLog = append(m.epLog, e)
		switch e := e.(type) {
		case *webhook.EventExhausted:
			if m.run[e.DeliveryID] {
				m.fatalf("delivery %s counted twice in one run of failures", e.DeliveryID)
			}
			m.run[e.DeliveryID] = true
		case *webhook.FailuresReset, *webhook.Resumed:
			m.run = map[string]bool{}
		}
	}
	m.epHis, m.epAt = append(m.epHis, m.ep), append(m.epAt, len(m.epLog))
}

func (m *modelEndpoint) recordDelivery(id string, evs []domain.Event) {
	m.t.Helper()
	if len(evs) == 0 {
		return
	}
	s := m.ds[id]
	if s.Created != nil && s.Status != delivery.Pending {
		m.fatalf("%v recorded for delivery %s, %s already", evs, id, s.Status)
	}
	for _, e := range evs {
		before := s
		s = delivery.Evolve(s, e)
		switch e := e.(type) {
		case *delivery.AttemptSucceeded:
			if e.Attempt != before.Attempts+1 {
				m.fatalf("attempt %d after %d", e.Attempt, before.Attempts)
			}
		case *delivery.AttemptFailed:
			if e.Attempt != before.Attempts+1 || e.Attempt > len(modelSchedule)+1 {
				m.fatalf("attempt %d after %d", e.Attempt, before.Attempts)
			}
			if last := e.Attempt == len(modelSchedule)+1; last != e.NextAttemptAt.IsZero() {
				m.fatalf("attempt %d of %d failed, next at %s", e.Attempt, len(modelSchedule)+1, e.NextAttemptAt)
			}
		case *delivery.Expired:
			if !e.At.After(before.Created.CreatedAt.Add(delivery.HoldCap)) {
				m.fatalf("expired at %s, its event at %s", e.At, before.Created.CreatedAt)
			}
		}
	}
	m.ds[id] = s
	m.dLogs[id] = append(m.dLogs[id], evs...)
	m.dHis[id], m.dAt[id] = append(m.dHis[id], s), append(m.dAt[id], len(m.dLogs[id]))
}

func (m *modelEndpoint) check() {
	m.t.Helper()
	ep := m.ep
	if ep.ID == "" {
		return
	}
	if ep.ConsecutiveFailures != len(m.run) {
		m.fatalf("the endpoint counts %d failures, %d deliveries exhausted since the last success or resume", ep.ConsecutiveFailures, len(m.run))
	}
	if ep.Active && ep.ConsecutiveFailures >= webhook.DisableAfterExhausted {
		m.fatalf("active after %d consecutive failures", ep.ConsecutiveFailures)
	}
	if ep.DisabledReason != "" && (ep.Active || ep.DisabledReason != webhook.ReasonFailures) {
		m.fatalf("active %v disabled for %q", ep.Active, ep.DisabledReason)
	}
	for id, s := range m.ds {
		ends := 0
		for _, e := range m.dLogs[id] {
			switch e := e.(type) {
			case *delivery.AttemptSucceeded, *delivery.Skipped, *delivery.Expired, *delivery.Dropped:
				ends++
			case *delivery.AttemptFailed:
				if e.NextAttemptAt.IsZero() {
					ends++
				}
			}
		}
		if ends > 1 || (ends == 1) != (s.Status != delivery.Pending) {
			m.fatalf("delivery %s %s after %d ends: %v", id, s.Status, ends, m.dLogs[id])
		}
	}
}

// FuzzEndpointAndDeliveries runs any sequence of an endpoint's changes
// (create, pause, resume, event types, secret, delete), its deliveries'
// creation by the fan-out, their attempts with any answer, Retry-After and
// jitter, the repeat of an attempt's endpoint part that a store appending
// stream by stream may make, expiry of held deliveries and drops, over a
// clock that crosses the retry waits and the 72-hour hold. After each step
// it checks what docs/decisions.md ("Webhooks") and docs/events.md
// ("Webhook endpoint stream", "Webhook delivery stream", "Writes to two
// streams") say: the endpoint counts each exhausted delivery once, resets
// on a success or a resume, and is disabled with the 20th in a row while
// active and never stays active past it; expiries and drops count neither
// way; a delivery's attempts count up one at a time, the schedule's last
// one fails it, its retry waits the schedule's time give or take 10 % or
// the receiver's Retry-After up to the longest wait, and it ends once.
// Replaying the logs gives every state the live decisions went through.
func FuzzEndpointAndDeliveries(f *testing.F) {
	f.Add([]byte{})
	// Attempts read: which delivery, the answer (1: 200, 4: 404, 6: 500,
	// 7: 503, 0: none), Retry-After, jitter (100: none), whether in flight.
	// Created; an event fails its four attempts; the repeat of the
	// endpoint's part counts nothing.
	f.Add([]byte{wopCreate, wopFanout, 0, 0, wopAttempt, 0, 4, 0, 100, 1, wopClock, 1, wopAttempt, 0, 6, 2, 0, 1,
		wopClock, 2, wopAttempt, 0, 0, 0, 200, 1, wopClock, 3, wopAttempt, 0, 7, 3, 100, 1, wopRepeat})
	// Paused with a delivery waiting; it expires after 72 hours.
	f.Add([]byte{wopCreate, wopFanout, 1, 1, wopPause, wopClock, 6, wopClock, 0, wopExpire, 1, wopResume, wopAttempt, 1, 1, 0, 100, 1})
	// A delivery dropped when its email is erased, another when the
	// endpoint stops subscribing.
	f.Add([]byte{wopCreate, wopFanout, 2, 2, wopFanout, 3, 3, wopRetype, 1, wopDropUnsubscribed, 3, wopDropErased, 2, wopAttempt, 2, 1, 0, 100, 1})
	// A success after a failure resets the count.
	f.Add([]byte{wopCreate, wopFanout, 1, 1, wopExhaust, wopAttempt, 1, 1, 0, 100, 1, wopRepeat})
	// Twenty events in a row exhaust their retries: the endpoint is
	// disabled, the next event is skipped, a resume starts it over.
	disable := []byte{wopCreate}
	for range webhook.DisableAfterExhausted + 1 {
		disable = append(disable, wopExhaust, 1)
	}
	f.Add(append(disable, wopRepeat, wopFanout, 0, 0, wopResume, wopExhaust, 1, wopFanout, 1, 0, wopAttempt, 1, 1, 0, 100, 1))
	// Paused at 19 failures, an event in flight is the 20th: counted, and
	// the endpoint stays paused, not disabled.
	paused := append([]byte{wopCreate}, disable[1:2*webhook.DisableAfterExhausted-1]...)
	f.Add(append(paused, wopPause, wopExhaust, 0, wopExhaust, 0, wopResume))
	f.Fuzz(func(t *testing.T, data []byte) {
		tape := fuzztape.New(data)
		m := &modelEndpoint{t: t, now: t0, ds: map[string]delivery.State{}, dLogs: map[string][]domain.Event{},
			dHis: map[string][]delivery.State{}, dAt: map[string][]int{}, run: map[string]bool{}}
		url := "https://hooks.example.com/in"
		// Enough deliveries to reach the 20th failure in a row.
		nDeliveries := webhook.DisableAfterExhausted + 4
		for tape.More() && m.step < 600 {
			m.step++
			op := tape.Pick(wopOps)
			decided := false
			switch op {
			case wopCreate:
				evs, err := webhook.Create(m.ep, "w1", "acct", webhook.Settings{URL: &url}, "sealed", m.now)
				if m.ep.ID != "" {
					var c *domain.ConflictError
					if !errors.As(err, &c) || len(evs) > 0 {
						m.fatalf("created twice: %v %v", evs, err)
					}
				}
				m.recordEndpoint(evs)
			case wopPause, wopResume:
				active := op == wopResume
				before := m.ep
				evs, err := webhook.Update(m.ep, "acct", webhook.Settings{}, &active, m.now)
				if !before.Exists() {
					if !errors.Is(err, domain.ErrNotFound) {
						m.fatalf("update of a missing endpoint: %v", err)
					}
					continue
				}
				var want []string
				switch {
				case active && (!before.Active || before.ConsecutiveFailures > 0):
					want = []string{"WebhookEndpointResumed"}
				case !active && before.Active:
					want = []string{"WebhookEndpointPaused"}
				}
				if got := modelTypes(evs); !slices.Equal(got, want) {
					m.fatalf("active %v on %+v decided %v, want %v", active, before, got, want)
				}
				m.recordEndpoint(evs)
				if active && (!m.ep.Active || m.ep.DisabledReason != "" || m.ep.ConsecutiveFailures != 0) {
					m.fatalf("resumed to %+v", m.ep)
				}
			case wopRetype:
				types := [][]string{webhook.EventTypes, {"email.sent"}, {"email.bounced", "email.failed"}}[tape.Pick(3)]
				evs, err := webhook.Update(m.ep, "acct", webhook.Settings{EventTypes: types, TypesGiven: true}, nil, m.now)
				if err == nil && len(evs) != 1 {
					m.fatalf("a change of event types decided %v", evs)
				}
				m.recordEndpoint(evs)
			case wopRotate:
				evs, _ := webhook.RotateSecret(m.ep, "acct", "sealed2", m.now)
				m.recordEndpoint(evs)
			case wopDelete:
				evs, err := webhook.Delete(m.ep, "acct", m.now)
				if m.ep.Exists() != (err == nil) {
					m.fatalf("delete of an endpoint that exists %v: %v", m.ep.Exists(), err)
				}
				m.recordEndpoint(evs)
			case wopFanout:
				id := fmt.Sprintf("dl%02d", tape.Pick(nDeliveries))
				typ := webhook.EventTypes[tape.Pick(len(webhook.EventTypes))]
				// The fan-out posts to an endpoint that exists and wants
				// the type; one disabled after failures gets it skipped.
				if !m.ep.Exists() || !m.ep.Subscribes(typ) {
					continue
				}
				m.fanout(id, typ)
			case wopAttempt:
				id := fmt.Sprintf("dl%02d", tape.Pick(nDeliveries))
				code := modelStatuses[tape.Pick(len(modelStatuses))]
				retryAfter := []time.Duration{0, 0, time.Minute, 5 * time.Hour}[tape.Pick(4)]
				jitter := float64(tape.Pick(201)-100) / 100
				inFlight := tape.Pick(8) == 0
				st := m.ds[id]
				// Attempts go to an endpoint that exists and is active,
				// when due; one already in flight ends whatever came
				// meanwhile.
				if !st.Due(m.now) || (!inFlight && (!m.ep.Exists() || !m.ep.Active)) {
					continue
				}
				o := delivery.Outcome{Error: "failed", RetryAfter: retryAfter}
				if code != 0 {
					o.ResponseStatus = &code
				}
				decided = m.attempt(id, o, jitter)
			case wopExhaust:
				// A new event whose every attempt fails, each when due:
				// one byte for what would take a dozen.
				// In flight, it was made before the endpoint was paused
				// or disabled, and its attempts end all the same.
				inFlight := tape.Pick(4) == 0
				if !m.ep.Exists() {
					continue
				}
				id := fmt.Sprintf("ex%02d", m.exhaustions)
				m.exhaustions++
				if inFlight {
					m.recordDelivery(id, delivery.Create(delivery.State{}, delivery.Created{DeliveryID: id, EndpointID: m.ep.ID,
						AccountID: "acct", EmailID: "e-" + id, Type: m.ep.EventTypes[0], Payload: "{}", CreatedAt: m.now}))
				} else {
					m.fanout(id, m.ep.EventTypes[0])
				}
				code := 500
				for m.ds[id].Status == delivery.Pending && (m.ep.Active || inFlight) {
					m.now = maxTime(m.now, m.ds[id].NextAt)
					decided = m.attempt(id, delivery.Outcome{ResponseStatus: &code, Error: "500"}, 0)
				}
			case wopRepeat:
				// A write cut off after its endpoint's part is made
				// again: the endpoint's part decides nothing more.
				if !m.lastDecided {
					continue
				}
				if evs := webhook.RecordOutcome(m.ep, m.lastID, m.lastSucceeded, m.now); len(evs) > 0 {
					m.fatalf("the endpoint's part for %s decided again: %v", m.lastID, evs)
				}
			case wopExpire:
				id := fmt.Sprintf("dl%02d", tape.Pick(nDeliveries))
				st := m.ds[id]
				// The sweep expires deliveries held by an inactive endpoint.
				if !m.ep.Exists() || m.ep.Active {
					continue
				}
				evs := delivery.Expire(st, m.ep.DisabledReason != "", m.now)
				due := st.Created != nil && st.Status == delivery.Pending && m.now.Sub(st.Created.CreatedAt) > delivery.HoldCap
				if due != (len(evs) == 1) {
					m.fatalf("expiry of %+v at %s decided %v", st, m.now, evs)
				}
				m.recordDelivery(id, evs)
			case wopDropErased:
				id := fmt.Sprintf("dl%02d", tape.Pick(nDeliveries))
				st := m.ds[id]
				evs := delivery.Drop(st, true, m.now)
				if (st.Created != nil && st.Status == delivery.Pending) != (len(evs) == 1) {
					m.fatalf("drop of %+v decided %v", st, evs)
				}
				m.recordDelivery(id, evs)
			case wopDropUnsubscribed:
				id := fmt.Sprintf("dl%02d", tape.Pick(nDeliveries))
				st := m.ds[id]
				if st.Created == nil || m.ep.Subscribes(st.Created.Type) {
					continue
				}
				m.recordDelivery(id, delivery.DropUnsubscribed(st, m.now))
			case wopClock:
				m.now = m.now.Add(modelClock[tape.Pick(len(modelClock))])
				continue
			}
			if op != wopRepeat {
				m.lastDecided = decided
			}
			m.check()
		}
		// Replay every stream from nothing.
		var ep webhook.State
		from := 0
		for i, n := range m.epAt {
			for _, e := range m.epLog[from:n] {
				ep = webhook.Evolve(ep, e)
			}
			from = n
			if !reflect.DeepEqual(ep, m.epHis[i]) {
				t.Fatalf("endpoint write %d: replay\n%+v\nlive\n%+v", i, ep, m.epHis[i])
			}
		}
		for id, writes := range m.dAt {
			var d delivery.State
			from := 0
			for i, n := range writes {
				for _, e := range m.dLogs[id][from:n] {
					d = delivery.Evolve(d, e)
				}
				from = n
				if !reflect.DeepEqual(d, m.dHis[id][i]) {
					t.Fatalf("delivery %s write %d: replay\n%+v\nlive\n%+v", id, i, d, m.dHis[id][i])
				}
			}
		}
	})
}

// fanout records the delivery of an event of type typ, as the fan-out
// does: skipped for an endpoint disabled after failures.
func (m *modelEndpoint) fanout(id, typ string) {
	m.t.Helper()
	c := delivery.Created{DeliveryID: id, EndpointID: m.ep.ID, AccountID: "acct", EmailID: "e-" + id, Type: typ,
		Payload: "{}", CreatedAt: m.now}
	before := m.ds[id]
	var evs []domain.Event
	if m.ep.DisabledReason != "" {
		evs = delivery.CreateSkipped(before, c, m.now)
	} else {
		evs = delivery.Create(before, c)
	}
	if (before.Created == nil) != (len(evs) > 0) {
		m.fatalf("a delivery made again: %v", evs)
	}
	m.recordDelivery(id, evs)
	if s := m.ds[id]; before.Created == nil && (m.ep.DisabledReason != "") != (s.Status == delivery.Failed && s.Attempts == 0) {
		m.fatalf("a delivery for an endpoint disabled %q is %s", m.ep.DisabledReason, s.Status)
	}
}

// attempt records an attempt of a due delivery with outcome o, and its
// endpoint's part when it ends the delivery, which it reports.
func (m *modelEndpoint) attempt(id string, o delivery.Outcome, jitter float64) bool {
	m.t.Helper()
	st := m.ds[id]
	evs := delivery.RecordAttempt(st, o, modelSchedule, jitter, m.now)
	if len(evs) != 1 {
		m.fatalf("an attempt of a due delivery decided %v", evs)
	}
	m.checkWait(evs[0], o, jitter)
	final := delivery.Evolve(st, evs[0])
	ended := final.Status != delivery.Pending
	if ended {
		succeeded := final.Status == delivery.Delivered
		m.endpointPart(id, succeeded)
		m.lastID, m.lastSucceeded = id, succeeded
	}
	m.recordDelivery(id, evs)
	return ended
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// endpointPart decides and checks what a delivery's end means for its
// endpoint, as commands.RecordAttempt records it.
func (m *modelEndpoint) endpointPart(id string, succeeded bool) {
	m.t.Helper()
	before := m.ep
	evs := webhook.RecordOutcome(before, id, succeeded, m.now)
	var want []string
	switch {
	case !before.Exists():
	case succeeded && before.ConsecutiveFailures > 0:
		want = []string{"WebhookFailuresReset"}
	case !succeeded && !m.run[id]:
		want = []string{"WebhookEventExhausted"}
		if before.Active && len(m.run)+1 >= webhook.DisableAfterExhausted {
			want = append(want, "WebhookEndpointDisabled")
		}
	}
	if got := modelTypes(evs); !slices.Equal(got, want) {
		m.fatalf("delivery %s succeeded %v at an endpoint with %d failures (active %v) decided %v, want %v",
			id, succeeded, before.ConsecutiveFailures, before.Active, got, want)
	}
	m.recordEndpoint(evs)
}

// checkWait checks a failed attempt's retry time: the schedule's wait
// give or take 10 %, or the receiver's longer Retry-After up to the
// schedule's longest wait.
func (m *modelEndpoint) checkWait(e domain.Event, o delivery.Outcome, jitter float64) {
	m.t.Helper()
	f, ok := e.(*delivery.AttemptFailed)
	if !ok || f.NextAttemptAt.IsZero() {
		return
	}
	if o.Succeeded() {
		m.fatalf("a %d answer failed", *o.ResponseStatus)
	}
	w := modelSchedule[f.Attempt-1]
	gap := f.NextAttemptAt.Sub(f.At)
	lo, hi := w-w/10-time.Microsecond, w+w/10+time.Microsecond // rounding
	asked := min(o.RetryAfter, slices.Max(modelSchedule))
	if (gap < lo || gap > hi) && !(o.RetryAfter > lo && gap == asked) {
		m.fatalf("attempt %d (jitter %v, Retry-After %s) retries after %s, schedule %s", f.Attempt, jitter, o.RetryAfter, gap, w)
	}
}

func modelTypes(evs []domain.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.EventType())
	}
	return out
}

// FuzzEndpointSlots runs any sequence of endpoint creates and deletes of
// one account, each of which may stop between its two writes (a slot
// taken without its endpoint, an endpoint deleted without freeing its
// slot), from a start with endpoints made before slots were recorded, over
// a clock that crosses the slot's minute and sometimes goes back. After
// each create it checks what docs/decisions.md ("Webhooks") says of the
// limit: a create is refused exactly when ten slots count, a slot counting
// for a minute whatever its endpoint shows and afterwards only while its
// endpoint exists, so the account never holds more than ten endpoints.
func FuzzEndpointSlots(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{10, 0, 0, 1, 5, 2, 0, 0, 2, 3, 0, 0})
	f.Add([]byte{0, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 2, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		tape := fuzztape.New(data)
		now := t0
		var (
			slots     webhook.Slots
			slotLog   []domain.Event
			ids       []string
			endpoints = map[string]webhook.State{}
		)
		// Endpoints made before slots were recorded.
		var existing []string
		for range tape.Pick(webhook.MaxEndpoints + 1) {
			id := fmt.Sprintf("w%02d", len(ids))
			evs, _ := webhook.Create(webhook.State{}, id, "acct", webhook.Settings{URL: &id}, "sealed", now.Add(-time.Hour))
			endpoints[id] = fold(webhook.State{}, evs)
			ids, existing = append(ids, id), append(existing, id)
		}
		record := func(evs []domain.Event) {
			for _, e := range evs {
				slots = webhook.EvolveSlots(slots, e)
				slotLog = append(slotLog, e)
			}
		}
		for step := 1; tape.More() && step < 200; step++ {
			switch tape.Pick(3) {
			case 0: // create, perhaps stopping after the slot
				id := fmt.Sprintf("w%02d", len(ids))
				crash := tape.Pick(4) == 0
				counted := 0
				held := slots.Held
				if !slots.Seeded {
					held = map[string]time.Time{}
					for _, e := range existing {
						held[e] = now
					}
				}
				for hid, at := range held {
					if endpoints[hid].Exists() || now.Sub(at) < webhook.SlotGrace {
						counted++
					}
				}
				live := map[string]bool{}
				for _, s := range slots.Stale(now) {
					live[s] = endpoints[s].Exists()
				}
				evs, err := webhook.TakeSlot(slots, "acct", id, existing, live, now)
				if refused := counted >= webhook.MaxEndpoints; refused != (err != nil) {
					t.Fatalf("step %d: %d slots count, create answered %v", step, counted, err)
				}
				if err != nil {
					if !errors.Is(err, webhook.ErrEndpointLimit) || len(evs) > 0 {
						t.Fatalf("step %d: refused with %v %v", step, evs, err)
					}
					continue
				}
				record(evs)
				ids = append(ids, id)
				if !crash {
					url := "https://hooks.example.com/" + id
					evs, err := webhook.Create(webhook.State{}, id, "acct", webhook.Settings{URL: &url}, "sealed", now)
					if err != nil {
						t.Fatal(err)
					}
					endpoints[id] = fold(webhook.State{}, evs)
				}
				n := 0
				for _, ep := range endpoints {
					if ep.Exists() {
						n++
					}
				}
				if n > webhook.MaxEndpoints {
					t.Fatalf("step %d: %d endpoints", step, n)
				}
			case 1: // delete, perhaps stopping before its slot is freed
				if len(ids) == 0 {
					continue
				}
				id := ids[tape.Pick(len(ids))]
				crash := tape.Pick(4) == 0
				evs, err := webhook.Delete(endpoints[id], "acct", now)
				if err != nil {
					continue
				}
				endpoints[id] = fold(endpoints[id], evs)
				if !crash {
					free := webhook.FreeSlot(slots, "acct", id, now)
					if _, held := slots.Held[id]; held != (len(free) == 1) {
						t.Fatalf("step %d: freeing %s, held %v, decided %v", step, id, held, free)
					}
					record(free)
				}
			case 2:
				now = now.Add([]time.Duration{time.Second, 30 * time.Second, 59 * time.Second, time.Minute, time.Hour, -time.Minute}[tape.Pick(6)])
			}
		}
		var replay webhook.Slots
		for _, e := range slotLog {
			replay = webhook.EvolveSlots(replay, e)
		}
		if !reflect.DeepEqual(replay, slots) {
			t.Fatalf("slots replayed %+v, live %+v", replay, slots)
		}
	})
}
