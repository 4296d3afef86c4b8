package database_test

import (
	"context"
	"errors"
	"testing"

	"github.com/mailroom/mailroom/internal/database"
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
