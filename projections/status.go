package projections

import (
	"context"
	"time"

	"github.com/mailroom/mailroom/internal/eventstore"
)

// Status is where a projector stands.
type Status struct {
	Name      string              `json:"name"`
	Version   int                 `json:"version"`
	Position  eventstore.Position `json:"position"`
	Lag       int64               `json:"lag"` // events not yet applied; -1 when the store cannot count
	UpdatedAt time.Time           `json:"updated_at"`
}

// Status reports every projector's checkpoint and lag.
func (r *Runner) Status(ctx context.Context) ([]Status, error) {
	counter, _ := r.store.(eventstore.Counter)
	out := make([]Status, 0, len(r.projectors))
	for _, p := range r.projectors {
		s := Status{Name: p.Name(), Lag: -1}
		var c, pr int64
		err := r.pool.QueryRow(ctx, `SELECT commit_position, prepare_position, schema_version, updated_at
			FROM projection_checkpoints WHERE name = $1`, p.Name()).Scan(&c, &pr, &s.Version, &s.UpdatedAt)
		if err != nil {
			return nil, err
		}
		s.Position = eventstore.Position{Commit: uint64(c), Prepare: uint64(pr)}
		if counter != nil {
			n, err := counter.CountAfter(ctx, s.Position)
			if err != nil {
				return nil, err
			}
			s.Lag = n
		}
		out = append(out, s)
	}
	return out, nil
}
