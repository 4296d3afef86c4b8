package postgres

import (
	"context"

	"github.com/mailroom/mailroom/internal/eventstore"
)

var _ eventstore.Counter = (*Store)(nil)

// CountAfter counts the readable events positioned after from: a
// projection's lag, or a rebuild's total.
func (s *Store) CountAfter(ctx context.Context, from eventstore.Position) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, `SELECT count(*) FROM events
		WHERE (transaction_id, seq) > ($1, $2)
		AND transaction_id < (SELECT pg_snapshot_xmin(pg_current_snapshot()))`,
		from.Commit, int64(from.Prepare)).Scan(&n)
	return n, err
}
