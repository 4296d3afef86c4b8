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
// own, and every process hands back the running jobs of a client whose
// lock nobody has held for deadAfter: its connection, hence its process,
// is gone (a live process whose connection dropped has taken it again).

// NewClientID returns a River client id unique to this process.
func NewClientID() string {
	b := make([]byte, 8)
	rand.Read(b)
	return "mailroom-" + hex.EncodeToString(b)
}

// rescueEvery is how often a process looks for dead processes' jobs.
const rescueEvery = 2 * time.Second

// deadAfter is how long a client's liveness lock must stay free before its
// process counts as dead. A live process whose lock connection dropped (a
// network blip, a proxy's idle timeout) takes its lock again within about
// a second, and its jobs are still running there: handing them back at
// once would run them twice.
const deadAfter = 5 * time.Second

// LivenessName names the liveness lock's holder in a Tenures record.
const LivenessName = "job-queue-liveness"

// KeepAlive holds clientID's liveness lock and hands back the jobs of dead
// clients until ctx ends; it closes held once it first holds the lock (the
// client must not claim jobs before). It returns once ctx ends. tenures
// records how the lock is held, under LivenessName.
func KeepAlive(ctx context.Context, pool *pgxpool.Pool, clientID string, tenures *pglock.Tenures, log *slog.Logger, held chan<- struct{}) {
	markHeld := sync.OnceFunc(func() { close(held) })
	rescue := &Rescuer{Pool: pool, Self: clientID, DeadAfter: deadAfter}
	for ctx.Err() == nil {
		err := keepAlive(ctx, rescue, tenures, log, markHeld)
		if ctx.Err() != nil {
			return
		}
		log.Warn("job queue liveness connection lost; reconnecting", "err", err)
		sleep(ctx, time.Second)
	}
}

func keepAlive(ctx context.Context, rescue *Rescuer, tenures *pglock.Tenures, log *slog.Logger, markHeld func()) error {
	opts := pglock.Options{Every: rescueEvery, Name: LivenessName, Tenures: tenures}
	return pglock.Hold(ctx, rescue.Pool.Config().ConnConfig, pglock.RiverClient(rescue.Self), opts, func(ctx context.Context, _ *pglock.Conn) error {
		markHeld()
		tick := time.NewTicker(rescueEvery)
		defer tick.Stop()
		for {
			if n, err := rescue.Pass(ctx); err != nil && ctx.Err() == nil {
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

// Rescuer hands back the running jobs of worker processes that are gone.
// A client whose liveness lock is free is presumed gone only once the lock
// is still free DeadAfter after a pass first found it so.
type Rescuer struct {
	Pool      *pgxpool.Pool
	Self      string // this process's client, never rescued
	DeadAfter time.Duration

	freeSince map[string]time.Time
}

// Pass looks once at the clients with running jobs, and makes the running
// jobs of those presumed gone available again; it returns how many it
// moved. A client that never took the lock (an older release) is left to
// River's own rescue.
func (r *Rescuer) Pass(ctx context.Context) (int, error) {
	qctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	rows, err := r.Pool.Query(qctx, `SELECT DISTINCT attempted_by[array_length(attempted_by, 1)]
		FROM river_job WHERE state = 'running' AND attempted_by IS NOT NULL`)
	if err != nil {
		return 0, err
	}
	clients, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, err
	}
	if r.freeSince == nil {
		r.freeSince = map[string]time.Time{}
	}
	running := map[string]bool{}
	moved := 0
	for _, c := range clients {
		if c == r.Self || len(c) < len("mailroom-") || c[:len("mailroom-")] != "mailroom-" {
			continue
		}
		running[c] = true
		since, seen := r.freeSince[c]
		rescue := seen && time.Since(since) >= r.DeadAfter
		n, free, err := rescueIfDead(qctx, r.Pool, c, rescue)
		if err != nil {
			return moved, fmt.Errorf("client %s: %w", c, err)
		}
		switch {
		case !free:
			delete(r.freeSince, c) // alive, or back
		case !seen:
			r.freeSince[c] = time.Now()
		}
		moved += n
	}
	for c := range r.freeSince {
		if !running[c] {
			delete(r.freeSince, c)
		}
	}
	return moved, nil
}

// rescueIfDead tries c's liveness lock, within a transaction so it is
// released at its end, and reports whether it was free. If it was and
// rescue is set, c's running jobs are made available.
func rescueIfDead(ctx context.Context, pool *pgxpool.Pool, c string, rescue bool) (moved int, free bool, err error) {
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock($1)", int64(pglock.RiverClient(c))).Scan(&free); err != nil || !free || !rescue {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE river_job SET state = 'available', scheduled_at = now()
			WHERE state = 'running' AND attempted_by[array_length(attempted_by, 1)] = $1`, c)
		moved = int(tag.RowsAffected())
		return err
	})
	return moved, free, err
}
