package processmanagers

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/pglock"
	"github.com/mailroom/mailroom/readapi"
)

// Retention erases the emails past their account's retention, one process
// at a time (the retention lock), oldest first. It keeps no record of its
// progress: an email stays in the read model until its EmailErased, the
// last step of an erasure, so a pass cut off half-way, or an email that
// failed, is finished by the next.
type Retention struct {
	Pool        *pgxpool.Pool
	Commands    *commands.Service
	DefaultDays int // for accounts that set none
	Now         func() time.Time
	Interval    time.Duration
	Log         *slog.Logger
}

// retentionBatch is how many emails one look-up of a pass finds.
const retentionBatch = 500

// Run ticks until ctx ends.
func (r *Retention) Run(ctx context.Context) error {
	t := time.NewTicker(r.Interval)
	defer t.Stop()
	for {
		if _, _, err := r.OnTimer(ctx); err != nil && ctx.Err() == nil {
			r.Log.Error("retention", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// OnTimer is one tick of this process's timer: a pass, unless another
// process is running one or began one within the interval, so the
// instances run about one pass per interval between them. erased counts
// the emails this pass erased.
func (r *Retention) OnTimer(ctx context.Context) (ran bool, erased int, err error) {
	return r.tick(ctx, r.Interval)
}

// Tick runs one pass now, unless another process is running one: then it
// reports that it did not run. erased counts the emails this pass erased.
func (r *Retention) Tick(ctx context.Context) (ran bool, erased int, err error) {
	return r.tick(ctx, 0)
}

func (r *Retention) tick(ctx context.Context, every time.Duration) (ran bool, erased int, err error) {
	ran, err = timedPass(ctx, r.Pool, pglock.Retention, "retention", r.Now(), every, func(ctx context.Context) (perr error) {
		erased, perr = r.pass(ctx)
		return perr
	})
	return ran, erased, err
}

// retentionConcurrency is how many emails a pass erases at once.
const retentionConcurrency = 8

// pass erases every email past retention; the caller holds the lock. An
// email that cannot be erased is logged and the pass goes on with the
// others; it then reports how many failed, which the next pass tries
// again.
func (r *Retention) pass(ctx context.Context) (int, error) {
	meta := commands.Started("system:retention") // one run per pass
	erased := 0
	failed := 0
	// Batch after batch, each after the last one's oldest-first end: the
	// emails that failed, and those the read model still shows after
	// their erasure, are passed over rather than read again.
	var after *readapi.ExpiredEmail
	for {
		due, err := readapi.New(r.Pool, r.Now).EmailsPastRetention(ctx, r.DefaultDays, r.Now(), after, retentionBatch)
		if err != nil {
			return erased, err
		}
		newly, refused := r.erase(ctx, due, meta)
		erased, failed = erased+newly, failed+refused
		if err := ctx.Err(); err != nil {
			return erased, err
		}
		if len(due) < retentionBatch {
			break
		}
		after = &due[len(due)-1]
	}
	if failed > 0 {
		return erased, fmt.Errorf("%d email(s) past retention could not be erased (each is logged); the next pass tries again", failed)
	}
	return erased, nil
}

// erase erases the emails of due, several at once, and answers how many it
// erased and how many it could not. One that fails is logged; it does not
// stop the others.
func (r *Retention) erase(ctx context.Context, due []readapi.ExpiredEmail, meta commands.Meta) (erased, failed int) {
	// Several at a time: each erasure is a few round trips (blobs, key,
	// event), and one at a time fell behind a steady send rate.
	var (
		newly, refused atomic.Int64
		g              errgroup.Group
	)
	g.SetLimit(retentionConcurrency)
	for _, e := range due {
		g.Go(func() error {
			done, err := r.Commands.EraseEmail(ctx, e.EmailID, email.ErasedByRetention, "", meta)
			if done {
				newly.Add(1)
			}
			if err != nil && ctx.Err() == nil {
				r.Log.Error("retention could not erase an email", "email_id", e.EmailID, "account_id", e.AccountID, "err", err)
				refused.Add(1)
			}
			return nil
		})
	}
	g.Wait()
	return int(newly.Load()), int(refused.Load())
}
