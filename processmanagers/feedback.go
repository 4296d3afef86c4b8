package processmanagers

import (
	"context"
	"errors"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/internal/pglock"
	"github.com/mailroom/mailroom/internal/provider/ses"
)

// SESFeedback long-polls the SES events queue while this instance holds the
// feedback lock, recording each feedback event once on its email. A message
// is deleted from the queue only after its events are recorded.
// tenures records how the poller is doing.
func SESFeedback(ctx context.Context, p *ses.Provider, cmds *commands.Service, pool *pgxpool.Pool, tenures *pglock.Tenures, log *slog.Logger) {
	o := pglock.Options{Name: "ses-feedback", Tenures: tenures}
	pglock.Lead(ctx, pool.Config().ConnConfig, pglock.SESFeedback, o, log, func(ctx context.Context) {
		err := p.PollFeedback(ctx, func(ctx context.Context, fbs []ses.Feedback) error {
			for _, fb := range fbs {
				if fb.Ignored {
					continue
				}
				if !isEmailID(fb.EmailID) {
					// Not about an email Mailroom sent: identity notifications
					// carry no message tags, and a tag that is no email id was
					// not set by Mailroom. Redelivery cannot change that.
					log.Warn("ses feedback names no Mailroom email; dropped (publish events through the configuration set, whose events carry the mailroom_email_id tag)",
						"event_type", fb.EventType, "ses_message_id", fb.MessageID, "tagged", fb.EmailID != "")
					continue
				}
				var evs []domain.Event
				if fb.Event != nil {
					evs = append(evs, fb.Event)
				}
				// No request: the feedback continues its email's story.
				meta := commands.Meta{Actor: "system:ses-feedback"}
				err := cmds.RecordEmailFeedback(ctx, fb.EmailID, evs, fb.Reject, meta)
				if errors.Is(err, commands.ErrUnknownEmail) {
					log.Warn("ses feedback for an email the event log does not hold (restored from a backup?); dropped",
						"event_type", fb.EventType, "email_id", fb.EmailID, "ses_message_id", fb.MessageID)
					continue
				}
				if err != nil {
					return err // kept in the queue; SQS redelivers it
				}
			}
			return nil
		}, func(err error) { tenures.Working(o.Name, err) })
		if err != nil && ctx.Err() == nil {
			log.Warn("ses feedback", "err", err)
		}
	})
}

// isEmailID reports whether id is an email id as Mailroom makes them: a
// UUID in its canonical form.
func isEmailID(id string) bool {
	u, err := uuid.Parse(id)
	return err == nil && u.String() == id
}
