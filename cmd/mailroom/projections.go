package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

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
		Short: "Show each projection's position and lag, a failing projection, and quarantined streams",
		Args:  cobra.NoArgs,
		RunE: withExistingApp(cfg, func(cmd *cobra.Command, a *app.App, _ []string) error {
			st, err := a.Runner.Status(cmd.Context(), projections.OperatorLagCap)
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(cmd.OutOrStdout()).Encode(map[string]any{"projections": st})
			}
			return printStatus(cmd.OutOrStdout(), st)
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
				return errNameOrAll
			}
			// A replay allocates briefly for every event: collecting less
			// often leaves the CPU to the replay, for some more heap.
			defer debug.SetGCPercent(debug.SetGCPercent(400))
			a, err := openExisting(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			defer a.Close()
			targets, err := chosen(a, args)
			if err != nil {
				return err
			}
			total := int64(-1) // unknown: the bar counts without an end
			if c, ok := a.Store.(eventstore.Counter); ok {
				n, err := c.CountAfter(cmd.Context(), eventstore.Start, 0)
				switch {
				case errors.Is(err, errors.ErrUnsupported):
				case err != nil:
					return err
				default:
					total = n
				}
			}
			for _, p := range targets {
				start, applied := time.Now(), int64(0)
				show, end := rebuildProgress(cmd.ErrOrStderr(), string(p.Name()), total)
				err := a.Runner.Rebuild(cmd.Context(), p, func(n int64) { applied = n; show(n) })
				end()
				if err != nil {
					return err // the bar stays where the rebuild stopped
				}
				took := time.Since(start)
				fmt.Fprintf(cmd.OutOrStdout(), "rebuilt %s: %d events in %s (%.0f events/s)\n", p.Name(), applied,
					took.Round(time.Millisecond), float64(applied)/max(took.Seconds(), 1e-3))
			}
			return nil
		},
	}
	rebuild.Flags().BoolVar(&all, "all", false, "rebuild every projection")

	var retryAll, retryJSON bool
	retry := &cobra.Command{
		Use:   "retry NAME|--all",
		Short: "Re-apply the events of quarantined streams, after their cause is fixed",
		Long: `A projection that cannot apply an event quarantines the event's stream: it skips
that stream's events and goes on with every other one. Once the cause is fixed,
retry re-applies each quarantined stream's skipped events and lifts its
quarantine. A stream that still fails stays quarantined with the new error,
and the command exits non-zero.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if retryAll == (len(args) == 1) {
				return errNameOrAll
			}
			a, err := openExisting(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			defer a.Close()
			targets, err := chosen(a, args)
			if err != nil {
				return err
			}
			results := []projections.RetryResult{}
			for _, p := range targets {
				res, err := a.Runner.Retry(cmd.Context(), p)
				results = append(results, res...)
				if err != nil {
					return err
				}
			}
			failed := 0
			for _, r := range results {
				if r.Error != "" {
					failed++
				}
			}
			out := cmd.OutOrStdout()
			if retryJSON {
				if err := json.NewEncoder(out).Encode(map[string]any{"results": results}); err != nil {
					return err
				}
			} else {
				if len(results) == 0 {
					fmt.Fprintln(out, "nothing quarantined")
				}
				for _, r := range results {
					if r.Error != "" {
						fmt.Fprintf(out, "still failing  %s  %s: %s\n", r.Projection, r.Stream, r.Error)
					} else {
						fmt.Fprintf(out, "cleared        %s  %s (%d events applied)\n", r.Projection, r.Stream, r.Applied)
					}
				}
			}
			if failed > 0 {
				return fmt.Errorf("%d quarantined stream(s) still fail", failed)
			}
			return nil
		},
	}
	retry.Flags().BoolVar(&retryAll, "all", false, "retry the quarantined streams of every projection")
	retry.Flags().BoolVar(&retryJSON, "json", false, "print as JSON")
	cmd.AddCommand(status, rebuild, retry)
	return cmd
}

// isTerminal reports whether f, a command's input or output, is a
// terminal: an operator types there, or watches a progress bar.
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	return ok && term.IsTerminal(int(file.Fd()))
}

// rebuildProgress shows a rebuild's progress on w: a bar on a terminal;
// elsewhere (a log file, a pipe) a line every ten seconds, since a bar's
// redrawn frames would fill it. The rate is printed at the end, over the
// whole rebuild (the bar's own rate reads the last jump). end finishes the
// bar's line.
func rebuildProgress(w io.Writer, name string, total int64) (show func(applied int64), end func()) {
	if isTerminal(w) {
		bar := progressbar.NewOptions64(total,
			progressbar.OptionSetDescription("rebuild "+name),
			progressbar.OptionSetWriter(w),
			progressbar.OptionShowCount(),
			progressbar.OptionThrottle(100*time.Millisecond),
		)
		return func(n int64) { bar.Set64(n) }, func() { fmt.Fprintln(w) }
	}
	var last time.Time
	show = func(n int64) {
		if time.Since(last) < 10*time.Second {
			return
		}
		last = time.Now()
		if total >= 0 {
			fmt.Fprintf(w, "rebuild %s: %d of %d events\n", name, n, total)
		} else {
			fmt.Fprintf(w, "rebuild %s: %d events\n", name, n)
		}
	}
	return show, func() {}
}

// printStatus prints projections as a table, then any failing projection and
// quarantined stream with its error.
func printStatus(out io.Writer, st []projections.Status) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PROJECTION\tVERSION\tPOSITION\tLAG\tUPDATED\tSTATE")
	var failing []projections.Status
	var quarantined []projections.Quarantine
	for _, s := range st {
		state := "ok"
		switch {
		case s.Failing != nil:
			state = "failing"
			failing = append(failing, s)
		case len(s.Quarantined) > 0:
			state = fmt.Sprintf("%d quarantined", len(s.Quarantined))
		}
		quarantined = append(quarantined, s.Quarantined...)
		fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%s\t%s\n", s.Name, s.Version, s.Position, s.Lag, apitime.Format(s.UpdatedAt.Time), state)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, s := range failing {
		fmt.Fprintf(out, "\n%s FAILING since %s (%d attempts): %s\n", s.Name, apitime.Format(s.Failing.Since.Time), s.Failing.Attempts, s.Failing.Error)
	}
	if len(quarantined) == 0 {
		return nil
	}
	fmt.Fprintln(out, "\nQUARANTINED (skipped until mailroom projections retry)")
	w = tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "PROJECTION\tSTREAM\tEVENT TYPE\tPOSITION\tSINCE\tATTEMPTS\tERROR")
	for _, q := range quarantined {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", q.Projection, q.Stream, q.EventType, q.Position, apitime.Format(q.Since.Time), q.Attempts, q.Error)
	}
	return w.Flush()
}

var errNameOrAll = errors.New("name one projection, or pass --all alone")

// chosen is the projection named in args, or every one when args is empty.
func chosen(a *app.App, args []string) ([]projections.Projector, error) {
	if len(args) == 0 {
		return a.Runner.Projectors(), nil
	}
	p := a.Runner.Projector(projections.Name(args[0]))
	if p == nil {
		return nil, fmt.Errorf("no projection %q; see mailroom projections status", args[0])
	}
	return []projections.Projector{p}, nil
}
