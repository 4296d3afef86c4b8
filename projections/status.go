package projections

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailroom/mailroom/internal/apitime"
	"github.com/mailroom/mailroom/internal/eventstore"
)

// Status is where a projector stands.
type Status struct {
	Name        string        `json:"name"`
	Version     int           `json:"version"`
	Position    ShownPosition `json:"position"`
	Lag         int64         `json:"lag"` // events not yet applied, up to the bound asked; -1 when the store cannot count
	UpdatedAt   apitime.Time  `json:"updated_at"`
	Failing     *Failure      `json:"failing"`     // nil unless its last batch failed
	Quarantined []Quarantine  `json:"quarantined"` // streams it passes over
}

// ShownPosition is a position as operators read it: "commit/prepare" in
// text and JSON, the form `events export` prints and its --from takes.
type ShownPosition eventstore.Position

func (p ShownPosition) String() string { return eventstore.Position(p).String() }

// MarshalText writes p as String does.
func (p ShownPosition) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

// UnmarshalText reads what MarshalText writes.
func (p *ShownPosition) UnmarshalText(text []byte) error {
	pos, err := eventstore.ParsePosition(string(text))
	*p = ShownPosition(pos)
	return err
}

// Failure is a projector whose latest batches failed for a reason that is
// not one event's data: it applies nothing until the cause goes away.
type Failure struct {
	Error    string       `json:"error"`
	Since    apitime.Time `json:"since"`
	Attempts int          `json:"attempts"` // failed batches in a row, across processes
}

// Lag bounds: a count costs a walk of the position index (PostgreSQL) or a
// read of the events (EventStoreDB) up to its bound, so each reader asks
// for no more than it shows.
const (
	MetricsLagCap  = 10_000    // /metrics, scraped every few seconds
	OperatorLagCap = 1_000_000 // `projections status`, run by hand
)

// Status reports every projector's checkpoint, lag, failure and quarantined
// streams. With lagCap > 0 the lag is counted no further than lagCap, which
// keeps the query cheap however far a projector is behind.
func (r *Runner) Status(ctx context.Context, lagCap int64) ([]Status, error) {
	names := make([]string, len(r.projectors))
	for i, p := range r.projectors {
		names[i] = string(p.Name())
	}
	byName := map[string]*Status{}
	rows, err := r.pool.Query(ctx, `SELECT name, commit_position, prepare_position, schema_version, updated_at,
			last_error, failures, failing_since
		FROM projection_checkpoints WHERE name = ANY($1)`, names)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		s := &Status{Lag: -1, Quarantined: []Quarantine{}}
		var c, pr int64
		var lastError *string
		var failures int
		var since *time.Time
		if err := rows.Scan(&s.Name, &c, &pr, &s.Version, &s.UpdatedAt.Time, &lastError, &failures, &since); err != nil {
			rows.Close()
			return nil, err
		}
		s.Position = ShownPosition{Commit: uint64(c), Prepare: uint64(pr)}
		if lastError != nil {
			s.Failing = &Failure{Error: *lastError, Attempts: failures}
			if since != nil {
				s.Failing.Since = apitime.Of(*since)
			}
		}
		byName[s.Name] = s
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	quarantined, err := r.quarantined(ctx, names)
	if err != nil {
		return nil, err
	}
	for _, q := range quarantined {
		if s := byName[q.Projection]; s != nil {
			s.Quarantined = append(s.Quarantined, q)
		}
	}
	counter, _ := r.store.(eventstore.Counter)
	out := make([]Status, 0, len(names))
	for _, name := range names {
		s := byName[name]
		if s == nil {
			return nil, fmt.Errorf("projection %s has no checkpoint", name)
		}
		if counter != nil {
			n, err := counter.CountAfter(ctx, eventstore.Position(s.Position), lagCap)
			switch {
			case errors.Is(err, errors.ErrUnsupported):
			case err != nil:
				return nil, err
			default:
				s.Lag = n
			}
		}
		out = append(out, *s)
	}
	return out, nil
}

// quarantined lists the quarantined streams of the named projectors, oldest
// first.
func (r *Runner) quarantined(ctx context.Context, names []string) ([]Quarantine, error) {
	rows, err := r.pool.Query(ctx, `SELECT projection, stream_id, event_id, event_type, stream_revision,
			commit_position, prepare_position, error, quarantined_at, attempts
		FROM projection_quarantine WHERE projection = ANY($1) ORDER BY projection, quarantined_at, stream_id`, names)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Quarantine, error) {
		var q Quarantine
		var rev, c, p int64
		var since time.Time
		err := row.Scan(&q.Projection, &q.Stream, &q.EventID, &q.EventType, &rev, &c, &p, &q.Error, &since, &q.Attempts)
		q.Revision, q.Position, q.Since = uint64(rev), ShownPosition{Commit: uint64(c), Prepare: uint64(p)}, apitime.Of(since)
		return q, err
	})
}
