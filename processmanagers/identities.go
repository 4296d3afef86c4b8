package processmanagers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/sendingdomain"
	"github.com/mailroom/mailroom/internal/dkimkey"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/provider"
	"github.com/mailroom/mailroom/internal/secretbox"
)

// DomainLoader reads a sending domain's current state from its stream.
type DomainLoader func(ctx context.Context, id string) (sendingdomain.State, error)

// Identities keeps the provider's sending identities in step with domains:
// an identity lives while its domain is pending or verified. It is created
// with the domain's key and MAIL FROM when the domain is added (and again
// when an expired domain's verification restarts), signs with the new key
// at a DKIM cutover, and is deleted with the domain or when its
// verification window expires (which frees the name for other accounts).
//
// Every call names the domain id, and the provider refuses a change to an
// identity another domain owns (provider.ErrNotOwner): that refusal is
// logged and the event done with, since no retry can succeed and the other
// domain must not be touched. Other provider failures are transient: the
// event is retried with backoff until the provider answers, and the domain
// itself stays as it was.
func Identities(ids provider.Identities, load DomainLoader, box *secretbox.Box, log *slog.Logger) Handler {
	f := identityFollower{ids: ids, load: load, box: box}
	return func(ctx context.Context, ev eventstore.RecordedEvent) error {
		if _, ok := sendingdomain.IDFromStream(ev.StreamID); !ok {
			return nil // it follows domains only
		}
		e, err := decodeToReact(ev)
		if errors.Is(err, errNewerRelease) {
			return Transient(err)
		}
		if err != nil {
			return err
		}
		err = f.follow(ctx, e)
		if errors.Is(err, provider.ErrNotOwner) {
			log.Warn("provider identity belongs to another domain; left unchanged",
				"event", ev.Type, "stream", ev.StreamID, "event_id", ev.ID.String(), "err", err)
			return nil
		}
		return err
	}
}

type identityFollower struct {
	ids  provider.Identities
	load DomainLoader
	box  *secretbox.Box
}

// follow makes the provider call an event asks for.
func (f identityFollower) follow(ctx context.Context, e domain.Event) error {
	switch e := e.(type) {
	case *sendingdomain.Added:
		return f.create(ctx, e.DomainID, e.Name, e.MailFromDomain, e.Region, e.Key)
	case *sendingdomain.VerificationRestarted:
		st, err := f.load(ctx, e.DomainID)
		if err != nil {
			return Transient(err)
		}
		if !live(st) {
			return nil // removed or expired again since
		}
		return f.create(ctx, st.ID, st.Name, st.MailFromDomain, st.Region, st.Active)
	case *sendingdomain.KeyCutOver:
		st, err := f.load(ctx, e.DomainID)
		if err != nil {
			return Transient(err)
		}
		if !live(st) {
			return nil // no identity now: a restart creates it with the active key
		}
		for _, k := range st.KeysLive() {
			if k.Selector == e.Selector {
				key, err := dkimkey.Open(f.box, e.DomainID, k)
				if err != nil {
					return fmt.Errorf("domain %s: %w", e.DomainID, err)
				}
				return transient(f.ids.SetSigningKey(ctx, st.ID, st.Name, k.Selector, key))
			}
		}
		return nil // superseded by a later key change
	case *sendingdomain.KeyReplaced:
		st, err := f.load(ctx, e.DomainID)
		if err != nil {
			return Transient(err)
		}
		if !live(st) || st.Active == nil || st.Active.Selector != e.Key.Selector {
			return nil // no identity now, or replaced again since
		}
		key, err := dkimkey.Open(f.box, e.DomainID, *st.Active)
		if err != nil {
			return fmt.Errorf("domain %s: %w", e.DomainID, err)
		}
		return transient(f.ids.SetSigningKey(ctx, st.ID, st.Name, st.Active.Selector, key))
	case *sendingdomain.VerificationExpired:
		st, err := f.load(ctx, e.DomainID)
		if err != nil {
			return Transient(err)
		}
		if st.Status != sendingdomain.StatusFailed {
			return nil // restarted since, or removed (its own deletion follows)
		}
		return transient(f.ids.DeleteIdentity(ctx, st.ID, st.Name))
	case *sendingdomain.Removed:
		return transient(f.ids.DeleteIdentity(ctx, e.DomainID, e.Name))
	}
	return nil
}

// create creates a domain's identity, with key unless it is a legacy one.
func (f identityFollower) create(ctx context.Context, domainID, name, mailFrom, region string, k *sendingdomain.Key) error {
	id := provider.Identity{DomainID: domainID, Domain: name, MailFromDomain: mailFrom, Region: region}
	if k != nil {
		key, err := dkimkey.Open(f.box, domainID, *k)
		if err != nil {
			return fmt.Errorf("domain %s: %w", domainID, err)
		}
		id.Selector, id.PrivateKey = k.Selector, key
	}
	return transient(f.ids.CreateIdentity(ctx, id))
}

// live reports whether a domain should have a provider identity.
func live(st sendingdomain.State) bool {
	return st.Exists() && st.Status != sendingdomain.StatusFailed
}

func transient(err error) error {
	if err == nil {
		return nil
	}
	return Transient(err)
}
