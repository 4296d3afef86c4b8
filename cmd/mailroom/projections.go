package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/mailroom/mailroom/internal/apitime"
	"github.com/mailroom/mailroom/internal/app"
	"github.com/mailroom/mailroom/internal/config"
	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/projections"
)

func projectionsCmd(cfg *config.Config) *cobra.Command {
	cmd := &cobra.Command{Use: "projections", Short: "Inspect and rebuild the read models"}

	var asJSON bool
	status := &cobra.Command{
		Use:   "status",
		Short: "Show each projection's position and lag",
		Args:  cobra.NoArgs,
		RunE: withApp(cfg, func(cmd *cobra.Command, a *app.App, _ []string) error {
			st, err := a.Runner.Status(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"projections": st})
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "PROJECTION\tVERSION\tPOSITION\tLAG\tUPDATED")
			for _, s := range st {
				fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%s\n", s.Name, s.Version, s.Position, s.Lag, apitime.Format(s.UpdatedAt))
			}
			return w.Flush()
		}),
	}
	status.Flags().BoolVar(&asJSON, "json", false, "print as JSON")

	var all bool
	rebuild := &cobra.Command{
		Use:   "rebuild NAME|--all",
		Short: "Rebuild projections into shadow tables from the whole event log, then swap them in",
		Long: `Rebuild replays every event into fresh tables beside the live ones. The API keeps
serving the live tables, which stay current, until the new ones are swapped in.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if all == (len(args) == 1) {
				return fmt.Errorf("name one projection or pass --all")
			}
			a, err := openTool(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			defer a.Close()
			targets := a.Runner.Projectors()
			if !all {
				p := a.Runner.Projector(args[0])
				if p == nil {
					return fmt.Errorf("no projection %q; see mailroom projections status", args[0])
				}
				targets = []projections.Projector{p}
			}
			total := int64(-1)
			if c, ok := a.Store.(eventstore.Counter); ok {
				if total, err = c.CountAfter(cmd.Context(), eventstore.Start); err != nil {
					return err
				}
			}
			for _, p := range targets {
				bar := progressbar.NewOptions64(total,
					progressbar.OptionSetDescription("rebuild "+p.Name()),
					progressbar.OptionSetWriter(cmd.ErrOrStderr()),
					progressbar.OptionShowCount(),
					progressbar.OptionShowIts(),
					progressbar.OptionSetItsString("events"),
					progressbar.OptionThrottle(100_000_000),
					progressbar.OptionOnCompletion(func() { fmt.Fprintln(cmd.ErrOrStderr()) }),
				)
				err := a.Runner.Rebuild(cmd.Context(), p, func(applied int64) { bar.Set64(applied) })
				bar.Finish()
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "rebuilt %s\n", p.Name())
			}
			return nil
		},
	}
	rebuild.Flags().BoolVar(&all, "all", false, "rebuild every projection")
	cmd.AddCommand(status, rebuild)
	return cmd
}
