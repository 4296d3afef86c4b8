package postgres

import (
	"context"
	"fmt"

	"github.com/mailroom/mailroom/internal/eventstore"
)

var _ eventstore.HeadRecorder = (*Store)(nil)

// RecordedHeads returns every stream's last revision and hash as the
// streams table holds them, which appends keep beside the events.
func (s *Store) RecordedHeads(ctx context.Context) (map[string]eventstore.StreamHead, error) {
	rows, err := s.pool.Query(ctx, `SELECT stream_id, last_revision, last_hash FROM streams`)
	if err != nil {
		return nil, fmt.Errorf("eventstore/postgres: stream heads: %w", err)
	}
	defer rows.Close()
	heads := map[string]eventstore.StreamHead{}
	for rows.Next() {
		var stream, hash string
		var rev int64
		if err := rows.Scan(&stream, &rev, &hash); err != nil {
			return nil, fmt.Errorf("eventstore/postgres: stream heads: %w", err)
		}
		heads[stream] = eventstore.StreamHead{Revision: uint64(rev), Hash: hash}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("eventstore/postgres: stream heads: %w", err)
	}
	return heads, nil
}
