package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/google/uuid"
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
			_, foreign, err := eventstore.Export(cmd.Context(), a.Ledger, pos, stream, w)
			if ferr := w.Flush(); err == nil {
				err = ferr
			}
			if foreign > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "skipped %d event(s) of other applications\n", foreign)
			}
			if errors.Is(err, eventstore.ErrStreamNotFound) {
				return fmt.Errorf("--stream %s: no such stream (streams are named like apikey-<id>, email-<id>)", stream)
			}
			return err
		},
	}
	export.Flags().StringVar(&stream, "stream", "", "only this stream, e.g. apikey-<id>")
	export.Flags().StringVar(&from, "from", "", "only events after this position (COMMIT/PREPARE, as exported)")

	var file string
	var partial bool
	verify := &cobra.Command{
		Use:   "verify",
		Short: "Recompute every stream's hash chain and report any break",
		Long: `Recompute every stream's hash chain and report any break: in the event store, or with
--file in an export (mailroom events export), without the database.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			out := cmd.OutOrStdout()
			breaks := 0
			report := func(b eventstore.Break) {
				breaks++
				if b.EventID == uuid.Nil { // an event the log does not hold
					fmt.Fprintf(out, "BROKEN stream %s revision %d: %s\n", b.Stream, b.Revision, b.Reason)
					return
				}
				fmt.Fprintf(out, "BROKEN stream %s revision %d event %s: %s\n", b.Stream, b.Revision, b.EventID, b.Reason)
			}
			if file != "" {
				return verifyExport(cmd, file, partial, report, &breaks)
			}
			if partial {
				// The store holds every stream from its start: checked as
				// partial, a stream missing its first events would pass.
				return errors.New("--partial applies to an export given with --file; the event store is verified whole")
			}
			return withExistingApp(cfg, func(cmd *cobra.Command, a *app.App, _ []string) error {
				checked, foreign, err := eventstore.Verify(cmd.Context(), a.Ledger, report)
				if err != nil {
					return err
				}
				skipped := ""
				if foreign > 0 {
					skipped = fmt.Sprintf(" (%d event(s) of other applications skipped)", foreign)
				}
				if breaks > 0 {
					return fmt.Errorf("%d break(s) in the hash chains of %d events%s", breaks, checked, skipped)
				}
				fmt.Fprintf(out, "ok: %d events, every hash chain intact%s\n", checked, skipped)
				return nil
			})(cmd, args)
		},
	}
	verify.Flags().StringVar(&file, "file", "", `an export to verify instead of the event store ("-": standard input)`)
	verify.Flags().BoolVar(&partial, "partial", false, "with --file: the export was made --from a position, so its streams may start past their first event")
	cmd.AddCommand(export, verify)
	return cmd
}

// verifyExport verifies the export in file ("-": standard input).
func verifyExport(cmd *cobra.Command, file string, partial bool, report func(eventstore.Break), breaks *int) error {
	in := cmd.InOrStdin()
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	}
	// The file is read without the database, so nothing else notices a
	// stop signal: stop reading at it, as every other command does,
	// rather than report an interrupted input as intact.
	checked, anchored, err := eventstore.VerifyExport(ctxReader{cmd.Context(), in}, partial, report)
	if cmd.Context().Err() != nil {
		return fmt.Errorf("interrupted after %d exported events: %w", checked, cmd.Context().Err())
	}
	if err != nil {
		return err
	}
	if *breaks > 0 {
		return fmt.Errorf("%d break(s) in the hash chains of %d exported events", *breaks, checked)
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "ok: %d events, every hash chain intact", checked)
	if anchored > 0 {
		fmt.Fprintf(out, " (%d stream(s) exported from past their first event: the first hash exported of each is taken as given)", anchored)
	}
	fmt.Fprintln(out)
	return nil
}

// ctxReader fails its reads once ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
