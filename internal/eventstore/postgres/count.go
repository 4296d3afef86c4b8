package postgres

import (
	"context"
	"math"

	"github.com/mailroom/mailroom/internal/eventstore"
)

var _ eventstore.Counter = (*Store)(nil)

// CountAfter counts the readable events positioned after from, up to limit
// when it is positive: a projection's lag, or a rebuild's total.
func (s *Store) CountAfter(ctx context.Context, from eventstore.Position, limit int64) (int64, error) {
	var n int64
	if limit <= 0 {
		limit = math.MaxInt64
	}
	err := s.pool.QueryRow(ctx, countAfter, from.Commit, int64(from.Prepare), limit).Scan(&n)
	return n, err
}

// countAfter walks the position index from $1/$2. Its ORDER BY keeps it
// there even in the generic plan PostgreSQL settles on for a prepared
// statement: without it that plan scans the whole log, and readiness
// probes, which count every projection's lag, grow with the log.
const countAfter = `SELECT count(*) FROM (SELECT FROM events
	WHERE (transaction_id, seq) > ($1, $2)
	AND transaction_id < ` + horizon + `
	ORDER BY transaction_id, seq LIMIT $3) e`

// HeldBack counts, up to limit, the events committed but not yet readable:
// those of transactions younger than the oldest append still open, which
// every reader waits for (see horizon). An append left open (a process
// frozen in the middle of one) holds back every projection and process
// manager while it lasts.
func (s *Store) HeldBack(ctx context.Context, limit int64) (int64, error) {
	var n int64
	err := s.pool.QueryRow(ctx, heldBack, limit).Scan(&n)
	return n, err
}

const heldBack = `SELECT count(*) FROM (SELECT FROM events
	WHERE transaction_id >= ` + horizon + `
	ORDER BY transaction_id, seq LIMIT $1) e`
