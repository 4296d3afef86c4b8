package projections

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/mailroom/mailroom/internal/apitime"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/pglock"
)

// Quarantine is a stream a projector passes over because one of its events
// could not be applied. Event, Revision and Position are those of the first
// event passed over; a retry starts there.
type Quarantine struct {
	Projection string        `json:"projection"`
	Stream     string        `json:"stream"`
	EventID    uuid.UUID     `json:"event_id"`
	EventType  string        `json:"event_type"`
	Revision   uint64        `json:"revision"`
	Position   ShownPosition `json:"position"`
	Error      string        `json:"error"`
	Since      apitime.Time  `json:"since"`
	Attempts   int           `json:"attempts"`
}

// eventError is a projector's failure on one event, from its own code or
// from the statements it ran in the transaction.
type eventError struct {
	projection string
	ev         eventstore.RecordedEvent
	err        error
}

func (e *eventError) Error() string {
	return fmt.Sprintf("projection %s: event %s (%s): %v", e.projection, e.ev.ID, e.ev.Type, e.err)
}

func (e *eventError) Unwrap() error { return e.err }

// batchError is a BatchProjector's failure on a batch, from its own code:
// applied event by event, the batch shows which event is at fault.
type batchError struct {
	projection string
	err        error
}

func (e *batchError) Error() string { return fmt.Sprintf("projection %s: %v", e.projection, e.err) }

func (e *batchError) Unwrap() error { return e.err }

// isDataError reports a failure that belongs to the events being applied, so
// that quarantining the stream at fault lets the others through: PostgreSQL
// refusing a value (class 22, data exception: a NUL, invalid UTF-8, a number
// out of range), a constraint (class 23) or a size limit (class 54, e.g. an
// index row too large), or a projector's own error on an event (one it
// cannot decode). Anything else (a lost connection, a cancelled context, a
// lock or statement timeout, a serialization failure, a missing table) stops
// the projector, which retries the same batch.
func isDataError(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, "22") || strings.HasPrefix(pgErr.Code, "23") || strings.HasPrefix(pgErr.Code, "54")
	}
	var ev *eventError
	var be *batchError
	return errors.As(err, &ev) || errors.As(err, &be)
}

const insertQuarantine = `INSERT INTO public.projection_quarantine
	(projection, stream_id, event_id, event_type, stream_revision, commit_position, prepare_position, error)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (projection, stream_id) DO NOTHING`

// applyEach applies events one by one, each under a savepoint. A stream
// whose event fails with a data error is quarantined: that event and the
// stream's later events are passed over, so a stream never shows half its
// story. Any other error ends the batch.
func (r *Runner) applyEach(ctx context.Context, tx pgx.Tx, p Projector, events []eventstore.RecordedEvent, t target) ([]Quarantine, error) {
	var out []Quarantine
	held := map[string]bool{}
	for _, ev := range events {
		if t.skip[ev.StreamID] || held[ev.StreamID] {
			continue
		}
		err := applySaved(ctx, tx, p, ev)
		if err == nil {
			continue
		}
		if !isDataError(err) {
			return nil, err
		}
		q := Quarantine{Projection: t.checkpoint, Stream: ev.StreamID, EventID: ev.ID, EventType: ev.Type,
			Revision: ev.StreamRevision, Position: ShownPosition(ev.Position), Error: errorText(err), Since: apitime.Of(time.Now()), Attempts: 1}
		if _, err := tx.Exec(ctx, insertQuarantine, q.Projection, q.Stream, q.EventID, q.EventType,
			int64(q.Revision), int64(q.Position.Commit), int64(q.Position.Prepare), q.Error); err != nil {
			return nil, fmt.Errorf("projection %s: quarantine %s: %w", p.Name(), q.Stream, err)
		}
		held[ev.StreamID] = true
		out = append(out, q)
	}
	return out, nil
}

// applySaved applies one event under a savepoint and rolls back to it when
// the event fails. Only a rollback that works makes the failure the
// event's: when it does not, the connection is what failed.
func applySaved(ctx context.Context, tx pgx.Tx, p Projector, ev eventstore.RecordedEvent) error {
	var err error
	if txp, ok := p.(TxProjector); ok {
		if _, err := tx.Exec(ctx, "SAVEPOINT projection_event"); err != nil {
			return err
		}
		if err = txp.ApplyTx(ctx, tx, ev); err == nil {
			_, err := tx.Exec(ctx, "RELEASE SAVEPOINT projection_event")
			return err
		}
	} else {
		b := &pgx.Batch{}
		if err := p.Apply(ev, b); err != nil {
			return &eventError{projection: string(p.Name()), ev: ev, err: err} // nothing was sent
		}
		if b.Len() == 0 {
			return nil
		}
		saved := &pgx.Batch{}
		saved.Queue("SAVEPOINT projection_event")
		saved.QueuedQueries = append(saved.QueuedQueries, b.QueuedQueries...)
		saved.Queue("RELEASE SAVEPOINT projection_event")
		if err = tx.SendBatch(ctx, saved).Close(); err == nil {
			return nil
		}
	}
	if _, rbErr := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT projection_event"); rbErr != nil {
		return fmt.Errorf("projection %s: event %s: %v; then: %w", p.Name(), ev.ID, err, rbErr)
	}
	return &eventError{projection: string(p.Name()), ev: ev, err: err}
}

