package projections

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/pglock"
)

// Runner keeps projectors up to date with the event log.
type Runner struct {
	pool       *pgxpool.Pool
	store      eventstore.Store
	projectors []Projector
	log        *slog.Logger
	batchSize  int
	waiter     *Waiter

	mu    sync.Mutex
	wake  []chan struct{}
	known map[Name]known // by projector name
}

// NewRunner returns a runner for projectors. waiter, when not nil, hears of
// every checkpoint the runner commits.
func NewRunner(pool *pgxpool.Pool, store eventstore.Store, waiter *Waiter, log *slog.Logger, projectors ...Projector) *Runner {
	return &Runner{pool: pool, store: store, projectors: projectors, log: log, batchSize: 500, waiter: waiter}
}

// Projectors returns the runner's projectors.
func (r *Runner) Projectors() []Projector { return r.projectors }

// Projector returns the projector called name, or nil.
func (r *Runner) Projector(name Name) Projector {
	for _, p := range r.projectors {
		if p.Name() == name {
			return p
		}
	}
	return nil
}

// ErrNewerRelease means a newer release has rebuilt a projection to a
// version this code does not know: projecting into its tables, or
// rebuilding them back, would undo its work.
var ErrNewerRelease = errors.New("projection kept by a newer release")

func newerRelease(p Projector, stored int) error {
	return fmt.Errorf("%w: %s is at version %d, this release writes version %d; this process leaves it to the newer release",
		ErrNewerRelease, p.Name(), stored, p.Version())
}

// AwaitRebuilds waits, for a process that does not project, until no read
// model is at a version older than this release's: a release that changes
// a projection's version leaves its rebuild to its own projections
// processes. Were any process to rebuild it, the older release's projectors
// would stop writing it at once, and until a projections process of the new
// release ran nobody would (a removed domain would go on sending). So an
// api or workers process of the new release started first waits, not
// ready, and says what it waits for.
func (r *Runner) AwaitRebuilds(ctx context.Context, poll time.Duration) error {
	var said time.Time
	for {
		var behind []string
		for _, p := range r.projectors {
			st, err := r.checkpoint(ctx, r.pool, string(p.Name()))
			if err != nil {
				return err
			}
			if st.exists && st.version < p.Version() {
				behind = append(behind, fmt.Sprintf("%s (at version %d, this release reads %d)", p.Name(), st.version, p.Version()))
			}
		}
		if len(behind) == 0 {
			return nil
		}
		if time.Since(said) >= 30*time.Second {
			r.log.Warn("waiting for a projections process of this release to rebuild read models; start those first",
				"projections", strings.Join(behind, ", "))
			said = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(poll):
		}
	}
}

// Prepare creates missing read-model tables and rebuilds every projector
// whose stored version is older than its code. One a newer release keeps
// is an error.
func (r *Runner) Prepare(ctx context.Context) error {
	for _, p := range r.projectors {
		stale, err := r.stale(ctx, p, true)
		if err != nil {
			return err
		}
		if !stale {
			if err := r.ensureSchema(ctx, p); err != nil {
				return fmt.Errorf("projection %s schema: %w", p.Name(), err)
			}
			continue
		}
		// Processes starting together all find it stale. The first to hold
		// the rebuild lock rebuilds it; the others, looking again once they
		// hold it, find it done.
		err = pglock.Hold(ctx, r.pool.Config().ConnConfig, pglock.Rebuild(string(p.Name())), r.waitingToRebuild(p),
			func(ctx context.Context, lock *pglock.Conn) error {
				if stale, err := r.stale(ctx, p, false); err != nil || !stale {
					return err
				}
				return r.rebuild(ctx, lock, p, nil)
			})
		if err != nil {
			return err
		}
	}
	return nil
}

