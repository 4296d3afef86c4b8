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
				value := r.Value
				if r.Type == "MX" {
					value = fmt.Sprintf("%d %s", r.Priority, r.Value)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "  %-5s %s  %s\n", r.Type, r.Name, value)
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

	var releaseJSON bool
	release := &cobra.Command{
		Use:   "release NAME",
		Short: "Free a domain name held by a domain that has not verified it, whichever account added it",
		Long: `A pending domain holds its name from every other account for 72 hours, and its
account may restart that window with a verify as often as it likes. When the
name's owner cannot add it for that reason, release removes every pending or
failed domain of that name, recorded as the operator's removal, so the owner
can add it. A verified domain is refused: its account showed in DNS that it
controls the name.`,
		Args: cobra.ExactArgs(1),
		RunE: withExistingApp(cfg, func(cmd *cobra.Command, a *app.App, args []string) error {
			removed, err := a.Commands.ReleaseDomainName(cmd.Context(), args[0], operator())
			if err != nil {
				return describe(err, "pending domain named", args[0])
			}
			type held struct {
				DomainID  string `json:"domain_id"`
				AccountID string `json:"account_id"`
				Status    string `json:"status"`
			}
			out := struct {
				Domain  string `json:"domain"`
				Removed []held `json:"removed"`
			}{Domain: removed[0].Name}
			for _, st := range removed {
				out.Removed = append(out.Removed, held{st.ID, st.AccountID, string(st.Status)})
			}
			if releaseJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(out)
			}
			for _, h := range out.Removed {
				fmt.Fprintf(cmd.OutOrStdout(), "released %s: removed %s domain %s of account %s\n", out.Domain, h.Status, h.DomainID, h.AccountID)
			}
			return nil
		}),
	}
	release.Flags().BoolVar(&releaseJSON, "json", false, "print what was removed as JSON")
	cmd.AddCommand(release)
	return cmd
}
