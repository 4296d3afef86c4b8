package postgres

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailroom/mailroom/internal/eventstore"
)

// SubscribeAll delivers every event positioned after from. Next reads the log
// in batches (catch-up and live are the same loop); when there is nothing to
// read it waits for a notification from an append or for the poll interval,
// which covers events that become readable when an older, unrelated
// transaction ends (no notification marks that).
//
// All subscriptions of a Store share one LISTEN connection, held from the
// pool while at least one subscription is open, so many subscribers cannot
// exhaust a small pool.
func (s *Store) SubscribeAll(ctx context.Context, from eventstore.Position) (eventstore.Subscription, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sub := &subscription{
		store:  s,
		pos:    from,
		wake:   make(chan struct{}, 1),
		closed: make(chan struct{}),
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	s.subs[sub] = struct{}{}
	if s.listener == nil {
		lctx, cancel := context.WithCancel(context.Background())
		l := &listener{cancel: cancel, done: make(chan struct{})}
		s.listener = l
		go s.listen(lctx, l)
	}
	return sub, nil
}

// listener is the goroutine that turns notifications into wake-ups.
type listener struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// listen holds a connection on LISTEN until ctx ends, reconnecting after a
// failure; while it has none, subscriptions still poll.
func (s *Store) listen(ctx context.Context, l *listener) {
	defer close(l.done)
	for {
		if conn, err := s.pool.Acquire(ctx); err == nil {
			if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err == nil {
				s.wakeAll() // anything appended before LISTEN took effect
				for {
					if _, err := conn.Conn().WaitForNotification(ctx); err != nil {
						break
					}
					s.wakeAll()
				}
			}
			releaseListenConn(conn)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

func (s *Store) wakeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for sub := range s.subs {
		select {
		case sub.wake <- struct{}{}:
		default:
		}
	}
}

// releaseListenConn unlistens so the pooled connection stops collecting
// notifications; a connection that cannot is closed, and the pool drops it.
func releaseListenConn(conn *pgxpool.Conn) {
	c := conn.Conn()
	if !c.IsClosed() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := c.Exec(ctx, "UNLISTEN *"); err != nil {
			c.Close(ctx)
		}
		cancel()
	}
	conn.Release()
}

type subscription struct {
	store *Store
	pos   eventstore.Position // position of the last event handed out
	buf   []eventstore.RecordedEvent

	wake      chan struct{} // a token means "something may have been appended"
	closed    chan struct{}
	closeOnce sync.Once
}

// Next returns the next event. On a read error the position is unchanged, so
// Next may be called again.
func (sub *subscription) Next(ctx context.Context) (eventstore.RecordedEvent, error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		select {
		case <-sub.closed:
			return eventstore.RecordedEvent{}, ErrClosed
		default:
		}
		if len(sub.buf) > 0 {
			ev := sub.buf[0]
			sub.buf = sub.buf[1:]
			sub.pos = ev.Position
			return ev, nil
		}
		// Drop a pending token: the read below sees everything it announced.
		select {
		case <-sub.wake:
		default:
		}
		evs, err := sub.store.ReadAll(ctx, sub.pos, subscriptionBatch)
		if err != nil {
			return eventstore.RecordedEvent{}, err
		}
		if len(evs) > 0 {
			sub.buf = evs
			continue
		}
		if timer == nil {
			timer = time.NewTimer(sub.store.pollInterval)
		} else {
			timer.Reset(sub.store.pollInterval)
		}
		select {
		case <-sub.wake:
		case <-timer.C:
		case <-ctx.Done():
			return eventstore.RecordedEvent{}, ctx.Err()
		case <-sub.closed:
			return eventstore.RecordedEvent{}, ErrClosed
		}
	}
}

// Close stops the subscription; the last one to close gives the LISTEN
// connection back to the pool. It may be called concurrently with Next,
// which then returns ErrClosed.
func (sub *subscription) Close() error {
	sub.closeOnce.Do(func() {
		close(sub.closed)
		s := sub.store
		s.mu.Lock()
		delete(s.subs, sub)
		var l *listener
		if len(s.subs) == 0 {
			l, s.listener = s.listener, nil
		}
		s.mu.Unlock()
		if l != nil {
			l.cancel()
			<-l.done
		}
	})
	return nil
}
