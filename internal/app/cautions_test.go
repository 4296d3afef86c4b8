package app_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mailroom/mailroom/internal/app"
	"github.com/mailroom/mailroom/internal/app/apptest"
	"github.com/mailroom/mailroom/internal/config"
	"github.com/mailroom/mailroom/internal/pgtest"
)

// A development master key generated at start is said so, with its file,
// by commands too; a key read again from its file is not.
// Development-only settings are named by a serving process only: an
// operator command's output stays its own.
func TestStartSaysWhatSuitsDevelopmentOnly(t *testing.T) {
	cfg := apptest.Config(t, pgtest.NewURL(t))
	noWorkers(&cfg)
	cfg.MasterKey = ""
	cfg.DataDir = t.TempDir()
	cfg.EgressAllowCIDRs, cfg.WebhookAllowHTTP = "127.0.0.0/8", true
	file := filepath.Join(cfg.DataDir, "master.key")

	logs := startLogs(t, cfg, false)
	if !strings.Contains(logs, "level=WARN msg=\"generated a development master key") || !strings.Contains(logs, "file="+file) {
		t.Errorf("a command that generated the key does not say so:\n%s", logs)
	}
	if _, err := os.Stat(file); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs, "MAILROOM_EGRESS_ALLOW_CIDRS") {
		t.Errorf("a command names the development-only settings:\n%s", logs)
	}

	logs = startLogs(t, cfg, true)
	if strings.Contains(logs, "generated") {
		t.Errorf("a key read from its file is said to be generated:\n%s", logs)
	}
	if !strings.Contains(logs, "level=WARN msg=\"development-only settings") || !strings.Contains(logs, "(MAILROOM_EGRESS_ALLOW_CIDRS)=127.0.0.0/8") ||
		!strings.Contains(logs, "(MAILROOM_WEBHOOK_ALLOW_HTTP)=true") {
		t.Errorf("a serving process does not name its development-only settings:\n%s", logs)
	}
}

// A serving process warns when PostgreSQL takes fewer connections than it
// alone may open (here a role limited to 20, against an API pool of 24),
// and says nothing when it takes enough.
func TestStartWarnsOfTooFewConnectionSlots(t *testing.T) {
	databaseURL, role, admin := ownedByARole(t)
	serve := func() string {
		cfg := apptest.Config(t, databaseURL)
		cfg.Roles = []string{"api"}
		return startLogs(t, cfg, true)
	}
	const warning = "PostgreSQL takes fewer connections than this process alone may open"
	if logs := serve(); strings.Contains(logs, warning) {
		t.Errorf("warned with slots enough:\n%s", logs)
	}
	if _, err := admin.Exec(context.Background(), "ALTER ROLE "+role+" CONNECTION LIMIT 20"); err != nil {
		t.Fatal(err)
	}
	logs := serve()
	for _, want := range []string{warning, "process_may_open=24", "server_takes=20", `limit="the role's CONNECTION LIMIT"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("the start does not say %q:\n%s", want, logs)
		}
	}
}

// startLogs opens the application on cfg, as a serving process (with its
// listeners) or as an operator command, closes it, and returns what it
// logged.
func startLogs(t *testing.T, cfg config.Config, serving bool) string {
	t.Helper()
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	var ls *app.Listeners
	if serving {
		cfg.HTTPAddr, cfg.OpsAddr = freeAddr(t), ""
		var err error
		if ls, err = app.Listen(cfg, log); err != nil {
			t.Fatal(err)
		}
		defer ls.Close()
	}
	a, err := app.OpenOn(context.Background(), cfg, log, ls)
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	return logs.String()
}
