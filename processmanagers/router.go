// Package processmanagers runs the handlers that react to events: they issue
// commands (append events) or call providers, and hold no state of their own
// outside streams and read models.
//
// The plumbing is a Watermill message.Router. Each named handler gets its own
// message.Subscriber fed from the event store's $all subscription, starting
// after the handler's durable checkpoint (table processmanager_checkpoints;
// a handler without one starts at the beginning of the log, so handlers must
// be idempotent). Delivery is ordered and one event at a time per handler,
// at least once: the checkpoint advances only after an ack and is written in
// batches, so a crash redelivers, never skips.
//
// Every handler runs in one process at a time: its subscriber delivers only
// while it holds a PostgreSQL session advisory lock for the handler's name on
// a dedicated connection; other processes poll for the lock and take over
// within about a second of the holder going away.
//
// Middleware, outermost first:
//   - PoisonQueue: after the retries are exhausted the event is published,
//     with the reason, to the poison queue, then acked so the handler moves
//     on. The poison queue is watermill's PoisonQueue middleware with a
//     watermill-sql publisher on PostgreSQL (topic PoisonTopic, table
//     watermill_processmanager_poison from the migrations; the view
//     processmanager_poison shows it by handler, event and error). It was
//     chosen over a hand-written table because it is the library's own
//     mechanism and a watermill-sql subscriber can consume the topic to
//     re-drive events. Errors marked Transient, and failures caused by
//     shutdown, are never poisoned: the event is nacked and redelivered.
//   - Retry: a few quick retries with exponential backoff (WithRetry).
//   - Recoverer: a panic becomes an error, hence retried, then poisoned.
package processmanagers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/pglock"
)

// PoisonTopic is the watermill-sql topic of the poison queue; its table is
// watermill_processmanager_poison.
const PoisonTopic = "processmanager_poison"

// sourceTopic names the subscribed topic in logs and poison metadata.
const sourceTopic = "$all"

// Handler reacts to one event. Returning an error means "try again": the
// event is retried, then poisoned (see the package doc), unless the error is
// Transient. ctx ends when the router stops.
type Handler func(ctx context.Context, ev eventstore.RecordedEvent) error

// Router runs named handlers over the event log.
type Router struct {
	pool  *pgxpool.Pool
	store eventstore.Store
	log   *slog.Logger
	cfg   config

	mu       sync.Mutex
	handlers []namedHandler
	started  bool
	running  chan struct{}
}

type namedHandler struct {
	name string
	h    Handler
}

type config struct {
	retries         int
	retryInitial    time.Duration
	retryMax        time.Duration
	redeliverMin    time.Duration
	redeliverMax    time.Duration
	lockPoll        time.Duration
	checkpointEvery time.Duration
	closeTimeout    time.Duration
	tenures         *pglock.Tenures
	passing         func(error) bool
}

// Option configures a Router.
type Option func(*config)

// WithRetry sets how often a failing handler is retried in place before the
// event is poisoned, and the backoff between attempts (doubling from
// initial up to max). The default is 3 retries, 100 ms to 2 s.
func WithRetry(maxRetries int, initial, max time.Duration) Option {
	return func(c *config) { c.retries, c.retryInitial, c.retryMax = maxRetries, initial, max }
}

// WithRedeliveryBackoff sets the wait before a nacked event is delivered
// again (doubling from min up to max). The default is 100 ms to 10 s.
func WithRedeliveryBackoff(min, max time.Duration) Option {
	return func(c *config) { c.redeliverMin, c.redeliverMax = min, max }
}

// WithLockPollInterval sets how often a standby instance tries to take a
// handler's lock, and how often the holder checks its lock connection. The
// default is 1 s.
func WithLockPollInterval(d time.Duration) Option {
	return func(c *config) { c.lockPoll = d }
}

// WithCheckpointInterval sets how often acked positions are written. The
// default is 200 ms.
func WithCheckpointInterval(d time.Duration) Option {
	return func(c *config) { c.checkpointEvery = d }
}

// WithCloseTimeout bounds how long Run waits, after its context ends, for
// handlers still running. The default is 30 s.
func WithCloseTimeout(d time.Duration) Option {
	return func(c *config) { c.closeTimeout = d }
}

