package processmanagers

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Exclusive runs run in at most one process at a time: it waits for a
// PostgreSQL session advisory lock, runs while the lock's connection lives,
// and tries again (about once a second) when it loses or cannot get it.
// It returns when ctx ends.
func Exclusive(ctx context.Context, pool *pgxpool.Pool, lock int64, log *slog.Logger, name string, run func(ctx context.Context)) {
	for {
		if err := lead(ctx, pool, lock, run); err != nil && ctx.Err() == nil {
			log.Warn("exclusive worker", "worker", name, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

func lead(ctx context.Context, pool *pgxpool.Pool, lock int64, run func(context.Context)) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	var mine bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", lock).Scan(&mine); err != nil || !mine {
		return err
	}
	lctx, cancel := context.WithCancel(ctx)
	watch := make(chan struct{})
	go func() { // losing the connection loses the lock: stop at once
		defer close(watch)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-lctx.Done():
				return
			case <-t.C:
				if err := conn.Ping(lctx); err != nil && lctx.Err() == nil {
					cancel()
					return
				}
			}
		}
	}()
	run(lctx)
	cancel()
	<-watch
	_, err = conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", lock)
	return err
}
