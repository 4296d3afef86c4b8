package main

import (
	"encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/mailroom/mailroom/internal/app"
	"github.com/mailroom/mailroom/internal/config"
)

func domainsCmd(cfg *config.Config) *cobra.Command {
	cmd := &cobra.Command{Use: "domains", Short: "Operator tools for sending domains"}
	var legacy, accountID string
	var asJSON bool
	imp := &cobra.Command{
		Use:   "import --legacy-dkim DOMAIN --account ID",
		Short: "Import a domain that signs with provider-managed Easy DKIM (three CNAME records)",
		Long: `Import a domain on legacy Easy DKIM, as domains created before BYODKIM were.
POST /api/domains/:id/upgrade then moves it to a Mailroom-held key.`,
		Args: cobra.NoArgs,
		RunE: withExistingApp(cfg, func(cmd *cobra.Command, a *app.App, _ []string) error {
			st, err := a.Commands.ImportLegacyDomain(cmd.Context(), accountID, legacy, operator())
			if err != nil {
				return describe(err, "account", accountID)
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(a.RenderDomain(st))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "imported %s as %s (legacy DKIM); publish:\n", st.Name, st.ID)
			for _, r := range st.Records() {
				fmt.Fprintf(cmd.OutOrStdout(), "  %-5s %s  %s\n", r.Type, r.Name, r.Value)
			}
			return nil
		}),
	}
	imp.Flags().StringVar(&legacy, "legacy-dkim", "", "the domain to import")
	imp.Flags().StringVar(&accountID, "account", "", "account id")
	imp.Flags().BoolVar(&asJSON, "json", false, "print the domain as JSON")
	imp.MarkFlagRequired("legacy-dkim")
	imp.MarkFlagRequired("account")
	cmd.AddCommand(imp)
	return cmd
}
