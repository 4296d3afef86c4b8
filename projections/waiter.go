package projections

import (
	"context"
	"fmt"
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
	known   map[Name]eventstore.Position
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
	return &Waiter{pool: pool, timeout: timeout, known: map[Name]eventstore.Position{}, changed: make(chan struct{})}
}

func (w *Waiter) advanced(name Name, pos eventstore.Position) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.known[name].Less(pos) {
		return
	}
	w.known[name] = pos
	close(w.changed)
	w.changed = make(chan struct{})
}

// LagError means read models had not caught up with a write when the
// waiter's timeout ran out. The write has still happened.
type LagError struct {
	Behind  []Name // the projectors that had not
	Timeout time.Duration
}

func (e *LagError) Error() string {
	return fmt.Sprintf("read models %v did not show the write within %s", e.Behind, e.Timeout)
}

// WaitFor blocks until every named projector has passed pos. It returns a
// *LagError when the waiter's timeout runs out first, and ctx's error when
// ctx ends first.
func (w *Waiter) WaitFor(ctx context.Context, pos eventstore.Position, names ...Name) error {
	wctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	poll := time.NewTicker(pollEvery)
	defer poll.Stop()
	for {
		w.mu.Lock()
		behind, changed := w.behind(pos, names), w.changed
		w.mu.Unlock()
		if len(behind) == 0 {
			return nil
		}
		select {
		case <-wctx.Done():
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return &LagError{Behind: behind, Timeout: w.timeout}
		case <-changed:
		case <-poll.C:
			w.refresh(wctx)
		}
	}
}

// behind lists the named projectors that have not passed pos.
func (w *Waiter) behind(pos eventstore.Position, names []Name) []Name {
	var late []Name
	for _, n := range names {
		if w.known[n].Less(pos) {
			late = append(late, n)
		}
	}
	return late
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
			w.advanced(Name(name), eventstore.Position{Commit: uint64(c), Prepare: uint64(p)})
		}
	}
}
