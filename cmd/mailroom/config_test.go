package main

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/mailroom/mailroom/internal/database"
	"github.com/mailroom/mailroom/internal/pgtest"
)

const testMasterKey = "5f1c0e7a9b2d4c6e8f0a1b3c5d7e9f11223344556677889900aabbccddeeff01"

// withPassword returns the database URL with a password added; the test
// server trusts local connections, so the password is never checked.
func withPassword(t *testing.T, db, password string) string {
	t.Helper()
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), password)
	return u.String()
}

// TestHelpShowsNoSecrets runs the binary's help with secrets in the
// environment, as an operator's shell or a container would have them.
func TestHelpShowsNoSecrets(t *testing.T) {
	bin, err := buildBinary()
	if err != nil {
		t.Fatal(err)
	}
	secrets := map[string]string{
		"MAILROOM_MASTER_KEY":   testMasterKey,
		"MAILROOM_DATABASE_URL": "postgres://mailroom:db-pass-4471@db.internal:5432/mailroom",
		"MAILROOM_SMTP_URL":     "smtps://relay-user:smtp-pass-9313@relay.internal:465",
		"MAILROOM_EVENTSTORE":   "esdb://admin:esdb-pass-2208@kurrentdb:2113?tls=true",
	}
	env := os.Environ()
	for k, v := range secrets {
		env = append(env, k+"="+v)
	}
	for _, args := range [][]string{{"--help"}, {"serve", "--help"}, {"accounts", "create", "--help"}, {"help", "serve"}} {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("mailroom %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		text := string(out)
		for _, leak := range []string{testMasterKey, "db-pass-4471", "smtp-pass-9313", "esdb-pass-2208", "db.internal", "relay.internal"} {
			if strings.Contains(text, leak) {
				t.Errorf("mailroom %s prints %q from the environment:\n%s", strings.Join(args, " "), leak, text)
			}
		}
		// The help still lists the settings, with their variables and the
		// built-in defaults.
		for _, want := range []string{"--master-key", "[MAILROOM_MASTER_KEY]", "visible to every user", `(default "postgres://postgres@127.0.0.1:5432/mailroom?sslmode=disable")`} {
			if !strings.Contains(text, want) {
				t.Errorf("mailroom %s does not show %q:\n%s", strings.Join(args, " "), want, text)
			}
		}
	}
}

// TestSettingsFromEnvironment checks that the variables still take effect
// when no flag is given, and that a flag given on the command line wins.
func TestSettingsFromEnvironment(t *testing.T) {
	db := pgtest.NewURL(t)
	names := func() []string {
		t.Helper()
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		rows, _ := conn.Query(ctx, "SELECT name FROM accounts ORDER BY name")
		got, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return got
	}

	// Production refuses to start without a master key: given through the
	// environment, it is applied.
	t.Setenv("MAILROOM_DATA_DIR", t.TempDir())
	t.Setenv("MAILROOM_ENV", "production")
	t.Setenv("MAILROOM_DATABASE_URL", withPassword(t, db, "env-pass"))
	t.Setenv("MAILROOM_MASTER_KEY", "")
	if _, _, err := run(t, "accounts", "create", "--name", "Without key"); err == nil || !strings.Contains(err.Error(), "(MAILROOM_MASTER_KEY): required in production") {
		t.Fatalf("production without a master key: %v", err)
	}
	t.Setenv("MAILROOM_MASTER_KEY", testMasterKey)
	// The development-only egress settings are refused in production.
	for name, value := range map[string]string{"MAILROOM_EGRESS_RESOLVER": "127.0.0.1:5300", "MAILROOM_EGRESS_ALLOW_CIDRS": "127.0.0.0/8", "MAILROOM_WEBHOOK_ALLOW_HTTP": "true"} {
		t.Setenv(name, value)
		if _, _, err := run(t, "accounts", "create", "--name", "Dev egress"); err == nil || !strings.Contains(err.Error(), "development only") {
			t.Fatalf("production with %s: %v", name, err)
		}
		t.Setenv(name, "")
	}
	if _, _, err := run(t, "accounts", "create", "--name", "From env", "--json"); err != nil {
		t.Fatalf("accounts create with the environment's settings: %v", err)
	}

	// A flag wins over its variable: the variable names a server where
	// nothing listens.
	t.Setenv("MAILROOM_DATABASE_URL", "postgres://postgres:env-pass@127.0.0.1:9/nothing?connect_timeout=2")
	if _, _, err := run(t, "accounts", "create", "--name", "From flag", "--database-url", db); err != nil {
		t.Fatalf("accounts create with --database-url over the variable: %v", err)
	}
	if got := names(); strings.Join(got, ",") != "From env,From flag" {
		t.Errorf("accounts in the database: %q", got)
	}

	// An empty variable leaves the default in place, whatever its type.
	t.Setenv("MAILROOM_DATABASE_URL", db)
	t.Setenv("MAILROOM_BOOTSTRAP", "")
	t.Setenv("MAILROOM_RATE_LIMIT", "")
	t.Setenv("MAILROOM_REGION", "")
	if _, _, err := run(t, "accounts", "create", "--name", "Empty vars"); err != nil {
		t.Fatalf("accounts create with empty variables: %v", err)
	}

	// A variable that does not parse is reported by name.
	t.Setenv("MAILROOM_DATABASE_URL", db)
	t.Setenv("MAILROOM_RATE_LIMIT", "fast")
	if _, _, err := run(t, "accounts", "create", "--name", "Bad rate"); err == nil || !strings.Contains(err.Error(), "MAILROOM_RATE_LIMIT") {
		t.Fatalf("unparsable MAILROOM_RATE_LIMIT: %v", err)
	}
	// The flag given on the command line replaces the bad variable.
	if _, _, err := run(t, "accounts", "create", "--name", "Good rate", "--rate-limit", "5"); err != nil {
		t.Fatalf("--rate-limit over an unparsable variable: %v", err)
	}
	t.Setenv("MAILROOM_RATE_LIMIT", "")
	// Values a setting does not take stop the command too, rather than
	// falling back to a default or failing at first use.
	for _, bad := range []struct{ name, value string }{
		{"MAILROOM_LOG_LEVEL", "verbose"},
		{"MAILROOM_LOG_FORMAT", "jsn"},
		{"MAILROOM_CLAMD_ADDR", "nonsense"},
		{"MAILROOM_CLAMD_ADDR", "127.0.0.1:331O"},
		{"MAILROOM_CLAMD_ADDR", "clamav:70000"},
		{"MAILROOM_CLAMD_ADDR", "tcp://h:1/x"},
		{"MAILROOM_CLAMD_ADDR", "unix:///"},
	} {
		t.Setenv(bad.name, bad.value)
		if _, _, err := run(t, "accounts", "create", "--name", "Bad "+bad.name); err == nil || !strings.Contains(err.Error(), bad.name) {
			t.Fatalf("%s=%s: %v", bad.name, bad.value, err)
		}
		t.Setenv(bad.name, "")
	}
	for _, addr := range []string{"127.0.0.1:3310", "tcp://clamav:3310", "unix:/run/clamav/clamd.ctl", "unix:///run/clamd.sock"} {
		t.Setenv("MAILROOM_CLAMD_ADDR", addr)
		if _, _, err := run(t, "accounts", "create", "--name", "Clamd "+addr); err != nil {
			t.Fatalf("MAILROOM_CLAMD_ADDR=%s: %v", addr, err)
		}
	}
}

// TestErrorsHideURLPasswords checks that connection strings that do not
// parse are reported without their passwords, even in part.
func TestErrorsHideURLPasswords(t *testing.T) {
	db := pgtest.NewURL(t)
	t.Setenv("MAILROOM_DATA_DIR", t.TempDir())
	for _, c := range []struct{ name, db, eventstore, secret string }{
		{"bad database port", "postgres://postgres:db-leak-1@127.0.0.1:port/x", "", "db-leak-1"},
		{"bad database host", "postgres://postgres:db-leak-2@[::1/x", "", "db-leak-2"},
		{"bad esdb host", db, "esdb://admin:esdb-leak-1@[::1:2113", "esdb-leak-1"},
		{"unknown event store scheme", db, "edsb://admin:esdb-leak-2@kurrentdb:2113", "esdb-leak-2"},
		{"event store without scheme", db, "admin:esdb-leak-3@kurrentdb:2113", "esdb-leak-3"},
		// A "/", "?" or "#" not percent-encoded ends the host part early,
		// and the password's rest would be read (and quoted) as port, path
		// or database name.
		{"slash in database password", "postgres://postgres:12345/db-leak-3@127.0.0.1:5432/x", "", "db-leak-3"},
		{"slash in esdb password", db, "esdb://admin:esdb-leak-4/rest@kurrentdb:2113", "esdb-leak-4"},
		{"slash after digits in esdb password", db, "esdb://admin:12345/esdb-leak-5@kurrentdb:2113", "esdb-leak-5"},
		{"question mark in esdb password", db, "esdb://admin:12345?esdb-leak-6=1@kurrentdb:2113", "esdb-leak-6"},
		{"slash in smtp password", db, "smtp://AKIAEXAMPLE:smtp-leak-1/rest+x@email-smtp.us-east-1.amazonaws.com:587", "smtp-leak-1"},
		{"question mark in smtp password", db, "smtp://user:12345?smtp-leak-2=1@relay.example", "smtp-leak-2"},
		{"hash in smtp password", db, "smtp://user:smtp-leak-3#rest@relay.example", "smtp-leak-3"},
		{"bad escape in smtp password", db, "smtp://user:pw%zz@relay.example", "%zz"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("MAILROOM_DATABASE_URL", c.db)
			if strings.HasPrefix(c.eventstore, "smtp") {
				t.Setenv("MAILROOM_PROVIDER", "smtp")
				t.Setenv("MAILROOM_SMTP_URL", c.eventstore)
				c.eventstore = ""
			}
			t.Setenv("MAILROOM_EVENTSTORE", c.eventstore)
			_, stderr, err := run(t, "projections", "status")
			if err == nil {
				t.Fatal("a bad connection string was accepted")
			}
			if strings.Contains(err.Error(), c.secret) || strings.Contains(stderr, c.secret) {
				t.Errorf("the error shows the password: %v\n%s", err, stderr)
			}
			if !strings.HasPrefix(err.Error(), "database-url (MAILROOM_DATABASE_URL): ") && !strings.HasPrefix(err.Error(), "eventstore (MAILROOM_EVENTSTORE): ") &&
				!strings.HasPrefix(err.Error(), "smtp-url (MAILROOM_SMTP_URL): ") {
				t.Errorf("the error does not say which setting is wrong: %v", err)
			}
		})
	}
}

