package commands

import (
	"context"
	"runtime"
	"sync"

	"golang.org/x/sync/semaphore"
)

// keyTurns makes RSA keys in turns: a few at a time in the process, and one
// at a time per account. A DKIM key costs about 100 ms of a core, so an
// account adding and removing domains (or rotating keys) in a loop within
// its rate limit would otherwise take every core from everyone's sends;
// in turns it takes at most a share of a few, and another account's key
// waits at most for the keys being made.
type keyTurns struct {
	process *semaphore.Weighted // served in order
	mu      sync.Mutex
	account map[string]*accountTurn
	queued  int // waiting for the process's turn (tests watch it)
}

type accountTurn struct {
	turn  *semaphore.Weighted
	users int
}

func newKeyTurns() *keyTurns {
	return &keyTurns{process: semaphore.NewWeighted(int64(max(1, runtime.GOMAXPROCS(0)/4))), account: map[string]*accountTurn{}}
}

// take waits for account's turn to make a key, then the process's, and
// answers the release.
func (k *keyTurns) take(ctx context.Context, account string) (release func(), err error) {
	k.mu.Lock()
	a := k.account[account]
	if a == nil {
		a = &accountTurn{turn: semaphore.NewWeighted(1)}
		k.account[account] = a
	}
	a.users++
	k.mu.Unlock()
	leave := func() {
		k.mu.Lock()
		if a.users--; a.users == 0 {
			delete(k.account, account)
		}
		k.mu.Unlock()
	}
	if err := a.turn.Acquire(ctx, 1); err != nil {
		leave()
		return nil, err
	}
	k.mu.Lock()
	k.queued++
	k.mu.Unlock()
	err = k.process.Acquire(ctx, 1)
	k.mu.Lock()
	k.queued--
	k.mu.Unlock()
	if err != nil {
		a.turn.Release(1)
		leave()
		return nil, err
	}
	return func() {
		k.process.Release(1)
		a.turn.Release(1)
		leave()
	}, nil
}
