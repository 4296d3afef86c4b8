package projections

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/pglock"
)

// buildIndex runs one of a rebuild's index statements CONCURRENTLY, on a
// connection of its own whose search path starts at the shadow schema. A
// plain CREATE INDEX takes a transaction id as it starts and keeps it to
// the end of the build, and no reader of the log in this database reads
// past a running transaction: every write's wait for its read models
// would time out for as long as the build lasted (17 s for the recipients'
// trigrams of 1.5 million emails). CONCURRENTLY takes an id only for its
// short catalog steps. It does wait, between them, for every transaction
// of the database older than itself to end; Mailroom's are short, and no
// session of Mailroom's waits for a session lock inside a statement (see
// pglock.Wait), since one waiting for the rebuild lock would wait for good.
func (r *Runner) buildIndex(ctx context.Context, shadow, ddl string) error {
	rest, ok := strings.CutPrefix(ddl, "CREATE INDEX IF NOT EXISTS ")
	if !ok {
		return fmt.Errorf("index statement %.60q does not start with CREATE INDEX IF NOT EXISTS", ddl)
	}
	cfg := r.pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["search_path"] = shadow + ", public"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	// The simple protocol: CONCURRENTLY may not run in a transaction block.
	_, err = conn.Exec(ctx, "CREATE INDEX CONCURRENTLY IF NOT EXISTS "+rest, pgx.QueryExecModeSimpleProtocol)
	return err
}

// Progress hears how far a rebuild has come: events applied so far.
type Progress func(applied int64)

// Rebuild replays the whole event log into fresh tables and swaps them in.
// The projector's live tables keep serving reads, and the live runner keeps
// advancing them, until the swap: one short transaction that takes the
// projector's lock, applies the last few events, and moves the new tables
// into place together with the new checkpoint.
func (r *Runner) Rebuild(ctx context.Context, p Projector, progress Progress) error {
	// The log is read on one connection while the shadow tables are
	// written on another: with a single one, the rebuild would wait for
	// ever on itself.
	if n := r.pool.Config().MaxConns; n < 2 {
		return fmt.Errorf("rebuild %s: the database pool holds %d connection; a rebuild needs at least 2 (pool_max_conns in MAILROOM_DATABASE_URL)", p.Name(), n)
	}
	// One rebuild of a projector at a time, across processes.
	return pglock.Hold(ctx, r.pool.Config().ConnConfig, pglock.Rebuild(string(p.Name())), r.waitingToRebuild(p),
		func(ctx context.Context, lock *pglock.Conn) error { return r.rebuild(ctx, lock, p, progress) })
}

// waitingToRebuild are the options of the rebuild lock: a process that
// finds another rebuilding says why it does not go on.
func (r *Runner) waitingToRebuild(p Projector) pglock.Options {
	return pglock.Options{Standby: func() {
		r.log.Warn("another process is rebuilding this projection; waiting for it to end", "projection", p.Name())
	}}
}

