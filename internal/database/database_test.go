package database_test

import (
	"context"
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
