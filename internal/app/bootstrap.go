package app

import (
	"context"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/readapi"
)

// FirstRun is what a first development start creates and shows once.
type FirstRun struct {
	AccountID  string `json:"account_id"`
	AdminToken string `json:"admin_token"`
	APIKeyID   string `json:"api_key_id"`
	APIKey     string `json:"api_key"`
	Domain     string `json:"domain,omitempty"`
}

// SandboxDomain is the sending domain a first development start adds and,
// with the sandbox provider only, verifies without DNS.
const SandboxDomain = "example.test"

// Bootstrap creates a first account with an admin token and an API key when
// the database has no account yet. It returns nil when there was one.
func (a *App) Bootstrap(ctx context.Context) (*FirstRun, error) {
	n, err := readapi.Accounts(ctx, a.Pool)
	if err != nil {
		return nil, err
	}
	if n > 0 {
		return nil, nil
	}
	meta := commands.Started("system:bootstrap")
	// The projection runner is not running yet: settle inline.
	cmds := a.inlineCommands()
	acct, err := cmds.CreateAccount(ctx, "Development", meta)
	if err != nil {
		return nil, err
	}
	key, err := cmds.CreateAPIKey(ctx, acct.AccountID, "development", nil, meta)
	if err != nil {
		return nil, err
	}
	first := &FirstRun{AccountID: acct.AccountID, AdminToken: acct.Token, APIKeyID: key.Created.KeyID, APIKey: key.Key}
	if a.provider.sandbox {
		d, err := cmds.AddDomain(ctx, acct.AccountID, SandboxDomain, meta)
		if err != nil {
			return nil, err
		}
		// An explicit operator event, visible in the history like any
		// other, in the first start's story.
		operator := meta
		operator.Actor = "operator"
		if err := cmds.VerifyDomainBySandbox(ctx, d.ID, operator); err != nil {
			return nil, err
		}
		first.Domain = d.Name
	}
	return first, nil
}
