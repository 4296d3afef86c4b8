package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/mailroom/mailroom/internal/eventstore"
)

var _ eventstore.HeadRecorder = (*Store)(nil)

// RecordedHeads returns the last revision and hash of the streams named,
// or of every stream, as the streams table holds them, which appends keep
// beside the events.
func (s *Store) RecordedHeads(ctx context.Context, streams ...string) (map[string]eventstore.StreamHead, error) {
	var rows pgx.Rows
	var err error
	if len(streams) == 0 {
		rows, err = s.pool.Query(ctx, `SELECT stream_id, last_revision, last_hash FROM streams`)
	} else {
		rows, err = s.pool.Query(ctx, `SELECT stream_id, last_revision, last_hash FROM streams WHERE stream_id = ANY($1)`, streams)
	}
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
		if rev < 0 {
			// No append writes one: the table was changed by hand.
			return nil, fmt.Errorf("eventstore/postgres: stream heads: stream %s has recorded head revision %d, which is no revision: the streams table was changed outside an append", stream, rev)
		}
		heads[stream] = eventstore.StreamHead{Revision: uint64(rev), Hash: hash}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("eventstore/postgres: stream heads: %w", err)
	}
	return heads, nil
}
