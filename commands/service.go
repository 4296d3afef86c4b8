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
	activeAPIKeys func(ctx context.Context, accountID string) (int, error)
	identity      IdentityCheck
}

// IdentityCheck asks the mail provider whether it sees a domain's DKIM and
// MAIL FROM as verified (SES's own check, beside Mailroom's DNS check).
type IdentityCheck func(ctx context.Context, domain string) (dkimOK, mailFromOK bool, err error)

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
	// ActiveAPIKeys counts an account's active API keys (read model).
	ActiveAPIKeys func(ctx context.Context, accountID string) (int, error)
	// Identity, when set, must also see a domain verified.
	Identity IdentityCheck
}

// New returns a Service.
func New(d Deps) *Service {
	if d.Settle == nil {
		d.Settle = func(context.Context, eventstore.Position, ...string) bool { return true }
	}
	return &Service{store: d.Store, settle: d.Settle, now: d.Now, box: d.Box, dns: d.DNS, region: d.Region,
		domains: d.Domains, blobs: d.Blobs, egress: d.Egress, endpointCount: d.EndpointCount, activeAPIKeys: d.ActiveAPIKeys, identity: d.Identity}
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
	evs, pos, _, err := decideAndAppend(ctx, s, stream, evolve, decide, meta)
	if err == nil && len(evs) > 0 && len(projectors) > 0 {
		s.settle(ctx, pos, projectors...)
	}
	return evs, pos, err
}

// ErrNotVisible means a write was recorded (or had been already) but the
// read models did not show it within the consistency time-out: the caller
// cannot claim it is in effect yet, and may retry.
var ErrNotVisible = errors.New("the change is recorded but not yet visible; retry the request")

// executeConfirmed is execute for writes whose effect must be visible when
// the caller answers (revocations, suspension): it returns ErrNotVisible
// unless the projectors show the stream up to its last event, whether this
// call appended it or an earlier one did.
func executeConfirmed[S any](ctx context.Context, s *Service, stream string, evolve func(S, domain.Event) S,
	decide func(S) ([]domain.Event, error), meta Meta, projectors ...string) ([]domain.Event, error) {
	evs, pos, last, err := decideAndAppend(ctx, s, stream, evolve, decide, meta)
	if err != nil {
		return evs, err
	}
	if len(evs) == 0 {
		pos = last
	}
	if pos != (eventstore.Position{}) && !s.settle(ctx, pos, projectors...) {
		return evs, ErrNotVisible
	}
	return evs, nil
}

// decideAndAppend runs the load, decide, append cycle. It tells where the
// events landed, or, when nothing was decided, where the stream's last
// event is.
func decideAndAppend[S any](ctx context.Context, s *Service, stream string, evolve func(S, domain.Event) S,
	decide func(S) ([]domain.Event, error), meta Meta) (evs []domain.Event, pos, last eventstore.Position, err error) {
	for attempt := 1; ; attempt++ {
		var state S
		var expected eventstore.ExpectedVersion
		state, expected, _, last, err = loadSpan(ctx, s.store, stream, evolve)
		if err != nil {
			return nil, pos, last, err
		}
		evs, err = decide(state)
		if err != nil || len(evs) == 0 {
			return evs, pos, last, err
		}
		data, err := codec.EncodeAll(evs, meta.metadata())
		if err != nil {
			return nil, pos, last, err
		}
		res, err := s.store.Append(ctx, stream, expected, data...)
		if eventstore.IsConflict(err) && attempt < maxAttempts {
			// Back off a little, at random, so contenders spread out.
			time.Sleep(time.Duration(rand.IntN(1000*attempt)) * time.Microsecond)
			continue
		}
		if err != nil {
			return nil, pos, last, fmt.Errorf("append to %s: %w", stream, err)
		}
		return evs, res.Position, res.Position, nil
	}
}

// load folds a stream into its state and returns the expected version that
// an append based on it must meet.
func load[S any](ctx context.Context, store eventstore.Store, stream string, evolve func(S, domain.Event) S) (S, eventstore.ExpectedVersion, error) {
	state, expected, _, _, err := loadSpan(ctx, store, stream, evolve)
	return state, expected, err
}

// loadFrom is load that also tells where the stream's first event is.
func loadFrom[S any](ctx context.Context, store eventstore.Store, stream string, evolve func(S, domain.Event) S) (S, eventstore.ExpectedVersion, eventstore.Position, error) {
	state, expected, first, _, err := loadSpan(ctx, store, stream, evolve)
	return state, expected, first, err
}

// loadSpan is load that also tells where the stream's first and last
// events are.
func loadSpan[S any](ctx context.Context, store eventstore.Store, stream string, evolve func(S, domain.Event) S) (state S, expected eventstore.ExpectedVersion, first, last eventstore.Position, err error) {
	expected = eventstore.NoStream
	const page = 1000
	for from := uint64(0); ; {
		evs, err := store.ReadStream(ctx, stream, from, page)
		if errors.Is(err, eventstore.ErrStreamNotFound) {
			return state, expected, first, last, nil
		}
		if err != nil {
			return state, expected, first, last, err
		}
		if from == 0 && len(evs) > 0 {
			first = evs[0].Position
		}
		for _, rec := range evs {
			e, err := codec.Decode(rec)
			if err != nil {
				return state, expected, first, last, err
			}
			if e != nil {
				state = evolve(state, e)
			}
			expected = eventstore.Exact(rec.StreamRevision)
			last = rec.Position
		}
		if len(evs) < page {
			return state, expected, first, last, nil
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
