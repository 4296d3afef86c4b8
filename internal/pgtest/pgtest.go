// Package pgtest gives each test its own PostgreSQL database, created with a
// unique name and dropped when the test ends, so tests never share state.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/mailroom/mailroom/internal/database"
)

// ServerURL is the server tests use; MAILROOM_TEST_DATABASE_URL overrides it.
func ServerURL() string {
	if u := os.Getenv("MAILROOM_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// NewURL creates a fresh, empty database and returns its connection URL. The
// database is dropped when t ends.
func NewURL(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(ServerURL())
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	b := make([]byte, 6)
	rand.Read(b)
	name := "mailroom_test_" + hex.EncodeToString(b)
	admin, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	// A test's commits need not wait for the disk: tests check behaviour,
	// not what a crash of the database server keeps, and on slow storage
	// waiting for each commit's flush multiplies their time. Benchmarks
	// keep the server's setting, to measure what production does.
	if _, bench := t.(*testing.B); !bench {
		if _, err := admin.Exec(ctx, "ALTER DATABASE "+name+" SET synchronous_commit = off"); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
	}
	t.Cleanup(func() {
		c, err := pgx.ConnectConfig(context.Background(), cfg)
		if err != nil {
			t.Logf("pgtest: drop %s: %v", name, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("pgtest: drop %s: %v", name, err)
		}
	})
	u, err := url.Parse(ServerURL())
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}

// NewPool creates a fresh database, applies Mailroom's migrations and returns
// a pool on it, closed when t ends.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	url := NewURL(t)
	ctx := context.Background()
	pool, err := database.Open(ctx, url)
	if err != nil {
		t.Fatalf("pgtest: open: %v", err)
	}
	t.Cleanup(pool.Close)
	if err := database.Migrate(ctx, pool); err != nil {
		t.Fatalf("pgtest: migrate: %v", err)
	}
	return pool
}

// TransactionElsewhere opens a transaction in a database of its own on the
// same server and gives it a transaction id, as another application's long
// batch job holds one, until t ends. stillOpen reports whether it is still
// open, for a test to show it lasted throughout.
func TransactionElsewhere(t testing.TB) (stillOpen func() bool) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, NewURL(t))
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { conn.Close(ctx) })
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_current_xact_id()`); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return func() bool {
		var open bool
		err := tx.QueryRow(ctx, `SELECT pg_current_xact_id_if_assigned() IS NOT NULL`).Scan(&open)
		return err == nil && open
	}
}
