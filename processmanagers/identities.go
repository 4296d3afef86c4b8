package processmanagers

import (
	"context"
	"fmt"

	"github.com/mailroom/mailroom/domain/sendingdomain"
	"github.com/mailroom/mailroom/internal/codec"
	"github.com/mailroom/mailroom/internal/dkimkey"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/provider"
	"github.com/mailroom/mailroom/internal/secretbox"
)

// DomainLoader reads a sending domain's current state from its stream.
type DomainLoader func(ctx context.Context, id string) (sendingdomain.State, error)

// Identities keeps the provider's sending identities in step with domains:
// created with the domain's key and MAIL FROM when the domain is added,
// signing with the new key at a DKIM cutover, deleted with the domain.
// Provider failures are transient: the event is retried with backoff until
// the provider answers, and the domain itself stays as it was.
func Identities(ids provider.Identities, load DomainLoader, box *secretbox.Box) Handler {
	return func(ctx context.Context, ev eventstore.RecordedEvent) error {
		e, err := codec.Decode(ev)
		if err != nil || e == nil {
			return err
		}
		switch e := e.(type) {
		case *sendingdomain.Added:
			id := provider.Identity{Domain: e.Name, MailFromDomain: e.MailFromDomain, Region: e.Region}
			if e.Key != nil {
				key, err := dkimkey.Open(box, e.DomainID, *e.Key)
				if err != nil {
					return fmt.Errorf("domain %s: %w", e.DomainID, err)
				}
				id.Selector, id.PrivateKey = e.Key.Selector, key
			}
			return transient(ids.CreateIdentity(ctx, id))
		case *sendingdomain.KeyCutOver:
			st, err := load(ctx, e.DomainID)
			if err != nil {
				return Transient(err)
			}
			if !st.Exists() {
				return nil // removed since; its deletion follows
			}
			for _, k := range st.KeysLive() {
				if k.Selector == e.Selector {
					key, err := dkimkey.Open(box, e.DomainID, k)
					if err != nil {
						return fmt.Errorf("domain %s: %w", e.DomainID, err)
					}
					return transient(ids.SetSigningKey(ctx, st.Name, k.Selector, key))
				}
			}
			return nil // superseded by a later key change
		case *sendingdomain.Removed:
			return transient(ids.DeleteIdentity(ctx, e.Name))
		}
		return nil
	}
}

func transient(err error) error {
	if err == nil {
		return nil
	}
	return Transient(err)
}
