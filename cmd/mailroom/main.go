// Command mailroom is the Mailroom server and its operator tools.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/mailroom/mailroom/commands"
	"github.com/mailroom/mailroom/internal/app"
	"github.com/mailroom/mailroom/internal/config"
	"github.com/mailroom/mailroom/internal/database"
	"github.com/mailroom/mailroom/internal/logs"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	app.Version = version
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The first signal stops the command gracefully; a second one ends the
	// process at once, as a second Ctrl-C should. Both are caught on one
	// buffered channel, so a second signal sent however soon after the
	// first is never lost.
	ignoredAtStart = map[syscall.Signal]bool{syscall.SIGINT: signal.Ignored(syscall.SIGINT), syscall.SIGTERM: signal.Ignored(syscall.SIGTERM)}
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	var stoppedBy atomic.Int32 // the first signal's number
	go func() {
		stoppedBy.Store(int32((<-signals).(syscall.Signal)))
		cancel()
		exitBy((<-signals).(syscall.Signal))
	}()
	if err := root().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "mailroom:", err)
		// A command a signal cut short ends as the signal would have
		// ended it, so a script tells an interruption from a failure. A
		// command that stopped gracefully (serve) returns no error.
		if sig := stoppedBy.Load(); sig != 0 {
			exitBy(syscall.Signal(sig))
		}
		os.Exit(1)
	}
}

// ignoredAtStart are the stop signals the process started with ignored (a
// background job's SIGINT), which cannot end it again.
var ignoredAtStart map[syscall.Signal]bool

// exitBy ends the process as sig would have ended it: by the signal itself,
// so that a shell running it in a script stops too (bash goes on after a
// child that caught SIGINT and exited, taking it as handled), or, where the
// signal was ignored at start, with the status a shell gives (128 + its
// number).
func exitBy(sig syscall.Signal) {
	if !ignoredAtStart[sig] {
		signal.Reset(sig)
		syscall.Kill(os.Getpid(), sig)
		time.Sleep(time.Second) // delivered at once; the exit below is a fallback
	}
	os.Exit(128 + int(sig))
}

// operator is the metadata of an operator command: each command is a run
// of its own.
func operator() commands.Meta { return commands.Started("operator") }

func root() *cobra.Command {
	var cfg config.Config
	cmd := &cobra.Command{
		Use:           "mailroom",
		Short:         "Mailroom, a transactional email service",
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	cfg.Flags(cmd.PersistentFlags())
	// The environment is applied after parsing, never as flag defaults, so
	// --help cannot print a secret taken from it.
	cmd.PersistentPreRun = func(*cobra.Command, []string) { cfg.ApplyEnv(cmd.PersistentFlags()) }
	cmd.AddCommand(
		serveCmd(&cfg),
		migrateCmd(&cfg),
		accountsCmd(&cfg),
		tokensCmd(&cfg),
		apiKeysCmd(&cfg),
		projectionsCmd(&cfg),
		eventsCmd(&cfg),
		domainsCmd(&cfg),
		eraseCmd(&cfg),
		masterKeyCmd(&cfg),
	)
	cmd.InitDefaultCompletionCmd() // added now, not at Execute, to be one of the groups
	for _, group := range cmd.Commands() {
		if group.HasSubCommands() && !group.Runnable() {
			group.Args = cobra.ArbitraryArgs
			group.RunE = unknownSubcommand
			group.SuggestionsMinimumDistance = 2
		}
	}
	return cmd
}

// unknownSubcommand answers a command group called without one of its
// commands: help when none is named; an error otherwise, as cobra gives
// for the top level, so that a script's typo (`projections stauts`) is no
// success.
func unknownSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 || args[0] == "help" {
		return cmd.Help()
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if suggestions := cmd.SuggestionsFor(args[0]); len(suggestions) > 0 {
		msg += "; did you mean " + strings.Join(suggestions, " or ") + "?"
	}
	return fmt.Errorf("%s (see %s --help)", msg, cmd.CommandPath())
}

func newLogger(cfg *config.Config, w io.Writer) *slog.Logger {
	return logs.New(w, cfg.LogFormat, cfg.LogLevel)
}

// openTool opens the app for an operator command: quiet logs unless asked,
// and commands that update the read models themselves.
func openTool(ctx context.Context, cfg *config.Config) (*app.App, error) {
	if cfg.LogLevel == "info" {
		cfg.LogLevel = "warn"
	}
	log := newLogger(cfg, os.Stderr)
	slog.SetDefault(log)
	// A command updates the read models itself, so it rebuilds what is out
	// of date as a projections process does, whatever roles the
	// environment names for the servers.
	c := *cfg
	if !c.Has("projections") {
		c.Roles = append(slices.Clone(c.Roles), "projections")
	}
	a, err := app.Open(ctx, c, log)
	if err != nil {
		return nil, err
	}
	a.SettleInline()
	return a, nil
}

// openExisting is openTool for commands that work on what is there (every
// one but serve, migrate and accounts create): a database that does not
// exist is an error, not a new empty one, so a mistyped URL cannot pass
// for an empty log that verifies.
func openExisting(ctx context.Context, cfg *config.Config) (*app.App, error) {
	if err := app.Check(*cfg); err != nil {
		return nil, err
	}
	ok, err := database.Exists(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, errors.New("the database named in MAILROOM_DATABASE_URL does not exist; this command works on an existing one and creates none")
	}
	return openTool(ctx, cfg)
}

// withExistingApp is withApp with openExisting.
func withExistingApp(cfg *config.Config, run func(cmd *cobra.Command, a *app.App, args []string) error) func(*cobra.Command, []string) error {
	return withOpened(openExisting, cfg, run)
}

// withApp opens the app for an operator command, runs it, and closes the app.
func withApp(cfg *config.Config, run func(cmd *cobra.Command, a *app.App, args []string) error) func(*cobra.Command, []string) error {
	return withOpened(openTool, cfg, run)
}

// withOpened runs an operator command on the app open gives, then closes it.
func withOpened(open func(context.Context, *config.Config) (*app.App, error), cfg *config.Config,
	run func(cmd *cobra.Command, a *app.App, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		a, err := open(cmd.Context(), cfg)
		if err != nil {
			return err
		}
		defer a.Close()
		return run(cmd, a, args)
	}
}
