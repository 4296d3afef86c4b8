package delivery_test

import (
	"testing"
	"time"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/delivery"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func fold(s delivery.State, evs []domain.Event) delivery.State {
	for _, e := range evs {
		s = delivery.Evolve(s, e)
	}
	return s
}

func TestScheduleAndExhaustion(t *testing.T) {
	s := fold(delivery.State{}, delivery.Create(delivery.State{}, delivery.Created{DeliveryID: "d1", EndpointID: "e1", CreatedAt: t0}))
	if !s.Due(t0) {
		t.Fatal("a new delivery is due at once")
	}
	if again := delivery.Create(s, delivery.Created{DeliveryID: "d1"}); len(again) != 0 {
		t.Fatal("created twice")
	}
	status := 500
	now := t0
	var total time.Duration
	for i, want := range delivery.DefaultSchedule {
		evs := delivery.RecordAttempt(s, delivery.Outcome{ResponseStatus: &status, Error: "receiver returned 500"}, delivery.DefaultSchedule, 1, now)
		f := evs[0].(*delivery.AttemptFailed)
		if f.Attempt != i+1 || f.NextAttemptAt.Sub(now) != want+want/10 {
			t.Fatalf("attempt %d: next in %v, want %v", f.Attempt, f.NextAttemptAt.Sub(now), want+want/10)
		}
		s = fold(s, evs)
		if s.Due(f.NextAttemptAt.Add(-time.Second)) || !s.Due(f.NextAttemptAt) {
			t.Fatal("due at the wrong time")
		}
		total += want
		now = f.NextAttemptAt
	}
	if total < 5*time.Hour || total > 5*time.Hour+15*time.Minute {
		t.Fatalf("schedule spans %v, want about 5 h 12 m", total)
	}
	evs := delivery.RecordAttempt(s, delivery.Outcome{Error: "timeout after 10s"}, delivery.DefaultSchedule, 0, now)
	s = fold(s, evs)
	if s.Status != delivery.Failed || s.Attempts != 7 || s.Due(now.Add(time.Hour)) {
		t.Fatalf("after the 7th attempt: %+v", s)
	}
	if more := delivery.RecordAttempt(s, delivery.Outcome{}, delivery.DefaultSchedule, 0, now); len(more) != 0 {
		t.Fatal("attempted after failing")
	}
}

func TestSuccessEnds(t *testing.T) {
	s := fold(delivery.State{}, delivery.Create(delivery.State{}, delivery.Created{DeliveryID: "d1", CreatedAt: t0}))
	ok := 204
	s = fold(s, delivery.RecordAttempt(s, delivery.Outcome{ResponseStatus: &ok}, delivery.DefaultSchedule, 0, t0))
	if s.Status != delivery.Delivered || s.Attempts != 1 || s.Due(t0.Add(time.Hour)) {
		t.Fatalf("after success: %+v", s)
	}
	redirect := 302
	if (delivery.Outcome{ResponseStatus: &redirect}).Succeeded() {
		t.Fatal("a redirect is not a success")
	}
}

func TestSkippedForADisabledEndpoint(t *testing.T) {
	c := delivery.Created{DeliveryID: "d1", EndpointID: "e1", CreatedAt: t0}
	evs := delivery.CreateSkipped(delivery.State{}, c, t0.Add(time.Second))
	s := fold(delivery.State{}, evs)
	skip, ok := evs[len(evs)-1].(*delivery.Skipped)
	if !ok || skip.Reason != delivery.ReasonEndpointDisabled || skip.Error != "endpoint disabled after consecutive failures" {
		t.Fatalf("events %+v", evs)
	}
	if s.Status != delivery.Failed || s.Attempts != 0 || s.Due(t0.Add(time.Hour)) {
		t.Fatalf("skipped delivery %+v", s)
	}
	if again := delivery.CreateSkipped(s, c, t0); len(again) != 0 {
		t.Fatal("recorded twice")
	}
	if evs := delivery.Expire(s, true, t0.Add(100*time.Hour)); len(evs) != 0 {
		t.Fatal("a failed delivery expired")
	}
}

