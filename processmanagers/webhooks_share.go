package processmanagers

import (
	"context"
	"time"
)

// share is an account's or an endpoint's places in this process.
type share struct {
	n     int           // places taken
	freed time.Time     // when one was last freed (or the first taken)
	took  time.Duration // how long an attempt holds its place, averaged; 0: none measured
}

// pace is how long s's places take to free: the usual time of an attempt,
// or longer while none has freed for longer.
func (s *share) pace(now time.Time) time.Duration {
	if s == nil {
		return 0
	}
	return max(s.took, now.Sub(s.freed))
}

// over reports whether the account's or the endpoint's share is full, and
// how long the full one's places take to free. w.mu is held.
func (w *Webhooks) over(accountID, endpointID string) (over bool, pace time.Duration) {
	now := time.Now()
	if a := w.accounts[accountID]; a != nil && a.n >= w.PerAccount {
		over, pace = true, a.pace(now)
	}
	if e := w.endpoints[endpointID]; e != nil && e.n >= w.PerEndpoint {
		over, pace = true, max(pace, e.pace(now))
	}
	return over, pace
}

// slow reports that an attempt's share is full and its places take longer
// than shareWait to free: its job had better take its place before reading
// anything, since it most likely finds none.
func (w *Webhooks) slow(accountID, endpointID string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	over, pace := w.over(accountID, endpointID)
	return over && pace > shareWait
}

// take claims a place for an attempt within its account's and endpoint's
// shares, waiting up to shareWait. At most an account's share of its
// attempts wait at once, so one account never holds more than twice its
// share of the process's slots. When it gets none, pace is how long the
// full share's places take to free (see busy).
func (w *Webhooks) take(ctx context.Context, accountID, endpointID string) (ok bool, pace time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.accounts == nil {
		w.accounts, w.endpoints, w.waiting = map[string]*share{}, map[string]*share{}, map[string]int{}
		w.freed = make(chan struct{})
	}
	var timeout <-chan time.Time
	for {
		over, p := w.over(accountID, endpointID)
		if !over {
			break
		}
		if w.waiting[accountID] >= w.PerAccount {
			return false, p
		}
		if timeout == nil {
			t := time.NewTimer(shareWait)
			defer t.Stop()
			timeout = t.C
		}
		freed := w.freed
		w.waiting[accountID]++
		w.mu.Unlock()
		expired := false
		select {
		case <-freed:
		case <-timeout:
			expired = true
		case <-ctx.Done():
			expired = true
		}
		w.mu.Lock()
		if w.waiting[accountID]--; w.waiting[accountID] <= 0 {
			delete(w.waiting, accountID)
		}
		if expired {
			_, p := w.over(accountID, endpointID)
			return false, p
		}
	}
	now := time.Now()
	hold(w.accounts, accountID, now)
	hold(w.endpoints, endpointID, now)
	return true, 0
}

// release frees a place take claimed; took is how long the attempt spent
// on the receiver (0: it made none).
func (w *Webhooks) release(accountID, endpointID string, took time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	free(w.accounts, accountID, now, took)
	free(w.endpoints, endpointID, now, took)
	close(w.freed) // wakes the waiters
	w.freed = make(chan struct{})
}

// hold counts a place taken in m[id].
func hold(m map[string]*share, id string, now time.Time) {
	if m[id] == nil {
		m[id] = &share{freed: now}
	}
	m[id].n++
}

// free counts a place of m[id] freed after took on the receiver (0: none).
func free(m map[string]*share, id string, now time.Time, took time.Duration) {
	s := m[id]
	if s == nil {
		return // never taken
	}
	if s.n--; s.n <= 0 {
		delete(m, id)
		return
	}
	s.freed = now
	switch {
	case took <= 0:
	case s.took == 0:
		s.took = took
	default:
		s.took = (3*s.took + took) / 4
	}
}