// rebuild is Rebuild once it holds the projector's rebuild lock.
func (r *Runner) rebuild(ctx context.Context, lock *pglock.Conn, p Projector, progress Progress) (err error) {
	shadow := pgx.Identifier{"projection_rebuild_" + strings.ReplaceAll(string(p.Name()), "-", "_")}.Sanitize()
	t := target{checkpoint: "rebuild:" + string(p.Name()), version: p.Version(), skip: map[string]bool{}}
	// A rebuild that stops part way (interrupted, failed) drops its shadow
	// tables: they hold opened personal data that erasures of the live
	// tables would not reach, until the next rebuild of the projection.
	defer func() {
		if err == nil {
			return
		}
		// On the rebuild lock's own session: a rebuild whose lock was lost
		// (its connection failed a check) may have been followed by another
		// process's, whose shadow tables have the same name. If that
		// session is gone, so is the lock, and the cleanup is the next
		// rebuild's.
		cleanup, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		derr := lock.Do(func(conn *pgx.Conn) error {
			if _, err := conn.Exec(cleanup, fmt.Sprintf("DROP SCHEMA IF EXISTS %s CASCADE", shadow)); err != nil {
				return err
			}
			_, err := conn.Exec(cleanup, "DELETE FROM public.projection_checkpoints WHERE name = $1", t.checkpoint)
			return err
		})
		if derr != nil {
			r.log.Warn("could not drop the shadow tables of a rebuild that stopped; the next rebuild drops them", "projection", p.Name(), "err", derr)
		}
	}()
	if _, err := r.pool.Exec(ctx, fmt.Sprintf("DROP SCHEMA IF EXISTS %s CASCADE; CREATE SCHEMA %s", shadow, shadow)); err != nil {
		return fmt.Errorf("rebuild %s: shadow schema: %w", p.Name(), err)
	}
	// Quarantines left by an interrupted rebuild belong to its dropped tables.
	if _, err := r.pool.Exec(ctx, "DELETE FROM public.projection_quarantine WHERE projection = $1", t.checkpoint); err != nil {
		return fmt.Errorf("rebuild %s: %w", p.Name(), err)
	}
	// A shadow batch need not wait for its commit to reach the disk: a
	// crash loses a few of them, together with their checkpoint, and the
	// next rebuild starts afresh anyway. The swap commits as usual.
	// Statements are planned for each run: the generic plan PostgreSQL
	// settles on for a prepared statement would be made while the shadow
	// tables are empty (a sequential scan), and kept as they grow, making
	// the replay quadratic in their rows.
	inShadow := func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL search_path TO %s, public; SET LOCAL synchronous_commit = off; "+
			"SET LOCAL plan_cache_mode = force_custom_plan", shadow))
		return err
	}
	if err := r.inTx(ctx, func(tx pgx.Tx) error {
		if err := inShadow(tx); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, p.Schema())
		return err
	}); err != nil {
		return fmt.Errorf("rebuild %s: create tables: %w", p.Name(), err)
	}

	var applied int64
	pos, err := r.replay(ctx, p, t, inShadow, eventstore.Start, &applied, progress)
	if err != nil {
		return err
	}

	// Secondary indexes, built over the replayed tables before the swap,
	// one at a time: two builds CONCURRENTLY on one table deadlock.
	if ip, ok := p.(IndexedProjector); ok {
		ext, err := installedExtensions(ctx, r.pool)
		if err != nil {
			return fmt.Errorf("rebuild %s: %w", p.Name(), err)
		}
		for _, ddl := range ip.Indexes(ext) {
			if err := r.buildIndex(ctx, shadow, ddl); err != nil {
				return fmt.Errorf("rebuild %s: create indexes: %w", p.Name(), err)
			}
		}
	}
	// Statistics for the tables about to go live: the live projector's
	// plans are made from them, and autovacuum may come much later.
	for _, table := range p.Tables() {
		if _, err := r.pool.Exec(ctx, fmt.Sprintf("ANALYZE %s.%s", shadow, pgx.Identifier{table}.Sanitize())); err != nil {
			return fmt.Errorf("rebuild %s: analyze %s: %w", p.Name(), table, err)
		}
	}

	// What came while the indexes were built is applied still without the
	// live lock, so the swap's own share stays the last few events.
	if pos, err = r.replay(ctx, p, t, inShadow, pos, &applied, progress); err != nil {
		return err
	}

	// Swap: finish the replay and move the tables in under the live lock.
	// Readers may hold several of the live tables at once (joins); taking
	// them all with a short lock timeout, and retrying, makes the swap the
	// one that gives way instead of a reader.
	var swapped eventstore.Position
	var held []Quarantine
	isolate := false
	for attempt := 1; ; attempt++ {
		swapped, held, err = r.swap(ctx, p, shadow, pos, &applied, t, isolate)
		if !isolate && isDataError(err) {
			isolate = true
			continue
		}
		if err == nil || !isLockConflict(err) || attempt == 100 {
			break
		}
		if err := giveWay(ctx); err != nil {
			return err
		}
		// What came meanwhile is applied without the projector's lock, so
		// that each attempt holds it for the last few events only, however
		// many attempts readers make it take.
		if pos, err = r.replay(ctx, p, t, inShadow, pos, &applied, progress); err != nil {
			return err
		}
	}
	if err != nil {
		return fmt.Errorf("rebuild %s: swap: %w", p.Name(), err)
	}
	pos = swapped
	r.logQuarantined(held)
	if progress != nil {
		progress(applied)
	}
	if r.waiter != nil {
		r.waiter.advanced(p.Name(), pos)
	}
	r.log.Info("projection rebuilt", "projection", p.Name(), "events", applied, "position", pos.String())
	return nil
}