func TestHeldDeliveryExpires(t *testing.T) {
	s := fold(delivery.State{}, delivery.Create(delivery.State{}, delivery.Created{DeliveryID: "d1", EndpointID: "e1", CreatedAt: t0}))
	if evs := delivery.Expire(s, false, t0.Add(delivery.HoldCap)); len(evs) != 0 {
		t.Fatal("expired at the cap, not past it")
	}
	for _, tc := range []struct {
		disabled bool
		want     string
	}{
		{false, "held longer than 72h while the endpoint was paused"},
		{true, "held longer than 72h while the endpoint was disabled"},
	} {
		evs := delivery.Expire(s, tc.disabled, t0.Add(delivery.HoldCap+time.Second))
		if len(evs) != 1 || evs[0].(*delivery.Expired).Error != tc.want {
			t.Fatalf("expiry %+v", evs)
		}
		if after := fold(s, evs); after.Status != delivery.Failed || after.Due(t0.Add(100*time.Hour)) {
			t.Fatalf("after expiry %+v", after)
		}
	}
	// A delivered one stays delivered.
	ok := 200
	done := fold(s, delivery.RecordAttempt(s, delivery.Outcome{ResponseStatus: &ok}, delivery.DefaultSchedule, 0, t0))
	if evs := delivery.Expire(done, false, t0.Add(100*time.Hour)); len(evs) != 0 {
		t.Fatal("a delivered delivery expired")
	}
}

// A receiver's Retry-After lengthens the wait, never beyond the
// schedule's longest; a shorter one leaves the schedule's.
func TestRetryAfterIsHonouredUpToTheLongestWait(t *testing.T) {
	s := fold(delivery.State{}, delivery.Create(delivery.State{}, delivery.Created{DeliveryID: "d1", EndpointID: "e1", CreatedAt: t0}))
	status := 429
	next := func(retryAfter time.Duration) time.Duration {
		evs := delivery.RecordAttempt(s, delivery.Outcome{ResponseStatus: &status, Error: "receiver returned 429", RetryAfter: retryAfter},
			delivery.DefaultSchedule, 0, t0)
		return evs[0].(*delivery.AttemptFailed).NextAttemptAt.Sub(t0)
	}
	for _, c := range []struct{ retryAfter, want time.Duration }{
		{0, 30 * time.Second},
		{10 * time.Second, 30 * time.Second},
		{5 * time.Minute, 5 * time.Minute},
		{48 * time.Hour, 3 * time.Hour},
	} {
		if got := next(c.retryAfter); got != c.want {
			t.Errorf("Retry-After %v: next attempt in %v, want %v", c.retryAfter, got, c.want)
		}
	}
}

// A pending delivery read with its email erased is dropped: it fails
// unattempted and is never due again. One that ended stays as it was, and
// one whose email is not erased is not dropped.
func TestPendingDeliveryOfAnErasedEmailIsDropped(t *testing.T) {
	c := delivery.Created{DeliveryID: "d1", EndpointID: "e1", CreatedAt: t0}
	live := fold(delivery.State{}, delivery.Create(delivery.State{}, c))
	if evs := delivery.Drop(live, false, t0); len(evs) != 0 {
		t.Fatalf("dropped a delivery whose email is not erased: %+v", evs)
	}
	erased := live
	erased.Created = &delivery.Created{DeliveryID: "d1", EndpointID: "e1", CreatedAt: t0, Erased: true}
	evs := delivery.Drop(erased, false, t0.Add(time.Minute))
	d, ok := evs[0].(*delivery.Dropped)
	if len(evs) != 1 || !ok || d.Reason != delivery.ReasonEmailErased || d.DeliveryID != "d1" || d.EndpointID != "e1" {
		t.Fatalf("events %+v", evs)
	}
	s := fold(erased, evs)
	if s.Status != delivery.Failed || s.Attempts != 0 || s.Due(t0.Add(time.Hour)) {
		t.Fatalf("dropped delivery %+v", s)
	}
	if again := delivery.Drop(s, false, t0); len(again) != 0 {
		t.Fatal("dropped twice")
	}
	ok200 := 200
	done := fold(live, delivery.RecordAttempt(live, delivery.Outcome{ResponseStatus: &ok200}, delivery.DefaultSchedule, 0, t0))
	done.Created = erased.Created
	if evs := delivery.Drop(done, false, t0); len(evs) != 0 {
		t.Fatal("a delivered delivery was dropped")
	}
}

