package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/pglock"
)

// Plan turns one event into the jobs it calls for (none for most events).
// It must be a function of the event and of what the reader's Prepare read
// for its batch: a crash makes the reader plan the event again, and only
// the plan of a committed batch counts, so planning it again, after other
// events or with a fresher read, must be harmless.
type Plan func(ctx context.Context, ev eventstore.RecordedEvent) ([]river.InsertManyParams, error)

// Prepare reads, once per batch and before any of its events is planned,
// what the plan needs to decide the whole batch (one query instead of one
// per event). An error is retried like a plan's: the batch is read again.
type Prepare func(ctx context.Context, batch []eventstore.RecordedEvent) error

// Reader is the one reader of the $all log for a process manager. It holds
// a PostgreSQL session advisory lock while it reads, so one process at a
// time reads for a name, and turns batches of events into River jobs,
// inserted in the same transaction that advances the process manager's
// checkpoint (table processmanager_checkpoints). Each event therefore
// becomes its jobs exactly once: a crash rolls back both the jobs and the
// checkpoint, and the batch is read again.
type Reader struct {
	name     string
	pool     *pgxpool.Pool
	store    eventstore.Store
	plan     Plan
	log      *slog.Logger
	inserter *river.Client[pgx.Tx]

	// Prepare, when set, is called before each batch is planned.
	Prepare Prepare
	// BatchSize bounds the events planned in one transaction.
	BatchSize int
	// LockPoll is how often a standby tries the lock, and how often the
	// holder checks its lock connection while idle.
	LockPoll time.Duration
	// Tenures, when set, records how the reader's lock tenure is doing,
	// under its name.
	Tenures *pglock.Tenures
	// Passing, when set, tells the errors of reading that pass by
	// themselves (the database refusing the pool a connection for a
	// while): the reader reads again, keeping its lock and the connection
	// that holds it, rather than giving that connection's slot up.
	Passing func(error) bool
	// Inherit, when set, is a LIKE pattern naming older checkpoints this
	// reader replaces: with no checkpoint of its own, the reader starts at
	// the lowest of them, and deletes them when it first saves its own.
	Inherit string
}

// NewReader returns the reader of the process manager name. log may be nil.
func NewReader(name string, pool *pgxpool.Pool, store eventstore.Store, plan Plan, log *slog.Logger) *Reader {
	if log == nil {
		log = slog.Default()
	}
	// An insert-only client: it works no queue, it only writes jobs.
	inserter, err := river.NewClient(riverpgxv5.New(pool), &river.Config{FetchCooldown: fetchCooldown, Logger: quietAbove(log)})
	if err != nil {
		panic(fmt.Sprintf("jobs: insert-only River client: %v", err)) // only on invalid static config
	}
	return &Reader{
		name: name, pool: pool, store: store, plan: plan,
		log: log.With("process_manager", name), inserter: inserter,
		BatchSize: 500, LockPoll: time.Second,
	}
}

// queryTimeout bounds every statement of the reader's own.
const queryTimeout = 10 * time.Second

