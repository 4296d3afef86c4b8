package jobs_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/mailroom/mailroom/internal/jobs"
	"github.com/mailroom/mailroom/internal/pgtest"
)

// A worker's client that the database refuses when it starts (a full
// server, a restart) keeps trying, and works its jobs once it gets in: the
// worker process does not end over the outage.
func TestRunStartsOnceTheDatabaseLetsItIn(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	cfg := pool.Config().Copy()
	cfg.MinConns = 0
	var refusals atomic.Int32
	refusals.Store(3)
	dial := cfg.ConnConfig.DialFunc
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if refusals.Add(-1) >= 0 {
			return nil, errors.New("sorry, too many clients already")
		}
		return dial(ctx, network, addr)
	}
	refused, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer refused.Close()

	worked := make(chan string, 1)
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(_ context.Context, job *river.Job[noteArgs]) error {
		worked <- job.Args.EventID
		return nil
	}))
	retries := &counting{msg: "job queue did not start; trying again"}
	log := slog.New(retries)
	client, err := jobs.NewClient(refused, jobs.Config{ID: jobs.NewClientID(), Queues: map[string]int{"test": 1}, Workers: workers,
		Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	inserter, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	id := uuid.NewString()
	if _, err := inserter.Insert(ctx, noteArgs{EventID: id}, &river.InsertOpts{Queue: "test"}); err != nil {
		t.Fatal(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	ended := make(chan error, 1)
	go func() { ended <- jobs.Run(runCtx, client, log) }()
	select {
	case got := <-worked:
		if got != id {
			t.Fatalf("worked %s, want %s", got, id)
		}
	case err := <-ended:
		t.Fatalf("Run ended while the database refused it: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the job was never worked")
	}
	if retries.n.Load() == 0 {
		t.Fatal("the client started at the first try: its connections were never refused")
	}
	stop()
	if err := <-ended; err != nil {
		t.Fatal(err)
	}
}

// counting is a log handler that counts the records of one message.
type counting struct {
	msg string
	n   atomic.Int32
}

func (c *counting) Enabled(context.Context, slog.Level) bool { return true }
func (c *counting) Handle(_ context.Context, r slog.Record) error {
	if r.Message == c.msg {
		c.n.Add(1)
	}
	return nil
}
func (c *counting) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *counting) WithGroup(string) slog.Handler      { return c }
