// Package commands turns requests into events: it loads an aggregate's
// stream, asks the domain to decide, and appends the decision with optimistic
// concurrency. HTTP routes for writes live here too, as thin adapters.
package commands

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/sendingdomain"
	"github.com/mailroom/mailroom/internal/blob"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/dnscheck"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/secretbox"
)

// Settle waits until the named projectors have applied pos, so a read after
// a write sees it. It reports whether they caught up in time.
type Settle func(ctx context.Context, pos eventstore.Position, projectors ...string) bool

// Meta says who asks and on which request; it becomes the events' metadata.
type Meta struct {
	Actor     string
	RequestID string
}

func (m Meta) metadata() eventstore.Metadata {
	return eventstore.Metadata{Actor: m.Actor, RequestID: m.RequestID, CorrelationID: m.RequestID, CausationID: m.RequestID}
}

// Service executes commands.
type Service struct {
	store   eventstore.Store
	settle  Settle
	now     func() time.Time
	box     *secretbox.Box
	dns     DNSChecker
	region  string
	domains domainLookup
	blobs   blob.Store
	egress  URLChecker

	endpointCount func(ctx context.Context, accountID string) (int, error)
	identity      IdentityCheck
	domainsNamed  func(ctx context.Context, name string) ([]sendingdomain.State, error)
	domainCount   func(ctx context.Context, accountID string) (int, error)
	keyGenerated  func()
}

// IdentityCheck asks the mail provider whether it sees a domain's DKIM and
// MAIL FROM as verified (SES's own check, beside Mailroom's DNS check), on
// the identity that domain domainID owns.
type IdentityCheck func(ctx context.Context, domainID, domain string) (dkimOK, mailFromOK bool, err error)

// URLChecker refuses URLs Mailroom must not fetch (egress.Policy).
type URLChecker interface {
	CheckURL(ctx context.Context, raw string) error
}

// DNSChecker looks records up on every configured resolver.
type DNSChecker interface {
	Check(ctx context.Context, records []dnscheck.Record) dnscheck.Result
}

// Deps are what commands need from outside.
type Deps struct {
	Store  eventstore.Store
	Settle Settle           // nil: do not wait for projections
	Now    func() time.Time // the clock
	Box    *secretbox.Box   // seals DKIM keys
	DNS    DNSChecker
	Region string // provider region of new sending identities
	// Domains reads an account's sending domain by name (read model);
	// domain.ErrNotFound when it has none.
	Domains func(ctx context.Context, accountID, name string) (sendingdomain.State, error)
	Blobs   blob.Store
	Egress  URLChecker
	// EndpointCount counts an account's webhook endpoints (read model).
	EndpointCount func(ctx context.Context, accountID string) (int, error)
	// Identity, when set, must also see a domain verified.
	Identity IdentityCheck
	// DomainsNamed reads the domains of a name in every account (read model).
	DomainsNamed func(ctx context.Context, name string) ([]sendingdomain.State, error)
	// DomainCount counts an account's domains (read model).
	DomainCount func(ctx context.Context, accountID string) (int, error)
	// KeyGenerated, when set, is called for every DKIM key made.
	KeyGenerated func()
}

// New returns a Service.
func New(d Deps) *Service {
	if d.Settle == nil {
		d.Settle = func(context.Context, eventstore.Position, ...string) bool { return true }
	}
	return &Service{store: d.Store, settle: d.Settle, now: d.Now, box: d.Box, dns: d.DNS, region: d.Region,
		domains: d.Domains, blobs: d.Blobs, egress: d.Egress, endpointCount: d.EndpointCount, identity: d.Identity,
		domainsNamed: d.DomainsNamed, domainCount: d.DomainCount, keyGenerated: d.KeyGenerated}
}

// maxAttempts bounds retries after a concurrency conflict; busy streams
// (an endpoint hearing of many deliveries at once) need several.
const maxAttempts = 25

// execute loads stream into state S, decides, and appends what was decided
// at the revision it read. A conflict re-runs the whole cycle. It returns
// the decided events (none when the decision was a no-op).
func execute[S any](ctx context.Context, s *Service, stream string, evolve func(S, domain.Event) S,
	decide func(S) ([]domain.Event, error), meta Meta, projectors ...string) ([]domain.Event, error) {
	evs, _, err := executeAt(ctx, s, stream, evolve, decide, meta, projectors...)
	return evs, err
}

// executeAt is execute that also tells where the events landed (zero when
// nothing was appended).
func executeAt[S any](ctx context.Context, s *Service, stream string, evolve func(S, domain.Event) S,
	decide func(S) ([]domain.Event, error), meta Meta, projectors ...string) ([]domain.Event, eventstore.Position, error) {
	for attempt := 1; ; attempt++ {
		state, expected, err := load(ctx, s.store, stream, evolve)
		if err != nil {
			return nil, eventstore.Position{}, err
		}
		evs, err := decide(state)
		if err != nil || len(evs) == 0 {
			return evs, eventstore.Position{}, err
		}
		data, err := codec.EncodeAll(evs, meta.metadata())
		if err != nil {
			return nil, eventstore.Position{}, err
		}
		res, err := s.store.Append(ctx, stream, expected, data...)
		if eventstore.IsConflict(err) && attempt < maxAttempts {
			// Back off a little, at random, so contenders spread out.
			time.Sleep(time.Duration(rand.IntN(1000*attempt)) * time.Microsecond)
			continue
		}
		if err != nil {
			return nil, eventstore.Position{}, fmt.Errorf("append to %s: %w", stream, err)
		}
		if len(projectors) > 0 {
			s.settle(ctx, res.Position, projectors...)
		}
		return evs, res.Position, nil
	}
}

// load folds a stream into its state and returns the expected version that
// an append based on it must meet.
func load[S any](ctx context.Context, store eventstore.Store, stream string, evolve func(S, domain.Event) S) (S, eventstore.ExpectedVersion, error) {
	state, expected, _, err := loadFrom(ctx, store, stream, evolve)
	return state, expected, err
}

// loadFrom is load that also tells where the stream's first event is.
func loadFrom[S any](ctx context.Context, store eventstore.Store, stream string, evolve func(S, domain.Event) S) (S, eventstore.ExpectedVersion, eventstore.Position, error) {
	var state S
	var first eventstore.Position
	expected := eventstore.NoStream
	const page = 1000
	for from := uint64(0); ; {
		evs, err := store.ReadStream(ctx, stream, from, page)
		if errors.Is(err, eventstore.ErrStreamNotFound) {
			return state, expected, first, nil
		}
		if err != nil {
			return state, expected, first, err
		}
		if from == 0 && len(evs) > 0 {
			first = evs[0].Position
		}
		for _, rec := range evs {
			e, err := codec.Decode(rec)
			if err != nil {
				return state, expected, first, err
			}
			if e != nil {
				state = evolve(state, e)
			}
			expected = eventstore.Exact(rec.StreamRevision)
		}
		if len(evs) < page {
			return state, expected, first, nil
		}
		from = evs[len(evs)-1].StreamRevision + 1
	}
}

// fold applies freshly decided events to a state.
func fold[S any](st S, evolve func(S, domain.Event) S, evs []domain.Event) S {
	for _, e := range evs {
		st = evolve(st, e)
	}
	return st
}

func encodeOne(e domain.Event, meta Meta) (eventstore.EventData, error) {
	return codec.Encode(e, meta.metadata())
}