// replay applies the events after pos to the shadow tables in batches, each
// its own transaction, without the live lock, while the next batch is being
// read, until it has applied the last event it finds. A batch refused for one
// event's data is applied again event by event, quarantining streams as the
// live runner does, under the rebuild's name. It returns the last position
// applied.
func (r *Runner) replay(ctx context.Context, p Projector, t target, inShadow func(pgx.Tx) error, pos eventstore.Position, applied *int64, progress Progress) (eventstore.Position, error) {
	readCtx, stopReading := context.WithCancel(ctx)
	defer stopReading()
	batches := prepareAhead(readCtx, p, r.readAhead(readCtx, pos, rebuildBatch))
	for {
		var res batchResult
		next, ok := <-batches
		if !ok {
			return pos, fmt.Errorf("rebuild %s: %w", p.Name(), context.Cause(ctx))
		}
		if next.err != nil {
			return pos, fmt.Errorf("rebuild %s: %w", p.Name(), next.err)
		}
		replay := func(isolate bool) error {
			return r.inTx(ctx, func(tx pgx.Tx) error {
				if err := inShadow(tx); err != nil {
					return err
				}
				var err error
				pre := next.prepared
				if isolate || touches(next.events, t.skip) {
					pre = nil // made without knowing of these quarantines
				}
				next.prepared = nil // a batch is sent once
				res, err = r.applyEvents(ctx, tx, p, pos, next.events, pre, t, isolate)
				return err
			})
		}
		err := replay(false)
		if isDataError(err) {
			err = replay(true)
		}
		if err != nil {
			return pos, fmt.Errorf("rebuild %s: %w", p.Name(), err)
		}
		r.logQuarantined(res.quarantined)
		for _, q := range res.quarantined {
			t.skip[q.Stream] = true
		}
		pos = res.last
		*applied += int64(res.n)
		if progress != nil && res.n > 0 {
			progress(*applied)
		}
		if res.n < rebuildBatch {
			return pos, nil
		}
	}
}

// rebuildBatch is how many events a rebuild replays per transaction: more
// than the live runner's batches, as a rebuild is all backlog.
const rebuildBatch = 2000

// readBatch is one read of the log, or why it failed, and for a
// BatchProjector the statements made of it when they could be.
type readBatch struct {
	events   []eventstore.RecordedEvent
	err      error
	prepared *pgx.Batch
}