// WithTenures records how each handler's lock tenure is doing in t, under
// the handler's name.
func WithTenures(t *pglock.Tenures) Option {
	return func(c *config) { c.tenures = t }
}

// WithPassingErrors tells the errors of reading the log that pass by
// themselves (the database refusing the pool a connection for a while): a
// handler then reads again, keeping its lock and the connection that holds
// it, rather than giving that connection's slot up.
func WithPassingErrors(passing func(error) bool) Option {
	return func(c *config) { c.passing = passing }
}

// NewRouter returns a router whose handlers read events from store and keep
// checkpoints, locks and the poison queue in pool's database (migrated by
// database.Migrate). log may be nil.
func NewRouter(pool *pgxpool.Pool, store eventstore.Store, log *slog.Logger, opts ...Option) (*Router, error) {
	if pool == nil || store == nil {
		return nil, errors.New("processmanagers: pool and store are required")
	}
	if log == nil {
		log = slog.Default()
	}
	cfg := config{
		retries: 3, retryInitial: 100 * time.Millisecond, retryMax: 2 * time.Second,
		redeliverMin: 100 * time.Millisecond, redeliverMax: 10 * time.Second,
		lockPoll:        time.Second,
		checkpointEvery: 200 * time.Millisecond,
		closeTimeout:    30 * time.Second,
	}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.retries < 0 || cfg.retryInitial <= 0 || cfg.retryMax < cfg.retryInitial ||
		cfg.redeliverMin <= 0 || cfg.redeliverMax < cfg.redeliverMin ||
		cfg.lockPoll <= 0 || cfg.checkpointEvery <= 0 || cfg.closeTimeout <= 0 {
		return nil, errors.New("processmanagers: invalid option")
	}
	return &Router{pool: pool, store: store, log: log, cfg: cfg, running: make(chan struct{})}, nil
}

// Handle registers h under name, which keys its checkpoint and lock: keep a
// name stable across releases, or the handler starts again from the
// beginning of the log. Handle must be called before Run; it panics on a
// duplicate or empty name, or after Run.
func (r *Router) Handle(name string, h Handler) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started {
		panic("processmanagers: Handle called after Run")
	}
	if name == "" || h == nil {
		panic("processmanagers: Handle needs a name and a handler")
	}
	for _, nh := range r.handlers {
		if nh.name == name {
			panic(fmt.Sprintf("processmanagers: handler %q registered twice", name))
		}
	}
	r.handlers = append(r.handlers, namedHandler{name, h})
}

// Running is closed once Run has started every handler's subscriber (a
// handler may still be waiting for its lock).
func (r *Router) Running() <-chan struct{} { return r.running }