// stale reports whether p must be rebuilt before it runs: it has no
// checkpoint, an older version, or tables missing. One a newer release
// keeps is an error. With tell, it says why it must be.
func (r *Runner) stale(ctx context.Context, p Projector, tell bool) (bool, error) {
	st, err := r.checkpoint(ctx, r.pool, string(p.Name()))
	if err != nil {
		return false, err
	}
	if st.exists && st.version > p.Version() {
		return false, newerRelease(p, st.version)
	}
	if !st.exists {
		return true, nil
	}
	if st.version != p.Version() {
		if tell { // warn, not info: operator commands, quiet below warn, say so too, and the start takes longer
			r.log.Warn("projection version changed; rebuilding", "projection", p.Name(), "from", st.version, "to", p.Version())
		}
		return true, nil
	}
	_, missing, err := liveTables(ctx, r.pool, p)
	if err != nil {
		return false, err
	}
	if len(missing) > 0 && tell {
		// Created empty, a dropped table would read as a model with
		// nothing in it (no domains, no deliveries) from a checkpoint that
		// says everything is applied.
		r.log.Warn("projection tables missing; rebuilding", "projection", p.Name(), "tables", missing)
	}
	return len(missing) > 0, nil
}

// liveTables splits p's tables into those present in the live schema and
// those missing from it.
func liveTables(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, p Projector) (present, missing []string, err error) {
	for _, tb := range p.Tables() {
		var exists bool
		if err := q.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", "public."+pgx.Identifier{tb}.Sanitize()).Scan(&exists); err != nil {
			return nil, nil, fmt.Errorf("projection %s: %w", p.Name(), err)
		}
		if exists {
			present = append(present, tb)
		} else {
			missing = append(missing, tb)
		}
	}
	return present, missing, nil
}

// ensureSchema runs p's idempotent DDL over its live tables, under the
// projector's lock: processes starting together would otherwise each build
// an index one of them just added, and all but the first fail on its name.
// Its CREATE INDEX IF NOT EXISTS locks each table even when the index is
// there, so beside other work on the same tables it can meet a deadlock or
// a lock timeout: then it gives way and runs again.
func (r *Runner) ensureSchema(ctx context.Context, p Projector) error {
	for attempt := 1; ; attempt++ {
		err := r.inTx(ctx, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(pglock.Projection(string(p.Name())))); err != nil {
				return err
			}
			ext, err := installedExtensions(ctx, tx)
			if err != nil {
				return err
			}
			_, err = tx.Exec(ctx, ddl(p, ext))
			return err
		})
		if err == nil || !isLockConflict(err) || attempt == 50 {
			return err
		}
		if err := giveWay(ctx); err != nil {
			return err
		}
	}
}

// Run keeps every projector caught up until ctx ends. New events are noticed
// through a subscription; a periodic poll covers anything it misses. A lost
// subscription (the database dropped its connection) is taken up again:
// without it every write would wait for the poll.
func (r *Runner) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	for _, p := range r.projectors {
		wake := make(chan struct{}, 1)
		r.mu.Lock()
		r.wake = append(r.wake, wake)
		r.mu.Unlock()
		wg.Go(func() { r.follow(ctx, p, wake) })
	}
	backoff := 100 * time.Millisecond
	var lastLog time.Time
	for {
		woke, err := r.wakeOnEvents(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if woke {
			backoff = 100 * time.Millisecond
		}
		if time.Since(lastLog) >= failureLogEvery {
			r.log.Warn("projections: wake-up subscription lost; subscribing again", "err", err, "retry_in", backoff)
			lastLog = time.Now()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, time.Second) // back soon after the database is
	}
}

// wakeOnEvents subscribes from the lowest checkpoint and wakes every
// projector at each new event, until the subscription fails; it reports
// whether any event came.
func (r *Runner) wakeOnEvents(ctx context.Context) (bool, error) {
	sub, err := r.store.SubscribeAll(ctx, r.head(ctx))
	if err != nil {
		return false, fmt.Errorf("projections: subscribe: %w", err)
	}
	defer sub.Close()
	r.wakeAll() // whatever came while there was no subscription
	woke := false
	for {
		if _, err := sub.Next(ctx); err != nil {
			return woke, fmt.Errorf("projections: subscription: %w", err)
		}
		woke = true
		r.wakeAll()
	}
}

