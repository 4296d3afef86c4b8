package esdb

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"

	"github.com/mailroom/mailroom/internal/eventstore"
)

const (
	// subscriptionBuffer is how many events a subscription reads ahead of Next.
	subscriptionBuffer = 256
	// Resubscribing after a drop waits minBackoff, doubling up to maxBackoff
	// while attempts keep failing.
	minBackoff = 100 * time.Millisecond
	maxBackoff = 3 * time.Second
)

// SubscribeAll delivers every non-system event positioned after from:
// catch-up, then live, through a server-side filter that excludes system
// events. When the server drops the subscription or the connection, it
// resubscribes after the last event it received, so Next sees neither a gap
// nor a repeat. ctx only bounds the call itself; the subscription lives
// until Close.
func (s *Store) SubscribeAll(ctx context.Context, from eventstore.Position) (eventstore.Subscription, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.Background())
	sub := &subscription{
		store:    s,
		ctx:      sctx,
		cancel:   cancel,
		events:   make(chan eventstore.RecordedEvent, subscriptionBuffer),
		finished: make(chan struct{}),
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		cancel()
		return nil, ErrClosed
	}
	s.subs[sub] = struct{}{}
	s.mu.Unlock()
	go sub.run(from)
	return sub, nil
}

type subscription struct {
	store  *Store
	ctx    context.Context // ends at Close
	cancel context.CancelFunc

	events   chan eventstore.RecordedEvent // closed when run ends
	err      error                         // why run ended; set before events is closed
	finished chan struct{}                 // closed when run has returned
	once     sync.Once
}

// Next returns the next event, blocking until one arrives, ctx ends, the
// subscription is closed, or it fails with an error retrying cannot cure
// (such as access denied).
func (sub *subscription) Next(ctx context.Context) (eventstore.RecordedEvent, error) {
	if sub.ctx.Err() != nil {
		return eventstore.RecordedEvent{}, ErrClosed
	}
	select {
	case ev, ok := <-sub.events:
		if !ok {
			if sub.err != nil {
				return eventstore.RecordedEvent{}, sub.err
			}
			return eventstore.RecordedEvent{}, ErrClosed
		}
		if sub.ctx.Err() != nil {
			return eventstore.RecordedEvent{}, ErrClosed
		}
		return ev, nil
	case <-sub.ctx.Done():
		return eventstore.RecordedEvent{}, ErrClosed
	case <-ctx.Done():
		return eventstore.RecordedEvent{}, ctx.Err()
	}
}

// Close ends the subscription and waits for its reader to stop.
func (sub *subscription) Close() error {
	sub.once.Do(func() {
		sub.cancel()
		<-sub.finished
		sub.store.mu.Lock()
		delete(sub.store.subs, sub)
		sub.store.mu.Unlock()
	})
	return nil
}

// run subscribes, pumps events into sub.events, and resubscribes from the
// last event pumped whenever the server side ends, until Close or a
// permanent error.
func (sub *subscription) run(from eventstore.Position) {
	defer close(sub.finished)
	defer close(sub.events)
	last := from
	delay := minBackoff
	for {
		esub, err := sub.store.subscribe(sub.ctx, last)
		if err == nil {
			var progressed bool
			progressed, err = sub.pump(esub, &last)
			esub.Close()
			if progressed {
				delay = minBackoff
			}
		}
		if sub.ctx.Err() != nil || errors.Is(err, ErrClosed) {
			return
		}
		if permanent(err) {
			sub.err = err
			return
		}
		sub.store.log.Info("subscription to $all dropped; resubscribing", "after", last.String(), "in", delay.String(), "err", err)
		select {
		case <-sub.ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, maxBackoff)
	}
}

// pump moves events from esub to sub.events until esub drops. progressed
// tells whether the server sent anything after the confirmation.
func (sub *subscription) pump(esub *esdb.Subscription, last *eventstore.Position) (progressed bool, err error) {
	for {
		ev := esub.Recv()
		switch {
		case ev.SubscriptionDropped != nil:
			return progressed, ev.SubscriptionDropped.Error
		case ev.EventAppeared != nil:
			progressed = true
			e := ev.EventAppeared.OriginalEvent()
			if e == nil || isSystem(e) {
				continue
			}
			re := recorded(e)
			if !last.Less(re.Position) {
				continue // at or before where we (re)started
			}
			select {
			case sub.events <- re:
				*last = re.Position
			case <-sub.ctx.Done():
				return progressed, sub.ctx.Err()
			}
		default: // caught up, fell behind, checkpoint
			progressed = true
		}
	}
}

// subscribe opens one server subscription after from.
func (s *Store) subscribe(ctx context.Context, from eventstore.Position) (*esdb.Subscription, error) {
	var start esdb.AllPosition = esdb.Start{}
	if from != eventstore.Start {
		start = esdb.Position{Commit: from.Commit, Prepare: from.Prepare}
	}
	return call(ctx, s, func(ctx context.Context, c *esdb.Client) (*esdb.Subscription, error) {
		return c.SubscribeToAll(ctx, esdb.SubscribeToAllOptions{
			From:   start,
			Filter: esdb.ExcludeSystemEventsFilter(),
		})
	})
}