// prepareAhead makes a BatchProjector's statements for each batch from in
// while the previous batch is being written, so that decoding and folding
// the events overlaps with the database's work. A batch that fails to
// prepare goes on without, to fail (and be isolated) where it is applied.
func prepareAhead(ctx context.Context, p Projector, in <-chan readBatch) <-chan readBatch {
	bp, ok := p.(BatchProjector)
	if !ok {
		return in
	}
	out := make(chan readBatch, 1)
	go func() {
		defer close(out)
		for rb := range in {
			if rb.err == nil && len(rb.events) > 0 {
				b := &pgx.Batch{}
				if err := bp.ApplyBatch(rb.events, b); err == nil {
					rb.prepared = b
				}
			}
			select {
			case out <- rb:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// touches reports whether any of events belongs to a stream in skip.
func touches(events []eventstore.RecordedEvent, skip map[string]bool) bool {
	if len(skip) == 0 {
		return false
	}
	for _, ev := range events {
		if skip[ev.StreamID] {
			return true
		}
	}
	return false
}

// readAhead reads the log after from in batches of n, one batch ahead of
// its reader, and closes the channel after a short batch, an error, or ctx's
// end.
func (r *Runner) readAhead(ctx context.Context, from eventstore.Position, n int) <-chan readBatch {
	out := make(chan readBatch, 1)
	go func() {
		defer close(out)
		for {
			evs, err := r.store.ReadAll(ctx, from, n)
			select {
			case out <- readBatch{events: evs, err: err}:
			case <-ctx.Done():
				return
			}
			if err != nil || len(evs) < n {
				return
			}
			from = evs[len(evs)-1].Position
		}
	}()
	return out
}

func (r *Runner) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// swap applies the events after pos to the shadow tables and moves them
// into place, in one transaction holding the projector's lock (the live
// projector waits) and, for the moves, its live tables (readers wait). The rebuild's quarantined streams replace the live projector's. It
// returns the new checkpoint and the streams it quarantined itself.
func (r *Runner) swap(ctx context.Context, p Projector, shadow string, pos eventstore.Position, applied *int64, t target, isolate bool) (eventstore.Position, []Quarantine, error) {
	n0 := *applied
	var held []Quarantine
	// A copy: what this attempt quarantines counts only if it commits.
	t.skip = maps.Clone(t.skip)
	err := r.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(pglock.Projection(string(p.Name())))); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL search_path TO %s, public", shadow)); err != nil {
			return err
		}
		for {
			res, err := r.applyBatch(ctx, tx, p, pos, t, isolate)
			if err != nil {
				return err
			}
			for _, q := range res.quarantined {
				t.skip[q.Stream] = true
			}
			held = append(held, res.quarantined...)
			pos = res.last
			*applied += int64(res.n)
			if res.n < r.batchSize {
				break
			}
		}
		// The live tables are locked only now, for the moves alone: the
		// last events are applied to the shadow tables while readers go
		// on, so a slow read of the log never holds them up.
		present, _, err := liveTables(ctx, tx, p)
		if err != nil {
			return err
		}
		var live []string
		for _, tb := range present {
			live = append(live, "public."+pgx.Identifier{tb}.Sanitize())
		}
		if len(live) > 0 {
			if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '200ms'"); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "LOCK TABLE "+strings.Join(live, ", ")+" IN ACCESS EXCLUSIVE MODE"); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = 0"); err != nil {
				return err
			}
		}
		for _, tb := range p.Tables() {
			id := pgx.Identifier{tb}.Sanitize()
			if _, err := tx.Exec(ctx, fmt.Sprintf("DROP TABLE IF EXISTS public.%s CASCADE; ALTER TABLE %s.%s SET SCHEMA public", id, shadow, id)); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, upsertCheckpoint, p.Name(), int64(pos.Commit), int64(pos.Prepare), p.Version()); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "DELETE FROM public.projection_checkpoints WHERE name = $1", t.checkpoint); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM public.projection_quarantine WHERE projection = $1`, p.Name()); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE public.projection_quarantine SET projection = $1 WHERE projection = $2`, p.Name(), t.checkpoint); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, fmt.Sprintf("DROP SCHEMA %s CASCADE", shadow))
		return err
	})
	if err != nil {
		*applied = n0
		return pos, nil, err
	}
	for i := range held {
		held[i].Projection = string(p.Name())
	}
	return pos, held, nil
}

// giveWay waits a few tens of milliseconds, spread at random, before work
// that met a lock conflict runs again.
func giveWay(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Duration(20+rand.IntN(80)) * time.Millisecond):
		return nil
	}
}

// isLockConflict reports a lock timeout or deadlock, after which the swap
// is simply tried again.
func isLockConflict(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "55P03" || pgErr.Code == "40P01")
}