func (r *Runner) wakeAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range r.wake {
		select {
		case w <- struct{}{}:
		default:
		}
	}
}

// head is where the wake-up subscription starts: the lowest checkpoint, so
// nothing committed since any projector last ran goes unnoticed.
func (r *Runner) head(ctx context.Context) eventstore.Position {
	var low *eventstore.Position
	for _, p := range r.projectors {
		st, err := r.checkpoint(ctx, r.pool, string(p.Name()))
		if err != nil {
			return eventstore.Start
		}
		if low == nil || st.pos.Less(*low) {
			pos := st.pos
			low = &pos
		}
	}
	if low == nil {
		return eventstore.Start
	}
	return *low
}

func (r *Runner) follow(ctx context.Context, p Projector, wake <-chan struct{}) {
	poll := time.NewTicker(time.Second)
	defer poll.Stop()
	backoff := 100 * time.Millisecond
	var failingSince, lastLog time.Time
	for {
		if _, err := r.CatchUp(ctx, p); err != nil {
			if ctx.Err() != nil {
				return
			}
			if failingSince.IsZero() {
				failingSince = time.Now()
			}
			if time.Since(lastLog) >= failureLogEvery {
				r.log.Error("projection failed; retrying", "projection", p.Name(), "err", err,
					"failing_for", time.Since(failingSince).Round(time.Second), "retry_in", backoff)
				lastLog = time.Now()
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			// No longer than the poll: once the database is back, writes
			// waiting to be visible must not wait out a long backoff.
			backoff = min(backoff*2, time.Second)
			continue
		}
		failingSince, lastLog = time.Time{}, time.Time{}
		backoff = 100 * time.Millisecond
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-poll.C:
		}
	}
}

// failureLogEvery is how often a projector that keeps failing says so.
const failureLogEvery = 30 * time.Second

// CatchUp applies batches until the projector has seen every visible event,
// and returns its position.
func (r *Runner) CatchUp(ctx context.Context, p Projector) (eventstore.Position, error) {
	for {
		pos, n, err := r.step(ctx, p)
		if err != nil {
			return pos, err
		}
		if n < r.batchSize {
			return pos, nil
		}
	}
}

// step applies one batch in one transaction under the projector's advisory
// lock. The checkpoint is read inside the lock, so a rebuild's swap or
// another instance's progress is always respected. A batch refused because
// of one event's data is applied again event by event, quarantining the
// streams whose events fail; any other failure is recorded where every
// process can see it, and the caller retries.
func (r *Runner) step(ctx context.Context, p Projector) (eventstore.Position, int, error) {
	if pos, n, err := r.stepKnown(ctx, p); err == nil {
		return pos, n, nil
	}
	r.forget(p.Name()) // whatever went wrong, the ordinary step finds out
	pos, n, err := r.stepTx(ctx, p, false)
	if err != nil && isDataError(err) && ctx.Err() == nil {
		pos, n, err = r.stepTx(ctx, p, true)
	}
	if err != nil && ctx.Err() == nil && !errors.Is(err, ErrNewerRelease) {
		r.recordFailure(string(p.Name()), err)
	}
	return pos, n, err
}

