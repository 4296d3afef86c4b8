package postgres

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailroom/mailroom/internal/eventstore"
)

// SubscribeAll delivers every event positioned after from. It holds one pool
// connection for LISTEN until the subscription is closed. Next reads the log
// in batches (catch-up and live are the same loop); when there is nothing
// to read it waits for a notification from an append or for the poll
// interval, which covers events that become readable when an older,
// unrelated transaction ends.
func (s *Store) SubscribeAll(ctx context.Context, from eventstore.Position) (eventstore.Subscription, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("eventstore/postgres: subscribe: %w", err)
	}
	if _, err := conn.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		conn.Release()
		return nil, fmt.Errorf("eventstore/postgres: subscribe: listen: %w", err)
	}
	lctx, cancel := context.WithCancel(context.Background())
	sub := &subscription{
		store:      s,
		pos:        from,
		conn:       conn,
		wake:       make(chan struct{}, 1),
		closed:     make(chan struct{}),
		cancel:     cancel,
		listenDone: make(chan struct{}),
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		cancel()
		close(sub.listenDone)
		sub.releaseConn()
		return nil, ErrClosed
	}
	s.subs[sub] = struct{}{}
	s.mu.Unlock()
	go sub.listen(lctx)
	return sub, nil
}

type subscription struct {
	store *Store
	pos   eventstore.Position // position of the last event handed out
	buf   []eventstore.RecordedEvent

	conn       *pgxpool.Conn
	wake       chan struct{} // a token means "something may have been appended"
	closed     chan struct{}
	closeOnce  sync.Once
	cancel     context.CancelFunc
	listenDone chan struct{}
}

// listen turns notifications into wake tokens. If the connection fails the
// subscription carries on with polling alone.
func (sub *subscription) listen(ctx context.Context) {
	defer close(sub.listenDone)
	c := sub.conn.Conn()
	for {
		if _, err := c.WaitForNotification(ctx); err != nil {
			return
		}
		select {
		case sub.wake <- struct{}{}:
		default:
		}
	}
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

// Close stops the subscription and gives its connection back to the pool.
// It may be called concurrently with Next, which then returns ErrClosed.
func (sub *subscription) Close() error {
	sub.closeOnce.Do(func() {
		close(sub.closed)
		sub.cancel()
		<-sub.listenDone
		sub.releaseConn()
		sub.store.mu.Lock()
		delete(sub.store.subs, sub)
		sub.store.mu.Unlock()
	})
	return nil
}

// releaseConn unlistens so the pooled connection stops collecting
// notifications; a connection that cannot is closed, and the pool drops it.
func (sub *subscription) releaseConn() {
	c := sub.conn.Conn()
	if !c.IsClosed() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := c.Exec(ctx, "UNLISTEN *"); err != nil {
			c.Close(ctx)
		}
		cancel()
	}
	sub.conn.Release()
}
