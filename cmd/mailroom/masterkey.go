package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/mailroom/mailroom/internal/app"
	"github.com/mailroom/mailroom/internal/config"
)

func masterKeyCmd(cfg *config.Config) *cobra.Command {
	cmd := &cobra.Command{Use: "master-key", Short: "Replace the master key"}
	var asJSON bool
	rewrap := &cobra.Command{
		Use:   "rewrap",
		Short: "Wrap every data key under the current master key",
		Long: `Wrap every email's data key, and the secret of the address keys, under the
current master key (MAILROOM_MASTER_KEY), opening them with it or with one of
MAILROOM_MASTER_KEY_PREVIOUS. Run it once every instance runs with the new
key; keys already under it are left as they are, so it can be run again.
See "Rotating MAILROOM_MASTER_KEY" in docs/operations.md.`,
		Args: cobra.NoArgs,
		RunE: withExistingApp(cfg, func(cmd *cobra.Command, a *app.App, _ []string) error {
			rewrapped, current, err := a.Keys.Rewrap(cmd.Context())
			if err != nil {
				return err
			}
			previous, none, err := a.SecretsByKey(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(struct {
					Rewrapped        int        `json:"rewrapped"`
					Current          int        `json:"current"`
					UnderPrevious    app.Sealed `json:"under_previous_key"`
					UnderUnknownKeys app.Sealed `json:"under_no_key_given"`
				}{rewrapped, current, previous, none})
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "rewrapped %d data key(s); %d were under the current master key already\n", rewrapped, current)
			if !previous.Empty() {
				fmt.Fprintf(out, "still under a previous master key (rotate them through the API before removing it):\n")
				printSealed(out, previous)
			}
			if !none.Empty() {
				fmt.Fprintf(out, "under a master key not given (they fail until it is given again):\n")
				printSealed(out, none)
			}
			return nil
		}),
	}
	rewrap.Flags().BoolVar(&asJSON, "json", false, `print {"rewrapped", "current", "under_previous_key", "under_no_key_given"} as JSON`)
	cmd.AddCommand(rewrap)
	return cmd
}

func printSealed(w io.Writer, s app.Sealed) {
	for _, e := range s.WebhookEndpoints {
		fmt.Fprintf(w, "  webhook endpoint %s of account %s: POST /v1/webhooks/%s/rotate-secret\n", e.ID, e.AccountID, e.ID)
	}
	for _, d := range s.Domains {
		fmt.Fprintf(w, "  domain %s of account %s: POST /api/domains/%s/rotate\n", d.Name, d.AccountID, d.ID)
	}
}
