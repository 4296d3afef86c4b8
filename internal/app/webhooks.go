package app

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/processmanagers"
)

// webhooks is webhook delivery as this process runs it.
func (a *App) webhooks() *processmanagers.Webhooks {
	schedule, _ := a.Config.RetrySchedule() // validated at Open
	return &processmanagers.Webhooks{
		Pool: a.Pool, Commands: a.Commands, Box: a.Box,
		Client:   a.Egress.Client(10 * time.Second),
		Settle:   a.Waiter.WaitFor,
		Schedule: schedule, Now: a.clock, Log: a.Log,
		PerAccount: a.Config.WebhookAccountConcurrency,
		// An endpoint gets at most half its account's share (and 16), so
		// one slow endpoint leaves room for the account's others.
		PerEndpoint: min(16, max(1, a.Config.WebhookAccountConcurrency/2)),
		UserAgent:   "Mailroom-Webhooks/" + Version,
		Outcomes:    a.Outcomes,
		Sweep:       5 * time.Second,
		Endpoints: func(ctx context.Context, accountID, eventType string, at time.Time) ([]processmanagers.Target, error) {
			rows, err := a.Pool.Query(ctx, `SELECT id, disabled_reason IS NOT NULL FROM webhook_endpoints
				WHERE account_id = $1 AND $2 = ANY(event_types) AND created_at <= $3 ORDER BY id`, accountID, eventType, at)
			if err != nil {
				return nil, err
			}
			return pgx.CollectRows(rows, pgx.RowToStructByPos[processmanagers.Target])
		},
	}
}

// startWebhooks prepares webhook delivery on River: the job tables, a
// client working the webhook queue, and the one handler of the log that
// turns events into jobs. It returns what runs the client and the sweep
// until ctx ends.
func (a *App) startWebhooks(ctx context.Context, router *processmanagers.Router) (func(context.Context) error, error) {
	driver := riverpgxv5.New(a.Pool)
	if err := migrateJobs(ctx, a.Pool, driver, a.Log); err != nil {
		return nil, fmt.Errorf("job queue schema: %w", err)
	}
	hooks := a.webhooks()
	workers := river.NewWorkers()
	hooks.Register(workers)
	client, err := river.NewClient(driver, &river.Config{
		Queues:  map[string]river.QueueConfig{processmanagers.WebhookQueue: {MaxWorkers: a.Config.WebhookConcurrency}},
		Workers: workers, Logger: a.Log,
		// A new job is fetched within a few milliseconds of its insert, and
		// a snoozed one (a retry's short wait, an account over its share)
		// soon after it wakes.
		FetchCooldown:               5 * time.Millisecond,
		FetchPollInterval:           50 * time.Millisecond,
		CompletedJobRetentionPeriod: time.Hour,
	})
	if err != nil {
		return nil, err
	}
	router.Handle("webhook-jobs", func(ctx context.Context, ev eventstore.RecordedEvent) error {
		jobs, err := hooks.Plan(ctx, ev)
		if err != nil || len(jobs) == 0 {
			return err
		}
		_, err = client.InsertMany(ctx, jobs)
		return processmanagers.Transient(err)
	})
	return func(ctx context.Context) error {
		// Stopping is Stop's: a cancelled context would cancel attempts
		// under way instead of letting them finish and be recorded.
		if err := client.Start(context.WithoutCancel(ctx)); err != nil {
			return err
		}
		go hooks.RunSweep(ctx, client)
		<-ctx.Done()
		// Attempts under way finish and are recorded.
		stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		return client.Stop(stop)
	}, nil
}

// jobsMigrationLock makes processes starting together migrate the job
// queue's tables one after another.
const jobsMigrationLock = 7261004

func migrateJobs(ctx context.Context, pool *pgxpool.Pool, driver *riverpgxv5.Driver, log *slog.Logger) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", jobsMigrationLock); err != nil {
		return err
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", jobsMigrationLock)
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Logger: log})
	if err != nil {
		return err
	}
	_, err = migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	return err
}
