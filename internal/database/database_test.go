package database_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	neturl "net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/mailroom/mailroom/internal/database"
	"github.com/mailroom/mailroom/internal/nettest"
	"github.com/mailroom/mailroom/internal/pgtest"
)

// A URL carrying pool settings opens (and creates) its database: the pool
// settings are not sent to the server.
func TestOpenWithPoolSettings(t *testing.T) {
	url := pgtest.NewURL(t) + "&pool_max_conns=5"
	pool, err := database.Open(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if got := pool.Config().MaxConns; got != 5 {
		t.Fatalf("MaxConns = %d, want 5", got)
	}
	if err := database.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
}

// A database migrated by a newer release is refused, so that an older
// binary never runs on a schema and a log it does not know.
func TestMigrateRefusesADatabaseOfANewerRelease(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t) // migrated to this release
	if _, err := pool.Exec(ctx, `INSERT INTO goose_db_version (version_id, is_applied) VALUES (9999, true)`); err != nil {
		t.Fatal(err)
	}
	err := database.Migrate(ctx, pool)
	if !errors.Is(err, database.ErrNewerRelease) {
		t.Fatalf("Migrate = %v, want ErrNewerRelease", err)
	}
	t.Log(err)
}

// A database where pg_trgm cannot be created (here, by a role that may
// create tables but not extensions) is migrated all the same, with one
// warning saying what goes without it.
func TestMigratesWhereNoPgTrgmCanBeCreated(t *testing.T) {
	ctx := context.Background()
	b := make([]byte, 6)
	rand.Read(b)
	role, password := "mailroom_test_role_"+hex.EncodeToString(b), hex.EncodeToString(b)
	admin, err := pgx.Connect(ctx, pgtest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", role, password)); err != nil {
		t.Fatal(err)
	}
	// Registered before the database, so dropped after it.
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), pgtest.ServerURL())
		if err != nil {
			t.Logf("drop role %s: %v", role, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), "DROP ROLE IF EXISTS "+role); err != nil {
			t.Logf("drop role %s: %v", role, err)
		}
	})
	url := pgtest.NewURL(t)
	owner, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close(ctx)
	// It may create tables, not extensions (CREATE on the database).
	if _, err := owner.Exec(ctx, "GRANT CREATE ON SCHEMA public TO "+role); err != nil {
		t.Fatal(err)
	}
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	u.User = neturl.UserPassword(role, password)

	var logged bytes.Buffer
	defer slog.SetDefault(slog.Default())
	slog.SetDefault(slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelWarn})))
	pool, err := database.Open(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := database.Migrate(ctx, pool); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if warnings := strings.Count(logged.String(), "level=WARN"); warnings != 1 || !strings.Contains(logged.String(), "pg_trgm") {
		t.Fatalf("%d warnings, want one about pg_trgm:\n%s", warnings, logged.String())
	}
	t.Log(logged.String())
	var created bool
	if err := pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm')").Scan(&created); err != nil || created {
		t.Fatalf("pg_trgm created: %v (%v)", created, err)
	}
}

// Processes starting together on a database that does not exist yet (a
// first install, where every pod and the migrate Job start at once) all
// find it created: the ones that lose the race to create it take it as
// created by another, rather than stop with a unique-key violation.
func TestProcessesStartingTogetherAllFindTheDatabaseCreated(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewURL(t) // dropped at the end, whoever created it
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimPrefix(u.Path, "/")
	admin, err := pgx.Connect(ctx, pgtest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	for round := range 5 {
		if _, err := admin.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Fatal(err)
		}
		start := make(chan struct{})
		errs := make(chan error, 6)
		for range cap(errs) {
			go func() {
				<-start
				errs <- database.EnsureExists(ctx, url)
			}()
		}
		close(start)
		for range cap(errs) {
			if err := <-errs; err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
}

// A server that takes the connection and never answers (an address that
// now drops packets, after a failover) is given up on by the connection
// itself, not only when the caller's patience ends; a URL's own
// connect_timeout is kept.
func TestConnectingToAServerThatNeverAnswersGivesUp(t *testing.T) {
	base := "postgres://postgres@" + nettest.Silent(t) + "/mailroom?sslmode=disable"
	for _, url := range []string{base, base + "&connect_timeout=1"} {
		// The caller's limit only keeps a failing test from hanging.
		ctx, cancel := context.WithTimeout(context.Background(), 2*database.ConnectTimeout)
		_, err := database.Open(ctx, url)
		if err == nil || ctx.Err() != nil {
			t.Errorf("%s: Open = %v, with the caller's own limit %v", url, err, ctx.Err())
		}
		cancel()
	}
}

// A starting process waits for a server that is not up yet, and stops at
// once on what waiting would not cure: a TLS setting the server cannot
// meet, or statements the server refuses.
func TestDownIsWhatAStartWaitsFor(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewURL(t)
	connectErr := func(url string) error {
		t.Helper()
		c, err := pgx.Connect(ctx, url)
		if err == nil {
			c.Close(ctx)
			t.Fatalf("%s connected", url)
		}
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	refused := connectErr("postgres://postgres@" + closed + "/mailroom?sslmode=disable")

	// A service that is no PostgreSQL with TLS: it reads the request for
	// TLS and hangs up.
	notTLS, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer notTLS.Close()
	go func() {
		for {
			c, err := notTLS.Accept()
			if err != nil {
				return
			}
			io.ReadFull(c, make([]byte, 8))
			c.Close()
		}
	}()
	hungUp := connectErr("postgres://postgres@" + notTLS.Addr().String() + "/mailroom?sslmode=require")

	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var timedOut, readOnly error
	if _, err := c.Exec(ctx, "SET statement_timeout = 1"); err != nil {
		t.Fatal(err)
	}
	_, timedOut = c.Exec(ctx, "SELECT pg_sleep(1)")
	if _, err := c.Exec(ctx, "SET statement_timeout = 0; SET default_transaction_read_only = on"); err != nil {
		t.Fatal(err)
	}
	_, readOnly = c.Exec(ctx, "CREATE TABLE t (x int)")

	ended, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer ended.Close(ctx)
	if _, err := c.Exec(ctx, "SELECT pg_terminate_backend($1)", ended.PgConn().PID()); err != nil {
		t.Fatal(err)
	}
	_, endedFirst := ended.Exec(ctx, "SELECT 1") // the server's message
	_, endedThen := ended.Exec(ctx, "SELECT 1")  // the connection, closed

	for _, tc := range []struct {
		name string
		err  error
		down bool
	}{
		{"connection refused", refused, true},
		{"connection ended by the server", endedFirst, true},
		{"connection closed", endedThen, true},
		{"TLS refused by hanging up", hungUp, false},
		// The server has no certificate for this name and no CA trusts it,
		// or no TLS at all: either way a setting to change, not a wait.
		{"TLS verification", connectErr(url + "&sslmode=verify-full&sslrootcert=system"), false},
		{"statement timeout", timedOut, false},
		{"read-only", readOnly, false},
	} {
		if tc.err == nil {
			t.Fatalf("%s: no error", tc.name)
		}
		t.Logf("%s: %v", tc.name, tc.err)
		if got := database.Down(tc.err); got != tc.down {
			t.Errorf("%s: Down = %v, want %v (%v)", tc.name, got, tc.down, tc.err)
		}
	}
}
