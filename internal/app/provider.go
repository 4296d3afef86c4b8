package app

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/config"
	"github.com/mailroom/mailroom/internal/provider"
	"github.com/mailroom/mailroom/internal/provider/sandbox"
	"github.com/mailroom/mailroom/internal/provider/ses"
	"github.com/mailroom/mailroom/internal/provider/smtp"
)

// mailProvider is what the configured provider brings. openProvider is the
// one place that tells the providers apart; the rest of the app asks these
// fields.
type mailProvider struct {
	sender     provider.Sender
	identities provider.Identities
	// feedback is what is known at sending (the sandbox's simulator, an
	// SMTP relay's acceptance); nil when it comes later (SES).
	feedback func(email.State, time.Time) []domain.Event
	// unsigned: the provider does not sign, so the pipeline adds DKIM.
	unsigned bool
	// sandbox: a development provider; the first run verifies its domain.
	sandbox bool
	// ses and identityCheck are set for SES only: its feedback queue and
	// send quota, and its view of a domain's verification.
	ses           *ses.Provider
	identityCheck commands.IdentityCheck
}

func openProvider(ctx context.Context, cfg config.Config, log *slog.Logger) (mailProvider, error) {
	switch cfg.Provider {
	case "sandbox":
		out, err := sandbox.NewOutbox(cfg.SandboxOutbox, cfg.SandboxLatency)
		return mailProvider{sender: out, identities: sandbox.NewIdentities(), feedback: sandbox.Feedback, sandbox: true}, err
	case "smtp":
		relay, err := smtp.New(cfg.SMTPURL)
		if err != nil {
			return mailProvider{}, fmt.Errorf("%s: %w", config.Setting("smtp-url"), err)
		}
		return mailProvider{sender: relay, identities: provider.NoIdentities{}, feedback: smtp.Feedback, unsigned: true}, nil
	case "ses":
		p, err := ses.New(ctx, ses.Config{Region: cfg.Region, Endpoint: cfg.SESEndpoint,
			ConfigurationSet: cfg.SESConfigSet, EventsQueueURL: cfg.SESEventsQueueURL, Logger: log})
		if err != nil {
			return mailProvider{}, fmt.Errorf("ses: %w", err)
		}
		warnNoFeedback(cfg, log)
		return mailProvider{sender: p, identities: p, ses: p, identityCheck: p.IdentityVerification}, nil
	}
	return mailProvider{}, fmt.Errorf("%s: %q is not one of sandbox, ses, smtp", config.Setting("provider"), cfg.Provider)
}

// warnNoFeedback says, in a worker, that SES without a configuration set
// or an events queue sends but never learns what became of a message: no
// delivery, bounce or complaint arrives, emails stay sent and bounced
// addresses are never suppressed. Nothing else would say so.
func warnNoFeedback(cfg config.Config, log *slog.Logger) {
	if !cfg.Has("workers") || (cfg.SESConfigSet != "" && cfg.SESEventsQueueURL != "") {
		return
	}
	log.Warn("SES delivery feedback is off: no delivery, bounce or complaint will be recorded, and bounced addresses "+
		"will not be suppressed; set both MAILROOM_SES_CONFIGURATION_SET and MAILROOM_SES_EVENTS_QUEUE_URL (see docs/ses.md)",
		"MAILROOM_SES_CONFIGURATION_SET", cfg.SESConfigSet, "MAILROOM_SES_EVENTS_QUEUE_URL", cfg.SESEventsQueueURL)
}
