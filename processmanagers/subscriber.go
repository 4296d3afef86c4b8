package processmanagers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5"

	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/jobs"
)

// queryTimeout bounds every statement on a handler's lock connection. A
// statement that times out counts as a lost lock.
const queryTimeout = 5 * time.Second

// eventSubscriber is the watermill Subscriber of one named handler: it feeds
// the handler the $all log from the handler's checkpoint, one message at a
// time, while this process holds the handler's advisory lock.
//
// A session is: connect a dedicated connection, poll pg_try_advisory_lock
// until it is ours, read the checkpoint, subscribe to $all and deliver. The
// next event is sent only after the previous one was acked; a nack
// redelivers the same event after a backoff. Acked positions are written to
// the checkpoint over the lock connection every checkpointEvery and when the
// session ends, so only the lock holder writes it, and a crash loses at most
// the unwritten acks (redelivery, never a skip). A failed statement on the
// lock connection means the lock may be gone: delivery stops at once and a
// new session starts after a backoff.
type eventSubscriber struct {
	name    string
	store   eventstore.Store
	connCfg *pgx.ConnConfig
	cfg     config
	log     *slog.Logger

	mu      sync.Mutex
	started bool
	cancel  context.CancelFunc
	done    chan struct{}
}

var _ message.Subscriber = (*eventSubscriber)(nil)

func newEventSubscriber(name string, store eventstore.Store, connCfg *pgx.ConnConfig, cfg config, log *slog.Logger) *eventSubscriber {
	return &eventSubscriber{
		name: name, store: store, connCfg: connCfg, cfg: cfg,
		log:  log.With("process_manager", name),
		done: make(chan struct{}),
	}
}

// Subscribe starts delivering; topic is ignored (the source is always $all).
// It may be called once.
func (s *eventSubscriber) Subscribe(ctx context.Context, _ string) (<-chan *message.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return nil, fmt.Errorf("processmanagers: %s: already subscribed", s.name)
	}
	s.started = true
	ctx, s.cancel = context.WithCancel(ctx)
	out := make(chan *message.Message)
	go func() {
		defer close(s.done)
		defer close(out)
		s.run(ctx, out)
	}()
	return out, nil
}

// Close stops delivery and returns once the checkpoint is written and the
// lock released.
func (s *eventSubscriber) Close() error {
	s.mu.Lock()
	started, cancel := s.started, s.cancel
	s.mu.Unlock()
	if !started {
		return nil
	}
	cancel()
	<-s.done
	return nil
}

// run keeps a session going until ctx ends.
func (s *eventSubscriber) run(ctx context.Context, out chan<- *message.Message) {
	backoff := s.cfg.redeliverMin
	for {
		progressed, err := s.session(ctx, out)
		if ctx.Err() != nil {
			return
		}
		if progressed {
			backoff = s.cfg.redeliverMin
		}
		s.log.Error("process manager session ended; restarting", "err", err, "retry_in", backoff)
		if !sleep(ctx, backoff) {
			return
		}
		backoff = min(backoff*2, s.cfg.redeliverMax)
	}
}

// lockLostError marks a failure of the lock connection.
type lockLostError struct{ err error }

func (e *lockLostError) Error() string { return "advisory lock connection failed: " + e.err.Error() }
func (e *lockLostError) Unwrap() error { return e.err }

// session runs one lock tenure. It reports whether any event was acked, and
// why it ended (nil when ctx ended).
func (s *eventSubscriber) session(ctx context.Context, out chan<- *message.Message) (bool, error) {
	conn, err := pgx.ConnectConfig(ctx, s.connCfg)
	if err != nil {
		return false, fmt.Errorf("lock connection: %w", err)
	}
	defer func() {
		// Ending the session releases the advisory lock.
		cctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
		defer cancel()
		conn.Close(cctx)
	}()
	if err := s.acquire(ctx, conn); err != nil {
		return false, err
	}
	cp := &checkpoint{conn: conn, name: s.name}
	if err := cp.load(); err != nil {
		return false, err
	}
	s.log.Info("process manager active", "from", cp.acked.String())
	sub, err := s.store.SubscribeAll(ctx, cp.acked)
	if err != nil {
		return false, fmt.Errorf("subscribe: %w", err)
	}
	defer sub.Close()

	sctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	keeperDone := make(chan struct{})
	go func() {
		defer close(keeperDone)
		s.keep(sctx, cp, stop)
	}()

	progressed := false
	for sctx.Err() == nil {
		ev, err := sub.Next(sctx)
		if err != nil {
			if sctx.Err() == nil {
				stop(fmt.Errorf("subscription: %w", err))
			}
			break
		}
		if s.deliver(sctx, out, ev) {
			cp.advance(ev.Position)
			progressed = true
		}
	}
	stop(nil)
	<-keeperDone

	cause := context.Cause(sctx)
	var lost *lockLostError
	if !errors.As(cause, &lost) {
		if err := cp.flush(); err != nil {
			s.log.Error("process manager checkpoint not saved; events after it will be redelivered", "err", err)
		}
	}
	if ctx.Err() != nil {
		return progressed, nil
	}
	return progressed, cause
}

