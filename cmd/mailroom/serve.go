package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/mailroom/mailroom/internal/app"
	"github.com/mailroom/mailroom/internal/config"
	"github.com/mailroom/mailroom/internal/database"
)

func serveCmd(cfg *config.Config) *cobra.Command {
	return &cobra.Command{
		Use:   "serve",
		Short: "Run the API, projections and workers (see --roles)",
		Long: `Run Mailroom. Every setting is a flag or a MAILROOM_* environment variable;
the flags below list both, and a flag given on the command line wins. Give secrets
(master key, URLs with passwords) through the environment: command-line values are
visible to every user of the machine. The database is created if missing and
migrated on start.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			log := newLogger(cfg, os.Stderr)
			slog.SetDefault(log)
			if err := app.Check(*cfg); err != nil {
				return err
			}
			// Bound first, and answering /healthz from the start: the
			// start may take long (a rebuild), and credentials printed by
			// a process that then cannot serve would be shown once, by no
			// server.
			ls, err := app.Listen(*cfg, log)
			if err != nil {
				return err
			}
			a, err := app.OpenOn(ctx, *cfg, log, ls)
			if err != nil {
				ls.Close()
				if ctx.Err() != nil {
					// Stopped while it opened (waiting for a rebuild, say):
					// a stop like any other.
					log.Info("stop signal received; shutting down")
					return nil
				}
				return err
			}
			defer a.Close()
			if cfg.Bootstrap {
				ls.Starting("creating the first account")
				first, err := a.Bootstrap(ctx)
				if err != nil {
					ls.Close()
					// The next start with MAILROOM_BOOTSTRAP finishes it,
					// from the same data directory.
					const recovery = "the next start with MAILROOM_BOOTSTRAP from this directory finishes the first start with new " +
						"credentials; or give the first account credentials with `mailroom tokens create`"
					if ctx.Err() != nil {
						log.Warn("stop signal received during the first start; "+recovery, "err", err)
						return nil
					}
					return fmt.Errorf("bootstrap: %w; %s", err, recovery)
				}
				addr := ""
				if cfg.Has("api") {
					addr = ls.Addr().String()
				}
				if first != nil {
					printFirstRun(cmd, first, addr)
					if err := a.FirstRunShown(); err != nil {
						log.Warn("the first start's credentials were shown, but the note that they were stays: the next start will issue new ones", "err", err)
					}
				} else if acct, err := a.FirstAccount(ctx); err == nil && acct != "" {
					printLaterRun(cmd, acct, addr)
				}
			}
			return a.Serve(ctx, ls)
		},
	}
}

// printFirstRun shows the first start's credentials, and where the API
// answers: addr, or "" when this process runs no api role.
func printFirstRun(cmd *cobra.Command, f *app.FirstRun, addr string) {
	where := "Mailroom is ready at http://" + addr + " — first start"
	if addr == "" {
		where = "Mailroom's first start (this process serves no API: use a process with the api role)"
	}
	fmt.Fprintf(cmd.OutOrStdout(), `
  %s, so here are your credentials.
  They are shown once; keep them.

    account      %s
    admin token  %s    (Authorization for /api routes)
    API key      %s    (Authorization for /v1 routes)
`, where, f.AccountID, f.AdminToken, f.APIKey)
	if f.Domain != "" {
		fmt.Fprintf(cmd.OutOrStdout(), "    domain       %s    (verified for the sandbox provider; send from any address at it)\n", f.Domain)
	}
	fmt.Fprintln(cmd.OutOrStdout())
}

// printLaterRun reminds a developer, on a start after the first, how to
// get credentials again: they were shown once, and only hashes are kept.
func printLaterRun(cmd *cobra.Command, accountID, addr string) {
	where := "Mailroom is ready at http://" + addr + "."
	if addr == "" {
		where = "Mailroom is starting (this process serves no API: use a process with the api role)."
	}
	fmt.Fprintf(cmd.OutOrStdout(), `
  %s The first start's credentials were shown once; for new ones:
    mailroom tokens create --account %s --role org:admin
  then create an API key with that token (POST /api/auth/api-keys). make reset
  starts the default development setup afresh, dropping its database.

`, where, accountID)
}

func migrateCmd(cfg *config.Config) *cobra.Command {
	return &cobra.Command{
		Use:   "migrate",
		Short: "Create the database if missing and apply schema migrations",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			log := newLogger(cfg, cmd.ErrOrStderr()) // each migration applied is a line
			slog.SetDefault(log)
			if err := app.Check(*cfg); err != nil {
				return err
			}
			app.WarnUnknownVariables(*cfg, log)
			pool, err := database.Open(ctx, cfg.DatabaseURL)
			if err != nil {
				return err
			}
			defer pool.Close()
			if err := database.Migrate(ctx, pool); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "migrations applied")
			return nil
		},
	}
}
