package app

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/mailroom/mailroom/internal/eventstore/esdb"
	"github.com/mailroom/mailroom/internal/nettest"
	"github.com/mailroom/mailroom/internal/pgtest"
)

// Readiness says why PostgreSQL did not answer without its user, database,
// host or port: the detail may be served to anyone.
func TestWhyUnreachableNamesNoConnectionDetails(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	server, err := url.Parse(pgtest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	missing := *server
	missing.Path = "/secretdb_that_is_not_there"
	for dsn, want := range map[string]string{
		// Nothing listens on port 1.
		"postgres://secretuser@127.0.0.1:1/secretdb?connect_timeout=5": "connect: connection refused",
		// The server answers, and refuses a database it does not have.
		missing.String(): "the server refused the connection (SQLSTATE 3D000)",
	} {
		conn, err := pgx.Connect(ctx, dsn)
		if err == nil {
			conn.Close(ctx)
			t.Fatalf("%s: connected", dsn)
		}
		got := whyUnreachable(err)
		if got != want {
			t.Errorf("%s: %q, want %q (from %v)", dsn, got, want, err)
		}
		for _, secret := range []string{"secret", "127.0.0.1", server.Host} {
			if strings.Contains(got, secret) {
				t.Errorf("%q names %s", got, secret)
			}
		}
	}
}

// A connection the server ended (a restart, an administrator) is named as
// such, not as a connection refused.
func TestWhyUnreachableNamesAConnectionTheServerEnded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgtest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	admin, err := pgx.Connect(ctx, pgtest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend($1)", int64(conn.PgConn().PID())); err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, "SELECT 1")
	if err == nil {
		t.Fatal("a query on an ended connection succeeded")
	}
	if got, want := whyUnreachable(err), "the server ended the connection: shutting down, or an administrator's command (SQLSTATE 57P01)"; got != want {
		t.Errorf("%q, want %q (from %v)", got, want, err)
	}
}

// An EventStoreDB that does not answer the readiness check in time is
// unreachable, not slow: PostgreSQL answering says nothing of its own
// servers.
func TestReadinessNamesASilentEventStoreDBUnreachable(t *testing.T) {
	store, err := esdb.New("esdb://" + nettest.Silent(t) + "?tls=false")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	a := &App{Pool: pgtest.NewPool(t), Store: store, Ledger: store}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = a.checkStores(ctx)
	if err == nil || err.Error() != "event store unreachable: no answer in time" {
		t.Fatalf("readiness with a silent EventStoreDB: %v", err)
	}
}

// A statement cancelled by a timeout, or refused by a read-only server, is
// named as such, not as a connection refused.
func TestWhyUnreachableNamesWhatTheServerRefused(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	conn.Exec(ctx, "SET statement_timeout = 1")
	_, timedOut := conn.Exec(ctx, "SELECT pg_sleep(1)")
	conn.Exec(ctx, "SET statement_timeout = 0")
	conn.Exec(ctx, "SET default_transaction_read_only = on")
	_, readOnly := conn.Exec(ctx, "CREATE TEMPORARY SEQUENCE s")
	for err, want := range map[error]string{
		timedOut: "a statement was cancelled by a timeout (SQLSTATE 57014: statement_timeout, say)",
		readOnly: "the server takes no writes: read-only (SQLSTATE 25006)",
	} {
		if got := whyUnreachable(err); got != want {
			t.Errorf("%q, want %q (from %v)", got, want, err)
		}
	}
}
