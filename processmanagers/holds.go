package processmanagers

import (
	"context"
	"errors"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain/account"
	"github.com/mailroom/mailroom/domain/email"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/projections"
)

// Releaser releases the emails a suspension held once the account is
// reinstated. It hears AccountReinstated and EmailHeld on one ordered
// subscription, so a hold recorded just after the reinstatement was handled
// (the pipeline read the status before it changed) is released when its own
// event comes: no hold outlives an active account.
type Releaser struct {
	Commands *commands.Service
	// Held lists the ids of the account's held emails (read model).
	Held func(ctx context.Context, accountID string) ([]string, error)
	// AccountSuspended reports whether the account is suspended (read model).
	AccountSuspended func(ctx context.Context, accountID string) (bool, error)
	Settle           commands.Settle
}

var releaseMeta = commands.Meta{Actor: "system:email-release"}

var errAccountsBehind = errors.New("the accounts read model is behind the event")

// Handle reacts to AccountReinstated and EmailHeld.
func (r *Releaser) Handle(ctx context.Context, ev eventstore.RecordedEvent) error {
	if ev.Type != (&account.Reinstated{}).EventType() && ev.Type != (&email.Held{}).EventType() {
		return nil
	}
	e, err := decodeToReact(ev)
	if errors.Is(err, errNewerRelease) {
		return Transient(err)
	}
	if err != nil {
		return err
	}
	// Both the status and the list of holds must include this event.
	if r.Settle(ctx, ev.Position, projections.AccountsName) != nil {
		return Transient(errAccountsBehind)
	}
	var ids []string
	switch e := e.(type) {
	case *account.Reinstated:
		if ids, err = r.Held(ctx, e.AccountID); err != nil {
			return Transient(err)
		}
	case *email.Held:
		suspended, err := r.AccountSuspended(ctx, e.AccountID)
		if err != nil {
			return Transient(err)
		}
		if !suspended {
			ids = []string{e.EmailID}
		}
	}
	for _, id := range ids {
		if err := r.Commands.ReleaseEmail(ctx, id, releaseMeta.CausedBy(ev)); err != nil {
			return Transient(err)
		}
	}
	return nil
}
