package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// CheckWrittenHere refuses an event log written by a PostgreSQL cluster
// whose transaction ids are ahead of this one's. Events are ordered, and
// read, by the id of the transaction that wrote them, up to the oldest
// transaction still running here; a logical copy (pg_dump and pg_restore)
// onto another cluster keeps the old ids, so until this cluster's ids pass
// them its readers would see none of those events and order new ones
// before them: projections, exports and verification would all look fine
// on an almost empty log. Physical copies (base backups, PITR, snapshots)
// keep the cluster's ids and pass. The error says how to move this
// cluster's ids past the log's.
func CheckWrittenHere(ctx context.Context, pool *pgxpool.Pool) error {
	var last, next uint64
	err := pool.QueryRow(ctx, `SELECT transaction_id::text::numeric, pg_snapshot_xmax(pg_current_snapshot())::text::numeric
		FROM events ORDER BY transaction_id DESC, seq DESC LIMIT 1`).Scan(&last, &next)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("eventstore/postgres: check the log's transaction ids: %w", err)
	}
	if last < next {
		return nil
	}
	return fmt.Errorf("eventstore/postgres: the event log was written by another PostgreSQL cluster, whose transaction ids "+
		"(up to %d) are ahead of this one's (%d): restored from a logical dump? Its events would stay unread. Stop "+
		"PostgreSQL, run `pg_resetwal -e %d -D <data directory>` to move this cluster's transaction ids past the log's, "+
		"and start it again; or restore from a physical backup (see operations.md, Backup and restore)", last, next, last>>32+1)
}