func (r *Runner) stepTx(ctx context.Context, p Projector, isolate bool) (eventstore.Position, int, error) {
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return eventstore.Position{}, 0, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	st, err := r.lockCheckpoint(ctx, tx, p)
	if err != nil {
		return eventstore.Position{}, 0, err
	}
	if st.version > p.Version() {
		// Rebuilt by a newer release while this process ran (a rolling
		// upgrade): its failure is not recorded, the newer one is healthy.
		return st.pos, 0, newerRelease(p, st.version)
	}
	clean := st.exists && !st.failing && len(st.quarantined) == 0
	res, err := r.applyBatch(ctx, tx, p, st.pos, target{checkpoint: string(p.Name()), version: p.Version(), skip: st.quarantined}, isolate)
	if err != nil {
		return st.pos, 0, err
	}
	if res.n == 0 {
		if st.failing {
			// Nothing new, but the cause of the last failure is gone.
			if _, err := tx.Exec(ctx, clearFailure, p.Name()); err != nil {
				return st.pos, 0, err
			}
			return st.pos, 0, tx.Commit(ctx)
		}
		if clean {
			r.remember(p.Name(), known{pos: st.pos, version: st.version})
		}
		return st.pos, 0, nil
	}
	if err := tx.Commit(ctx); err != nil {
		return st.pos, 0, err
	}
	if len(res.quarantined) == 0 && len(st.quarantined) == 0 {
		r.remember(p.Name(), known{pos: res.last, version: p.Version()})
	}
	r.logQuarantined(res.quarantined)
	if r.waiter != nil {
		r.waiter.advanced(p.Name(), res.last)
	}
	return res.last, res.n, nil
}

// lockCheckpoint takes the projector's lock in tx and reads its checkpoint.
// A batch and its checkpoint are lost or kept together, so a crash before
// the disk has them replays the batch: the commit need not wait for the
// flush (the events themselves are durable). The lock and the checkpoint go
// in one round trip; the checkpoint is a statement of its own, so its
// snapshot is taken once the lock is held.
func (r *Runner) lockCheckpoint(ctx context.Context, tx pgx.Tx, p Projector) (checkpointState, error) {
	lock := &pgx.Batch{}
	lock.Queue("SELECT pg_advisory_xact_lock($1), set_config('synchronous_commit', 'off', true)", int64(pglock.Projection(string(p.Name()))))
	lock.Queue(selectCheckpoint, p.Name())
	var st checkpointState
	br := tx.SendBatch(ctx, lock)
	if _, err := br.Exec(); err != nil {
		br.Close()
		return st, err
	}
	err := st.read(br.QueryRow(), string(p.Name()))
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return st, err
}

// upsertCheckpoint advances a checkpoint; a batch that commits also ends
// any failure recorded for the projector.
const upsertCheckpoint = `INSERT INTO public.projection_checkpoints (name, commit_position, prepare_position, schema_version, updated_at)
	VALUES ($1, $2, $3, $4, now())
	ON CONFLICT (name) DO UPDATE SET commit_position = $2, prepare_position = $3, schema_version = $4, updated_at = now(),
		last_error = NULL, failures = 0, failing_since = NULL`

const clearFailure = `UPDATE public.projection_checkpoints SET last_error = NULL, failures = 0, failing_since = NULL WHERE name = $1`

// recordFailure notes a failed batch for status and readiness. It is best
// effort: when the database is what fails, readiness sees that directly.
func (r *Runner) recordFailure(name string, cause error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := r.pool.Exec(ctx, `UPDATE public.projection_checkpoints
		SET last_error = $2, failures = failures + 1, failing_since = coalesce(failing_since, now()) WHERE name = $1`,
		name, errorText(cause)); err != nil {
		r.log.Warn("projection failure not recorded", "projection", name, "err", err)
	}
}

// target is where a batch goes: the checkpoint it advances (quarantined
// streams are recorded under the same name) and the streams it passes over.
type target struct {
	checkpoint string
	version    int
	skip       map[string]bool
}

// batchResult is what one batch did.
type batchResult struct {
	last        eventstore.Position // the checkpoint after the batch
	n           int                 // events read, including those passed over
	quarantined []Quarantine        // streams quarantined by this batch
}

// applyBatch reads up to batchSize events after from, projects those of
// streams not quarantined and queues the update of the checkpoint, all in
// tx. With isolate it applies them one by one and quarantines the streams
// whose events fail (see applyEach); otherwise they go in one batch.
func (r *Runner) applyBatch(ctx context.Context, tx pgx.Tx, p Projector, from eventstore.Position, t target, isolate bool) (batchResult, error) {
	events, err := r.store.ReadAll(ctx, from, r.batchSize)
	if err != nil {
		return batchResult{last: from}, err
	}
	return r.applyEvents(ctx, tx, p, from, events, nil, t, isolate)
}

