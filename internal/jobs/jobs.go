// Package jobs is Mailroom's work queue: River (github.com/riverqueue/river)
// on the same PostgreSQL database. Process managers turn events into jobs
// through a Reader (one reader of the $all log per process manager, the jobs
// inserted in the transaction that moves its checkpoint), and every worker
// process runs one River client that claims and works them, so the work is
// shared by all worker processes and a dead one's claims are taken over.
//
// The events stay the source of truth: a job is a to-do derived from them,
// and its worker reads the state it needs from the streams, so working a job
// twice (after a crash) repeats nothing that was recorded done.
package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
	"github.com/riverqueue/river/rivertype"
)

// The queues of a worker process's River client.
const (
	EmailQueue   = "email"   // sending emails
	WebhookQueue = "webhook" // webhook fan-out and delivery attempts
)

// Migrate brings River's tables (river_job, river_queue, …) to the version
// this build's River needs. database.Migrate runs it under its migration
// lock, after the project's own migrations.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: quiet()})
	if err != nil {
		return fmt.Errorf("jobs: migrations: %w", err)
	}
	if _, err := m.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("jobs: migrations: %w", err)
	}
	// River indexes its jobs' args and metadata with GIN for searching them
	// by hand; none of its own statements uses them, and keeping them costs
	// every insert, fetch and completion about a third more.
	for _, index := range unusedIndexes {
		if _, err := pool.Exec(ctx, "DROP INDEX CONCURRENTLY IF EXISTS "+index); err != nil {
			return fmt.Errorf("jobs: drop %s: %w", index, err)
		}
	}
	return nil
}

// unusedIndexes are River's indexes that Mailroom drops (see Migrate).
var unusedIndexes = []string{"river_job_args_index", "river_job_metadata_index"}

// PoolConns bounds the connections of a worker process's job queue pool:
// River's fetches, completions, notifications and maintenance.
const PoolConns = 12

// OpenPool returns the pool a worker process's River client runs on: the
// same database as pool, with commits that do not wait for the disk. A job
// queue write lost to a database crash is harmless: a lost completion runs
// the job again, and every job reads the streams first, so what was
// recorded done is not done twice; the events themselves are appended
// through the event store, whose commits do wait. It spares the write-ahead
// log a flush for every fetch and completion.
func OpenPool(ctx context.Context, pool *pgxpool.Pool) (*pgxpool.Pool, error) {
	cfg := pool.Config().Copy()
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	cfg.MaxConns = PoolConns
	cfg.MinConns = 0
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("jobs: pool: %w", err)
	}
	return p, nil
}

// Config is what a worker process's River client is built from.
type Config struct {
	// ID is the client's id (NewClientID), the name KeepAlive holds.
	ID string
	// Queues maps a queue name to its concurrency (River's MaxWorkers).
	Queues map[string]int
	// Workers holds every job kind's worker (river.AddWorker).
	Workers *river.Workers
	// JobTimeout ends a job's context; zero means DefaultJobTimeout.
	JobTimeout time.Duration
	// RescueAfter is how long a job may stay running before River hands it
	// to another worker process (its worker is presumed dead). Zero means
	// JobTimeout plus a minute.
	RescueAfter time.Duration
	Log         *slog.Logger
}

// DefaultJobTimeout bounds a job's run when Config.JobTimeout is zero.
const DefaultJobTimeout = 3 * time.Minute

// completedRetention is how long finished jobs stay in river_job. At a
// thousand emails a second River's default of a day would keep tens of
// millions of rows; the events already record what was done.
const completedRetention = 10 * time.Minute

// fetchCooldown is both how soon a worker fetches again after a fetch and
// how often a client that inserts tells the workers of new jobs in a queue:
// River's default of 100 ms for the latter let a job wait up to that long
// for a worker to hear of it.
const fetchCooldown = 2 * time.Millisecond

// NewClient returns the River client of a worker process: it works the
// given queues with the given workers, and wakes on a job's insertion
// (LISTEN/NOTIFY) with a short fetch cooldown so a job starts within
// milliseconds of the transaction that inserted it.
func NewClient(pool *pgxpool.Pool, cfg Config) (*river.Client[pgx.Tx], error) {
	timeout := cfg.JobTimeout
	if timeout <= 0 {
		timeout = DefaultJobTimeout
	}
	rescue := cfg.RescueAfter
	if rescue <= 0 {
		rescue = timeout + time.Minute
	}
	log := cfg.Log
	if log == nil {
		log = slog.Default()
	}
	queues := make(map[string]river.QueueConfig, len(cfg.Queues))
	for name, n := range cfg.Queues {
		queues[name] = river.QueueConfig{MaxWorkers: n}
	}
	return river.NewClient(riverpgxv5.New(pool), &river.Config{
		ID:                          cfg.ID,
		Queues:                      queues,
		Workers:                     cfg.Workers,
		FetchCooldown:               fetchCooldown,
		FetchPollInterval:           250 * time.Millisecond,
		JobTimeout:                  timeout,
		RescueStuckJobsAfter:        rescue,
		CompletedJobRetentionPeriod: completedRetention,
		RetryPolicy:                 Backoff{Min: time.Second, Max: 5 * time.Minute},
		Logger:                      quietAbove(log),
	})
}

// Backoff is the retry schedule of a failed job: doubling from Min up to
// Max with ±25 % jitter, so jobs that failed together (a provider outage)
// do not come back together.
type Backoff struct{ Min, Max time.Duration }

// NextRetry implements river.ClientRetryPolicy.
func (b Backoff) NextRetry(job *rivertype.JobRow) time.Time {
	return time.Now().Add(b.Delay(max(job.Attempt, 1)))
}

// Delay is the wait before retry number attempt (1 for the first).
func (b Backoff) Delay(attempt int) time.Duration {
	d := b.Min
	for i := 1; i < attempt && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	return time.Duration(float64(d) * (0.75 + rand.Float64()/2))
}

// quiet is a logger for River's own bookkeeping messages, which are noise
// at Info.
func quiet() *slog.Logger { return quietAbove(slog.Default()) }

func quietAbove(log *slog.Logger) *slog.Logger {
	return slog.New(levelFloor{log.Handler(), slog.LevelWarn})
}

// levelFloor passes on records at or above min only.
type levelFloor struct {
	slog.Handler
	min slog.Level
}

func (h levelFloor) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h levelFloor) WithAttrs(a []slog.Attr) slog.Handler {
	return levelFloor{h.Handler.WithAttrs(a), h.min}
}

func (h levelFloor) WithGroup(n string) slog.Handler {
	return levelFloor{h.Handler.WithGroup(n), h.min}
}

// Run runs a River client until ctx ends, then lets running jobs finish for
// a while before cancelling them; a cancelled job snoozes and is taken up
// at once by another process (or this one after a restart). A client that
// cannot start (the database refuses connections for a while) is started
// again, with a growing pause, until it does or ctx ends: the process's
// other readers wait out such an outage too, and a worker process must
// not end over one.
func Run(ctx context.Context, client *river.Client[pgx.Tx], log *slog.Logger) error {
	for pause := startPause; ; pause = min(2*pause, maxStartPause) {
		err := client.Start(context.WithoutCancel(ctx))
		if err == nil {
			break
		}
		log.Warn("job queue did not start; trying again", "err", err, "in", pause)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(pause):
		}
	}
	<-ctx.Done()
	soft, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := client.Stop(soft); err == nil {
		return nil
	}
	hard, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	client.StopAndCancel(hard)
	return nil
}

// The pauses between attempts to start a client.
const startPause, maxStartPause = 250 * time.Millisecond, 5 * time.Second
