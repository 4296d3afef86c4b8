package processmanagers

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain/delivery"
	"github.com/mailroom/mailroom/internal/pglock"
	"github.com/mailroom/mailroom/projections"
	"github.com/mailroom/mailroom/readapi"
)

type releaseWorker struct {
	river.WorkerDefaults[ReleaseArgs]
	w *Webhooks
}

// Work queues the pending deliveries of a resumed endpoint or a reinstated
// account, once the read model shows the change.
func (rw *releaseWorker) Work(ctx context.Context, job *river.Job[ReleaseArgs]) error {
	w, a := rw.w, job.Args
	projection := projections.WebhooksName
	if a.AccountID != "" {
		projection = projections.AccountsName
	}
	if w.Settle(ctx, a.Position, projection) != nil {
		return errors.New("the read model is behind the event")
	}
	client := river.ClientFromContext[pgx.Tx](ctx)
	again := false
	// Oldest first: River starts jobs queued together in the order of
	// their ids.
	for after := (readapi.PendingDelivery{}); ; {
		list, err := readapi.PendingOf(ctx, w.Pool, a.EndpointID, a.AccountID, after, 1000)
		if err != nil {
			return err
		}
		if len(list) == 0 {
			break
		}
		after = list[len(list)-1]
		due := make([]readapi.DueDelivery, len(list))
		for i, d := range list {
			due[i] = d.DueDelivery
		}
		running, err := insertDue(ctx, client, nextAttempts(due))
		if err != nil {
			return err
		}
		again = again || running
	}
	if looks := releaseLooksOf(job.Metadata); again && looks < releaseLooks {
		// An attempt that saw the endpoint or account still held may be
		// ending without sending: look again once it has. Attempts that
		// keep running are a busy receiver's; the sweep covers any left.
		_ = river.MetadataSet(ctx, "release_looks", looks+1)
		return river.JobSnooze(releaseAgainAfter)
	}
	return nil
}

// releaseLooksOf is how often the release's job looked again so far,
// counted in its metadata: River does not count a snooze as an attempt,
// so job.Attempt stays where it was.
func releaseLooksOf(metadata []byte) int {
	var m struct {
		Looks int `json:"release_looks"`
	}
	_ = json.Unmarshal(metadata, &m)
	return m.Looks
}

// A release looks again every releaseAgainAfter, releaseLooks times at
// most, at deliveries whose attempt was running when it queued them.
const (
	releaseAgainAfter = 500 * time.Millisecond
	releaseLooks      = 20
)

type dropWorker struct {
	river.WorkerDefaults[DropArgs]
	w *Webhooks
}

// Work drops every delivery of the erased email, once the read model lists
// the ones recorded before the erasure.
func (dw *dropWorker) Work(ctx context.Context, job *river.Job[DropArgs]) error {
	w, a := dw.w, job.Args
	if w.Settle(ctx, a.Position, projections.WebhooksName) != nil {
		return errors.New("the read model is behind the event")
	}
	ids, err := readapi.DeliveriesOfEmail(ctx, w.Pool, a.EmailID)
	if err != nil {
		return err
	}
	meta := dispatchMeta.Following(a.Erasure, a.CorrelationID)
	if a.Erasure == "" {
		meta = commands.Started(dispatchMeta.Actor)
	}
	for _, id := range ids {
		if err := w.Commands.DropDelivery(ctx, id, true, meta); err != nil {
			return err
		}
	}
	return nil
}

// nextAttempts is the job of each delivery's next attempt.
func nextAttempts(list []readapi.DueDelivery) []river.InsertManyParams {
	jobs := make([]river.InsertManyParams, len(list))
	for i, d := range list {
		jobs[i] = river.InsertManyParams{Args: AttemptArgs{DeliveryID: d.ID, AccountID: d.AccountID, EndpointID: d.EndpointID, Attempt: d.Attempts + 1}}
	}
	return jobs
}

