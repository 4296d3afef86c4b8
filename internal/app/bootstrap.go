package app

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain"
	"github.com/mailroom/mailroom/domain/account"
	"github.com/mailroom/mailroom/domain/sendingdomain"
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

// firstStartFile names, in the data directory, the account of a first start
// whose credentials have not been shown yet. Secrets are kept only as
// hashes, so a first start stopped before it showed them (killed, or
// failing half-way) would leave an account nobody can use; the next start
// finds the file and finishes the first start with new credentials.
const firstStartFile = "first-start"

// shownFile is firstStartFile once the credentials were shown: it names
// the account to later starts, which show how to get new ones.
const shownFile = "first-account"

// Bootstrap creates a first account with an admin token and an API key when
// the database has no account yet, or finishes a first start that stopped
// before its credentials were shown (issuing new ones). It returns nil
// when there is nothing to show. Once the caller has shown them, it calls
// FirstRunShown.
func (a *App) Bootstrap(ctx context.Context) (*FirstRun, error) {
	n, err := readapi.Accounts(ctx, a.Pool)
	if err != nil {
		return nil, err
	}
	meta := commands.Started("system:bootstrap")
	// The projection runner is not running yet: settle inline.
	cmds := a.inlineCommands()
	first := &FirstRun{}
	if n == 0 {
		acct, err := cmds.CreateAccount(ctx, "Development", meta)
		if err != nil {
			return nil, err
		}
		first.AccountID, first.AdminToken = acct.AccountID, acct.Token
		if err := a.markFirstStart(acct.AccountID); err != nil {
			a.Log.Warn("could not note the first start in the data directory; if it stops before showing the credentials, "+
				"give the account credentials with `mailroom tokens create`", "account", acct.AccountID, "err", err)
		}
	} else {
		b, err := os.ReadFile(filepath.Join(a.Config.DataDir, firstStartFile))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		} else if err != nil {
			return nil, err
		}
		first.AccountID = strings.TrimSpace(string(b))
		first.AdminToken, err = cmds.IssueToken(ctx, first.AccountID, account.RoleAdmin, meta)
		if errors.Is(err, domain.ErrNotFound) {
			// A note left beside another database: nothing to finish.
			a.Log.Warn("the data directory names a first start's account this database does not hold; ignoring it", "account", first.AccountID)
			return nil, a.FirstRunShown()
		} else if err != nil {
			return nil, fmt.Errorf("first start of account %s: %w", first.AccountID, err)
		}
		a.Log.Info("finishing a first start that stopped before showing its credentials; new ones replace them", "account", first.AccountID)
	}
	key, err := cmds.CreateAPIKey(ctx, first.AccountID, "development", nil, meta)
	if err != nil {
		return nil, err
	}
	first.APIKeyID, first.APIKey = key.Created.KeyID, key.Key
	if a.provider.sandbox {
		if err := a.sandboxDomain(ctx, cmds, first.AccountID, meta); err != nil {
			return nil, err
		}
		first.Domain = SandboxDomain
	}
	return first, nil
}

// FirstAccount is the account whose credentials a first start from this
// data directory showed, "" when none did (or it is not in this
// database): a later start names it, for new credentials.
func (a *App) FirstAccount(ctx context.Context) (string, error) {
	b, err := os.ReadFile(filepath.Join(a.Config.DataDir, shownFile))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	} else if err != nil {
		return "", err
	}
	id := strings.TrimSpace(string(b))
	if ok, err := readapi.AccountExists(ctx, a.Pool, id); err != nil || !ok {
		return "", err
	}
	return id, nil
}

// sandboxDomain adds SandboxDomain to the account and verifies it, unless
// an earlier, interrupted first start did.
func (a *App) sandboxDomain(ctx context.Context, cmds *commands.Service, accountID string, meta commands.Meta) error {
	id, verified := "", false
	ds, err := readapi.New(a.Pool, a.clock).Domains(ctx, accountID)
	if err != nil {
		return err
	}
	for _, d := range ds {
		if d.Name == SandboxDomain {
			id, verified = d.ID, d.Status == sendingdomain.StatusVerified
		}
	}
	if id == "" {
		d, err := cmds.AddDomain(ctx, accountID, SandboxDomain, meta)
		if err != nil {
			return err
		}
		id = d.ID
	}
	if verified {
		return nil
	}
	// An explicit operator event, visible in the history like any other,
	// in the first start's story.
	operator := meta
	operator.Actor = "operator"
	return cmds.VerifyDomainBySandbox(ctx, id, operator)
}

// markFirstStart notes the account of a first start until its credentials
// are shown.
func (a *App) markFirstStart(accountID string) error {
	if err := os.MkdirAll(a.Config.DataDir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(a.Config.DataDir, firstStartFile), []byte(accountID+"\n"), 0o600)
}

// FirstRunShown records that a first start's credentials were shown: a
// later start creates nothing.
func (a *App) FirstRunShown() error {
	err := os.Rename(filepath.Join(a.Config.DataDir, firstStartFile), filepath.Join(a.Config.DataDir, shownFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}
