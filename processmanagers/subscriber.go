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
	"github.com/mailroom/mailroom/internal/pglock"
)

// queryTimeout bounds every checkpoint statement on a handler's lock
// connection. A write that times out counts as a lost lock.
const queryTimeout = 5 * time.Second

// eventSubscriber is the watermill Subscriber of one named handler: it feeds
// the handler the $all log from the handler's checkpoint, one message at a
// time, while this process holds the handler's advisory lock.
//
// A session is: hold the handler's lock on a dedicated connection (polling
// for it while another process has it), read the checkpoint, subscribe to
// $all and deliver. The next event is sent only after the previous one was
// acked; a nack redelivers the same event after a backoff. Acked positions
// are written to the checkpoint over the lock connection every
// checkpointEvery and when the session ends, so only the lock holder writes
// it, and a crash loses at most the unwritten acks (redelivery, never a
// skip). A failed check or write on the lock connection means the lock may
// be gone: delivery stops at once and a new session starts after a backoff.
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

// session runs one lock tenure. It reports whether any event was acked, and
// why it ended (nil when ctx ended).
func (s *eventSubscriber) session(ctx context.Context, out chan<- *message.Message) (bool, error) {
	progressed := false
	opts := pglock.Options{Every: s.cfg.lockPoll, Standby: func() {
		s.log.Info("process manager is active in another instance; standing by")
	}, Name: s.name, Tenures: s.cfg.tenures, Passing: s.cfg.passing, Retrying: func(err error, in time.Duration) {
		s.log.Warn("process manager cannot read; reading again, still holding its lock", "err", err, "retry_in", in)
	}}
	// The same lock as a job reader of that name.
	err := pglock.Hold(ctx, s.connCfg, pglock.ProcessManager(s.name), opts, func(lctx context.Context, conn *pglock.Conn) error {
		p, err := s.deliverAll(lctx, conn, out)
		progressed = progressed || p
		return err
	})
	if ctx.Err() != nil {
		return progressed, nil
	}
	return progressed, err
}

// deliverAll delivers from the checkpoint while ctx, the lock's tenure,
// lasts. It reports whether any event was acked, and why it ended (nil when
// the tenure ended).
func (s *eventSubscriber) deliverAll(ctx context.Context, conn *pglock.Conn, out chan<- *message.Message) (bool, error) {
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
	s.cfg.tenures.Working(s.name, nil) // reading again after a passing error

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
	if !errors.Is(cause, pglock.ErrLost) {
		if err := cp.flush(); err != nil {
			s.log.Error("process manager checkpoint not saved; events after it will be redelivered", "err", err)
		}
	}
	if errors.Is(cause, context.Canceled) {
		return progressed, nil
	}
	return progressed, cause
}

// keep writes the checkpoint every checkpointEvery when it moved. A failed
// write means the lock may be gone: it ends the tenure with ErrLost.
func (s *eventSubscriber) keep(ctx context.Context, cp *checkpoint, stop context.CancelCauseFunc) {
	tick := time.NewTicker(s.cfg.checkpointEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := cp.flush(); err != nil {
			s.log.Error("process manager lost its lock connection; stopping delivery", "err", err)
			stop(fmt.Errorf("%w: %w", pglock.ErrLost, err))
			return
		}
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
	conn *pglock.Conn
	name string

	mu    sync.Mutex
	acked eventstore.Position
	saved eventstore.Position
}

func (c *checkpoint) load() error {
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	var commit, prepare int64
	err := c.conn.Do(func(conn *pgx.Conn) error {
		return conn.QueryRow(ctx, `SELECT commit_position, prepare_position
		FROM processmanager_checkpoints WHERE name = $1`, c.name).Scan(&commit, &prepare)
	})
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

func (c *checkpoint) flush() error {
	c.mu.Lock()
	pos, dirty := c.acked, c.acked != c.saved
	c.mu.Unlock()
	if !dirty {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), queryTimeout)
	defer cancel()
	err := c.conn.Do(func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, `INSERT INTO processmanager_checkpoints (name, commit_position, prepare_position, updated_at)
		VALUES ($1, $2, $3, now())
		ON CONFLICT (name) DO UPDATE SET commit_position = $2, prepare_position = $3, updated_at = now()`,
			c.name, int64(pos.Commit), int64(pos.Prepare))
		return err
	})
	if err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	c.mu.Lock()
	c.saved = pos
	c.mu.Unlock()
	return nil
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
