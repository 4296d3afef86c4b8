package main

import (
	"encoding/json"
	"fmt"

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
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]int{"rewrapped": rewrapped, "current": current})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "rewrapped %d data key(s); %d were under the current master key already\n", rewrapped, current)
			return nil
		}),
	}
	rewrap.Flags().BoolVar(&asJSON, "json", false, `print {"rewrapped", "current"} as JSON`)
	cmd.AddCommand(rewrap)
	return cmd
}
