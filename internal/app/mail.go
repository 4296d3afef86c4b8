package app

import (
	"context"
	"crypto/rsa"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/mailroom/mailroom/internal/blob"
	"github.com/mailroom/mailroom/internal/datakeys"
	"github.com/mailroom/mailroom/internal/dkimkey"
	"github.com/mailroom/mailroom/internal/egress"
	"github.com/mailroom/mailroom/internal/jobs"
	"github.com/mailroom/mailroom/internal/provider"
	"github.com/mailroom/mailroom/internal/provider/ratelimit"
	"github.com/mailroom/mailroom/internal/provider/ses"
	"github.com/mailroom/mailroom/internal/scan"
	"github.com/mailroom/mailroom/internal/secretbox"
	"github.com/mailroom/mailroom/processmanagers"
	"github.com/mailroom/mailroom/readapi"
)

// openMail prepares what sending needs: blob storage, the content scanner
// and the egress policy.
func (a *App) openMail(ctx context.Context) error {
	cfg := a.Config
	var err error
	if cfg.BlobS3Bucket != "" {
		a.Blobs, err = blob.NewS3(blob.S3Config{Bucket: cfg.BlobS3Bucket, Prefix: cfg.BlobS3Prefix, Region: cfg.Region,
			Endpoint: cfg.BlobS3Endpoint, PathStyle: cfg.BlobS3Endpoint != ""})
	} else {
		a.Blobs, err = blob.NewFS(cfg.BlobDir)
	}
	if err != nil {
		return fmt.Errorf("blob storage: %w", err)
	}
	a.Content = datakeys.NewBlobs(a.Blobs, a.Keys)
	a.Scanner = scan.New(cfg.ClamdAddr, 30*time.Second)
	cidrs, err := egress.ParseCIDRs(cfg.EgressAllowCIDRs)
	if err != nil {
		return fmt.Errorf("egress-allow-cidrs: %w", err)
	}
	a.Egress = egress.Policy{AllowCIDRs: cidrs, AllowHTTP: cfg.WebhookAllowHTTP, Log: a.Log}
	if cfg.EgressResolver != "" {
		server, err := cfg.EgressResolverAddr() // checked by Validate
		if err != nil {
			return err
		}
		a.Egress.Resolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, server)
		}}
	}
	return nil
}

// clock reads the app's clock, which tests may replace after Open.
func (a *App) clock() time.Time { return a.Now() }

// emailChecks reads in one statement what the pipeline checks before an
// email leaves: the account's suspension, the domain still verified for
// the account (State.CanSend, from the table's columns), the suppressed
// recipients, and the email still listed (not erased).
func (a *App) emailChecks(ctx context.Context, emailID, accountID, domainID, domainName string, addresses []string) (processmanagers.Checks, error) {
	c, err := readapi.EmailChecks(ctx, a.Pool, a.AddressKeys, emailID, accountID, domainID, domainName, addresses)
	return processmanagers.Checks(c), err
}

func (a *App) pipeline() *processmanagers.Pipeline {
	p := &processmanagers.Pipeline{
		Commands: a.Commands, Content: a.Content, Scanner: a.Scanner, Egress: a.Egress, Sender: a.Sender,
		Checks: a.emailChecks,
		Settle: a.settle,
		MaxAge: a.Config.SendMaxAge,
		// One client for every email's downloads: its connections are
		// kept between emails instead of each email leaving its own open.
		Downloads: a.Egress.Client(30 * time.Second),
		Now:       a.clock,
		Feedback:  a.provider.feedback,
		Outcomes:  a.Outcomes,
		Log:       a.Log,
	}
	if a.provider.unsigned {
		p.SigningKey = a.signingKey
	}
	return p
}

