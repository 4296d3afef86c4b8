package processmanagers

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/internal/pglock"
	"github.com/mailroom/mailroom/internal/provider/ses"
)

// SESFeedback long-polls the SES events queue while this instance holds the
// feedback lock, recording each feedback event once on its email. A message
// is deleted from the queue only after its events are recorded.
func SESFeedback(ctx context.Context, p *ses.Provider, cmds *commands.Service, pool *pgxpool.Pool, log *slog.Logger) {
	pglock.Lead(ctx, pool.Config().ConnConfig, pglock.SESFeedback, log, "ses-feedback", func(ctx context.Context) {
		err := p.PollFeedback(ctx, func(ctx context.Context, fbs []ses.Feedback) error {
			for _, fb := range fbs {
				if fb.Ignored || fb.EmailID == "" {
					continue
				}
				var evs []domain.Event
				if fb.Event != nil {
					evs = append(evs, fb.Event)
				}
				meta := commands.Started("system:ses-feedback") // one run per notification
				if err := cmds.RecordEmailFeedback(ctx, fb.EmailID, evs, fb.Reject, meta); err != nil {
					return err // kept in the queue; SQS redelivers it
				}
			}
			return nil
		})
		if err != nil && ctx.Err() == nil {
			log.Warn("ses feedback", "err", err)
		}
	})
}
