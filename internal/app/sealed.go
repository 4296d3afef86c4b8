package app

import (
	"context"
	"errors"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain/sendingdomain"
	"github.com/mailroom/mailroom/internal/dkimkey"
	"github.com/mailroom/mailroom/internal/secretbox"
	"github.com/mailroom/mailroom/readapi"
)

// Sealed names the webhook endpoints and domains whose secrets a set of
// master keys leaves in one state, with their accounts (whose admin token
// re-seals them).
type Sealed struct {
	WebhookEndpoints []SealedEndpoint `json:"webhook_endpoints"`
	Domains          []SealedDomain   `json:"domains"`
}

// SealedEndpoint is a webhook endpoint in Sealed.
type SealedEndpoint struct {
	ID        string `json:"id"`
	AccountID string `json:"account_id"`
}

// SealedDomain is a domain in Sealed.
type SealedDomain struct {
	ID        string `json:"id"`
	Name      string `json:"name"`
	AccountID string `json:"account_id"`
}

// Empty reports whether it names nothing.
func (s Sealed) Empty() bool { return len(s.WebhookEndpoints) == 0 && len(s.Domains) == 0 }

// SecretsByKey sorts the webhook secrets and DKIM keys of the read models
// by what opens them: a previous master key only (to be re-sealed through
// the API before that key is removed), or no key given at all (they fail
// until the key that sealed them is given again).
func (a *App) SecretsByKey(ctx context.Context) (previous, none Sealed, err error) {
	previous = Sealed{WebhookEndpoints: []SealedEndpoint{}, Domains: []SealedDomain{}}
	none = Sealed{WebhookEndpoints: []SealedEndpoint{}, Domains: []SealedDomain{}}
	place := func(current bool, err error, into func(*Sealed)) error {
		switch {
		case errors.Is(err, secretbox.ErrCannotOpen):
			into(&none)
		case err != nil:
			return err
		case !current:
			into(&previous)
		}
		return nil
	}
	secrets, err := readapi.WebhookSecrets(ctx, a.Pool)
	if err != nil {
		return previous, none, err
	}
	for _, s := range secrets {
		current, err := a.Box.Current(s.Sealed, commands.SecretContext(s.EndpointID))
		endpoint := SealedEndpoint{ID: s.EndpointID, AccountID: s.AccountID}
		if err := place(current, err, func(l *Sealed) { l.WebhookEndpoints = append(l.WebhookEndpoints, endpoint) }); err != nil {
			return previous, none, err
		}
	}
	domains, err := readapi.AllDomains(ctx, a.Pool)
	if err != nil {
		return previous, none, err
	}
	for _, d := range domains {
		var keys []sendingdomain.Key
		if d.Active != nil {
			keys = append(keys, *d.Active)
		}
		if t := d.Transition; t != nil {
			// The retiring key of a rotation is not: it signs nothing, and
			// the domain can take no other rotation until it is gone.
			keys = append(keys, t.Key)
		}
		prev, lost := false, false
		for _, k := range keys {
			if k.SealedKey == "" {
				continue // Easy DKIM: the provider holds the key
			}
			current, err := dkimkey.Current(a.Box, d.ID, k)
			switch {
			case errors.Is(err, secretbox.ErrCannotOpen):
				lost = true
			case err != nil:
				return previous, none, err
			case !current:
				prev = true
			}
		}
		domain := SealedDomain{ID: d.ID, Name: d.Name, AccountID: d.AccountID}
		if lost {
			none.Domains = append(none.Domains, domain)
		} else if prev {
			previous.Domains = append(previous.Domains, domain)
		}
	}
	return previous, none, nil
}

// warnUnopenable logs the secrets no master key given opens, at start: they
// fail (webhook deliveries wait, DKIM signing fails) until the key that
// sealed them is given again.
func (a *App) warnUnopenable(ctx context.Context) {
	_, none, err := a.SecretsByKey(ctx)
	if err != nil || none.Empty() {
		return // read models not made yet, or nothing to say
	}
	var endpoints, domains []string
	for _, e := range none.WebhookEndpoints {
		endpoints = append(endpoints, e.ID)
	}
	for _, d := range none.Domains {
		domains = append(domains, d.Name)
	}
	a.Log.Warn("secrets sealed under a master key not given: deliveries to these webhook endpoints wait and these domains cannot sign "+
		"until that key is in MAILROOM_MASTER_KEY_PREVIOUS (see Rotating MAILROOM_MASTER_KEY in docs/operations.md)",
		"webhook_endpoints", endpoints, "domains", domains)
}
