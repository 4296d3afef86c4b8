package jobs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailroom/mailroom/internal/pglock"
)

// River rescues a job left running by a dead process only after
// RescueAfter, which must outlast the longest job of a live one: minutes.
// A process that crashes mid-burst would leave its claimed emails waiting
// that long. So each worker process also holds a PostgreSQL session
// advisory lock named after its River client id on a connection of its
// own, and every process hands back at once the running jobs of a client
// whose lock nobody holds: its connection, hence its process, is gone.

// NewClientID returns a River client id unique to this process.
func NewClientID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "mailroom-" + hex.EncodeToString(b)
}

// rescueEvery is how often a process looks for dead processes' jobs.
const rescueEvery = 2 * time.Second

// KeepAlive holds clientID's liveness lock and hands back the jobs of dead
// clients until ctx ends; it closes held once it first holds the lock (the
// client must not claim jobs before). It returns once ctx ends.
func KeepAlive(ctx context.Context, pool *pgxpool.Pool, clientID string, log *slog.Logger, held chan<- struct{}) {
	markHeld := sync.OnceFunc(func() { close(held) })
	for ctx.Err() == nil {
		err := keepAlive(ctx, pool, clientID, log, markHeld)
		if ctx.Err() != nil {
			return
		}
		log.Warn("job queue liveness connection lost; reconnecting", "err", err)
		sleep(ctx, time.Second)
	}
}

func keepAlive(ctx context.Context, pool *pgxpool.Pool, clientID string, log *slog.Logger, markHeld func()) error {
	opts := pglock.Options{Wait: pglock.Block, Every: rescueEvery}
	return pglock.Hold(ctx, pool.Config().ConnConfig, pglock.RiverClient(clientID), opts, func(ctx context.Context, _ *pglock.Conn) error {
		markHeld()
		tick := time.NewTicker(rescueEvery)
		defer tick.Stop()
		for {
			if n, err := RescueDead(ctx, pool, clientID); err != nil {
				log.Warn("job queue: looking for dead workers' jobs failed", "err", err)
			} else if n > 0 {
				log.Warn("job queue: handed back jobs of a stopped worker process", "jobs", n)
			}
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
		}
	})
}

// RescueDead makes the running jobs of clients other than self whose
// liveness lock is free available again, and returns how many it moved.
// A client that never took the lock (an older release) is left to River's
// own rescue.
func RescueDead(ctx context.Context, pool *pgxpool.Pool, self string) (int, error) {
	qctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	rows, err := pool.Query(qctx, `SELECT DISTINCT attempted_by[array_length(attempted_by, 1)]
		FROM river_job WHERE state = 'running' AND attempted_by IS NOT NULL`)
	if err != nil {
		return 0, err
	}
	clients, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, err
	}
	moved := 0
	for _, c := range clients {
		if c == self || len(c) < len("mailroom-") || c[:len("mailroom-")] != "mailroom-" {
			continue
		}
		n, err := rescueIfDead(qctx, pool, c)
		if err != nil {
			return moved, fmt.Errorf("client %s: %w", c, err)
		}
		moved += n
	}
	return moved, nil
}

// rescueIfDead takes c's liveness lock, within a transaction so it is
// released at its end: if it can, c's process is gone and its running jobs
// are made available.
func rescueIfDead(ctx context.Context, pool *pgxpool.Pool, c string) (int, error) {
	moved := 0
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var free bool
		if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1)", int64(pglock.RiverClient(c))).Scan(&free); err != nil || !free {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE river_job SET state = 'available', scheduled_at = now()
			WHERE state = 'running' AND attempted_by[array_length(attempted_by, 1)] = $1`, c)
		moved = int(tag.RowsAffected())
		return err
	})
	return moved, err
}
