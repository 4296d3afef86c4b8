package projections_test

import (
	"context"
	"testing"

	"github.com/mailroom/mailroom/projections"
)

// Without pg_trgm the emails read model is built all the same, without
// the index of the recipients' trigrams.
func TestEmailsBuiltWithoutPgTrgm(t *testing.T) {
	ctx := context.Background()
	pool, store := setup(t)
	if _, err := pool.Exec(ctx, "DROP EXTENSION pg_trgm"); err != nil {
		t.Fatal(err)
	}
	if err := projections.NewRunner(pool, store, nil, quiet, projections.Emails{}).Prepare(ctx); err != nil { // a rebuild
		t.Fatal(err)
	}
	var tables, indexed bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass('emails') IS NOT NULL, to_regclass('emails_to_trgm_idx') IS NOT NULL").Scan(&tables, &indexed); err != nil || !tables || indexed {
		t.Fatalf("emails %v, trigram index %v (%v)", tables, indexed, err)
	}
}
