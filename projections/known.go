package projections

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/mailroom/mailroom/internal/eventstore"
)

// known is the checkpoint a projector last had when this runner committed
// or read it, clean (no failure recorded, no stream quarantined). From it
// the runner reads and projects the next batch before opening a
// transaction: most batches concern only some projectors (an email's events
// touch neither accounts nor API keys), and a batch that projects to no
// statement needs only its checkpoint moved, not a transaction under the
// projector's lock.
type known struct {
	pos     eventstore.Position
	version int
}

// errStale means the checkpoint is not where the runner last saw it
// (another instance, a rebuild, a failure, a quarantine): the batch is
// made again the ordinary way.
var errStale = errors.New("projection checkpoint moved")

// moveCheckpoint moves a clean checkpoint past events that project to
// nothing, only from where the runner saw it: a single statement, since
// no table but the checkpoint's changes.
const moveCheckpoint = `UPDATE public.projection_checkpoints
	SET commit_position = $2, prepare_position = $3, updated_at = now()
	WHERE name = $1 AND commit_position = $4 AND prepare_position = $5 AND schema_version = $6
		AND failures = 0 AND NOT EXISTS (SELECT 1 FROM public.projection_quarantine WHERE projection = $1)`

func (r *Runner) knownOf(name Name) (known, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k, ok := r.known[name]
	return k, ok
}

// remember records a clean checkpoint; forget drops it.
func (r *Runner) remember(name Name, k known) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.known == nil {
		r.known = map[Name]known{}
	}
	r.known[name] = k
}

func (r *Runner) forget(name Name) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.known, name)
}

// stepKnown is step from the known checkpoint, for projectors that queue
// statements, and for a TxProjector (which needs its transaction to
// project) that tells which events it reads. It returns errStale when the
// ordinary step must run instead.
func (r *Runner) stepKnown(ctx context.Context, p Projector) (eventstore.Position, int, error) {
	k, ok := r.knownOf(p.Name())
	_, tx := p.(TxProjector)
	picky, filters := p.(Filter)
	if !ok || (tx && !filters) || k.version != p.Version() {
		return eventstore.Position{}, 0, errStale
	}
	events, err := r.store.ReadAll(ctx, k.pos, r.batchSize)
	if err != nil {
		return k.pos, 0, err
	}
	if len(events) == 0 {
		return k.pos, 0, nil
	}
	b := &pgx.Batch{}
	if tx {
		// Only a batch it does not read at all is passed over here; one
		// it reads is applied in its transaction, the ordinary way.
		for _, ev := range events {
			if picky.Reads(ev) {
				return k.pos, 0, errStale
			}
		}
	} else if b, err = project(ctx, nil, p, events, nil); err != nil {
		return k.pos, 0, errStale // the ordinary step isolates the event at fault
	}
	last := events[len(events)-1].Position
	if b.Len() == 0 {
		tag, err := r.pool.Exec(ctx, moveCheckpoint, p.Name(), int64(last.Commit), int64(last.Prepare),
			int64(k.pos.Commit), int64(k.pos.Prepare), p.Version())
		if err != nil {
			return k.pos, 0, err
		}
		if tag.RowsAffected() != 1 {
			r.forget(p.Name())
			return k.pos, 0, errStale
		}
	} else if err := r.applyKnown(ctx, p, k, events, b); err != nil {
		return k.pos, 0, err
	}
	r.remember(p.Name(), known{pos: last, version: k.version})
	if r.waiter != nil {
		r.waiter.advanced(p.Name(), last)
	}
	return last, len(events), nil
}

// applyKnown applies a batch made from the known checkpoint, once the lock
// shows the checkpoint is still there.
func (r *Runner) applyKnown(ctx context.Context, p Projector, k known, events []eventstore.RecordedEvent, b *pgx.Batch) error {
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	st, err := r.lockCheckpoint(ctx, tx, p)
	if err != nil {
		return err
	}
	if !st.exists || st.pos != k.pos || st.version != k.version || st.failing || len(st.quarantined) > 0 {
		r.forget(p.Name())
		return errStale
	}
	if _, err := r.applyEvents(ctx, tx, p, k.pos, events, b, target{checkpoint: string(p.Name()), version: p.Version()}, false); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