// sendWorker works the email queue's jobs, drawing on limit (nil: no
// rate limit) before each message goes to the provider.
func (a *App) sendWorker(limit *ratelimit.Limiter) *processmanagers.SendWorker {
	p := a.pipeline()
	if limit != nil {
		p.Pace = limit.Wait
	}
	w := &processmanagers.SendWorker{
		Pipeline: p,
		Accounts: processmanagers.NewAccountSlots(a.Config.AccountConcurrency),
		Retry:    jobs.Backoff{Min: 100 * time.Millisecond, Max: time.Minute},
		Log:      a.Log,
	}
	if n := a.Config.MaxSendingBytes; n > 0 {
		// A quarter for emails under 1 MiB of attachments, which then
		// never wait behind a large one; the rest for the large ones.
		small := n / 4
		w.Memory, w.SmallMemory = processmanagers.NewRoom(n-small), processmanagers.NewSmallRoom(small)
	}
	return w
}

// rateLimit is the provider's maximum send rate shared by every worker
// process: MAILROOM_PROVIDER_MAX_RATE, else SES's own; nil when unlimited.
// An SES account whose rate cannot be read is held to one recipient a second
// until the next start rather than risk going over its quota. With SES it
// also warns of an account that cannot send to everyone: an operator would
// otherwise learn of it only from emails that fail or never arrive.
func (a *App) rateLimit(ctx context.Context) *ratelimit.Limiter {
	rate := a.Config.ProviderMaxRate
	if a.provider.ses != nil {
		qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		acct, err := a.provider.ses.Account(qctx)
		cancel()
		switch {
		case err == nil:
			a.warnOfSESAccount(acct)
			if rate == 0 {
				rate = acct.MaxSendRate
			}
		case rate != 0:
			a.Log.Info("SES account not read: whether it is in the sandbox or paused is unknown (allow ses:GetAccount to know)", "err", err)
		}
		if rate <= 0 {
			a.Log.Warn("SES maximum send rate unknown; sending to at most one recipient a second until the next start "+
				"(allow ses:GetAccount, or set MAILROOM_PROVIDER_MAX_RATE)", "err", err)
			rate = 1
		}
	}
	if rate <= 0 {
		return nil
	}
	a.Log.Info("provider send rate limited", "recipients_per_second", rate)
	return ratelimit.New(a.Pool, a.Config.Provider, rate)
}

// warnOfSESAccount logs what of the SES account's status keeps emails from
// their recipients.
func (a *App) warnOfSESAccount(acct ses.Account) {
	if acct.Sandbox {
		a.Log.Warn("SES account is in the sandbox: only verified addresses receive mail, and SES rejects every other recipient; "+
			"request production access for the region", "max_24_hour_send", acct.Max24HourSend)
	}
	if acct.SendingPaused {
		a.Log.Warn("SES sending is paused for this account: emails are retried until sending is resumed, and fail as provider_unavailable after MAILROOM_SEND_MAX_AGE")
	}
	if acct.Enforcement != "" && acct.Enforcement != "HEALTHY" {
		a.Log.Warn("SES account under review: its bounce or complaint rate is too high; sending stops if it is shut down",
			"enforcement_status", acct.Enforcement)
	}
}

// signingKey opens the active DKIM key of an account's domain.
func (a *App) signingKey(ctx context.Context, accountID, name string) (*provider.DKIMKey, error) {
	st, err := readapi.SendingDomain(ctx, a.Pool, accountID, name)
	if err != nil || st.Active == nil {
		return nil, err
	}
	// Opening and parsing a key costs about as much CPU as the rest of an
	// email's preparation; a domain's key under one selector never changes
	// (a rotation brings a new selector), so each is opened once.
	cacheKey := st.ID + "/" + st.Active.Selector
	if k, ok := a.dkimKeys.Load(cacheKey); ok {
		return &provider.DKIMKey{Domain: st.Name, Selector: st.Active.Selector, PrivateKey: k.(*rsa.PrivateKey)}, nil
	}
	key, err := dkimkey.Open(a.Box, st.ID, *st.Active)
	if errors.Is(err, secretbox.ErrCannotOpen) {
		err = fmt.Errorf("the DKIM key of %s (selector %s) is sealed under a master key not given: %w", st.Name, st.Active.Selector, err)
	}
	if err != nil {
		return nil, err
	}
	a.dkimKeys.Store(cacheKey, key)
	return &provider.DKIMKey{Domain: st.Name, Selector: st.Active.Selector, PrivateKey: key}, nil
}

// Version is reported in the webhook User-Agent; the binary sets it.
var Version = "dev"
