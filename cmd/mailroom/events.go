package main

import (
	"bufio"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/mailroom/mailroom/internal/app"
	"github.com/mailroom/mailroom/internal/config"
	"github.com/mailroom/mailroom/internal/eventstore"
)

func eventsCmd(cfg *config.Config) *cobra.Command {
	cmd := &cobra.Command{Use: "events", Short: "Export and verify the event history (for auditors)"}

	var stream, from string
	export := &cobra.Command{
		Use:   "export",
		Short: "Write events as NDJSON, one per line, in global order",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			pos := eventstore.Start
			if from != "" {
				var err error
				if pos, err = eventstore.ParsePosition(from); err != nil {
					return err
				}
			}
			a, err := openExisting(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			defer a.Close()
			w := bufio.NewWriter(cmd.OutOrStdout())
			if _, err := eventstore.Export(cmd.Context(), a.Ledger, pos, stream, w); err != nil {
				return err
			}
			return w.Flush()
		},
	}
	export.Flags().StringVar(&stream, "stream", "", "only this stream, e.g. apikey-<id>")
	export.Flags().StringVar(&from, "from", "", "only events after this position (COMMIT/PREPARE, as exported)")

	verify := &cobra.Command{
		Use:   "verify",
		Short: "Recompute every stream's hash chain and report any break",
		Args:  cobra.NoArgs,
		RunE: withExistingApp(cfg, func(cmd *cobra.Command, a *app.App, _ []string) error {
			breaks := 0
			checked, err := eventstore.Verify(cmd.Context(), a.Ledger, func(b eventstore.Break) {
				breaks++
				fmt.Fprintf(cmd.OutOrStdout(), "BROKEN stream %s revision %d event %s: %s\n", b.Stream, b.Revision, b.EventID, b.Reason)
			})
			if err != nil {
				return err
			}
			if breaks > 0 {
				return fmt.Errorf("%d break(s) in the hash chains of %d events", breaks, checked)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "ok: %d events, every hash chain intact\n", checked)
			return nil
		}),
	}
	cmd.AddCommand(export, verify)
	return cmd
}
