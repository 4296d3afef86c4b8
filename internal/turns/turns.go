// Package turns lets costly work take turns: one at a time per key (an
// account), and a few at a time in the process, served in the order asked.
// One account doing such work in a loop within its rate limit then holds
// at most one of the process's places, and another account's work waits
// at most for the work under way, never for that account's backlog.
package turns

import (
	"context"
	"sync"

	"golang.org/x/sync/semaphore"
)

// Turns hands out the turns of one kind of work.
type Turns struct {
	process *semaphore.Weighted // served in order
	mu      sync.Mutex
	keys    map[string]*keyTurn
	queued  int // waiting for the process's turn (tests watch it)
}

type keyTurn struct {
	turn  *semaphore.Weighted
	users int
}

// New returns Turns that let n pieces of work run at once in the process
// (at least one).
func New(n int) *Turns {
	return &Turns{process: semaphore.NewWeighted(int64(max(1, n))), keys: map[string]*keyTurn{}}
}

// Take waits for key's turn, then the process's, and answers the release.
// A wait that ctx ends gives its place up.
func (t *Turns) Take(ctx context.Context, key string) (release func(), err error) {
	t.mu.Lock()
	k := t.keys[key]
	if k == nil {
		k = &keyTurn{turn: semaphore.NewWeighted(1)}
		t.keys[key] = k
	}
	k.users++
	t.mu.Unlock()
	leave := func() {
		t.mu.Lock()
		if k.users--; k.users == 0 {
			delete(t.keys, key)
		}
		t.mu.Unlock()
	}
	if err := k.turn.Acquire(ctx, 1); err != nil {
		leave()
		return nil, err
	}
	t.mu.Lock()
	t.queued++
	t.mu.Unlock()
	err = t.process.Acquire(ctx, 1)
	t.mu.Lock()
	t.queued--
	t.mu.Unlock()
	if err != nil {
		k.turn.Release(1)
		leave()
		return nil, err
	}
	return func() {
		t.process.Release(1)
		k.turn.Release(1)
		leave()
	}, nil
}
