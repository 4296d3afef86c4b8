package projections

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailroom/mailroom/internal/eventstore"
)

// Waiter lets a write request wait until the read models it affects have
// caught up with its events (read-your-writes). Checkpoints committed in this
// process are heard at once; those of other processes are polled.
type Waiter struct {
	pool    *pgxpool.Pool
	timeout time.Duration

	mu      sync.Mutex
	known   map[string]eventstore.Position
	changed chan struct{} // closed and replaced on every advance

	// One poll at a time serves every waiter: many concurrent writes must
	// not each query the checkpoints every tick.
	polling  bool
	polledAt time.Time
}

// pollEvery is how often checkpoints of other processes are read while
// anyone waits.
const pollEvery = 25 * time.Millisecond

// NewWaiter returns a waiter that gives up after timeout.
func NewWaiter(pool *pgxpool.Pool, timeout time.Duration) *Waiter {
	return &Waiter{pool: pool, timeout: timeout, known: map[string]eventstore.Position{}, changed: make(chan struct{})}
}

func (w *Waiter) advanced(name string, pos eventstore.Position) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.known[name].Less(pos) {
		return
	}
	w.known[name] = pos
	close(w.changed)
	w.changed = make(chan struct{})
}

// WaitFor blocks until every named projector has passed pos, or the timeout
// or ctx ends. It reports whether they caught up; a write that times out has
// still happened, so callers answer success either way.
func (w *Waiter) WaitFor(ctx context.Context, pos eventstore.Position, names ...string) bool {
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	poll := time.NewTicker(pollEvery)
	defer poll.Stop()
	for {
		w.mu.Lock()
		done, changed := w.reached(pos, names), w.changed
		w.mu.Unlock()
		if done {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-changed:
		case <-poll.C:
			w.refresh(ctx)
		}
	}
}

func (w *Waiter) reached(pos eventstore.Position, names []string) bool {
	for _, n := range names {
		if w.known[n].Less(pos) {
			return false
		}
	}
	return true
}

// refresh reads checkpoints written by other processes, unless another
// waiter is reading them or just did (it wakes everyone when they advance).
func (w *Waiter) refresh(ctx context.Context) {
	w.mu.Lock()
	if w.polling || time.Since(w.polledAt) < pollEvery {
		w.mu.Unlock()
		return
	}
	w.polling = true
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.polling, w.polledAt = false, time.Now()
		w.mu.Unlock()
	}()
	rows, err := w.pool.Query(ctx, `SELECT name, commit_position, prepare_position FROM projection_checkpoints`)
	if err != nil {
		return
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var c, p int64
		if rows.Scan(&name, &c, &p) == nil {
			w.advanced(name, eventstore.Position{Commit: uint64(c), Prepare: uint64(p)})
		}
	}
}