// acquire polls pg_try_advisory_lock until this session holds the handler's
// lock or ctx ends.
func (s *eventSubscriber) acquire(ctx context.Context, conn *pgx.Conn) error {
	key := jobs.LockKey(s.name) // the same key as a job reader of that name
	waiting := false
	for {
		var ok bool
		qctx, cancel := context.WithTimeout(ctx, queryTimeout)
		err := conn.QueryRow(qctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&ok)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("advisory lock: %w", err)
		}
		if ok {
			return nil
		}
		if !waiting {
			s.log.Info("process manager is active in another instance; standing by")
			waiting = true
		}
		if !sleep(ctx, s.cfg.lockPoll) {
			return ctx.Err()
		}
	}
}

// keep writes the checkpoint every checkpointEvery when it moved, and checks
// the lock connection at least every lockPoll otherwise. On failure it ends
// the session with a *lockLostError.
func (s *eventSubscriber) keep(ctx context.Context, cp *checkpoint, stop context.CancelCauseFunc) {
	tick := time.NewTicker(s.cfg.checkpointEvery)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var err error
		switch {
		case cp.dirty():
			err = cp.flush()
		case time.Since(last) >= s.cfg.lockPoll:
			err = cp.ping()
		default:
			continue
		}
		if err != nil {
			s.log.Error("process manager lost its lock connection; stopping delivery", "err", err)
			stop(&lockLostError{err})
			return
		}
		last = time.Now()
	}
}

// deliver sends ev until it is acked, redelivering after a growing backoff
// on nack. It reports false when ctx ended before an ack.
func (s *eventSubscriber) deliver(ctx context.Context, out chan<- *message.Message, ev eventstore.RecordedEvent) bool {
	wait := s.cfg.redeliverMin
	for {
		mctx, cancel := context.WithCancel(ctx)
		msg := newMessage(mctx, ev)
		select {
		case out <- msg:
		case <-ctx.Done():
			cancel()
			return false
		}
		acked := s.awaitAck(ctx, msg)
		cancel() // a message's context ends with its ack or nack
		if acked {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		s.log.Warn("process manager nacked event; redelivering", "event_id", ev.ID, "event_type", ev.Type, "stream", ev.StreamID, "retry_in", wait)
		if !sleep(ctx, wait) {
			return false
		}
		wait = min(wait*2, s.cfg.redeliverMax)
	}
}

// awaitAck waits for msg's ack (true) or nack (false). When ctx ends first
// the handler, whose context has ended too, gets closeTimeout to return, so
// the lock is not released while it still runs.
func (s *eventSubscriber) awaitAck(ctx context.Context, msg *message.Message) bool {
	select {
	case <-msg.Acked():
		return true
	case <-msg.Nacked():
		return false
	case <-ctx.Done():
	}
	t := time.NewTimer(s.cfg.closeTimeout)
	defer t.Stop()
	select {
	case <-msg.Acked():
		return true
	case <-msg.Nacked():
		return false
	case <-t.C:
		s.log.Warn("process manager handler still running after stop; giving up on it", "event_id", msg.UUID)
		return false
	}
}

// checkpoint is a handler's acked position and its stored copy. Only the
// session's owner of conn (the keeper, then session after it) writes it.
type checkpoint struct {
	conn *pgx.Conn
	name string

	mu    sync.Mutex
	acked eventstore.Position
	saved eventstore.Position
}

func (c *checkpoint) load() error {
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	var commit, prepare int64
	err := c.conn.QueryRow(ctx, `SELECT commit_position, prepare_position
		FROM processmanager_checkpoints WHERE name = $1`, c.name).Scan(&commit, &prepare)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // a new handler starts at the beginning of the log
	}
	if err != nil {
		return fmt.Errorf("read checkpoint: %w", err)
	}
	c.acked = eventstore.Position{Commit: uint64(commit), Prepare: uint64(prepare)}
	c.saved = c.acked
	return nil
}

func (c *checkpoint) advance(p eventstore.Position) {
	c.mu.Lock()
	c.acked = p
	c.mu.Unlock()
}

func (c *checkpoint) dirty() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.acked != c.saved
}

func (c *checkpoint) flush() error {
	c.mu.Lock()
	pos, dirty := c.acked, c.acked != c.saved
	c.mu.Unlock()
	if !dirty {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	_, err := c.conn.Exec(ctx, `INSERT INTO processmanager_checkpoints (name, commit_position, prepare_position, updated_at)
		VALUES ($1, $2, $3, now())
		ON CONFLICT (name) DO UPDATE SET commit_position = $2, prepare_position = $3, updated_at = now()`,
		c.name, int64(pos.Commit), int64(pos.Prepare))
	if err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	c.mu.Lock()
	c.saved = pos
	c.mu.Unlock()
	return nil
}

func (c *checkpoint) ping() error {
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	return c.conn.Ping(ctx)
}

// sleep waits d or until ctx ends; it reports whether d elapsed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
