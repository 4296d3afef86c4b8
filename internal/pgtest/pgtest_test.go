package pgtest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/mailroom/mailroom/internal/pgtest"
)

// A test's database commits without waiting for the disk.
func TestATestsDatabaseDoesNotWaitForTheDisk(t *testing.T) {
	if got := synchronousCommit(t, pgtest.NewURL(t)); got != "off" {
		t.Errorf("synchronous_commit %q in a test's database, want off", got)
	}
}

func synchronousCommit(t testing.TB, url string) string {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var v string
	if err := conn.QueryRow(context.Background(), "SHOW synchronous_commit").Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}
