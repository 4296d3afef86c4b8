package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/domain/account"
	"github.com/mailroom/mailroom/internal/apitime"
	"github.com/mailroom/mailroom/internal/app"
	"github.com/mailroom/mailroom/internal/config"
)

func accountsCmd(cfg *config.Config) *cobra.Command {
	cmd := &cobra.Command{Use: "accounts", Short: "Create, suspend and reinstate accounts"}

	var name string
	var asJSON bool
	create := &cobra.Command{
		Use:   "create",
		Short: "Create an account and print its first org:admin token",
		Args:  cobra.NoArgs,
		RunE: withApp(cfg, func(cmd *cobra.Command, a *app.App, _ []string) error {
			acct, err := a.Commands.CreateAccount(cmd.Context(), name, operator())
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(acct)
			}
			// The token is shown once: an output that did not take it
			// (a full disk, a closed pipe) is a failure, not a success.
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "account %s\nadmin token %s (shown once)\n", acct.AccountID, acct.Token)
			return err
		}),
	}
	create.Flags().StringVar(&name, "name", "", "account name")
	create.Flags().BoolVar(&asJSON, "json", false, `print {"account_id", "token"} as JSON`)
	create.MarkFlagRequired("name")

	suspend := accountChange(cfg, "suspend", "Suspend an account: /v1 refused, /api read-only, emails and webhooks held", "suspended",
		func(a *app.App) func(context.Context, string, commands.Meta) error { return a.Commands.SuspendAccount })
	reinstate := accountChange(cfg, "reinstate", "Lift an account's suspension; held emails and webhooks go out", "reinstated",
		func(a *app.App) func(context.Context, string, commands.Meta) error {
			return a.Commands.ReinstateAccount
		})
	cmd.AddCommand(create, suspend, reinstate)
	return cmd
}

func tokensCmd(cfg *config.Config) *cobra.Command {
	cmd := &cobra.Command{Use: "tokens", Short: "Issue and revoke management tokens for /api routes"}
	var accountID, role string
	var expiresIn time.Duration
	var asJSON bool
	create := &cobra.Command{
		Use:   "create",
		Short: "Issue a management token with a role on an account",
		Args:  cobra.NoArgs,
		RunE: withExistingApp(cfg, func(cmd *cobra.Command, a *app.App, _ []string) error {
			if expiresIn < 0 {
				return errors.New("--expires-in must not be negative (0: the token never expires)")
			}
			tok, err := a.Commands.IssueExpiringToken(cmd.Context(), accountID, account.Role(role), expiresIn, operator())
			if err != nil {
				return describe(err, "account", accountID)
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(struct {
					Token     string       `json:"token"`
					ID        string       `json:"id"`
					ExpiresAt apitime.Time `json:"expires_at"`
				}{tok.Token, tok.ID, apitime.Of(tok.ExpiresAt)})
			}
			if _, err := fmt.Fprintf(cmd.OutOrStdout(), "token %s (shown once)\nid    %s\n", tok.Token, tok.ID); err != nil {
				return err
			}
			if !tok.ExpiresAt.IsZero() {
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "expires %s\n", apitime.Format(tok.ExpiresAt))
			}
			return err
		}),
	}
	create.Flags().StringVar(&accountID, "account", "", "account id")
	create.Flags().StringVar(&role, "role", string(account.RoleMember), "org:admin or org:member")
	create.Flags().DurationVar(&expiresIn, "expires-in", 0, "lifetime of the token, e.g. 720h (0: never expires)")
	create.Flags().BoolVar(&asJSON, "json", false, `print {"token", "id", "expires_at"} as JSON`)
	create.MarkFlagRequired("account")

	revoke := revokeCmd(cfg, "token", "Revoke a management token: its next request on any instance gets 401",
		func(a *app.App) (func(context.Context, string) (string, error), func(context.Context, string, string, commands.Meta) error) {
			return a.TokenAccount, a.Commands.RevokeToken
		})
	cmd.AddCommand(create, revoke)
	return cmd
}

func apiKeysCmd(cfg *config.Config) *cobra.Command {
	cmd := &cobra.Command{Use: "api-keys", Short: "Revoke API keys for /v1 routes (a suspended account cannot revoke its own)"}
	cmd.AddCommand(revokeCmd(cfg, "API key", "Revoke an API key: its next request on any instance gets 401",
		func(a *app.App) (func(context.Context, string) (string, error), func(context.Context, string, string, commands.Meta) error) {
			return a.APIKeyAccount, a.Commands.RevokeAPIKey
		}))
	return cmd
}

// revokeCmd revokes a credential known by its id alone: owner finds its
// account, revoke revokes it there. Revoking a revoked one succeeds.
func revokeCmd(cfg *config.Config, what, short string, ops func(*app.App) (owner func(context.Context, string) (string, error), revoke func(context.Context, string, string, commands.Meta) error)) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "revoke ID",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: withExistingApp(cfg, func(cmd *cobra.Command, a *app.App, args []string) error {
			id := args[0]
			owner, revoke := ops(a)
			acct, err := owner(cmd.Context(), id)
			if err != nil {
				return describe(err, what, id)
			}
			if err := revoke(cmd.Context(), acct, id, operator()); err != nil {
				return describe(err, what, id)
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]string{"id": id, "account_id": acct, "status": "revoked"})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s revoked\n", what, id)
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"id", "account_id", "status"} as JSON`)
	return cmd
}

// accountChange is an operator command that changes one account's state.
func accountChange(cfg *config.Config, verb, short, done string, op func(*app.App) func(context.Context, string, commands.Meta) error) *cobra.Command {
	return &cobra.Command{
		Use:   verb + " ID",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: withExistingApp(cfg, func(cmd *cobra.Command, a *app.App, args []string) error {
			if err := op(a)(cmd.Context(), args[0], operator()); err != nil {
				return describe(err, "account", args[0])
			}
			fmt.Fprintf(cmd.OutOrStdout(), "account %s %s\n", args[0], done)
			return nil
		}),
	}
}