// errorText is an error as stored and shown: valid UTF-8 without NULs (the
// error may quote the very value that was refused), at most 1,000 bytes.
func errorText(err error) string {
	s := strings.ReplaceAll(strings.ToValidUTF8(err.Error(), "\uFFFD"), "\x00", `\x00`)
	if len(s) > 1000 {
		s = strings.ToValidUTF8(s[:1000], "") + "…"
	}
	return s
}

func (r *Runner) logQuarantined(qs []Quarantine) {
	for _, q := range qs {
		r.log.Error("projection quarantined a stream; its events are skipped until `mailroom projections retry`",
			"projection", q.Projection, "stream", q.Stream, "event_id", q.EventID, "event_type", q.EventType,
			"position", q.Position.String(), "err", q.Error)
	}
}

// RetryResult is what retrying one quarantined stream did: Applied events
// re-applied and the quarantine lifted, or the Error it still fails with.
type RetryResult struct {
	Projection string `json:"projection"`
	Stream     string `json:"stream"`
	Applied    int    `json:"applied"`
	Error      string `json:"error,omitempty"`
}

// Retry re-applies, for each stream p has quarantined, the events it passed
// over (from the first failing one up to its checkpoint; the runner applies
// later ones), in one transaction under the projector's lock that also lifts
// the quarantine. A stream that still fails stays quarantined with the new
// error. Only a failure that is not the data's is returned as an error.
func (r *Runner) Retry(ctx context.Context, p Projector) ([]RetryResult, error) {
	rows, err := r.pool.Query(ctx, `SELECT stream_id FROM public.projection_quarantine
		WHERE projection = $1 ORDER BY quarantined_at, stream_id`, p.Name())
	if err != nil {
		return nil, err
	}
	streams, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	var out []RetryResult
	for _, s := range streams {
		res, err := r.retryStream(ctx, p, s)
		if err != nil {
			return out, err
		}
		if res != nil {
			out = append(out, *res)
		}
	}
	return out, nil
}

// retryStream retries one stream; nil when its quarantine was lifted
// meanwhile (another retry, a rebuild).
func (r *Runner) retryStream(ctx context.Context, p Projector, stream string) (*RetryResult, error) {
	res := &RetryResult{Projection: string(p.Name()), Stream: stream}
	err := r.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(pglock.Projection(string(p.Name())))); err != nil {
			return err
		}
		st, err := r.checkpoint(ctx, tx, string(p.Name()))
		if err != nil {
			return err
		}
		var from int64
		err = tx.QueryRow(ctx, `SELECT stream_revision FROM public.projection_quarantine
			WHERE projection = $1 AND stream_id = $2`, p.Name(), stream).Scan(&from)
		if errors.Is(err, pgx.ErrNoRows) {
			res = nil
			return nil
		}
		if err != nil {
			return err
		}
		events, err := r.streamUpTo(ctx, stream, uint64(from), st.pos)
		if err != nil {
			return err
		}
		b, err := project(ctx, tx, p, events, nil)
		if err != nil {
			return err
		}
		b.Queue(`DELETE FROM public.projection_quarantine WHERE projection = $1 AND stream_id = $2`, p.Name(), stream)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return fmt.Errorf("projection %s: stream %s: %w", p.Name(), stream, err)
		}
		res.Applied = len(events)
		return nil
	})
	if err == nil {
		if res != nil {
			r.log.Info("projection lifted a quarantine", "projection", p.Name(), "stream", stream, "events", res.Applied)
		}
		return res, nil
	}
	if !isDataError(err) {
		return nil, err
	}
	res.Error = errorText(err)
	if _, err := r.pool.Exec(ctx, `UPDATE public.projection_quarantine SET error = $3, attempts = attempts + 1, attempted_at = now()
		WHERE projection = $1 AND stream_id = $2`, p.Name(), stream, res.Error); err != nil {
		return nil, err
	}
	return res, nil
}

// streamUpTo reads stream from revision from on, up to position until.
func (r *Runner) streamUpTo(ctx context.Context, stream string, from uint64, until eventstore.Position) ([]eventstore.RecordedEvent, error) {
	var out []eventstore.RecordedEvent
	for {
		evs, err := r.store.ReadStream(ctx, stream, from, r.batchSize)
		if errors.Is(err, eventstore.ErrStreamNotFound) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		for _, ev := range evs {
			if until.Less(ev.Position) {
				return out, nil
			}
			out = append(out, ev)
		}
		if len(evs) < r.batchSize {
			return out, nil
		}
		from = evs[len(evs)-1].StreamRevision + 1
	}
}
