package pglock

import (
	"errors"
	"testing"
	"time"
)

func tenureOf(t *testing.T, ts *Tenures, name string) Tenure {
	t.Helper()
	for _, v := range ts.List() {
		if v.Name == name {
			return v
		}
	}
	t.Fatalf("no tenure %q", name)
	return Tenure{}
}

// A run of failures goes on through tenures that end at once, and ends
// with a tenure that lasts or with the lock seen held elsewhere.
func TestFailuresCountInARowUntilATenureLasts(t *testing.T) {
	var ts Tenures
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	refused := errors.New("refused")
	ts.set("reader", Failing, t0, refused)
	ts.set("reader", Failing, t0.Add(time.Second), refused)
	if v := tenureOf(t, &ts, "reader"); v.State != Failing || v.Failures != 2 || !v.Since.Equal(t0) || v.Err != refused {
		t.Fatalf("two failures: %+v", v)
	}
	// Taken, then lost after a moment: still the same run.
	ts.set("reader", Active, t0.Add(2*time.Second), nil)
	if v := tenureOf(t, &ts, "reader"); v.State != Active || v.Failures != 0 || v.Err != nil {
		t.Fatalf("active: %+v", v)
	}
	ts.set("reader", Failing, t0.Add(3*time.Second), refused)
	if v := tenureOf(t, &ts, "reader"); v.Failures != 3 || !v.Since.Equal(t0) {
		t.Fatalf("lost at once: %+v, want the third failure of the run since %s", v, t0)
	}
	// A tenure that lasted ends the run.
	ts.set("reader", Active, t0.Add(4*time.Second), nil)
	ts.set("reader", Failing, t0.Add(4*time.Second+steadyAfter), refused)
	if v := tenureOf(t, &ts, "reader"); v.Failures != 1 || !v.Since.Equal(t0.Add(4*time.Second+steadyAfter)) {
		t.Fatalf("lost after a steady tenure: %+v, want a new run", v)
	}
	// Standing by means the connection and the lock answer.
	ts.set("reader", Standby, t0.Add(time.Minute), nil)
	ts.set("reader", Failing, t0.Add(time.Minute+time.Second), refused)
	if v := tenureOf(t, &ts, "reader"); v.Failures != 1 {
		t.Fatalf("failed after standing by: %+v, want a new run", v)
	}
}

func TestANilTenuresRecordsNothing(t *testing.T) {
	var ts *Tenures
	ts.set("reader", Failing, time.Now(), errors.New("refused"))
	if got := ts.List(); len(got) != 0 {
		t.Fatalf("nil Tenures listed %v", got)
	}
}

// Work that retries inside its tenure reports each failure, which counts
// in a run, and its first success after them, which makes it active; a
// success while active changes nothing.
func TestWorkingReportsFailuresInsideATenure(t *testing.T) {
	var ts Tenures
	denied := errors.New("AccessDenied")
	ts.set("feedback", Active, time.Now(), nil)
	ts.Working("feedback", nil)
	if v := tenureOf(t, &ts, "feedback"); v.State != Active || v.Failures != 0 {
		t.Fatalf("a success while active: %+v", v)
	}
	for range 3 {
		ts.Working("feedback", denied)
	}
	if v := tenureOf(t, &ts, "feedback"); v.State != Failing || v.Failures != 3 || v.Err != denied {
		t.Fatalf("three failed reads: %+v", v)
	}
	ts.Working("feedback", nil)
	if v := tenureOf(t, &ts, "feedback"); v.State != Active {
		t.Fatalf("read again: %+v", v)
	}
	var none *Tenures
	none.Working("feedback", denied) // records nothing, and does not panic
}