// insertDue queues attempts that are due now. One whose job exists already
// but waits in the queue for later (a retry River scheduled before the
// delivery was held, by a clock that has since moved) is made available:
// its job snoozes again if it is not due yet. running reports that some
// attempt's job was still running: it may be one that found the delivery
// held an instant ago and is about to end without attempting, so the
// caller must queue again once it has ended.
func insertDue(ctx context.Context, client *river.Client[pgx.Tx], jobs []river.InsertManyParams) (running bool, err error) {
	res, err := client.InsertMany(ctx, jobs)
	if err != nil {
		return false, err
	}
	for _, r := range res {
		if !r.UniqueSkippedAsDuplicate {
			continue
		}
		switch r.Job.State {
		case rivertype.JobStateScheduled:
			if _, err := client.JobRetry(ctx, r.Job.ID); err != nil {
				return false, err
			}
		case rivertype.JobStateRunning:
			running = true
		}
	}
	return running, nil
}

// RunSweep sweeps the read model every w.Sweep while this process holds
// the sweep lock, until ctx ends. It needs the River client to queue with.
func (w *Webhooks) RunSweep(ctx context.Context, client *river.Client[pgx.Tx]) {
	o := pglock.Options{Name: "webhook-sweep", Tenures: w.Tenures}
	pglock.Lead(ctx, w.Pool.Config().ConnConfig, pglock.WebhookSweep, o, w.Log, func(ctx context.Context) {
		t := time.NewTicker(w.Sweep)
		defer t.Stop()
		for {
			if err := w.expireHeld(ctx); err != nil && ctx.Err() == nil {
				w.Log.Warn("webhook expiry", "err", err)
			}
			if err := w.requeue(ctx, client); err != nil && ctx.Err() == nil {
				w.Log.Warn("webhook sweep", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
}

// overdue is how late a delivery must be before the sweep queues it again:
// its own job is normally under way.
const overdue = time.Minute

// sweepBatch is how many overdue deliveries one sweep looks at.
const sweepBatch = 500

// requeue queues deliveries that are due for longer than overdue and may
// be attempted: their job was lost (a crash between recording and
// queueing). A job still waiting is the same job (unique while pending).
// Each sweep looks at sweepBatch of them, from where the last stopped, and
// starts over once it has reached the end: a backlog larger than a batch
// (a slow receiver's deliveries waiting for their share) does not hide
// another delivery's lost job behind it.
func (w *Webhooks) requeue(ctx context.Context, client *river.Client[pgx.Tx]) error {
	list, err := readapi.Overdue(ctx, w.Pool, w.Now().Add(-overdue), w.sweptTo, sweepBatch)
	if err != nil {
		return err
	}
	w.sweptTo = readapi.OverdueDelivery{}
	if len(list) == sweepBatch {
		w.sweptTo = list[len(list)-1]
	}
	if len(list) == 0 {
		return nil
	}
	due := make([]readapi.DueDelivery, len(list))
	for i, d := range list {
		due[i] = d.DueDelivery
	}
	// A running job is the delivery's own, under way: nothing to add.
	_, err = insertDue(ctx, client, nextAttempts(due))
	return err
}

// sweepEvery is how often held deliveries are looked at for expiry; one
// may outlive delivery.HoldCap by that much.
const sweepEvery = time.Minute

// expireHeld fails the deliveries that waited longer than
// delivery.HoldCap for their paused or disabled endpoint, at most 500 per
// sweepEvery. Each is decided on its own stream.
func (w *Webhooks) expireHeld(ctx context.Context) error {
	now := w.Now()
	if now.Sub(w.lastSweep) < sweepEvery {
		return nil
	}
	list, err := readapi.HeldSince(ctx, w.Pool, now.Add(-delivery.HoldCap), 500)
	if err != nil {
		return err
	}
	meta := commands.Started(dispatchMeta.Actor)
	for _, h := range list {
		if err := w.Commands.ExpireDelivery(ctx, h.ID, h.Disabled, meta); err != nil {
			return err
		}
	}
	w.lastSweep = now
	return nil
}
