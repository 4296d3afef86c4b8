package app

import (
	"cmp"
	"context"
	"time"

	"github.com/riverqueue/river"

	"github.com/mailroom/mailroom/internal/database"
	"github.com/mailroom/mailroom/internal/jobs"
	"github.com/mailroom/mailroom/processmanagers"
	"github.com/mailroom/mailroom/readapi"
)

// webhooks is webhook delivery as this process runs it.
func (a *App) webhooks() *processmanagers.Webhooks {
	schedule, _ := a.Config.RetrySchedule() // validated at Open
	return &processmanagers.Webhooks{
		Pool: a.Pool, Commands: a.Commands, Box: a.Box,
		Client:   a.Egress.Client(cmp.Or(a.Config.WebhookTimeout, 10*time.Second)),
		Settle:   a.settle,
		Schedule: schedule, Now: a.clock, Log: a.Log,
		PerAccount: a.Config.WebhookAccountConcurrency,
		// An endpoint gets at most half its account's share (and 16), so
		// one slow endpoint leaves room for the account's others.
		PerEndpoint: min(16, max(1, a.Config.WebhookAccountConcurrency/2)),
		UserAgent:   "Mailroom-Webhooks/" + Version,
		Outcomes:    a.Outcomes,
		Sweep:       5 * time.Second,
		Tenures:     a.Tenures,
		Endpoints: func(ctx context.Context, accountID, eventType string, at time.Time) ([]processmanagers.Target, error) {
			targets, err := readapi.WebhookTargets(ctx, a.Pool, accountID, eventType, at)
			out := make([]processmanagers.Target, len(targets))
			for i, t := range targets {
				out[i] = processmanagers.Target(t)
			}
			return out, err
		},
	}
}

// webhookJobs adds webhook delivery's workers to workers and returns the
// one reader of the log that turns events into its jobs.
func (a *App) webhookJobs(hooks *processmanagers.Webhooks, workers *river.Workers) *jobs.Reader {
	hooks.Register(workers)
	r := jobs.NewReader(processmanagers.WebhookReaderName, a.Pool, a.Store, hooks.Plan, a.Log)
	r.Inherit = processmanagers.WebhookShardCheckpoints
	r.Prepare = hooks.Prepare
	r.Tenures, r.Passing = a.Tenures, database.Unreachable
	return r
}