// A setting that cannot work stops a command before it connects to
// anything: the database it names is not created, nor a development key
// generated, and the error names the flag and its variable.
func TestSettingsThatCannotWorkStopBeforeConnecting(t *testing.T) {
	missing := func(t *testing.T) string {
		u, err := url.Parse(pgtest.ServerURL())
		if err != nil {
			t.Fatal(err)
		}
		u.Path = "/mailroom_test_unmade_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
		return u.String()
	}
	for _, c := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"short master key", map[string]string{"MAILROOM_MASTER_KEY": "1234"}, "master-key (MAILROOM_MASTER_KEY): "},
		{"master key not hex", map[string]string{"MAILROOM_MASTER_KEY": strings.Repeat("zz", 32)}, "master-key (MAILROOM_MASTER_KEY): "},
		{"previous master key", map[string]string{"MAILROOM_MASTER_KEY_PREVIOUS": "abc"}, "master-key-previous (MAILROOM_MASTER_KEY_PREVIOUS): "},
		{"production without a key", map[string]string{"MAILROOM_ENV": "production"}, "master-key (MAILROOM_MASTER_KEY): "},
		{"unknown provider", map[string]string{"MAILROOM_PROVIDER": "mailgun"}, "provider (MAILROOM_PROVIDER): "},
		{"smtp without a relay", map[string]string{"MAILROOM_PROVIDER": "smtp"}, "smtp-url (MAILROOM_SMTP_URL): "},
		{"smtp relay not smtp", map[string]string{"MAILROOM_PROVIDER": "smtp", "MAILROOM_SMTP_URL": "http://relay.example:25"}, "smtp-url (MAILROOM_SMTP_URL): "},
		{"unknown event store", map[string]string{"MAILROOM_EVENTSTORE": "mysql"}, "eventstore (MAILROOM_EVENTSTORE): "},
		{"event store that does not parse", map[string]string{"MAILROOM_EVENTSTORE": "esdb://admin:pw@[::1:2113"}, "eventstore (MAILROOM_EVENTSTORE): "},
		{"database url that does not parse", map[string]string{"MAILROOM_DATABASE_URL": "postgres://postgres@127.0.0.1:port/x"}, "database-url (MAILROOM_DATABASE_URL): "},
		{"variable that does not parse", map[string]string{"MAILROOM_RATE_BURST": "abc"}, `rate-burst (MAILROOM_RATE_BURST): "abc" is not a whole number`},
	} {
		t.Run(c.name, func(t *testing.T) {
			db := missing(t)
			dataDir := t.TempDir()
			t.Setenv("MAILROOM_DATABASE_URL", db)
			t.Setenv("MAILROOM_DATA_DIR", dataDir)
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			// serve would go on to connect, create and migrate; migrate
			// needs only the database, and still refuses what cannot work.
			for _, args := range [][]string{{"serve", "--http-addr", "127.0.0.1:0", "--ops-addr", ""}, {"migrate"}, {"accounts", "create", "--name", "Acme"}, {"events", "verify"}} {
				_, _, err := run(t, args...)
				if err == nil || !strings.HasPrefix(err.Error(), c.want) {
					t.Errorf("%v: %v, want an error starting %q", args, err, c.want)
				}
			}
			if exists, err := database.Exists(context.Background(), db); err == nil && exists {
				t.Error("the database was created")
				drop(t, db)
			}
			if entries, _ := os.ReadDir(dataDir); len(entries) > 0 {
				t.Errorf("the data dir holds %v", entries)
			}
		})
	}
}

// drop removes a database a failed test made.
func drop(t *testing.T, db string) {
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	admin, err := pgx.Connect(context.Background(), pgtest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		t.Error(err)
	}
}

// migrate names the MAILROOM_* variables that name no setting, as the
// commands that open the application do: run alone, as a deployment's
// migration job is, it would otherwise take a misspelt variable silently.
func TestMigrateNamesVariablesThatNameNoSetting(t *testing.T) {
	t.Setenv("MAILROOM_DATABASE_URL", pgtest.NewURL(t))
	t.Setenv("MAILROOM_DATA_DIR", t.TempDir())
	t.Setenv("MAILROOM_RATE_LIMT", "5")
	_, stderr, err := run(t, "migrate")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(stderr, "level=WARN") || !strings.Contains(stderr, "variables=MAILROOM_RATE_LIMT") ||
		!strings.Contains(stderr, "did_you_mean=\"MAILROOM_RATE_LIMT -> MAILROOM_RATE_LIMIT\"") {
		t.Errorf("migrate does not name MAILROOM_RATE_LIMT:\n%s", stderr)
	}
}
