package pglock

import (
	"sort"
	"sync"
	"time"
)

// State is what a named holder of a lock is doing.
type State string

const (
	// Active: it holds its lock and works.
	Active State = "active"
	// Standby: another session holds the lock; this one waits to take over.
	Standby State = "standby"
	// Failing: it could not take or keep its lock (no connection, a
	// connection lost) or its work ended in an error; it tries again.
	Failing State = "failing"
)

// States lists every State, for metrics that show each.
var States = []State{Active, Standby, Failing}

// steadyAfter is how long a tenure must last to end a run of failures: a
// holder that takes its lock and fails at once each time is failing, not
// recovering.
const steadyAfter = 10 * time.Second

// Tenure is how one named holder is doing.
type Tenure struct {
	Name  string
	State State
	// Since is when the state began; for Failing, when the run of
	// failures began.
	Since time.Time
	// Failures counts failed tenures and attempts in a row, while Failing.
	Failures int
	// Err is the last failure, while Failing.
	Err error
}

// Tenures keeps how each long-lived holder of a lock in this process is
// doing, by name, for readiness and metrics: a process whose log readers
// cannot open their lock connections sends nothing while its other parts
// look healthy. Hold records into it when Options name a holder. A nil
// *Tenures records nothing.
type Tenures struct {
	mu sync.Mutex
	m  map[string]*holder
}

type holder struct {
	leftAt   *session // a session that lost touch holding the lock
	state    State
	since    time.Time // the state's start
	failures int       // in a row, kept through tenures that did not last
	failedAt time.Time // the start of that run of failures
	err      error
}

// List returns every holder's tenure, by name.
func (t *Tenures) List() []Tenure {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Tenure, 0, len(t.m))
	for name, h := range t.m {
		v := Tenure{Name: name, State: h.state, Since: h.since}
		if h.state == Failing {
			v.Since, v.Failures, v.Err = h.failedAt, h.failures, h.err
		}
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// set moves name's tenure to state at now; err is the failure for Failing.
func (t *Tenures) set(name string, state State, now time.Time, err error) {
	if t == nil || name == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[string]*holder{}
	}
	h := t.m[name]
	if h == nil {
		h = &holder{}
		t.m[name] = h
	}
	switch {
	case state == Failing && (h.state == Failing ||
		h.state == Active && h.failures > 0 && now.Sub(h.since) < steadyAfter):
		h.failures++ // the same run: taken and lost again at once, or not taken
	case state == Failing:
		h.failures, h.failedAt = 1, now
	case state == Standby:
		h.failures = 0 // the connection and the lock answer
	}
	// Active keeps the run of failures until the tenure proves steady.
	h.state, h.since, h.err = state, now, err
}

// Working records how a holder's work goes while it holds its lock, for
// work that retries on its own inside a tenure rather than ending it (a
// queue it cannot read): an error makes it Failing, counting each in a
// run, and the next success makes it Active again.
func (t *Tenures) Working(name string, err error) {
	if t == nil || name == "" {
		return
	}
	if err != nil {
		t.set(name, Failing, time.Now(), err)
		return
	}
	t.mu.Lock()
	failing := t.m[name] != nil && t.m[name].state == Failing
	t.mu.Unlock()
	if failing {
		t.set(name, Active, time.Now(), nil)
	}
}

// leave records the session name's last tenure left at the server (nil:
// none).
func (t *Tenures) leave(name string, s *session) {
	if t == nil || name == "" {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if h := t.m[name]; h != nil {
		h.leftAt = s
	}
}

// left returns the session name's last tenure left at the server, if any.
func (t *Tenures) left(name string) *session {
	if t == nil {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if h := t.m[name]; h != nil {
		return h.leftAt
	}
	return nil
}
