package processmanagers

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
)

// Room bounds the attachment bytes of the large emails a worker process
// holds at once, shared fairly between accounts. Emails wait for room in
// turns, so one that needs all of it is not passed over for ever by smaller
// ones; but an account waits with one email at a time, and while other
// accounts ask for room too, an account holding its share or more waits
// with none: its waiting email steps out of the line, so the others' emails
// are not stuck behind it until its downloads end.
type Room struct {
	bytes   *semaphore.Weighted
	size    int64
	mu      sync.Mutex
	holding map[string]int64              // bytes each account holds
	waiting map[string]context.CancelFunc // the one email of each account waiting
	asked   map[string]time.Time          // when each account last asked
	wait    time.Duration                 // the longest an email waits
	now     func() time.Time
}

// NewRoom makes room for size bytes.
func NewRoom(size int64) *Room {
	return &Room{
		bytes: semaphore.NewWeighted(size), size: size,
		holding: map[string]int64{}, waiting: map[string]context.CancelFunc{}, asked: map[string]time.Time{},
		wait: roomWait, now: time.Now,
	}
}

// roomWait bounds how long an email waits for room before its job goes
// back to the queue.
const roomWait = 10 * time.Second

// askedLately is how long an account that asked for room counts as wanting
// it: longer than a job's snooze between two asks.
const askedLately = 2 * time.Second

// Take waits for n bytes of room for account's email (all of it, when n is
// more), or answers false when the email must try again later: the account
// is already waiting with another email or holds its share, or no room
// came in time.
func (r *Room) Take(ctx context.Context, account string, n int64) (*Lease, bool) {
	n = min(n, r.size)
	r.mu.Lock()
	wait := r.wait
	now := r.now()
	r.asked[account] = now
	share := r.share(now)
	if r.waiting[account] != nil || r.holding[account] >= share {
		r.mu.Unlock()
		return nil, false
	}
	for other, stepOut := range r.waiting {
		if r.holding[other] >= share {
			stepOut()
		}
	}
	waitCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	r.waiting[account] = cancel
	r.mu.Unlock()

	err := r.bytes.Acquire(waitCtx, n)
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.waiting, account)
	r.asked[account] = r.now() // still wanting room until its job asks again
	if err != nil {
		return nil, false
	}
	r.holding[account] += n
	return &Lease{room: r, account: account, n: n}, true
}

// A Lease is room an email holds, used by one goroutine. A nil Lease holds
// nothing.
type Lease struct {
	room    *Room
	account string
	n       int64
}

// ShrinkTo keeps at most n bytes and gives the rest back before the end:
// the email's downloads turned out smaller than the most they could be.
func (l *Lease) ShrinkTo(n int64) {
	if l == nil || n >= l.n {
		return
	}
	by := l.n - max(n, 0)
	l.n -= by
	l.room.give(l.account, by)
}

// Release gives all of it back.
func (l *Lease) Release() { l.ShrinkTo(0) }

func (r *Room) give(account string, n int64) {
	r.mu.Lock()
	if r.holding[account] -= n; r.holding[account] <= 0 {
		delete(r.holding, account)
	}
	r.mu.Unlock()
	r.bytes.Release(n)
}

// share is each account's part of the room while the accounts that hold,
// wait for or lately asked for room all want it. r.mu is held.
func (r *Room) share(now time.Time) int64 {
	for account, at := range r.asked {
		if now.Sub(at) > askedLately && r.holding[account] == 0 && r.waiting[account] == nil {
			delete(r.asked, account)
		}
	}
	return r.size / int64(max(len(r.asked), 1))
}
