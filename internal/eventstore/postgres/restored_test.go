package postgres

import (
	"context"
	"strings"
	"testing"

	"github.com/mailroom/mailroom/internal/eventstore"
	"github.com/mailroom/mailroom/internal/pgtest"
)

// A log copied logically from a cluster whose transaction ids run ahead
// of this one's would be invisible: the store refuses it and says how to
// move this cluster's ids past it.
func TestALogWrittenAheadOfThisClusterIsRefused(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewPool(t)
	if err := CheckWrittenHere(ctx, pool); err != nil {
		t.Fatalf("empty log: %v", err)
	}
	s := newStore(t, pool)
	if _, err := s.Append(ctx, "thing-1", eventstore.Any, testEvent("Happened")); err != nil {
		t.Fatal(err)
	}
	if err := CheckWrittenHere(ctx, pool); err != nil {
		t.Fatalf("a log written here: %v", err)
	}
	// What pg_restore onto a younger cluster leaves: ids of another epoch.
	if _, err := pool.Exec(ctx, `UPDATE events SET transaction_id = (2 * 4294967296::bigint + 1000)::text::xid8`); err != nil {
		t.Fatal(err)
	}
	err := CheckWrittenHere(ctx, pool)
	if err == nil || !strings.Contains(err.Error(), "pg_resetwal -e 3 ") {
		t.Fatalf("log ahead of the cluster: %v", err)
	}
}