// Run reads and plans until ctx ends; it returns nil then. Failures end
// the current lock tenure and a new one starts after a backoff, from the
// saved checkpoint.
func (r *Reader) Run(ctx context.Context) error {
	backoff := 100 * time.Millisecond
	for {
		progressed, err := r.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if progressed {
			backoff = 100 * time.Millisecond
		}
		r.log.Error("job reader stopped; restarting", "err", err, "retry_in", backoff)
		if !sleep(ctx, backoff) {
			return nil
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

// session is one lock tenure. It reports whether a batch was committed.
func (r *Reader) session(ctx context.Context) (bool, error) {
	progressed := false
	opts := pglock.Options{Every: r.LockPoll, Standby: func() {
		r.log.Info("job reader is active in another process; standing by")
	}, Name: r.name, Tenures: r.Tenures, Passing: r.Passing, Retrying: func(err error, in time.Duration) {
		r.log.Warn("job reader cannot read; reading again, still holding its lock", "err", err, "retry_in", in)
	}}
	err := pglock.Hold(ctx, r.pool.Config().ConnConfig, pglock.ProcessManager(r.name), opts, func(ctx context.Context, _ *pglock.Conn) error {
		p, err := r.read(ctx)
		progressed = progressed || p
		return err
	})
	if ctx.Err() != nil {
		return progressed, nil
	}
	return progressed, err
}

// read plans batches from the checkpoint while ctx, the lock's tenure,
// lasts. It reports whether a batch was committed.
func (r *Reader) read(ctx context.Context) (bool, error) {
	cp, err := r.load(ctx)
	if err != nil {
		return false, err
	}
	r.log.Info("job reader active", "from", cp.pos.String())

	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	sub, err := r.store.SubscribeAll(sctx, cp.pos)
	if err != nil {
		return false, fmt.Errorf("subscribe: %w", err)
	}
	defer sub.Close()
	r.Tenures.Working(r.name, nil) // reading again after a passing error
	events := make(chan eventstore.RecordedEvent, r.BatchSize)
	subErr := make(chan error, 1)
	go func() {
		defer close(events)
		for {
			ev, err := sub.Next(sctx)
			if err != nil {
				subErr <- err
				return
			}
			select {
			case events <- ev:
			case <-sctx.Done():
				return
			}
		}
	}()

	progressed := false
	batch := make([]eventstore.RecordedEvent, 0, r.BatchSize)
	for {
		select {
		case <-ctx.Done():
			return progressed, nil
		case ev, ok := <-events:
			if !ok {
				if ctx.Err() != nil {
					return progressed, nil
				}
				return progressed, fmt.Errorf("subscription: %w", <-subErr)
			}
			batch = append(batch[:0], ev)
		}
		// Take what else is already there: one transaction for many events.
	drain:
		for len(batch) < r.BatchSize {
			select {
			case ev, ok := <-events:
				if !ok {
					break drain
				}
				batch = append(batch, ev)
			default:
				break drain
			}
		}
		if err := r.commit(ctx, cp, batch); err != nil {
			return progressed, err
		}
		progressed = true
	}
}

// checkpoint is the reader's saved position; saved says whether a row
// exists for it.
type checkpoint struct {
	pos   eventstore.Position
	saved bool
}

func (r *Reader) load(ctx context.Context) (*checkpoint, error) {
	qctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	var commit, prepare int64
	err := r.pool.QueryRow(qctx, `SELECT commit_position, prepare_position
		FROM processmanager_checkpoints WHERE name = $1`, r.name).Scan(&commit, &prepare)
	if err == nil {
		return &checkpoint{pos: eventstore.Position{Commit: uint64(commit), Prepare: uint64(prepare)}, saved: true}, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("read checkpoint: %w", err)
	}
	if r.Inherit == "" {
		return &checkpoint{}, nil // a new process manager starts at the beginning of the log
	}
	err = r.pool.QueryRow(qctx, `SELECT commit_position, prepare_position
		FROM processmanager_checkpoints WHERE name LIKE $1 AND name <> $2
		ORDER BY commit_position, prepare_position LIMIT 1`, r.Inherit, r.name).Scan(&commit, &prepare)
	if errors.Is(err, pgx.ErrNoRows) {
		return &checkpoint{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read inherited checkpoints: %w", err)
	}
	pos := eventstore.Position{Commit: uint64(commit), Prepare: uint64(prepare)}
	r.log.Info("job reader takes over older checkpoints", "pattern", r.Inherit, "from", pos.String())
	return &checkpoint{pos: pos}, nil
}

// Malformed marks a plan's error as one no retry can cure: the event lacks
// what its type promises. The reader logs such an event and moves past it;
// any other plan error is retried, holding the reader at the event.
func Malformed(err error) error {
	if err == nil {
		return nil
	}
	return &malformedError{err}
}

type malformedError struct{ err error }

func (e *malformedError) Error() string { return "malformed event: " + e.err.Error() }
func (e *malformedError) Unwrap() error { return e.err }

// errCheckpointMoved means another reader wrote the checkpoint: this one
// has lost its lock and must stop before it plans anything twice.
var errCheckpointMoved = errors.New("checkpoint moved under the reader; another instance is reading")

// commit plans batch and, in one transaction, inserts its jobs and moves
// the checkpoint past it. The checkpoint only moves from where this reader
// left it, so even a reader that lost its lock unnoticed cannot insert a
// batch a second time.
func (r *Reader) commit(ctx context.Context, cp *checkpoint, batch []eventstore.RecordedEvent) error {
	if r.Prepare != nil {
		pctx, cancel := context.WithTimeout(ctx, queryTimeout)
		err := r.Prepare(pctx, batch)
		cancel()
		if err != nil {
			return fmt.Errorf("prepare batch at %s: %w", batch[0].Position, err)
		}
	}
	var params []river.InsertManyParams
	for _, ev := range batch {
		p, err := r.plan(ctx, ev)
		var bad *malformedError
		if errors.As(err, &bad) {
			// No retry can cure it, and retrying would stop every later
			// event: say so loudly and go on. The event stays in the log.
			r.log.Error("job reader skipped an event it cannot plan", "event_id", ev.ID, "event_type", ev.Type,
				"stream", ev.StreamID, "position", ev.Position.String(), "err", bad.err)
			continue
		}
		if err != nil {
			return fmt.Errorf("plan %s (%s at %s): %w", ev.ID, ev.Type, ev.Position, err)
		}
		params = append(params, p...)
	}
	next := batch[len(batch)-1].Position
	qctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	err := pgx.BeginFunc(qctx, r.pool, func(tx pgx.Tx) error {
		// The checkpoint and its jobs are lost or kept together, so a
		// crash before the disk has them replays the batch: no need to
		// wait for the flush.
		if _, err := tx.Exec(qctx, "SET LOCAL synchronous_commit = off"); err != nil {
			return err
		}
		if len(params) > 0 {
			if _, err := r.inserter.InsertManyTx(qctx, tx, params); err != nil {
				return fmt.Errorf("insert jobs: %w", err)
			}
		}
		var tag interface{ RowsAffected() int64 }
		var err error
		if cp.saved {
			tag, err = tx.Exec(qctx, `UPDATE processmanager_checkpoints
				SET commit_position = $2, prepare_position = $3, updated_at = now()
				WHERE name = $1 AND commit_position = $4 AND prepare_position = $5`,
				r.name, int64(next.Commit), int64(next.Prepare), int64(cp.pos.Commit), int64(cp.pos.Prepare))
		} else {
			tag, err = tx.Exec(qctx, `INSERT INTO processmanager_checkpoints (name, commit_position, prepare_position)
				VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING`, r.name, int64(next.Commit), int64(next.Prepare))
		}
		if err != nil {
			return fmt.Errorf("write checkpoint: %w", err)
		}
		if tag.RowsAffected() != 1 {
			return errCheckpointMoved
		}
		if !cp.saved && r.Inherit != "" {
			if _, err := tx.Exec(qctx, `DELETE FROM processmanager_checkpoints WHERE name LIKE $1 AND name <> $2`, r.Inherit, r.name); err != nil {
				return fmt.Errorf("drop inherited checkpoints: %w", err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	cp.pos, cp.saved = next, true
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
