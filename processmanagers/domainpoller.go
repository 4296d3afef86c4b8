package processmanagers

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain/sendingdomain"
	"github.com/mailroom/mailroom/internal/dnscheck"
	"github.com/mailroom/mailroom/internal/pglock"
	"github.com/mailroom/mailroom/readapi"
)

// DomainPoller re-checks pending domains and DKIM key changes on a timer:
// verification, the end of the verification window, cutover and the old
// key's retirement. Its timers are the deadlines kept in the read model, so
// they survive restarts, and each decision is made once by the aggregate
// whatever the number of ticks or instances.
type DomainPoller struct {
	Pool     *pgxpool.Pool
	Commands *commands.Service
	Now      func() time.Time
	Interval time.Duration
	Log      *slog.Logger
}

// Run ticks until ctx ends.
func (p *DomainPoller) Run(ctx context.Context) error {
	t := time.NewTicker(p.Interval)
	defer t.Stop()
	for {
		if _, err := p.OnTimer(ctx); err != nil && ctx.Err() == nil {
			p.Log.Error("domain poll", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// OnTimer is one tick of this instance's timer: a pass, unless another
// instance is running one or began one within the interval, so the
// instances run about one pass per interval between them. It reports
// whether it ran one.
func (p *DomainPoller) OnTimer(ctx context.Context) (ran bool, err error) {
	return timedPass(ctx, p.Pool, pglock.DomainPoll, "domain-poll", p.Now(), p.Interval, p.poll)
}

// Tick runs one pass now, unless another instance is running one: then it
// reports that it did not run.
func (p *DomainPoller) Tick(ctx context.Context) (ran bool, err error) {
	return timedPass(ctx, p.Pool, pglock.DomainPoll, "domain-poll", p.Now(), 0, p.poll)
}

// poll runs one pass; the caller holds the poll lock.
func (p *DomainPoller) poll(ctx context.Context) error {
	work, err := readapi.DomainsToPoll(ctx, p.Pool)
	if err != nil {
		return err
	}

	// Several domains at a time: one whose DNS answers slowly (each query
	// may wait out MAILROOM_DNS_TIMEOUT) holds up only a slot, not every
	// other account's domains behind it.
	now := p.Now()
	var g errgroup.Group
	g.SetLimit(pollConcurrency)
	for _, d := range work {
		g.Go(func() error {
			meta := commands.Started("system:domain-poller") // each domain's check is its own story
			var err error
			t := d.State.Transition
			switch {
			case d.State.Status == sendingdomain.StatusPending && !now.Before(d.State.Deadline):
				err = p.Commands.ExpireDomain(ctx, d.ID, meta)
			case d.State.Status == sendingdomain.StatusPending || (t != nil && t.State == sendingdomain.AwaitingDNS):
				var o sendingdomain.Outcome
				if _, o, err = p.Commands.RecheckDomain(ctx, d.ID, meta); err == nil {
					p.warnOfResolvers(ctx, o.Servers)
				}
			case t != nil && t.State == sendingdomain.CutOver && !now.Before(t.OldKeyRetiresAt):
				err = p.Commands.RetireOldDKIMKey(ctx, d.ID, meta)
			}
			if err != nil && ctx.Err() == nil {
				p.Log.Warn("domain poll", "domain_id", d.ID, "err", err)
			}
			return nil
		})
	}
	g.Wait()
	return nil
}

// warnOfResolvers says which configured resolver answered none of a
// domain's lookups: its owner reads "timeout" in the check and can do
// nothing, while every domain stays pending until it expires. The line
// names the resolver, not the domain, so an outage folds to one a window.
func (p *DomainPoller) warnOfResolvers(ctx context.Context, servers []sendingdomain.ServerCheck) {
	for _, srv := range servers {
		reason := ""
		for _, r := range srv.Records {
			if !dnscheck.ResolverTrouble(r.Reason) {
				reason = ""
				break
			}
			reason = r.Reason
		}
		if reason != "" {
			p.Log.WarnContext(ctx, "DNS resolver not answering; domains cannot verify (MAILROOM_DNS_RESOLVERS)",
				"server", srv.Server, "err", reason)
		}
	}
}

// pollConcurrency is how many domains one poll checks at once.
const pollConcurrency = 8