// Run delivers events to the handlers until ctx ends, then waits for
// running handlers (WithCloseTimeout), writes the checkpoints, releases the
// locks and returns nil. A Router runs once.
func (r *Router) Run(ctx context.Context) error {
	r.mu.Lock()
	if r.started {
		r.mu.Unlock()
		return errors.New("processmanagers: router already ran")
	}
	r.started = true
	handlers := append([]namedHandler(nil), r.handlers...)
	r.mu.Unlock()

	// Watermill's Info lines (handler added, subscriber stopped…) are
	// plumbing noise; keep them at Debug.
	wlog := watermill.NewSlogLoggerWithLevelMapping(r.log, map[slog.Level]slog.Level{slog.LevelInfo: slog.LevelDebug})
	wr, err := message.NewRouter(message.RouterConfig{CloseTimeout: r.cfg.closeTimeout}, wlog)
	if err != nil {
		return fmt.Errorf("processmanagers: %w", err)
	}
	pub, err := wsql.NewPublisher(wsql.BeginnerFromPgx(r.pool), wsql.PublisherConfig{
		SchemaAdapter: wsql.DefaultPostgreSQLSchema{}, // table from the migrations
	}, wlog)
	if err != nil {
		return fmt.Errorf("processmanagers: poison publisher: %w", err)
	}
	defer pub.Close()
	poison, err := middleware.PoisonQueueWithFilter(&poisonLogger{pub: pub, log: r.log}, PoisonTopic, shouldPoison)
	if err != nil {
		return fmt.Errorf("processmanagers: %w", err)
	}
	retry := middleware.Retry{
		MaxRetries:          r.cfg.retries,
		InitialInterval:     r.cfg.retryInitial,
		MaxInterval:         r.cfg.retryMax,
		Multiplier:          2,
		RandomizationFactor: 0.2,
		Logger:              wlog,
	}
	wr.AddMiddleware(poison, markShutdown, retry.Middleware, middleware.Recoverer)

	connCfg := r.pool.Config().ConnConfig
	subs := make([]*eventSubscriber, 0, len(handlers))
	for _, nh := range handlers {
		sub := newEventSubscriber(nh.name, r.store, connCfg, r.cfg, r.log)
		subs = append(subs, sub)
		wr.AddConsumerHandler(nh.name, sourceTopic, sub, adapt(nh.h))
	}

	finished := make(chan struct{})
	go func() {
		select {
		case <-wr.Running():
			close(r.running)
		case <-finished:
		}
	}()
	// Watermill stops by itself once every subscriber has closed its
	// channel, but not when there is no handler: close it on ctx too.
	stopRouter := context.AfterFunc(ctx, func() { wr.Close() })
	err = wr.Run(ctx)
	stopRouter()
	close(finished)
	if cerr := wr.Close(); err == nil && cerr != nil {
		err = cerr
	}
	for _, sub := range subs {
		sub.Close() // waits for the final checkpoint and the lock release
	}
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("processmanagers: %w", err)
	}
	return nil
}

// adapt turns a Handler into a watermill handler function.
func adapt(h Handler) message.NoPublishHandlerFunc {
	return func(msg *message.Message) error {
		ev, err := EventOf(msg)
		if err != nil {
			return err
		}
		return h(msg.Context(), ev)
	}
}

// transientError marks a failure that must be redelivered, never poisoned.
type transientError struct{ err error }

func (e *transientError) Error() string { return e.err.Error() }
func (e *transientError) Unwrap() error { return e.err }

// Transient marks err as temporary (a provider outage, a database hiccup):
// after the in-place retries the event is not poisoned but redelivered with
// backoff (WithRedeliveryBackoff) until the handler succeeds, holding back
// the handler's later events meanwhile. Transient(nil) is nil.
func Transient(err error) error {
	if err == nil {
		return nil
	}
	return &transientError{err}
}

// IsTransient reports whether err was marked by Transient.
func IsTransient(err error) bool {
	var t *transientError
	return errors.As(err, &t)
}

// shutdownError marks a failure that happened while the router was stopping
// (the message's context had ended): such an event is nacked, not poisoned.
type shutdownError struct{ err error }

func (e *shutdownError) Error() string { return "stopped: " + e.err.Error() }
func (e *shutdownError) Unwrap() error { return e.err }

func markShutdown(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		out, err := h(msg)
		if err != nil && msg.Context().Err() != nil {
			err = &shutdownError{err}
		}
		return out, err
	}
}

func shouldPoison(err error) bool {
	var s *shutdownError
	return !errors.As(err, &s) && !IsTransient(err)
}

// poisonLogger logs every event that goes to the poison queue.
type poisonLogger struct {
	pub message.Publisher
	log *slog.Logger
}

func (p *poisonLogger) Publish(topic string, msgs ...*message.Message) error {
	err := p.pub.Publish(topic, msgs...)
	for _, m := range msgs {
		attrs := []any{
			"process_manager", m.Metadata.Get(middleware.PoisonedHandlerKey),
			"event_id", m.UUID,
			"event_type", m.Metadata.Get(MetaType),
			"stream", m.Metadata.Get(MetaStream),
			"position", m.Metadata.Get(MetaPosition),
			"reason", m.Metadata.Get(middleware.ReasonForPoisonedKey),
		}
		if err != nil {
			p.log.Error("process manager gave up on event but could not poison it; it will be redelivered", append(attrs, "err", err)...)
		} else {
			p.log.Error("process manager gave up on event; moved to the poison queue", attrs...)
		}
	}
	return err
}

func (p *poisonLogger) Close() error { return p.pub.Close() }
