package processmanagers

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// An attempt that found no place asks again after 200–600 ms at first.
// Behind a slow receiver the wait doubles with each time the job found
// none, up to a few seconds (under River's 5 s scheduler interval); behind
// a fast one, whose places free within milliseconds, it never grows.
func TestOverShareWaitFollowsTheReceiversPace(t *testing.T) {
	within := func(d, lo, hi time.Duration) bool { return d >= lo && d < hi }
	for range 1000 {
		if d := busy(0, 9*time.Second); !within(d, 200*time.Millisecond, 600*time.Millisecond) {
			t.Fatalf("first wait behind a slow receiver: %v", d)
		}
		if d := busy(5, 9*time.Second); !within(d, 1500*time.Millisecond, 4500*time.Millisecond) {
			t.Fatalf("sixth wait behind a slow receiver: %v", d)
		}
		if d := busy(1000, time.Hour); !within(d, 1500*time.Millisecond, 4500*time.Millisecond) {
			t.Fatalf("wait after many snoozes: %v", d)
		}
		if d := busy(2, 1200*time.Millisecond); !within(d, 600*time.Millisecond, 1800*time.Millisecond) {
			t.Fatalf("third wait behind a 1.2 s receiver: %v", d)
		}
		for _, n := range []int{0, 1, 5, 50} {
			if d := busy(n, 5*time.Millisecond); !within(d, 200*time.Millisecond, 600*time.Millisecond) {
				t.Fatalf("wait %d behind a fast receiver: %v", n+1, d)
			}
		}
	}
}

// An attempt job whose endpoint's places are all taken by attempts that
// have not freed one for longer than shareWait snoozes without reading its
// delivery or its endpoint (Commands and Pool are nil here: a read would
// panic), backed off by the times it found no place already (its own
// count: River's snoozes also count its waits for a retry to be due).
func TestAttemptOverASlowShareReadsNothing(t *testing.T) {
	w := &Webhooks{PerAccount: 4, PerEndpoint: 1, Now: time.Now}
	ctx := context.Background()
	if ok, _ := w.take(ctx, "acct", "ep"); !ok {
		t.Fatal("the first attempt found no place")
	}
	w.mu.Lock()
	w.endpoints["ep"].freed = time.Now().Add(-9 * time.Second) // in flight for 9 s
	w.mu.Unlock()
	job := &river.Job[AttemptArgs]{
		JobRow: &rivertype.JobRow{Metadata: []byte(`{"snoozes": 9, "share_waits": 6}`)},
		Args:   AttemptArgs{DeliveryID: "d", Attempt: 1, AccountID: "acct", EndpointID: "ep"},
	}
	err := (&attemptWorker{w: w}).Work(ctx, job)
	var snooze *river.JobSnoozeError
	if !errors.As(err, &snooze) {
		t.Fatalf("got %v, want a snooze", err)
	}
	if snooze.Duration < 1500*time.Millisecond {
		t.Fatalf("snoozed %v after six waits behind a 9 s receiver", snooze.Duration)
	}
	job.Metadata = []byte(`{"snoozes": 9}`) // waits for its retry, none for a place
	if err := (&attemptWorker{w: w}).Work(ctx, job); !errors.As(err, &snooze) || snooze.Duration > 600*time.Millisecond {
		t.Fatalf("the first wait for a place of a job that waited for its retry: %v", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if n := w.endpoints["ep"].n; n != 1 {
		t.Fatalf("the endpoint has %d places taken, want the first attempt's only", n)
	}
	if len(w.waiting) != 0 {
		t.Fatalf("attempts still counted as waiting: %v", w.waiting)
	}
}