// applyEvents is applyBatch of events already read after from. pre, when
// not nil, is the batch of statements already made of them (ApplyBatch of
// every event, none of which is in t.skip).
func (r *Runner) applyEvents(ctx context.Context, tx pgx.Tx, p Projector, from eventstore.Position, events []eventstore.RecordedEvent, pre *pgx.Batch, t target, isolate bool) (batchResult, error) {
	none := batchResult{last: from}
	var err error
	if len(events) == 0 {
		return none, nil
	}
	res := batchResult{last: events[len(events)-1].Position, n: len(events)}
	if isolate {
		if res.quarantined, err = r.applyEach(ctx, tx, p, events, t); err != nil {
			return none, err
		}
		if _, err := tx.Exec(ctx, upsertCheckpoint, t.checkpoint, int64(res.last.Commit), int64(res.last.Prepare), t.version); err != nil {
			return none, fmt.Errorf("projection %s: %w", p.Name(), err)
		}
		return res, nil
	}
	b := pre
	if b == nil {
		if b, err = project(ctx, tx, p, events, t.skip); err != nil {
			return none, err
		}
	}
	b.Queue(upsertCheckpoint, t.checkpoint, int64(res.last.Commit), int64(res.last.Prepare), t.version)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return none, fmt.Errorf("projection %s: %w", p.Name(), err)
	}
	return res, nil
}

// project applies events through p, passing over the streams in skip: a
// TxProjector writes straight into tx, any other queues its statements in
// the returned batch, which the caller sends.
func project(ctx context.Context, tx pgx.Tx, p Projector, events []eventstore.RecordedEvent, skip map[string]bool) (*pgx.Batch, error) {
	b := &pgx.Batch{}
	if bp, ok := p.(BatchProjector); ok {
		if len(skip) > 0 {
			kept := make([]eventstore.RecordedEvent, 0, len(events))
			for _, ev := range events {
				if !skip[ev.StreamID] {
					kept = append(kept, ev)
				}
			}
			events = kept
		}
		if err := bp.ApplyBatch(events, b); err != nil {
			return nil, &batchError{projection: string(p.Name()), err: err}
		}
		return b, nil
	}
	txp, direct := p.(TxProjector)
	for _, ev := range events {
		if skip[ev.StreamID] {
			continue
		}
		var err error
		if direct {
			err = txp.ApplyTx(ctx, tx, ev)
		} else {
			err = p.Apply(ev, b)
		}
		if err != nil {
			return nil, &eventError{projection: string(p.Name()), ev: ev, err: err}
		}
	}
	return b, nil
}

type checkpointState struct {
	pos         eventstore.Position
	version     int
	exists      bool
	failing     bool            // a failure is recorded
	quarantined map[string]bool // streams the projector passes over
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// checkpoint reads a projector's checkpoint together with its quarantined
// streams, in one round trip.
func (r *Runner) checkpoint(ctx context.Context, q querier, name string) (checkpointState, error) {
	var st checkpointState
	err := st.read(q.QueryRow(ctx, selectCheckpoint, name), name)
	return st, err
}

const selectCheckpoint = `SELECT commit_position, prepare_position, schema_version, failures > 0,
		ARRAY(SELECT stream_id FROM public.projection_quarantine WHERE projection = $1)
	FROM public.projection_checkpoints WHERE name = $1`

// read fills st from the row of selectCheckpoint; no row is a projector
// that has not started.
func (st *checkpointState) read(row pgx.Row, name string) error {
	var c, p int64
	var streams []string
	err := row.Scan(&c, &p, &st.version, &st.failing, &streams)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", name, err)
	}
	st.pos, st.exists = eventstore.Position{Commit: uint64(c), Prepare: uint64(p)}, true
	if len(streams) > 0 {
		st.quarantined = make(map[string]bool, len(streams))
		for _, s := range streams {
			st.quarantined[s] = true
		}
	}
	return nil
}