// A delivery of an event read with its email erased is never recorded.
func TestNoDeliveryOfAnErasedEvent(t *testing.T) {
	c := delivery.Created{DeliveryID: "d1", EndpointID: "e1", CreatedAt: t0, Erased: true}
	if evs := delivery.Create(delivery.State{}, c); len(evs) != 0 {
		t.Fatalf("created %+v", evs)
	}
	if evs := delivery.CreateSkipped(delivery.State{}, c, t0); len(evs) != 0 {
		t.Fatalf("created skipped %+v", evs)
	}
}

func TestOnly2xxAnswersSucceed(t *testing.T) {
	for code, want := range map[int]bool{199: false, 200: true, 204: true, 299: true, 300: false, 301: false} {
		c := code
		if got := (delivery.Outcome{ResponseStatus: &c}).Succeeded(); got != want {
			t.Errorf("%d: succeeded %v", code, got)
		}
	}
}

// The documented waits between attempts: 30 s, 2 m, 10 m, 30 m, 1 h 30 m
// and 3 h.
func TestTheDefaultScheduleIsTheDocumentedOne(t *testing.T) {
	want := []time.Duration{30 * time.Second, 2 * time.Minute, 10 * time.Minute, 30 * time.Minute, 90 * time.Minute, 3 * time.Hour}
	if len(delivery.DefaultSchedule) != len(want) {
		t.Fatalf("schedule %v, want %v", delivery.DefaultSchedule, want)
	}
	for i := range want {
		if delivery.DefaultSchedule[i] != want[i] {
			t.Errorf("wait %d: %v, want %v", i+1, delivery.DefaultSchedule[i], want[i])
		}
	}
}

// A pending delivery whose endpoint stopped subscribing to its event's type
// ends unattempted, and the delivery log says why; one that ended stays as
// it was.
func TestAPendingDeliveryOfAnUnsubscribedTypeIsDropped(t *testing.T) {
	if evs := delivery.DropUnsubscribed(delivery.State{}, t0); len(evs) != 0 {
		t.Fatalf("dropped a delivery never created: %+v", evs)
	}
	s := fold(delivery.State{}, delivery.Create(delivery.State{}, delivery.Created{DeliveryID: "d1", EndpointID: "e1", CreatedAt: t0}))
	evs := delivery.DropUnsubscribed(s, t0.Add(time.Minute))
	d, ok := evs[0].(*delivery.Dropped)
	if len(evs) != 1 || !ok || d.Reason != delivery.ReasonUnsubscribed || d.DeliveryID != "d1" || d.EndpointID != "e1" {
		t.Fatalf("events %+v", evs)
	}
	dropped := fold(s, evs)
	if dropped.Status != delivery.Failed || dropped.Attempts != 0 || dropped.Due(t0.Add(time.Hour)) {
		t.Fatalf("dropped delivery %+v", dropped)
	}
	if again := delivery.DropUnsubscribed(dropped, t0); len(again) != 0 {
		t.Fatal("dropped twice")
	}
	if got := delivery.DropError(d.Reason); got != "not delivered: the endpoint no longer subscribes to this event type" {
		t.Errorf("log error of an unsubscribed drop: %q", got)
	}
	if got := delivery.DropError(delivery.ReasonEmailErased); got != delivery.DroppedError {
		t.Errorf("log error of an erased drop: %q", got)
	}
}

// A receiver that asks to wait longer than the schedule is never retried
// sooner than had it asked nothing: on the last wait, lengthened by
// jitter past the schedule's longest, its Retry-After leaves that wait.
func TestRetryAfterNeverShortensTheWait(t *testing.T) {
	s := fold(delivery.State{}, delivery.Create(delivery.State{}, delivery.Created{DeliveryID: "d1", EndpointID: "e1", CreatedAt: t0}))
	s.Attempts = len(delivery.DefaultSchedule) - 1 // the next failure is followed by the last wait
	status := 503
	next := func(retryAfter time.Duration) time.Duration {
		evs := delivery.RecordAttempt(s, delivery.Outcome{ResponseStatus: &status, Error: "receiver returned 503", RetryAfter: retryAfter},
			delivery.DefaultSchedule, 1, t0)
		return evs[0].(*delivery.AttemptFailed).NextAttemptAt.Sub(t0)
	}
	unasked := next(0)
	if unasked != 3*time.Hour+18*time.Minute {
		t.Fatalf("last wait with full jitter: %v", unasked)
	}
	if got := next(4 * time.Hour); got < unasked {
		t.Errorf("Retry-After 4h: next attempt in %v, sooner than the %v of no Retry-After", got, unasked)
	}
}
