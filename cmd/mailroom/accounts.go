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
			fmt.Fprintf(cmd.OutOrStdout(), "account %s\nadmin token %s (shown once)\n", acct.AccountID, acct.Token)
			return nil
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
			fmt.Fprintf(cmd.OutOrStdout(), "token %s (shown once)\nid    %s\n", tok.Token, tok.ID)
			if !tok.ExpiresAt.IsZero() {
				fmt.Fprintf(cmd.OutOrStdout(), "expires %s\n", apitime.Format(tok.ExpiresAt))
			}
			return nil
		}),
	}
	create.Flags().StringVar(&accountID, "account", "", "account id")
	create.Flags().StringVar(&role, "role", string(account.RoleMember), "org:admin or org:member")
	create.Flags().DurationVar(&expiresIn, "expires-in", 0, "lifetime of the token, e.g. 720h (0: never expires)")
	create.Flags().BoolVar(&asJSON, "json", false, `print {"token", "id", "expires_at"} as JSON`)
	create.MarkFlagRequired("account")

	var revokeJSON bool
	revoke := &cobra.Command{
		Use:   "revoke ID",
		Short: "Revoke a management token: its next request on any instance gets 401",
		Args:  cobra.ExactArgs(1),
		RunE: withExistingApp(cfg, func(cmd *cobra.Command, a *app.App, args []string) error {
			id := args[0]
			acct, err := a.TokenAccount(cmd.Context(), id)
			if err != nil {
				return describe(err, "token", id)
			}
			if err := a.Commands.RevokeToken(cmd.Context(), acct, id, operator()); err != nil {
				return describe(err, "token", id)
			}
			if revokeJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]string{"id": id, "account_id": acct, "status": "revoked"})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "token %s revoked\n", id)
			return nil
		}),
	}
	revoke.Flags().BoolVar(&revokeJSON, "json", false, `print {"id", "account_id", "status"} as JSON`)
	cmd.AddCommand(create, revoke)
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
