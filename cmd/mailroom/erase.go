package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/mailroom/mailroom/internal/app"
	"github.com/mailroom/mailroom/internal/config"
	"github.com/mailroom/mailroom/internal/views"
)

func eraseCmd(cfg *config.Config) *cobra.Command {
	var accountID, recipient string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "erase",
		Short: "Erase every email of an account sent to one address, whatever its age",
		Long: `Erase every email of an account sent to one address (to, cc or bcc): its
content and attachments are deleted, its data key destroyed, and it leaves
the email list. Daily counts stay, and a suppressed address stays
suppressed. The request is recorded without the address.`,
		Args: cobra.NoArgs,
		RunE: withExistingApp(cfg, func(cmd *cobra.Command, a *app.App, _ []string) error {
			er, err := a.Commands.EraseRecipient(cmd.Context(), accountID, recipient, operator())
			if err != nil {
				return describe(err, "account", accountID)
			}
			out := views.ErasureOf(er.ID, er.EmailIDs, er.CreatedAt)
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(out)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "erasure %s: %d email(s) erased\n", out.ID, out.Erased)
			for _, id := range out.EmailIDs {
				fmt.Fprintln(cmd.OutOrStdout(), id)
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&accountID, "account", "", "account id")
	cmd.Flags().StringVar(&recipient, "recipient", "", "the address whose emails are erased")
	cmd.Flags().BoolVar(&asJSON, "json", false, `print {"id", "object", "erased", "email_ids", "created_at"} as JSON`)
	cmd.MarkFlagRequired("account")
	cmd.MarkFlagRequired("recipient")
	return cmd
}
